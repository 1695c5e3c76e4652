"""The acceptance model of Eq. (6), the head-based estimate, the guard and the labels (§3.3)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from adaspark.decoding.candidates import CandidateSet, from_block
from adaspark.decoding.drafter.base import Block
from adaspark.decoding.round import RoundOutcome, RoundState
from adaspark.rules.adaspark import acceptance as acc
from adaspark.rules.adaspark.config import load_config
from adaspark.rules.adaspark.features import block_features
from adaspark.rules.adaspark.rule import AdaSparkRule
from adaspark.rules.adaspark.simulator import DrafterProcess, Environment, Simulator, StepCost

CFG = load_config()
A = CFG.acceptance_model



def log_loss(q: list[float], group: list[int], label: int | None) -> float:
    """A labelled parent's log loss as ``learn_round`` defines it (q clipped to [1e-12,
    1 - 1e-12], summed in the group's order)."""
    total = 0.0
    for j in group:
        x = min(max(q[j], 1e-12), 1.0 - 1e-12)
        total += -math.log(x) if j == label else -math.log(1.0 - x)
    return total

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
    for _ in range(400):  # the pick at position 2 (head 0.3) is always the target's pick
        q = model.probabilities(tree, terms, parent).tolist()
        group = list(range(16, 24))
        model.learn_groups(tree, [(group, 24 - 8)], q, terms.coef_of(), terms.u, lh, ls,
                           logr)
    q = model.probabilities(tree, terms, parent)
    assert q[16] > 0.6
    assert -A.intercept_band <= model.b <= A.intercept_band


def test_every_candidate_of_every_accepted_parent_is_labelled_placed_or_not() -> None:
    """The target accepts the pick (candidate 0), then its bonus token 12 is an unplaced
    sibling at position 1: both accepted parents (the anchor and candidate 0) label all eight of
    their candidates, placed or not, and exactly 0 and 12 are labelled accepted."""
    rule = AdaSparkRule(width=3, ngram=False)
    committed = [5, 6, 7]
    rule.begin_request(committed)
    state = RoundState(committed, 0, 64, 4)
    assert rule.wants_block(state)
    plan = rule.plan(state, block())
    assert plan.tree.n_rows == 3   # two candidates placed: the picks at positions 0 and 1
    rc = plan.round
    assert rc is not None and rc.q_head is not None and rc.q_model is not None
    assert plan.cand_of_row == [0, 8]
    path = [0, plan.cand_of_row.index(0) + 1]
    rule.observe(plan, RoundOutcome.of(plan, path, [0, 12], verify_s=0.02, fixed_s=0.01))
    model = rule.model
    assert model is not None
    assert rule.summary.labelled_nodes == 16 and model.seen == 2
    # which candidates each term learned from: the two picks (0, 8), the 14 siblings, the 8
    # candidates below position 0 (depth), all 16 (context: u = 3 / 8192), no n-gram bucket
    labels = model.to_state()["labels"]
    assert labels[acc.A_PICK:acc.A_PICK + 3] == [2, 2, 2]
    assert labels[acc.A_SIB:acc.A_SIB + 4] == [14, 14, 14, 14]
    assert labels[acc.DEPTH] == 8 and labels[acc.CONTEXT] == 16
    assert sum(labels[acc.NEW:]) == 0
    # the labels' values: the guard scored each parent's candidates with y = 1 only for 0 and 12
    keep = 0.5 ** (1.0 / A.guard_half_life)

    def parent_loss(q: np.ndarray, group: range) -> float:
        label = next((j for j in group if j in (0, 12)), None)
        return log_loss(q.tolist(), list(group), label)

    for i, q in ((0, rc.q_model), (1, rc.q_head)):
        want = parent_loss(q, range(0, 8)) * keep + parent_loss(q, range(8, 16))
        assert model.guard[i] == pytest.approx(want, rel=1e-12)
    wrong = parent_loss(rc.q_head, range(0, 8)) * keep + log_loss(
        rc.q_head.tolist(), list(range(8, 16)), None)
    assert model.guard[1] != pytest.approx(wrong, rel=1e-6)   # 12 unlabelled would differ


COPY_PROMPT = [20, 21, 22, 23, 24, 10, 11, 12, 13, 14, 15, 16, 17, 90, 91,
               20, 21, 22, 23, 24, 10, 11, 12, 13]


def scores_of(ngram: bool, raised: int | None = None) -> tuple[np.ndarray, CandidateSet]:
    """The prior model's scores ``s_j`` of every candidate of one round (from its q: ``q_j /
    q_none`` of its parent is ``exp(s_j)``), with coefficient ``raised`` one above its prior.
    The text repeats a passage, so the anchor 13 continues as a copy: 14, 15, 16, 17, ..."""
    rule = AdaSparkRule(width=4, ngram=ngram)
    model = rule.model
    assert model is not None
    if raised is not None:
        st = model.to_state()
        st["w"][raised] += 1.0
        model.load_state(st)
    rule.begin_request(COPY_PROMPT)
    state = RoundState(list(COPY_PROMPT), 0, 64, 2)
    assert rule.wants_block(state)
    blk = Block(tokens=np.array([[14, 40, 41], [30, 15, 42]]),
                probs=np.tile(np.linspace(0.5, 0.01, 3), (2, 1)), confidence=np.full(2, 0.6))
    rc = rule.plan(state, blk).round
    assert rc is not None and rc.q_model is not None and rc.cands is not None
    q, parent = rc.q_model, np.asarray(rc.cands.parent)
    none = {p: 1.0 - q[parent == p].sum() for p in set(parent.tolist())}
    return np.log(q / np.array([none[p] for p in parent.tolist()])), rc.cands


