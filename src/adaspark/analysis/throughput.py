"""An arm's aggregate decode speed (§4.1; Table 4, left, and Table 6's first row): generated
tokens over decode time, summed over replies, from the per-reply speeds of
:func:`adaspark.analysis.stats.arm_speeds` and with §4.1's exclusions (the arm's own looped and
single-delta replies left out and counted, cut replies kept)."""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import asdict, dataclass
from typing import Any, overload

import pandas as pd

from adaspark.analysis.bootstrap import StatsInputError
from adaspark.analysis.stats import arm_speeds
from adaspark.runs.rows import CUT, KEY_COLUMNS, LOOPED, SINGLE_DELTA


@dataclass(frozen=True)
class ArmThroughput:
    """An arm's aggregate decode speed (Table 4, left): decode tokens over decode time, summed.

    ``tokens_per_s`` is ``decode_tokens / decode_s``; NaN when no reply is left (a dash).
    Only the arm's own looped replies and its single-delta replies are left out; cut replies
    stay in.
    """

    arm: str
    tokens_per_s: float
    decode_tokens: float
    decode_s: float
    n_replies: int
    n_looped_excluded: int
    n_single_delta_excluded: int
    n_cut: int
    group: Hashable | None = None

    def as_dict(self) -> dict[str, Any]:
        """Plain mapping, for a record or a table row."""
        return asdict(self)


def _throughput(speeds: pd.DataFrame, arm: str, group: Hashable | None) -> ArmThroughput:
    looped = speeds["status"] == LOOPED
    single = speeds["status"] == SINGLE_DELTA
    kept = speeds[~looped & ~single]
    decode_tokens = (kept["completion_tokens"] - 1.0).clip(lower=0.0)
    decode_s = float((decode_tokens / kept["decode_tps"]).sum())
    tokens = float(decode_tokens.sum())
    return ArmThroughput(
        arm=arm,
        tokens_per_s=tokens / decode_s if decode_s > 0 else float("nan"),
        decode_tokens=tokens,
        decode_s=decode_s,
        n_replies=len(kept),
        n_looped_excluded=int(looped.sum()),
        n_single_delta_excluded=int(single.sum()),
        n_cut=int((kept["status"] == CUT).sum()),
        group=group,
    )


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
        result = _throughput(speeds, arm, None)
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
        label: _throughput(speeds[labels == label], arm, label) for label in dict.fromkeys(labels)
    }
