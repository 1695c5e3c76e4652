"""The width choice (§3.4) and the learned widths (§3.2) on simulated verify costs.

Every run starts from an empty store. Rates are tokens per simulated second over the last
``WINDOW`` requests; arms see the same texts and drafter draws (common random numbers).
"""

from __future__ import annotations

import math
from collections import Counter

import pytest

from adaspark.rules.adaspark.rule import AdaSparkRule
from adaspark.rules.adaspark.simulator import (
    DrafterProcess,
    Environment,
    RisingCost,
    Simulator,
    StepCost,
    TextProcess,
    rate_of,
)

N_REQUESTS = 20
WINDOW = 8
PROMPTS = [300, 900, 2500, 6000]
TOKENS = 300
DRAFTER = DrafterProcess(B=8, K=8, alpha=1.0, depth_decay=0.1)

SHAPES = {
    # flat to 8 rows, then steep steps (the 4-bit kernels): best pinned width 8
    "step": (StepCost(tops=(8, 16, 32, 64), levels=(0.025, 0.037, 0.077, 0.13), slope=0.02),
             (6, 8, 12)),
    # nearly flat to 16 rows, a 48-row class cheaper than the 40-row one (8-bit): best 16
    "non-monotone": (StepCost(tops=(16, 24, 32, 40, 48, 64),
                              levels=(0.026, 0.036, 0.044, 0.047, 0.045, 0.075), slope=0.01),
                     (12, 16, 24)),
    # every row adds time (the routed target; this CPU): best pinned width 6
    "rising": (RisingCost(base=0.012, per_row=0.0016, slope=0.01), (4, 6, 8)),
}


def run(env: Environment, rule: AdaSparkRule, n: int = N_REQUESTS, window: int = WINDOW,
        tokens: int = TOKENS) -> float:
    reps = Simulator(env).run(rule, range(n), PROMPTS, tokens)
    return rate_of(reps[n - window:])


@pytest.mark.parametrize("shape", list(SHAPES))
def test_eq7_ends_within_one_percent_of_the_best_pinned_width(shape: str) -> None:
    cost, pinned = SHAPES[shape]
    env = Environment(cost=cost, drafter=DRAFTER, fixed=0.008, seed=11,
                      text=TextProcess(copy_start=0.003))
    learned = run(env, AdaSparkRule())
    rates = {w: run(env, AdaSparkRule(width=w)) for w in pinned}
    best = max(rates, key=rates.__getitem__)
    assert best not in (pinned[0], pinned[-1]), rates   # the pinned set brackets the best
    assert learned >= 0.99 * rates[best], (learned, rates)


def test_the_long_run_rate_beats_the_per_round_ratio_when_rounds_are_uneven() -> None:
    """Prop. 5 / §3.4 (i): with rounds much better and much worse than their band (a strongly
    bimodal pick share), a large fixed cost D and a cost that rises with every row, pricing time
    at rho buys rows in good rounds that the per-round ratio refuses, and refuses rows in poor
    rounds that the ratio buys.

    Prop. 5 is a claim about the long-run rate, so it is checked over five seeds (five draws of
    texts and drafter rounds, 8 requests of 200 tokens each, the last 6 measured): the
    geometric mean of rho's rate over the ratio's is at least 1.005, and rho is ahead on at
    least 4 of the 5 seeds, so no single seed carries the mean. (Seeds 0-9 measured 1.008 to
    1.020, mean 1.012; one seed's draws move the ratio by about half a percent.)"""
    gains = []
    for seed in range(5):
        env = Environment(cost=RisingCost(base=0.010, per_row=0.0025),
                          drafter=DrafterProcess(B=8, K=8, alpha=0.0, beta=3.0, share_a=0.3,
                                                 share_b=0.3, depth_decay=0.0),
                          fixed=0.03, seed=seed, text=TextProcess(copy_start=0.0))
        rho = run(env, AdaSparkRule(ngram=False), 8, 6, 200)
        ratio = run(env, AdaSparkRule(ngram=False, rate_rule="ratio"), 8, 6, 200)
        gains.append(rho / ratio)
    mean = math.exp(sum(math.log(g) for g in gains) / len(gains))
    assert mean >= 1.005, gains
    assert sum(g > 1.0 for g in gains) >= 4, gains


