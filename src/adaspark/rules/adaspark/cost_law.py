"""The verify-cost law of one width class (§3.2, Eqs. 4-5): ``law_k(c) * level_k * D_now / D_k``.

- The **law** (Eq. 4) is a per-class low-quantile regression of the verify time, normalised by the
  class's scale (the lowest of its first measured times), on the redundant basis
  ``phi(u) = [1, u, u^2, sqrt(u), ln(1+u)]``, ``u = c / 8192``: pinball loss at ``tau``, elastic
  net, non-negative context coefficients, FTRL-Proximal with a capped squared-gradient sum (a
  floored rate). It keeps a **sample bank** of the newest samples of every context band (the bit
  length of the context) and is refitted at the end of each request on the bank, the candidate
  judged on held-out samples. By Prop. 3 the tau-quantile of one-sided noise is the machine's time.
- The **level** is the minimum of measured/law over the class's last verifies, clamped.
- The **clock** corrects staleness: every class records the clock when it runs, and its price is
  scaled by the clock now over that reading. The clock is the round's fixed cost D (drafter and
  tree build), which runs every round whatever the width.

Times are in seconds. A law's FTRL state is three arrays of five floats, which the compiled
kernels (``adaspark.jit``) update: the online fold, the weights' closed form and the refit's
passes.
"""

from __future__ import annotations

import itertools
import math
from collections import deque
from collections.abc import Iterable
from typing import Any

import numpy as np

from adaspark.jit import kernel
from adaspark.rules.adaspark.config import CostModelConfig

Basis = tuple[float, float, float, float, float]

#: A fresh number for each change of a class's price terms (:attr:`CostClass.stamp`).
_STAMPS = itertools.count()


def context_basis(context: int, unit: float) -> Basis:
    """Eq. (4)'s basis at a context of ``context`` tokens: ``[1, u, u^2, sqrt(u), ln(1+u)]``."""
    u = context / unit
    return (1.0, u, u * u, math.sqrt(u), math.log1p(u))


def context_band(context: int) -> int:
    """A context band: the bit length of the context (128-255 tokens is one band)."""
    return int(context).bit_length()


def pinball(residual: float, tau: float) -> float:
    """Koenker-Bassett quantile loss ``l_tau(v) = v (tau - 1[v < 0])`` (Eq. 4)."""
    return residual * (tau - (1.0 if residual < 0 else 0.0))


def window_level(ratios: Iterable[float], clamp: tuple[float, float]) -> float:
    """The level of Eq. (5): the minimum measured/law ratio of a window, clamped; 1 when empty."""
    m = min(ratios, default=None)
    if m is None:
        return 1.0
    return min(max(m, clamp[0]), clamp[1])


