"""The width choice's learned parts on synthetic inputs with hand-computed answers (§3.4): the
margin gains and how a verified tree teaches them, the long-run rate rho, and the margins of
Eq. (7)'s choice before and after rho is known."""

from __future__ import annotations

import math

import numpy as np
import pytest

from adaspark.rules.adaspark.chooser import (
    GainLearner,
    Gains,
    LongRunRate,
    MarginGain,
    Valuer,
    choose,
)
from adaspark.rules.adaspark.config import load_config

W = load_config().width_choice
PIVOT = W.gain_pivot_u          # 0.5
KEEP = 1.0 - 1.0 / W.gain_memory_rounds


def one_observation(p: float, r: float) -> float:
    """The gain after one observation at the pivot (so the slope column is 0): ridge weight
    ``0.02 p^2 + 0.05`` toward 1, ``a = (p r + w) / (p^2 + w)``."""
    w = W.gain_shrinkage * p * p + W.gain_ridge_floor
    return (p * r + w) / (p * p + w)


# -- the margin gains ------------------------------------------------------------------------


def test_an_empty_gain_is_one_and_one_observation_is_shrunk_toward_one() -> None:
    g = MarginGain(W)
    assert g.at(0.0) == g.at(PIVOT) == g.at(3.0) == 1.0
    g.observe(PIVOT, 1.0, 2.0)     # realised twice the predicted marginal
    assert g.at(PIVOT) == pytest.approx(2.07 / 1.07, rel=1e-12)   # not 2: shrunk toward 1
    assert g.at(0.0) == g.at(2.0) == g.at(PIVOT)                  # no slope without spread


def test_more_evidence_moves_the_gain_toward_realised_over_predicted_never_all_the_way() -> None:
    """``n`` equal observations (predicted 1, realised 2) hold a decayed sum of squares
    ``S = (1 - k^n) / (1 - k)``, ``k = 1 - 1/256``: ``a = (2.02 S + 0.05) / (1.02 S + 0.05)``,
    which tends to 2.02 / 1.02, not 2 (the ridge is 0.02 of the evidence itself)."""
    g = MarginGain(W)
    for n in range(1, 401):
        g.observe(PIVOT, 1.0, 2.0)
        if n in (1, 10, 100, 400):
            s = (1.0 - KEEP**n) / (1.0 - KEEP)
            assert g.at(PIVOT) == pytest.approx((2.02 * s + 0.05) / (1.02 * s + 0.05), rel=1e-9)
    assert 1.97 < g.at(PIVOT) < 2.02 / 1.02


def test_the_gain_is_a_line_in_context() -> None:
    """Short contexts (u = 0) realise half the predicted marginal, long ones (u = 1) one and a
    half: the fitted line ``a + b (u - 0.5)`` is the ridge solution of those two decayed rows,
    each column pulled toward ``(1, 0)`` by 0.02 of its sum of squares plus 0.05."""
    g = MarginGain(W)
    g.observe(0.0, 1.0, 0.5)
    g.observe(1.0, 1.0, 1.5)
    x = np.array([[1.0, -0.5], [1.0, 0.5]])     # [p, p (u - pivot)]
    wt = np.array([KEEP, 1.0])                  # the first row decayed once
    y = np.array([0.5, 1.5])
    m = x.T @ (wt[:, None] * x)
    ridge = np.diag([W.gain_shrinkage * m[0, 0] + W.gain_ridge_floor,
                     W.gain_shrinkage * m[1, 1] + W.gain_ridge_floor])
    a, b = np.linalg.solve(m + ridge, x.T @ (wt * y) + ridge @ np.array([1.0, 0.0]))
    for u in (0.0, 0.25, 1.0, 2.0):
        assert g.at(u) == pytest.approx(a + b * (u - PIVOT), rel=1e-9)
    assert g.at(0.0) < 1.0 < g.at(1.0)
    # with many rounds the line nears the truth, 1 + (u - 0.5), to within the ridge
    for _ in range(300):
        g.observe(0.0, 1.0, 0.5)
        g.observe(1.0, 1.0, 1.5)
    assert g.at(0.0) == pytest.approx(0.5, abs=0.03) and g.at(1.0) == pytest.approx(1.5, abs=0.03)


def test_the_gain_is_clamped_and_tiny_predictions_teach_nothing() -> None:
    hi, lo = MarginGain(W), MarginGain(W)
    for _ in range(50):
        hi.observe(PIVOT, 1.0, 100.0)
        lo.observe(PIVOT, 1.0, 0.0)
    assert hi.at(PIVOT) == W.gain_clamp[1] == 4.0
    assert lo.at(PIVOT) == W.gain_clamp[0] == 0.25
    none = MarginGain(W)
    none.observe(PIVOT, 0.5 * W.gain_min_predicted, 10.0)
    assert none.seen == 0 and none.at(PIVOT) == 1.0


