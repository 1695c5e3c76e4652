"""Table 8 (§4.4): the scheduler's gain by workload.

Paper: "AdaSpark over imparo DSpark (same engine, a chain of at most three draft tokens),
geometric mean of per-reply decode ratios per source, looped replies excluded."

Arms: ``adaspark`` over ``chain3``, per source of the main subset and over all replies: the
draft-model block (:data:`adaspark.analysis.records.DRAFT_MODEL_BLOCK`), whose chain stands where
the paper has imparo DSpark and is named for what it is.
"""

from __future__ import annotations

import math

import pandas as pd

from adaspark.analysis.bootstrap import DEFAULT_CONFIDENCE
from adaspark.analysis.records import (
    DRAFT_MODEL_BLOCK,
    SOURCES,
    STAGE_RUN,
    Options,
    Records,
    has_arm,
)
from adaspark.analysis.tables.common import compare_or_none, finish, not_run_note, stand_in_note

FILLED_BY = "every preset (the run stage)"


def table8_by_workload(replies: pd.DataFrame, target: str, options: Options) -> pd.DataFrame:
    """Table 8 from the main runs' per-reply rows (one column: this target)."""
    block = DRAFT_MODEL_BLOCK
    by_set = compare_or_none(replies, block.adaspark, block.chain, options, by="set")
    overall = compare_or_none(replies, block.adaspark, block.chain, options)
    names = [name for _, name, _ in SOURCES] + ["all replies"]
    values = [math.nan if not by_set or s not in by_set else by_set[s].ratio
              for s, _, _ in SOURCES]
    values.append(math.nan if overall is None else overall.ratio)
    frame = pd.DataFrame({"source": names, target: values})
    counts = ""
    if overall is not None:
        counts = (f" ({overall.n_replies} replies, {overall.n_looped_excluded} looped and "
                  f"{overall.n_single_delta_excluded} single-delta left out)")
    caption = (
        f"The scheduler's gain by workload on {target}: {block.adaspark_label} over "
        f"{block.chain_label} ({block.adaspark} over {block.chain}: our engine's chain of at "
        "most three draft tokens), geometric mean of per-reply decode "
        f"ratios per source{counts}, looped replies excluded; a source the subset does not "
        f"hold is a dash. Intervals: {DEFAULT_CONFIDENCE:.0%} bootstrap over "
        "conversations"
        + (f", all replies {overall.lo:.2f}-{overall.hi:.2f}." if overall is not None else ".")
    )
    not_run = [a for a in (block.adaspark, block.chain) if not has_arm(replies, a)]
    return finish(frame, label="Table 8", title="Gain by workload", caption=caption,
                  formats={target: "{:.2f}"},
                  notes=[*not_run_note(not_run, "every preset"), stand_in_note(block)],
                  filled_by=FILLED_BY)


def build(records: Records, options: Options) -> pd.DataFrame:
    return table8_by_workload(records.replies("Table 8"), options.target, options)


STAGES = (STAGE_RUN,)
