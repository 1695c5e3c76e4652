"""The claims ledger's verdicts: each quantitative claim of the paper (``data/claims.yaml``)
measured in every regime that can test it, judged by one written rule.

Regimes: ``cpu``, this machine's real runs (``runs/arms``, ``runs/extra``, ``runs/survey``;
measured), and ``replay:<device>``, the replay stage's records under each device model
(``runs/replay``), labelled with the model's own label (reconstructed from the paper, measured
here, or synthetic). A measurement is a :class:`Value`: an estimate with its interval (the 95%
percentile bootstrap over conversations of §4.1 for ratios of decode speed; a point, lo = hi,
for counts and shares, which have no interval), or one value per group (context band, source,
pinned width) that must each meet the bound.

The rule (:data:`RULE`), written once here and printed in ``paper/claims.md``:

- per regime: ``holds`` when our interval lies inside the paper's bound, ``fails`` when it lies
  wholly outside it, ``inconclusive`` otherwise (the interval straddles an edge); a claim made
  per group holds when every group holds and fails when any group fails;
- overall: the claim's deciding regimes (``decides`` in the ledger: ``cpu``, ``reconstructed``,
  ``dense``, ``routed``) decide it: ``holds`` when every deciding regime that was measured
  holds, ``fails`` when any fails, ``inconclusive`` when none fails and one is inconclusive,
  ``not-testable`` when no deciding regime could be measured (or the ledger names none, with
  the reason).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

HOLDS, FAILS, INCONCLUSIVE, NOT_TESTABLE = "holds", "fails", "inconclusive", "not-testable"
VERDICTS = (HOLDS, FAILS, INCONCLUSIVE, NOT_TESTABLE)
RULE = (
    "Per regime, a claim holds when our interval (95% percentile bootstrap over conversations "
    "for a ratio of decode speeds; a point for a count or a share) lies inside the paper's "
    "bound, fails when it lies wholly outside it, and is inconclusive when it straddles an edge;"
    " a claim made per group (context band, source, pinned width) holds when every group holds "
    "and fails when any group fails. Overall, the claim's deciding regimes decide: it holds when"
    " every deciding regime that was measured holds, fails when any fails, is inconclusive when "
    "none fails and one is inconclusive, and is not-testable when no deciding regime could be "
    "measured."
)
CPU = "cpu"
REPLAY = "replay"
#: ``decides`` entries that name a set of regimes rather than one.
DECIDE_SETS = ("cpu", "reconstructed", "dense", "routed")


class NotMeasured(Exception):
    """A regime cannot measure a claim; the message says why in one line."""


# -- the rule ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Bound:
    """What the paper's numbers allow: a closed interval (either end may be infinite)."""

    lo: float = -math.inf
    hi: float = math.inf
    width: int | None = None  # width_share: the width whose share is bounded

    @classmethod
    def parse(cls, spec: Mapping[str, Any], where: str) -> Bound:
        width = spec.get("width")
        if "range" in spec:
            lo, hi = (float(x) for x in spec["range"])
            if lo > hi:
                raise ValueError(f"{where}: range {spec['range']} runs backwards")
            return cls(lo, hi, width)
        if "at_least" in spec:
            return cls(lo=float(spec["at_least"]), width=width)
        if "at_most" in spec:
            return cls(hi=float(spec["at_most"]), width=width)
        raise ValueError(f"{where}: a bound is {{range: [lo, hi]}}, {{at_least: x}} or "
                         f"{{at_most: x}}; got {dict(spec)}")

    def text(self) -> str:
        if math.isinf(self.lo) and math.isinf(self.hi):
            return "any"
        if math.isinf(self.lo):
            return f"≤ {self.hi:g}"
        if math.isinf(self.hi):
            return f"≥ {self.lo:g}"
        return f"{self.lo:g} to {self.hi:g}"


