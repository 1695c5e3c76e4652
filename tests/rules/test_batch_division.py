"""A verify step shared by several requests (:mod:`adaspark.rules.adaspark.batch`): the division
of rows against brute force, the knee law's known answers (narrower past the knee as the batch
grows), the context term, the row budget, and the law's fit recovering a known law."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from adaspark.rules.adaspark.batch import BatchCostLaw, divide_rows

GAINS = [0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2]  # a request's 2nd, 3rd, ... rows
KNEE = BatchCostLaw(t0=0.010, slope=0.002, knee=8)  # rows free up to 8, then 2 ms a row


def _brute(gains, caps, contexts, law, rho=None, max_rows=None):
    """The best division by enumeration: the highest tokens per second, or sum E - rho t."""
    best = None
    for rows in itertools.product(*(range(1, c + 1) for c in caps)):
        if max_rows is not None and sum(rows) > max_rows:
            continue
        tokens = len(rows) + sum(sum(g[:r - 1]) for g, r in zip(gains, rows, strict=True))
        t = law.time(rows, contexts)
        value = tokens / t if rho is None else tokens - rho * t
        if best is None or value > best[0] + 1e-12:
            best = (value, rows)
    return best


@pytest.mark.parametrize("n,expected", [(1, (8,)), (2, (4, 4)), (4, (2, 2, 2, 2)),
                                        (8, (1,) * 8)])
def test_the_division_narrows_past_the_knee_as_the_batch_grows(n, expected):
    d = divide_rows([GAINS] * n, [9] * n, [100] * n, KNEE)
    assert d.rows == expected  # the knee's 8 rows shared; past it no row pays for 2 ms
    assert d.seconds == pytest.approx(0.010)


def test_without_a_knee_every_row_that_pays_is_taken():
    free = BatchCostLaw(t0=0.010, slope=0.002, knee=1000)
    assert divide_rows([GAINS] * 4, [9] * 4, [100] * 4, free).rows == (9, 9, 9, 9)


def test_a_long_context_gets_rows_last():
    law = BatchCostLaw(t0=0.010, slope=0.0, knee=0, per_context=2e-6)
    d = divide_rows([GAINS, GAINS], [9, 9], [100, 8000], law)
    assert d.rows[0] > d.rows[1]  # a row at 8,000 tokens costs 16 ms of attention


def test_the_row_budget_holds():
    free = BatchCostLaw(t0=0.010, slope=0.0, knee=0)
    d = divide_rows([GAINS] * 8, [64] * 8, [100] * 8, free, max_rows=20)
    assert sum(d.rows) == 20 and min(d.rows) >= 1


@pytest.mark.parametrize("seed", range(40))
def test_the_division_is_the_best_by_brute_force(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 4))
    gains = [sorted(rng.uniform(0.0, 1.0, 5).tolist(), reverse=True) for _ in range(n)]
    caps = rng.integers(1, 6, n).tolist()
    contexts = rng.integers(10, 4000, n).tolist()
    law = BatchCostLaw(t0=float(rng.uniform(0.005, 0.02)), slope=float(rng.uniform(0, 0.01)),
                       knee=int(rng.integers(1, 10)), per_context=float(rng.uniform(0, 1e-6)))
    budget = int(rng.integers(n, 12)) if seed % 3 == 0 else None
    best_ratio, _ = _brute(gains, caps, contexts, law, max_rows=budget)
    d = divide_rows(gains, caps, contexts, law, max_rows=budget)
    assert d.tokens_per_s == pytest.approx(best_ratio, rel=1e-9)
    rho = float(rng.uniform(10, 400))
    best_value, _ = _brute(gains, caps, contexts, law, rho=rho, max_rows=budget)
    at = divide_rows(gains, caps, contexts, law, rho=rho, max_rows=budget)
    assert at.tokens - rho * at.seconds == pytest.approx(best_value, abs=1e-9)


def test_the_fit_recovers_a_known_law():
    rng = np.random.default_rng(7)
    truth = BatchCostLaw(t0=0.012, slope=0.0015, knee=12, per_context=3e-7)
    rows, contexts, seconds = [], [], []
    for _ in range(200):
        n = int(rng.integers(1, 6))
        r = rng.integers(1, 9, n).tolist()
        c = rng.integers(50, 3000, n).tolist()
        rows.append(r)
        contexts.append(c)
        seconds.append(truth.time(r, c) * float(np.exp(rng.normal(0, 0.01))))
    fit = BatchCostLaw.fit(rows, contexts, seconds)
    assert fit.knee == pytest.approx(12, abs=1)
    assert fit.t0 == pytest.approx(truth.t0, rel=0.1)
    assert fit.slope == pytest.approx(truth.slope, rel=0.15)
    assert fit.per_context == pytest.approx(truth.per_context, rel=0.15)


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="must not increase"):
        divide_rows([[0.2, 0.5]], [3], [10], KNEE)
    with pytest.raises(ValueError, match="at least 1 row"):
        divide_rows([GAINS], [0], [10], KNEE)
    with pytest.raises(ValueError, match="at least 2 rows"):
        divide_rows([GAINS, GAINS], [9, 9], [10, 10], KNEE, max_rows=1)
    with pytest.raises(ValueError, match="at least 3 recorded steps"):
        BatchCostLaw.fit([[1]], [[10]], [0.01])


def test_the_online_chooser_learns_the_knee_and_then_narrows_as_the_batch_grows():
    """Steps timed by the known knee law (with 2% noise) at random rows: the chooser probes
    before its first fit, then recovers the law and divides as the known answers say, at its
    long-run rate (tokens per second of the steps it saw)."""
    from adaspark.rules.adaspark.batch import BatchChoiceOptions, BatchChooser

    rng = np.random.default_rng(0)
    chooser = BatchChooser(BatchChoiceOptions(min_steps=24, refit_every=8, window=256,
                                              half_life_steps=32.0))
    assert chooser.divide([GAINS] * 2, [9, 9], [100, 100]) == (1, 1)  # a probe: anchors
    for _ in range(64):
        n = int(rng.integers(1, 5))
        rows = [int(r) for r in rng.integers(1, 10, size=n)]
        contexts = [100] * n
        t = KNEE.time(rows, contexts) * float(rng.normal(1.0, 0.02))
        chooser.observe(rows, contexts, t, tokens=int(sum(rows)) // 2 + n)
    law = chooser.law
    assert law is not None and abs(law.knee - KNEE.knee) <= 1
    assert law.slope == pytest.approx(KNEE.slope, rel=0.25)
    assert chooser.predict([4, 4], [100, 100]) == pytest.approx(0.010, rel=0.1)
    wide = chooser.divide([GAINS] * 1, [9], [100])
    narrow = chooser.divide([GAINS] * 8, [9] * 8, [100] * 8)
    assert wide is not None and narrow is not None
    # one request takes the knee's free rows; eight are past it at their anchors, where a row
    # must pay rho * slope (rho near 400 tokens/s here: only the best two gains pay)
    assert sum(wide) >= KNEE.knee - 1
    assert max(narrow) <= 3 < max(wide)


def test_the_chooser_probes_its_rungs_in_turn_then_one_step_in_probe_every():
    """Before the first fit every division is a probe: each request's best ``rung`` rows, the
    rungs in turn (0: the rules' own choice, None); after it, one division in ``probe_every``,
    the gap doubling after a probe whose time the law predicted and back after one it missed;
    a request given its anchor alone does not draft until the next probe."""
    from adaspark.rules.adaspark.batch import BatchChoiceOptions, BatchChooser

    chooser = BatchChooser(BatchChoiceOptions(min_steps=4, refit_every=1, probe_rows=(1, 3, 0),
                                              probe_every=5))
    caps, ctx = [9, 2], [100, 100]
    got = [chooser.divide([GAINS] * 2, caps, ctx) for _ in range(4)]
    assert got == [(1, 1), (3, 2), None, (1, 1)]
    for rows in ([1, 1], [3, 2], [6, 6], [9, 9]):
        chooser.observe(rows, ctx, KNEE.time(rows, ctx), tokens=4)
    assert chooser.law is not None
    # divisions 5 to 9: the 4th probe (division 4) set the next at 4 + 5
    later = [chooser.divide([GAINS] * 2, caps, ctx, keys=[0, 1]) for _ in range(5)]
    assert all(d is not None for d in later[:4]) and later[4] == (3, 2)
    chooser.observe([3, 2], ctx, chooser.law.time([3, 2], ctx), tokens=4)  # as said: gap 10
    probes = [k for k in range(10, 25)
              if chooser.divide([GAINS] * 2, caps, ctx, keys=[0, 1]) is None]
    assert probes == [19]
    chooser.observe([9, 9], ctx, 10 * chooser.law.time([9, 9], ctx), tokens=4)  # a miss: 5
    assert [k for k in range(25, 36)
            if chooser.divide([GAINS] * 2, caps, ctx, keys=[0, 1]) == (1, 1)] == [29]
    # a request whose rows do not pay (worthless gains) gets its anchor alone and then skips
    # its block until the division before the next probe
    chooser.divide([[1e-6] * 8, GAINS], caps, ctx, keys=[0, 1])
    assert not chooser.drafts(0) and chooser.drafts(1)
    quiet = BatchChooser(BatchChoiceOptions(probe_rows=()))  # no probes: nothing before a fit
    assert quiet.divide([GAINS] * 2, caps, ctx) is None
