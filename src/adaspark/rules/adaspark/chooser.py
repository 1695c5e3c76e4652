"""Choosing the width (§3.4): Eq. (7), the long-run rate rho, the gains and the hysteresis.

For each offered width ``n`` the chooser forms the round's expected tokens and time and maximises

    V(n) = 1 + S(n0) + g_d dS_d(n) + g_n dS_ng(n) - rho_m (D + T(n, c))           (Eq. 7)

``n0`` is a fixed reference width of 8 rows (``gain_reference``: a named choice), ``dS_d`` and
``dS_ng`` the expected tokens the drafter's and the n-gram's nodes add above ``n0`` (negative
below it, priced by a second pair of gains), and ``rho_m`` the long-run decode rate of the
context band ``m`` (Prop. 5: pricing time at the best achievable rate maximises the band's rate;
the achieved rate stands in for it, a stochastic Dinkelbach iteration). Until a band has enough
rounds the chooser uses the per-round ratio ``tokens / time``. The incumbent is kept unless beaten
by the hysteresis margin; the first incumbent is the widest offered width, because only rounds
wider than ``n0`` teach the gains above it.

The gains are lines in context fitted by ridge least squares of realised on predicted marginal,
shrunk toward 1 and clamped. Their observations cost no extra rounds: by Prop. 1 every prefix of
the round's order is a tree, so the accepted path also says what each narrower prefix would have
accepted.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from adaspark.decoding.candidates import KIND_CODE, NGRAM, CandidateArrays, CandidateSet
from adaspark.decoding.tree import order_and_sums
from adaspark.jit import kernel
from adaspark.rules.adaspark.config import WidthChoiceConfig
from adaspark.rules.adaspark.cost_law import context_band


class LongRunRate:
    """rho per context band: committed tokens over time, both decayed with a half-life in rounds
    of that band; ``None`` until the band holds ``rate_warm_rounds`` rounds."""

    def __init__(self, cfg: WidthChoiceConfig) -> None:
        self.cfg = cfg
        self.keep = 0.5 ** (1.0 / cfg.rate_half_life_rounds)
        self.bands: dict[int, list[float]] = {}   # band -> [tokens, seconds, rounds]

    def observe(self, context: int, tokens: float, seconds: float) -> None:
        if tokens <= 0 or not (seconds > 0.0 and math.isfinite(seconds)):
            return
        b = self.bands.setdefault(context_band(context), [0.0, 0.0, 0])
        b[0] = b[0] * self.keep + tokens
        b[1] = b[1] * self.keep + seconds
        b[2] += 1

    def rate(self, context: int) -> float | None:
        b = self.bands.get(context_band(context))
        if b is None or b[2] < self.cfg.rate_warm_rounds or b[1] <= 0.0:
            return None
        return b[0] / b[1]

    def rounds(self, context: int) -> int:
        b = self.bands.get(context_band(context))
        return 0 if b is None else int(b[2])

    def to_state(self) -> dict[str, Any]:
        return {str(k): list(v) for k, v in self.bands.items()}

    def load_state(self, s: dict[str, Any]) -> None:
        self.bands = {int(k): [float(v[0]), float(v[1]), int(v[2])] for k, v in s.items()}


def gain_line(fit: tuple[float, float], u: float, cfg: WidthChoiceConfig) -> float:
    """A gain's line ``a + b (u - pivot)`` at ``u``, clamped."""
    a, b = fit
    lo, hi = cfg.gain_clamp
    return min(max(a + b * (u - cfg.gain_pivot_u), lo), hi)


