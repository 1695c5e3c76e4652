"""A table or figure whose input is missing fails with a message naming the stage that makes it."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from adaspark.analysis.figures import FIGURES
from adaspark.analysis.records import BLOCKS, MissingInputError, Options, Records
from adaspark.analysis.tables import TABLES
from adaspark.stages import figures as figures_stage
from adaspark.stages import tables as tables_stage

EXPECTED = {
    "table1": "survey", "table2": "run", "table3": "run", "table4": "run", "table5": "run",
    "table6": "run", "table7": "instrumented", "table8": "run", "table9": "run",
    "table10": "run", "fig3": "survey", "fig4": "run", "fig5": "fig5", "fig6": "run",
    "fig7": "instrumented", "fig8": "instrumented", "fig9": "instrumented",
    "fig10": "instrumented",
}


@pytest.mark.parametrize("name", [*TABLES, *FIGURES])
def test_empty_run_directory_names_the_stage(name: str, tmp_path: Path, fast: Options) -> None:
    spec = TABLES.get(name) or FIGURES[name]
    with pytest.raises(MissingInputError) as err:
        spec.build(Records(tmp_path), fast)
    stage = EXPECTED[name]
    assert err.value.stage == stage
    assert f"`{stage}` stage" in str(err.value) and f"dvc repro {stage}" in str(err.value)


def test_a_run_without_instrumented_logs_fails_table7_only(paper_runs: Path, tmp_path: Path,
                                                           fast: Options) -> None:
    runs = tmp_path / "runs"
    shutil.copytree(paper_runs, runs)
    shutil.rmtree(runs / "extra" / "instrumented")
    t4 = TABLES["table4"].build(Records(runs), fast)
    assert list(t4["drafter"]) == [b.kind for b in BLOCKS]  # a row per drafter block
    with pytest.raises(MissingInputError, match="instrumented"):
        TABLES["table7"].build(Records(runs), fast)


def test_the_stages_write_what_they_can_and_exit_1_naming_the_stage(
        paper_runs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        make_params: Callable[..., Path]) -> None:
    runs = tmp_path / "runs"
    shutil.copytree(paper_runs, runs)
    shutil.rmtree(runs / "survey")
    params = make_params(tmp_path / "params.yaml", "paper")
    out = tmp_path / "tables"
    rc = tables_stage.main(["--params", str(params), "--runs", str(runs), "--out", str(out),
                            "--only", "table1,table8"])
    assert rc == 1
    assert "`survey` stage" in capsys.readouterr().err
    assert (out / "table8.md").is_file() and not (out / "table1.md").exists()
    rc = figures_stage.main(["--params", str(params), "--runs", str(runs), "--out",
                             str(tmp_path / "figures"), "--only", "fig3"])
    assert rc == 1
    assert "dvc repro survey" in capsys.readouterr().err


@pytest.mark.parametrize("name,data", [("run.json", b"{not json"),
                                       ("replies.parquet", b"PAR1 damaged")])
def test_a_damaged_run_file_is_named(tmp_path: Path, name: str, data: bytes) -> None:
    from adaspark.analysis.records import CorruptInputError, read_replies, read_run_meta

    d = tmp_path / "arms" / "ar"
    d.mkdir(parents=True)
    (d / name).write_bytes(data)
    with pytest.raises(CorruptInputError) as e:
        read_run_meta(d) if name == "run.json" else read_replies(d)
    assert str(d / name) in str(e.value) and "Delete it" in str(e.value)
