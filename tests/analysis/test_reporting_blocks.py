"""Tables 4-6 and Figure 6 hold a block per drafter kind, each over its own llama.cpp baseline
(issue 13): per-reply frames made here, with known speeds, so every ratio has a known answer."""

from __future__ import annotations

import hashlib
import json

import pandas as pd
import pytest
from reporting_helpers import Built

from adaspark.analysis import report
from adaspark.analysis.figures.fig6 import figure6_gain_factors
from adaspark.analysis.figures.style import info_of
from adaspark.analysis.records import (
    AR,
    BLOCKS,
    DRAFT_MODEL_BLOCK,
    DSPARK_BLOCK,
    LLAMACPP_AR,
    DrafterBlock,
    Options,
)
from adaspark.analysis.tables import table4, table5, table6
from adaspark.analysis.tables.common import NOT_RUN, STAND_IN, block_of
from adaspark.analysis.tables.render import DASH, formatted

#: Constant per-arm decode speeds (tok/s): every per-reply ratio, their geometric mean and each
#: bootstrap bound are the ratio of two of these. Over ``llamacpp-chain`` the DSpark block's
#: AdaSpark would be 5.00×; over its own baseline ``llamacpp-dspark`` it is 2.50×.
SPEEDS = {
    "llamacpp-chain": 10.0, "chain3": 12.0, "adaspark": 15.0,
    "llamacpp-dspark": 20.0, "chain3-dspark": 40.0, "adaspark-dspark": 50.0,
    LLAMACPP_AR: 9.0, AR: 8.0,
}
DRAFT_MODEL_ARMS = ("llamacpp-chain", "chain3", "adaspark")
DSPARK_ARMS = ("llamacpp-dspark", "chain3-dspark", "adaspark-dspark")
SETS = ("specbench", "toolace")


def replies(arms: tuple[str, ...], conversations: int = 3, first: int = 0) -> pd.DataFrame:
    """Per-reply rows of ``arms`` at their :data:`SPEEDS`: 21 tokens a reply, one reply per
    conversation of each of :data:`SETS`."""
    rows = []
    for arm in arms:
        for s in SETS:
            for c in range(first, first + conversations):
                text = f"{s}-{c}"
                rows.append({
                    "arm": arm, "repeat": 1, "set": s, "conversation": f"{s}-{c:02d}",
                    "turn": 0, "reply": 0, "status": "finished", "decode_tps": SPEEDS[arm],
                    "completion_tokens": 21, "prompt_tokens": 100,
                    "engine": "llama-server" if arm.startswith("llamacpp") else "ours",
                    "ttft_s": float("nan"), "decode_s": 20.0 / SPEEDS[arm],
                    "drafter_prefill_s": float("nan"), "text": text,
                    "text_sha256": hashlib.sha256(text.encode()).hexdigest()})
    return pd.DataFrame(rows)


def exact(ratio: float) -> str:
    """An interval cell of a ratio that is the same on every reply."""
    return f"{ratio:.2f}× [{ratio:.2f}, {ratio:.2f}]"


BOTH = DRAFT_MODEL_ARMS + DSPARK_ARMS
AR_ROWS = replies((LLAMACPP_AR, AR))


def test_the_registry_names_each_block_for_what_it_runs() -> None:
    """One registry: the paper's names for the DSpark block, the draft model's for its stand-in
    (the draft-model block leads: every preset runs it today)."""
    assert BLOCKS == (DRAFT_MODEL_BLOCK, DSPARK_BLOCK)
    assert DSPARK_BLOCK.arms == DSPARK_ARMS and DRAFT_MODEL_BLOCK.arms == DRAFT_MODEL_ARMS
    assert (DSPARK_BLOCK.llamacpp_label, DSPARK_BLOCK.chain_label,
            DSPARK_BLOCK.adaspark_label) == ("llama.cpp DSpark", "imparo DSpark", "AdaSpark")
    assert (DRAFT_MODEL_BLOCK.llamacpp_label, DRAFT_MODEL_BLOCK.chain_label,
            DRAFT_MODEL_BLOCK.adaspark_label) == (
        "llama.cpp draft-model chain (draft-simple)", "imparo draft-model chain",
        "AdaSpark (draft model)")
    assert "stand-in" in DRAFT_MODEL_BLOCK.stand_in and not DSPARK_BLOCK.stand_in
    assert block_of("adaspark-dspark@2") is DSPARK_BLOCK
    assert block_of("tree16") is block_of("adaspark-w8") is DRAFT_MODEL_BLOCK


