"""The tables, figures and report read only the runs the params name (issue 10, item 1).

Run directories persist between pipeline runs, so after the default ``dvc repro`` a smoke run
with the tiny model finds the default run's arms (embedded target, ``short``, cap 128) beside its
own. The scenario here: a synthetic default-preset run directory restamped as the embedded
target's runs, then the smoke preset's arms restamped as the tiny model's runs on ``smoke`` at
cap 32; the stages get the smoke params. Only what the params name may be read, a preset that
did not run something shows a dash, and a directory the params name that holds another run is
refused, naming it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from omegaconf import OmegaConf
from synthetic_runs import make_synthetic_runs

from adaspark.analysis.tables.render import DASH
from adaspark.model_files import load_manifest
from adaspark.stages import figures as figures_stage
from adaspark.stages import report as report_stage
from adaspark.stages import tables as tables_stage

EMBEDDED = ("qwen2.5-coder-1.5b-instruct-q4_k_m", "qwen2.5-coder-0.5b-instruct-q4_k_m")
TINY = ("smollm2-135m-instruct-q4_1", "smollm2-135m-instruct-q4_1-first22")
SMOKE_ARMS = ("llamacpp-chain", "adaspark")
AR_ARMS = ("llamacpp-ar", "ar")


def restamp(run_dir: Path, models: tuple[str, str], subset: str, cap: int,
            preset: str | None) -> None:
    """Rewrite ``run.json``'s fingerprint as a run of the manifest's ``models`` (target,
    drafter; the drafter for speculative arms only, as the runner records it) on ``subset`` at
    ``cap`` would have it; ``preset`` None leaves it out (runs made before it was recorded)."""
    manifest = load_manifest()
    meta = json.loads((run_dir / "run.json").read_text())
    fp = meta["fingerprint"]
    target, drafter = (manifest[k] for k in models)
    fp["models"] = {"target": {"file": target.file, "sha256": target.sha256, "n_ctx": 8192}}
    if run_dir.name.split("@")[0] not in AR_ARMS:
        fp["models"]["drafter"] = {"file": drafter.file, "sha256": drafter.sha256}
    fp["run"] = {"subset": subset, "cap": cap, "protocol_cap": 8192}
    if preset is not None:
        fp["run"]["preset"] = preset
    (run_dir / "run.json").write_text(json.dumps(meta, indent=1) + "\n")


def smoke_params(path: Path, **sections: Any) -> Path:
    """The smoke preset's params with the tiny model (``dvc exp run -S preset=smoke -S
    target=tiny -S drafter=tiny-truncated``), as far as the reporting stages read them."""
    params: dict[str, Any] = {
        "target": {"name": "smollm2-135m", "model": TINY[0], "path": None},
        "drafter": {"name": "smollm2-135m-first22", "model": TINY[1], "path": None},
        "preset": {"name": "smoke"},
        "run_arms": list(SMOKE_ARMS),
        "run": {"subset": "smoke", "cap": 32},
        "extra_runs": {"repeat": {"arms": []}, "heldout": {"arms": [], "subset": "heldout"},
                       "short": {"arms": [], "subset": "short"},
                       "instrumented": {"arms": ["adaspark"], "subset": "smoke"}},
        "tables": {"seed": 11, "n_resamples": 200, "context_split_tokens": 2048},
    } | sections
    path.write_text(OmegaConf.to_yaml(OmegaConf.create(params)))
    return path


@pytest.fixture(scope="module")
def mixed_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The default run's leftovers beside the smoke run's own directories."""
    runs = make_synthetic_runs(tmp_path_factory.mktemp("mixed") / "runs", preset="default")
    for d in [*(runs / "arms").iterdir(), *(runs / "extra" / "instrumented").iterdir()]:
        restamp(d, EMBEDDED, "short", 128, None)
    for arm in SMOKE_ARMS:
        restamp(runs / "arms" / arm, TINY, "smoke", 32, "smoke")
    restamp(runs / "extra" / "instrumented" / "adaspark", TINY, "smoke", 32, "smoke")
    return runs


