"""Figure 6 (§4.1): where the gain over llama.cpp comes from.

Paper: "The engine factor is imparo DSpark over llama.cpp DSpark, the two engines running the
same algorithm (a chain of at most three draft tokens); the scheduler factor is AdaSpark over
imparo DSpark, on the same engine; the total is AdaSpark over llama.cpp DSpark, over the replies
both engines served [...]. Whiskers are 95% bootstrap intervals over conversations."

Arms: ``chain3`` over ``llamacpp-chain`` (engine), ``adaspark`` over ``chain3`` (scheduler),
``adaspark`` over ``llamacpp-chain`` (total), from the main runs.
"""

from __future__ import annotations

import math

import pandas as pd
from matplotlib.figure import Figure

from adaspark.analysis.bootstrap import DEFAULT_CONFIDENCE
from adaspark.analysis.figures.style import COLOURS, attach_caption, not_run, panels, style
from adaspark.analysis.records import ADASPARK, CHAIN3, LLAMACPP_CHAIN, STAGE_RUN, Options, Records
from adaspark.analysis.tables.common import compare_or_none

FILLED_BY = "every preset (the run stage)"
FACTORS: tuple[tuple[str, str, str], ...] = (
    ("engine", CHAIN3, LLAMACPP_CHAIN),
    ("scheduler", ADASPARK, CHAIN3),
    ("total", ADASPARK, LLAMACPP_CHAIN),
)


def figure6_gain_factors(replies: pd.DataFrame, target: str, options: Options) -> Figure:
    """Figure 6 from the main runs' per-reply rows (one group of bars: this target)."""
    results = {name: compare_or_none(replies, a, b, options) for name, a, b in FACTORS}
    with style():
        fig, (ax,) = panels(1)
        ax.set_title(target)
        if all(r is None for r in results.values()):
            not_run(ax, "llamacpp-chain, chain3, adaspark", f"stage {STAGE_RUN}")
            return attach_caption(fig, "None of the three comparisons could be made.",
                                  label="Figure 6", title="Engine and scheduler factors",
                                  filled_by=FILLED_BY, complete=False)
        cols = [COLOURS["sky"], COLOURS["blue"], COLOURS["black"]]
        for i, (name, _, _) in enumerate(FACTORS):
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
        ax.set_xticks(range(len(FACTORS)), [f for f, _, _ in FACTORS])
        ax.set_xlim(-0.6, len(FACTORS) - 0.4)
        ax.set_ylabel("decode speed ratio")
        ax.set_ylim(bottom=0)
        parts = [f"{name} {results[name].ratio:.2f}× [{results[name].lo:.2f}, "
                 f"{results[name].hi:.2f}]" for name, _, _ in FACTORS
                 if results[name] is not None]
        prod = (results["engine"].ratio * results["scheduler"].ratio
                if results["engine"] and results["scheduler"] else math.nan)
        caption = (
            f"Where the gain over llama.cpp comes from on {target}. The engine factor is our "
            "engine's 3-pick chain over llama.cpp DSpark (the same algorithm); the scheduler "
            "factor is AdaSpark over that chain, on the same engine; the total is AdaSpark over "
            f"llama.cpp DSpark. Whiskers are {DEFAULT_CONFIDENCE:.0%} bootstrap intervals "
            "over conversations. " + "; ".join(parts) + "."
            + (f" Product of the two factors: {prod:.2f}×." if not math.isnan(prod) else "")
        )
        return attach_caption(fig, caption, label="Figure 6", title="Engine and scheduler factors",
                              filled_by=FILLED_BY,
                              complete=all(r is not None for r in results.values()))


def build(records: Records, options: Options) -> Figure:
    return figure6_gain_factors(records.replies("Figure 6"), options.target, options)


STAGES = (STAGE_RUN,)