class MarginGain:
    """A gain ``g(u) = a + b (u - pivot)``: ridge least squares of the realised marginal on the
    predicted one, columns ``[p, p (u - pivot)]``, decayed normal equations, ridge weight
    ``shrinkage x`` each column's sum of squares (plus a floor) pulling ``(a, b)`` toward
    ``(1, 0)``; clamped."""

    def __init__(self, cfg: WidthChoiceConfig) -> None:
        self.cfg = cfg
        self.xx = [0.0, 0.0, 0.0]
        self.xy = [0.0, 0.0]
        self.seen = 0
        self._fit: tuple[float, float] | None = (1.0, 0.0)

    def fit(self) -> tuple[float, float]:
        if self._fit is not None:
            return self._fit
        c = self.cfg
        m00, m01, m11 = self.xx
        p0 = max(m00, 0.0) * c.gain_shrinkage + c.gain_ridge_floor
        p1 = max(m11, 0.0) * c.gain_shrinkage + c.gain_ridge_floor
        a00, a01, a11 = m00 + p0, m01, m11 + p1
        b0, b1 = self.xy[0] + p0, self.xy[1]
        det = a00 * a11 - a01 * a01
        if not math.isfinite(det) or abs(det) < 1e-12:
            self._fit = (1.0, 0.0)
        else:
            a = (b0 * a11 - b1 * a01) / det
            b = (a00 * b1 - a01 * b0) / det
            self._fit = (a, b) if math.isfinite(a) and math.isfinite(b) else (1.0, 0.0)
        return self._fit

    def at(self, u: float) -> float:
        return gain_line(self.fit(), u, self.cfg)

    def observe(self, u: float, predicted: float, realised: float) -> None:
        c = self.cfg
        if not (math.isfinite(predicted) and math.isfinite(realised)) \
                or predicted <= c.gain_min_predicted:
            return
        keep = 1.0 - 1.0 / c.gain_memory_rounds
        v = u - c.gain_pivot_u
        x0, x1 = predicted, predicted * v
        self.xx = [self.xx[0] * keep + x0 * x0, self.xx[1] * keep + x0 * x1,
                   self.xx[2] * keep + x1 * x1]
        self.xy = [self.xy[0] * keep + x0 * realised, self.xy[1] * keep + x1 * realised]
        self.seen += 1
        self._fit = None

    def to_state(self) -> dict[str, Any]:
        return {"xx": self.xx, "xy": self.xy, "seen": self.seen}

    def load_state(self, s: dict[str, Any]) -> None:
        self.xx = [float(x) for x in s["xx"]]
        self.xy = [float(x) for x in s["xy"]]
        self.seen = int(s["seen"])
        self._fit = None


@dataclass
class Gains:
    """The round's four gains: above ``n0`` (drafter, n-gram) and below it."""

    d: float = 1.0
    n: float = 1.0
    d_below: float = 1.0
    n_below: float = 1.0


def reference_width(offered: list[int], cfg: WidthChoiceConfig) -> int:
    """Eq. (7)'s ``n0``. ``gain_reference: fixed`` (the paper: "a fixed reference width of 8
    rows", so that learning a narrower width does not move the point the marginal is measured
    from): ``gain_reference_width`` whatever is offered. ``narrowest_offered`` (our earlier
    reading): the narrowest offered width of at least that many rows, else the narrowest
    offered."""
    n0 = cfg.gain_reference_width
    if cfg.gain_reference == "fixed":
        return n0
    for n in offered:
        if n >= n0:
            return n
    return offered[0] if offered else n0


@kernel
def priced_value(tokens: float, seconds: float, rho: float | None) -> float:
    """Eq. (7)'s value of ``tokens`` in ``seconds``: ``tokens - rho seconds``, or the per-round
    ratio ``tokens / seconds`` while ``rho`` is ``None``."""
    if rho is None:
        return tokens / seconds if seconds > 0 else math.inf
    return tokens - rho * seconds


@kernel
def clears(v: float, incumbent_v: float, incumbent_tokens: float, rho: float | None,
           ratio_margin: float, hysteresis_margin: float) -> bool:
    """The hysteresis: beat the incumbent's V by ``hysteresis_margin x its expected tokens``
    once rho is known, its ratio by ``ratio_margin`` before."""
    if rho is None:
        return v > incumbent_v * (1.0 + ratio_margin)
    return v > incumbent_v + hysteresis_margin * incumbent_tokens


