"""Tree validation, order and acceptance on hand-built inputs (§2.2, §3.1)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from adaspark.decoding.tree import (
    TreeError,
    accepted_path,
    best_first_order,
    chain_tree,
    depth_first,
    make_tree,
    prefix_tree,
)


@pytest.mark.parametrize(
    ("tokens", "parents", "max_rows", "message"),
    [
        ([], [], 64, "empty tree"),
        (list(range(65)), [-1, *range(64)], 64, "wider than the widest verify"),
        (list(range(64)), [-1, *range(63)], 63, "wider than the widest verify"),
        ([1, 2, 3], [-1, 0, 7], 64, "orphan node at row 2"),
        ([1, 2, 3], [-1, -1, 0], 64, "orphan node at row 1"),
        ([1, 2, 3], [-1, 2, 1], 64, "cycle"),
        ([1, 2, 3], [-1, 1, 0], 64, "cycle"),
        ([1, 2, 3, 4], [-1, 2, 0, 1], 64, "before its parent"),
        ([1, 2], [0, 0], 64, "row 0 must be the anchor"),
        ([1, 2], [-1], 64, "parent links"),
    ],
)
def test_malformed_trees_are_refused(tokens, parents, max_rows, message):
    with pytest.raises(TreeError, match=message):
        make_tree(tokens, parents, max_rows=max_rows)


def test_widest_tree_is_accepted():
    assert make_tree(list(range(63)), [-1, *range(62)], max_rows=63).n_rows == 63


def test_accepted_path_walks_matching_children():
    #        0
    #      /   \
    #     1(5)  2(6)
    #     |      \
    #     3(7)   4(8)
    t = make_tree([9, 5, 6, 7, 8], [-1, 0, 0, 1, 2])
    assert accepted_path(t, [6, 0, 8, 0, 3]) == [0, 2, 4]
    assert accepted_path(t, [5, 7, 0, 1, 0]) == [0, 1, 3]
    assert accepted_path(t, [4, 0, 0, 0, 0]) == [0]


def test_depth_first_layout_keeps_children_order():
    ids = [10, 11, 12, 13, 14]
    parents = [-1, -1, 10, 11, 10]
    assert [ids[i] for i in depth_first(ids, parents)] == [10, 12, 14, 11, 13]


def test_best_first_order_ties_go_to_lower_index():
    parents = [-1, -1, 0, 0]
    order, S = best_first_order(parents, [0.5, 0.5, 1.0, 0.2])
    # Q = [.5, .5, .5, .1]; the tie between 0, 1 and 2 goes by index; 2 follows its parent 0
    assert order.tolist() == [0, 1, 2, 3]
    assert np.allclose(S, [0, 0.5, 1.0, 1.5, 1.6])


def test_every_prefix_is_a_tree_and_maximal_bruteforce():
    rng = np.random.default_rng(3)
    for _ in range(40):
        n = int(rng.integers(2, 8))
        parents = [-1] + [int(rng.integers(-1, j)) for j in range(1, n)]
        q = rng.random(n)
        if rng.random() < 0.3:
            q[rng.integers(0, n)] = q[0]  # make ties
        order, S = best_first_order(parents, q)
        Q = np.ones(n)
        for j in range(n):
            Q[j] = q[j] * (1 if parents[j] == -1 else Q[parents[j]])
        for k in range(1, n + 1):
            chosen = set(order[:k].tolist())
            assert all(parents[c] == -1 or parents[c] in chosen for c in chosen)
            best = max(
                sum(Q[list(sub)])
                for sub in itertools.combinations(range(n), k)
                if all(parents[c] == -1 or parents[c] in sub for c in sub)
            )
            assert S[k] == pytest.approx(best)


def test_prefix_tree_maps_rows_to_candidates():
    tokens = [100, 101, 102, 103]
    parents = [-1, -1, 0, 2]
    order, _ = best_first_order(parents, [0.9, 0.05, 0.9, 0.9])
    tree, rows = prefix_tree(7, tokens, parents, order, 4)
    assert tree.tokens == (7, 100, 102, 103)
    assert tree.parents == (-1, 0, 1, 2)
    assert rows == [0, 2, 3]
    assert chain_tree(7, [100, 102, 103]) == tree
