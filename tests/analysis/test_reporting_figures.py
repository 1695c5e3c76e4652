"""Each figure module runs on a small synthetic run directory and writes PNG and PDF (issue 6)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from reporting_helpers import FAST, Built

from adaspark.analysis.figures import FIGURES
from adaspark.analysis.figures.fig4 import source_change_ranks
from adaspark.analysis.figures.fig5 import figure5_marginal_rows, marginal_points
from adaspark.analysis.figures.fig10 import figure10_calibration
from adaspark.analysis.figures.style import info_of, save
from adaspark.analysis.records import Options, Records


@pytest.mark.parametrize("name", list(FIGURES))
def test_every_figure_is_written_by_the_stage(name: str, built: Built) -> None:
    """The figures stage ran every module on the synthetic runs and wrote PNG and PDF."""
    assert built.codes[1] == 0
    png, pdf = built.figures / f"{name}.png", built.figures / f"{name}.pdf"
    assert png.read_bytes()[:4] == b"\x89PNG" and pdf.read_bytes()[:4] == b"%PDF"
    index = {f["name"]: f for f in json.loads((built.figures / "figures.json").read_text())
             ["figures"]}
    assert index[name]["label"] == f"Figure {FIGURES[name].number}"
    assert FAST.target in index[name]["caption"]


def test_a_figure_carries_its_caption(paper_runs: Path, fast: Options, tmp_path: Path) -> None:
    fig = FIGURES["fig9"].build(Records(paper_runs), fast)
    info = info_of(fig)
    assert info["label"] == "Figure 9" and "median absolute error" in info["caption"]
    assert [p.suffix for p in save(fig, tmp_path, "fig9")] == [".png", ".pdf"]


def test_figures_are_reproducible_byte_for_byte(paper_runs: Path, fast: Options,
                                                tmp_path: Path) -> None:
    a = save(FIGURES["fig8"].build(Records(paper_runs), fast), tmp_path / "a", "fig8")
    b = save(FIGURES["fig8"].build(Records(paper_runs), fast), tmp_path / "b", "fig8")
    assert [p.read_bytes() for p in a] == [p.read_bytes() for p in b]


def test_a_series_not_run_leaves_an_empty_marked_panel(paper_runs: Path, fast: Options) -> None:
    rounds = Records(paper_runs).rounds()
    fig = figure10_calibration(rounds[rounds["arm"] == "adaspark"], fast.target)
    info = info_of(fig)
    assert not info["complete"] and "drafter head: not run in this preset" in info["caption"]
    empty = figure5_marginal_rows(pd.DataFrame(columns=["context", "prompt", "width", "rounds",
                                                        "tokens", "decode_s"]), fast.target)
    texts = [t.get_text() for t in empty.axes[0].texts]
    assert any("not run in this preset" in t for t in texts)


def test_marginal_points_are_relative_to_the_narrow_tree() -> None:
    runs = pd.DataFrame([
        {"context": 443, "prompt": "443A", "width": 8, "rounds": 100, "tokens": 200,
         "decode_s": 10.0},
        {"context": 443, "prompt": "443A", "width": 16, "rounds": 80, "tokens": 200,
         "decode_s": 10.0},
    ])
    pts = marginal_points(runs)
    assert pts.at[0, "extra_time"] == pytest.approx(0.25)  # 0.125 s over 0.1 s per round
    assert pts.at[0, "extra_tokens"] == pytest.approx(0.25)  # 2.5 over 2 tokens per round


def test_source_change_ranks() -> None:
    red = pd.Series([0.1, 0.2, 0.05, 0.3, 0.1])
    src = pd.Series(["a", "a", "b", "b", "b"])
    ((rank, below),) = source_change_ranks(red, src)
    assert rank == 0.0 and below  # 0.05 is the lowest of b's others (0.3, 0.1)


def _round_log(split: bool) -> pd.DataFrame:
    """Six warm rounds at 8 rows, two at 4, one cold-start round at 16 (known medians)."""
    widths = [8, 8, 8, 8, 8, 8, 4, 4, 16]
    rows = []
    for i, w in enumerate(widths):
        row = {"width": w, "why": "cold-start" if w == 16 else "choice", "status": "finished",
               "fixed_s": 0.010 + 0.001 * i, "measured_verify_s": 0.030 + 0.002 * i,
               "committed": 3}
        if split:
            row |= {"draft_s": 0.008 + 0.001 * i, "tree_build_s": 0.002, "commit_s": 0.0005}
        rows.append(row)
    return pd.DataFrame(rows)


def test_figure7_splits_the_round_into_draft_tree_verify_commit(fast: Options) -> None:
    from adaspark.analysis.figures.fig7 import figure7_round_anatomy, round_anatomy

    a = round_anatomy(_round_log(split=True))
    assert a["width"] == 8 and a["share"] == pytest.approx(6 / 8)  # cold start left out
    assert a["draft_ms"] == pytest.approx(10.5) and a["tree_ms"] == pytest.approx(2.0)
    assert a["verify_ms"] == pytest.approx(35.0) and a["commit_ms"] == pytest.approx(0.5)
    caption = info_of(figure7_round_anatomy(_round_log(split=True), None, fast.target))["caption"]
    assert "draft 10.5, tree build 2.0, verify 35.0, commit 0.5 ms at 8 rows (75% of" in caption
    old = info_of(figure7_round_anatomy(_round_log(split=False), None, fast.target))["caption"]
    assert "draft + tree build 12.5, verify 35.0 ms at 8 rows" in old