@dataclass(frozen=True)
class Value:
    """Our measurement: an estimate and its interval (a point: lo = hi = estimate)."""

    estimate: float
    lo: float
    hi: float
    n: int | None = None
    group: str | None = None

    @classmethod
    def point(cls, x: float, n: int | None = None, group: str | None = None) -> Value:
        return cls(float(x), float(x), float(x), n, group)

    def text(self) -> str:
        if self.lo == self.hi:
            return f"{self.estimate:.4g}"
        if math.isinf(self.lo) and math.isinf(self.hi):
            return f"{self.estimate:.3f} (one conversation: no interval)"
        return f"{self.estimate:.3f} [{self.lo:.3f}, {self.hi:.3f}]"


def value_record(v: Value) -> dict[str, Any]:
    """A value as JSON holds it: an unbounded end of the interval is null."""
    d = asdict(v)
    for k in ("lo", "hi"):
        if math.isinf(d[k]):
            d[k] = None
    return d


def value_of(d: Mapping[str, Any]) -> Value:
    """A :func:`value_record` back as a value (null ends unbounded)."""
    lo = -math.inf if d.get("lo") is None else float(d["lo"])
    hi = math.inf if d.get("hi") is None else float(d["hi"])
    return Value(float(d["estimate"]), lo, hi, d.get("n"), d.get("group"))


def verdict(value: Value, bound: Bound) -> str:
    """The per-regime rule for one value (module docstring): inside -> holds, wholly outside
    -> fails, straddling an edge -> inconclusive; a NaN estimate is not a measurement."""
    if any(math.isnan(x) for x in (value.estimate, value.lo, value.hi)):
        return NOT_TESTABLE
    if value.lo >= bound.lo and value.hi <= bound.hi:
        return HOLDS
    if value.hi < bound.lo or value.lo > bound.hi:
        return FAILS
    return INCONCLUSIVE


def combine(verdicts: Iterable[str]) -> str:
    """Several verdicts that must all hold (a claim's groups, or its deciding regimes): any
    fails -> fails; all measured hold -> holds; none measured -> not-testable; else
    inconclusive."""
    vs = [v for v in verdicts if v != NOT_TESTABLE]
    if not vs:
        return NOT_TESTABLE
    if FAILS in vs:
        return FAILS
    return HOLDS if all(v == HOLDS for v in vs) else INCONCLUSIVE


# -- regimes ----------------------------------------------------------------------------------


@dataclass
class Regime:
    """Where a claim is measured: this CPU's real runs or a replay under one device model.
    The frames are read lazily by the stage (:mod:`adaspark.stages.claims`)."""

    name: str
    kind: str                                  # cpu | replay
    label: str                                 # measured | reconstructed | synthetic
    paper_target: str | None = None
    replies: Callable[[], pd.DataFrame] = field(default=lambda: pd.DataFrame(), repr=False)
    rounds: Callable[[str], pd.DataFrame] = field(default=lambda _a: pd.DataFrame(),
                                                  repr=False)
    survey: Callable[[], pd.DataFrame] = field(default=lambda: pd.DataFrame(), repr=False)
    fig5: Callable[[], pd.DataFrame] = field(default=lambda: pd.DataFrame(), repr=False)
    table2: Callable[[], pd.DataFrame] = field(default=lambda: pd.DataFrame(), repr=False)

    def decided_by(self, decides: Iterable[str], targets: Mapping[str, str]) -> bool:
        """Whether this regime is one of the deciding regimes ``decides`` names."""
        for d in decides:
            if d == CPU and self.kind == CPU:
                return True
            if self.kind == REPLAY and self.label == "reconstructed" and (
                    d == "reconstructed" or targets.get(self.paper_target or "") == d):
                return True
            if d == f"{REPLAY}:{self.name.split(':', 1)[-1]}" and self.kind == REPLAY:
                return True
        return False


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


def _compare(replies: pd.DataFrame, a: str, b: str, options: Any, by: str | None = None) -> Any:
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


def _value(c: Any, group: str | None = None) -> Value:
    """A comparison as a value; with fewer than two conversations a bootstrap over
    conversations has no spread, so the interval is unbounded (never a verdict on one
    conversation)."""
    if int(c.n_conversations) < 2:
        return Value(float(c.ratio), -math.inf, math.inf, int(c.n_replies), group)
    return Value(float(c.ratio), float(c.lo), float(c.hi), int(c.n_replies), group)


