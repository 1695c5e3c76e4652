"""``dvc.yaml``'s deps name real paths, and every stage that decodes depends on every decoding
module a run's fingerprint hashes (so DVC reruns a run exactly when its fingerprint changes)."""

from __future__ import annotations

from pathlib import Path

import yaml

from adaspark import provenance

REPO = Path(__file__).resolve().parents[1]
RUN_STAGES = ("run", "repeat", "heldout", "short", "instrumented")


def _stages() -> dict:
    return yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]


def _outs() -> list[str]:
    """Every stage's outputs, with a matrix item's ``${item...}`` part cut off."""
    outs = []
    for stage in _stages().values():
        for out in stage.get("outs", []):
            for o in out if isinstance(out, dict) else {out: None}:
                outs.append(str(o).split("${")[0].rstrip("/"))
    return outs


def test_every_dep_path_exists():
    outs = _outs()
    for name, stage in _stages().items():
        for dep in map(str, stage.get("deps", [])):
            made = any(o.startswith(dep) or dep.startswith(o) for o in outs)
            assert (REPO / dep).exists() or made, f"stage {name}: dep {dep} does not exist"


def test_run_stages_depend_on_every_decoding_module():
    package = REPO / "src" / "adaspark"
    modules = [f.relative_to(REPO).as_posix() for f in provenance.decoding_sources(package)]
    for name in RUN_STAGES:
        deps = [str(d) for d in _stages()[name]["deps"]]
        missing = [m for m in modules
                   if not any(m == d or m.startswith(d.rstrip("/") + "/") for d in deps)]
        assert not missing, f"stage {name} does not list {missing} in its deps"


def _stage_module(stage: dict) -> str | None:
    """The ``adaspark.stages.X`` module a stage's command runs, or None."""
    words = str(stage.get("cmd", "")).split()
    return words[words.index("-m") + 1] if "-m" in words else None


def _covered(path: str, deps: list[str]) -> bool:
    return any(path == d or path.startswith(d.rstrip("/") + "/") for d in deps)


#: Modules that only compose and check the params (DVC tracks the params themselves).
PLUMBING = {"adaspark", "adaspark.stages", "adaspark.config", "adaspark.config_check",
            "adaspark.checks", "adaspark.schema", "adaspark.paths",
            "adaspark.overrides"}


def _direct_imports(module: str) -> set[str]:
    """The package modules ``module`` imports itself (at any depth of its code)."""
    import ast

    src = REPO / "src"
    text = (src / Path(*module.split("."))).with_suffix(".py").read_text()
    found: set[str] = set()
    for node in ast.walk(ast.parse(text)):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
        for n in names:
            base = src / Path(*n.split("."))
            if n.startswith("adaspark") and (base.with_suffix(".py").is_file()
                                             or (base / "__init__.py").is_file()):
                found.add(n)
    return found - PLUMBING


def _file_of(module: str) -> str:
    base = Path("src", *module.split("."))
    return (base / "__init__.py" if (REPO / base).is_dir() else base.with_suffix(".py")).as_posix()


def test_every_stage_lists_its_module_and_what_it_imports():
    """Each stage depends on the module its command runs and on every package module that
    module imports (so a moved or new module cannot fall out of a stage's deps unseen)."""
    for name, stage in _stages().items():
        module = _stage_module(stage)
        if module is None:
            continue
        deps = [str(d) for d in stage.get("deps", [])]
        assert _covered(_file_of(module), deps), f"stage {name}: {module} not in its deps"
        missing = sorted(_file_of(m) for m in _direct_imports(module)
                         if not _covered(_file_of(m), deps))
        assert not missing, f"stage {name} imports {missing}, which its deps do not list"
