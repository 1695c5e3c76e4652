"""The width table (§3.2): which widths are offered, and what each one costs at a context.

The table starts from a ladder (2, 4, 8, 16, 32, top), treats the widths between two neighbours
as one class priced at its top (:class:`~adaspark.rules.adaspark.cost_law.CostClass`), measures
each new width a few times (cold start, narrowest first), learns its reach from measurement trees
that come out short, and splits a class only where a width inside could change the choice. A
width is priced at the cheapest class whose top is at least the width (Prop. 2), so a cheaper
wider class prices the narrower widths and a dominated class is never offered.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from adaspark.jit import kernel
from adaspark.rules.adaspark.config import CostModelConfig
from adaspark.rules.adaspark.cost_law import Basis, CostClass, FixedCostClock, context_basis


def envelope(prices: list[tuple[int, float | None]]) -> list[tuple[int, float]]:
    """Prop. 2: the widths worth offering, ascending, with their own prices: every priced class
    top that no wider class undercuts (:func:`envelope_mask`)."""
    p = np.asarray([np.nan if x is None else x for _, x in prices], dtype=np.float64)
    keep = envelope_mask(p).tolist()
    return [(w, float(x)) for (w, x), k in zip(prices, keep, strict=True) if k]


@kernel
def envelope_mask(prices: np.ndarray) -> np.ndarray:
    """Which of the classes' own prices (ascending tops, NaN while unmeasured) the envelope
    keeps: a price no wider class undercuts (ties to the narrower)."""
    keep = np.zeros(prices.shape[0], dtype=np.bool_)
    cheapest = math.inf
    for i in range(prices.shape[0] - 1, -1, -1):
        p = prices[i]
        if not math.isnan(p) and p <= cheapest:
            cheapest = p
            keep[i] = True
    return keep


def price_at(width: int, prices: list[tuple[int, float | None]]) -> float | None:
    """Prop. 2: a width's price is that of the cheapest class whose top is at least the width."""
    best: float | None = None
    for top, p in prices:
        if top >= width and p is not None and (best is None or p < best):
            best = p
    return best


def ladder_tops(ladder: Iterable[int], top: int) -> list[int]:
    """The starting ladder with its top replaced by the widest verify (63 in exact mode)."""
    tops = sorted({int(w) for w in ladder if 2 <= int(w) < top})
    return [*tops, top]


def declared_tops(step: int, top: int) -> list[int]:
    """``adaspark-classes``: declared classes every ``step`` rows up to the widest verify."""
    return [*range(step, top, step), top]


class PriceStack:
    """Eq. (5) for every class of the table in one pass: each class's law weights stacked as
    the columns of ``W`` (5 x classes, table order), then one product with the basis and one
    clamp give every price::

        price = clamp(phi . W, lo floor, hi floor) * (scale level / D_k) * D_now

    (:meth:`~adaspark.rules.adaspark.cost_law.CostClass.price`, its sums and products
    reassociated: the same prices to a few units in the last place). A column is refreshed
    only when its class's ``stamp`` moved (a measurement, a refit, a change of reach); a class
    not yet priced, or priced before its law is fitted, is priced by ``CostClass.price``
    itself."""

    def __init__(self, cfg: CostModelConfig) -> None:
        self.lo, self.hi = cfg.law_clamp
        self.need = cfg.measurements_before_priced
        self.stamps: list[int] = []
        self._alloc(0)

    def _alloc(self, n: int) -> None:
        self.w = np.zeros((5, n))
        self.lo_f, self.hi_f, self.coef = np.zeros(n), np.zeros(n), np.zeros(n)
        self.tops = np.zeros(n, dtype=np.int64)
        self.vectorised = [False] * n   # the column's price is the formula's
        self.plain = False              # every class reachable and vectorised

    def _set(self, i: int, k: CostClass) -> None:
        law = k.law
        self.tops[i] = k.hi
        ok = k.measured >= self.need and law.scale is not None and law.seen > 0
        self.vectorised[i] = ok and not k.unreachable
        if ok:
            _set_column(self.w, self.lo_f, self.hi_f, self.coef, i, law.w,
                        self.lo * law.floor, self.hi * law.floor,
                        law.scale * k.level.value / k.clock_at)

    def sync(self, classes: list[CostClass]) -> None:
        """Refresh the columns of the classes whose stamp moved (all of them when the table's
        classes changed in number)."""
        stamps = [k.stamp for k in classes]
        if stamps == self.stamps:
            return
        if len(stamps) != len(self.stamps):
            self._alloc(len(classes))
            for i, k in enumerate(classes):
                self._set(i, k)
        else:
            for i, (new, old) in enumerate(zip(stamps, self.stamps, strict=True)):
                if new != old:
                    self._set(i, classes[i])
        self.stamps = stamps
        self.plain = all(self.vectorised)

    def prices(self, classes: list[CostClass], phi: Basis,
               clock_now: float) -> tuple[np.ndarray, np.ndarray]:
        """Each reachable class's top and own price (NaN while it is unmeasured), in table
        order."""
        self.sync(classes)
        p = _stack_prices(phi, self.w, self.lo_f, self.hi_f, self.coef, clock_now)
        if self.plain:
            return self.tops, p
        vec = self.vectorised
        tops, out = [], []
        for i, k in enumerate(classes):
            if not k.unreachable:
                tops.append(k.hi)
                x = p[i] if vec[i] else k.price(phi, clock_now)
                out.append(np.nan if x is None else x)
        return np.asarray(tops, dtype=np.int64), np.asarray(out, dtype=np.float64)