def s_of(n: int, each: float = 0.1) -> np.ndarray:
    """``S[k]``: the first ``k`` candidates of the order, each expecting ``each`` tokens."""
    return each * np.arange(n + 1, dtype=np.float64)


def test_a_wide_round_teaches_both_pairs_from_what_its_prefixes_accepted() -> None:
    """A 16-row round, n0 = 8, the narrowest offered width 2; 20 candidates expecting 0.1 each;
    the accepted path holds the candidates ranked 0, 1 and 9. Above n0 (ranks 7..14): predicted
    0.8, realised 1 (rank 9). Below (ranks 1..6, between 2 rows and n0): predicted 0.6,
    realised 1 (rank 1). No n-gram node: the n-gram gains learn nothing."""
    learner = GainLearner(W)
    learner.observe(PIVOT, s_of(20), np.zeros(21), 16, 8, 2, [0, 1, 9], [False] * 3)
    g = learner.at(PIVOT)
    assert g == Gains(d=pytest.approx(one_observation(0.8, 1.0)), n=1.0,
                      d_below=pytest.approx(one_observation(0.6, 1.0)), n_below=1.0)
    assert learner.d.seen == learner.d_below.seen == 1
    assert learner.n.seen == learner.n_below.seen == 0


def test_a_narrow_round_teaches_only_the_pair_below_n0() -> None:
    """4 rows: nothing is revealed above n0; below, ranks 1..2 (rows 2 to 4) predicted 0.2,
    and the path's rank 1 realised 1."""
    learner = GainLearner(W)
    learner.observe(PIVOT, s_of(20), np.zeros(21), 4, 8, 2, [0, 1, 9], [False] * 3)
    assert learner.d.seen == 0 and learner.at(PIVOT).d == 1.0
    assert learner.at(PIVOT).d_below == pytest.approx(one_observation(0.2, 1.0), rel=1e-12)
    # exactly n0 rows: still nothing above
    at_n0 = GainLearner(W)
    at_n0.observe(PIVOT, s_of(20), np.zeros(21), 8, 8, 2, [0, 1, 9], [False] * 3)
    assert at_n0.d.seen == 0 and at_n0.d_below.seen == 1


def test_the_sources_are_split_between_the_drafter_and_the_ngram_gain() -> None:
    """As above, but the candidate ranked 9 is an n-gram node (its 0.1 is S_ng's): above n0 the
    drafter predicted 0.7 and realised nothing (its gain falls to the clamp), the n-gram
    predicted 0.1 and realised 1."""
    s_ng = np.where(np.arange(21) >= 10, 0.1, 0.0)
    learner = GainLearner(W)
    learner.observe(PIVOT, s_of(20), s_ng, 16, 8, 2, [0, 1, 9], [False, False, True])
    g = learner.at(PIVOT)
    assert one_observation(0.7, 0.0) < W.gain_clamp[0] and g.d == W.gain_clamp[0]
    assert g.n == pytest.approx(one_observation(0.1, 1.0), rel=1e-12)
    assert learner.n_below.seen == 0   # no n-gram candidate below n0


def tokens(s: np.ndarray, s_ng: np.ndarray, gains: Gains, width: int) -> float:
    """Eq. (7)'s expected tokens of ``width`` rows, read through :func:`choose`: offered alone,
    free, at rho = 0, its value is its expected tokens."""
    return choose(Valuer(s, s_ng, 8, gains, 0.0, 0.0), [(width, 0.0)], width, W).value


def test_widths_above_n0_use_the_upper_pair_and_widths_below_the_lower() -> None:
    """n0 = 8 (S = 0.7 after its 7 candidates); above it the drafter's gain 2 and the n-gram's 3
    scale what is added, below it 0.5 scales what is given up."""
    s, s_ng = s_of(20), np.where(np.arange(21) >= 10, 0.1, 0.0)
    g = Gains(d=2.0, n=3.0, d_below=0.5, n_below=7.0)
    assert tokens(s, s_ng, g, 8) == pytest.approx(1.7)
    assert tokens(s, s_ng, g, 16) == pytest.approx(1.7 + 2.0 * 0.7 + 3.0 * 0.1)
    assert tokens(s, s_ng, g, 4) == pytest.approx(1.7 - 0.5 * 0.4)
    assert tokens(s, s_ng, Gains(), 16) == pytest.approx(1.0 + 1.5)   # gains 1: 1 + S(n - 1)


# -- the long-run rate ------------------------------------------------------------------------


def test_rho_waits_for_eight_rounds_of_its_band() -> None:
    rate = LongRunRate(W)
    for k in range(1, W.rate_warm_rounds):
        rate.observe(200, 2.0, 0.1)
        assert rate.rate(200) is None and rate.rounds(200) == k
    rate.observe(200, 2.0, 0.1)
    assert rate.rate(200) == pytest.approx(20.0, rel=1e-12)
    # rounds that commit nothing or have no time do not count
    rate.observe(200, 0.0, 0.1)
    rate.observe(200, 1.0, 0.0)
    rate.observe(200, 1.0, math.inf)
    assert rate.rounds(200) == 8 and rate.rate(200) == pytest.approx(20.0)


