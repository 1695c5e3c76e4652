"""Figure 3 (§3.2): verify time against the number of rows verified.

Paper: "Verify time against the number of rows verified, on each target, at two context lengths
(median over two passes of the per-run median over rounds that verified exactly n rows). Each
panel has its own vertical scale. T(16)/T(2) at 1,596 tokens: [...]". As the paper, the two
lengths drawn are the survey's middle and longest contexts; ours adds, dotted, what n plain
decodes would cost (n times T(1) at the middle context) when width 1 was surveyed: the line a
compute-bound verify follows.
"""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure

from adaspark.analysis.figures.style import COLOURS, attach_caption, not_run, panels, style
from adaspark.analysis.records import STAGE_SURVEY, Options, Records
from adaspark.replay.survey import survey_medians

FILLED_BY = "every preset (the survey stage)"


def ratio_at(med: pd.DataFrame, context: int, num: int, den: int) -> float | None:
    """T(num)/T(den) at ``context`` from survey medians, or None."""
    at = med[med["context"] == context].set_index("width")["verify_ms"]
    if num in at.index and den in at.index:
        return float(at[num] / at[den])
    return None


def figure3_verify_cost(survey: pd.DataFrame, target: str) -> Figure:
    """Figure 3 from survey rows (:mod:`adaspark.replay.survey` columns): one panel, this
    target."""
    med = survey_medians(survey)
    with style():
        fig, (ax,) = panels(1)
        ax.set_title(target)
        if med.empty:
            not_run(ax, "no survey medians", f"stage {STAGE_SURVEY}")
            caption = "Verify time against rows verified: the survey holds no kept round."
            return attach_caption(fig, caption, label="Figure 3", title="Verify cost",
                                  filled_by=FILLED_BY, complete=False)
        contexts = sorted(int(c) for c in med["context"].unique())
        mid, far = contexts[len(contexts) // 2], contexts[-1]
        lines = [(mid, COLOURS["blue"], "-")]
        if far != mid:
            lines.append((far, COLOURS["vermillion"], "--"))
        for ctx, col, ls in lines:
            at = med[med["context"] == ctx].sort_values("width")
            ax.plot(at["width"], at["verify_ms"], ls, color=col, marker="o" if ls == "-" else None,
                    label=f"c = {ctx:,}")
        t1 = med[(med["context"] == mid) & (med["width"] == 1)]["verify_ms"]
        if len(t1):
            ws = sorted(med.loc[med["context"] == mid, "width"].unique())
            ax.plot(ws, [w * float(t1.iloc[0]) for w in ws], ":", color=COLOURS["grey"],
                    label="n plain decodes")
        ax.set_xlabel("rows verified n")
        ax.set_ylabel("verify (ms)")
        ax.set_ylim(bottom=0)
        ax.legend(frameon=False)
        r = ratio_at(med, mid, 16, 2)
        n_runs = int(med["n_runs"].max())
        caption = (
            f"Verify time against the number of rows verified on {target}, at "
            + (f"{mid:,} and {far:,}" if far != mid else f"{mid:,}")
            + f" tokens of context (median over {n_runs} runs of the per-run median over "
            "rounds that verified exactly n rows)."
            + (f" T(16)/T(2) at {mid:,} tokens: {target} {r:.2f}." if r is not None else "")
        )
        return attach_caption(fig, caption, label="Figure 3", title="Verify cost",
                              filled_by=FILLED_BY)


def build(records: Records, options: Options) -> Figure:
    return figure3_verify_cost(records.survey("Figure 3"), options.target)


STAGES = (STAGE_SURVEY,)