@kernel
def eq7_tokens(s: np.ndarray, ng: np.ndarray, base_keep: int, width: int, g_d: float,
               g_n: float, g_d_below: float, g_n_below: float) -> float:
    """Expected tokens of a verify of ``width`` rows: ``1 + S(n0) + g_d dS_d + g_n dS_ng``
    (the first ``base_keep`` candidates make the reference width's tree; below it the second
    pair of gains)."""
    order_len = s.shape[0] - 1
    k = width - 1
    k = 0 if k < 0 else order_len if k > order_len else k
    base_s = s[base_keep]
    d_all = s[k] - base_s
    d_ng = ng[k] - ng[base_keep]
    if k < base_keep:
        return 1.0 + base_s + g_d_below * (d_all - d_ng) + g_n_below * d_ng
    return 1.0 + base_s + g_d * (d_all - d_ng) + g_n * d_ng


def bounded_measurement(best: float, tokens_at: Callable[[int], float], d_fixed: float,
                        rho: float | None) -> Callable[[int, float], bool]:
    """``cold_start: bounded``: the width table's question "could measuring ``width`` change
    the choice?". Its optimistic value (``tokens_at(width)`` tokens, every candidate on the
    deepest path accepted, in ``D + time_floor`` seconds) must beat ``best``, the value of the
    best width already priced (plain decode's in the width-1 extension)."""
    def could_change(width: int, time_floor: float) -> bool:
        return priced_value(tokens_at(width), d_fixed + time_floor, rho) > best
    return could_change


class Valuer:
    """Eq. (7) for one round: ``S`` and ``S_ng`` over the whole order (``S[k]``: the first ``k``
    candidates), the gains, the reference width, D and rho (``None``: the per-round ratio)."""

    __slots__ = ("base_keep", "d_fixed", "g", "ng", "rho", "s")

    def __init__(self, s: np.ndarray, s_ng: np.ndarray, n0: int, gains: Gains, d_fixed: float,
                 rho: float | None) -> None:
        self.s = np.asarray(s, dtype=np.float64)
        self.ng = np.asarray(s_ng, dtype=np.float64)
        self.base_keep = min(max(n0 - 1, 0), len(self.s) - 1)
        self.g = gains
        self.d_fixed = d_fixed
        self.rho = rho

    def tokens(self, width: int) -> float:
        """Expected tokens of a verify of ``width`` rows (:func:`eq7_tokens`)."""
        g = self.g
        return eq7_tokens(self.s, self.ng, self.base_keep, width, g.d, g.n, g.d_below,
                          g.n_below)

    def value(self, width: int, price: float) -> float:
        return priced_value(self.tokens(width), self.d_fixed + price, self.rho)

    def clears(self, v: float, incumbent_v: float, incumbent_tokens: float,
               cfg: WidthChoiceConfig) -> bool:
        return clears(v, incumbent_v, incumbent_tokens, self.rho, cfg.ratio_margin,
                      cfg.hysteresis_margin)


@dataclass
class Choice:
    width: int
    value: float
    best: int
    kept_incumbent: bool
    index: int = -1   # the width's place among the offered


def choose(valuer: Valuer, offered: list[tuple[int, float]] | tuple[np.ndarray, np.ndarray],
           incumbent: int, cfg: WidthChoiceConfig) -> Choice:
    """Algorithm 1, line 10: argmax of Eq. (7) over the offered widths (ties to the narrower),
    kept at the incumbent unless beaten by the margin (:func:`_choose`; ``offered`` as
    ``(width, price)`` pairs or as the arrays of both)."""
    if isinstance(offered, tuple):
        widths, prices = offered
    else:
        widths = np.asarray([w for w, _ in offered], dtype=np.int64)
        prices = np.asarray([p for _, p in offered], dtype=np.float64)
    g = valuer.g
    w, v, best, kept, at = _choose(widths, prices, valuer.s, valuer.ng, valuer.base_keep, g.d,
                                   g.n, g.d_below, g.n_below, valuer.d_fixed, valuer.rho,
                                   incumbent, cfg.ratio_margin, cfg.hysteresis_margin)
    return Choice(int(w), float(v), int(best), bool(kept), int(at))


