"""Statistics over per-reply rows: decode speed, arm comparisons, bootstrap intervals (§4.1).

Every speed result of the paper rests on three quantities, all computed here from a pandas
DataFrame with one row per timed reply of one run of one arm:

* the client-clock decode speed of a reply, ``(completion tokens - 1) / (t_last - t_first)``
  (HARNESS "Client clock"; §4.1: generated tokens over the time from the first to the last
  streamed token);
* a comparison of two arms: the geometric mean over replies of the per-reply ratio of their decode
  speeds, with a 95% percentile bootstrap interval over conversations, 2,000 resamples
  (§4.1, Tables 3-6, 8 and 9);
* an arm's aggregate decode tok/s: generated tokens over decode time, summed over replies
  (Table 4, left; Table 6, first row).

Exclusions follow §4.1, the Table 4 caption and HARNESS "Caps and loops": a reply that reached
the protocol cap ("looped") in either arm of a comparison is left out of it and counted; a reply
streamed as one token event ("single-delta") has no decode interval and is left out and counted;
a reply cut by a shorter run cap ("cut") stays in and is counted. An arm that ran twice (AdaSpark's
two runs, §3.4 and §4.1) has, on each reply, the mean of its runs' speeds.

Per-reply row columns (at least): :data:`adaspark.runs.rows.REQUIRED_COLUMNS` (``arm``,
``repeat``, ``set`` (the source), ``conversation``, ``turn``, ``reply`` (0, or 1 for the answer
after a tool result), ``status``, ``decode_tps``, ``completion_tokens``, ``prompt_tokens``). A reply
is identified by ``(set, conversation, turn, reply)``; a conversation, the bootstrap's unit, by
``(set, conversation)``.

Arm selectors: ``"adaspark"`` selects every run of the arm (rows whose ``arm`` is ``adaspark``,
or, when there are none, rows named ``adaspark@1``, ``adaspark@2``, ... as the ``preset=paper``
config names the two repeats, each suffix taken as the repeat); ``"adaspark@2"`` selects one run
(rows named so, or rows of arm ``adaspark`` with ``repeat == 2``), as Table 3's "again" column
(second run over first) needs.

Choices the paper leaves open, made here and named by parameters:

* the band of a reply in a comparison uses the mean of the two arms' contexts (each the prompt
  plus half the reply, Table 3; mean over an arm's runs) unless ``context_arm`` names the arm
  whose context defines it (Table 3's band counts are AdaSpark's, the same for every column);
* across an arm's runs a reply's status is the worst of its runs (looped, then single-delta,
  then cut, then finished), so a reply that looped in one of AdaSpark's two runs looped in the arm;
* a reply that exists in only one arm of a comparison (a tool turn answered without a call in one
  arm has no second reply there) is left out and counted as ``n_unpaired``;
* the aggregate tok/s counts the decode tokens of the per-reply formula, ``completion_tokens - 1``
  per reply, over the decode time ``(completion_tokens - 1) / decode_tps``, so that on one run it
  equals summed decode tokens over summed client-clock decode intervals;
* the bootstrap (:mod:`adaspark.analysis.bootstrap`) takes its percentiles on the log-ratio scale.
"""

from __future__ import annotations

import math
import re
from collections.abc import Hashable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal, overload

import numpy as np
import pandas as pd

from adaspark.analysis.bootstrap import (
    DEFAULT_BOOTSTRAP_METHOD,
    DEFAULT_CONFIDENCE,
    DEFAULT_N_RESAMPLES,
    DEFAULT_SEED,
    BootstrapMethod,
    StatsInputError,
    bootstrap_geomean,
    check_int,
    check_method,
)
from adaspark.runs.rows import (
    CONVERSATION_COLUMNS,
    CUT,
    FINISHED,
    KEY_COLUMNS,
    LOOPED,
    REQUIRED_COLUMNS,
    SINGLE_DELTA,
    STATUSES,
)

__all__ = [
    "BAND_COLUMN",
    "Comparison",
    "arm_speeds",
    "compare",
    "compare_reply_level",
    "comparisons_frame",
    "context_band",
    "count_looped",
]

# Worst status wins when an arm's runs disagree on a reply.
_STATUS_RANK = {FINISHED: 0, CUT: 1, SINGLE_DELTA: 2, LOOPED: 3}
_RANK_STATUS = {rank: status for status, rank in _STATUS_RANK.items()}

