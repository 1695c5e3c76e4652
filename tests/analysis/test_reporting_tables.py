"""Each table module runs on a small synthetic run directory and writes its files (issue 6)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from reporting_helpers import FAST, Built

from adaspark.analysis import stats, throughput
from adaspark.analysis.records import (
    ADASPARK,
    ADASPARK_DSPARK,
    AR,
    CHAIN3,
    CHAIN3_DSPARK,
    LLAMACPP_AR,
    LLAMACPP_CHAIN,
    LLAMACPP_DSPARK,
    Options,
    Records,
)
from adaspark.analysis.tables import TABLES, table4
from adaspark.analysis.tables.render import DASH, formatted, missing_cells, write_table
from adaspark.replay.survey import survey_medians


@pytest.mark.parametrize("name", list(TABLES))
def test_every_table_is_written_by_the_stage(name: str, built: Built) -> None:
    """The tables stage ran every module on the synthetic runs and wrote its three files."""
    assert built.codes[0] == 0
    files = [built.tables / f"{name}.{ext}" for ext in ("csv", "md", "tex")]
    assert all(p.is_file() and p.stat().st_size > 0 for p in files)
    index = {t["name"]: t for t in json.loads((built.tables / "tables.json").read_text())
             ["tables"]}
    entry = index[name]
    assert entry["error"] is None and FAST.target in entry["caption"]
    back = pd.read_csv(files[0])
    assert list(back.columns) == entry["columns"]
    md = files[1].read_text()
    assert entry["label"] in md and "|---|" in md
    tex = files[2].read_text()
    assert tex.startswith("\\begin{table}") and "\\bottomrule" in tex


def test_a_table_frame_carries_its_caption_and_formats(paper_runs: Path, fast: Options,
                                                       tmp_path: Path) -> None:
    frame = TABLES["table1"].build(Records(paper_runs), fast)
    assert frame.attrs["label"] == "Table 1" and frame.attrs["formats"]["β (ms per 1k tokens)"]
    files = write_table(frame, tmp_path, "t1")
    assert [p.suffix for p in files] == [".csv", ".md", ".tex"]


def test_table1_holds_the_survey_medians_and_the_context_fit(paper_runs: Path,
                                                             fast: Options) -> None:
    records = Records(paper_runs)
    frame = TABLES["table1"].build(records, fast)
    med = survey_medians(records.survey()).set_index(["width", "context"])["verify_ms"]
    row = frame[frame["rows"] == 16].iloc[0]
    assert row["T(1,596)"] == pytest.approx(med[(16, 1596)])
    # the fit passes near the three points (residual is relative)
    alpha, beta = row["α (ms)"], row["β (ms per 1k tokens)"]
    for c in (443, 1596, 8444):
        fit = alpha + beta * c / 1000
        assert abs(fit - med[(16, c)]) / med[(16, c)] <= row["max residual"] + 1e-9


def test_table4_ratio_is_the_statistics_modules_comparison(paper_runs: Path,
                                                           fast: Options) -> None:
    records = Records(paper_runs)
    frame = TABLES["table4"].build(records, fast)
    assert list(frame["drafter"]) == ["draft model", "DSpark"]
    for row, (ada, base, chain) in enumerate([(ADASPARK, LLAMACPP_CHAIN, CHAIN3),
                                              (ADASPARK_DSPARK, LLAMACPP_DSPARK, CHAIN3_DSPARK)]):
        c = stats.compare(records.replies(), ada, base, seed=fast.seed,
                          n_resamples=fast.n_resamples)
        assert frame.at[row, "AdaSpark / llama.cpp"] == c.format(2)
        tps = throughput.arm_throughput(records.replies(), chain).tokens_per_s
        assert frame.at[row, "imparo chain (tok/s)"] == pytest.approx(tps)
        tps = throughput.arm_throughput(records.replies(), base).tokens_per_s
        assert frame.at[row, "llama.cpp (tok/s)"] == pytest.approx(tps)
    assert list(frame["looped"]) == [1, 0]  # llamacpp-chain's looped reply


def test_default_preset_shows_dashes_where_it_did_not_run(default_runs: Path,
                                                          fast: Options) -> None:
    records = Records(default_runs)
    t3 = TABLES["table3"].build(records, fast)
    cells = formatted(t3)
    assert set(cells[["4", "5", "6", "8", "12", "16", "again"]].to_numpy().ravel()) == {DASH}
    assert any("not run in this preset" in n for n in t3.attrs["notes"])
    assert "preset=paper" in t3.attrs["filled_by"]
    t5 = TABLES["table5"].build(records, fast)
    assert formatted(t5).at[0, "held-out ratio"] == DASH
    assert formatted(t5).at[0, "evaluation ratio"] != DASH
    t6 = TABLES["table6"].build(records, fast)
    assert missing_cells(t6) == 3 * 7  # fullchain, tree16, costmodel rows


def test_paper_preset_fills_every_speed_cell(paper_runs: Path, fast: Options) -> None:
    records = Records(paper_runs)
    for name in ("table3", "table4", "table5", "table6", "table8", "table9", "table10"):
        frame = TABLES[name].build(records, fast)
        assert missing_cells(frame) == 0, (name, formatted(frame))


def test_table3_bolds_the_best_pinned_width_per_band(paper_runs: Path, fast: Options) -> None:
    frame = TABLES["table3"].build(Records(paper_runs), fast)
    for row, col in frame.attrs["bold"]:
        widths = [c for c in ("4", "5", "6", "8", "12", "16")]
        assert frame.at[row, col] == max(frame.loc[row, widths])
    assert "**" in formatted(frame).to_numpy().ravel()[3 + 0] or frame.attrs["bold"]


def test_table10_counts_identical_texts(paper_runs: Path, fast: Options) -> None:
    records = Records(paper_runs)
    frame = TABLES["table10"].build(records, fast)
    r = records.replies()
    keys = ["set", "conversation", "turn", "reply"]
    a = r[(r["arm"] == ADASPARK) & (r["repeat"] == 1)].set_index(keys)["text_sha256"]
    b = r[r["arm"] == CHAIN3].set_index(keys)["text_sha256"]
    both = a.index.intersection(b.index)
    assert frame.at[0, "all replies"] == f"{int((a[both] == b[both]).sum())}/{len(both)}"


def test_table7_reads_the_round_log(paper_runs: Path, fast: Options) -> None:
    records = Records(paper_runs)
    frame = TABLES["table7"].build(records, fast).set_index("quantity")[fast.target]
    rounds = records.rounds()
    ada = rounds[(rounds["arm"] == ADASPARK) & (rounds["width"] > 1)]
    rows = ada[["rows_drafter", "rows_agreed", "rows_ngram"]].to_numpy().sum()
    assert frame["verified rows held by n-gram-only nodes"] == pytest.approx(
        ada["rows_ngram"].sum() / rows)
    assert frame["rounds with n-gram candidates"] == (ada["n_ngram_candidates"] > 0).sum()
    chosen = ada.loc[ada["n_ngram_candidates"] > 0, "ngram_widened"].dropna()
    assert len(chosen) > 0, "the synthetic instrumented run should have chosen widths"
    assert frame["of those, rounds the n-gram widened the verify"] == pytest.approx(
        chosen.astype(bool).mean())


def test_the_bootstrap_method_reaches_the_comparisons_and_the_index(
        default_runs: Path, tmp_path: Path, make_params) -> None:
    from adaspark.analysis.tables.common import compare_or_none
    from adaspark.stages import tables as tables_stage

    tables = {"seed": 11, "n_resamples": 200, "bootstrap_method": "BCa"}
    params = make_params(tmp_path / "params.yaml", "default", tables=tables)
    options = tables_stage.options_from_params(tables_stage.load_params(params))
    assert options.bootstrap_method == "BCa"
    replies = Records(default_runs).replies("a test")
    bca = compare_or_none(replies, ADASPARK, LLAMACPP_CHAIN, options)
    percentile = compare_or_none(replies, ADASPARK, LLAMACPP_CHAIN, FAST)
    assert (bca.method, percentile.method) == ("BCa", "percentile")
    assert bca.ratio == percentile.ratio and (bca.lo, bca.hi) != (percentile.lo, percentile.hi)
    out = tmp_path / "tables"
    code = tables_stage.main(["--params", str(params), "--runs", str(default_runs), "--out",
                              str(out), "--only", "table4"])
    assert code == 0
    assert json.loads((out / "tables.json").read_text())["bootstrap_method"] == "BCa"


@pytest.mark.parametrize("stage", ["tables", "figures"])
def test_a_bad_bootstrap_method_exits_2_naming_the_key_and_the_choices(
        stage: str, default_runs: Path, tmp_path: Path, make_params,
        capsys: pytest.CaptureFixture[str]) -> None:
    import importlib

    main = importlib.import_module(f"adaspark.stages.{stage}").main
    params = make_params(tmp_path / "params.yaml", "default",
                         tables={"seed": 11, "n_resamples": 200, "bootstrap_method": "bca"})
    code = main(["--params", str(params), "--runs", str(default_runs), "--out",
                 str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2
    assert "tables.bootstrap_method='bca'" in err and "one of 'percentile', 'BCa'" in err
    assert not (tmp_path / "out").exists()


def _timed_rows(arm: str, ttft_s: float, decode_s: float, prefill_s: float) -> list[dict]:
    """Two replies of 21 tokens: decode 20 tokens in ``decode_s``, end to end
    ``ttft_s + decode_s``."""
    engine = "llama-server" if arm.startswith("llamacpp") else "ours"
    return [{"arm": arm, "repeat": 1, "set": "spec-bench", "conversation": c, "turn": 0,
             "reply": 0, "status": "finished", "decode_tps": 20.0 / decode_s,
             "completion_tokens": 21, "prompt_tokens": 100, "engine": engine,
             "ttft_s": ttft_s, "decode_s": decode_s, "drafter_prefill_s": prefill_s}
            for c in ("c1", "c2")]


def _timed_arms() -> pd.DataFrame:
    nan = float("nan")
    return pd.DataFrame([*_timed_rows(LLAMACPP_CHAIN, 1.0, 2.0, nan),  # 42 tokens / 6 s
                         *_timed_rows(CHAIN3, 2.0, 1.5, 1.25),         # 42 tokens / 7 s
                         *_timed_rows(ADASPARK, 1.5, 2.0, 0.75),       # 42 tokens / 7 s
                         *_timed_rows(AR, 0.5, 2.5, 0.0),              # 42 tokens / 6 s
                         *_timed_rows(LLAMACPP_AR, 0.25, 1.75, nan)])  # 42 tokens / 4 s


def test_table4_notes_time_to_first_token_and_end_to_end_beside_the_headline(
        fast: Options) -> None:
    df = _timed_arms()
    frame = table4.table4_end_to_end(df, df, "t", fast)
    assert frame.iloc[0]["AdaSpark (tok/s)"] == pytest.approx(40.0 / 4.0)  # decode, unchanged
    notes = frame.attrs["notes"]
    (note,) = [n for n in notes if n.startswith("End to end")]
    assert ("llama.cpp draft-model chain (draft-simple) 1.00 s, 7.0 tok/s; imparo draft-model "
            "chain 2.00 s, 6.0 tok/s (drafter prefill 1.25 s); AdaSpark (draft model) 1.50 s, "
            "6.0 tok/s (drafter prefill 0.75 s); llama.cpp AR 0.25 s, 10.5 tok/s; our AR "
            "0.50 s, 7.0 tok/s.") in note
    assert "No drafter prefill" not in note
    untimed = df.assign(ttft_s=float("nan"))
    # the same notes less the end-to-end one (the DSpark block's not run, the stand-in's)
    assert table4.table4_end_to_end(untimed, untimed, "t", fast).attrs["notes"] == [
        n for n in notes if n != note]


def test_the_every_arm_table_holds_ttft_and_end_to_end_beside_decode(fast: Options) -> None:
    from adaspark.analysis import report

    df = _timed_arms()
    ov = report.arms_overview(df, fast).set_index("arm")
    assert ov.loc[ADASPARK, report.DECODE_TPS] == pytest.approx(10.0)
    assert ov.loc[ADASPARK, report.MEDIAN_TTFT] == pytest.approx(1.5)
    assert ov.loc[ADASPARK, report.E2E_TPS] == pytest.approx(6.0)
    assert ov.loc[CHAIN3, report.DRAFTER_PREFILL] == pytest.approx(1.25)
    assert ov.loc[AR, report.DRAFTER_PREFILL] == 0.0
    cells = formatted(report.arms_overview(df, fast)).set_index("arm")
    assert cells.loc[LLAMACPP_CHAIN, report.DRAFTER_PREFILL] == DASH  # llama-server: not said
    assert cells.loc[LLAMACPP_AR, report.E2E_TPS] == "10.5"
