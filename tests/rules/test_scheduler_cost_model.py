"""The online verify-cost model (§3.2): Prop. 3, Prop. 2's pricing, the width table's cold start,
reach, split rule and bound, the refit, the level and the clock (raw and residual)."""

from __future__ import annotations

from itertools import pairwise

import numpy as np
import pytest

from adaspark.rules.adaspark.config import load_config
from adaspark.rules.adaspark.cost_law import ContextLaw, context_basis
from adaspark.rules.adaspark.simulator import StepCost
from adaspark.rules.adaspark.width_table import WidthTable, envelope, price_at

CFG = load_config().cost_model
UNIT = CFG.context_basis_unit


def truth(c: int) -> float:
    return 0.030 + 2.5e-6 * c  # 30 ms plus 2.5 ms per 1,000 tokens of context


def test_prop3_quantile_law_recovers_the_noiseless_time_and_least_squares_does_not() -> None:
    """One-sided interference with P(no noise) = 0.5 > tau: the fitted law is within 2% of the
    machine's time at every context; a least-squares fit on the same samples is not."""
    rng = np.random.default_rng(0)
    law = ContextLaw(CFG)
    X, Y = [], []
    for _ in range(30):  # requests, each at its own context
        c0 = int(rng.choice([200, 700, 1500, 3000, 6000, 12000]))
        for r in range(60):
            c = c0 + 4 * r
            y = truth(c) * (1.0 + (rng.random() > 0.5) * rng.exponential(0.3))
            phi = context_basis(c, UNIT)
            law.observe(c, y, phi)
            X.append(phi)
            Y.append(y)
        law.refit()
    theta, *_ = np.linalg.lstsq(np.asarray(X), np.asarray(Y), rcond=None)
    for c in (300, 1000, 3000, 8000, 12000):
        phi = context_basis(c, UNIT)
        p = law.predict(phi)
        assert p is not None and abs(p / truth(c) - 1.0) < 0.02, (c, p, truth(c))
        assert abs(float(np.dot(theta, phi)) / truth(c) - 1.0) > 0.02


def test_the_law_never_falls_with_context_and_is_clamped() -> None:
    law = ContextLaw(CFG)
    for c, t in [(500, 0.05), (520, 0.04), (510, 0.045), (8000, 0.03), (8100, 0.031)]:
        law.observe(c, t, context_basis(c, UNIT))
    prices = [law.predict(context_basis(c, UNIT)) for c in (100, 1000, 4000, 16000, 60000)]
    assert all(b >= a - 1e-15 for a, b in pairwise(prices))
    assert max(prices) <= 3.0 * 0.03 + 1e-12  # clamp: 3x the lowest time


def test_refit_fixes_a_slope_the_online_pass_missed() -> None:
    """A law trained online at short contexts, then measured three times at a long one (a band
    too small to hold a sample out): the refit judges it on all of them and adopts the slope."""
    law = ContextLaw(CFG)
    for r in range(40):
        c = 450 + r
        law.observe(c, truth(c), context_basis(c, UNIT))
    for c in (8440, 8446, 8450):
        law.observe(c, truth(c), context_basis(c, UNIT))
    before = law.predict(context_basis(8444, UNIT))
    assert before is not None and before < 0.97 * truth(8444)
    assert law.refit()
    after = law.predict(context_basis(8444, UNIT))
    assert after is not None and abs(after / truth(8444) - 1.0) < 0.03
    assert abs(law.predict(context_basis(460, UNIT)) / truth(460) - 1.0) < 0.03
    train, held, judged = law.split_bank()
    assert len(held) == 4 and len(judged) == 7   # newest quarter of a full band; all of 3
    assert len(train) == 12 + 3


def test_an_adopted_refit_keeps_the_class_scale_and_floor() -> None:
    """The clamp of Eq. (4) rests on the class's lowest observed time: a refit trained on the
    bank (whose oldest, fastest samples have left it) replaces the weights, not the scale (the
    class's first samples' minimum) nor the floor (its lowest time ever, in that unit)."""
    law = ContextLaw(CFG)
    law.observe(440, 0.020, context_basis(440, UNIT))  # fast early samples: the scale is 0.020
    law.observe(441, 0.021, context_basis(441, UNIT))
    law.observe(442, 0.022, context_basis(442, UNIT))
    for r in range(40):                                  # the band's bank keeps the newest 16
        c = 450 + r
        law.observe(c, truth(c), context_basis(c, UNIT))
    for c in (8440, 8446, 8450):
        law.observe(c, truth(c), context_basis(c, UNIT))
    assert law.scale == pytest.approx(0.020) and law.floor == pytest.approx(1.0)
    assert law.refit()
    assert law.scale == pytest.approx(0.020) and law.floor == pytest.approx(1.0)
    assert min(t for v in law.bank.values() for _, t in v) > 0.031  # none of the fast ones
    _, hi = CFG.law_clamp
    p = law.predict(context_basis(100_000, UNIT))
    assert p is not None and p <= hi * 0.020 + 1e-12  # the clamp still reads 3 x 0.020 s


