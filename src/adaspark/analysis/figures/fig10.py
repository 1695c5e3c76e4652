"""Figure 10 (§4.7): acceptance calibration.

Paper: "Accepted nodes per round against the expected accepted nodes S at the chosen width, in
ten equal-count bins of S per series, on the instrumented run over the short subset, over the
rounds whose width the chooser set from S (cold-start rounds have none). The dashed diagonal is
perfect calibration. Realised over expected accepted nodes: [...]. The drafter-head series is
the cost-model arm, which prices the tree with the head-based estimate."

Series: AdaSpark ("fitted") and the cost-model arm ("drafter head") from the instrumented round
logs, rounds with ``why == "choice"``; accepted nodes are the accepted path less its anchor.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from adaspark.analysis.figures.style import COLOURS, attach_caption, colour, not_run, panels, style
from adaspark.analysis.records import (
    ADASPARK,
    CHOICE,
    COSTMODEL,
    STAGE_INSTRUMENTED,
    Options,
    Records,
    accepted_nodes,
    without_looped,
)

FILLED_BY = "every preset (the instrumented stage)"
SERIES: tuple[tuple[str, str], ...] = ((ADASPARK, "fitted"), (COSTMODEL, "drafter head"))
N_BINS = 10


def calibration_bins(rounds: pd.DataFrame, n_bins: int = N_BINS) -> pd.DataFrame:
    """Equal-count bins of S: mean S and mean accepted nodes per bin (columns ``s``,
    ``accepted``, ``n``)."""
    r = without_looped(rounds)
    r = r[(r["why"] == CHOICE) & r["s"].notna()]
    if r.empty:
        return pd.DataFrame(columns=["s", "accepted", "n"])
    r = r.assign(accepted=accepted_nodes(r)).sort_values("s", kind="stable")
    bins = np.array_split(np.arange(len(r)), min(n_bins, len(r)))
    return pd.DataFrame([{"s": float(r["s"].iloc[b].mean()),
                          "accepted": float(r["accepted"].iloc[b].mean()), "n": len(b)}
                         for b in bins if len(b)])


def realised_over_expected(rounds: pd.DataFrame) -> tuple[float, int]:
    """Accepted nodes over expected accepted nodes S, pooled; and the number of rounds."""
    r = without_looped(rounds)
    r = r[(r["why"] == CHOICE) & r["s"].notna()]
    s = float(r["s"].sum())
    return (float(accepted_nodes(r).sum()) / s if s > 0 else float("nan")), len(r)


def figure10_calibration(rounds: pd.DataFrame, target: str) -> Figure:
    """Figure 10 from the instrumented round logs (column ``arm``: adaspark, costmodel)."""
    with style():
        fig, (ax,) = panels(1)
        ax.set_title(target)
        parts, top, drawn = [], 0.0, 0
        for i, (arm, name) in enumerate(SERIES):
            sub = rounds[rounds["arm"].astype(str) == arm]
            bins = calibration_bins(sub)
            if bins.empty:
                parts.append(f"{target}, {name}: not run in this preset")
                continue
            ratio, n = realised_over_expected(sub)
            ax.plot(bins["s"], bins["accepted"], "o-", color=colour(i), label=name)
            top = max(top, float(bins[["s", "accepted"]].to_numpy().max()))
            parts.append(f"{target}, {name} {ratio:.3f} ({n:,} rounds)")
            drawn += 1
        if not drawn:
            not_run(ax, "no round whose width the chooser set", f"stage {STAGE_INSTRUMENTED}")
            return attach_caption(fig, "No round whose width the chooser set from S.",
                                  label="Figure 10", title="Acceptance calibration",
                                  filled_by=FILLED_BY, complete=False)
        lim = 1.05 * top
        ax.plot([0, lim], [0, lim], "--", color=COLOURS["grey"], lw=1, label="calibrated")
        ax.set_xlim(0, lim)
        ax.set_ylim(0, lim)
        ax.set_xlabel("expected accepted nodes S")
        ax.set_ylabel("accepted nodes per round")
        ax.legend(frameon=False, loc="upper left")
        caption = (
            "Accepted nodes per round against the expected accepted nodes S at the chosen width, "
            f"in {N_BINS} equal-count bins of S per series, on the instrumented run, over the "
            "rounds whose width the chooser set from S (cold-start rounds have none). The dashed "
            "diagonal is perfect calibration. Realised over expected accepted nodes: "
            + "; ".join(parts) + ". The drafter-head series is the cost-model arm, which prices "
            "the tree with the head-based estimate."
        )
        return attach_caption(fig, caption, label="Figure 10", title="Acceptance calibration",
                              filled_by=FILLED_BY, complete=drawn == len(SERIES))


def build(records: Records, options: Options) -> Figure:
    return figure10_calibration(records.rounds("Figure 10"), options.target)


STAGES = (STAGE_INSTRUMENTED,)
