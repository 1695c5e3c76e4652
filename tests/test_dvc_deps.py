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
