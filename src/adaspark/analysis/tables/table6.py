"""Table 6 (§4.2): the ablation, per source.

Paper: "The first row of each block is llama.cpp DSpark's tok/s per source; every other cell is
the arm over it, the geometric mean of per-reply decode ratios (looped replies excluded), with
the 95% bootstrap interval over conversations in the last column. From the fixed tree down, each
row adds to the row above: the cost model's width, then the fitted acceptance model and n-gram
candidates together."

Arms, top to bottom: ``llamacpp-chain`` (tok/s), ``chain3``, ``fullchain``, ``tree16``,
``costmodel``, ``adaspark``.
"""

from __future__ import annotations

import math

import pandas as pd

from adaspark.analysis.records import (
    ADASPARK,
    CHAIN3,
    COSTMODEL,
    FULLCHAIN,
    LLAMACPP_CHAIN,
    SOURCE_ABBR,
    SOURCES,
    STAGE_RUN,
    TREE16,
    Options,
    Records,
    has_arm,
)
from adaspark.analysis.tables.common import (
    compare_or_none,
    finish,
    not_run_note,
    throughput_or_none,
)
from adaspark.analysis.tables.render import ci_text

FILLED_BY = "preset=paper (fullchain, tree16 and costmodel)"
#: The ablation's rows: arm and the paper's name for it.
LADDER: tuple[tuple[str, str], ...] = (
    (CHAIN3, "imparo DSpark (3-token chain)"),
    (FULLCHAIN, "full-block chain"),
    (TREE16, "fixed 16-row tree"),
    (COSTMODEL, "cost-model width"),
    (ADASPARK, "AdaSpark (+ acceptance model, n-gram)"),
)
BASE_ROW = "llama.cpp DSpark (tok/s)"


def table6_ablation(replies: pd.DataFrame, target: str, options: Options) -> pd.DataFrame:
    """Table 6 from the main runs' per-reply rows (one block: this target)."""
    abbrs = [SOURCE_ABBR[s] for s, _, _ in SOURCES]
    rows = []
    base = throughput_or_none(replies, LLAMACPP_CHAIN, by="set")
    total = throughput_or_none(replies, LLAMACPP_CHAIN)
    rows.append({"target": target, "arm": BASE_ROW,
                 **{SOURCE_ABBR[s]: (math.nan if not base or s not in base
                                     else base[s].tokens_per_s) for s, _, _ in SOURCES},
                 "all replies": math.nan if total is None else total.tokens_per_s})
    for arm, name in LADDER:
        by_set = compare_or_none(replies, arm, LLAMACPP_CHAIN, options, by="set")
        overall = compare_or_none(replies, arm, LLAMACPP_CHAIN, options)
        rows.append({"target": target, "arm": name,
                     **{SOURCE_ABBR[s]: (math.nan if not by_set or s not in by_set
                                         else by_set[s].ratio) for s, _, _ in SOURCES},
                     "all replies": None if overall is None
                     else ci_text(overall.ratio, overall.lo, overall.hi)})
    frame = pd.DataFrame(rows, columns=["target", "arm", *abbrs, "all replies"])
    formats = {a: "{:.2f}" for a in abbrs}
    not_run = [name for arm, name in ((LLAMACPP_CHAIN, "llama.cpp DSpark"), *LADDER)
               if not has_arm(replies, arm)]
    caption = (
        f"Ablation on {target}. The first row is llama.cpp DSpark's tok/s per source; every "
        "other cell is the arm over it, the geometric mean of per-reply decode ratios (looped "
        "replies excluded), with the bootstrap interval over conversations in the last column. "
        "Sources: " + ", ".join(f"{a} {n}" for _, n, a in SOURCES) + "."
    )
    return finish(frame, label="Table 6", title="Ablation", caption=caption, formats=formats,
                  notes=not_run_note(not_run, FILLED_BY), filled_by=FILLED_BY,
                  row_formats={0: "{:.1f}"})


def build(records: Records, options: Options) -> pd.DataFrame:
    return table6_ablation(records.replies("Table 6"), options.target, options)


STAGES = (STAGE_RUN,)