@measure("ratio")
def ratio(regime: Regime, options: Any, *, a: str, b: str) -> Measured:
    """Arm ``a`` over arm ``b``: geometric mean of per-reply decode ratios, bootstrap interval."""
    return _value(_compare(regime.replies(), a, b, options))


@measure("ratio_by_source")
def ratio_by_source(regime: Regime, options: Any, *, a: str, b: str) -> Measured:
    """``a`` over ``b`` per source (Table 8): every source must meet the bound."""
    res = _compare(regime.replies(), a, b, options, by="set")
    return [_value(c, str(g)) for g, c in res.items() if not math.isnan(c.ratio)]


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
        res = _compare(replies, pinned[w], ada, options, by=by)
        groups = res.items() if by else [("all replies", res)]
        for g, c in groups:
            if not math.isnan(c.ratio) and (str(g) not in best or c.ratio > best[str(g)][1]):
                best[str(g)] = (w, c.ratio)
    out = {}
    for g, (w, _r) in best.items():
        res = _compare(replies, ada, pinned[w], options, by=by)
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
    out = [_value(c, f"all replies (best {w} rows)")
           for _g, (w, c) in _best_pinned(replies, options, None, block).items()]
    if bands:
        out += [_value(c, f"{g} (best {w} rows)")
                for g, (w, c) in _best_pinned(replies, options, BAND_COLUMN, block).items()]
    return out


@measure("other_pinned")
def other_pinned(regime: Regime, options: Any, *, block: str) -> Measured:
    """Each pinned width but the best over AdaSpark (Table 3's width columns)."""
    from adaspark.analysis.records import has_arm

    ada, pinned = pinned_arms(block)
    replies = regime.replies()
    (w_best, _c), = _best_pinned(replies, options, None, block).values()
    return [_value(_compare(replies, arm, ada, options), f"{w} rows")
            for w, arm in pinned.items() if w != w_best and has_arm(replies, arm)]


def _survey_medians(regime: Regime) -> pd.DataFrame:
    from adaspark.analysis.survey import survey_medians

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

    from adaspark.analysis.survey import fit_context_law

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


def _adaspark_rounds(regime: Regime, arm: str) -> pd.DataFrame:
    r = regime.rounds(arm)
    if r.empty:
        raise NotMeasured(f"no round log of {arm} in this regime")
    return r.sort_values("seq")


@measure("cold_start")
def cold_start(regime: Regime, options: Any, *, what: str, arm: str) -> Measured:
    """The first request's cold start (§4.6): its rounds at a width chosen for measurement
    (``rounds``), or their time over the first request's decode time (``share``: verify plus
    the drafter and tree build, D, of every round)."""
    from adaspark.analysis.records import COLD_START

    r = _adaspark_rounds(regime, arm)
    first = r[r["request_id"] == r["request_id"].iloc[0]]
    cold = first["why"].isin(COLD_START)
    spill = int(r["why"].isin(COLD_START).sum()) - int(cold.sum())
    if spill > 0:
        raise NotMeasured(f"the first request ended inside the cold start ({spill} cold-start "
                          f"rounds came later; its {len(first)} rounds are too few: a longer "
                          "first reply is needed)")
    if what == "rounds":
        return Value.point(int(cold.sum()), n=len(first))
    spent = first["fixed_s"].astype(float) + first["measured_verify_s"].astype(float)
    total = float(spent.sum())
    if total <= 0:
        raise NotMeasured("the first request's rounds record no time")
    return Value.point(float(spent[cold].sum()) / total, n=len(first))


@measure("cost_error")
def cost_error(regime: Regime, options: Any, *, arm: str) -> Measured:
    """Figure 9's median absolute relative error of the cost estimate, second half of the run."""
    from adaspark.analysis.figures.fig9 import estimate_error

    r = _adaspark_rounds(regime, arm)
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

    r = _adaspark_rounds(regime, arm)
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