@kernel
def _choose(widths: np.ndarray, prices: np.ndarray, s: np.ndarray, ng: np.ndarray,
            base_keep: int, g_d: float, g_n: float, g_d_below: float, g_n_below: float,
            d_fixed: float, rho: float | None, incumbent: int, ratio_margin: float,
            hysteresis_margin: float) -> tuple[int, float, int, bool, int]:
    """:func:`choose`: ``(width, value, best width, kept the incumbent, the width's index)``."""
    best_w, best_v, best_i = 0, -math.inf, -1
    inc_v, inc_i = 0.0, -1
    for i in range(widths.shape[0]):
        w = widths[i]
        v = priced_value(eq7_tokens(s, ng, base_keep, w, g_d, g_n, g_d_below, g_n_below),
                         d_fixed + prices[i], rho)
        if w == incumbent:
            inc_v, inc_i = v, i
        if v > best_v:
            best_w, best_v, best_i = w, v, i
    if inc_i < 0 or best_w == incumbent:
        return best_w, best_v, best_w, False, best_i
    inc_tokens = eq7_tokens(s, ng, base_keep, incumbent, g_d, g_n, g_d_below, g_n_below)
    if clears(best_v, inc_v, inc_tokens, rho, ratio_margin, hysteresis_margin):
        return best_w, best_v, best_w, False, best_i
    return incumbent, inc_v, best_w, True, inc_i


def could_beat(valuer: Valuer, width: int, price: float, held: int, held_price: float,
               cfg: WidthChoiceConfig) -> bool:
    """The split test's question: would ``width`` rows at ``price`` clear the switching margin
    against the held width? (The same comparison the chooser makes.)"""
    inc_v = valuer.value(held, held_price)
    return valuer.clears(valuer.value(width, price), inc_v, valuer.tokens(held), cfg)


@kernel
def accepted_within(ranks_on_path: np.ndarray, ngram_on_path: np.ndarray,
                    k: int) -> tuple[int, int]:
    """What a tree of the first ``k`` candidates of the order would have accepted: the leading
    part of the path whose ranks are below ``k``, split into (drafter, n-gram) nodes."""
    d = g = 0
    for i in range(ranks_on_path.shape[0]):
        if ranks_on_path[i] >= k:
            break
        if ngram_on_path[i]:
            g += 1
        else:
            d += 1
    return d, g


@kernel
def marginal(s: np.ndarray, s_ng: np.ndarray, a: int, b: int, ranks_on_path: np.ndarray,
             ngram_on_path: np.ndarray) -> tuple[float, float, float, float]:
    """From ``a`` to ``b`` rows: the predicted and realised marginal tokens of the drafter's
    nodes, then of the n-gram nodes (``(p_d, r_d, p_ng, r_ng)``)."""
    order_len = s.shape[0] - 1
    ka, kb = min(a - 1, order_len), min(b - 1, order_len)
    bd, bg = accepted_within(ranks_on_path, ngram_on_path, kb)
    ad, ag = accepted_within(ranks_on_path, ngram_on_path, ka)
    p_ng = s_ng[kb] - s_ng[ka]
    p_d = (s[kb] - s[ka]) - p_ng
    return p_d, float(bd - ad), p_ng, float(bg - ag)


