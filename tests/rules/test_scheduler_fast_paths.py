"""The scheduler's fast paths (issue 12, "Scheduler host time") against the plain definitions
they replace, on synthetic inputs with known answers. The whole-rule check is
``test_scheduler_replay.py``."""

from __future__ import annotations

import math

import numpy as np
import pytest

from adaspark.decoding.candidates import from_block
from adaspark.decoding.drafter.base import Block
from adaspark.decoding.tree import TreeError, checked_q, order_by_products, path_products
from adaspark.rules.adaspark import acceptance as acc
from adaspark.rules.adaspark.chooser import Gains, Valuer, choose, counts_as_ngram
from adaspark.rules.adaspark.config import load_config
from adaspark.rules.adaspark.features import block_features
from adaspark.rules.adaspark.ngram import bump_follower, common_suffix

CFG = load_config("adaspark", None)


def block(B: int = 4, K: int = 3, seed: int = 0) -> Block:
    rng = np.random.default_rng(seed)
    probs = np.sort(rng.random((B, K)), axis=1)[:, ::-1] * 0.3
    toks = np.arange(B * K, dtype=np.int64).reshape(B, K) + 100
    return Block(tokens=toks, probs=probs, confidence=rng.random(B))


def with_ngram_nodes() -> tuple:
    cands = from_block(block())
    a = cands.add_ngram(7, -1, 0, 2, 0, 0.9)        # below the anchor
    b = cands.add_ngram(8, a, 1, 2, 1, 0.8)          # below it
    cands.add_ngram(9, 3, 2, 3, 0, 0.7)              # below the pick at position 1
    cands.agreed[4] = True                           # a sibling an n-gram chain agreed with
    return cands, a, b


def test_the_blocks_path_products_are_the_generic_ones_exactly() -> None:
    cands, a, b = with_ngram_nodes()
    q = np.random.default_rng(1).random(len(cands))
    fast = cands.path_products(q)
    assert fast.tolist() == path_products(cands.parent, q).tolist()
    K = cands.K
    assert fast[2 * K + 1] == q[2 * K + 1] * (q[K] * q[0])   # a sibling at position 2
    assert fast[b] == q[b] * q[a]


def test_the_ngram_mask_is_is_ngram_source_of_every_candidate() -> None:
    cands, _, _ = with_ngram_nodes()
    for agreed in (True, False):
        want = [cands.is_ngram_source(j, agreed) for j in range(len(cands))]
        assert counts_as_ngram(cands, agreed).tolist() == want
    assert counts_as_ngram(cands, True).sum() == 4 and counts_as_ngram(cands, False).sum() == 3


def test_order_by_products_sorts_by_Q_ties_to_the_lower_index() -> None:
    order, S = order_by_products(np.array([0.2, 0.5, 0.2, 0.5, 0.1]))
    assert order.tolist() == [1, 3, 0, 2, 4]
    assert S.tolist() == pytest.approx([0.0, 0.5, 1.0, 1.2, 1.4, 1.5])
    with pytest.raises(TreeError, match=r"lie in \[0, 1\]"):
        checked_q([0.5, 1.5])


@pytest.mark.parametrize(("a", "b", "limit", "want"), [
    ([1, 2, 3, 4], [9, 2, 3, 4], 4, 3),
    ([1, 2, 3, 4], [1, 2, 3, 4], 4, 4),
    ([1, 2, 3, 4], [1, 2, 3, 4], 2, 2),
    ([1, 2, 3, 4], [1, 2, 3, 5], 4, 0),
    ([5, 1, 2, 3, 4, 6, 7], [0, 2, 3, 4, 6, 7], 6, 5),
])
def test_common_suffix_is_the_token_by_token_count(a, b, limit, want) -> None:
    assert common_suffix(np.asarray(a), len(a), np.asarray(b), len(b), limit) == want