class ContextLaw:
    """Eq. (4) for one class: ``law(c) = scale * clamp(theta . phi(u))``.

    ``observe`` is the online FTRL-Proximal step on the pinball subgradient; ``refit`` is the
    end-of-request batch refit on the sample bank, adopted only if it wins on judged samples.
    """

    __slots__ = ("_banked", "bank", "cfg", "dirty", "floor", "hi_ctx", "lo_ctx", "n", "scale",
                 "seen", "w", "warm", "z")

    def __init__(self, cfg: CostModelConfig, banked: bool = True) -> None:
        self.cfg = cfg
        self.z = np.zeros(5)
        self.n = np.zeros(5)
        self.w = np.zeros(5)
        self.seen = 0
        self.scale: float | None = None
        self.warm: list[tuple[int, float]] = []
        self.bank: dict[int, list[tuple[int, float]]] = {}
        self.floor = math.inf
        self.lo_ctx = math.inf
        self.hi_ctx = 0.0
        self.dirty = False
        self._banked = banked

    # -- the fitted law -------------------------------------------------------------------

    @property
    def ready(self) -> bool:
        return self.scale is not None and self.seen > 0

    def _refresh_weights(self) -> None:
        """FTRL-Proximal's closed form; the context coefficients (index >= 1) are clamped at 0,
        so the law never falls as the context grows (:func:`_weights`)."""
        c = self.cfg
        _weights(self.z, self.n, self.w, c.l1, c.l2, c.ftrl_rate, c.ftrl_stabiliser)

    def normalised(self, phi: Basis) -> float:
        return _normalised(self.w, phi)

    def predict(self, phi: Basis) -> float | None:
        """The law's time (seconds) at the context of ``phi``; ``None`` until it is fitted."""
        if self.scale is None or self.seen == 0:
            return None
        lo, hi = self.cfg.law_clamp
        return _predict(self.w, phi, lo * self.floor, hi * self.floor, self.scale)

    # -- learning ---------------------------------------------------------------------------

    def observe(self, context: int, t: float, phi: Basis) -> None:
        """One verify of this class took ``t`` seconds at ``context``."""
        if not (t > 0.0 and math.isfinite(t)):
            return
        if self.scale is None:
            self.warm.append((context, t))
            if len(self.warm) < self.cfg.samples_before_law:
                return
            self.start(min(v for _, v in self.warm))
            held, self.warm = self.warm, []
            unit = self.cfg.context_basis_unit
            for ctx, v in held:
                self._fold(ctx, v, context_basis(ctx, unit))
            return
        self._fold(context, t, phi)

    def start(self, scale: float) -> None:
        """Fix the law's scale (its time unit: the class's lowest time of its first samples)
        and, with ``law_seed_intercept``, start the intercept at 1 (the scale)."""
        self.scale = scale
        if self.cfg.law_seed_intercept:
            c = self.cfg
            self.z = np.zeros(5)
            self.z[0] = -1.0 * (c.ftrl_stabiliser / c.ftrl_rate + c.l2) - c.l1
            self._refresh_weights()

    def _fold(self, context: int, t: float, phi: Basis) -> None:
        c = self.cfg
        if self._banked:
            band = self.bank.setdefault(context_band(context), [])
            if len(band) >= c.sample_bank_per_band:
                del band[0]
            band.append((context, t))
            self.dirty = True
        assert self.scale is not None
        y = t / self.scale
        _fold(self.z, self.n, self.w, phi, y, c.quantile_tau, c.squared_gradient_cap,
              c.ftrl_rate, c.l1, c.l2, c.ftrl_stabiliser)
        self.seen += 1
        self.floor = min(self.floor, y)
        self.lo_ctx = min(self.lo_ctx, float(context))
        self.hi_ctx = max(self.hi_ctx, float(context))

    # -- the end-of-request refit -----------------------------------------------------------

    def split_bank(self) -> tuple[list[tuple[int, float]], list[tuple[int, float]],
                                  list[tuple[int, float]]]:
        """``(train, held, judged)``: the newest quarter of every band with enough samples held
        out, the rest interleaved across bands; judged = held + every sample of a band too small
        to hold any out."""
        c = self.cfg
        train_bands: list[list[tuple[int, float]]] = []
        held: list[tuple[int, float]] = []
        small: list[tuple[int, float]] = []
        for b in sorted(self.bank):
            v = self.bank[b]
            k = int(len(v) * c.refit_holdout_fraction) if len(v) >= c.refit_holdout_min_band else 0
            if k == 0:
                small.extend(v)
                train_bands.append(list(v))
            else:
                held.extend(v[len(v) - k:])
                train_bands.append(list(v[: len(v) - k]))
        train: list[tuple[int, float]] = []
        longest = max((len(v) for v in train_bands), default=0)
        for i in range(longest):
            for v in train_bands:
                if i < len(v):
                    train.append(v[i])
        return train, held, held + small

    def score(self, samples: list[tuple[int, float]]) -> float:
        """Mean pinball loss (seconds) of the law on ``samples``."""
        if not samples:
            return math.inf
        unit, tau = self.cfg.context_basis_unit, self.cfg.quantile_tau
        total = 0.0
        for ctx, t in samples:
            p = self.predict(context_basis(ctx, unit))
            if p is None:
                return math.inf
            total += pinball(t - p, tau)
        return total / len(samples)

    def refit(self) -> bool:
        """Train a candidate law on the bank and adopt it if its quantile loss on the judged
        samples is lower. A sparse bank gets as many steps as a full one. The candidate keeps the
        class's scale and floor (the clamp of Eq. 4 rests on the class's lowest observed time,
        not on the training subset's), so adopting it replaces only the weights. Returns
        whether the candidate was adopted."""
        self.dirty = False
        c = self.cfg
        train, held, judged = self.split_bank()
        if not held:
            ctxs = [ctx for v in self.bank.values() for ctx, _ in v]
            if not ctxs or max(ctxs) <= min(ctxs) * c.refit_min_span:
                return False
        if len(train) <= c.samples_before_law or not judged:
            return False
        per_band = c.sample_bank_per_band - int(c.sample_bank_per_band * c.refit_holdout_fraction)
        passes = max(c.refit_epochs,
                     math.ceil(c.refit_epochs * per_band * len(self.bank) / len(train)))
        assert self.scale is not None  # a bank is filled only once the scale is set
        cand = ContextLaw(c, banked=False)
        cand.start(self.scale)  # the class's own unit and clamp floor (its lowest time seen)
        cand.floor = self.floor
        unit = c.context_basis_unit
        phis = [context_basis(ctx, unit) for ctx, _ in train]
        cand.train(train, phis, passes)
        if cand.score(judged) < self.score(judged):
            self.z, self.n, self.w = cand.z, cand.n, cand.w
            return True
        return False

    def train(self, samples: list[tuple[int, float]], phis: list[Basis], passes: int) -> None:
        """``passes`` sweeps of the online step over ``samples``, on a law whose scale is set
        (:meth:`start`): :func:`_train`."""
        c = self.cfg
        if self.scale is None:
            raise ValueError("train() needs the law's scale: call start(scale) first")
        ys = np.asarray([t for _, t in samples], dtype=np.float64) / self.scale
        ph = np.asarray(phis, dtype=np.float64).reshape(len(samples), 5)
        self.floor = _train(self.z, self.n, self.w, ph, ys, passes, self.floor,
                            c.quantile_tau, c.squared_gradient_cap, c.ftrl_rate, c.l1, c.l2,
                            c.ftrl_stabiliser)
        self.seen += passes * len(samples)

    # -- the store ----------------------------------------------------------------------------

    def to_state(self) -> dict[str, Any]:
        return {"z": self.z.tolist(), "n": self.n.tolist(), "seen": self.seen,
                "scale": self.scale,
                "warm": [list(x) for x in self.warm],
                "bank": {str(b): [list(x) for x in v] for b, v in self.bank.items()},
                "floor": None if math.isinf(self.floor) else self.floor,
                "lo_ctx": None if math.isinf(self.lo_ctx) else self.lo_ctx,
                "hi_ctx": self.hi_ctx, "dirty": self.dirty}

    @classmethod
    def from_state(cls, cfg: CostModelConfig, s: dict[str, Any]) -> ContextLaw:
        law = cls(cfg)
        law.z = np.asarray(s["z"], dtype=np.float64)
        law.n = np.asarray(s["n"], dtype=np.float64)
        law.seen = int(s["seen"])
        law.scale = None if s["scale"] is None else float(s["scale"])
        law.warm = [(int(a), float(b)) for a, b in s["warm"]]
        law.bank = {int(b): [(int(x), float(y)) for x, y in v] for b, v in s["bank"].items()}
        law.floor = math.inf if s["floor"] is None else float(s["floor"])
        law.lo_ctx = math.inf if s["lo_ctx"] is None else float(s["lo_ctx"])
        law.hi_ctx = float(s["hi_ctx"])
        law.dirty = bool(s["dirty"])
        law._refresh_weights()
        return law


