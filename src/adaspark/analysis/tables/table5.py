"""Table 5 (§4.1): AdaSpark over its llama.cpp baseline on the main subset, the held-out
conversations and the whole test set, a row per drafter block.

Paper: "geometric mean of per-reply decode ratios with the 95% bootstrap interval over
conversations, and the replies it rests on. Looped and single-delta replies are left out as in
Table 4; the last column counts the held-out replies that reached the cap."

The held-out runs are the heldout stage's (``runs/extra/heldout``, preset=paper); the whole test
set is the main subset and the held-out conversations together. One row per drafter block
(:data:`adaspark.analysis.records.BLOCKS`) that ran, each over its own llama.cpp baseline: the
draft-model block ``adaspark`` over ``llamacpp-chain`` (llama-server's draft-simple chain), the
DSpark block ``adaspark-dspark`` over ``llamacpp-dspark``; a block that did not run is left out
and named in a note.
"""

from __future__ import annotations

import pandas as pd

from adaspark.analysis import stats
from adaspark.analysis.bootstrap import DEFAULT_CONFIDENCE
from adaspark.analysis.records import (
    STAGE_HELDOUT,
    STAGE_RUN,
    DrafterBlock,
    Options,
    Records,
    has_arm,
)
from adaspark.analysis.tables.common import (
    block_notes,
    compare_or_none,
    finish,
    not_run_note,
    shown_blocks,
)
from adaspark.analysis.tables.render import ci_text

FILLED_BY = "preset=paper (the heldout stage)"
COLUMNS = ("target", "drafter", "baseline", "evaluation ratio", "evaluation replies",
           "held-out ratio", "held-out replies", "whole-set ratio", "whole-set replies",
           "looped, held out")


def _cell(replies: pd.DataFrame | None, block: DrafterBlock,
          options: Options) -> tuple[str | None, int | None]:
    c = compare_or_none(replies, block.adaspark, block.llamacpp, options)
    return (None, None) if c is None else (ci_text(c.ratio, c.lo, c.hi), c.n_replies)


def table5_heldout(replies: pd.DataFrame, heldout: pd.DataFrame | None, target: str,
                   options: Options, subset: str | None = None) -> pd.DataFrame:
    """Table 5 from the main runs' rows and the held-out runs' rows (empty: dashes), a row per
    drafter block that ran on the main subset or the held-out conversations."""
    both_runs = replies if heldout is None else pd.concat([replies, heldout], ignore_index=True)
    shown, left_out = shown_blocks(both_runs, lambda b: (b.llamacpp, b.adaspark))
    rows, not_heldout = [], []
    for b in shown:
        ev, n_ev = _cell(replies, b, options)
        ran_heldout = (heldout is not None and has_arm(heldout, b.adaspark)
                       and has_arm(heldout, b.llamacpp))
        ho, n_ho = _cell(heldout, b, options) if ran_heldout else (None, None)
        whole, n_whole, looped = None, None, None
        if ran_heldout:
            assert heldout is not None
            whole, n_whole = _cell(both_runs, b, options)
            looped = stats.count_looped(heldout, [b.adaspark, b.llamacpp])
        else:
            not_heldout.append(b)
        rows.append({
            "target": target, "drafter": b.kind, "baseline": b.llamacpp_label,
            "evaluation ratio": ev, "evaluation replies": n_ev, "held-out ratio": ho,
            "held-out replies": n_ho, "whole-set ratio": whole, "whole-set replies": n_whole,
            "looped, held out": looped,
        })
    frame = pd.DataFrame(rows, columns=list(COLUMNS))
    caption = (
        f"AdaSpark over its llama.cpp baseline on {target}, a row per drafter kind ("
        + "; ".join(f"{b.kind}: {b.adaspark_label} over {b.llamacpp_label}, {b.adaspark} over "
                    f"{b.llamacpp}" for b in shown)
        + f"), on the {subset or 'main'} subset (the 'evaluation' columns), on the held-out "
        "conversations and on both together: geometric mean of per-reply decode ratios with "
        f"the {DEFAULT_CONFIDENCE:.0%} bootstrap interval over conversations, and the replies "
        "it rests on; the last column counts the held-out replies that reached the cap."
    )
    formats = {c: "{:,.0f}" for c in COLUMNS if "replies" in c or c.startswith("looped")}
    what = ["the held-out conversations" + ("" if len(shown) == 1 else f" ({b.kind})")
            for b in not_heldout]
    notes = [*not_run_note(what, FILLED_BY), *block_notes(
        shown, left_out, arms_of=lambda b: (b.llamacpp, b.adaspark))]
    return finish(frame, label="Table 5", title="Held-out conversations", caption=caption,
                  formats=formats, notes=notes, filled_by=FILLED_BY)


def build(records: Records, options: Options) -> pd.DataFrame:
    return table5_heldout(records.replies("Table 5"), records.heldout, options.target, options,
                          records.main_subset)


STAGES = (STAGE_RUN, STAGE_HELDOUT)