# -- the ledger -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Claim:
    """One entry of ``data/claims.yaml``."""

    id: str
    paper: str
    source: str
    tested_by: str
    measure: dict[str, Any]
    bound: dict[str, Any]
    decides: tuple[str, ...]
    why: str = ""

    def bound_for(self, paper_target: str | None) -> Bound | None:
        """The bound in a regime: the claim's, or its paper target's (``by_target``); None where
        a per-target claim meets a regime of no paper target."""
        if "by_target" in self.bound:
            spec = self.bound["by_target"].get(paper_target or "")
            return None if spec is None else Bound.parse(spec, f"claim {self.id}")
        return Bound.parse(self.bound, f"claim {self.id}") if self.bound else None


@dataclass(frozen=True)
class Ledger:
    claims: tuple[Claim, ...]
    targets: dict[str, str]


def read_ledger(path: Path) -> Ledger:
    """``data/claims.yaml``, checked: every claim has its fields, a known measure, a readable
    bound and known deciding regimes; ids are unique. A bad entry raises ValueError naming it."""
    import yaml

    raw = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    targets = {str(k): str(v) for k, v in (raw.get("targets") or {}).items()}
    claims, seen = [], set()
    for i, c in enumerate(raw.get("claims") or []):
        where = f"{path}: claim {c.get('id', i)}"
        missing = [k for k in ("id", "paper", "source", "tested_by", "measure", "decides")
                   if k not in c]
        if missing:
            raise ValueError(f"{where} lacks {', '.join(missing)}")
        if c["id"] in seen:
            raise ValueError(f"{where}: the id is used twice")
        seen.add(c["id"])
        name = c["measure"].get("name")
        if name != "none" and name not in MEASURES:
            raise ValueError(f"{where}: measure {name!r} is not one of {sorted(MEASURES)}")
        bad = [d for d in c["decides"] if d not in DECIDE_SETS and not
               str(d).startswith(f"{REPLAY}:")]
        if bad:
            raise ValueError(f"{where}: decides {bad}: each is one of {DECIDE_SETS} or "
                             "replay:<device>")
        if not c["decides"] and not c.get("why"):
            raise ValueError(f"{where}: no deciding regime, and no `why`")
        claim = Claim(str(c["id"]), " ".join(str(c["paper"]).split()), str(c["source"]),
                      " ".join(str(c["tested_by"]).split()), dict(c["measure"]),
                      dict(c.get("bound") or {}), tuple(c["decides"]),
                      " ".join(str(c.get("why", "")).split()))
        if name != "none":
            if not claim.bound:
                raise ValueError(f"{where}: a measured claim needs a bound")
            for t in claim.bound.get("by_target", {None: None}):
                claim.bound_for(t)  # parses, or raises naming the claim
        claims.append(claim)
    return Ledger(tuple(claims), targets)


# -- evaluation -------------------------------------------------------------------------------


@dataclass
class RegimeResult:
    regime: str
    label: str
    verdict: str
    why: str = ""
    bound: str = ""
    values: list[dict[str, Any]] = field(default_factory=list)
    decides: bool = False

    @property
    def text(self) -> str:
        return "; ".join((f"{v['group']}: " if v.get("group") else "") + value_of(v).text()
                         for v in self.values)


def judge(claim: Claim, regime: Regime, options: Any, targets: Mapping[str, str]) -> RegimeResult:
    """One claim in one regime: its values and its verdict by :func:`verdict`."""
    res = RegimeResult(regime.name, regime.label, NOT_TESTABLE,
                       decides=regime.decided_by(claim.decides, targets))
    name = claim.measure.get("name")
    if name == "none":
        res.why = claim.why
        return res
    bound = claim.bound_for(regime.paper_target)
    if bound is None:
        res.why = ("the paper's bound is per target, and it states none for "
                   + (regime.paper_target or "a regime that reconstructs none of its targets"))
        return res
    res.bound = bound.text()
    args = {k: v for k, v in claim.measure.items() if k != "name"}
    if bound.width is not None:
        args["width"] = bound.width
    try:
        got = MEASURES[name](regime, options, **args)
    except NotMeasured as e:
        res.why = str(e)
        return res
    except (KeyError, ValueError, TypeError) as e:  # a measure's bug is shown, not hidden
        res.why = f"the measure failed: {type(e).__name__}: {e}"
        import sys

        print(f"claims: {claim.id} in {regime.name}: {res.why}", file=sys.stderr)
        return res
    values = got if isinstance(got, list) else [got]
    if not values:
        res.why = "nothing left to measure"
        return res
    res.values = [value_record(v) for v in values]
    res.verdict = combine(verdict(v, bound) for v in values)
    return res