def _stages(runs: Path, params: Path, out: Path) -> tuple[int, int, int]:
    common = ["--params", str(params), "--runs", str(runs)]
    tables, figures, paper = out / "paper" / "tables", out / "figures", out / "paper"
    return (
        tables_stage.main([*common, "--out", str(tables)]),
        figures_stage.main([*common, "--out", str(figures)]),
        report_stage.main([*common, "--tables", str(tables), "--figures", str(figures),
                           "--out", str(paper)]),
    )


def _section(md: str, heading: str) -> str:
    start = md.index(f"## {heading}")
    end = md.find("\n## ", start + 1)
    return md[start:end if end > 0 else None]


def test_the_report_reads_only_the_runs_the_params_name(mixed_runs: Path,
                                                        tmp_path: Path) -> None:
    codes = _stages(mixed_runs, smoke_params(tmp_path / "params.yaml"), tmp_path)
    assert codes == (0, 0, 0)
    md = (tmp_path / "paper" / "report.md").read_text()

    every = _section(md, "Every arm this preset ran")
    arms = [line.split("|")[1].strip() for line in every.splitlines()
            if line.startswith("|") and not line.startswith("|--")][1:]
    assert arms == sorted(SMOKE_ARMS), every

    runs_table = _section(md, "The run: machine, models, build, versions")
    listed = {line.split("|")[1].strip() for line in runs_table.splitlines()
              if line.startswith("| arms/") or line.startswith("| extra/")}
    assert listed == {"arms/adaspark", "arms/llamacpp-chain", "extra/instrumented/adaspark"}
    for stale in ("arms/chain3", "arms/ar", "arms/llamacpp-ar", "arms/adaspark-w1",
                  "extra/instrumented/costmodel"):
        assert stale in runs_table  # named as left out, not read

    index = {t["name"]: t for t in
             json.loads((tmp_path / "paper" / "tables" / "tables.json").read_text())["tables"]}
    (row,) = index["table4"]["rows"]  # the draft-model block only: no DSpark arm was named
    t4 = dict(zip(index["table4"]["columns"], row, strict=True))
    assert t4["drafter"] == "draft model"
    assert t4["baseline"] == "llama.cpp draft-model chain (draft-simple)"
    assert t4["imparo chain (tok/s)"] == DASH  # chain3: not in the smoke preset
    assert t4["llama.cpp / own AR"] == DASH and t4["AdaSpark / own AR"] == DASH
    assert t4["AdaSpark (tok/s)"] != DASH and t4["llama.cpp (tok/s)"] != DASH
    t6 = {row[1]: row[2:] for row in index["table6"]["rows"]}  # by arm: per-source cells
    assert set(t6["imparo draft-model chain (3-token chain)"]) == {DASH}, t6
    assert DASH not in t6["AdaSpark (draft model) (+ acceptance model, n-gram)"], t6
    assert DASH not in t6["llama.cpp draft-model chain (draft-simple) (tok/s)"], t6


