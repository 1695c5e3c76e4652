"""The claims ledger's measures (:mod:`adaspark.analysis.claims`): each a function of a regime
that returns our value (or one per group), registered under the name the ledger uses
(``measure: {name: ...}``); :class:`~adaspark.analysis.claim_rule.NotMeasured` says why a
regime cannot measure it."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pandas as pd

from adaspark.analysis.claim_rule import REPLAY, NotMeasured, Regime, Value

# -- measures ---------------------------------------------------------------------------------

Measured = Value | list[Value]
MeasureFn = Callable[..., Measured]
MEASURES: dict[str, MeasureFn] = {}


def measure(name: str) -> Callable[[MeasureFn], MeasureFn]:
    """Register a measure under the name the ledger uses."""

    def deco(fn: MeasureFn) -> MeasureFn:
        MEASURES[name] = fn
        return fn

    return deco


def compare_arms(replies: pd.DataFrame, a: str, b: str, options: Any, by: str | None = None) -> Any:
    from adaspark.analysis.records import has_arm
    from adaspark.analysis.tables.common import compare_or_none

    for arm in (a, b):
        if not has_arm(replies, arm):
            raise NotMeasured(f"{arm} was not run here")
    c = compare_or_none(replies, a, b, options, by=by,
                        context_arm=a if by == "context_band" else None)
    if c is None or (not by and math.isnan(c.ratio)):
        raise NotMeasured(f"no reply of both {a} and {b} is left to compare")
    return c


def comparison_value(c: Any, group: str | None = None) -> Value:
    """A comparison as a value; with fewer than two conversations a bootstrap over
    conversations has no spread, so the interval is unbounded (never a verdict on one
    conversation)."""
    if int(c.n_conversations) < 2:
        return Value(float(c.ratio), -math.inf, math.inf, int(c.n_replies), group)
    return Value(float(c.ratio), float(c.lo), float(c.hi), int(c.n_replies), group)


@measure("ratio")
def ratio(regime: Regime, options: Any, *, a: str, b: str) -> Measured:
    """Arm ``a`` over arm ``b``: geometric mean of per-reply decode ratios, bootstrap interval."""
    return comparison_value(compare_arms(regime.replies(), a, b, options))


@measure("ratio_by_source")
def ratio_by_source(regime: Regime, options: Any, *, a: str, b: str) -> Measured:
    """``a`` over ``b`` per source (Table 8): every source must meet the bound."""
    res = compare_arms(regime.replies(), a, b, options, by="set")
    return [comparison_value(c, str(g)) for g, c in res.items() if not math.isnan(c.ratio)]


def first_request_dropped(replies: pd.DataFrame) -> pd.DataFrame:
    """Every reply but the first one served (the lowest ``order`` of each arm's run): the
    request that holds the scheduler's cold start (§4.6)."""
    from adaspark.runs.rows import KEY_COLUMNS

    if "order" not in replies.columns or replies.empty:
        return replies
    keys = replies[list(KEY_COLUMNS)].astype(str).agg("/".join, axis=1)
    first = replies.loc[replies.groupby("entry")["order"].idxmin()] \
        if "entry" in replies.columns else replies.loc[[replies["order"].idxmin()]]
    drop = set(first[list(KEY_COLUMNS)].astype(str).agg("/".join, axis=1))
    return replies[~keys.isin(drop)]


def pinned_arms(block: str) -> tuple[str, dict[int, str]]:
    """A drafter block's AdaSpark arm and its pinned widths (``dspark`` or ``draft-model``)."""
    from adaspark.analysis.records import ADASPARK, ADASPARK_DSPARK, PINNED, PINNED_DSPARK

    if block == "dspark":
        return ADASPARK_DSPARK, PINNED_DSPARK
    if block == "draft-model":
        return ADASPARK, PINNED
    raise ValueError(f"block {block!r}: one of dspark, draft-model")


def _best_pinned(replies: pd.DataFrame, options: Any, by: str | None,
                 block: str) -> dict[str, tuple[int, Any]]:
    """Per group (``all`` without ``by``): the pinned width fastest against AdaSpark (Table 3's
    bold cell) and AdaSpark over it, on ``block``'s arms."""
    from adaspark.analysis.records import has_arm

    ada, pinned = pinned_arms(block)
    ran = [w for w, arm in pinned.items() if has_arm(replies, arm)]
    if not ran or not has_arm(replies, ada):
        raise NotMeasured(f"{ada} and its pinned widths were not all run here")
    best: dict[str, tuple[int, float]] = {}
    for w in ran:
        res = compare_arms(replies, pinned[w], ada, options, by=by)
        groups = res.items() if by else [("all replies", res)]
        for g, c in groups:
            if not math.isnan(c.ratio) and (str(g) not in best or c.ratio > best[str(g)][1]):
                best[str(g)] = (w, c.ratio)
    out = {}
    for g, (w, _r) in best.items():
        res = compare_arms(replies, ada, pinned[w], options, by=by)
        out[g] = (w, res if not by else res[next(k for k in res if str(k) == g)])
    return out


@measure("over_best_pinned")
def over_best_pinned(regime: Regime, options: Any, *, block: str, bands: bool = True,
                     after_first: bool = False) -> Measured:
    """AdaSpark over the best pinned width (Table 3's AdaSpark / best) on ``block``'s arms, over
    all replies and, with ``bands``, in each context band; ``after_first`` leaves out the first
    request (the cold start)."""
    from adaspark.analysis.stats import BAND_COLUMN

    replies = regime.replies()
    if after_first:
        replies = first_request_dropped(replies)
    out = [comparison_value(c, f"all replies (best {w} rows)")
           for _g, (w, c) in _best_pinned(replies, options, None, block).items()]
    if bands:
        out += [comparison_value(c, f"{g} (best {w} rows)")
                for g, (w, c) in _best_pinned(replies, options, BAND_COLUMN, block).items()]
    return out


@measure("other_pinned")
def other_pinned(regime: Regime, options: Any, *, block: str) -> Measured:
    """Each pinned width but the best over AdaSpark (Table 3's width columns)."""
    from adaspark.analysis.records import has_arm

    ada, pinned = pinned_arms(block)
    replies = regime.replies()
    (w_best, _c), = _best_pinned(replies, options, None, block).values()
    return [comparison_value(compare_arms(replies, arm, ada, options), f"{w} rows")
            for w, arm in pinned.items() if w != w_best and has_arm(replies, arm)]


def _survey_medians(regime: Regime) -> pd.DataFrame:
    from adaspark.replay.survey import survey_medians

    survey = regime.survey()
    if survey.empty:
        raise NotMeasured("no verify-cost survey in this regime (the survey stage runs on "
                          "this machine only)")
    return survey_medians(survey)


@measure("verify_ratio")
def verify_ratio(regime: Regime, options: Any, *, wide: int, narrow: int) -> Measured:
    """T(wide) / T(narrow) at the surveyed context nearest the paper's 1,596 tokens."""
    med = _survey_medians(regime)
    ctx = med.loc[(med["context_paper"] - 1596).abs().idxmin(), "context"]
    at = med[med["context"] == ctx].set_index("width")["verify_ms"]
    if wide not in at.index or narrow not in at.index:
        raise NotMeasured(f"the survey has no {wide}- or {narrow}-row verify (survey.widths)")
    return Value.point(float(at[wide] / at[narrow]), group=f"{int(ctx):,} tokens")


@measure("slope_ratio")
def slope_ratio(regime: Regime, options: Any, *, wide: int, narrow: int) -> Measured:
    """β of Eq. (3) at ``wide`` rows over β at ``narrow`` rows (Table 1's context slope)."""
    import numpy as np

    from adaspark.replay.survey import fit_context_law

    med = _survey_medians(regime)
    beta = {}
    for w in (wide, narrow):
        m = med[med["width"] == w]
        if m["context"].nunique() < 2:
            raise NotMeasured(f"the survey has no {w}-row verify at two contexts")
        beta[w] = fit_context_law(m["context"].to_numpy(dtype=float),
                                  m["verify_ms"].to_numpy(dtype=float))[1]
    if beta[narrow] <= 0:
        raise NotMeasured(f"the {narrow}-row verify does not grow with context here "
                          f"(β = {beta[narrow]:.3g})")
    return Value.point(float(np.float64(beta[wide]) / beta[narrow]))


@measure("logloss_change")
def logloss_change(regime: Regime, options: Any) -> Measured:
    """Table 2's change: the fitted acceptance model's log loss over the head's, minus one."""
    t = regime.table2()
    if t.empty or "change" not in t.columns or pd.isna(t["change"].iloc[0]):
        raise NotMeasured("no instrumented AdaSpark run with labelled nodes (Table 2)")
    return Value.point(float(t["change"].iloc[0]), n=int(t["nodes"].iloc[0]))


def adaspark_rounds(regime: Regime, arm: str) -> pd.DataFrame:
    r = regime.rounds(arm)
    if r.empty:
        raise NotMeasured(f"no round log of {arm} in this regime")
    return r.sort_values("seq")


@dataclass(frozen=True)
class ColdStart:
    """The first request's cold start (§4.6): its rounds at a width chosen for measurement, the
    time they took (verify plus the drafter and tree build, D) and the first request's;
    ``later``: cold-start rounds of later requests (the first ended inside its cold start)."""

    rounds: int
    seconds: float
    first_request_rounds: int
    first_request_s: float
    later: int


def first_cold_start(rounds: pd.DataFrame) -> ColdStart:
    """The cold start of the first request of AdaSpark's ``rounds``."""
    from adaspark.analysis.records import COLD_START

    first = rounds[rounds["request_id"] == rounds["request_id"].iloc[0]]
    cold = first["why"].isin(COLD_START)
    later = int(rounds["why"].isin(COLD_START).sum()) - int(cold.sum())
    spent = first["fixed_s"].astype(float) + first["measured_verify_s"].astype(float)
    return ColdStart(int(cold.sum()), float(spent[cold].sum()), len(first), float(spent.sum()),
                     later)


@measure("cold_start")
def cold_start(regime: Regime, options: Any, *, what: str, arm: str) -> Measured:
    """The first request's cold start (§4.6): its rounds at a width chosen for measurement
    (``rounds``), or their time over the first request's decode time (``share``); not measured
    when the first request ended inside it."""
    c = first_cold_start(adaspark_rounds(regime, arm))
    if c.later > 0:
        raise NotMeasured(f"the first request ended inside the cold start ({c.later} cold-start "
                          f"rounds came later; its {c.first_request_rounds} rounds are too few: "
                          "a longer first reply is needed)")
    if what == "rounds":
        return Value.point(c.rounds, n=c.first_request_rounds)
    if c.first_request_s <= 0:
        raise NotMeasured("the first request's rounds record no time")
    return Value.point(c.seconds / c.first_request_s, n=c.first_request_rounds)


@measure("cost_error")
def cost_error(regime: Regime, options: Any, *, arm: str) -> Measured:
    """Figure 9's median absolute relative error of the cost estimate, second half of the run."""
    from adaspark.analysis.figures.fig9 import estimate_error

    r = adaspark_rounds(regime, arm)
    err = estimate_error(r)
    if math.isnan(err):
        raise NotMeasured("no round of the second half has an estimate")
    return Value.point(err, n=len(r))


@measure("fig5_margin")
def fig5_margin(regime: Regime, options: Any) -> Measured:
    """Figure 5: the 16-row tree's median extra tokens per round minus its median extra time per
    round over the 8-row tree's (above 0: the second eight rows pay)."""
    pts = regime.fig5()
    if pts.empty:
        raise NotMeasured("Figure 5's pinned pair was not replayed here")
    return Value.point(float(pts["extra_tokens"].median() - pts["extra_time"].median()),
                       n=len(pts))


@measure("width_share")
def width_share(regime: Regime, options: Any, *, width: int, arm: str) -> Measured:
    """Figure 8: the share of AdaSpark's rounds at ``width`` rows, cold-start rounds left out."""
    from adaspark.analysis.figures.fig8 import width_shares

    r = adaspark_rounds(regime, arm)
    shares = width_shares(r)
    return Value.point(float(shares.get(width, 0.0)), n=len(r), group=f"{width} rows")


@measure("identical_share")
def identical_share(regime: Regime, options: Any, *, a: str, b: str) -> Measured:
    """Table 10: the share of replies whose text is byte-identical between ``a``'s first run and
    ``b``."""
    from adaspark.analysis.records import arm_rows
    from adaspark.analysis.tables.table10 import reply_hashes

    if regime.kind == REPLAY:
        raise NotMeasured("a replay's replies are the labelled text, identical by construction")
    replies = regime.replies()
    if not {"text", "text_sha256"} & set(replies.columns):
        raise NotMeasured("the replies hold no text")
    first = arm_rows(replies, f"{a}@1")
    first = first if not first.empty else arm_rows(replies, a)
    other = arm_rows(replies, b)
    if first.empty or other.empty:
        raise NotMeasured(f"{a} and {b} were not both run here")
    ha, hb = reply_hashes(first), reply_hashes(other)
    both = ha.index.intersection(hb.index)
    if not len(both):
        raise NotMeasured(f"{a} and {b} share no reply")
    return Value.point(float((ha.loc[both] == hb.loc[both]).mean()), n=len(both))


