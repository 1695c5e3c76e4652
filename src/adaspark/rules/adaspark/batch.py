"""One verify step shared by several requests (the paper's third open question, §7): the step's
cost law and the division of its rows between the requests (§3.4's argument applied to a batch).

**The law** (:class:`BatchCostLaw`). A step verifies ``R = sum_i r_i`` rows, request ``i``'s
``r_i`` rows reading its context of ``c_i`` tokens::

    t(R, X) = t0 + slope * max(0, R - knee) + per_context * X,    X = sum_i r_i * c_i

Why this shape: a verify on a device that is bound by reading the weights costs about the same
for one row as for many, until the matrix products become bound by arithmetic (the knee); past
it each row adds its share of arithmetic (the slope). The attention reads each row's context, a
cost that grows with rows times context (``X``). ``t0`` is the step's fixed cost (weights read
once, launch, sampling). On this CPU the knee sits near a handful of rows; on a GPU at tens to
hundreds. :meth:`BatchCostLaw.fit` fits it to recorded steps: least squares for
``(t0, slope, per_context)`` at each candidate knee, keeping the knee of least residual (a hinge
regression), with the three coefficients held non-negative.

**The division** (:func:`divide_rows`). Each request offers the expected committed tokens its
next rows add, best first (its best-first order and fitted acceptance: the gains decrease), and a
cap on its rows (its share of the sequence budget, HARNESS). Every request's anchor row is taken.
For a price ``rho`` in tokens per second the step's value is ``sum_i E_i(r_i) - rho * t(R, X)``;
its gains are concave in each ``r_i`` and its cost convex in ``R`` and linear in ``X``, so taking
rows one at a time by ``gain - rho * per_context * c_i`` while the next one still pays for its
cost at the current ``R`` is exact. With ``rho`` the long-run rate (§3.4: a row must pay at the
rate the run earns) one pass decides; without one, Dinkelbach's iteration (``rho`` <- the step's
own tokens per second at the last division, until it stops rising) finds the division of the
highest tokens per second of the step. Past the knee each row costs ``rho * slope`` more, so the
division narrows as the batch grows (the test's known answer).

**Online** (:class:`BatchChooser`, what a server with several slots runs for AdaSpark's arms):
every step's rows per request, contexts, verify time and committed tokens are recorded; the law is
refitted every ``refit_every`` steps over the last ``window`` steps, once ``min_steps`` are
recorded with at least two different row totals; the long-run rate is the committed tokens over
the verify seconds of the recent steps, exponentially weighted (half-life ``half_life_steps``
steps). From then on each step is divided at the long-run rate.

**Probes.** Steps whose totals all sit past the knee cannot tell where the knee is (every step
then costs about the same, and the fit is flat), so the chooser measures the steps it needs, as
the width table's cold start measures widths (§3.2): until the first fit every step is a probe,
and after it one step in ``probe_every``, the gap doubling while the probes find the law's
times (up to ``probe_every_max``). A probe gives every request its best ``probe_rows[k]``
rows (the rungs in turn; 0: each request's own rule chooses under its cap), so the fitted steps
span anchors alone to the rules' own trees.

**Drafting.** A request the last division gave its anchor alone (its block's rows did not pay
for their share of the step) does not draft for the next step, since the drafter's time would
buy nothing: it verifies its anchor. At a probe every request drafts again, and the step after
it divides every request's rows again. The objective is the
server's throughput (committed tokens per second of verify); no per-request latency bound is
offered yet.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class BatchCostLaw:
    """``t(R, X) = t0 + slope * max(0, R - knee) + per_context * X`` in seconds (module
    docstring)."""

    t0: float
    slope: float
    knee: int
    per_context: float = 0.0

    def time(self, rows: Sequence[int], contexts: Sequence[int]) -> float:
        """The step's time for ``rows[i]`` rows of request ``i`` at context ``contexts[i]``."""
        total = int(sum(rows))
        x = float(sum(r * c for r, c in zip(rows, contexts, strict=True)))
        return self.t0 + self.slope * max(0, total - self.knee) + self.per_context * x

    @classmethod
    def fit(cls, rows: Sequence[Sequence[int]], contexts: Sequence[Sequence[int]],
            seconds: Sequence[float], knees: Sequence[int] | None = None) -> BatchCostLaw:
        """The law of least squared error over recorded steps (each step's rows per request,
        contexts per request and measured seconds), the knee searched over ``knees`` (default:
        every total row count seen)."""
        if len(seconds) < 3:
            raise ValueError(f"a batch cost law needs at least 3 recorded steps, got "
                             f"{len(seconds)}")
        totals = np.array([sum(r) for r in rows], dtype=float)
        x = np.array([sum(a * c for a, c in zip(r, cs, strict=True))
                      for r, cs in zip(rows, contexts, strict=True)], dtype=float)
        y = np.asarray(seconds, dtype=float)
        best: tuple[float, BatchCostLaw] | None = None
        for knee in sorted(set(knees if knees is not None else totals.astype(int).tolist())):
            design = np.column_stack([np.ones_like(y), np.maximum(totals - knee, 0.0), x])
            coef = _nonnegative_lstsq(design, y)
            err = float(np.sum((design @ coef - y) ** 2))
            if best is None or err < best[0] - 1e-15:
                best = (err, cls(float(coef[0]), float(coef[1]), int(knee), float(coef[2])))
        assert best is not None
        return best[1]


