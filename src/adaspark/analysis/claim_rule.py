"""The claims ledger's rule (:mod:`adaspark.analysis.claims`): a measurement, the paper's
bound, the verdict one value gets, and how verdicts combine; the regimes a claim is measured
in. The rule is written out in :data:`RULE` and in the claims module's docstring."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
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