#: Context (tokens) separating Table 3's and Table 9's two bands.
DEFAULT_CONTEXT_SPLIT_TOKENS = 2048
#: Pseudo-column accepted by ``by=`` for the context band (Tables 3 and 9).
BAND_COLUMN = "context_band"

_SELECTOR_RE = re.compile(r"^(?P<base>.+)@(?P<repeat>\d+)$")


# ---------------------------------------------------------------------------------------------
# Results


@dataclass(frozen=True)
class Comparison:
    """Arm A over arm B: geometric mean of per-reply decode-speed ratios, with its interval.

    ``ratio`` is ``exp(mean(log(speed_a / speed_b)))`` over the replies kept; ``lo`` and ``hi``
    bound the percentile bootstrap interval at ``confidence`` (§4.1). ``group`` is the label of
    the group (a source, a context band) or ``None`` for all replies. With no reply left in a
    group, ``ratio``, ``lo`` and ``hi`` are NaN (a dash in a table).
    """

    arm_a: str
    arm_b: str
    ratio: float
    lo: float
    hi: float
    n_replies: int
    n_conversations: int
    n_looped_excluded: int
    n_single_delta_excluded: int
    n_cut: int
    seed: int
    n_resamples: int
    n_unpaired: int = 0
    confidence: float = DEFAULT_CONFIDENCE
    resample_unit: Literal["conversation", "reply"] = "conversation"
    group: Hashable | None = None
    method: BootstrapMethod = DEFAULT_BOOTSTRAP_METHOD

    def as_dict(self) -> dict[str, Any]:
        """Plain mapping, for a record or a table row."""
        return asdict(self)

    def format(self, digits: int = 2) -> str:
        """The paper's cell form, e.g. ``1.87× [1.80, 1.95]`` (Tables 4-6); ``–`` when empty."""
        if not math.isfinite(self.ratio):
            return "–"
        return f"{self.ratio:.{digits}f}× [{self.lo:.{digits}f}, {self.hi:.{digits}f}]"


def comparisons_frame(results: dict[Hashable, Any] | Sequence[Any]) -> pd.DataFrame:
    """One row per comparison (or per :class:`~adaspark.runs.rows.ArmThroughput`),
    for writing tables."""
    items = list(results.values()) if isinstance(results, dict) else list(results)
    return pd.DataFrame([item.as_dict() for item in items])


# ---------------------------------------------------------------------------------------------
# Per reply


def context_band(context_tokens: float, split_tokens: int = DEFAULT_CONTEXT_SPLIT_TOKENS) -> str:
    """The band of a reply decoded at ``context_tokens`` (Tables 3 and 9).

    ``"under 2,048"`` or ``"2,048 and over"`` for the default split; context is the prompt plus
    half the reply.
    """
    if not math.isfinite(context_tokens):
        raise StatsInputError(f"context must be finite, got {context_tokens}")
    return _band_labels(split_tokens)[0 if context_tokens < split_tokens else 1]


def _band_labels(split_tokens: int) -> tuple[str, str]:
    return f"under {split_tokens:,}", f"{split_tokens:,} and over"


# ---------------------------------------------------------------------------------------------
# Input checks and arm selection


def _check_frame(df: object) -> pd.DataFrame:
    if not isinstance(df, pd.DataFrame):
        raise StatsInputError(f"expected a pandas DataFrame of per-reply rows, got {type(df)!r}")
    missing = [c for c in REQUIRED_COLUMNS if c not in df.columns]
    if missing:
        raise StatsInputError(
            f"per-reply rows lack column(s) {missing}; required: {list(REQUIRED_COLUMNS)}"
        )
    if df.empty:
        raise StatsInputError("no per-reply rows")
    return df


def _numeric(rows: pd.DataFrame, column: str, what: str) -> pd.Series:
    try:
        return pd.to_numeric(rows[column], errors="raise").astype(float)
    except (TypeError, ValueError) as exc:
        raise StatsInputError(f"{what}: column {column!r} holds non-numeric values") from exc


def _available_arms(df: pd.DataFrame) -> list[str]:
    return sorted({str(a) for a in df["arm"].unique()})


