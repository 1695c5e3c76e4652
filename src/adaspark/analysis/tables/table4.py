"""Table 4 (§4.1): end to end, and each engine's speculation speedup over its own AR decode.

Paper: "decode tok/s on the evaluation subset (generated tokens over decode time, summed over
replies) and AdaSpark over llama.cpp DSpark (geometric mean of per-reply ratios, 95% bootstrap
interval over conversations). [...] looped counts the replies that looped in any arm. [...] Right:
each engine's speculation speedup over its own autoregressive (AR) decode: its tok/s on the
evaluation subset over its AR tok/s, which is measured on the short subset only."

One row per drafter block (:data:`adaspark.analysis.records.BLOCKS`), each over its own llama.cpp
baseline: the draft-model block is ``llamacpp-chain`` (llama-server's draft-simple chain of at
most three drafts), ``chain3`` (the same chain on our engine) and ``adaspark``; the DSpark block,
the paper's, ``llamacpp-dspark`` (draft-dspark), ``chain3-dspark`` and ``adaspark-dspark``. The
columns are the paper's, named by role (``llama.cpp``, ``imparo chain``, ``AdaSpark``) and the
``baseline`` cell names the row's llama.cpp arm. A block none of whose arms ran is left out and
named in a note. The AR arms ``llamacpp-ar`` and ``ar`` (one pair for both blocks) come from the
short stage when it ran, else from the main runs.
"""

from __future__ import annotations

import math

import pandas as pd

from adaspark.analysis import stats
from adaspark.analysis.bootstrap import DEFAULT_CONFIDENCE
from adaspark.analysis.records import (
    AR,
    BLOCKS,
    LLAMACPP_AR,
    STAGE_RUN,
    STAGE_SHORT,
    Options,
    Records,
    has_arm,
)
from adaspark.analysis.tables.common import (
    block_notes,
    compare_or_none,
    end_to_end_or_none,
    finish,
    not_run_note,
    shown_blocks,
    throughput_or_none,
)
from adaspark.analysis.tables.render import ci_text
from adaspark.runs.rows import SINGLE_DELTA

FILLED_BY = "every preset (the run stage; the AR arms on the short subset)"
COLUMNS = ("target", "drafter", "baseline", "llama.cpp (tok/s)", "imparo chain (tok/s)",
           "AdaSpark (tok/s)", "AdaSpark / llama.cpp", "looped", "llama.cpp / own AR",
           "AdaSpark / own AR")


def _tps(replies: pd.DataFrame | None, arm: str) -> float:
    t = throughput_or_none(replies, arm)
    return math.nan if t is None else float(t.tokens_per_s)


def end_to_end_note(replies: pd.DataFrame, ar_replies: pd.DataFrame | None) -> list[str]:
    """Table 4's note on what its headline leaves out (not a cell of the paper): per arm the
    median time to first token and the end-to-end tok/s (reply tokens over the time from sending
    the request to the last token, summed over replies;
    :func:`adaspark.analysis.throughput.arm_end_to_end`) and, for the speculative arms whose
    server records it, the drafter's median prompt prefill. Empty when no arm has a time to
    first token."""
    arms = [(label, replies, arm) for b in BLOCKS for label, arm in (
        (b.llamacpp_label, b.llamacpp), (b.chain_label, b.chain), (b.adaspark_label, b.adaspark))]
    arms += [("llama.cpp AR", ar_replies, LLAMACPP_AR), ("our AR", ar_replies, AR)]
    parts, prefills = [], 0
    for label, frame, arm in arms:
        e = end_to_end_or_none(frame, arm)
        if e is None:
            continue
        text = f"{label} {e.median_ttft_s:.2f} s, {e.tokens_per_s:.1f} tok/s"
        if arm not in (AR, LLAMACPP_AR) and not math.isnan(e.median_drafter_prefill_s):
            text += f" (drafter prefill {e.median_drafter_prefill_s:.2f} s)"
            prefills += 1
        parts.append(text)
    if not parts:
        return []
    return ["End to end, beside the decode speed above (the headline; §4.1 leaves the time to "
            "first token out by design): median time to first token and end-to-end tok/s "
            "(reply tokens over the time from sending the request to the last token, summed "
            "over replies), with the drafter's median prompt prefill where the server records "
            "it: " + "; ".join(parts) + "."
            + ("" if prefills else " No drafter prefill is recorded in these runs (llama-server "
               "does not report it; replies written before the column lack it).")]