class GainLearner:
    """The two pairs of gains and how a verified tree teaches them (Algorithm 1, line 16)."""

    def __init__(self, cfg: WidthChoiceConfig) -> None:
        self.cfg = cfg
        self.d = MarginGain(cfg)
        self.n = MarginGain(cfg)
        self.d_below = MarginGain(cfg)
        self.n_below = MarginGain(cfg)

    def at(self, u: float) -> Gains:
        c = self.cfg
        return Gains(gain_line(self.d.fit(), u, c), gain_line(self.n.fit(), u, c),
                     gain_line(self.d_below.fit(), u, c), gain_line(self.n_below.fit(), u, c))

    def observe(self, u: float, s: np.ndarray, s_ng: np.ndarray, width: int, n0: int,
                first: int, ranks_on_path: np.ndarray | list[int],
                ngram_on_path: np.ndarray | list[bool]) -> None:
        """``width`` rows ran. Above ``n0`` only a round wider than ``n0`` reveals the marginal;
        below it every round reveals the rows between the narrowest offered width ``first`` and
        ``min(width, n0)`` (:func:`marginal`)."""
        ranks = np.asarray(ranks_on_path, dtype=np.int64)
        ng = np.asarray(ngram_on_path, dtype=np.bool_)
        if width > n0:
            pd, rd, pn, rn = marginal(s, s_ng, n0, width, ranks, ng)
            self.d.observe(u, pd, rd)
            self.n.observe(u, pn, rn)
        top = min(width, n0)
        if first >= 1 and top > first:
            pd, rd, pn, rn = marginal(s, s_ng, first, top, ranks, ng)
            self.d_below.observe(u, pd, rd)
            self.n_below.observe(u, pn, rn)

    def to_state(self) -> dict[str, Any]:
        return {"d": self.d.to_state(), "n": self.n.to_state(),
                "d_below": self.d_below.to_state(), "n_below": self.n_below.to_state()}

    def load_state(self, s: dict[str, Any]) -> None:
        self.d.load_state(s["d"])
        self.n.load_state(s["n"])
        self.d_below.load_state(s["d_below"])
        self.n_below.load_state(s["n_below"])


class DraftForecast:
    """Width-1 extension (not in the paper): what a drafted round is worth, known before the
    drafter is called. Per context band, the decayed realised tokens and time of drafted rounds
    (the same half-life as rho). Valued with Eq. (7)'s price: ``A - rho C`` or ``A / C``."""

    def __init__(self, cfg: WidthChoiceConfig) -> None:
        self.cfg = cfg
        self.keep = 0.5 ** (1.0 / cfg.rate_half_life_rounds)
        self.bands: dict[int, list[float]] = {}

    def observe(self, context: int, tokens: float, seconds: float) -> None:
        if not (seconds > 0.0 and math.isfinite(seconds)):
            return
        b = self.bands.setdefault(context_band(context), [0.0, 0.0, 0.0])
        b[0] = b[0] * self.keep + tokens
        b[1] = b[1] * self.keep + seconds
        b[2] = b[2] * self.keep + 1.0

    def estimate(self, context: int) -> tuple[float, float] | None:
        """Mean tokens and seconds of a drafted round in the band; ``None`` (so: draft, and
        learn) while the band has none."""
        b = self.bands.get(context_band(context))
        if b is None or b[2] <= 0.0:
            return None
        return b[0] / b[2], b[1] / b[2]

    def to_state(self) -> dict[str, Any]:
        return {str(k): list(v) for k, v in self.bands.items()}

    def load_state(self, s: dict[str, Any]) -> None:
        self.bands = {int(k): [float(x) for x in v] for k, v in s.items()}


