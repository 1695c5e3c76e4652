"""Figure 8 (§4.5): share of rounds at each verified width.

Paper: "Share of rounds at each verified width, per target, from AdaSpark's rounds on the
instrumented run over the short subset, cold-start rounds excluded."

From the instrumented AdaSpark run's round log; rounds of looped replies left out.
"""

from __future__ import annotations

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
#: Widths under this share are summed as "other widths" in the caption, as the paper does.
MIN_SHARE = 0.01


def width_shares(rounds: pd.DataFrame) -> pd.Series:
    """Share of rounds at each width (cold-start rounds and looped replies left out)."""
    r = without_looped(rounds)
    r = r[~r["why"].isin(COLD_START)]
    if r.empty:
        return pd.Series(dtype=float)
    return r["width"].value_counts(normalize=True).sort_index()


def figure8_widths(rounds: pd.DataFrame, target: str) -> Figure:
    """Figure 8 from AdaSpark's round log (one panel: this target)."""
    shares = width_shares(rounds)
    kept = without_looped(rounds)
    n = len(kept[~kept["why"].isin(COLD_START)])
    with style():
        fig, (ax,) = panels(1)
        ax.set_title(target)
        if shares.empty:
            not_run(ax, "no AdaSpark round logged", f"stage {STAGE_INSTRUMENTED}")
            return attach_caption(fig, "No AdaSpark round was logged.", label="Figure 8",
                                  title="Widths chosen", filled_by=FILLED_BY, complete=False)
        ax.bar(shares.index.astype(int), 100 * shares.to_numpy(), color=COLOURS["blue"],
               width=0.8)
        ax.set_xlabel("rows verified")
        ax.set_ylabel("share of rounds (%)")
        big = shares[shares >= MIN_SHARE]
        listed = ", ".join(f"{int(w)} rows {s:.0%}" for w, s in big.items())
        other = " other widths under 1%" if (shares < MIN_SHARE).any() else ""
        caption = (
            f"Share of rounds at each verified width on {target}, from AdaSpark's rounds on the "
            "instrumented run, cold-start rounds excluded. "
            f"{target}: {listed}{',' if other else ''}{other} ({n:,} rounds)."
        )
        return attach_caption(fig, caption, label="Figure 8", title="Widths chosen",
                              filled_by=FILLED_BY)


def build(records: Records, options: Options) -> Figure:
    rounds = records.rounds("Figure 8")
    return figure8_widths(rounds[rounds["arm"].astype(str) == ADASPARK], options.target)


STAGES = (STAGE_INSTRUMENTED,)