def _nonnegative_lstsq(a: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least squares with every coefficient >= 0: the unconstrained fit, then the columns whose
    coefficient came out negative dropped (one at a time, the most negative first)."""
    keep = list(range(a.shape[1]))
    while True:
        coef = np.zeros(a.shape[1])
        if keep:
            coef[keep] = np.linalg.lstsq(a[:, keep], y, rcond=None)[0]
        negative = [j for j in keep if coef[j] < 0.0]
        if not negative:
            return coef
        keep.remove(min(negative, key=lambda j: coef[j]))


@dataclass(frozen=True)
class Division:
    """Rows per request (anchor included), the step's expected committed tokens and its
    predicted seconds under the law, and the price ``rho`` the division was made at."""

    rows: tuple[int, ...]
    tokens: float
    seconds: float
    rho: float

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else float("inf")


def _divide_at(gains: Sequence[Sequence[float]], caps: Sequence[int], contexts: Sequence[int],
               law: BatchCostLaw, rho: float, max_rows: int | None) -> tuple[int, ...]:
    """The rows per request of the largest ``sum E - rho * t`` (module docstring): anchors,
    then rows by ``gain - rho * per_context * context`` while each pays at the current total."""
    rows = [1] * len(gains)
    total = len(gains)
    offers = sorted(
        ((g - rho * law.per_context * contexts[i], i)
         for i, request in enumerate(gains) for g in request[:max(0, caps[i] - 1)]),
        key=lambda o: -o[0])
    for value, i in offers:
        if max_rows is not None and total >= max_rows:
            break
        knee_cost = rho * law.slope if total >= law.knee else 0.0
        if value - knee_cost <= 0.0:
            break  # offers are sorted, and the knee's cost only grows with the total
        rows[i] += 1
        total += 1
    return tuple(rows)


def divide_rows(gains: Sequence[Sequence[float]], caps: Sequence[int], contexts: Sequence[int],
                law: BatchCostLaw, *, rho: float | None = None, max_rows: int | None = None,
                anchor_tokens: float = 1.0, max_iterations: int = 50) -> Division:
    """Divide a step's rows between requests (module docstring).

    ``gains[i]``: the expected committed tokens request ``i``'s 2nd, 3rd, ... rows add (non-
    increasing); ``caps[i]``: its most rows (anchor included, >= 1); ``contexts[i]``: its context
    in tokens; ``anchor_tokens``: each request's tokens from its anchor row alone (one: the
    target's token after the accepted path). ``rho``: the long-run rate in tokens per second
    (one pass), or None for the division of the step's highest tokens per second (Dinkelbach).
    ``max_rows``: the step's row budget (exact mode: 63 in all, HARNESS)."""
    n = len(gains)
    if not (n == len(caps) == len(contexts)) or n == 0:
        raise ValueError("gains, caps and contexts need one entry per request, at least one")
    if any(c < 1 for c in caps):
        raise ValueError(f"every request's cap must be at least 1 row (its anchor), got {caps}")
    if max_rows is not None and max_rows < n:
        raise ValueError(f"a step of {n} requests needs at least {n} rows, max_rows={max_rows}")
    for i, g in enumerate(gains):
        if any(b > a + 1e-12 for a, b in itertools.pairwise(g)):
            raise ValueError(f"request {i}'s gains must not increase (best first): {list(g)}")

    def evaluate(rows: tuple[int, ...], at: float) -> Division:
        tokens = n * anchor_tokens + sum(sum(gains[i][:r - 1]) for i, r in enumerate(rows))
        return Division(rows, tokens, law.time(rows, contexts), at)

    if rho is not None:
        return evaluate(_divide_at(gains, caps, contexts, law, rho, max_rows), rho)
    current = evaluate(tuple([1] * n), 0.0)
    price = current.tokens_per_s
    for _ in range(max_iterations):
        nxt = evaluate(_divide_at(gains, caps, contexts, law, price, max_rows), price)
        if nxt.tokens_per_s <= current.tokens_per_s * (1 + 1e-12):
            break
        current, price = nxt, nxt.tokens_per_s
    return current