def test_learned_widths_find_the_step_edge_that_changes_the_choice() -> None:
    """Verify time flat up to 12 rows, then 1.6x: the ladder (2, 4, 8, 16, ...) cannot see the
    edge. The table splits next to the held width and at midpoints until it offers the widths
    just below the edge, and the chooser leaves the ladder's 8 for them; of the widths between 13
    and 15, which cannot win, at most one is measured (with n0 fixed at 8 rows, the paper's
    reading, the split test once finds 13 could clear the margin before the gains above 8 are
    learned; with n0 the narrowest offered width of at least 8, none is)."""
    env = Environment(cost=StepCost(tops=(12, 64), levels=(0.030, 0.048)),
                      drafter=DrafterProcess(B=8, K=8, alpha=1.5, depth_decay=0.05),
                      fixed=0.008, seed=4, text=TextProcess(copy_start=0.0))
    rule = AdaSparkRule(ngram=False)
    reps = Simulator(env).run(rule, range(8), [500], 400)
    assert rule.table is not None
    widths = rule.table.widths()
    assert 12 in widths and 16 in widths and sum(13 <= w <= 15 for w in widths) <= 1
    late = Counter(w for r in reps[4:] for w in r.widths)
    top, count = late.most_common(1)[0]
    assert top in (11, 12) and count > 0.9 * sum(late.values())
    pinned8 = Simulator(env).run(AdaSparkRule(width=8, ngram=False), range(8), [500], 400)
    assert rate_of(reps[4:]) > 1.03 * rate_of(pinned8[4:])


def test_width1_extension_ends_at_plain_decode_when_every_row_costs_a_decode() -> None:
    """Extension: a verify of n rows costs n plain decodes and the drafter is weak, so no tree
    pays for its drafter call; offered width 1, the chooser ends there (no drafter call, D = 0),
    and beats the same scheduler without the offer."""
    t1 = 0.039
    env = Environment(cost=RisingCost(base=0.0, per_row=t1),
                      drafter=DrafterProcess(B=4, K=8, alpha=-2.0), fixed=0.3 * t1, seed=2)
    rule = AdaSparkRule(offer_width1=True)
    reps = Simulator(env).run(rule, range(5), [300], 150, keep_rounds=True)
    late = [w for r in reps[2:] for w in r.widths]
    assert late.count(1) >= 0.98 * len(late)
    assert all(s == "width1" for r in reps[2:] for s in r.round_why)
    assert rule.table is not None and rule.table.plain is not None
    assert 1 not in rule.table.widths() and len(rule.table.widths()) <= 24
    without = Simulator(env).run(AdaSparkRule(), range(5), [300], 150)
    assert rate_of(reps[2:]) > 1.2 * rate_of(without[2:])


def test_width1_is_not_chosen_when_drafting_pays() -> None:
    env = Environment(cost=StepCost(tops=(16, 64), levels=(0.03, 0.06), plain=0.028),
                      drafter=DrafterProcess(B=4, K=8, alpha=1.5), fixed=0.006, seed=2)
    reps = Simulator(env).run(AdaSparkRule(offer_width1=True), range(4), [300], 150)
    late = [w for r in reps[1:] for w in r.widths]
    assert late.count(1) == 0


def test_the_counterfactual_width_prices_ngram_only_candidates_at_zero(tmp_path) -> None:
    """Table 7's "widened": three weak drafter picks, then a strong six-node n-gram chain. With
    the chain Eq. (7) takes 8 rows; with it priced at zero, 2 rows."""
    import numpy as np

    from adaspark.decoding.candidates import NGRAM, PICK, CandidateSet
    from adaspark.rules.adaspark.chooser import (
        Gains,
        Valuer,
        choose,
        counts_as_ngram,
        ngram_order,
    )
    from adaspark.rules.adaspark.context import RoundContext

    rule = AdaSparkRule(log_dir=str(tmp_path / "rounds"))
    cands = CandidateSet()
    cands.tokens = list(range(9))
    cands.parent = [-1, 0, 1, 0, 3, 4, 5, 6, 7]
    cands.kind = [PICK] * 3 + [NGRAM] * 6
    cands.agreed = [False] * 9
    q = np.array([0.3, 0.2, 0.2] + [0.95] * 6)
    offered = [(2, 0.010), (4, 0.012), (8, 0.016)]
    rc = RoundContext(context=500, drafted=True, why="choice", width=0, cands=cands, q=q,
                      n0=2, gains=Gains(), predicted_fixed=0.005, rho=None, offered=offered,
                      incumbent_before=8)
    _, s, s_ng = ngram_order(cands, q, counts_as_ngram(cands, rule.agreed_counts))
    with_ngram = choose(Valuer(s, s_ng, 2, Gains(), 0.005, None), offered, 8,
                        rule.cfg.width_choice)
    assert with_ngram.width == 8
    assert rule._width_without_ngram(rc) == 2
    cands.kind = [PICK] * 9  # no n-gram-only candidate: nothing to compare
    assert rule._width_without_ngram(rc) is None