def table4_end_to_end(replies: pd.DataFrame, ar_replies: pd.DataFrame | None, target: str,
                      options: Options, subset: str | None = None,
                      ar_subset: str | None = None) -> pd.DataFrame:
    """Table 4 from the main runs' per-reply rows and the AR arms' rows: a row per drafter
    block that ran (the lead block's dashes when none did)."""
    shown, left_out = shown_blocks(replies)
    ar_llama, ar_ours = _tps(ar_replies, LLAMACPP_AR), _tps(ar_replies, AR)
    rows, parts, not_run = [], [], []
    for b in shown:
        tps = {arm: _tps(replies, arm) for arm in b.arms}
        ratio = compare_or_none(replies, b.adaspark, b.llamacpp, options)
        present = [a for a in b.arms if has_arm(replies, a)]
        rows.append({
            "target": target, "drafter": b.kind, "baseline": b.llamacpp_label,
            "llama.cpp (tok/s)": tps[b.llamacpp], "imparo chain (tok/s)": tps[b.chain],
            "AdaSpark (tok/s)": tps[b.adaspark],
            "AdaSpark / llama.cpp": None if ratio is None else ci_text(ratio.ratio, ratio.lo,
                                                                        ratio.hi),
            "looped": stats.count_looped(replies, present) if present else None,
            "llama.cpp / own AR": tps[b.llamacpp] / ar_llama,
            "AdaSpark / own AR": tps[b.adaspark] / ar_ours,
        })
        n_single = max((int((stats.arm_speeds(replies, a)["status"] == SINGLE_DELTA).sum())
                        for a in present), default=0)
        parts.append(
            f"{b.kind}: {b.llamacpp_label}, {b.chain_label} and {b.adaspark_label} "
            f"({', '.join(b.arms)})"
            + (f", the ratio over {ratio.n_replies} replies of {ratio.n_conversations} "
               "conversations" if ratio else "")
            + f", {n_single} single-delta replies left out")
        not_run += [a for a in b.arms if not has_arm(replies, a)]
    frame = pd.DataFrame(rows, columns=list(COLUMNS))
    caption = (
        f"End to end on {target}, a row per drafter kind, each over its own llama.cpp baseline. "
        f"Left: decode tok/s on the {subset or 'main'} subset (generated tokens over decode "
        "time, summed over replies) of the block's llama.cpp baseline, our engine's chain of "
        "at most three drafts and AdaSpark, and AdaSpark over the baseline (geometric mean of "
        f"per-reply ratios, {DEFAULT_CONFIDENCE:.0%} bootstrap interval over conversations); "
        "looped counts the replies that looped in any arm of the block. " + "; ".join(parts)
        + ". Right: each engine's speculation speedup over its own AR decode, measured on the "
        f"{ar_subset or 'main'} subset"
        + (f" (llama.cpp and ours: {ar_llama:.1f} and {ar_ours:.1f} tok/s)."
           if not (math.isnan(ar_llama) or math.isnan(ar_ours)) else ".")
    )
    formats = {c: "{:.1f}" for c in COLUMNS[3:6]} | {
        "looped": "{:,.0f}", "llama.cpp / own AR": "{:.2f}×", "AdaSpark / own AR": "{:.2f}×"}
    not_run += [f"{a} (AR)" for a in (LLAMACPP_AR, AR) if not has_arm(ar_replies, a)]
    return finish(frame, label="Table 4", title="End to end", caption=caption, formats=formats,
                  notes=[*not_run_note(not_run, "a preset whose run_arms include them"),
                         *block_notes(shown, left_out),
                         *end_to_end_note(replies, ar_replies)],
                  filled_by=FILLED_BY)


def build(records: Records, options: Options) -> pd.DataFrame:
    replies = records.replies("Table 4")
    ar, ar_subset = records.ar_replies("Table 4")
    return table4_end_to_end(replies, ar, options.target, options, records.main_subset,
                             ar_subset)


STAGES = (STAGE_RUN, STAGE_SHORT)