@dataclass(frozen=True)
class BatchChoiceOptions:
    """The online batch chooser's constants (:class:`BatchChooser`)."""

    min_steps: int = 16
    refit_every: int = 16
    window: int = 512
    half_life_steps: float = 64.0
    #: rows per request a probe step gives each request (its best rows; 0: each rule's own
    #: choice under its cap): the totals the law is fitted over (module docstring, "Probes")
    probe_rows: tuple[int, ...] = (1, 2, 4, 8, 0)
    #: steps between probes once the law is fitted (before, every step probes, in turn); the
    #: gap doubles, up to ``probe_every_max``, while each probe's time is within
    #: ``probe_tolerance`` (relative) of the law's prediction, and is back to ``probe_every``
    #: after one that is not
    probe_every: int = 32
    probe_every_max: int = 512
    probe_tolerance: float = 0.15


class BatchChooser:
    """The online division of a shared step's rows (module docstring, "Online"); the
    :class:`~adaspark.decoding.slots.RowDivider` of a server with several slots."""

    def __init__(self, options: BatchChoiceOptions | None = None) -> None:
        self.options = options or BatchChoiceOptions()
        self.rows: list[tuple[int, ...]] = []
        self.contexts: list[tuple[int, ...]] = []
        self.seconds: list[float] = []
        self.law: BatchCostLaw | None = None
        self.n_steps = 0
        self._tokens = 0.0  # exponentially weighted committed tokens and verify seconds
        self._secs = 0.0
        self._asked = 0  # divisions asked for, and probe steps given
        self._probes = 0
        self._anchor_only: set[int] = set()  # requests whose last division was their anchor
        self._probe_gap = self.options.probe_every
        self._next_probe = 0
        self._probing = False  # the last division was a probe

    @property
    def rate(self) -> float | None:
        """The long-run rate: committed tokens per second of verify (weighted)."""
        return self._tokens / self._secs if self._secs > 0 else None

    def _probes_at(self, asked: int) -> bool:
        """Whether division number ``asked`` is a probe (module docstring, "Probes")."""
        return bool(self.options.probe_rows) and (self.law is None or self.rate is None
                                                  or asked >= self._next_probe)

    def drafts(self, key: int) -> bool:
        """Whether request ``key`` drafts its block for the next step: not when the last
        division gave it its anchor alone with a block to offer from, unless the next step is a
        probe (module docstring, "Drafting")."""
        return key not in self._anchor_only or self._probes_at(self._asked + 1)

    def divide(self, gains: Sequence[Sequence[float]], caps: Sequence[int],
               contexts: Sequence[int], keys: Sequence[int] | None = None
               ) -> tuple[int, ...] | None:
        """Rows per request (anchor included), or None to let each rule choose alone;
        ``keys`` names the requests (their slots) for :meth:`drafts`."""
        self._asked += 1
        o = self.options
        rho = self.rate
        self._probing = self._probes_at(self._asked)
        if self._probing:
            self._next_probe = self._asked + self._probe_gap
            self._anchor_only.clear()  # every request drafts again, and is divided again
            rung = o.probe_rows[self._probes % len(o.probe_rows)]
            self._probes += 1
            return None if rung == 0 else tuple(min(c, rung) for c in caps)
        if self.law is None or rho is None:
            return None
        rows = divide_rows(gains, caps, contexts, self.law, rho=rho).rows
        for key, g, r in zip(keys or (), gains, rows, strict=False):
            if g and r == 1:
                self._anchor_only.add(key)
            elif g:
                self._anchor_only.discard(key)
        return rows

    def predict(self, rows: Sequence[int], contexts: Sequence[int]) -> float | None:
        return None if self.law is None else self.law.time(rows, contexts)

    def observe(self, rows: Sequence[int], contexts: Sequence[int], seconds: float,
                tokens: int) -> None:
        o = self.options
        if self._probing and self.law is not None and seconds > 0:
            miss = abs(self.law.time(rows, contexts) - seconds) / seconds
            self._probe_gap = (min(2 * self._probe_gap, o.probe_every_max)
                               if miss <= o.probe_tolerance else o.probe_every)
            self._next_probe = self._asked + self._probe_gap
        self._probing = False
        decay = 0.5 ** (1.0 / o.half_life_steps)
        self._tokens = self._tokens * decay + tokens
        self._secs = self._secs * decay + seconds
        self.rows.append(tuple(rows))
        self.contexts.append(tuple(contexts))
        self.seconds.append(float(seconds))
        if len(self.seconds) > o.window:
            del self.rows[0], self.contexts[0], self.seconds[0]
        self.n_steps += 1
        if (len(self.seconds) >= o.min_steps and self.n_steps % o.refit_every == 0
                and len({sum(r) for r in self.rows}) >= 2):
            self.law = BatchCostLaw.fit(self.rows, self.contexts, self.seconds)