def select_arm(df: pd.DataFrame, selector: str) -> pd.DataFrame:
    """Rows of one arm selector (module docstring), with ``repeat`` normalised to int."""
    if not isinstance(selector, str) or not selector:
        raise StatsInputError(f"an arm is named by a non-empty string, got {selector!r}")
    arm = df["arm"].astype(str)
    rows = df[arm == selector]
    if not rows.empty:
        return rows
    match = _SELECTOR_RE.match(selector)
    if match is not None:
        base, repeat = match["base"], int(match["repeat"])
        repeats = _numeric(df, "repeat", "arm selection")
        rows = df[(arm == base) & (repeats == repeat)]
        if not rows.empty:
            return rows
    suffix = arm.str.extract(r"^(?P<base>.+)@(?P<repeat>\d+)$")
    aliased = suffix["base"] == selector
    if aliased.any():
        rows = df[aliased].copy()
        rows["repeat"] = suffix.loc[aliased, "repeat"].astype(int)
        return rows
    raise StatsInputError(
        f"arm {selector!r} is not in the rows; arms present: {_available_arms(df)}"
    )


def _validated_arm_rows(df: pd.DataFrame, selector: str) -> pd.DataFrame:
    """The arm's rows with checked types, statuses, speeds and one row per (run, reply)."""
    rows = select_arm(df, selector)
    what = f"arm {selector!r}"
    out = rows[["repeat", *KEY_COLUMNS, "status"]].copy()
    out["status"] = out["status"].astype(str)
    bad_status = sorted(set(out["status"]) - set(STATUSES))
    if bad_status:
        raise StatsInputError(f"{what}: unknown status value(s) {bad_status}; known: {STATUSES}")
    for column in ("repeat", "turn", "reply"):
        values = _numeric(rows, column, what)
        if values.isna().any() or (values != values.round()).any():
            raise StatsInputError(f"{what}: column {column!r} must hold whole numbers")
        out[column] = values.astype(int)
    for column in ("completion_tokens", "prompt_tokens"):
        values = _numeric(rows, column, what)
        if values.isna().any() or (values < 0).any():
            raise StatsInputError(f"{what}: column {column!r} must hold counts >= 0")
        out[column] = values
    speed = _numeric(rows, "decode_tps", what)
    timed = out["status"] != SINGLE_DELTA
    bad_speed = timed & ~(np.isfinite(speed) & (speed > 0))
    needs_speed = bad_speed & (out["status"] != LOOPED)
    if needs_speed.any():
        first = out.loc[needs_speed, [*KEY_COLUMNS, "repeat", "status"]].iloc[0].to_dict()
        raise StatsInputError(
            f"{what}: {int(needs_speed.sum())} timed reply row(s) have no positive finite "
            f"decode_tps (first: {first}); a reply with one token event must have status "
            f"{SINGLE_DELTA!r}"
        )
    # A looped reply is never used for speed; a missing speed there is harmless.
    out["decode_tps"] = speed.where(timed & ~bad_speed)
    duplicated = out.duplicated(subset=["repeat", *KEY_COLUMNS], keep=False)
    if duplicated.any():
        first = out.loc[duplicated, ["repeat", *KEY_COLUMNS]].iloc[0].to_dict()
        raise StatsInputError(
            f"{what}: {int(duplicated.sum())} rows repeat a (run, reply) pair (first: {first})"
        )
    return out


# ---------------------------------------------------------------------------------------------
# Per-reply speeds of an arm


def arm_speeds(df: pd.DataFrame, arm: str) -> pd.DataFrame:
    """Per-reply decode speed of an arm, the mean over its runs (§3.4, §4.1, Table 3 caption).

    Returns one row per reply, indexed by ``(set, conversation, turn, reply)``, with columns
    ``decode_tps`` (mean over the runs that timed the reply; NaN when single-delta or looped),
    ``status`` (the worst over runs), ``completion_tokens``, ``prompt_tokens`` and
    ``context_tokens`` (prompt plus half the reply, Table 3), each a mean over runs, and
    ``n_repeats`` (runs that served the reply).
    """
    rows = _validated_arm_rows(_check_frame(df), arm)
    rows = rows.assign(
        status_rank=rows["status"].map(_STATUS_RANK),
        context_tokens=rows["prompt_tokens"] + rows["completion_tokens"] / 2.0,
    )
    grouped = rows.groupby(list(KEY_COLUMNS), sort=True)
    out = pd.DataFrame(
        {
            "decode_tps": grouped["decode_tps"].mean(),
            "status_rank": grouped["status_rank"].max(),
            "completion_tokens": grouped["completion_tokens"].mean(),
            "prompt_tokens": grouped["prompt_tokens"].mean(),
            "context_tokens": grouped["context_tokens"].mean(),
            "n_repeats": grouped["repeat"].nunique(),
        }
    )
    out["status"] = out.pop("status_rank").map(_RANK_STATUS)
    untimed = out["status"].isin([LOOPED, SINGLE_DELTA])
    out.loc[untimed, "decode_tps"] = np.nan
    columns = ["decode_tps", "status", "completion_tokens", "prompt_tokens", "context_tokens",
               "n_repeats"]
    return out[columns]


