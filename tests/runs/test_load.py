"""The load generator and its outputs (issue 37): the summary's figures from known rows, the
settings' checks, and a real two-slot run on the tiny model that writes its points and resumes
without running them again; the report's table and figure from the points."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from adaspark.config import ConfigError, compose
from adaspark.runs.load import LoadSettings, percentile, read_points, run_points, summarise

REPO = Path(__file__).resolve().parents[2]


def _row(t_send, t_done, tokens, ttft, itl, status=200):
    return {"status": status, "t_send": t_send, "t_done": t_done, "tokens": tokens,
            "ttft_s": ttft, "itl_s": itl, "decode_tps": None if itl is None else 1 / itl,
            "queue_ms": 5.0, "rows_per_step": 6.0, "companions": 1.0}


def test_the_summary_of_known_rows() -> None:
    rows = [_row(0.0, 2.0, 10, 0.5, 0.1), _row(1.0, 4.0, 30, 1.5, 0.05),
            _row(1.0, 1.5, 0, None, None, status=503)]
    s = summarise(rows)
    assert s["answered"] == 2 and s["refused"] == 1
    assert s["wall_s"] == 4.0 and s["aggregate_tps"] == pytest.approx(40 / 4.0)
    assert s["ttft_p50_s"] == 0.5 and s["ttft_p99_s"] == 1.5
    assert s["requests_per_step"] == 2.0
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0 and percentile([], 50) is None


def test_bad_load_settings_are_refused_by_name() -> None:
    good = {"arms": ["ar"], "clients": [1], "rates": [1.0], "requests": 2, "max_tokens": 4,
            "source": "specbench", "mode": "closed", "seed": 0}
    assert LoadSettings.of(good).clients == (1,)
    with pytest.raises(ConfigError, match=r"load\.mode"):
        LoadSettings.of(good | {"mode": "sideways"})
    with pytest.raises(ConfigError, match="missing \\['seed'\\]"):
        LoadSettings.of({k: v for k, v in good.items() if k != "seed"})
    with pytest.raises(ConfigError, match=r"load\.rates"):
        LoadSettings.of(good | {"mode": "open", "rates": [0.0]})


@pytest.mark.server
def test_a_two_slot_point_on_the_tiny_model_writes_and_resumes(tmp_path) -> None:
    from adaspark.analysis.load import load_section, load_table, write_load_figure

    cfg = compose(["target=tiny", "drafter=tiny-truncated", "target.n_ctx=2048",
                   "drafter.n_ctx=2048"])
    settings = LoadSettings(arms=("chain3",), clients=(2,), rates=(1.0,), requests=3,
                            max_tokens=6, source="specbench", mode="closed", seed=0)
    points = run_points(cfg, settings, tmp_path, REPO / "data" / "testset")
    assert len(points) == 1 and points[0]["answered"] == 3
    assert points[0]["rows_per_step"] is not None  # our server's steps were counted
    again = run_points(cfg, settings, tmp_path, REPO / "data" / "testset")  # resumes: no rerun
    assert len(again) == 1 and len(read_points(tmp_path)) == 1
    assert (tmp_path / "requests.csv").read_text().count("\n") == 1 + 3
    assert write_load_figure(tmp_path) == tmp_path / "load.png"
    table = load_table(pd.read_csv(tmp_path / "points.csv"))
    assert list(table["N"]) == [2] and "aggregate tok/s" in table
    sec = load_section(tmp_path)
    assert any(kind == "figure" for kind, _ in sec.blocks)