def width1_switch(w1_incumbent: bool, t1: float, forecast: tuple[float, float],
                  rho: float | None, cfg: WidthChoiceConfig) -> bool:
    """The width-1 extension's choice (§3.4), before the drafter is called: whether plain decode
    (one token in ``t1`` seconds, no drafter call) holds the round, given the drafted round's
    forecast ``(tokens, seconds)``. Values are ``tokens - rho seconds`` (Eq. 7's pricing), or the
    per-round ratio ``tokens / seconds`` while ``rho`` is ``None``; the incumbent ``w1_incumbent``
    is kept unless the other beats it by the hysteresis margin (per token of the incumbent) or,
    for the ratio, by ``ratio_margin``. Returns the new incumbent (``True``: plain decode)."""
    a_tokens, c_time = forecast

    v1, vd = priced_value(1.0, t1, rho), priced_value(a_tokens, c_time, rho)
    if w1_incumbent:
        inc_v, inc_tokens, alt_v = v1, 1.0, vd
    else:
        inc_v, inc_tokens, alt_v = vd, a_tokens, v1
    if rho is None:
        switch = alt_v > inc_v * (1.0 + cfg.ratio_margin)
    else:
        switch = alt_v > inc_v + cfg.hysteresis_margin * inc_tokens
    return bool(w1_incumbent != switch)


def counts_as_ngram(cands: CandidateSet, agreed_counts: bool,
                    arrays: CandidateArrays | None = None) -> np.ndarray:
    """The candidates Eq. (7) prices with the n-gram gain: n-gram-only, and agreed ones when
    ``agreed_counts`` (``agreed_counts_as: ngram``)."""
    if arrays is None:
        return cands.ngram_mask(agreed_counts)
    mask = arrays.kind == KIND_CODE[NGRAM]
    return mask | arrays.agreed if agreed_counts else mask


def ngram_order(cands: CandidateSet, q: np.ndarray, is_ng: np.ndarray,
                parent: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Proposition 1's order, ``S`` and ``S_ng`` (the part of ``S`` held by the candidates
    ``is_ng`` marks) under ``q`` (in [0, 1] by construction: Eq. 6's softmax, or the head-based
    estimate clipped and shifted, so unchecked here): :func:`ngram_order_arrays` (``parent``: the
    candidates' parents as an array, when the caller has it)."""
    pa = parent if parent is not None else np.asarray(cands.parent, dtype=np.int64)
    return ngram_order_arrays(pa, np.asarray(q, dtype=np.float64),
                              np.asarray(is_ng, dtype=np.bool_))


@kernel
def ngram_order_arrays(parent: np.ndarray, q: np.ndarray,
                 is_ng: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Eq. (1)'s path products, the best-first order and ``S`` (``tree.order_and_sums``), and
    ``S_ng``: the running sums of ``S``'s steps ``S[k+1] - S[k]`` over the marked candidates."""
    n = parent.shape[0]
    Q = np.empty(n)
    for j in range(n):
        p = parent[j]
        Q[j] = q[j] * (1.0 if p == -1 else Q[p])
    order, S = order_and_sums(Q)
    s_ng = np.zeros(n + 1)
    if is_ng.any():   # else every term is 0 (S never falls, so no -0.0 either)
        acc = 0.0
        for k in range(n):
            acc += (S[k + 1] - S[k]) * (1.0 if is_ng[order[k]] else 0.0)
            s_ng[k + 1] = acc
    return order, S, s_ng


def width_without_ngram(cands: CandidateSet, q: np.ndarray, agreed_counts: bool,
                        valuer_args: tuple[int, Gains, float, float | None],
                        offered: list[tuple[int, float]], incumbent: int,
                        cfg: WidthChoiceConfig) -> int | None:
    """Table 7: the width Eq. (7) would take with the round's n-gram-only candidates priced at
    zero (``q = 0``: they, and everything below them, expect nothing), from the same prices,
    gains, rho and incumbent (``valuer_args``: n0, gains, D, rho of :class:`Valuer`). ``None``
    when the round has no n-gram-only candidate."""
    ng_only = cands.ngram_mask(agreed_counts=False)
    if not ng_only.any():
        return None
    _, S0, s_ng0 = ngram_order(cands, np.where(ng_only, 0.0, q),
                               counts_as_ngram(cands, agreed_counts))
    return choose(Valuer(S0, s_ng0, *valuer_args), offered, incumbent, cfg).width
