"""Table 3 (§3.4): AdaSpark's width against the same scheduler with its width pinned.

Paper: "The width columns are each pinned arm's decode speed over AdaSpark's, geometric mean of
per-reply ratios (above 1 is faster than AdaSpark), with the best pinned width in bold, for all
replies and by the context a reply was decoded at (prompt plus half the reply). [...] AdaSpark /
best is AdaSpark over the best pinned width with its 95% bootstrap interval over conversations;
again is AdaSpark's second run over its first."

Arms: ``adaspark`` (both runs, mean per reply), ``adaspark-w4`` .. ``adaspark-w16``; the second
run is ``adaspark@2`` (the repeat stage). Bands use AdaSpark's context, so every column counts
the same replies per band.
"""

from __future__ import annotations

import math

import pandas as pd

from adaspark.analysis import stats
from adaspark.analysis.bootstrap import DEFAULT_CONFIDENCE
from adaspark.analysis.records import (
    ADASPARK,
    PINNED,
    STAGE_REPEAT,
    STAGE_RUN,
    Options,
    Records,
    has_arm,
)
from adaspark.analysis.tables.common import band_labels, compare_or_none, finish, not_run_note
from adaspark.analysis.tables.render import ci_text
from adaspark.runs.rows import LOOPED, SINGLE_DELTA

FILLED_BY = "preset=paper (the pinned arms and AdaSpark's second run)"
BAND_COLUMN = stats.BAND_COLUMN


def _replies_in_band(replies: pd.DataFrame, options: Options) -> dict[str, int]:
    """AdaSpark's timed replies (looped and single-delta left out) per band, and in all."""
    speeds = stats.arm_speeds(replies, ADASPARK)
    timed = speeds[~speeds["status"].isin([LOOPED, SINGLE_DELTA])]
    under, over = band_labels(options)
    n_under = int((timed["context_tokens"] < options.context_split_tokens).sum())
    return {"all replies": len(timed), under: n_under, over: len(timed) - n_under}


def table3_pinned_widths(replies: pd.DataFrame, target: str, options: Options) -> pd.DataFrame:
    """Table 3 from per-reply rows of AdaSpark's runs and its pinned arms (missing: dashes)."""
    under, over = band_labels(options)
    groups = ["all replies", under, over]
    widths = sorted(PINNED)
    cells: dict[int, dict[str, float]] = {w: {} for w in widths}
    for w in widths:
        arm = PINNED[w]
        total = compare_or_none(replies, arm, ADASPARK, options)
        banded = compare_or_none(replies, arm, ADASPARK, options, by=BAND_COLUMN,
                                 context_arm=ADASPARK)
        cells[w]["all replies"] = math.nan if total is None else total.ratio
        for g in (under, over):
            c = banded.get(g) if banded else None
            cells[w][g] = math.nan if c is None else c.ratio
    counts = (_replies_in_band(replies, options) if has_arm(replies, ADASPARK)
              else dict.fromkeys(groups))
    again_all = compare_or_none(replies, f"{ADASPARK}@2", f"{ADASPARK}@1", options)
    again_band = compare_or_none(replies, f"{ADASPARK}@2", f"{ADASPARK}@1", options,
                                 by=BAND_COLUMN, context_arm=f"{ADASPARK}@1")
    rows, bold = [], []
    for i, g in enumerate(groups):
        ratios = {w: cells[w][g] for w in widths}
        run = {w: r for w, r in ratios.items() if not math.isnan(r)}
        best = max(run, key=lambda w: run[w]) if run else None
        best_ci = None
        if best is not None:
            c = (compare_or_none(replies, ADASPARK, PINNED[best], options) if g == "all replies"
                 else (compare_or_none(replies, ADASPARK, PINNED[best], options, by=BAND_COLUMN,
                                       context_arm=ADASPARK) or {}).get(g))
            best_ci = None if c is None else ci_text(c.ratio, c.lo, c.hi, 3)
            bold.append((i, str(best)))
        again = again_all if g == "all replies" else (again_band or {}).get(g)
        rows.append({"target": target if i == 0 else "", "replies": g, "n": counts.get(g),
                     **{str(w): ratios[w] for w in widths}, "AdaSpark / best": best_ci,
                     "again": math.nan if again is None else again.ratio})
    frame = pd.DataFrame(rows)
    formats = {str(w): "{:.3f}" for w in widths} | {"again": "{:.3f}", "n": "{:,.0f}"}
    not_run = [f"{w} rows" for w in widths if not has_arm(replies, PINNED[w])]
    if not has_arm(replies, f"{ADASPARK}@2"):
        not_run.append("AdaSpark's second run (again)")
    n_all = counts.get("all replies")
    caption = (
        f"The width on {target}: AdaSpark against the same scheduler with its width pinned, every "
        f"other part unchanged. The width columns are each pinned arm's decode speed over "
        f"AdaSpark's, geometric mean of per-reply ratios (above 1 is faster than AdaSpark), best "
        f"pinned width in bold, over {n_all if n_all is not None else 'no'} replies and by the "
        f"context a reply was decoded at (prompt plus half the reply). AdaSpark / best is AdaSpark"
        f" over the best pinned width with its {options_confidence()} bootstrap interval over "
        f"conversations; again is AdaSpark's second run over its first; a dash marks a width not "
        f"run."
    )
    return finish(frame, label="Table 3", title="AdaSpark against pinned widths",
                  caption=caption, formats=formats, notes=not_run_note(not_run, FILLED_BY),
                  bold=bold, filled_by=FILLED_BY)


def options_confidence() -> str:
    return f"{DEFAULT_CONFIDENCE:.0%}"


def build(records: Records, options: Options) -> pd.DataFrame:
    return table3_pinned_widths(records.replies("Table 3"), options.target, options)


STAGES = (STAGE_RUN, STAGE_REPEAT)
