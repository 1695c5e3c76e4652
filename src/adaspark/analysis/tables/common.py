"""Small helpers the table modules share: comparisons that give a dash when an arm was not run,
and the attributes every table frame carries (see :mod:`adaspark.analysis.tables.render`)."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

import pandas as pd

from adaspark.analysis import stats, throughput
from adaspark.analysis.bootstrap import StatsInputError
from adaspark.analysis.records import Options, has_arm

NOT_RUN = "not run in this preset"


def compare_or_none(
    replies: pd.DataFrame | None,
    arm_a: str,
    arm_b: str,
    options: Options,
    *,
    by: str | None = None,
    context_arm: str | None = None,
) -> Any:
    """:func:`adaspark.analysis.stats.compare`, or None when either arm is absent or no reply is
    left (a dash). With ``by`` a dict from group to :class:`~adaspark.analysis.stats.Comparison`."""
    if not (has_arm(replies, arm_a) and has_arm(replies, arm_b)):
        return None
    assert replies is not None
    try:
        return stats.compare(
            replies, arm_a, arm_b, seed=options.seed, n_resamples=options.n_resamples, by=by,
            context_arm=context_arm, context_split_tokens=options.context_split_tokens,
            method=options.bootstrap_method,
        )
    except StatsInputError:
        return None


def throughput_or_none(
    replies: pd.DataFrame | None, arm: str, *, by: str | None = None
) -> Any:
    """:func:`adaspark.analysis.throughput.arm_throughput`, or None when the arm is absent or has no
    reply."""
    if not has_arm(replies, arm):
        return None
    assert replies is not None
    try:
        return throughput.arm_throughput(replies, arm, by=by)
    except StatsInputError:
        return None


def end_to_end_or_none(replies: pd.DataFrame | None, arm: str) -> Any:
    """:func:`adaspark.analysis.throughput.arm_end_to_end`, or None when the arm is absent or no
    reply has a time to first token (a dash)."""
    if not has_arm(replies, arm):
        return None
    assert replies is not None
    try:
        return throughput.arm_end_to_end(replies, arm)
    except StatsInputError:
        return None


def ratio_of(c: stats.Comparison | None) -> float:
    return float("nan") if c is None else float(c.ratio)


def group_ratio(result: dict[Hashable, stats.Comparison] | None, group: Hashable) -> float:
    if not result or group not in result:
        return float("nan")
    return float(result[group].ratio)


def band_labels(options: Options) -> tuple[str, str]:
    """Tables 3 and 9's two context bands (prompt plus half the reply)."""
    return stats.context_band(0, options.context_split_tokens), stats.context_band(
        options.context_split_tokens, options.context_split_tokens)


def finish(
    frame: pd.DataFrame,
    *,
    label: str,
    title: str,
    caption: str,
    formats: dict[str, str] | None = None,
    notes: Sequence[str] = (),
    bold: Sequence[tuple[int, str]] = (),
    filled_by: str = "",
    row_formats: dict[int, str] | None = None,
) -> pd.DataFrame:
    """Attach what the writers and the report read (``attrs``)."""
    frame = frame.reset_index(drop=True)
    frame.attrs.update(
        label=label, title=title, caption=caption, formats=dict(formats or {}),
        notes=list(notes), bold=[(int(r), str(c)) for r, c in bold], filled_by=filled_by,
        row_formats=dict(row_formats or {}),
    )
    return frame


def not_run_note(what: Sequence[str], filled_by: str) -> list[str]:
    """The note under a table with dashes: what was not run and which preset runs it."""
    if not what:
        return []
    return [f"{NOT_RUN}: {', '.join(what)} (dashes); {filled_by} fills them."]