def test_rho_decays_with_a_half_life_of_64_rounds() -> None:
    """8 rounds at 20 tok/s, then 64 at 10: the early rounds now weigh 1/2, so rho is
    ``(2 G8 / 2 + G64) / (0.1 (G8 / 2 + G64))`` with ``G(n) = (1 - x^n) / (1 - x)``,
    ``x = 2^(-1/64)``."""
    rate = LongRunRate(W)
    for _ in range(8):
        rate.observe(200, 2.0, 0.1)
    for _ in range(64):
        rate.observe(200, 1.0, 0.1)
    x = 0.5 ** (1.0 / 64)
    g8, g64 = (1.0 - x**8) / (1.0 - x), (1.0 - x**64) / (1.0 - x)
    assert rate.rate(200) == pytest.approx((g8 + g64) / (0.1 * (0.5 * g8 + g64)), rel=1e-9)
    assert 10.0 < rate.rate(200) < 11.0   # type: ignore[operator]


def test_rho_is_kept_per_band_of_bit_length() -> None:
    rate = LongRunRate(W)
    for _ in range(8):
        rate.observe(200, 2.0, 0.1)
    for _ in range(8):
        rate.observe(300, 1.0, 0.1)
    assert rate.rate(128) == rate.rate(255) == pytest.approx(20.0)   # 128-255
    assert rate.rate(256) == rate.rate(511) == pytest.approx(10.0)   # 256-511
    assert rate.rate(127) is None and rate.rate(512) is None


# -- the margins of the choice ----------------------------------------------------------------

S4 = np.array([0.0, 0.5, 0.75, 1.0])   # 2 rows expect 1.5 tokens, 4 rows 2


def pick(rho: float | None, p4: float, incumbent: int = 2) -> tuple[int, int, bool]:
    v = Valuer(S4, np.zeros(4), 2, Gains(), 0.0, rho)
    c = choose(v, [(2, 0.010), (4, p4)], incumbent, W)
    return c.width, c.best, c.kept_incumbent


def test_before_rho_an_alternative_needs_a_ratio_four_percent_higher() -> None:
    """Ratios: 2 rows 1.5 / 10 ms = 150 tok/s; 4 rows 2 / p4."""
    assert pick(None, 0.0125) == (4, 4, False)   # 160: 6.7% better, switches
    assert pick(None, 0.0130) == (2, 4, True)    # 153.8: 2.6% better, kept
    assert pick(None, 0.0140) == (2, 2, False)   # 142.9: 2 is the best anyway
    assert pick(None, 0.0140, incumbent=4) == (2, 2, False)   # 5% better than 4 rows: switches
    assert pick(None, 0.0136, incumbent=4) == (4, 2, True)    # 147.1 vs 150: 2% short


def test_after_rho_an_alternative_needs_v_above_by_4_percent_of_the_incumbents_tokens() -> None:
    """rho = 100 tok/s: V(2) = 1.5 - 1.0 = 0.5, V(4) = 2 - 100 p4; the margin is 0.04 x 1.5."""
    assert pick(100.0, 0.0140) == (4, 4, False)   # V 0.60 > 0.56: switches
    assert pick(100.0, 0.0145) == (2, 4, True)    # V 0.55 < 0.56: kept
    # the same prices under the ratio would not even prefer 4 rows (142.9 < 150 tok/s)
    assert pick(None, 0.0140)[1] == 2
    # the margin is the incumbent's: holding 4 (2 tokens, margin 0.08), 2 rows must beat
    # V(4) = 0.55 by 0.08; 0.5 does not, so 4 is kept although it is not the best
    assert pick(100.0, 0.0145, incumbent=4) == (4, 4, False)
    assert pick(100.0, 0.0155, incumbent=4) == (4, 2, True)   # V(4) 0.45: 0.5 short of 0.53
    assert pick(100.0, 0.0165, incumbent=4) == (2, 2, False)  # V(4) 0.35: 0.5 clears 0.43


def test_ties_go_to_the_narrower_width_and_an_unoffered_incumbent_is_not_kept() -> None:
    v = Valuer(np.array([0.0, 0.5, 0.5, 0.5]), np.zeros(4), 2, Gains(), 0.0, None)
    fresh = choose(v, [(2, 0.01), (4, 0.01)], 16, W)      # 16 not offered: no margin to clear
    assert (fresh.width, fresh.best, fresh.kept_incumbent) == (2, 2, False)
    held = choose(v, [(2, 0.01), (4, 0.01)], 4, W)        # a tie does not beat the incumbent
    assert (held.width, held.best, held.kept_incumbent) == (4, 2, True)