def count_looped(df: pd.DataFrame, arms: Sequence[str]) -> int:
    """Replies that looped in any of ``arms`` (Table 4's "looped" column)."""
    keys: set[tuple[Any, ...]] = set()
    for arm in arms:
        speeds = arm_speeds(df, arm)
        keys.update(speeds.index[speeds["status"] == LOOPED])
    return len(keys)


# ---------------------------------------------------------------------------------------------
# Comparisons


def reply_hardware(df: pd.DataFrame, arm: str) -> pd.Series:
    """Per reply of ``arm`` (indexed as :func:`arm_speeds`), the hardware fingerprints of the
    machines that made it, sorted and joined by ``+`` (empty where the rows have none)."""
    rows = df[df["arm"] == arm]
    if "hardware" not in rows.columns:
        return pd.Series("", index=arm_speeds(df, arm).index, dtype=object)
    hw = rows["hardware"].fillna("").astype(str)
    return hw.groupby([rows[c] for c in KEY_COLUMNS]).agg(
        lambda v: "+".join(sorted(set(v) - {""})))


def check_same_hardware(df: pd.DataFrame, arm_a: str, arm_b: str, index: pd.Index) -> None:
    """Refuse pairs of replies made on machines of two hardware fingerprints (timings are not
    comparable across machines); rows without a fingerprint (older files) pass."""
    a = reply_hardware(df, arm_a).reindex(index).fillna("")
    b = reply_hardware(df, arm_b).reindex(index).fillna("")
    bad = (a != b) & (a != "") & (b != "")
    if bad.any():
        first = index[bad.to_numpy()][0]
        raise StatsInputError(
            f"arms {arm_a!r} and {arm_b!r}: {int(bad.sum())} of {len(index)} paired replies were "
            f"made on machines of different hardware fingerprints (first: {first}, "
            f"{a[first]} against {b[first]}), whose timings do not compare. Run both arms on one "
            "kind of machine (launcher.shard=conversations keeps a reply's arms on one node), or "
            "pass cross_hardware=True to pair across them anyway")


def _paired(df: pd.DataFrame, arm_a: str, arm_b: str) -> tuple[pd.DataFrame, int]:
    """Replies both arms served, side by side, and how many only one arm served."""
    if arm_a == arm_b:
        raise StatsInputError(f"cannot compare arm {arm_a!r} with itself")
    speeds_a = arm_speeds(df, arm_a)
    speeds_b = arm_speeds(df, arm_b)
    pairs = speeds_a.add_suffix("_a").join(speeds_b.add_suffix("_b"), how="inner")
    n_unpaired = len(speeds_a.index.symmetric_difference(speeds_b.index))
    if pairs.empty:
        raise StatsInputError(
            f"arms {arm_a!r} and {arm_b!r} share no reply (compared on {list(KEY_COLUMNS)})"
        )
    return pairs, n_unpaired


def _group_labels(
    pairs: pd.DataFrame,
    by: str,
    arm_a: str,
    arm_b: str,
    context_arm: str | None,
    split_tokens: int,
) -> tuple[pd.Series, list[Hashable]]:
    """Group label of each paired reply, and the order groups are reported in."""
    if by == BAND_COLUMN:
        if context_arm is None:
            context = (pairs["context_tokens_a"] + pairs["context_tokens_b"]) / 2.0
        elif context_arm == arm_a:
            context = pairs["context_tokens_a"]
        elif context_arm == arm_b:
            context = pairs["context_tokens_b"]
        else:
            raise StatsInputError(
                f"context_arm must be one of the compared arms {arm_a!r}, {arm_b!r}, or None; "
                f"got {context_arm!r}"
            )
        labels = pd.Series(
            [context_band(c, split_tokens) for c in context], index=pairs.index, dtype=object
        )
        return labels, list(_band_labels(split_tokens))
    if by in KEY_COLUMNS:
        labels = pd.Series(pairs.index.get_level_values(by), index=pairs.index, dtype=object)
        return labels, list(dict.fromkeys(labels))
    raise StatsInputError(
        f"cannot group by {by!r}; use one of {[*KEY_COLUMNS, BAND_COLUMN]} "
        f"(the source is column 'set')"
    )


