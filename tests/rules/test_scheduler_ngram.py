"""The n-gram index over the request's own text and its chains (§3.3)."""

from __future__ import annotations

import numpy as np
import pytest

from adaspark.decoding.candidates import NGRAM, from_block
from adaspark.decoding.drafter.base import Block
from adaspark.rules.adaspark.config import load_config
from adaspark.rules.adaspark.ngram import NgramIndex, add_chains

CFG = load_config()


def index(tokens: list[int]) -> NgramIndex:
    ix = NgramIndex(CFG.ngram_fill, CFG.acceptance_model.copy_long_match,
                    CFG.acceptance_model.follower_count_edge)
    ix.extend(tokens)
    return ix


def test_a_copy_continues_an_earlier_passage_else_the_top_follower() -> None:
    text = [1, 2, 3, 4, 5, 6, 7, 8, 9, 50, 51, 52, 1, 2, 3, 4, 5]
    ix = index(text)
    p = ix.step(text)
    assert p is not None and p.token == 6 and p.matched == 5 and p.count == 0
    nxt = ix.copy_on(p)
    assert nxt is not None and nxt.token == 7 and nxt.matched == 6
    # no 4-token match: the most frequent follower of the last 3 tokens
    ix2 = index([7, 8, 9, 1, 0, 7, 8, 9, 2, 0, 7, 8, 9, 2, 0])
    p2 = ix2.step([5, 7, 8, 9])
    assert p2 is not None and p2.token == 2 and p2.count == 2 and p2.matched == 0
    assert index([1, 2]).step([1, 2]) is None


def test_precision_is_scored_before_each_token_is_indexed() -> None:
    """Each token is scored by the proposal the index made before it was indexed. In
    1 2 3 9 | 1 2 3 9 | 1 2 3 8 the first 9 has no proposal (scored after indexing, (1, 2, 3)
    -> 9 would already count); the second 9 is the follower of (1, 2, 3) seen once (evidence n1),
    right; from the third 1 on, the earlier passage continues (a copy of 4, 5, 6, 7 tokens):
    1, 2, 3 right, then 9 proposed where 8 came."""
    ix = index([])
    ix.extend([1, 2, 3, 9, 1, 2, 3, 9, 1, 2, 3, 8])
    # per evidence class (n1, n2+, copy, copy-long): [proposed, right]
    assert ix.scored == [[1, 1], [0, 0], [4, 3], [0, 0]]
    # p_src = (right + 1) / (proposed + 2)
    assert ix.precision() == pytest.approx([2 / 3, 1 / 2, 4 / 6, 1 / 2], rel=1e-12)
    # the prompt is scored too by default; unscored text leaves every class at the prior
    quiet = index([])
    quiet.extend([1, 2, 3, 9, 1, 2, 3, 9, 1, 2, 3, 8], score=False)
    assert quiet.scored == [[0, 0]] * 4 and quiet.precision() == [0.5] * 4


def block_of(tokens: list[list[int]]) -> Block:
    t = np.asarray(tokens, dtype=np.int64)
    probs = np.tile(np.linspace(0.5, 0.01, t.shape[1]), (t.shape[0], 1))
    return Block(tokens=t, probs=probs, confidence=np.full(t.shape[0], 0.6))


def test_chains_mark_agreed_and_contradicted_and_add_new_nodes() -> None:
    text = [10, 11, 12, 13, 14, 15, 16, 17, 90, 91, 10, 11, 12, 13]
    ix = index(text)
    # anchor = 13; the earlier passage continues 14, 15, 16, 17
    blk = block_of([[14, 40, 41], [30, 15, 42]])   # pick 14 agrees; at position 1 sibling 15
    tree = from_block(blk)
    added = add_chains(ix, tree, 32, 63, (1, 3))
    assert tree.agreed[0] and tree.contra[1] >= 0 and tree.contra[2] >= 0  # 14 agreed
    # the pick's chain: 15 is a sibling at position 1 -> agreed; the pick 30 contradicted
    assert tree.agreed[4] and tree.contra[3] >= 0
    # then new n-gram nodes continue under the sibling 15: 16, 17, ...
    new = [j for j in range(len(tree)) if tree.kind[j] == NGRAM]
    assert added == len(new) >= 2
    assert tree.tokens[new[0]] == 16 and tree.parent[new[0]] == 4
    assert tree.tokens[new[1]] == 17 and tree.parent[new[1]] == new[0]
    assert tree.run[new[0]] >= 2  # n-gram tokens above it on its path: 14 and 15
    assert all(tree.parent[j] < j for j in range(len(tree)))


def test_chains_respect_the_depth_limit_and_the_node_budget() -> None:
    text = list(range(100, 160)) + list(range(100, 104))
    ix = index(text)
    tree = from_block(block_of([[1, 2], [3, 4]]))
    add_chains(ix, tree, 32, 63, (1, 3))
    depth = {-1: 0}
    for j, p in enumerate(tree.parent):
        depth[j] = depth[p] + 1
    assert max(depth.values()) <= 32
    tree2 = from_block(block_of([[1, 2], [3, 4]]))
    assert add_chains(ix, tree2, 32, 5, (1, 3)) == 5


def test_a_long_text_grows_the_tables_and_keeps_every_context() -> None:
    """Past the tables' first 256 slots (and 512 cells) the index grows; a context seen once,
    early, still proposes its follower, and the copy finds the latest long passage."""
    rng = np.random.default_rng(4)
    text = rng.integers(0, 50_000, 3000).tolist()
    ix = index(text)
    assert len(ix.tail) == 3000
    p = ix.step(text[10:13])               # no 4-token match; the follower of text[10:13]
    assert p is not None and p.token == text[13] and p.matched == 0
    again = text[100:140]
    q = ix.step(text[:-1] + again)         # the passage at 100 is the only one: copied on
    assert q is not None and q.token == text[140] and q.matched >= 40


def test_token_ids_past_the_index_limit_are_refused() -> None:
    from adaspark.rules.adaspark.ngram import TOKEN_LIMIT

    ix = index([1, 2, 3])
    with pytest.raises(ValueError, match="token ids 0 to"):
        ix.extend([4, TOKEN_LIMIT])
    assert ix.tail.tolist() == [1, 2, 3]   # nothing of a refused call is indexed


def test_a_context_longer_than_the_index_keys_is_refused_by_the_config() -> None:
    from adaspark.rules.adaspark.config import load_config

    with pytest.raises(ValueError, match=r"copy_min_match=7 is not allowed: .* from 1 to 6"):
        load_config("adaspark", {"ngram_fill": {"copy_min_match": 7}})
    assert load_config("adaspark", {"ngram_fill": {"follower_context": 6}}) is not None