def evaluate(ledger: Ledger, regimes: list[Regime], options: Any) -> list[dict[str, Any]]:
    """Every claim in every regime, with its overall verdict and a one-line why."""
    out = []
    for c in ledger.claims:
        results = [judge(c, r, options, ledger.targets) for r in regimes]
        deciding = [r for r in results if r.decides]
        overall = combine(r.verdict for r in deciding) if deciding else NOT_TESTABLE
        if not c.decides:
            why = c.why
        elif not deciding:
            why = f"no regime of {', '.join(c.decides)} was run"
        elif overall == NOT_TESTABLE:
            why = "; ".join(sorted({f"{r.regime}: {r.why}" for r in deciding}))
        else:
            why = "; ".join(f"{r.regime} {r.verdict} ({r.text} against {r.bound})"
                            for r in deciding if r.verdict != NOT_TESTABLE)
        out.append({"id": c.id, "paper": c.paper, "source": c.source, "tested_by": c.tested_by,
                    "decides": list(c.decides), "verdict": overall, "why": why,
                    "regimes": [asdict(r) | {"text": r.text} for r in results]})
    return out


# -- replay against reality (issue 33, item 3) ------------------------------------------------


def replay_vs_real(summary: Mapping[str, Any] | None, real_tok_s: Mapping[str, float],
                   device: str, real_cap: int | None,
                   real_tokens_per_round: Mapping[str, float] | None = None
                   ) -> list[dict[str, Any]]:
    """Each arm both run on this machine (``real_tok_s``: its decode tok/s) and replayed under
    ``device`` (the replay summary's ``tokens_per_s``), with their ratio and whether it is
    within 5%. Where the real run counted its rounds (``real_tokens_per_round``), the ratio is
    split into its two factors: tokens per round (what was accepted) and seconds per round
    (what the device model charged), replay over real."""
    if not summary:
        return []
    # the replay at the run's cap where the replay stage made one, else the labelled cap's
    replayed = summary.get("reality") or (summary.get("replays") or {}).get(device) or {}
    rows = []
    for arm, r in replayed.items():
        real = real_tok_s.get(arm)
        rep = r.get("tokens_per_s")
        if real is None or rep is None or not (real > 0):
            continue
        ratio = round(float(rep) / float(real), 4)
        rows.append({"arm": arm, "real_tok_s": round(float(real), 3),
                     "replay_tok_s": round(float(rep), 3), "replay_over_real": ratio,
                     "within_5pct": bool(abs(ratio - 1.0) <= 0.05 + 1e-9),
                     "device": device, "real_cap": real_cap,
                     "replay_cap": r.get("cap") or summary.get("cap")})
        tpr = (real_tokens_per_round or {}).get(arm)
        if tpr and r.get("tokens_per_round"):
            tpr_ratio = float(r["tokens_per_round"]) / float(tpr)
            rows[-1] |= {"real_tokens_per_round": round(float(tpr), 3),
                         "replay_tokens_per_round": round(float(r["tokens_per_round"]), 3),
                         "tokens_per_round_ratio": round(tpr_ratio, 4),
                         "seconds_per_round_ratio": round(tpr_ratio / ratio, 4)}
    return rows


# -- outputs ----------------------------------------------------------------------------------


