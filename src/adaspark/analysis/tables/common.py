"""Small helpers the table modules share: comparisons that give a dash when an arm was not run,
and the attributes every table frame carries (see :mod:`adaspark.analysis.tables.render`)."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any

import pandas as pd

from adaspark.analysis import stats, throughput
from adaspark.analysis.bootstrap import StatsInputError
from adaspark.analysis.records import (
    BLOCKS,
    DRAFT_MODEL_BLOCK,
    DrafterBlock,
    Options,
    has_arm,
)

NOT_RUN = "not run in this preset"
#: How the note that a block's drafter is a stand-in begins (the report looks for it).
STAND_IN = "Stand-in drafter"


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


# ---------------------------------------------------------------------------------------------
# Drafter blocks (Tables 4-6, Figure 6)


def shown_blocks(
    replies: pd.DataFrame | None,
    arms_of: Callable[[DrafterBlock], Sequence[str]] = lambda b: b.arms,
) -> tuple[list[DrafterBlock], list[DrafterBlock]]:
    """The drafter blocks (:data:`~adaspark.analysis.records.BLOCKS`, in order) an output shows,
    those with at least one of ``arms_of(block)`` in ``replies``, and those it leaves out. When
    no block ran the lead block is shown (its cells dashes, as an empty run always was)."""
    ran = [b for b in BLOCKS if any(has_arm(replies, a) for a in arms_of(b))]
    shown = ran or [BLOCKS[0]]
    return shown, [b for b in BLOCKS if b not in shown]


def block_of(arm: str, own_drafter: str | None = None) -> DrafterBlock:
    """The drafter block whose arms include ``arm`` (``adaspark@2`` is ``adaspark``'s); any
    other arm by the drafter its config names (``own_drafter``, the arm file's ``drafter:``):
    the block whose AdaSpark arm names the same one, else (the composed drafter, the draft
    model in every preset) the draft-model block."""
    base = arm.split("@")[0]
    for b in BLOCKS:
        if base in (*b.arms, *b.ablation):
            return b
    if own_drafter is not None:
        for b in BLOCKS:
            if b.drafter == own_drafter:
                return b
    return DRAFT_MODEL_BLOCK


def stand_in_note(block: DrafterBlock) -> str:
    """The note that ``block``'s drafter is a stand-in, not the paper's DSpark."""
    return (f"{STAND_IN}: the {block.kind} block ({block.llamacpp_label}, {block.chain_label}, "
            f"{block.adaspark_label}) runs {block.stand_in}; the paper's values come from its "
            "DSpark drafters, so they are no like-for-like check of this block.")


def block_notes(shown: Sequence[DrafterBlock], left_out: Sequence[DrafterBlock],
                filled_by: str = "a preset whose run_arms include them",
                arms_of: Callable[[DrafterBlock], Sequence[str]] = lambda b: b.arms,
                ) -> list[str]:
    """The notes under an output with drafter blocks: each block left out as not run (its arms
    and what fills it), and each shown block whose drafter is a stand-in."""
    notes = [f"{NOT_RUN}: the {b.kind} block ({', '.join(arms_of(b))}), left out; "
             f"{filled_by}{f' and {b.needs}' if b.needs else ''} fill"
             f"{'' if b.needs else 's'} it." for b in left_out]
    return notes + [stand_in_note(b) for b in shown if b.stand_in]