def test_table4_takes_each_blocks_ratio_over_its_own_baseline(fast: Options) -> None:
    df = replies(BOTH)
    frame = table4.table4_end_to_end(df, AR_ROWS, "t", fast).set_index("drafter")
    dm, ds = frame.loc["draft model"], frame.loc["DSpark"]
    assert list(frame.index) == ["draft model", "DSpark"]
    assert dm["baseline"] == "llama.cpp draft-model chain (draft-simple)"
    assert ds["baseline"] == "llama.cpp DSpark"
    assert (dm["llama.cpp (tok/s)"], dm["imparo chain (tok/s)"], dm["AdaSpark (tok/s)"]) == (
        pytest.approx(10.0), pytest.approx(12.0), pytest.approx(15.0))
    assert (ds["llama.cpp (tok/s)"], ds["imparo chain (tok/s)"], ds["AdaSpark (tok/s)"]) == (
        pytest.approx(20.0), pytest.approx(40.0), pytest.approx(50.0))
    assert dm["AdaSpark / llama.cpp"] == exact(1.5)
    assert ds["AdaSpark / llama.cpp"] == exact(2.5)  # over llamacpp-dspark, not 5.00×
    assert dm["llama.cpp / own AR"] == pytest.approx(10.0 / 9.0)
    assert ds["llama.cpp / own AR"] == pytest.approx(20.0 / 9.0)
    assert ds["AdaSpark / own AR"] == pytest.approx(50.0 / 8.0)
    assert list(frame["looped"]) == [0, 0]
    notes = table4.table4_end_to_end(df, AR_ROWS, "t", fast).attrs["notes"]
    assert not any(n.startswith(NOT_RUN) for n in notes)
    assert [n for n in notes if n.startswith(STAND_IN)] == [
        n for n in notes if "draft model block" in n]


def test_table5_and_table6_take_each_block_over_its_own_baseline(fast: Options) -> None:
    df = replies(BOTH)
    held = replies(("llamacpp-dspark", "adaspark-dspark"), conversations=2, first=5)
    t5 = table5.table5_heldout(df, held, "t", fast).set_index("drafter")
    assert t5.loc["draft model", "evaluation ratio"] == exact(1.5)
    assert t5.loc["DSpark", "evaluation ratio"] == exact(2.5)
    assert t5.loc["DSpark", "held-out ratio"] == exact(2.5)
    assert t5.loc["DSpark", "whole-set replies"] == 2 * 3 + 2 * 2
    assert pd.isna(t5.loc["draft model", "held-out ratio"])  # its held-out pair did not run
    notes = table5.table5_heldout(df, held, "t", fast).attrs["notes"]
    assert any(n.startswith(NOT_RUN) and "held-out conversations (draft model)" in n
               for n in notes), notes

    t6 = table6.table6_ablation(df, "t", fast)
    cells = formatted(t6).set_index("arm")
    assert cells.loc["llama.cpp draft-model chain (draft-simple) (tok/s)", "SB"] == "10.0"
    assert cells.loc["llama.cpp DSpark (tok/s)", "SB"] == "20.0"
    assert cells.loc["imparo draft-model chain (3-token chain)", "all replies"] == exact(1.2)
    assert cells.loc["imparo DSpark (3-token chain)", "all replies"] == exact(2.0)
    assert cells.loc["AdaSpark (draft model) (+ acceptance model, n-gram)", "TA"] == "1.50"
    assert cells.loc["AdaSpark (+ acceptance model, n-gram)", "TA"] == "2.50"
    # the draft-model block's ablation arms did not run: dashes; the DSpark block has none
    assert list(t6["arm"]) == [
        "llama.cpp draft-model chain (draft-simple) (tok/s)",
        "imparo draft-model chain (3-token chain)", "full-block chain", "fixed 16-row tree",
        "cost-model width", "AdaSpark (draft model) (+ acceptance model, n-gram)",
        "llama.cpp DSpark (tok/s)", "imparo DSpark (3-token chain)",
        "AdaSpark (+ acceptance model, n-gram)"]
    assert set(t6.attrs["row_formats"]) == {0, 6}  # each block's tok/s row


