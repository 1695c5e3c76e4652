"""Proposition 1 on random trees: every prefix of the best-first order is a tree, and it
maximises S over all trees of that size (brute force on small trees)."""

from __future__ import annotations

from itertools import combinations

import numpy as np
import pytest

from adaspark.decoding.tree import best_first_order, path_products, prefix_tree


def random_tree(rng: np.random.Generator, n: int, ties: bool) -> tuple[list[int], list[float]]:
    parents = [-1 if j == 0 or rng.random() < 0.3 else int(rng.integers(0, j)) for j in range(n)]
    q = rng.choice([0.0, 0.5, 1.0], n) if ties else rng.random(n)
    return parents, [float(x) for x in q]


def closed_subsets(parents: list[int], k: int) -> list[tuple[int, ...]]:
    out = []
    for sub in combinations(range(len(parents)), k):
        s = set(sub)
        if all(parents[j] == -1 or parents[j] in s for j in sub):
            out.append(sub)
    return out


@pytest.mark.parametrize("ties", [False, True])
def test_every_prefix_is_a_tree_and_maximises_S(ties: bool) -> None:
    rng = np.random.default_rng(1 if ties else 0)
    for _ in range(150):
        n = int(rng.integers(1, 9))
        parents, q = random_tree(rng, n, ties)
        order, S = best_first_order(parents, q)
        Q = path_products(parents, q)
        assert S[0] == 0.0 and len(S) == n + 1
        for k in range(1, n + 1):
            prefix = set(order[:k].tolist())
            assert all(parents[j] == -1 or parents[j] in prefix for j in prefix), "not a tree"
            best = max(sum(Q[j] for j in sub) for sub in closed_subsets(parents, k))
            assert S[k] == pytest.approx(best, abs=1e-12)
            assert S[k] == pytest.approx(sum(Q[j] for j in prefix), abs=1e-12)


def test_ties_go_to_the_lower_index_so_parents_come_first() -> None:
    # q = 1 everywhere: every Q ties; the order must still list each parent before its children
    parents = [-1, 0, 1, 2, 0, -1, 5]
    order, _ = best_first_order(parents, [1.0] * 7)
    assert order.tolist() == list(range(7))


def test_a_prefix_is_laid_out_depth_first_as_a_tree() -> None:
    rng = np.random.default_rng(3)
    parents, q = random_tree(rng, 12, False)
    order, _ = best_first_order(parents, q)
    tokens = list(range(100, 112))
    for rows in range(1, 14):
        tree, cand_of_row = prefix_tree(7, tokens, parents, order, rows)
        assert tree.n_rows == rows and sorted(cand_of_row) == sorted(order[: rows - 1].tolist())
        for r in range(1, rows):  # depth-first: a row's parent is an earlier row
            assert tree.parents[r] < r