def claims_markdown(claims: list[dict[str, Any]], reality: list[dict[str, Any]],
                    regimes: list[Regime]) -> str:
    """``paper/claims.md``: the rule, one line per claim, then every regime's numbers."""
    def esc(s: str) -> str:
        return str(s).replace("|", "\\|").replace("\n", " ")

    lines = ["# The paper's claims, one verdict each", "",
             "Every claim below is tested by this project's outputs; a verdict follows from the "
             "numbers by one rule:", "", f"> {RULE}", "",
             "Regimes: " + "; ".join(
                 f"`{r.name}` ({'this machine, real runs' if r.kind == CPU else 'REPLAY'}, "
                 f"{r.label}{', the paper’s ' + r.paper_target if r.paper_target else ''})"
                 for r in regimes) + ". A replayed number is this machine's acceptance priced "
             "by a device model; a reconstructed model is read from the paper's figures.", "",
             "| claim | the paper | deciding regimes | verdict | why |", "|---|---|---|---|---|"]
    for c in claims:
        lines.append(f"| `{c['id']}` | {esc(c['paper'])} | {esc(', '.join(c['decides']) or '-')}"
                     f" | **{c['verdict']}** | {esc(c['why'])} |")
    lines += ["", "## Every regime", ""]
    for c in claims:
        lines += [f"### `{c['id']}`: {c['verdict']}", "", f"{c['paper']} ({c['source']}). "
                  f"Tested by: {c['tested_by']}.", "",
                  "| regime | label | decides | bound | ours | verdict | why |",
                  "|---|---|---|---|---|---|---|"]
        for r in c["regimes"]:
            lines.append(f"| {r['regime']} | {r['label']} | {'yes' if r['decides'] else ''} | "
                         f"{esc(r['bound'])} | {esc(r['text'])} | {r['verdict']} | "
                         f"{esc(r['why'])} |")
        lines.append("")
    lines += ["## Replay against reality", "",
              "Each arm run on this machine and replayed under `cpu-measured` (the device model "
              "fitted from this machine's survey and instrumented run): replayed over real "
              "decode tok/s. The replay's replies are the labelled run's (its own cap); the real"
              " run's are the run stage's (its cap).", "",
              "| arm | real tok/s | replay tok/s | replay / real | within 5% | caps (real, replay)"
              " | tokens per round (real, replay) | replay / real: tokens per round, seconds per"
              " round |", "|---|---|---|---|---|---|---|---|"]
    for r in reality:
        split = (f"{r['real_tokens_per_round']:.2f}, {r['replay_tokens_per_round']:.2f} | "
                 f"{r['tokens_per_round_ratio']:.3f}, {r['seconds_per_round_ratio']:.3f}"
                 if "tokens_per_round_ratio" in r else "- | -")
        lines.append(f"| {r['arm']} | {r['real_tok_s']:.2f} | {r['replay_tok_s']:.2f} | "
                     f"{r['replay_over_real']:.3f} | {'yes' if r['within_5pct'] else 'no'} | "
                     f"{r['real_cap']}, {r['replay_cap']} | {split} |")
    if not reality:
        lines.append("| (no arm both run and replayed under cpu-measured) | | | | | | | |")
    return "\n".join(lines) + "\n"


def metrics(claims: list[dict[str, Any]], reality: list[dict[str, Any]],
            decode_tok_s: Mapping[str, float]) -> dict[str, Any]:
    """The headline numbers DVC shows (``dvc metrics show``): each arm's decode tok/s, each
    claim's verdict and its deciding regimes' estimates, replay over real per arm."""
    code = {HOLDS: 1, INCONCLUSIVE: 0, FAILS: -1, NOT_TESTABLE: None}
    out: dict[str, Any] = {"decode_tok_s": {a: round(float(v), 3)
                                            for a, v in sorted(decode_tok_s.items())},
                           "claims": {}, "replay_over_real": {}}
    for c in claims:
        entry: dict[str, Any] = {"verdict": c["verdict"], "holds": code[c["verdict"]]}
        for r in c["regimes"]:
            if r["decides"] and r["values"]:
                v = min(r["values"], key=lambda x: x["estimate"])
                entry[r["regime"]] = round(float(v["estimate"]), 4)
        out["claims"][c["id"]] = entry
    for r in reality:
        out["replay_over_real"][r["arm"]] = r["replay_over_real"]
    return out


# -- AdaSpark over the best pinned width against rounds served (issue 33, item 2) -------------