def _compare_pairs(
    pairs: pd.DataFrame,
    *,
    arm_a: str,
    arm_b: str,
    seed: int,
    n_resamples: int,
    confidence: float,
    resample_unit: Literal["conversation", "reply"],
    method: BootstrapMethod,
    n_unpaired: int,
    group: Hashable | None,
    empty_ok: bool,
) -> Comparison:
    looped = (pairs["status_a"] == LOOPED) | (pairs["status_b"] == LOOPED)
    single = ~looped & ((pairs["status_a"] == SINGLE_DELTA) | (pairs["status_b"] == SINGLE_DELTA))
    kept = pairs[~looped & ~single]
    n_cut = int(((kept["status_a"] == CUT) | (kept["status_b"] == CUT)).sum())
    counts = {
        "n_looped_excluded": int(looped.sum()),
        "n_single_delta_excluded": int(single.sum()),
        "n_cut": n_cut,
    }
    common = {
        "arm_a": arm_a,
        "arm_b": arm_b,
        "seed": seed,
        "n_resamples": n_resamples,
        "n_unpaired": n_unpaired,
        "confidence": float(confidence),
        "resample_unit": resample_unit,
        "group": group,
        "method": method,
    }
    if kept.empty:
        if not empty_ok:
            where = "" if group is None else f" in group {group!r}"
            raise StatsInputError(
                f"no reply of {arm_a!r} over {arm_b!r}{where} is left after exclusions "
                f"({len(pairs)} paired, {counts['n_looped_excluded']} looped, "
                f"{counts['n_single_delta_excluded']} single-delta)"
            )
        nan = float("nan")
        return Comparison(
            ratio=nan, lo=nan, hi=nan, n_replies=0, n_conversations=0, **counts, **common
        )
    log_ratio = np.log(kept["decode_tps_a"].to_numpy()) - np.log(kept["decode_tps_b"].to_numpy())
    conversations = list(
        zip(*(kept.index.get_level_values(c) for c in CONVERSATION_COLUMNS), strict=True)
    )
    ratio, lo, hi, _ = bootstrap_geomean(
        log_ratio,
        conversations if resample_unit == "conversation" else None,
        seed=seed,
        n_resamples=n_resamples,
        confidence=confidence,
        method=method,
    )
    return Comparison(
        ratio=ratio,
        lo=lo,
        hi=hi,
        n_replies=len(kept),
        n_conversations=len(set(conversations)),
        **counts,
        **common,
    )


def _compare(
    df: pd.DataFrame,
    arm_a: str,
    arm_b: str,
    *,
    seed: int,
    n_resamples: int,
    by: str | None,
    confidence: float,
    context_arm: str | None,
    context_split_tokens: int,
    resample_unit: Literal["conversation", "reply"],
    method: BootstrapMethod,
    cross_hardware: bool = False,
) -> Comparison | dict[Hashable, Comparison]:
    seed = check_int(seed, "seed", minimum=0)
    n_resamples = check_int(n_resamples, "n_resamples", minimum=1)
    method = check_method(method)
    pairs, n_unpaired = _paired(df, arm_a, arm_b)
    if not cross_hardware:
        check_same_hardware(df, arm_a, arm_b, pairs.index)
    options: dict[str, Any] = {
        "arm_a": arm_a,
        "arm_b": arm_b,
        "seed": seed,
        "n_resamples": n_resamples,
        "confidence": confidence,
        "resample_unit": resample_unit,
        "method": method,
    }
    if by is None:
        return _compare_pairs(pairs, n_unpaired=n_unpaired, group=None, empty_ok=False, **options)
    labels, order = _group_labels(pairs, by, arm_a, arm_b, context_arm, context_split_tokens)
    results: dict[Hashable, Comparison] = {}
    for label in order:
        subset = pairs[(labels == label).to_numpy()]
        results[label] = _compare_pairs(subset, n_unpaired=0, group=label, empty_ok=True, **options)
    return results