def test_figure6_draws_a_panel_per_block_over_its_own_baseline(fast: Options) -> None:
    fig = figure6_gain_factors(replies(BOTH), "t", fast)
    info = info_of(fig)
    assert [ax.get_title() for ax in fig.axes if ax.get_visible()] == [
        "t: draft model", "t: DSpark"]
    caption = info["caption"]
    draft, dspark = caption.split("DSpark block:")
    assert "engine 1.20×" in draft and "scheduler 1.25×" in draft and "total 1.50×" in draft
    assert "engine 2.00×" in dspark and "scheduler 1.25×" in dspark and "total 2.50×" in dspark
    assert "imparo DSpark (chain3-dspark) over llama.cpp DSpark (llamacpp-dspark)" in dspark
    assert "imparo draft-model chain (chain3) over llama.cpp draft-model chain " \
           "(draft-simple) (llamacpp-chain)" in draft
    assert info["complete"]


@pytest.mark.parametrize(("ran", "missing"), [
    (DRAFT_MODEL_ARMS, DSPARK_BLOCK), (DSPARK_ARMS, DRAFT_MODEL_BLOCK)])
def test_a_block_that_did_not_run_is_left_out_and_named(
        ran: tuple[str, ...], missing: DrafterBlock, fast: Options) -> None:
    df = replies(ran)
    shown = next(b for b in BLOCKS if b is not missing)
    said = f"{NOT_RUN}: the {missing.kind} block ({', '.join(missing.arms)})"
    t4 = table4.table4_end_to_end(df, AR_ROWS, "t", fast)
    assert list(t4["drafter"]) == [shown.kind] and list(t4["baseline"]) == [shown.llamacpp_label]
    assert t4.at[0, "AdaSpark / llama.cpp"] == exact(SPEEDS[shown.adaspark]
                                                     / SPEEDS[shown.llamacpp])
    assert any(n.startswith(said) for n in t4.attrs["notes"]), t4.attrs["notes"]
    assert any(n.startswith(STAND_IN) for n in t4.attrs["notes"]) == bool(shown.stand_in)
    t5 = table5.table5_heldout(df, None, "t", fast)
    assert list(t5["drafter"]) == [shown.kind]
    assert any(n.startswith(f"{NOT_RUN}: the {missing.kind} block") for n in t5.attrs["notes"])
    t6 = table6.table6_ablation(df, "t", fast)
    assert t6.at[0, "arm"] == f"{shown.llamacpp_label} (tok/s)"
    assert not any(missing.llamacpp_label in a for a in t6["arm"])
    assert any(n.startswith(f"{NOT_RUN}: the {missing.kind} block") for n in t6.attrs["notes"])
    fig = figure6_gain_factors(df, "t", fast)
    assert [ax.get_title() for ax in fig.axes if ax.get_visible()] == [f"t: {shown.kind}"]
    assert said in info_of(fig)["caption"] and info_of(fig)["complete"]


def test_a_block_run_in_part_shows_dashes_for_its_missing_arms(fast: Options) -> None:
    df = replies(("llamacpp-dspark", "adaspark-dspark"))
    t4 = table4.table4_end_to_end(df, AR_ROWS, "t", fast)
    cells = formatted(t4).iloc[0]
    assert cells["drafter"] == "DSpark" and cells["imparo chain (tok/s)"] == DASH
    assert cells["AdaSpark / llama.cpp"] == exact(2.5)
    assert any(n.startswith(NOT_RUN) and "chain3-dspark" in n and "(dashes)" in n
               for n in t4.attrs["notes"])
    info = info_of(figure6_gain_factors(df, "t", fast))
    assert not info["complete"] and "total 2.50×" in info["caption"]


def test_when_no_block_ran_the_tables_show_the_lead_blocks_dashes(fast: Options) -> None:
    df = AR_ROWS
    t4 = table4.table4_end_to_end(df, df, "t", fast)
    assert list(t4["drafter"]) == [BLOCKS[0].kind]
    assert set(formatted(t4).iloc[0][["llama.cpp (tok/s)", "imparo chain (tok/s)",
                                      "AdaSpark (tok/s)", "AdaSpark / llama.cpp"]]) == {DASH}
    notes = t4.attrs["notes"]
    assert any(n.startswith(NOT_RUN) and ", ".join(BLOCKS[0].arms) in n for n in notes)
    assert any(n.startswith(f"{NOT_RUN}: the {BLOCKS[1].kind} block") for n in notes)
    assert len(table6.table6_ablation(df, "t", fast)) == 2 + len(BLOCKS[0].ablation) + 1
    info = info_of(figure6_gain_factors(df, "t", fast))
    assert not info["complete"] and "None of the comparisons" in info["caption"]