def rounds_curve(replies: pd.DataFrame, block: str = "dspark") -> pd.DataFrame:
    """AdaSpark over the best pinned width (the pinned arm fastest over all replies, summed
    tokens over summed time) as the replies are served: after each of AdaSpark's replies in
    serving order, both arms' cumulative tokens over cumulative decode time on the replies
    served so far, against AdaSpark's cumulative rounds. Empty when AdaSpark or every pinned
    width is missing."""
    from adaspark.runs.rows import KEY_COLUMNS

    ada_arm, pinned = pinned_arms(block)
    rounds_col = "server_rounds" if "server_rounds" in replies.columns else "rounds"
    cols = ["rounds", "ratio", "best_width", "replies"]
    if replies.empty or "arm" not in replies.columns:
        return pd.DataFrame(columns=cols)
    arms = replies["arm"].astype(str)
    ada = replies[arms == ada_arm].sort_values("order")
    speed = {w: (g["completion_tokens"].sum() / g["decode_s"].sum())
             for w, a in pinned.items() if not (g := replies[arms == a]).empty
             and g["decode_s"].sum() > 0}
    if ada.empty or not speed:
        return pd.DataFrame(columns=cols)
    best = max(speed, key=lambda w: speed[w])
    pinned = replies[arms == pinned[best]].set_index(list(KEY_COLUMNS))
    rows, n_rounds, ta, sa, tb, sb = [], 0, 0.0, 0.0, 0.0, 0.0
    for i, r in enumerate(ada.itertuples(index=False), 1):
        key = tuple(getattr(r, k) for k in KEY_COLUMNS)
        if key not in pinned.index:
            continue
        p = pinned.loc[key]
        n_rounds += int(getattr(r, rounds_col) or 0)
        ta, sa = ta + float(r.completion_tokens), sa + float(r.decode_s)
        tb, sb = tb + float(p["completion_tokens"]), sb + float(p["decode_s"])
        if sa > 0 and sb > 0 and tb > 0:
            rows.append({"rounds": n_rounds, "ratio": (ta / sa) / (tb / sb),
                         "best_width": best, "replies": i})
    return pd.DataFrame(rows, columns=cols)


def rounds_figure(curves: Mapping[str, pd.DataFrame]) -> Any:
    """One line per device model: AdaSpark over the best pinned width against rounds served
    (replay), the paper's 0.997 marked."""
    from adaspark.analysis.figures.style import panels, style

    with style():
        fig, (ax,) = panels(1)
        fig.set_size_inches(7.5, 3.2)
        for dev, c in curves.items():
            if not c.empty:
                ax.plot(c["rounds"], c["ratio"], marker="o", ms=3, lw=1.2,
                        label=f"{dev} (best {int(c['best_width'].iloc[0])} rows)")
        ax.axhline(0.997, color="grey", ls="--", lw=0.8, label="paper: ≥ 0.997")
        ax.axhline(1.0, color="grey", lw=0.5)
        ax.set_xlabel("AdaSpark rounds served (replay)")
        ax.set_ylabel("AdaSpark / best pinned")
        ax.set_title("AdaSpark over the best pinned width as rounds are served (REPLAY)")
        ax.legend(frameon=False, fontsize=7)
    return fig


# -- the width claims' numbers per device model (issue 33, item 2) ----------------------------


def width_report(regimes: list[Regime], options: Any,
                 block: str = "dspark") -> list[dict[str, Any]]:
    """Per replay regime, on ``block``'s arms: AdaSpark's rounds; AdaSpark over each pinned
    width and over the best, over all replies, per context band and after the first request
    (each with its interval); the cold start (rounds, seconds, share of the first request's
    time); the cost estimate's median error over the second half of the run."""
    ada, pinned = pinned_arms(block)
    out = []
    for reg in regimes:
        if reg.kind != REPLAY:
            continue
        row: dict[str, Any] = {"regime": reg.name, "label": reg.label,
                               "paper_target": reg.paper_target, "block": block}
        try:
            rounds = _adaspark_rounds(reg, ada)
            row["rounds"] = len(rounds)
            first = rounds[rounds["request_id"] == rounds["request_id"].iloc[0]]
            from adaspark.analysis.records import COLD_START

            cold = first[first["why"].isin(COLD_START)]
            row["cold_start_rounds"] = len(cold)
            row["cold_start_s"] = float((cold["fixed_s"] + cold["measured_verify_s"]).sum())
            row["first_request_s"] = float((first["fixed_s"] + first["measured_verify_s"]).sum())
            row["cost_error_second_half"] = cost_error(reg, options, arm=ada).estimate
            row |= after_first_diagnosis(rounds)
        except NotMeasured as e:
            row["rounds_why"] = str(e)
        replies = reg.replies()
        from adaspark.analysis.records import has_arm

        row["over_pinned"] = {
            f"{w} rows": value_record(_value(_compare(replies, ada, arm, options)))
            for w, arm in pinned.items() if has_arm(replies, arm) and has_arm(replies, ada)}
        for key, after in (("over_best", False), ("over_best_after_first", True)):
            try:
                row[key] = [value_record(v) for v in over_best_pinned(
                    reg, options, block=block, bands=True, after_first=after)]
            except NotMeasured as e:
                row[key] = str(e)
        out.append(row)
    return out