@kernel
def _set_column(w: np.ndarray, lo_f: np.ndarray, hi_f: np.ndarray, coef: np.ndarray, i: int,
                law_w: np.ndarray, lo: float, hi: float, c: float) -> None:
    """Column ``i`` of the stack: a class's law weights, clamp bounds and price factor."""
    for r in range(5):
        w[r, i] = law_w[r]
    lo_f[i], hi_f[i], coef[i] = lo, hi, c


@kernel
def _stack_prices(phi: tuple, w: np.ndarray, lo_f: np.ndarray, hi_f: np.ndarray,
                  coef: np.ndarray, clock_now: float) -> np.ndarray:
    """:class:`PriceStack`'s formula per column: ``clamp(phi . W, lo, hi) * coef * D_now``."""
    n = w.shape[1]
    out = np.empty(n)
    for i in range(n):
        y = w[0, i] + w[1, i] * phi[1] + w[2, i] * phi[2] + w[3, i] * phi[3] + w[4, i] * phi[4]
        y = min(max(y, lo_f[i]), hi_f[i])
        out[i] = y * coef[i] * clock_now
    return out


class WidthTable:
    """The learned width table (§3.2, "Which widths are offered") with its cold start, reach,
    split test and rule, the clock, and the width-1 class of the extension arm."""

    def __init__(self, cfg: CostModelConfig, top: int, mode: str = "learned",
                 width1: bool = False) -> None:
        if mode not in ("learned", "classes"):
            raise ValueError(f"width table mode must be 'learned' or 'classes', not {mode!r}")
        if top < 2:
            raise ValueError(f"the widest verify must be at least 2 rows, got {top}")
        self.cfg = cfg
        self.top = top
        self.mode = mode
        tops = (ladder_tops(cfg.starting_ladder, top) if mode == "learned"
                else declared_tops(cfg.declared_class_step, top))
        self.classes: list[CostClass] = []
        lo = 2
        for hi in tops:
            self.classes.append(CostClass(cfg, lo, hi))
            lo = hi + 1
        self.plain = CostClass(cfg, 1, 1) if width1 else None
        self.clock = FixedCostClock(cfg)
        self.stack = PriceStack(cfg)
        self.held_width = 0
        self.held_rounds = 0
        self.splits = 0

    # -- what is offered and what it costs ----------------------------------------------------

    def widths(self) -> list[int]:
        """Every learned width (class tops), ascending."""
        return [k.hi for k in self.classes]

    def basis(self, context: int) -> Basis:
        return context_basis(context, self.cfg.context_basis_unit)

    def class_prices(self, phi: Basis) -> list[tuple[int, float | None]]:
        """Each reachable class's own price (Eq. 5), ``None`` while it is unmeasured: one
        pass (:class:`PriceStack`)."""
        tops, p = self.price_arrays(phi)
        return [(t, None if math.isnan(x) else x) for t, x in zip(tops.tolist(), p.tolist(),
                                                                   strict=True)]

    def price_arrays(self, phi: Basis) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`class_prices` as arrays: the reachable classes' tops and prices (NaN while
        unmeasured)."""
        return self.stack.prices(self.classes, phi, self.clock.reading())

    def plain_price(self, phi: Basis) -> float | None:
        return None if self.plain is None else self.plain.price(phi, self.clock.reading())

    def fixed_cost(self, phi: Basis) -> float:
        return self.clock.estimate(phi)

    def measurement_width(self, drafted: bool = True,
                          could_change: Callable[[int, float], bool] | None = None,
                          prices: list[tuple[int, float | None]] | None = None,
                          phi: Basis | None = None) -> int | None:
        """Cold start (Algorithm 1, line 7): the narrowest width with fewer measurements than a
        price needs. Width 1 (extension) comes first and needs a round without a drafter call,
        so with ``drafted=True`` it is skipped.

        ``cold_start: bounded`` passes ``could_change(width, time_floor)`` with the round's
        :meth:`class_prices` at the context of ``phi``: a width is measured only if it could
        change the choice, its time at least :meth:`time_floor`; the others are passed over this
        round (and asked again the next)."""
        need = self.cfg.measurements_before_priced
        if not drafted:
            return 1 if self.plain is not None and self.plain.measured < need else None
        if self.plain is not None and self.plain.measured < need:
            return None
        bounded = could_change is not None and prices is not None and phi is not None
        own = dict(prices) if bounded and prices is not None else {}
        t1 = self.plain_price(phi) if bounded and phi is not None else None
        for i, k in enumerate(self.classes):
            if k.measured < need and not k.unreachable:
                if not bounded or could_change is None:
                    return k.hi
                if could_change(k.hi, self.time_floor(i, own, t1)):
                    return k.hi
        return None

    def time_floor(self, i: int, own: dict[int, float | None], t1: float | None) -> float:
        """The bounded cold start's optimistic time for class ``i``: at least what every
        narrower width (plain decode's, ``t1``, included) was measured to cost, its price
        ``own[top]`` once it has one, else its lowest measurement so far, and at least class
        ``i``'s own lowest measurement."""
        floor = 0.0 if t1 is None else t1
        for j, kj in enumerate(self.classes[: i + 1]):
            p = own.get(kj.hi) if j < i else None
            if p is None and kj.level.window:
                p = kj.level.lowest()
            if p is not None:
                floor = max(floor, p)
        return floor

    # -- learning -------------------------------------------------------------------------------

    def observe_verify(self, rows: int, context: int, t: float, phi: Basis) -> bool:
        """Fold a verify of ``rows`` rows into its class. Only a class top is recorded: a
        narrower sample would price the top below what it costs. Returns whether it counted."""
        if rows == 1 and self.plain is not None:
            self.plain.observe(context, t, phi, self.clock.reading())
            return True
        for k in self.classes:
            if k.hi == rows:
                k.observe(context, t, phi, self.clock.reading())
                return True
        return False

    def observe_fixed(self, context: int, d: float, phi: Basis) -> None:
        self.clock.observe(context, d, phi)

    def short_measurement(self, asked: int, built: int) -> None:
        """A measurement round's tree came out narrower than the width it measures: it does not
        count. The widest class learns its reach from it (its top becomes the width built, or
        the class goes when a narrower class already reaches that far); any other class that
        keeps falling short becomes a width no round can build."""
        if built >= asked:
            return
        idx = next((i for i, k in enumerate(self.classes) if k.hi == asked), None)
        if idx is None:
            return
        k = self.classes[idx]
        if k.measured >= self.cfg.measurements_before_priced:
            return
        if idx == len(self.classes) - 1 and idx > 0:
            if built >= k.lo:
                k.hi = built
                k.touch()
                self.top = built
            else:
                self.classes.pop()
                self.top = self.classes[-1].hi
            return
        k.short += 1
        k.unreachable = k.short >= self.cfg.measurements_before_priced
        k.touch()

    def hold(self, width: int) -> None:
        """The chooser chose ``width`` this round (consecutive rounds count as held)."""
        if width == self.held_width:
            self.held_rounds += 1
        else:
            self.held_width, self.held_rounds = width, 1

    def may_split(self) -> bool:
        """Whether :meth:`split` could split a class now (the rule's every choice round asks)."""
        c = self.cfg
        return (self.mode == "learned" and len(self.classes) < c.most_widths_learned
                and self.held_rounds >= c.split_hold_rounds)

    def split(self, could_beat: Callable[[int, float], bool],
              prices: list[tuple[int, float | None]]) -> int | None:
        """The split test and rule. Once the chooser has held a width for ``split_hold_rounds``,
        split the nearest class where a width inside could win: between measured tops ``a < b`` a
        width inside costs at least ``T(a)`` and accepts at most what ``b - 1`` rows accept, so
        the class is split only if ``b - 1`` rows at ``T(a)`` would clear the chooser's switching
        margin against the held width (``could_beat(b - 1, T(a))``). Steep classes (top more
        than ``steep_interval`` above bottom) are split next to the held width, others at their
        midpoint. Called on rounds the chooser chose (no width is being measured); a class
        without both prices is never split. Returns the new width, or ``None``."""
        c = self.cfg
        if not self.may_split():
            return None
        own = dict(prices)
        tops = [k.hi for k in self.classes]
        if self.held_width not in tops:
            return None
        j = tops.index(self.held_width)
        order = sorted(range(len(tops) - 1), key=lambda k: k - j if k >= j else j - k - 1)
        for k in order:
            a, b = tops[k], tops[k + 1]
            pa, pb = own.get(a), own.get(b)
            if b - a < 2 or pa is None or pb is None or not could_beat(b - 1, pa):
                continue
            steep = pb > pa * (1.0 + c.steep_interval)
            if steep and k == j:
                m = a + 1
            elif steep and k + 1 == j:
                m = b - 1
            else:
                m = (a + b) // 2
            upper = self.classes[k + 1]
            new = CostClass(c, upper.lo, m)
            upper.lo = m + 1
            self.classes.insert(k + 1, new)
            self.held_rounds = 0
            self.splits += 1
            return m
        return None

    def refit(self) -> int:
        """End of request: refit every law whose bank changed (and the level read against it).
        Returns how many were adopted."""
        owners: list[CostClass | FixedCostClock] = [*self.classes, self.clock]
        if self.plain is not None:
            owners.append(self.plain)
        adopted = 0
        for k in owners:
            if k.law.dirty and k.law.refit():
                adopted += 1
                k.level.refresh(k.law)
                if isinstance(k, CostClass):
                    k.touch()
        return adopted

    # -- the store ------------------------------------------------------------------------------

    def to_state(self, fast: bool) -> dict[str, Any]:
        s: dict[str, Any] = {"top": self.top, "mode": self.mode,
                             "classes": [k.to_state(fast) for k in self.classes],
                             "plain": None if self.plain is None else self.plain.to_state(fast),
                             "clock": self.clock.to_state(fast), "splits": self.splits}
        if fast:
            s["held"] = [self.held_width, self.held_rounds]
        return s

    def load_state(self, s: dict[str, Any]) -> None:
        if s["mode"] != self.mode:
            raise ValueError(f"stored width table is {s['mode']!r}, this arm's is {self.mode!r}")
        self.top = int(s["top"])
        self.classes = [CostClass.from_state(self.cfg, k) for k in s["classes"]]
        if self.plain is not None and s.get("plain") is not None:
            self.plain = CostClass.from_state(self.cfg, s["plain"])
        self.clock = FixedCostClock.from_state(self.cfg, s["clock"])
        self.splits = int(s.get("splits", 0))
        if "held" in s:
            self.held_width, self.held_rounds = int(s["held"][0]), int(s["held"][1])
