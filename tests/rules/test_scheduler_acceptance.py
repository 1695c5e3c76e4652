"""The acceptance model of Eq. (6), the head-based estimate, the guard and the labels (§3.3)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from adaspark.decoding.candidates import from_block
from adaspark.decoding.drafter.base import Block
from adaspark.rules.adaspark import acceptance as acc
from adaspark.rules.adaspark.config import load_config
from adaspark.rules.adaspark.features import block_features
from adaspark.rules.adaspark.rule import AdaSparkRule
from adaspark.rules.adaspark.simulator import DrafterProcess, Environment, Simulator, StepCost
from adaspark.rules.base import RoundOutcome, RoundState

CFG = load_config()
A = CFG.acceptance_model


def block() -> Block:
    rng = np.random.default_rng(0)
    probs = np.sort(rng.random((4, 8)), axis=1)[:, ::-1] * 0.2
    return Block(tokens=np.arange(32).reshape(4, 8), probs=probs,
                 confidence=np.array([0.9, 0.6, 0.3, 0.05]))


def test_the_prior_prices_a_pick_at_its_head_and_each_parent_sums_below_one() -> None:
    tree = from_block(block())
    feats = block_features(block(), A.logit_eps, A.log_r_floor)
    model = acc.AcceptanceModel(A)
    terms = acc.RoundTerms(tree, feats, 0, A, 8192.0)
    q = model.probabilities(tree, terms, np.asarray(tree.parent))
    assert q[[0, 8, 16, 24]] == pytest.approx([0.9, 0.6, 0.3, 0.05], abs=1e-9)
    for i in range(4):
        group = q[i * 8:(i + 1) * 8]
        assert group.sum() < 1.0
        # siblings split (1 - h)/2 in proportion to their share of the siblings' total
        r = feats.logr[i, 1:]
        assert group[1:] == pytest.approx((1 - group[0]) / 2 * np.exp(r), rel=1e-9)


def test_learning_moves_q_toward_the_labels() -> None:
    tree = from_block(block())
    feats = block_features(block(), A.logit_eps, A.log_r_floor)
    model = acc.AcceptanceModel(A)
    terms = acc.RoundTerms(tree, feats, 0, A, 8192.0)
    parent = np.asarray(tree.parent)
    lh, ls, logr = feats.lh.tolist(), feats.ls.tolist(), feats.logr.tolist()
    for _ in range(400):  # the pick at position 3 (head 0.05) is always the target's pick
        q = model.probabilities(tree, terms, parent).tolist()
        group = list(range(16, 24))
        model.learn_group(tree, group, 24 - 8, [q[j] for j in group], terms.coef_of(),
                          terms.u, lh, ls, logr)
    q = model.probabilities(tree, terms, parent)
    assert q[16] > 0.6
    assert -A.intercept_band <= model.b <= A.intercept_band


def test_every_candidate_of_every_accepted_parent_is_labelled_placed_or_not() -> None:
    """The bonus token matches an unplaced sibling: it is labelled accepted, and the head
    offset and the guard see every candidate of the accepted parents."""
    rule = AdaSparkRule(width=3, ngram=False)
    committed = [5, 6, 7]
    rule.begin_request(committed)
    state = RoundState(committed, 0, 64, 4)
    assert rule.wants_block(state)
    plan = rule.plan(state, block())
    assert plan.tree.n_rows == 3   # two candidates placed
    rc = plan.round
    placed = set(plan.cand_of_row)
    # the anchor's candidates are 0..7; accept the pick (0) then its child position's sibling 12
    assert 0 in placed and 12 not in placed
    path = [0, plan.cand_of_row.index(0) + 1]
    rule.observe(plan, RoundOutcome.of(plan, path, [0, 12], verify_s=0.02, fixed_s=0.01))
    s = rule.summary
    assert s.labelled_nodes == 16            # 8 candidates of the anchor, 8 of the pick
    assert rule.model is not None and rule.model.seen == 2
    assert rc is not None and rule.head.b != 0.0


def miscalibrated_env() -> Environment:
    """§3.3: the head is trained for another acceptance rule (compressed, over-confident, noisy),
    while acceptance follows the pick's share."""
    return Environment(cost=StepCost(tops=(16, 64), levels=(0.03, 0.06)),
                       drafter=DrafterProcess(B=4, K=8, alpha=0.3, beta=1.5, head_scale=0.5,
                                              head_bias=0.8, head_noise=0.8),
                       fixed=0.008, seed=7)