@pytest.mark.parametrize(("what", "stamp", "key"), [
    ("target", (EMBEDDED, "smoke", 32, "smoke"), "models.target.file"),
    ("subset", (TINY, "short", 32, "smoke"), "run.subset"),
    ("cap", (TINY, "smoke", 128, "smoke"), "run.cap"),
    ("preset", (TINY, "smoke", 32, "default"), "run.preset"),
])
def test_a_named_directory_holding_another_run_is_refused_naming_it(
        what: str, stamp: tuple[Any, ...], key: str, mixed_runs: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    runs = tmp_path / "runs"
    shutil.copytree(mixed_runs, runs)
    restamp(runs / "arms" / "adaspark", *stamp)
    codes = _stages(runs, smoke_params(tmp_path / "params.yaml"), tmp_path)
    err = capsys.readouterr().err
    assert codes == (1, 1, 1), err
    assert str(runs / "arms" / "adaspark") in err and key in err, err
    assert "dvc repro --force --single-item run@adaspark" in err and "Traceback" not in err
    assert not (tmp_path / "paper" / "tables" / "tables.json").exists()


def test_a_stale_extra_group_directory_is_refused_and_old_runs_lack_a_preset(
        mixed_runs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The instrumented group's subset is ``extra_runs.instrumented.subset``; a run.json
    without a preset (made before the fingerprint held one) is compared on the rest."""
    from adaspark.analysis.records import Records
    from adaspark.analysis.run_selection import StaleRunError, selection_from_params

    params = OmegaConf.to_container(OmegaConf.load(smoke_params(tmp_path / "p.yaml")))
    assert isinstance(params, dict)
    runs = tmp_path / "runs"
    shutil.copytree(mixed_runs, runs)
    restamp(runs / "arms" / "adaspark", TINY, "smoke", 32, None)
    assert len(Records(runs, selection=selection_from_params(params)).replies()) > 0
    restamp(runs / "extra" / "instrumented" / "adaspark", TINY, "short", 32, "smoke")
    with pytest.raises(StaleRunError, match=r"extra_runs\.instrumented\.subset") as e:
        Records(runs, selection=selection_from_params(params))
    assert e.value.run_dir == runs / "extra" / "instrumented" / "adaspark"
    assert e.value.stage == "instrumented@adaspark"
    assert "'short'" in str(e.value) and "'smoke'" in str(e.value)


def test_an_extra_groups_own_cap_is_the_one_its_runs_must_have(
        mixed_runs: Path, tmp_path: Path) -> None:
    """``extra_runs.instrumented.cap`` (the default preset's 64 beside run.cap 128): its runs
    are checked against it, the run_arms' against run.cap, and a mismatch names the key."""
    from adaspark.analysis.records import Records
    from adaspark.analysis.run_selection import StaleRunError, selection_from_params

    params = OmegaConf.to_container(OmegaConf.load(smoke_params(tmp_path / "p.yaml")))
    assert isinstance(params, dict)
    params["extra_runs"]["instrumented"]["cap"] = 16
    runs = tmp_path / "runs"
    shutil.copytree(mixed_runs, runs)
    with pytest.raises(StaleRunError, match=r"extra_runs\.instrumented\.cap") as e:
        Records(runs, selection=selection_from_params(params))  # stamped 32, as run.cap
    assert e.value.run_dir == runs / "extra" / "instrumented" / "adaspark"
    restamp(runs / "extra" / "instrumented" / "adaspark", TINY, "smoke", 16, "smoke")
    assert len(Records(runs, selection=selection_from_params(params)).replies()) > 0
    restamp(runs / "arms" / "adaspark", TINY, "smoke", 16, "smoke")  # run_arms: run.cap
    with pytest.raises(StaleRunError, match=r"run\.cap") as e:
        Records(runs, selection=selection_from_params(params))
    assert e.value.run_dir == runs / "arms" / "adaspark"


def test_a_named_directory_without_a_readable_run_json_is_refused(
        mixed_runs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs = tmp_path / "runs"
    shutil.copytree(mixed_runs, runs)
    params = smoke_params(tmp_path / "params.yaml")
    (runs / "arms" / "llamacpp-chain" / "run.json").write_text('{"fingerprint": ')
    rc = tables_stage.main(["--params", str(params), "--runs", str(runs), "--out",
                            str(tmp_path / "tables")])
    err = capsys.readouterr().err
    assert rc == 1 and str(runs / "arms" / "llamacpp-chain") in err and "unreadable" in err, err
    (runs / "arms" / "llamacpp-chain" / "run.json").unlink()
    rc = tables_stage.main(["--params", str(params), "--runs", str(runs), "--out",
                            str(tmp_path / "tables")])
    err = capsys.readouterr().err
    assert rc == 1 and "origin is unknown" in err and "Traceback" not in err, err
