"""The report is generated from a synthetic run directory (issue 6)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from reporting_helpers import Built

from adaspark.analysis import paper_values
from adaspark.stages import report as report_stage


def test_report_from_synthetic_runs(built: Built) -> None:
    assert built.codes == (0, 0, 0)
    index = json.loads((built.tables / "tables.json").read_text())
    assert index["seed"] == 11 and index["n_resamples"] == 200
    assert [t["name"] for t in index["tables"]] == [f"table{i}" for i in range(1, 11)]
    md = (built.paper / "report.md").read_text()
    page = (built.paper / "report.html").read_text()
    for i in range(1, 11):
        assert f"### Table {i}:" in md
    for i in range(3, 11):
        assert f"### Figure {i}:" in md and f"../figures/fig{i}.png" in md
    assert page.count("data:image/png;base64,") == 8
    # the paper's own cells sit beside ours
    paper1 = paper_values.paper_table("table1")
    assert paper1.iloc[0]["T(1,596)"] in md and "Paper (§3.2)" in md
    assert "1.87× [1.80, 1.95]" in md  # Table 4's first paper row
    assert "Why it differs" in md and "plain one-token decode" in md
    assert "sha256" in md and "synthetic-target" in md
    if index["preset"] == "default":
        assert "not run in this preset" in md and "preset=paper" in md
    else:
        assert "extra/heldout/adaspark" in md


def test_report_stage_names_the_missing_tables_stage(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        make_params: Callable[..., Path]) -> None:
    params = make_params(tmp_path / "params.yaml", "default")
    rc = report_stage.main(["--params", str(params), "--runs", str(tmp_path), "--tables",
                            str(tmp_path / "t"), "--figures", str(tmp_path / "f"), "--out",
                            str(tmp_path / "p")])
    assert rc == 1 and "`tables` stage" in capsys.readouterr().err


def test_report_pdf_is_made_where_a_latex_engine_is_installed(built: Built) -> None:
    from adaspark.analysis.report import latex_engine

    pdf = built.paper / "report.pdf"
    if latex_engine() is None:
        assert not pdf.exists(), "a PDF without a LaTeX engine on PATH"
        pytest.skip("no LaTeX engine on PATH: the report is md and html only")
    assert pdf.read_bytes()[:5] == b"%PDF-"
    assert pdf.stat().st_size > 50_000  # the eight figures are embedded