def test_agreed_and_contradicted_terms_add_the_source_logit_and_their_bucket_weight() -> None:
    """Eq. (6): an agreed candidate keeps its drafter score and adds ``max(0, logit p_src)``
    and its agreed bucket's weight; a contradicted one subtracts it and adds its contradiction
    bucket's; an n-gram node scores ``logit p_src`` plus its bucket's. Here the copy source
    scored 5 of 5 on the prompt, so ``p_src = 6 / 7`` and ``logit p_src = ln 6``; the anchor's
    pick 14 and the sibling 15 below it agree with the copy, every other drafter candidate of
    their parents is contradicted by it."""
    plain, _ = scores_of(ngram=False)
    chained, cands = scores_of(ngram=True)
    ln6 = math.log(6.0)
    # 0: pick 14, 1-2: its siblings, 3: the next pick 30, 4: sibling 15, 5: sibling 42
    assert cands.tokens[:6].tolist() == [14, 40, 41, 30, 15, 42]
    assert chained[:6] - plain == pytest.approx([ln6, -ln6, -ln6, -ln6, ln6, -ln6], abs=1e-9)
    # n-gram nodes below the sibling 15: 16, 17, ... as a copy (p 6/7) until the match reaches
    # 16 tokens (copy-long, unscored: p = 1/2, logit 0)
    assert cands.tokens[6:8].tolist() == [16, 17] and cands.parent[6:8].tolist() == [4, 6]
    ev = cands.evidence
    assert chained[6] == pytest.approx(ln6) and chained[7] == pytest.approx(ln6)
    long = [j for j in range(6, len(cands)) if ev[j] == 3]
    assert long and all(abs(chained[j]) < 1e-9 for j in long)

    edges = A.run_edges
    ngram = range(cands.n_drafted, len(cands))
    copy_deep = {j for j in ngram if ev[j] == 2 and cands.run[j] >= 3}
    buckets = {
        acc.AGREED_PICK + acc.bucket(2, 0, edges): ("agreed-pick/copy/r0", {0}),
        acc.AGREED_SIB + acc.bucket(2, 1, edges): ("agreed-sib/copy/r1-2", {4}),
        acc.AGREED_PICK + acc.bucket(2, 1, edges): ("agreed-pick/copy/r1-2", set()),
        acc.CONTRA_PICK + 2: ("contra-pick/copy", {3}),
        acc.CONTRA_SIB + 2: ("contra-sib/copy", {1, 2, 5}),
        acc.NEW + acc.bucket(2, 2, edges): ("new/copy/r1-2", {6}),
        acc.NEW + acc.bucket(2, 3, edges): ("new/copy/r3+", copy_deep),
        acc.NEW + acc.bucket(3, 3, edges): ("new/copy-long/r3+", set(long)),
    }
    assert 7 in copy_deep and 6 not in copy_deep
    for coef, (name, nodes) in buckets.items():
        assert acc.bucket_name(coef) == name
        raised, _ = scores_of(ngram=True, raised=coef)
        moved = np.nonzero(np.abs(raised - chained) > 1e-9)[0].tolist()
        assert set(moved) == nodes, name
        assert raised[moved] - chained[moved] == pytest.approx([1.0] * len(moved), abs=1e-9)


def test_the_guard_forgets_with_a_half_life_of_256_labelled_parents() -> None:
    """After ``k`` more labelled parents an old loss weighs ``2^(-k/256)``; a fitted model that
    starts 2 nats behind and then beats the head by 0.01 per parent takes over at the first
    ``k`` with ``2 x^k < 0.01 (1 - x^k) / (1 - x)``, ``x = 2^(-1/256)``: ``x^k < 0.649``,
    ``k > 256 x 0.6237 = 159.7``, so at 160 (without forgetting it would take 200)."""
    model = acc.AcceptanceModel(A)
    model.score_guard(1.0, 0.0)
    for k in range(1, 513):
        model.score_guard(0.0, 0.0)
        if k in (1, 64, 256, 512):
            assert model.guard[0] == pytest.approx(2.0 ** (-k / 256), rel=1e-9)
    assert model.guard[1] == 0.0 and model.seen == 513
    x = 0.5 ** (1.0 / 256)
    takeover = next(k for k in range(1, 10_000)
                    if 2.0 * x**k < 0.01 * (1.0 - x**k) / (1.0 - x))
    model = acc.AcceptanceModel(A)
    model.score_guard(2.0, 0.0)
    assert not model.prices()
    for k in range(1, takeover + 1):
        model.score_guard(0.30, 0.31)
        assert model.prices() == (k >= takeover), k
    assert takeover == 160


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
    assert log_loss([1.0], [0], None) < 30.0


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