@kernel
def _weights(z: np.ndarray, n: np.ndarray, w: np.ndarray, l1: float, l2: float, rate: float,
             beta: float) -> None:
    """FTRL-Proximal's closed form into ``w``: 0 where ``|z| <= l1``, else
    ``-(z - sign(z) l1) / ((beta + sqrt(n)) / rate + l2)``, the context coefficients clamped
    at 0."""
    for i in range(5):
        zi = z[i]
        if abs(zi) <= l1:
            w[i] = 0.0
            continue
        v = -(zi - math.copysign(l1, zi)) / ((beta + math.sqrt(n[i])) / rate + l2)
        w[i] = v if i == 0 or v > 0.0 else 0.0


@kernel
def _normalised(w: np.ndarray, phi: tuple) -> float:
    """``theta . phi(u)`` (``phi[0]`` is 1)."""
    return w[0] + w[1] * phi[1] + w[2] * phi[2] + w[3] * phi[3] + w[4] * phi[4]


@kernel
def _predict(w: np.ndarray, phi: tuple, lo: float, hi: float, scale: float) -> float:
    """Eq. (4): ``scale * clamp(theta . phi, lo, hi)`` (the clamp in the law's unit)."""
    y = _normalised(w, phi)
    return min(max(y, lo), hi) * scale


