"""An arm's aggregate decode speed (§4.1; Table 4, left, and Table 6's first row): generated
tokens over decode time, summed over replies, from the per-reply speeds of
:func:`adaspark.analysis.stats.arm_speeds` and with §4.1's exclusions (the arm's own looped and
single-delta replies left out and counted, cut replies kept); beside it, not a metric of the
paper, its time to first token and end-to-end speed (:func:`arm_end_to_end`)."""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import asdict, dataclass
from typing import Any, overload

import numpy as np
import pandas as pd

from adaspark.analysis.bootstrap import StatsInputError
from adaspark.analysis.stats import arm_speeds, select_arm
from adaspark.runs.rows import KEY_COLUMNS, LOOPED, ArmThroughput, pooled_throughput


@overload
def arm_throughput(df: pd.DataFrame, arm: str, *, by: None = ...) -> ArmThroughput: ...


@overload
def arm_throughput(df: pd.DataFrame, arm: str, *, by: str) -> dict[Hashable, ArmThroughput]: ...


def arm_throughput(
    df: pd.DataFrame, arm: str, *, by: str | None = None
) -> ArmThroughput | dict[Hashable, ArmThroughput]:
    """An arm's decode tok/s as in Table 4 (left) and Table 6's first row.

    Generated tokens over decode time, summed over replies: per reply, the decode tokens are
    ``completion_tokens - 1`` and the decode time is those tokens over the reply's speed (the
    mean over the arm's runs, §3.4), so on one run this is summed decode tokens over summed
    client-clock decode intervals. The arm's own looped replies and its single-delta replies are
    left out and counted; cut replies stay in and are counted.

    ``by=None`` raises :class:`StatsInputError` when no reply is left; ``by`` a key column
    (``"set"`` for Table 6's per-source row) gives a dict from group label to result, NaN where
    a group is left empty.
    """
    speeds = arm_speeds(df, arm)
    if by is None:
        result = pooled_throughput(speeds, arm, None)
        if result.n_replies == 0:
            raise StatsInputError(
                f"arm {arm!r} has no reply left after exclusions ({len(speeds)} replies, "
                f"{result.n_looped_excluded} looped, {result.n_single_delta_excluded} "
                f"single-delta)"
            )
        return result
    if by not in KEY_COLUMNS:
        raise StatsInputError(f"cannot group throughput by {by!r}; use one of {list(KEY_COLUMNS)}")
    labels = speeds.index.get_level_values(by)
    return {
        label: pooled_throughput(speeds[labels == label], arm, label)
        for label in dict.fromkeys(labels)
    }


# ---------------------------------------------------------------------------------------------
# Time to first token and end to end (beside the headline; not a metric of the paper)

#: The per-reply time columns the end-to-end aggregate reads (:mod:`adaspark.runs.rows`); a
#: replies file written before ``drafter_prefill_s`` existed reads as NaN there.
TIME_COLUMNS: tuple[str, ...] = ("ttft_s", "decode_s", "drafter_prefill_s")


@dataclass(frozen=True)
class ArmEndToEnd:
    """An arm's time to first token and end-to-end speed, beside its decode speed.

    §4.1 times decode only, from the first to the last streamed token, by design; that stays the
    headline. This is what the user waits for: per reply (the mean over the arm's runs) the time
    to first token ``ttft_s``, the end-to-end time ``ttft_s + decode_s`` (request sent to last
    token) and the drafter's prompt prefill ``drafter_prefill_s``. ``tokens_per_s`` is completion
    tokens over end-to-end time, both summed over replies (as the decode aggregate sums); the
    medians are over replies. Looped replies are left out and counted, as for the decode speed;
    a reply with no token event has no time to first token and is left out and counted
    (``n_untimed_excluded``); single-delta replies stay in (their one event has a time).
    ``median_drafter_prefill_s`` is NaN when no kept reply recorded one (llama-server's arms,
    replies files from before the column).
    """

    arm: str
    median_ttft_s: float
    tokens_per_s: float
    tokens: float
    e2e_s: float
    median_drafter_prefill_s: float
    n_replies: int
    n_looped_excluded: int
    n_untimed_excluded: int

    def as_dict(self) -> dict[str, Any]:
        """Plain mapping, for a record or a table row."""
        return asdict(self)


def _per_reply_times(df: pd.DataFrame, arm: str) -> pd.DataFrame:
    """The arm's ``ttft_s``, ``e2e_s`` and ``drafter_prefill_s`` per reply, means over runs."""
    rows = select_arm(df, arm)
    missing = [c for c in TIME_COLUMNS[:2] if c not in rows.columns]
    if missing:
        raise StatsInputError(
            f"arm {arm!r}: the rows lack column(s) {missing}, which the end-to-end time needs; "
            "they are written by `adaspark run` (adaspark.runs.rows)")
    times = pd.DataFrame({c: pd.to_numeric(rows[c], errors="coerce") if c in rows.columns
                          else np.nan for c in TIME_COLUMNS}, index=rows.index)
    times["e2e_s"] = times["ttft_s"] + times["decode_s"]
    keys = rows[list(KEY_COLUMNS)].astype({"turn": int, "reply": int})
    grouped = pd.concat([keys, times], axis=1).groupby(list(KEY_COLUMNS), sort=True)
    return grouped[["ttft_s", "e2e_s", "drafter_prefill_s"]].mean()


def arm_end_to_end(df: pd.DataFrame, arm: str) -> ArmEndToEnd:
    """An arm's median time to first token, end-to-end tok/s and median drafter prefill
    (:class:`ArmEndToEnd`); :class:`StatsInputError` when no reply has a time to first token."""
    speeds = arm_speeds(df, arm)  # checks the rows; each reply's worst status over runs
    per_reply = speeds[["status", "completion_tokens"]].join(_per_reply_times(df, arm))
    looped = per_reply["status"] == LOOPED
    untimed = ~looped & ~np.isfinite(per_reply["e2e_s"])
    kept = per_reply[~looped & ~untimed]
    if kept.empty:
        raise StatsInputError(
            f"arm {arm!r} has no reply with a time to first token ({len(per_reply)} replies, "
            f"{int(looped.sum())} looped, {int(untimed.sum())} without a token event)")
    tokens, e2e_s = float(kept["completion_tokens"].sum()), float(kept["e2e_s"].sum())
    prefill = kept["drafter_prefill_s"].dropna()
    return ArmEndToEnd(
        arm=arm,
        median_ttft_s=float(kept["ttft_s"].median()),
        tokens_per_s=tokens / e2e_s if e2e_s > 0 else float("nan"),
        tokens=tokens,
        e2e_s=e2e_s,
        median_drafter_prefill_s=float(prefill.median()) if len(prefill) else float("nan"),
        n_replies=len(kept),
        n_looped_excluded=int(looped.sum()),
        n_untimed_excluded=int(untimed.sum()),
    )
