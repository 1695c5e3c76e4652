"""Figure 7 (§4.1): anatomy of an AdaSpark round.

Paper: "Anatomy of an AdaSpark round on each target, at the width its rounds most often ran: the
drafter's forward, the tree build, the verify and the commit (medians), and the tokens committed
per round at that width. The text beside each bar also gives the tokens per round and
milliseconds per token over all rounds, other widths included, beside the same engine's
autoregressive (AR) milliseconds per token on the short subset."

From the instrumented AdaSpark run's round log: the drafter's forward (``draft_s``), the tree
build (``tree_build_s``: the rest of the round's fixed cost D, ``fixed_s``), the verify
(``measured_verify_s``: batch build, forward and read-out), the commit (``commit_s``) and, in
logs that record it, the rest of the whole round (``round_s`` less those parts: the previous
round's learning and streaming, ``learn_s`` of the round before). Milliseconds per token are over
whole rounds (``round_s``) where the log has them. A log written before the parts were recorded
draws D as one bar. Cold-start rounds are left out of the modal width. The AR
milliseconds per token are 1,000 over the ``ar`` arm's decode tok/s.
"""

from __future__ import annotations

import math

import pandas as pd
from matplotlib.figure import Figure

from adaspark.analysis.figures.style import COLOURS, attach_caption, not_run, panels, style
from adaspark.analysis.records import (
    ADASPARK,
    AR,
    COLD_START,
    STAGE_INSTRUMENTED,
    STAGE_RUN,
    Options,
    Records,
    without_looped,
)
from adaspark.analysis.tables.common import throughput_or_none

FILLED_BY = "every preset (the instrumented stage; AR from the run or short stage)"


def round_anatomy(rounds: pd.DataFrame) -> dict[str, float]:
    """The numbers Figure 7 draws: modal width and its share, median D and verify (ms) and
    tokens per round there; tokens per round and ms per token over all rounds."""
    r = without_looped(rounds)
    if r.empty:
        return {}
    warm = r[~r["why"].isin(COLD_START)]
    counts = warm["width"].value_counts()
    if counts.empty:
        return {}
    mode = int(counts.index[0])
    at = warm[warm["width"] == mode]
    parts_s = ["fixed_s", "measured_verify_s"] + (["commit_s"] if "commit_s" in r.columns else [])
    whole = "round_s" in r.columns
    seconds = float(r["round_s"].sum() if whole else r[parts_s].sum().sum())
    committed = float(r["committed"].sum())

    def median_ms(column: str) -> float:
        return 1e3 * float(at[column].median()) if column in at.columns else math.nan

    return {
        "width": mode, "share": float(counts.iloc[0] / counts.sum()),
        "fixed_ms": median_ms("fixed_s"),
        "draft_ms": median_ms("draft_s"),
        "tree_ms": median_ms("tree_build_s"),
        "commit_ms": median_ms("commit_s"),
        "verify_ms": median_ms("measured_verify_s"),
        "rest_ms": (1e3 * float((at["round_s"] - at[parts_s].sum(axis=1)).clip(lower=0).median())
                    if whole else math.nan),
        "tokens_at_width": float(at["committed"].mean()),
        "tokens_per_round": committed / len(r),
        "ms_per_token": 1e3 * seconds / committed if committed else math.nan,
        "rounds": float(len(r)),
    }


def _parts(a: dict[str, float]) -> tuple[list[tuple[str, float, str]], str]:
    """The bar's segments (label, median ms, colour), D split when the log has its parts, and
    the caption's words for them."""
    if not any(math.isnan(a[k]) for k in ("draft_ms", "tree_ms", "commit_ms")):
        bars = [("draft", a["draft_ms"], "orange"), ("tree build", a["tree_ms"], "green"),
                ("verify", a["verify_ms"], "blue"), ("commit", a["commit_ms"], "grey")]
        if not math.isnan(a.get("rest_ms", math.nan)):
            return ([*bars, ("learning and rest", a["rest_ms"], "purple")],
                    "the drafter's forward, the tree build, the verify, the commit and the rest "
                    "of the whole round (the previous round's learning and streaming)")
        return bars, "the drafter's forward, the tree build, the verify and the commit"
    return ([("draft + tree build", a["fixed_ms"], "orange"), ("verify", a["verify_ms"], "blue")],
            "the drafter's forward and tree build (recorded together) and the verify")


def figure7_round_anatomy(rounds: pd.DataFrame, ar_replies: pd.DataFrame | None,
                          target: str, ar_subset: str | None = None) -> Figure:
    """Figure 7 from AdaSpark's round log and the AR arm's per-reply rows."""
    a = round_anatomy(rounds)
    ar = throughput_or_none(ar_replies, AR)
    ar_ms = 1e3 / ar.tokens_per_s if ar is not None and ar.tokens_per_s > 0 else math.nan
    with style():
        fig, (ax,) = panels(1)
        fig.set_size_inches(7.5, 1.9)
        if not a:
            not_run(ax, "no AdaSpark round logged", f"stage {STAGE_INSTRUMENTED}")
            return attach_caption(fig, "No AdaSpark round was logged.", label="Figure 7",
                                  title="Anatomy of a round", filled_by=FILLED_BY,
                                  complete=False)
        parts, described = _parts(a)
        left = 0.0
        for label, ms, colour in parts:
            ax.barh([0], [ms], left=[left], color=COLOURS[colour], label=label)
            left += ms
        total = left
        text = (f"{a['tokens_at_width']:.2f} tok/round at {a['width']} rows; all rounds "
                f"{a['tokens_per_round']:.2f} tok/round, {a['ms_per_token']:.1f} ms/token"
                + (f" (AR {ar_ms:.1f})" if not math.isnan(ar_ms) else ""))
        ax.text(total * 1.02, 0, text, va="center", fontsize=8)
        ax.set_yticks([0], [target])
        ax.set_xlim(0, total * 2.6)
        ax.set_xlabel("ms per round (medians at the modal width)")
        ax.grid(axis="y", visible=False)
        ax.legend(frameon=False, loc="upper right", ncols=2)
        caption = (
            f"Anatomy of an AdaSpark round on {target}, at the width its rounds most often ran: "
            f"{described} (medians), "
            "and the tokens committed per round at that width; beside the bar, the tokens per "
            "round and milliseconds per token over all rounds, beside the autoregressive "
            f"milliseconds per token on the {ar_subset or 'main'} subset. {target}: "
            + ", ".join(f"{label} {ms:.1f}" for label, ms, _ in parts)
            + f" ms at {a['width']} rows "
            f"({a['share']:.0%} of rounds); {a['ms_per_token']:.1f} ms per token"
            + (f" against {ar_ms:.1f} ms in autoregressive decode." if not math.isnan(ar_ms)
               else "; the AR arm was not run in this preset.")
        )
        return attach_caption(fig, caption, label="Figure 7", title="Anatomy of a round",
                              filled_by=FILLED_BY)


def build(records: Records, options: Options) -> Figure:
    rounds = records.rounds("Figure 7")
    ar, subset = records.ar_replies("Figure 7")
    return figure7_round_anatomy(rounds[rounds["arm"].astype(str) == ADASPARK], ar,
                                 options.target, subset)


STAGES = (STAGE_INSTRUMENTED, STAGE_RUN)