def measure_all(table: WidthTable, cost: StepCost, contexts=(500, 520, 540)) -> None:
    for c in contexts:
        phi = table.basis(c)
        table.observe_fixed(c, 0.01, phi)
        for k in list(table.classes):
            table.observe_verify(k.hi, c, cost(k.hi, c), phi)


def test_prop2_a_cheaper_wider_class_prices_the_narrower_widths() -> None:
    """The 48-versus-40 inversion: a 48-row verify costs less than a 40-row one, so every width
    from 33 to 48 is priced at 48's price, and 40 is never offered."""
    cost = StepCost(tops=(8, 16, 24, 32, 40, 48, 56, 64),
                    levels=(0.024, 0.026, 0.036, 0.044, 0.0475, 0.0455, 0.07, 0.078))
    table = WidthTable(CFG, 64, mode="classes")
    measure_all(table, cost)
    prices = table.class_prices(table.basis(530))
    own = dict(prices)
    assert own[40] is not None and own[48] is not None and own[48] < own[40]
    for w in (33, 36, 40, 41, 48):
        assert price_at(w, prices) == pytest.approx(own[48])
    offered = [w for w, _ in envelope(prices)]
    assert 40 not in offered and 48 in offered and 32 in offered


def test_cold_start_measures_narrowest_first_and_short_trees_teach_the_reach() -> None:
    table = WidthTable(CFG, 64)
    seen = []
    while (w := table.measurement_width()) is not None:
        seen.append(w)
        if w == 64:  # the drafter never builds more than 33 rows: the reach is learned
            table.short_measurement(64, 33)
            continue
        table.observe_verify(w, 500, 0.02 + 0.0001 * w, table.basis(500))
    assert seen[:3] == [2, 2, 2]
    assert seen == [2] * 3 + [4] * 3 + [8] * 3 + [16] * 3 + [32] * 3 + [64] + [33] * 3
    assert table.widths()[-1] == 33 and table.top == 33
    # a narrower class that keeps coming out short becomes unreachable after 3 such rounds
    t2 = WidthTable(CFG, 64)
    for w in (2, 4, 8):
        for _ in range(3):
            t2.observe_verify(w, 500, 0.02, t2.basis(500))
    for _ in range(3):
        assert t2.measurement_width() == 16
        t2.short_measurement(16, 12)
    assert t2.measurement_width() == 32


def test_split_rule_steep_next_to_the_held_width_else_midpoint() -> None:
    cost = StepCost(tops=(8, 64), levels=(0.02, 0.04))   # steep between 8 and 16
    table = WidthTable(CFG, 64)
    measure_all(table, cost)
    prices = table.class_prices(table.basis(520))
    wider = lambda w, p: w > 8  # noqa: E731  (only rows above the held width could win)
    for _ in range(CFG.split_hold_rounds - 1):
        table.hold(8)
        assert table.split(wider, prices) is None  # not held long enough
    table.hold(8)
    assert table.split(wider, prices) == 9     # steep: next to the held width, above it
    # held at the top of a steep class: split next to it, below
    below = WidthTable(CFG, 64)
    measure_all(below, StepCost(tops=(8, 64), levels=(0.02, 0.04)))
    for _ in range(CFG.split_hold_rounds):
        below.hold(16)
    assert below.split(lambda w, p: 8 < w < 16, below.class_prices(below.basis(520))) == 15
    # a flat neighbour is split at its midpoint
    flat = WidthTable(CFG, 64)
    measure_all(flat, StepCost(tops=(64,), levels=(0.02,)))
    p2 = flat.class_prices(flat.basis(520))
    for _ in range(CFG.split_hold_rounds):
        flat.hold(16)
    assert flat.split(lambda w, p: True, p2) == 12          # interval (8, 16]
    # nothing inside could win: no split
    none = WidthTable(CFG, 64)
    measure_all(none, cost)
    for _ in range(CFG.split_hold_rounds):
        none.hold(8)
    assert none.split(lambda w, p: False, none.class_prices(none.basis(520))) is None


def test_at_most_24_widths_are_learned() -> None:
    table = WidthTable(CFG, 64)
    cost = StepCost(tops=(64,), levels=(0.02,))
    measure_all(table, cost)
    splits = 0
    for _ in range(400):
        table.hold(8)
        m = table.split(lambda w, p: True, table.class_prices(table.basis(520)))
        if m is not None:
            splits += 1
            for c in (500, 520, 540):
                table.observe_verify(m, c, cost(m, c), table.basis(c))
    assert splits == 24 - 6
    assert len(table.widths()) == CFG.most_widths_learned == 24
    table.hold(8)
    assert table.split(lambda w, p: True, table.class_prices(table.basis(520))) is None


