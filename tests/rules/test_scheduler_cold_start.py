"""The cold start's two settings (``cost_model.cold_start``, issue 12): the paper's ladder
measures every ladder width; ``bounded`` measures a width only if its optimistic rate could beat
the best priced width. Known answers on the simulator's costs."""

from __future__ import annotations

from collections import Counter

import pytest

from adaspark.rules.adaspark.chooser import bounded_measurement, priced_value
from adaspark.rules.adaspark.config import load_config
from adaspark.rules.adaspark.rule import AdaSparkRule
from adaspark.rules.adaspark.simulator import (
    DrafterProcess,
    Environment,
    RisingCost,
    Simulator,
    StepCost,
    rate_of,
)
from adaspark.rules.adaspark.width_table import WidthTable

T1 = 0.039  # one row's verify on this CPU (HARNESS), seconds


def measured_widths(rule: AdaSparkRule) -> list[int]:
    assert rule.table is not None
    return [k.hi for k in rule.table.classes if k.measured > 0]


def run(env: Environment, cold_start: str, **kw) -> tuple[AdaSparkRule, list, Counter]:
    rule = AdaSparkRule(constants={"cost_model": {"cold_start": cold_start}}, **kw)
    reps = Simulator(env).run(rule, range(4), [300], 200, keep_rounds=True)
    return rule, reps, Counter(w for r in reps for w in r.round_why)


def test_the_optimistic_value_beats_the_best_only_when_it_could() -> None:
    """5 tokens in D + floor seconds against a best value: the ratio before rho, Eq. (7)'s
    tokens - rho time after."""
    ask = bounded_measurement(best=10.0, tokens_at=lambda w: 5.0, d_fixed=0.1, rho=None)
    assert ask(16, 0.3) is True      # 5 / 0.4 = 12.5 > 10
    assert ask(16, 0.5) is False     # 5 / 0.6 = 8.3
    with_rho = bounded_measurement(best=1.0, tokens_at=lambda w: 5.0, d_fixed=0.1, rho=10.0)
    assert with_rho(16, 0.2) is True   # 5 - 10 * 0.3 = 2 > 1
    assert with_rho(16, 0.4) is False  # 5 - 10 * 0.5 = 0
    assert priced_value(2.0, 0.5, None) == 4.0 and priced_value(2.0, 0.5, 2.0) == 1.0


def test_the_time_floor_is_the_narrower_widths_measured_time() -> None:
    cfg = load_config("adaspark").cost_model
    table = WidthTable(cfg, 64)
    phi = table.basis(300)
    k2, k4 = table.classes[:2]
    for t in (0.08, 0.09, 0.085):
        k2.observe(300, t, phi, 1.0)        # priced: its lowest time until the law is fitted
    k4.observe(300, 0.20, phi, 1.0)         # one measurement: its lowest so far
    own = dict(table.class_prices(phi))
    assert table.time_floor(0, own, None) == pytest.approx(0.08)
    assert table.time_floor(1, own, None) == pytest.approx(0.20)
    assert table.time_floor(2, own, None) == pytest.approx(0.20)


def test_on_a_cost_linear_in_rows_with_a_weak_drafter_bounded_stops_at_a_few_rows() -> None:
    """Every row costs a decode (T(n) = 0.039 n), the drafter is weak (a pick is accepted about
    one time in ten), B = 4 positions, no n-gram fill: a tree accepts at most 4 candidates, so
    a width's optimistic rate is at most 5 tokens in D + T(n / 2). Once 2 rows are priced at
    about 1.1 tokens in 0.088 s (12.5 tok/s), 32 rows (5 tokens in at least D + T(16) = 0.634 s:
    7.9 tok/s) cannot beat it, nor can anything wider: bounded never measures past 16 rows. The
    ladder measures 32 too (and the widest verify's reach)."""
    env = Environment(cost=RisingCost(base=0.0, per_row=T1),
                      drafter=DrafterProcess(B=4, K=8, alpha=-2.0), fixed=0.01, seed=3)
    ladder, lreps, _ = run(env, "ladder", ngram=False)
    bounded, breps, bwhy = run(env, "bounded", ngram=False)
    assert max(measured_widths(ladder)) >= 32
    assert max(measured_widths(bounded)) <= 16
    assert bwhy["cold-start"] < Counter(w for r in lreps for w in r.round_why)["cold-start"]
    assert rate_of(breps) > rate_of(lreps)


def test_on_a_flat_cost_bounded_measures_the_whole_ladder() -> None:
    """Every width costs the same: a wider tree's optimistic rate always beats a narrower
    width's expected rate at the same time, so bounded measures every ladder width, as the
    ladder does, and makes the same choices."""
    env = Environment(cost=StepCost(tops=(64,), levels=(0.03,)), drafter=DrafterProcess(B=8, K=8),
                      fixed=0.01, seed=3)
    ladder, lreps, _ = run(env, "ladder")
    bounded, breps, _ = run(env, "bounded")
    assert measured_widths(bounded) == measured_widths(ladder) == [2, 4, 8, 16, 32, 64]
    assert [r.widths for r in breps] == [r.widths for r in lreps]


def test_the_width1_extension_with_bounded_measures_few_drafted_rounds() -> None:
    """adaspark-w1 where a drafted round cannot pay (a verify of n rows costs n decodes, the
    drafter is weak, D = 60 ms): plain decode is priced first (1 token in 0.039 s, 25.6 tok/s).
    Bounded drafts only while a drafted round still finds a width worth measuring; 32 rows
    would need more than 18 accepted tokens in at least D + T(16) = 0.68 s to beat plain decode,
    more than the round's tree reaches, so it is never measured, and the arm spends at most half
    the ladder's drafted rounds before it stays at plain decode."""
    env = Environment(cost=RisingCost(base=0.0, per_row=T1),
                      drafter=DrafterProcess(B=4, K=8, alpha=-2.0), fixed=0.06, seed=3)
    ladder, lreps, lwhy = run(env, "ladder", offer_width1=True)
    rule, breps, bwhy = run(env, "bounded", offer_width1=True)
    assert max(measured_widths(ladder)) >= 32 and lwhy["cold-start"] >= 15
    assert max(measured_widths(rule)) <= 16
    assert bwhy["cold-start"] + bwhy["choice"] <= lwhy["cold-start"] / 2
    assert rate_of(breps) > rate_of(lreps)