@overload
def compare(
    df: pd.DataFrame,
    arm_a: str,
    arm_b: str,
    *,
    seed: int = ...,
    n_resamples: int = ...,
    by: None = ...,
    confidence: float = ...,
    context_arm: str | None = ...,
    context_split_tokens: int = ...,
    method: BootstrapMethod = ...,
    cross_hardware: bool = ...,
) -> Comparison: ...


@overload
def compare(
    df: pd.DataFrame,
    arm_a: str,
    arm_b: str,
    *,
    seed: int = ...,
    n_resamples: int = ...,
    by: str,
    confidence: float = ...,
    context_arm: str | None = ...,
    context_split_tokens: int = ...,
    method: BootstrapMethod = ...,
    cross_hardware: bool = ...,
) -> dict[Hashable, Comparison]: ...


def compare(
    df: pd.DataFrame,
    arm_a: str,
    arm_b: str,
    *,
    seed: int = DEFAULT_SEED,
    n_resamples: int = DEFAULT_N_RESAMPLES,
    by: str | None = None,
    confidence: float = DEFAULT_CONFIDENCE,
    context_arm: str | None = None,
    context_split_tokens: int = DEFAULT_CONTEXT_SPLIT_TOKENS,
    method: BootstrapMethod = DEFAULT_BOOTSTRAP_METHOD,
    cross_hardware: bool = False,
) -> Comparison | dict[Hashable, Comparison]:
    """Arm A over arm B as the paper compares arms (§4.1; Tables 3-6, 8, 9; Figure 6).

    The geometric mean over replies of ``speed_a / speed_b`` (each arm's speed on a reply being
    the mean over its runs, :func:`arm_speeds`), with a bootstrap interval that resamples whole
    conversations (:func:`~adaspark.analysis.bootstrap.bootstrap_geomean`: ``n_resamples``
    resamples from ``seed``, ``method`` percentile or BCa, all recorded in the result). Replies
    looped in either arm are left out and counted, then single-delta replies in either arm; cut
    replies stay in and are counted; replies only one arm served are left out and counted as
    ``n_unpaired``.

    ``by=None`` gives one :class:`Comparison` over all replies and raises
    :class:`StatsInputError` when none is left. ``by="set"`` (per source, Tables 6 and 8),
    ``by="context_band"`` (under / at-or-over ``context_split_tokens``, Tables 3 and 9; the
    context of ``context_arm`` or, by default, the mean of both arms') or another key column
    gives a dict from group label to :class:`Comparison`, each group bootstrapped over its own
    conversations; a group left empty by exclusions has NaN ratio and interval.

    Replies are paired within one hardware fingerprint (the rows' ``hardware`` column,
    :mod:`adaspark.runs.hardware`): a pair whose two replies came from machines of two
    fingerprints is refused (:class:`StatsInputError`) unless ``cross_hardware=True``.
    """
    return _compare(
        df,
        arm_a,
        arm_b,
        cross_hardware=cross_hardware,
        seed=seed,
        n_resamples=n_resamples,
        by=by,
        confidence=confidence,
        context_arm=context_arm,
        context_split_tokens=context_split_tokens,
        resample_unit="conversation",
        method=method,
    )


def compare_reply_level(
    df: pd.DataFrame,
    arm_a: str,
    arm_b: str,
    *,
    seed: int = DEFAULT_SEED,
    n_resamples: int = DEFAULT_N_RESAMPLES,
    confidence: float = DEFAULT_CONFIDENCE,
) -> Comparison:
    """As :func:`compare` over all replies, but resampling replies instead of conversations.

    Not the paper's interval: it treats replies of one conversation as independent and is too
    narrow when they are correlated (same prompt history, same text style). It exists to show
    that difference (tests) and for diagnostics; ``resample_unit`` records which was used.
    """
    result = _compare(
        df,
        arm_a,
        arm_b,
        seed=seed,
        n_resamples=n_resamples,
        by=None,
        confidence=confidence,
        context_arm=None,
        context_split_tokens=DEFAULT_CONTEXT_SPLIT_TOKENS,
        resample_unit="reply",
        method=DEFAULT_BOOTSTRAP_METHOD,
    )
    assert isinstance(result, Comparison)
    return result
