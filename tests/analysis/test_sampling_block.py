"""The report's sampling block (:mod:`adaspark.analysis.sampling`) on synthetic runs with known
counts: each arm's figures per temperature, the greedy main runs as temperature 0, the pairing
of AdaSpark with its baselines, and a sampled run directory holding another temperature refused
as stale."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from synthetic_runs import _rows, _write_run, make_synthetic_runs, synthetic_params

from adaspark import io
from adaspark.analysis import records as inp
from adaspark.analysis.records import Options, Records
from adaspark.analysis.run_selection import (
    REPLAY_DIR,
    StaleRunError,
    sampled_parent,
    selection_from_params,
    stage_of,
    temperature_dir,
)
from adaspark.analysis.sampling import (
    acceptance_by_position,
    acceptance_prediction,
    read_replay,
    replay_ratios,
    replay_table,
    sampled_replies,
    sampling_ratios,
    sampling_section,
    sampling_table,
)
from adaspark.analysis.sections import Section
from adaspark.runs.rows import ROW_SCHEMA
from adaspark.runs.store import ROWS_FILE, RUN_FILE

SAMPLING = {"temperature": 0.7, "top_k": 40, "top_p": 0.95, "min_p": 0.05, "seed": 0}
ARMS = [inp.LLAMACPP_CHAIN, inp.CHAIN3, inp.ADASPARK]


def _sampled_run(root: Path, arm: str, temperature: float, speed: float,
                 recorded: float | None = None, seed: int = 0) -> pd.DataFrame:
    """A sampled run of ``arm`` on the short subset: every reply 40 tokens in 10 rounds of
    widths 3 and 5 (5 rounds each: 4 rows per verify), 30 rows drafted, 12 accepted."""
    plan = [{"set": "specbench", "conversation": f"sb-{i}", "turn": 0, "reply": 0,
             "prompt_tokens": 100, "kind": "coding"} for i in range(6)]
    rows = _rows(arm, 1, plan, 128, seed=3)
    for i, r in enumerate(rows):
        timings: dict = {"widths": {"3": 5, "5": 5}}
        if arm != inp.LLAMACPP_CHAIN:  # per position: 10 rounds tested the first, 6 passed it
            timings["positions"] = {"1": {"tested": 10, "accepted": 6},
                                    "2": {"tested": 6, "accepted": 3},
                                    "3": {"tested": 2 + i % 2, "accepted": 0}}
        if arm == inp.ADASPARK:  # the fitted model's log loss 0.2 (0.4 on the first request)
            timings["rule_summary"] = {
                "request_id": f"r{i}", "tree_rounds": 10, "rounds_priced_fitted": 10,
                "labelled_nodes": 30, "logloss_head": 0.25 * temperature + 0.1,
                "logloss_fitted": 0.4 if i == 0 else 0.2}
        r.update(completion_tokens=40, status="finished", decode_tps=speed * (1 + 0.01 * i),
                 server_rounds=10.0, server_drafted=30, server_accepted=12,
                 seed=1000 + i, timings=json.dumps(timings))
    run_dir = root / sampled_parent(temperature, seed) / arm
    _write_run(run_dir, rows, "short", 128, arm)
    meta = json.loads((run_dir / RUN_FILE).read_text())
    meta["fingerprint"]["sampling"] = {**SAMPLING, "temperature": recorded or temperature,
                                       "seed": seed}
    (run_dir / RUN_FILE).write_text(json.dumps(meta))
    pq.write_table(pa.Table.from_pylist(rows, schema=ROW_SCHEMA), run_dir / ROWS_FILE)
    return pd.DataFrame(rows)


def _params() -> dict:
    params = synthetic_params("default")
    params["sampling"] = {**SAMPLING, "temperature": 0.0}
    params["extra_runs"]["sampled"] = {"arms": ARMS, "subset": "short",
                                       "temperatures": [0.7, 1.0], "seeds": [0]}
    return params


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    root = make_synthetic_runs(tmp_path / "runs", preset="default")
    for t, scale in ((0.7, 1.0), (1.0, 0.9)):
        for arm, speed in zip(ARMS, (20.0, 22.0, 30.0), strict=True):
            _sampled_run(root, arm, t, speed * scale)
    return root


def test_each_arm_and_temperature_has_its_known_figures(runs: Path):
    records = Records(runs, selection=selection_from_params(_params()))
    frame = sampled_replies(records)
    assert sorted(frame["temperature"].unique()) == [0.0, 0.7, 1.0]  # the main runs are T = 0
    table = sampling_table(frame)
    row = table[(table["arm"] == inp.ADASPARK) & (table["temperature"] == 0.7)].iloc[0]
    assert row["replies"] == 6
    assert row["tokens per round"] == pytest.approx(4.0)  # 40 tokens over 10 rounds
    assert row["acceptance"] == pytest.approx(12 / 30)
    assert row["rows per verify"] == pytest.approx(4.0)  # widths 3 and 5, five rounds each
    # pooled decode tok/s: tokens over decode time summed over replies
    speeds = [30.0 * (1 + 0.01 * i) for i in range(6)]
    assert row["decode tok/s"] == pytest.approx(240 / sum(40 / s for s in speeds))
    llama = table[(table["arm"] == inp.LLAMACPP_CHAIN) & (table["temperature"] == 0.7)].iloc[0]
    assert pd.isna(llama["rows per verify"])  # llama-server reports no widths


def test_adaspark_is_paired_with_its_baselines_per_temperature(runs: Path):
    records = Records(runs, selection=selection_from_params(_params()))
    ratios = sampling_ratios(sampled_replies(records), Options(n_resamples=200))
    hot = ratios[(ratios["drafter"] == "draft model") & (ratios["temperature"] == 1.0)].iloc[0]
    assert hot["AdaSpark / llama.cpp"].startswith("1.50")  # 30 x 0.9 over 20 x 0.9, per reply
    assert hot["AdaSpark / own chain"].startswith(f"{30 / 22:.2f}")


def test_a_sampled_run_of_another_temperature_is_stale(runs: Path):
    _sampled_run(runs, inp.CHAIN3, 0.7, 22.0, recorded=1.0)  # made at 1.0, kept under t0.7
    with pytest.raises(StaleRunError, match=r"(?s)sampling.*sampled@chain3-0\.7-0"):
        Records(runs, selection=selection_from_params(_params()))


def test_a_greedy_selection_refuses_a_sampled_main_run(runs: Path):
    params = _params()
    params["sampling"]["temperature"] = 0.7  # the params now sample every run
    with pytest.raises(StaleRunError, match="sampling"):
        Records(runs, selection=selection_from_params(params))


def test_sampled_stage_names_match_dvc():
    assert stage_of(sampled_parent(0.7, 3), "adaspark") == "sampled@adaspark-0.7-3"
    assert sampled_parent(1.0, 0) == "extra/sampled-t1.0-s0"


def test_several_run_seeds_are_an_arms_repeats(runs: Path):
    params = _params()
    params["extra_runs"]["sampled"]["seeds"] = [0, 1]
    for arm, speed in zip(ARMS, (20.0, 22.0, 40.0), strict=True):  # seed 1: AdaSpark faster
        _sampled_run(runs, arm, 0.7, speed, seed=1)
    frame = sampled_replies(Records(runs, selection=selection_from_params(params)))
    hot = frame[frame["temperature"] == 0.7]
    assert sorted(hot["repeat"].unique()) == [1, 2]
    ratios = sampling_ratios(frame, Options(n_resamples=200))
    r = ratios[(ratios["drafter"] == "draft model") & (ratios["temperature"] == 0.7)].iloc[0]
    assert r["AdaSpark / llama.cpp"].startswith("1.75")  # (30 + 40) / 2 over 20, per reply


def test_acceptance_prediction_is_table2s_per_temperature(runs: Path):
    frame = sampled_replies(Records(runs, selection=selection_from_params(_params())))
    got = acceptance_prediction(frame, "target")
    hot = got[got["temperature"] == 1.0].iloc[0]
    assert (hot["requests"], hot["nodes"]) == (5, 150)  # the first request is left out
    assert hot["head-based"] == pytest.approx(0.35)
    assert hot["fitted"] == pytest.approx(0.2)
    assert hot["change"] == pytest.approx(0.2 / 0.35 - 1)


def test_acceptance_per_position_sums_the_replies_counts(runs: Path):
    records = Records(runs, selection=selection_from_params(_params()))
    frame = sampled_replies(records)
    table = acceptance_by_position(frame, min_tested=1)
    assert list(table.columns) == ["arm", "temperature", "1", "2", "3"]  # nothing tested deeper
    row = table[(table["arm"] == inp.ADASPARK) & (table["temperature"] == 1.0)].iloc[0]
    assert row["1"] == pytest.approx(0.6)          # 36 of 60 over six replies
    assert row["2"] == pytest.approx(0.5)
    assert row["3"] == pytest.approx(0.0)
    # llama-server reports only its totals; the main runs' synthetic rows carry no positions
    assert inp.LLAMACPP_CHAIN not in set(table["arm"])
    assert set(table["temperature"]) == {0.7, 1.0}
    # position 3 was tested in 15 rounds an arm (2 or 3 a reply): under 20, left out
    assert list(acceptance_by_position(frame, min_tested=20).columns) == [
        "arm", "temperature", "1", "2"]


def _paragraphs(section: Section) -> str:
    return "\n".join(text for kind, text in section.blocks if kind == "p")


def _replayed(root: Path, device: str, arm: str, temperature: float, speed: float) -> dict:
    """A sampled replay of ``arm`` (every reply 40 tokens in 10 rounds at ``speed``)."""
    plan = [{"set": "specbench", "conversation": f"sb-{i}", "turn": 0, "reply": 0,
             "prompt_tokens": 100, "kind": "coding"} for i in range(6)]
    rows = _rows(arm, 1, plan, 128, seed=3)
    for i, r in enumerate(rows):
        r.update(completion_tokens=40, status="finished", decode_tps=speed * (1 + 0.02 * i),
                 server_rounds=10.0, server_drafted=30, server_accepted=12, seed=1000 + i)
    out = root / REPLAY_DIR / temperature_dir(temperature) / device / arm
    out.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=ROW_SCHEMA), out / ROWS_FILE)
    return {"temperature": temperature, "device": device, "arm": arm, "replies": 6,
            "rounds": 60, "tokens_per_round": 4.0, "tokens_per_s": speed, "drafted": 180,
            "accepted": 72, "widths": {"4": 60}}


def test_the_sampled_replay_has_its_tables_labelled_replay(runs: Path):
    records = Records(runs, selection=selection_from_params(_params()))
    section = _paragraphs(sampling_section(records, Options(n_resamples=200)))
    assert "In replay: not run in this preset" in section  # no sampled-replay stage output yet
    device = "qwen3-4b-paper"
    replays = [_replayed(runs, device, arm, t, speed * scale)
               for t, scale in ((0.7, 1.0), (1.0, 0.8))
               for arm, speed in ((inp.CHAIN3, 22.0), (inp.ADASPARK, 33.0))]
    summary = {"replies_of": inp.ADASPARK, "seed": 0, "arms": [inp.CHAIN3, inp.ADASPARK],
               "devices": {device: {"label": "reconstructed"}}, "replays": replays}
    io.write_json(runs / REPLAY_DIR / "summary.json", summary)
    got, replies = read_replay(runs)
    assert got == summary and len(replies) == 24
    assert set(replies["device_label"]) == {"reconstructed"}
    table = replay_table(summary)
    row = table[(table["arm"] == inp.ADASPARK) & (table["temperature"] == 1.0)].iloc[0]
    assert row["decode tok/s"] == pytest.approx(33.0 * 0.8) and row["acceptance"] == 0.4
    ratios = replay_ratios(replies, Options(n_resamples=200))
    assert list(ratios["temperature"]) == [0.7, 1.0]
    assert all(r.startswith("1.50") for r in ratios["AdaSpark / own chain"])  # 33 over 22
    section = _paragraphs(sampling_section(
        Records(runs, selection=selection_from_params(_params())), Options(n_resamples=200)))
    assert "REPLAYED, not run; device models labelled reconstructed" in section