@kernel
def _fold(z: np.ndarray, n: np.ndarray, w: np.ndarray, phi: tuple, y: float, tau: float,
          cap: float, rate: float, l1: float, l2: float, beta: float) -> None:
    """One online FTRL-Proximal step of the pinball subgradient at the normalised time ``y``
    (Eq. 4), then the weights' closed form."""
    pull = (1.0 - tau) if y < _normalised(w, phi) else -tau
    for i in range(5):
        g = pull * phi[i]
        if g == 0.0:
            continue
        n_old = n[i]
        n_new = min(n_old + g * g, cap)
        sigma = (math.sqrt(n_new) - math.sqrt(n_old)) / rate
        z[i] += g - sigma * w[i]
        n[i] = n_new
    _weights(z, n, w, l1, l2, rate, beta)


@kernel
def _train(z: np.ndarray, n: np.ndarray, w: np.ndarray, phis: np.ndarray, ys: np.ndarray,
           passes: int, floor: float, tau: float, cap: float, rate: float, l1: float,
           l2: float, beta: float) -> float:
    """The refit's ``passes`` sweeps over the samples (normalised times ``ys``), each step
    updating only the coefficients it moves; returns the lowest time seen (the floor)."""
    for _ in range(passes):
        for idx in range(ys.shape[0]):
            y = ys[idx]
            pred = (w[0] + w[1] * phis[idx, 1] + w[2] * phis[idx, 2] + w[3] * phis[idx, 3]
                    + w[4] * phis[idx, 4])
            pull = (1.0 - tau) if y < pred else -tau
            for i in range(5):
                g = pull * phis[idx, i]
                if g == 0.0:
                    continue
                n_old = n[i]
                n_new = n_old + g * g
                if n_new > cap:
                    n_new = cap
                zi = z[i] + (g - (math.sqrt(n_new) - math.sqrt(n_old)) / rate * w[i])
                z[i] = zi
                n[i] = n_new
                if -l1 <= zi <= l1:
                    w[i] = 0.0
                else:
                    v = -(zi - (l1 if zi > 0 else -l1)) / ((beta + math.sqrt(n_new)) / rate + l2)
                    w[i] = v if i == 0 or v > 0.0 else 0.0
            if y < floor:
                floor = y
    return floor


class Level:
    """The level of Eq. (5): the minimum, over the last ``level_window`` verifies, of the
    measured time over the law's value, clamped; 1 until there is a ratio.

    ``level_against: current_law`` (our reading) evaluates every verify of the window against
    the law as it is now, so the measurements that fitted the law count too and one slow verify
    cannot set the level alone; ``at_sample`` (imparo) keeps each ratio as it was taken, before
    the sample trained the law."""

    __slots__ = ("cfg", "ratios", "value", "window")

    def __init__(self, cfg: CostModelConfig) -> None:
        self.cfg = cfg
        self.window: deque[tuple[float, Basis]] = deque(maxlen=cfg.level_window)
        self.ratios: deque[float] = deque(maxlen=cfg.level_window)
        self.value = 1.0

    def observe(self, t: float, phi: Basis, law: ContextLaw) -> None:
        """Call with the law *before* the sample trains it, then :meth:`refresh` after."""
        if self.cfg.level_against == "at_sample":
            p = law.predict(phi)
            if p is not None and p > 0.0:
                self.ratios.append(t / p)
        self.window.append((t, phi))

    def refresh(self, law: ContextLaw) -> None:
        if self.cfg.level_against == "at_sample":
            self.value = window_level(self.ratios, self.cfg.level_clamp)
            return
        if not law.ready:
            self.value = 1.0
            return
        ratios = []
        for t, phi in self.window:
            p = law.predict(phi)
            if p is not None and p > 0.0:
                ratios.append(t / p)
        self.value = window_level(ratios, self.cfg.level_clamp)

    def lowest(self) -> float:
        return min(t for t, _ in self.window)

    def to_state(self) -> dict[str, Any]:
        return {"window": [[t, list(phi)] for t, phi in self.window],
                "ratios": list(self.ratios), "value": self.value}

    def load_state(self, s: dict[str, Any]) -> None:
        self.window.clear()
        self.window.extend((float(t), tuple(float(x) for x in phi))  # type: ignore[misc]
                           for t, phi in s["window"])
        self.ratios.clear()
        self.ratios.extend(float(x) for x in s["ratios"])
        self.value = float(s["value"])


