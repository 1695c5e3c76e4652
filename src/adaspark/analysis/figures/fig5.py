"""Figure 5 (§3.4): what the second eight rows of a tree cost and what they buy.

Paper: "Each point is one target at one context (443, 1,596 or 8,444 tokens) and one of three
prompts, from runs of 256 tokens at a fixed width of 8 and of 16 rows (acceptance model on,
n-gram candidates off): the extra time per round of a 16-row tree over an 8-row tree (the drafter
included), against the extra tokens it accepts per round, both relative to the 8-row tree. Above
the diagonal the wider tree decodes faster."

Reads the fig5 stage's rows (:data:`FIG5_COLUMNS`, one per run). Tokens per round are the
tokens a round commits, so that speed is tokens per round over time per round and the diagonal is
exactly break-even.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from adaspark.analysis.figures.style import COLOURS, attach_caption, colour, not_run, panels, style
from adaspark.analysis.records import STAGE_FIG5, Options, Records

FILLED_BY = "every preset (the fig5 stage; three prompts per context under preset=paper)"
#: One row per fixed-width run of the fig5 stage.
FIG5_COLUMNS: tuple[str, ...] = (
    "context", "context_paper", "prompt", "width", "arm", "rounds", "tokens", "decode_s",
)
NARROW, WIDE = 8, 16


def marginal_points(runs: pd.DataFrame, narrow: int = NARROW, wide: int = WIDE) -> pd.DataFrame:
    """Per (context, prompt): extra time and extra tokens per round of ``wide`` over ``narrow``
    rows, both relative to ``narrow`` (columns ``extra_time``, ``extra_tokens``)."""
    r = runs[runs["rounds"] > 0].copy()
    r["time_per_round"] = r["decode_s"] / r["rounds"]
    r["tokens_per_round"] = r["tokens"] / r["rounds"]
    keys = ["context", "prompt"]
    a = r[r["width"] == narrow].set_index(keys)
    b = r[r["width"] == wide].set_index(keys)
    both = a.index.intersection(b.index)
    out = pd.DataFrame({
        "extra_time": b.loc[both, "time_per_round"] / a.loc[both, "time_per_round"] - 1.0,
        "extra_tokens": b.loc[both, "tokens_per_round"] / a.loc[both, "tokens_per_round"] - 1.0,
    })
    return out.reset_index().sort_values(keys).reset_index(drop=True)


def figure5_marginal_rows(runs: pd.DataFrame, target: str) -> Figure:
    """Figure 5 from the fig5 stage's rows (one target: ours)."""
    pts = marginal_points(runs) if not runs.empty else pd.DataFrame()
    with style():
        fig, (ax,) = panels(1)
        ax.set_title(target)
        if pts.empty:
            not_run(ax, f"{NARROW}- and {WIDE}-row runs", f"stage {STAGE_FIG5}")
            return attach_caption(fig, "No pair of 8- and 16-row runs.", label="Figure 5",
                                  title="What rows 9-16 cost and buy", filled_by=FILLED_BY,
                                  complete=False)
        contexts = sorted(pts["context"].unique())
        for i, c in enumerate(contexts):
            at = pts[pts["context"] == c]
            ax.scatter(100 * at["extra_time"], 100 * at["extra_tokens"], color=colour(i),
                       label=f"{int(c):,} tokens", zorder=3)
        lim = 100 * float(np.nanmax(np.abs(pts[["extra_time", "extra_tokens"]].to_numpy())))
        lim = max(10.0, 1.1 * lim)
        ax.plot([-lim, lim], [-lim, lim], "--", color=COLOURS["grey"], lw=1,
                label="break-even")
        ax.axhline(0, color=COLOURS["black"], lw=0.5)
        ax.axvline(0, color=COLOURS["black"], lw=0.5)
        ax.set_xlabel(f"extra time per round, {WIDE} over {NARROW} rows (%)")
        ax.set_ylabel("extra tokens per round (%)")
        ax.legend(frameon=False, loc="best")
        n_prompts = int(pts.groupby("context")["prompt"].nunique().max())
        tokens = sorted(runs["tokens"].unique())
        faster = int((pts["extra_tokens"] > pts["extra_time"]).sum())
        caption = (
            f"What the second eight rows of a tree cost and what they buy on {target}. Each "
            f"point is one context ({', '.join(f'{int(c):,}' for c in contexts)} tokens) and "
            + (f"one of {n_prompts} prompts" if n_prompts > 1 else "its one prompt")
            + ", from runs of "
            f"{', '.join(str(int(t)) for t in tokens)} tokens at a fixed width of {NARROW} and "
            f"of {WIDE} rows (acceptance model on, n-gram candidates off): the extra time per "
            "round of the wider tree (the drafter included) against the extra tokens it commits "
            "per round, both relative to the narrower tree. Above the diagonal the wider tree "
            f"decodes faster ({faster} of {len(pts)} points). Medians: "
            f"{100 * pts['extra_tokens'].median():+.1f}% tokens, "
            f"{100 * pts['extra_time'].median():+.1f}% time per round."
        )
        return attach_caption(fig, caption, label="Figure 5", title="What rows 9-16 cost and buy",
                              filled_by=FILLED_BY)


def build(records: Records, options: Options) -> Figure:
    return figure5_marginal_rows(records.fig5("Figure 5"), options.target)


STAGES = (STAGE_FIG5,)