def test_level_follows_a_slower_machine_and_the_clock_carries_stale_classes() -> None:
    table = WidthTable(CFG, 64)
    cost = StepCost(tops=(8, 64), levels=(0.02, 0.04))
    for c in range(500, 530):
        measure_all(table, cost, (c,))
    phi = table.basis(530)
    p8, p16 = dict(table.class_prices(phi))[8], dict(table.class_prices(phi))[16]
    # the machine doubles its times: the running class (8) measures it, the clock (D) too
    for c in range(530, 540):
        table.observe_fixed(c, 0.02, table.basis(c))
        table.observe_verify(8, c, 2.0 * cost(8, c), table.basis(c))
    new = dict(table.class_prices(table.basis(540)))
    assert new[8] == pytest.approx(2.0 * p8, rel=0.03)     # level: within the window
    assert new[16] == pytest.approx(2.0 * p16, rel=0.03)   # clock: D now over D then


def clock_table(clock: str) -> WidthTable:
    return WidthTable(load_config("adaspark", {"cost_model": {"clock": clock}}).cost_model, 64)


def test_the_clock_before_ds_law_exists_raw_reads_seconds_residual_reads_one() -> None:
    """Eq. (5)'s ``D_now / D_k``: ``raw`` reads D's minimum over the last ``level_window``
    rounds in seconds; ``residual`` reads D against D's own context law, 1 until it has one."""
    raw, residual = clock_table("raw"), clock_table("residual")
    for t in (raw, residual):
        assert t.clock.reading() == 1.0
        for c, d in ((500, 0.012), (501, 0.010)):   # fewer than samples_before_law (3)
            t.observe_fixed(c, d, t.basis(c))
    assert raw.clock.reading() == 0.010 and residual.clock.reading() == 1.0
    for c, d in enumerate((0.011, 0.013, 0.014, 0.015, 0.016, 0.017, 0.018, 0.019), 502):
        raw.observe_fixed(c, d, raw.basis(c))
    assert raw.clock.reading() == 0.011   # 0.012 and 0.010 left the window of 8
    raw.observe_fixed(510, 0.009, raw.basis(510))
    assert raw.clock.reading() == 0.009   # the newest is the lowest


def test_a_slower_machine_scales_a_stale_price_by_the_clock_in_both_readings() -> None:
    """Width 2 measured at 50 ms while D was 10 ms; then D doubles (every round slower) and
    width 2 does not run. Raw: the price doubles exactly (x 20 / 10 ms). Residual: D over
    its law went from about 1 to about 2, so the price about doubles too."""
    prices = {}
    for clock in ("raw", "residual"):
        t = clock_table(clock)
        for c in (500, 501, 502):
            t.observe_fixed(c, 0.010, t.basis(c))
        then = t.clock.reading()
        for c in (503, 504, 505):
            t.observe_verify(2, c, 0.05, t.basis(c))
        before = dict(t.class_prices(t.basis(505)))[2]
        for c in range(506, 514):
            t.observe_fixed(c, 0.020, t.basis(c))
        after = dict(t.class_prices(t.basis(514)))[2]
        # the class's own price at 50 ms measured (the law's fit times the level: within 2%)
        assert before == pytest.approx(0.05, rel=0.02)
        prices[clock] = (then, t.clock.reading(), before, after)
    then, now, before, after = prices["raw"]
    assert (then, now) == pytest.approx((0.010, 0.020), rel=1e-9)
    assert after == pytest.approx(2.0 * before, rel=1e-9)
    then, now, before, after = prices["residual"]
    assert then == pytest.approx(1.0, abs=0.02) and now == pytest.approx(2.0, rel=0.05)
    assert after == pytest.approx(before * now / then, rel=1e-9)
    assert after == pytest.approx(0.10, rel=0.05)


def test_residual_does_not_charge_context_growth_to_the_clock() -> None:
    """D = 10 ms x (1 + c / 2000) grows 2.4x from 500 to 4,000 tokens only because the
    context grows (each class's own law already prices that). Once D's law has learned it
    (30 requests at 500, 2,000, 4,000 and 8,000 tokens, each refitted), ``residual`` reads
    about 1 at every context (within the learned law's error); ``raw`` reads D itself, the
    window's minimum, and would charge every stale class the growth a second time."""
    def d_at(c: int) -> float:
        return 0.01 * (1.0 + c / 2000.0)

    readings: dict[str, list[float]] = {}
    for clock in ("raw", "residual"):
        t = clock_table(clock)
        for r in range(30):
            for c in (500 + r, 2000 + r, 4000 + r, 8000 + r):
                t.observe_fixed(c, d_at(c), t.basis(c))
            t.refit()
        readings[clock] = []
        for c0 in (500, 2000, 4000):
            for c in range(c0 + 50, c0 + 58):
                t.observe_fixed(c, d_at(c), t.basis(c))
            readings[clock].append(t.clock.reading())
    assert readings["raw"] == pytest.approx([d_at(550), d_at(2050), d_at(4050)], rel=1e-12)
    assert readings["residual"] == pytest.approx([1.0, 1.0, 1.0], abs=0.1)
    assert readings["raw"][2] / readings["raw"][0] == pytest.approx(2.37, abs=0.01)