def _our_texts(built: Built) -> dict[str, str]:
    """Every text this run's outputs hold, by where, less the paper's own tables."""
    out = {p.name: p.read_text() for p in sorted(built.tables.iterdir())}
    out["figures.json"] = (built.figures / "figures.json").read_text()
    params = report_params(built)
    sections = report.build_sections(built.runs, built.tables, built.figures, params,
                                     Options(target="synthetic-target", n_resamples=200))
    for s in sections:
        for i, (kind, body) in enumerate(s.blocks):
            if kind == "tables":
                body = [t for t in body if not t[0].startswith("Paper")]
            out[f"report: {s.heading} #{i}"] = json.dumps(body, ensure_ascii=False, default=str)
    return out


def report_params(built: Built) -> dict:
    from omegaconf import OmegaConf

    return OmegaConf.to_container(OmegaConf.load(built.runs.parent / "params.yaml"))


def test_no_output_calls_the_draft_model_chain_llama_cpp_dspark(built_default: Built) -> None:
    """The default preset runs the draft-model block only: none of its tables, figure captions
    or report text (the paper's own tables aside) says "llama.cpp DSpark" or "imparo DSpark"."""
    texts = _our_texts(built_default)
    for where, text in texts.items():
        for name in ("llama.cpp DSpark", "imparo DSpark"):
            assert name not in text, (where, name)
    md = (built_default.paper / "report.md").read_text()
    assert "llama.cpp draft-model chain (draft-simple)" in md
    assert "This run (draft model block: a stand-in drafter" in md  # beside the paper's cells


def test_with_both_blocks_llama_cpp_dspark_names_only_the_dspark_arm(built_paper: Built) -> None:
    texts = _our_texts(built_paper)  # the check above can fail: here the DSpark block ran
    assert any("llama.cpp DSpark" in t for w, t in texts.items() if w.startswith("report: "))
    assert "llama.cpp DSpark" in texts["table4.md"] and "imparo DSpark" in texts["table6.csv"]
    index = {t["name"]: t for t in
             json.loads((built_paper.tables / "tables.json").read_text())["tables"]}
    for name in ("table4", "table5"):
        cols = index[name]["columns"]
        rows = [dict(zip(cols, r, strict=True)) for r in index[name]["rows"]]
        assert [(r["drafter"], r["baseline"]) for r in rows] == [
            ("draft model", "llama.cpp draft-model chain (draft-simple)"),
            ("DSpark", "llama.cpp DSpark")], name
    arms = [r[1] for r in index["table6"]["rows"]]
    dspark = arms.index("llama.cpp DSpark (tok/s)")
    assert dspark == 6 and not any("DSpark" in a for a in arms[:dspark])
    md = (built_paper.paper / "report.md").read_text()
    every = md[md.index("## Every arm"):md.index("## Why it differs")]
    by_arm = {line.split("|")[1].strip(): line.split("|")[5].strip()
              for line in every.splitlines() if line.startswith("| ")}
    assert by_arm["adaspark-dspark"] == by_arm["chain3-dspark"] == "llamacpp-dspark"
    assert by_arm["adaspark"] == by_arm["tree16"] == "llamacpp-chain"
    why = md[md.index("## Why it differs"):]
    assert "AdaSpark over llama.cpp DSpark is" in why
    assert "AdaSpark (draft model) over llama.cpp draft-model chain (draft-simple) is" in why



def test_an_arm_outside_the_blocks_is_placed_by_the_drafter_its_file_names():
    from adaspark.analysis.records import DRAFT_MODEL_BLOCK, DSPARK_BLOCK
    from adaspark.analysis.tables.common import block_of

    assert block_of("my-rule-dspark", "dspark") is DSPARK_BLOCK  # over llamacpp-dspark
    assert block_of("my-rule") is DRAFT_MODEL_BLOCK
    assert block_of("chain3-dspark@2") is DSPARK_BLOCK
    assert block_of("chain3", "dspark") is DRAFT_MODEL_BLOCK  # a block's own arm stays there
