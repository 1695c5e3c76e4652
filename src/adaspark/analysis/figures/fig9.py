"""Figure 9 (§4.6): the cost model's estimate against the measured verify time.

Paper: "measured verify time of each round (dots; hollow dots are cold-start rounds at a width
chosen for measurement) and the cost model's estimate for the width it chose (line), from an
empty store, over the first 160 rounds. Over all [...] rounds, [...] of them cold-start rounds,
the median absolute error of the estimate over the second half of the run is [...]."

From the instrumented AdaSpark run's round log (``measured_verify_s``, ``predicted_verify_s``,
``why``), in serving order.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from adaspark.analysis.figures.style import COLOURS, attach_caption, not_run, panels, style
from adaspark.analysis.records import (
    ADASPARK,
    COLD_START,
    STAGE_INSTRUMENTED,
    Options,
    Records,
    without_looped,
)

FILLED_BY = "every preset (the instrumented stage)"
FIRST_ROUNDS = 160


def estimate_error(rounds: pd.DataFrame) -> float:
    """Median absolute relative error of the estimate over the second half of the run."""
    r = rounds.sort_values("seq")
    half = r.iloc[len(r) // 2:]
    half = half[half["predicted_verify_s"].notna() & (half["measured_verify_s"] > 0)]
    if half.empty:
        return math.nan
    err = (half["predicted_verify_s"] - half["measured_verify_s"]).abs()
    return float((err / half["measured_verify_s"]).median())


def figure9_cost_model(rounds: pd.DataFrame, target: str, first: int = FIRST_ROUNDS) -> Figure:
    """Figure 9 from AdaSpark's round log (one panel: this target)."""
    r = without_looped(rounds).sort_values("seq").reset_index(drop=True)
    with style():
        fig, (ax,) = panels(1)
        fig.set_size_inches(7.5, 3.0)
        ax.set_title(target)
        if r.empty:
            not_run(ax, "no AdaSpark round logged", f"stage {STAGE_INSTRUMENTED}")
            return attach_caption(fig, "No AdaSpark round was logged.", label="Figure 9",
                                  title="Cost model against measured", filled_by=FILLED_BY,
                                  complete=False)
        head = r.iloc[:first]
        x = np.arange(len(head))
        cold = head["why"].isin(COLD_START).to_numpy()
        meas = 1e3 * head["measured_verify_s"].to_numpy(dtype=float)
        ax.scatter(x[~cold], meas[~cold], s=10, color=COLOURS["blue"], label="measured",
                   zorder=3)
        ax.scatter(x[cold], meas[cold], s=12, facecolors="none", edgecolors=COLOURS["blue"],
                   label="measured, cold start", zorder=3)
        pred = 1e3 * head["predicted_verify_s"].astype(float).to_numpy()
        ax.plot(x, pred, color=COLOURS["vermillion"], lw=1.2, label="estimate", zorder=4)
        ax.set_xlabel("round")
        ax.set_ylabel("verify (ms)")
        ax.set_ylim(bottom=0)
        ax.legend(frameon=False, ncols=3, loc="upper right")
        n_cold = int(r["why"].isin(COLD_START).sum())
        err = estimate_error(r)
        cold_s = float(r.loc[r["why"].isin(COLD_START), ["fixed_s", "measured_verify_s"]]
                       .sum().sum())
        caption = (
            f"{target}: measured verify time of each round (dots; hollow dots are cold-start "
            "rounds at a width chosen for measurement) and the cost model's estimate for the "
            f"width it chose (line), from an empty store, over the first {len(head)} rounds. "
            f"Over all {len(r):,} rounds, {n_cold} of them cold-start rounds ({cold_s:.1f} s), "
            + (f"the median absolute error of the estimate over the second half of the run is "
               f"{err:.1%}." if not math.isnan(err) else "no round of the second half has an "
               "estimate.")
        )
        return attach_caption(fig, caption, label="Figure 9", title="Cost model against measured",
                              filled_by=FILLED_BY)


def build(records: Records, options: Options) -> Figure:
    rounds = records.rounds("Figure 9")
    return figure9_cost_model(rounds[rounds["arm"].astype(str) == ADASPARK], options.target)


STAGES = (STAGE_INSTRUMENTED,)