def test_the_fitted_model_beats_the_miscalibrated_head_and_the_guard_switches() -> None:
    rule = AdaSparkRule(width=16)
    reps = Simulator(miscalibrated_env()).run(rule, range(10), [400], 300)
    s = [r.summary for r in reps]
    first = s[0]
    assert first["rounds_priced_fitted"] < first["tree_rounds"]   # starts on the head
    late = s[4:]
    assert all(x["logloss_fitted"] < x["logloss_head"] for x in late)
    fitted = sum(x["logloss_fitted"] * x["labelled_nodes"] for x in late)
    head = sum(x["logloss_head"] * x["labelled_nodes"] for x in late)
    assert fitted < 0.97 * head
    assert sum(x["rounds_priced_fitted"] for x in s[-3:]) >= 0.95 * sum(
        x["tree_rounds"] for x in s[-3:])
    assert rule.model is not None and rule.model.prices()
    # it learned what the environment does: the share matters, the head less than its prior
    w = rule.model.w
    assert w[acc.A_PICK + 2] > 0.1 and w[acc.A_PICK + 1] < 1.0


def test_a_calibrated_head_is_not_displaced_by_noise() -> None:
    """Control: with the head exactly calibrated for picks the guard has nothing to fix there,
    and the fitted model must not be worse than the head-based estimate."""
    env = Environment(cost=StepCost(tops=(16, 64), levels=(0.03, 0.06)),
                      drafter=DrafterProcess(B=4, K=8, alpha=0.3, beta=1.5), fixed=0.008,
                      seed=7)
    reps = Simulator(env).run(AdaSparkRule(width=16), range(4), [400], 300)
    for r in reps[1:]:
        assert r.summary["logloss_fitted"] <= r.summary["logloss_head"] * 1.01


def test_shift_keeps_the_endpoints_and_node_loss_is_finite() -> None:
    assert acc.shift(np.array([0.0, 1.0]), 1.5).tolist() == [0.0, 1.0]
    assert float(acc.shift(0.5, math.log(3.0))) == pytest.approx(0.75)
    assert acc.group_loss([1.0], [0], None) < 30.0


def test_every_16th_tree_round_the_last_row_explores_the_least_labelled_ngram_bucket() -> None:
    prompt = [10, 11, 12, 13, 14, 15, 16, 17, 90, 91, 10, 11, 12, 13]  # a copy continues: 14, 15
    blk = Block(tokens=np.arange(500, 532).reshape(4, 8),
                probs=np.tile(np.linspace(0.6, 0.01, 8), (4, 1)),
                confidence=np.array([0.95, 0.9, 0.9, 0.9]))
    rows = []
    for rounds_before in (14, 15):
        rule = AdaSparkRule(width=5)
        rule.begin_request(prompt)
        rule.exploration_clock = rounds_before
        state = RoundState(list(prompt), 0, 64, 4)
        assert rule.wants_block(state)
        plan = rule.plan(state, blk)
        tokens_under_anchor = [plan.tree.tokens[r] for r in range(1, plan.tree.n_rows)
                               if plan.tree.parents[r] == 0]
        rows.append((plan.round.explored, 14 in tokens_under_anchor, plan.tree.n_rows))
    assert rows[0] == (False, False, 5)   # the 15th tree round is best-first
    assert rows[1] == (True, True, 5)     # the 16th: the n-gram frontier node takes the last row