def after_first_diagnosis(rounds: pd.DataFrame) -> dict[str, Any]:
    """What AdaSpark did after its first request (item 5 of issue 33): the widths it chose most
    (cold-start rounds left out), its cost model's estimate over the verify time it was charged
    (median per round), and the draft tokens accepted over those its acceptance model expected
    (pooled over the rounds the chooser set from S)."""
    from adaspark.analysis.figures.fig8 import width_shares

    later = rounds[rounds["request_id"] != rounds["request_id"].iloc[0]]
    out: dict[str, Any] = {"rounds_after_first": len(later)}
    if later.empty:
        return out
    shares = width_shares(later).sort_values(ascending=False)
    out["widths_after_first"] = {int(w): round(float(v), 3) for w, v in shares.head(3).items()}
    pred = later[later["predicted_verify_s"].notna() & (later["measured_verify_s"] > 0)]
    if not pred.empty:
        out["estimate_over_charged"] = float(
            (pred["predicted_verify_s"].astype(float) / pred["measured_verify_s"]).median())
    chosen = later[later["why"] == "choice"]
    accepted = (chosen["accepted_drafter"] + chosen["accepted_agreed"]
                + chosen["accepted_ngram"]).sum()
    if float(chosen["s"].sum()) > 0:
        out["accepted_over_expected"] = float(accepted / chosen["s"].sum())
    return out


def width_markdown(rows: list[dict[str, Any]]) -> str:
    """``paper/claims.md``'s section of the width claims' numbers per device model."""
    if not rows:
        return ""
    lines = ["## The width claims in replay, per device model", "",
             f"The {rows[0]['block']} block: AdaSpark over each pinned width and over the best "
             "(geometric mean of per-reply ratios, 95% interval over conversations), over all "
             "replies, per context band and after the first request (which holds the cold "
             "start); the cold start itself; the cost estimate's median absolute error over the "
             "second half of the run. All REPLAY: this machine's acceptance, the device model's "
             "prices.", "",
             "| device model | label | rounds | over best (all; bands) | after the first request"
             " | over each pinned width | cold start: rounds, s of first request | cost error |"
             " widths after the first request | estimate / charged | accepted / expected |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]

    def vals(x: Any) -> str:
        if isinstance(x, str):
            return x
        return "; ".join(f"{v['group']}: {value_of(v).text()}" for v in x)

    for r in rows:
        pinned = "; ".join(f"{k}: {value_of(v).text()}" for k, v in r["over_pinned"].items())
        cold = (f"{r['cold_start_rounds']}, {r['cold_start_s']:.2f} of "
                f"{r['first_request_s']:.2f} s" if "cold_start_rounds" in r else
                r.get("rounds_why", ""))
        err = f"{r['cost_error_second_half']:.2%}" if "cost_error_second_half" in r else "-"
        widths = ", ".join(f"{w} ({v:.0%})" for w, v in r.get("widths_after_first", {}).items())
        est = (f"{r['estimate_over_charged']:.3f}" if "estimate_over_charged" in r else "-")
        acc = (f"{r['accepted_over_expected']:.3f}" if "accepted_over_expected" in r else "-")
        lines.append(f"| {r['regime']} | {r['label']} | {r.get('rounds', '-')} | "
                     f"{vals(r['over_best'])} | {vals(r['over_best_after_first'])} | {pinned} | "
                     f"{cold} | {err} | {widths or '-'} | {est} | {acc} |")
    return "\n".join(lines) + "\n"