class CostClass:
    """One class of the width table: widths ``lo..hi``, priced at ``hi`` (the only width in it
    the chooser is offered). Also used for width 1 (plain decode) in the width-1 extension."""

    __slots__ = ("cfg", "clock_at", "hi", "law", "level", "lo", "measured", "short", "stamp",
                 "unreachable")

    def __init__(self, cfg: CostModelConfig, lo: int, hi: int) -> None:
        self.cfg = cfg
        self.lo, self.hi = lo, hi
        self.law = ContextLaw(cfg)
        self.level = Level(cfg)
        self.measured = 0
        self.clock_at = 1.0
        self.short = 0
        self.unreachable = False
        #: changes whenever the class's price terms or reach change (``touch``), so a stack of
        #: every class's terms (``width_table.PriceStack``) refreshes only the classes that moved
        self.stamp = next(_STAMPS)

    def touch(self) -> None:
        """Mark the class's price terms (law, level, clock reading, measurements, reach) as
        changed."""
        self.stamp = next(_STAMPS)

    @property
    def priced(self) -> bool:
        return self.measured >= self.cfg.measurements_before_priced

    def price(self, phi: Basis, clock_now: float) -> float | None:
        """Eq. (5) at the context of ``phi``; ``None`` until the class has its measurements."""
        if self.measured < self.cfg.measurements_before_priced:   # not yet ``priced``
            return None
        law = self.law
        if law.scale is None or law.seen == 0:   # not fitted: ``law.predict`` is None
            base = self.level.lowest()  # its lowest measured time, until the law is fitted
        else:
            base = law.predict(phi) * self.level.value  # type: ignore[operator]
        return base * clock_now / self.clock_at

    def observe(self, context: int, t: float, phi: Basis, clock_now: float) -> None:
        self.level.observe(t, phi, self.law)
        self.law.observe(context, t, phi)
        self.level.refresh(self.law)
        self.measured += 1
        self.clock_at = clock_now
        self.touch()

    def to_state(self, fast: bool) -> dict[str, Any]:
        s: dict[str, Any] = {"lo": self.lo, "hi": self.hi, "law": self.law.to_state(),
                             "measured": self.measured, "short": self.short,
                             "unreachable": self.unreachable, "clock_at": self.clock_at}
        level = self.level.to_state()
        if not fast:  # the window's times are kept (the pre-law price reads them); not levels
            level["ratios"], level["value"] = [], 1.0
        s["level"] = level
        return s

    @classmethod
    def from_state(cls, cfg: CostModelConfig, s: dict[str, Any]) -> CostClass:
        k = cls(cfg, int(s["lo"]), int(s["hi"]))
        k.law = ContextLaw.from_state(cfg, s["law"])
        k.measured = int(s["measured"])
        k.short = int(s["short"])
        k.unreachable = bool(s["unreachable"])
        k.clock_at = float(s["clock_at"])
        k.level.load_state(s["level"])
        if "value" not in s["level"] or not s["level"]["ratios"]:
            k.level.refresh(k.law)
        k.touch()
        return k


class FixedCostClock:
    """The round's fixed cost D (drafter forward plus tree build): its own context law and
    level, and the clock that carries every class's price from when it ran to now (Eq. 5's
    ``D_now / D_k``)."""

    def __init__(self, cfg: CostModelConfig) -> None:
        self.cfg = cfg
        self.law = ContextLaw(cfg)
        self.level = Level(cfg)

    def observe(self, context: int, d: float, phi: Basis) -> None:
        if not (d > 0.0 and math.isfinite(d)):
            return
        self.level.observe(d, phi, self.law)
        self.law.observe(context, d, phi)
        self.level.refresh(self.law)

    def reading(self) -> float:
        """The clock now: D's level against its own law (``clock: residual``), or D's raw
        recent minimum (``clock: raw``); 1 until there is something to read."""
        if self.cfg.clock == "raw":
            return self.level.lowest() if self.level.window else 1.0
        if not self.law.ready:
            return 1.0
        return self.level.value

    def estimate(self, phi: Basis) -> float:
        """D at the context of ``phi`` (seconds): law times level, else its recent minimum."""
        p = self.law.predict(phi)
        if p is not None:
            return p * self.level.value
        return self.level.lowest() if self.level.window else 0.0

    def to_state(self, fast: bool) -> dict[str, Any]:
        level = self.level.to_state()
        if not fast:
            level["ratios"], level["value"] = [], 1.0
        return {"law": self.law.to_state(), "level": level}

    @classmethod
    def from_state(cls, cfg: CostModelConfig, s: dict[str, Any]) -> FixedCostClock:
        k = cls(cfg)
        k.law = ContextLaw.from_state(cfg, s["law"])
        k.level.load_state(s["level"])
        if not s["level"]["ratios"]:
            k.level.refresh(k.law)
        return k