def test_common_suffix_matches_a_token_by_token_walk_on_random_texts() -> None:
    rng = np.random.default_rng(2)
    for _ in range(300):
        a = rng.integers(0, 3, 40)
        b = rng.integers(0, 3, 40)
        ea, eb = int(rng.integers(1, 41)), int(rng.integers(1, 41))
        limit = int(rng.integers(0, min(ea, eb) + 1))
        n = 0
        while n < limit and a[ea - 1 - n] == b[eb - 1 - n]:
            n += 1
        assert common_suffix(a, ea, b, eb, limit) == n


def test_bump_follower_keeps_the_sorted_order_a_full_sort_gives() -> None:
    rng = np.random.default_rng(3)
    toks, counts, n = np.zeros(4, dtype=np.int64), np.zeros(4, dtype=np.int64), 0
    plain: list[list[int]] = []
    for tok in rng.integers(0, 7, 400).tolist():
        n = bump_follower(toks, counts, n, tok, 4)
        for slot in plain:   # the definition: count, keep a new one while fewer than 4, sort
            if slot[0] == tok:
                slot[1] += 1
                break
        else:
            if len(plain) < 4:
                plain.append([tok, 1])
        plain.sort(key=lambda s: (-s[1], s[0]))
        assert [[int(t), int(c)] for t, c in zip(toks[:n], counts[:n], strict=True)] == plain
    two_t, two_c = np.array([1, 3, 0, 0]), np.array([1, 1, 0, 0])
    assert bump_follower(two_t, two_c, 2, 3, 4) == 2
    assert two_t[:2].tolist() == [3, 1] and two_c[:2].tolist() == [2, 1]


def test_learn_round_sums_each_candidates_log_loss() -> None:
    """The anchor's four candidates, the bonus token 2 on candidate 1: the head-based loss is
    each candidate's log loss, q clipped to [1e-12, 1 - 1e-12]."""
    blk = Block(tokens=np.array([[1, 2, 3, 4]]), probs=np.array([[0.4, 0.3, 0.2, 0.1]]),
                confidence=np.array([0.5]))
    cands = from_block(blk)
    feats = block_features(blk, CFG.acceptance_model.logit_eps, CFG.acceptance_model.log_r_floor)
    q = [0.5, 0.25, 0.0, 1.0]
    n, loss_m, loss_h = acc.learn_round(cands, feats, [], 2, q, q, None, None, set(), None,
                                        None, False)
    want = (-math.log(0.5) - math.log(0.25) - math.log(1.0 - 1e-12)
            - math.log(1.0 - (1.0 - 1e-12)))
    assert (n, loss_m) == (4, 0.0)
    assert loss_h == pytest.approx(want, rel=1e-12)


def test_the_head_offset_steps_in_order() -> None:
    head = acc.HeadEstimate(CFG.acceptance_model)
    head.observe([0.5, 2.0], [True, True])   # the second is outside [0, 1]: skipped
    rate = CFG.acceptance_model.head_offset_adagrad_rate
    b1 = rate * 0.5 / (1.0 + 0.5)            # g = 0.5 - 1, sum g^2 = 0.25
    assert head.b == pytest.approx(b1) and head.g2 == pytest.approx(0.25)
    head.observe([0.5], [False])
    qs = 0.5 * math.exp(b1) / (0.5 * math.exp(b1) + 0.5)
    g2 = 0.25 + qs * qs
    assert head.b == pytest.approx(b1 - rate * qs / (1.0 + math.sqrt(g2)))


def test_choose_takes_the_narrower_of_equal_values_and_keeps_the_incumbent() -> None:
    S = np.array([0.0, 0.9, 1.7, 2.4, 3.0, 3.5, 3.9, 4.2, 4.4])
    valuer = Valuer(S, np.zeros_like(S), 4, Gains(), 0.0, None)
    # tokens 1 + S(n-1): width 3 -> 2.7, width 5 -> 4.0; equal ratios at these prices
    offered = [(3, 2.7), (5, 4.0), (9, 5.4)]
    assert choose(valuer, offered, 0, CFG.width_choice).width == 3
    kept = choose(valuer, offered, 9, CFG.width_choice)
    assert kept.width == 9 and kept.kept_incumbent
