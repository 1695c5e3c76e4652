"""Figure 6 (§4.1): where the gain over llama.cpp comes from.

Paper: "The engine factor is imparo DSpark over llama.cpp DSpark, the two engines running the
same algorithm (a chain of at most three draft tokens); the scheduler factor is AdaSpark over
imparo DSpark, on the same engine; the total is AdaSpark over llama.cpp DSpark, over the replies
both engines served [...]. Whiskers are 95% bootstrap intervals over conversations."

A panel per drafter block (:data:`adaspark.analysis.records.BLOCKS`) that ran, each over its own
llama.cpp baseline: the chain over the baseline (engine), AdaSpark over the chain (scheduler),
AdaSpark over the baseline (total), from the main runs. The draft-model block is ``chain3`` over
``llamacpp-chain`` (llama-server's draft-simple chain), ``adaspark`` over ``chain3``, ``adaspark``
over ``llamacpp-chain``; the DSpark block the same with ``chain3-dspark``, ``adaspark-dspark``
and ``llamacpp-dspark``. A block that did not run has no panel and is named in the caption; when
none ran, one empty panel is marked "not run in this preset".
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from adaspark.analysis.bootstrap import DEFAULT_CONFIDENCE
from adaspark.analysis.figures.style import COLOURS, attach_caption, not_run, panels, style
from adaspark.analysis.records import BLOCKS, STAGE_RUN, DrafterBlock, Options, Records
from adaspark.analysis.tables.common import block_notes, compare_or_none, shown_blocks

FILLED_BY = "every preset (the run stage)"
#: The three factors, by name: numerator and denominator of a block.
FACTORS: tuple[tuple[str, Callable[[DrafterBlock], tuple[str, str]]], ...] = (
    ("engine", lambda b: (b.chain, b.llamacpp)),
    ("scheduler", lambda b: (b.adaspark, b.chain)),
    ("total", lambda b: (b.adaspark, b.llamacpp)),
)


def _factors(replies: pd.DataFrame, block: DrafterBlock, options: Options) -> dict[str, Any]:
    return {name: compare_or_none(replies, *arms(block), options) for name, arms in FACTORS}


def _bars(ax: Axes, results: dict[str, Any]) -> None:
    cols = [COLOURS["sky"], COLOURS["blue"], COLOURS["black"]]
    for i, (name, _) in enumerate(FACTORS):
        c = results[name]
        if c is None:
            ax.text(i, 1.0, "not run in\nthis preset", ha="center", va="bottom", fontsize=7,
                    color=COLOURS["grey"])
            continue
        ax.bar(i, c.ratio, color=cols[i], width=0.6, zorder=2)
        ax.errorbar(i, c.ratio, yerr=[[c.ratio - c.lo], [c.hi - c.ratio]], color="black",
                    capsize=4, lw=1, zorder=3)
        ax.text(i, c.hi, f"{c.ratio:.2f}×", ha="center", va="bottom", fontsize=8)
    ax.axhline(1.0, ls="--", color=COLOURS["grey"], lw=0.8)
    ax.set_xticks(range(len(FACTORS)), [f for f, _ in FACTORS])
    ax.set_xlim(-0.6, len(FACTORS) - 0.4)
    ax.set_ylabel("decode speed ratio")


def _block_caption(block: DrafterBlock, results: dict[str, Any]) -> str:
    parts = [f"{name} {results[name].ratio:.2f}× [{results[name].lo:.2f}, "
             f"{results[name].hi:.2f}]" for name, _ in FACTORS if results[name] is not None]
    prod = (results["engine"].ratio * results["scheduler"].ratio
            if results["engine"] and results["scheduler"] else math.nan)
    return (
        f"{block.kind} block: the engine factor is {block.chain_label} ({block.chain}) over "
        f"{block.llamacpp_label} ({block.llamacpp}), the same algorithm on two engines; the "
        f"scheduler factor is {block.adaspark_label} ({block.adaspark}) over "
        f"{block.chain_label}, on the same engine; the total is {block.adaspark_label} over "
        f"{block.llamacpp_label}"
        + (": " + "; ".join(parts) if parts else ": not run in this preset") + "."
        + (f" Product of the two factors: {prod:.2f}×." if not math.isnan(prod) else ""))


def figure6_gain_factors(replies: pd.DataFrame, target: str, options: Options) -> Figure:
    """Figure 6 from the main runs' per-reply rows: a panel of three bars per drafter block."""
    shown, left_out = shown_blocks(replies)
    results = {b.kind: _factors(replies, b, options) for b in shown}
    with style():
        if all(r is None for res in results.values() for r in res.values()):
            fig, (ax,) = panels(1)
            ax.set_title(target)
            not_run(ax, ", ".join(a for b in BLOCKS for a in b.arms), f"stage {STAGE_RUN}")
            return attach_caption(fig, "None of the comparisons could be made.",
                                  label="Figure 6", title="Engine and scheduler factors",
                                  filled_by=FILLED_BY, complete=False)
        fig, axes = panels(len(shown), sharey=True)
        for ax, b in zip(axes, shown, strict=True):
            ax.set_title(f"{target}: {b.kind}")
            _bars(ax, results[b.kind])
        top = max(c.hi for res in results.values() for c in res.values() if c is not None)
        axes[0].set_ylim(0, max(top, 1.0) * 1.12)  # shared: one scale for every block
        for ax in axes[1:]:
            ax.set_ylabel("")
        caption = (
            f"Where the gain over llama.cpp comes from on {target}, a panel per drafter kind, "
            "each over its own llama.cpp baseline. "
            + " ".join(_block_caption(b, results[b.kind]) for b in shown)
            + f" Whiskers are {DEFAULT_CONFIDENCE:.0%} bootstrap intervals over conversations."
            + "".join(f" {n}" for n in block_notes(shown, left_out))
        )
        return attach_caption(fig, caption, label="Figure 6", title="Engine and scheduler factors",
                              filled_by=FILLED_BY,
                              complete=all(r is not None for res in results.values()
                                           for r in res.values()))


def build(records: Records, options: Options) -> Figure:
    return figure6_gain_factors(records.replies("Figure 6"), options.target, options)


STAGES = (STAGE_RUN,)
