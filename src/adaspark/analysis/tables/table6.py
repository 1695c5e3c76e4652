"""Table 6 (§4.2): the ablation, per source.

Paper: "The first row of each block is llama.cpp DSpark's tok/s per source; every other cell is
the arm over it, the geometric mean of per-reply decode ratios (looped replies excluded), with
the 95% bootstrap interval over conversations in the last column. From the fixed tree down, each
row adds to the row above: the cost model's width, then the fitted acceptance model and n-gram
candidates together."

A block of rows per drafter kind (:data:`adaspark.analysis.records.BLOCKS`) where the paper has
one per target, each over its own llama.cpp baseline. The draft-model block, top to bottom:
``llamacpp-chain`` (tok/s; llama-server's draft-simple chain), ``chain3``, ``fullchain``,
``tree16``, ``costmodel``, ``adaspark``; the DSpark block ``llamacpp-dspark`` (tok/s),
``chain3-dspark``, ``adaspark-dspark`` (it has no ablation arms). A block none of whose arms ran
is left out and named in a note.
"""

from __future__ import annotations

import math

import pandas as pd

from adaspark.analysis.records import (
    COSTMODEL,
    FULLCHAIN,
    SOURCE_ABBR,
    SOURCES,
    STAGE_RUN,
    TREE16,
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
    throughput_or_none,
)
from adaspark.analysis.tables.render import ci_text

FILLED_BY = "preset=paper (fullchain, tree16 and costmodel)"
#: The paper's names of the ablation's middle rows (a block's ``ablation`` arms).
ABLATION_NAMES: dict[str, str] = {
    FULLCHAIN: "full-block chain",
    TREE16: "fixed 16-row tree",
    COSTMODEL: "cost-model width",
}


def ladder(block: DrafterBlock) -> tuple[tuple[str, str], ...]:
    """A block's rows below its tok/s row: arm and name, the chain to AdaSpark."""
    return ((block.chain, f"{block.chain_label} (3-token chain)"),
            *((a, ABLATION_NAMES[a]) for a in block.ablation),
            (block.adaspark, f"{block.adaspark_label} (+ acceptance model, n-gram)"))


def base_row(block: DrafterBlock) -> str:
    """A block's first row: its llama.cpp baseline's tok/s."""
    return f"{block.llamacpp_label} (tok/s)"


def _arms(block: DrafterBlock) -> tuple[str, ...]:
    return (block.llamacpp, *(a for a, _ in ladder(block)))


def table6_ablation(replies: pd.DataFrame, target: str, options: Options) -> pd.DataFrame:
    """Table 6 from the main runs' per-reply rows: a block of rows per drafter kind that ran."""
    abbrs = [SOURCE_ABBR[s] for s, _, _ in SOURCES]
    shown, left_out = shown_blocks(replies, _arms)
    rows: list[dict[str, object]] = []
    base_rows: list[int] = []
    not_run: list[str] = []
    for b in shown:
        base = throughput_or_none(replies, b.llamacpp, by="set")
        total = throughput_or_none(replies, b.llamacpp)
        base_rows.append(len(rows))
        rows.append({"target": target, "arm": base_row(b),
                     **{SOURCE_ABBR[s]: (math.nan if not base or s not in base
                                         else base[s].tokens_per_s) for s, _, _ in SOURCES},
                     "all replies": math.nan if total is None else total.tokens_per_s})
        for arm, name in ladder(b):
            by_set = compare_or_none(replies, arm, b.llamacpp, options, by="set")
            overall = compare_or_none(replies, arm, b.llamacpp, options)
            rows.append({"target": target, "arm": name,
                         **{SOURCE_ABBR[s]: (math.nan if not by_set or s not in by_set
                                             else by_set[s].ratio) for s, _, _ in SOURCES},
                         "all replies": None if overall is None
                         else ci_text(overall.ratio, overall.lo, overall.hi)})
        not_run += [name for arm, name in ((b.llamacpp, b.llamacpp_label), *ladder(b))
                    if not has_arm(replies, arm)]
    frame = pd.DataFrame(rows, columns=["target", "arm", *abbrs, "all replies"])
    formats = {a: "{:.2f}" for a in abbrs}
    caption = (
        f"Ablation on {target}, a block of rows per drafter kind ("
        + "; ".join(f"{b.kind}: over {b.llamacpp_label}, {b.llamacpp}" for b in shown)
        + "). The first row of each block is its llama.cpp baseline's tok/s per source; every "
        "other cell is the arm over that baseline, the geometric mean of per-reply decode "
        "ratios (looped replies excluded), with the bootstrap interval over conversations in "
        "the last column. Sources: " + ", ".join(f"{a} {n}" for _, n, a in SOURCES) + "."
    )
    return finish(frame, label="Table 6", title="Ablation", caption=caption, formats=formats,
                  notes=[*not_run_note(not_run, FILLED_BY),
                         *block_notes(shown, left_out, arms_of=_arms)],
                  filled_by=FILLED_BY, row_formats={i: "{:.1f}" for i in base_rows})


def build(records: Records, options: Options) -> pd.DataFrame:
    return table6_ablation(records.replies("Table 6"), options.target, options)


STAGES = (STAGE_RUN,)
