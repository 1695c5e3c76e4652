"""Table 9 (§4.5): learned widths against the kernel's width classes.

Paper: "AdaSpark's decode speed with learned widths (§3.2) over its speed with the widths taken
from the 8-bit matrix kernel's row classes, geometric mean of per-reply ratios with its 95%
bootstrap interval over conversations, for all replies and by the context a reply was decoded
at; above 1 the learned widths are faster. [...] The last columns give the widths each arm's
table offered at the end of its run."

Arms: ``adaspark`` (learned widths; both runs, mean per reply) over ``adaspark-classes``
(classes every 8 rows to the widest verify). The widths are the ``widths_learned`` of each arm's
last request summary.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from adaspark.analysis import stats
from adaspark.analysis.bootstrap import DEFAULT_CONFIDENCE
from adaspark.analysis.records import (
    ADASPARK,
    CLASSES,
    STAGE_RUN,
    Options,
    Records,
    arm_rows,
    has_arm,
    request_summaries,
)
from adaspark.analysis.tables.common import band_labels, compare_or_none, finish, not_run_note
from adaspark.analysis.tables.render import ci_text, width_ranges

FILLED_BY = "preset=paper (the adaspark-classes arm)"
COLUMNS_WIDTHS = ("learned widths", "kernel-class widths")


def final_widths(replies: pd.DataFrame, arm: str) -> list[int]:
    """The widths the arm's table offered at the end of its (first) run."""
    rows = arm_rows(replies, f"{arm}@1")
    if rows.empty:
        rows = arm_rows(replies, arm)
    summ = request_summaries(rows)
    if summ.empty or "widths_learned" not in summ.columns:
        return []
    last: Any = summ.sort_values("order")["widths_learned"].iloc[-1]
    if last is None or (isinstance(last, float) and math.isnan(last)):
        return []
    return [int(w) for w in list(last)]


def table9_width_classes(replies: pd.DataFrame, target: str, options: Options) -> pd.DataFrame:
    """Table 9 from the main runs' per-reply rows (one row: this target)."""
    under, over = band_labels(options)
    total = compare_or_none(replies, ADASPARK, CLASSES, options)
    banded = compare_or_none(replies, ADASPARK, CLASSES, options, by=stats.BAND_COLUMN,
                             context_arm=ADASPARK) or {}

    def cell(c: stats.Comparison | None) -> str | None:
        return None if c is None else ci_text(c.ratio, c.lo, c.hi, 3)

    row = {"target": target, "all replies": cell(total), under: cell(banded.get(under)),
           over: cell(banded.get(over)),
           "learned widths": width_ranges(final_widths(replies, ADASPARK))
           if has_arm(replies, ADASPARK) else None,
           "kernel-class widths": width_ranges(final_widths(replies, CLASSES))
           if has_arm(replies, CLASSES) else None}
    frame = pd.DataFrame([row])
    caption = (
        f"Learned against kernel width classes on {target}: AdaSpark's decode speed with learned "
        "widths over its speed with classes every 8 rows to the widest verify, geometric mean of "
        f"per-reply ratios with its {DEFAULT_CONFIDENCE:.0%} bootstrap interval over "
        "conversations"
        + (f" ({total.n_replies} replies)" if total is not None else "")
        + ", for all replies and by the context a reply was decoded at; above 1 the learned "
        "widths are faster. The last columns give the widths each arm's table offered at the "
        "end of its run."
    )
    not_run = [] if has_arm(replies, CLASSES) else ["the kernel-class arm (adaspark-classes)"]
    return finish(frame, label="Table 9", title="Learned widths against kernel classes",
                  caption=caption, notes=not_run_note(not_run, FILLED_BY), filled_by=FILLED_BY)


def build(records: Records, options: Options) -> pd.DataFrame:
    return table9_width_classes(records.replies("Table 9"), options.target, options)


STAGES = (STAGE_RUN,)
