"""Figure 4 (§3.3): per request, how much lower the fitted model's log loss is than the
head-based estimate's.

Paper: "for each request, how much lower the fitted model's log loss per labelled node is than
that of the head-based estimate it competes with (1 − fitted / head-based), both scored before
either learns from the request's labels. A bar above the dashed zero line (blue) is a request
the fitted model predicted better. Shaded bands mark the six sources in serving order. [...] At
the changes of source, the first request of the new source ranks [...] among that source's other
requests by this reduction (0 lowest, 1 highest) and below their median at [...] of them."

Reads the same request summaries as Table 2 (AdaSpark's first run, else its instrumented run),
looped replies left out.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from adaspark.analysis.figures.style import COLOURS, attach_caption, not_run, panels, style
from adaspark.analysis.records import SOURCE_ABBR, STAGE_INSTRUMENTED, STAGE_RUN, Options, Records
from adaspark.analysis.tables.table2 import adaspark_summaries
from adaspark.runs.rows import LOOPED

FILLED_BY = "every preset that runs AdaSpark (the run or the instrumented stage)"


def source_change_ranks(reduction: pd.Series, sources: pd.Series) -> list[tuple[float, bool]]:
    """At each change of source in serving order, the new source's first request's rank among
    that source's other requests by ``reduction`` (0 lowest, 1 highest; ties count half), and
    whether it lies below their median."""
    ranks = []
    values, srcs = reduction.to_numpy(dtype=float), sources.astype(str).to_numpy()
    for i in range(1, len(values)):
        if srcs[i] == srcs[i - 1]:
            continue
        others = values[(srcs == srcs[i]) & (np.arange(len(values)) != i)]
        if len(others) == 0:
            continue
        below = float((others < values[i]).sum()) + 0.5 * float((others == values[i]).sum())
        ranks.append((below / len(others), bool(values[i] < np.median(others))))
    return ranks


def figure4_acceptance_per_request(summaries: pd.DataFrame, target: str) -> Figure:
    """Figure 4 from one run's request summaries in serving order (``order``)."""
    s = summaries.sort_values("order", kind="stable")
    s = s[s["status"].astype(str) != LOOPED] if "status" in s.columns else s
    ok = s["logloss_fitted"].notna() & s["logloss_head"].notna() if len(s) else []
    s = s[ok] if len(s) else s
    with style():
        fig, (ax,) = panels(1)
        fig.set_size_inches(7.5, 3.0)
        ax.set_title(target)
        if s.empty:
            not_run(ax, "no request scored by the fitted model", "AdaSpark (stage run)")
            return attach_caption(fig, "No AdaSpark request was scored by both estimates.",
                                  label="Figure 4", title="Acceptance model per request",
                                  filled_by=FILLED_BY, complete=False)
        red = 1.0 - s["logloss_fitted"].astype(float) / s["logloss_head"].astype(float)
        x = np.arange(len(s))
        cols = [COLOURS["blue"] if v > 0 else COLOURS["vermillion"] for v in red]
        srcs = s["set"].astype(str).to_numpy()
        start = 0
        for i in range(1, len(srcs) + 1):
            if i == len(srcs) or srcs[i] != srcs[start]:
                shade = "#F2F2F2" if len({*srcs[:start]}) % 2 == 0 else "#FFFFFF"
                ax.axvspan(start - 0.5, i - 0.5, color=shade, zorder=0)
                ax.text((start + i - 1) / 2, 0.98, SOURCE_ABBR.get(srcs[start], srcs[start]),
                        transform=ax.get_xaxis_transform(), ha="center", va="top",
                        fontsize=7, color=COLOURS["grey"])
                start = i
        ax.bar(x, red.to_numpy(), color=cols, width=0.8, zorder=2)
        ax.axhline(0, ls="--", color=COLOURS["black"], lw=0.8, zorder=3)
        ax.set_xlabel("request, in serving order")
        ax.set_ylabel("1 − fitted / head-based")
        ax.set_xlim(-0.5, len(s) - 0.5)
        later = red.iloc[1:]
        won = int((later > 0).sum())
        ranks = source_change_ranks(red.reset_index(drop=True),
                                    s["set"].reset_index(drop=True))
        below = sum(b for _, b in ranks)
        caption = (
            f"The acceptance model while serving from an empty store on {target} (looped "
            "replies left out): for each request, how much lower the fitted model's log loss per "
            "labelled node is than the head-based estimate's (1 − fitted / head-based), both "
            "scored before either learns from the request's labels; blue bars are requests the "
            "fitted model predicted better; shaded bands mark the sources in serving order. The "
            f"fitted model is lower on {won} of {len(later)} requests after the first."
            + (f" At the {len(ranks)} changes of source, the first request of the new source "
               f"ranks {np.mean([r for r, _ in ranks]):.2f} on average among that source's "
               f"other requests by this reduction (0 lowest, 1 highest) and below their median "
               f"at {below} of them."
               if ranks else "")
        )
        return attach_caption(fig, caption, label="Figure 4", title="Acceptance model per request",
                              filled_by=FILLED_BY)


def build(records: Records, options: Options) -> Figure:
    summ, _ = adaspark_summaries(records)
    return figure4_acceptance_per_request(summ, options.target)


STAGES = (STAGE_RUN, STAGE_INSTRUMENTED)
