"""Sampling (``adaspark.decoding.sampling``): llama.cpp's transforms on known logits, the keyed
random stream, and lossless tree verification by seeded chi-square tests that a wrong verifier
fails. Pure: synthetic target distributions over a small vocabulary, no engine."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable

import numpy as np
import pytest
from scipy import stats

from adaspark.decoding.sampling import (
    SamplingParams,
    draw,
    keyed_uniform,
    sample_plain,
    sample_token,
    transformed_probs,
    verify_sampled,
)
from adaspark.decoding.tree import Tree

# ---------------------------------------------------------------------------------------------
# The transforms

def P(temperature: float, top_k: int, top_p: float, min_p: float) -> SamplingParams:
    """Sampling parameters, seed 0."""
    return SamplingParams(temperature, top_k, top_p, min_p, seed=0)


GREEDY = P(0.0, 40, 0.95, 0.05)


def test_each_transform_keeps_what_llama_cpp_keeps() -> None:
    logits = np.log(np.array([0.05, 0.40, 0.30, 0.15, 0.10]))
    plain = P(1.0, 0, 1.0, 0.0)
    assert transformed_probs(logits, plain) == pytest.approx([0.05, 0.40, 0.30, 0.15, 0.10])
    top2 = transformed_probs(logits, P(1.0, 2, 1.0, 0.0))
    assert top2 == pytest.approx([0, 0.4 / 0.7, 0.3 / 0.7, 0, 0])
    # top-p 0.7: 0.40 + 0.30 reaches it, so two tokens stay; 0.71 needs the third
    p70 = transformed_probs(logits, P(1.0, 0, 0.7, 0.0))
    assert np.count_nonzero(p70) == 2
    p71 = transformed_probs(logits, P(1.0, 0, 0.71, 0.0))
    assert np.count_nonzero(p71) == 3
    # min-p 0.3: at least 0.3 * 0.40 = 0.12, so 0.40, 0.30 and 0.15
    mp = transformed_probs(logits, P(1.0, 0, 1.0, 0.3))
    assert mp == pytest.approx(np.array([0, 0.40, 0.30, 0.15, 0]) / 0.85)
    # temperature after the cuts: 0.5 squares the kept probabilities before normalising
    t = transformed_probs(logits, P(0.5, 2, 1.0, 0.0))
    assert t == pytest.approx([0, 0.16 / 0.25, 0.09 / 0.25, 0, 0])
    # greedy: a point mass on the argmax
    assert transformed_probs(logits, GREEDY) == pytest.approx([0, 1, 0, 0, 0])


def test_the_keyed_stream_is_uniform_and_keyed_by_position_only() -> None:
    u = np.array([keyed_uniform(7, i) for i in range(50_000)])
    assert u.min() >= 0.0 and u.max() < 1.0
    assert stats.kstest(u, "uniform").pvalue > 1e-3
    assert keyed_uniform(7, 123) == keyed_uniform(7, 123) != keyed_uniform(8, 123)
    across = np.array([keyed_uniform(s, 5) for s in range(50_000)])
    assert stats.kstest(across, "uniform").pvalue > 1e-3
    assert abs(np.corrcoef(u[:-1], u[1:])[0, 1]) < 0.02


def test_draw_inverts_the_cumulative_distribution() -> None:
    p = np.array([0.2, 0.0, 0.5, 0.3])
    assert [draw(p, u) for u in (0.0, 0.19, 0.2, 0.69, 0.7, 0.999)] == [0, 0, 2, 2, 3, 3]


# ---------------------------------------------------------------------------------------------
# Lossless verification

V = 6
#: The synthetic target: the next token's distribution given the last token (far from a point
#: mass, every token possible).
TARGET = np.random.default_rng(11).dirichlet(np.full(V, 0.8), size=V)
ANCHOR = 0
N_SEEDS = 100_000
ALPHA = 1e-3


def picks_after(tok: int, n: int) -> list[int]:
    """A deterministic drafter: the target's n most likely tokens after ``tok`` (ties by id)."""
    return [int(t) for t in np.argsort(-TARGET[tok], kind="stable")[:n]]


def chain_tree(anchor: int) -> Tree:
    toks, parents = [anchor], [-1]
    for _ in range(3):
        toks.append(picks_after(toks[-1], 1)[0])
        parents.append(len(toks) - 2)
    return Tree(tuple(toks), tuple(parents))


def siblings_tree(anchor: int) -> Tree:
    """Figure 1's shape: the picks as a spine, each pick's siblings as leaves."""
    toks, parents = [anchor], [-1]
    spine = 0
    for _ in range(2):
        cands = picks_after(toks[spine], 3)
        first = len(toks)
        for c in cands:
            toks.append(c)
            parents.append(spine)
        spine = first
    return Tree(tuple(toks), tuple(parents))


def ngram_tree(anchor: int) -> Tree:
    """Two picks as a chain and, beside them, a two-token n-gram chain from the anchor that starts
    with the third most likely token."""
    a, b = picks_after(anchor, 1)[0], None
    b = picks_after(a, 1)[0]
    g1 = picks_after(anchor, 3)[2]
    g2 = picks_after(g1, 2)[1]
    return Tree((anchor, a, b, g1, g2), (-1, 0, 1, 0, 3))


def repeated_tree(anchor: int) -> Tree:
    """A candidate repeated: the same token twice under the anchor, and the same grandchild under
    two different children."""
    x, y = picks_after(anchor, 2)
    z = picks_after(x, 1)[0]
    return Tree((anchor, x, x, y, z, z), (-1, 0, 0, 0, 1, 3))


SHAPES: dict[str, Callable[[int], Tree]] = {"chain": chain_tree, "siblings": siblings_tree,
                                            "ngram": ngram_tree, "repeated": repeated_tree}


def wrong_verify(tree: Tree, row_probs, seed: int, first_position: int):
    """A wrong verifier: when the target's draw matches no child, it accepts the first sibling
    after the pick anyway (as if a rejected pick handed the row to its sibling)."""
    kids = tree.children()
    path = [0]
    while True:
        r = path[-1]
        y = draw(row_probs(r), keyed_uniform(seed, first_position + len(path) - 1))
        nxt = [c for c in kids[r] if tree.tokens[c] == y]
        if not nxt and len(kids[r]) > 1:
            nxt = [kids[r][1]]
        if not nxt:
            return path, [int(tree.tokens[c]) for c in path[1:]] + [y]
        path.append(nxt[0])


def first_two(shape: Callable[[int], Tree], verify, seed: int) -> tuple[int, int]:
    """The first two tokens a request emits, round after round, from the anchor."""
    text = [ANCHOR]
    while len(text) < 3:
        tree = shape(text[-1])
        _, new = verify(tree, lambda r, t=tree: TARGET[t.tokens[r]], seed, len(text))
        text.extend(new)
    return text[1], text[2]


def chi_square_p(counts: Counter, expected: dict) -> float:
    keys = sorted(expected)
    obs = np.array([counts.get(k, 0) for k in keys], dtype=float)
    exp = np.array([expected[k] for k in keys]) * obs.sum()
    assert sum(counts.values()) == obs.sum(), "a draw outside the target's support"
    return float(stats.chisquare(obs, exp).pvalue)


EXPECTED_ONE = {a: TARGET[ANCHOR][a] for a in range(V)}
EXPECTED_TWO = {(a, b): TARGET[ANCHOR][a] * TARGET[a][b] for a in range(V) for b in range(V)}


@pytest.mark.parametrize("name", list(SHAPES))
def test_a_sampled_tree_verify_emits_the_targets_distribution(name: str) -> None:
    pairs = [first_two(SHAPES[name], verify_sampled, s) for s in range(N_SEEDS)]
    assert chi_square_p(Counter(p[0] for p in pairs), EXPECTED_ONE) > ALPHA
    assert chi_square_p(Counter(pairs), EXPECTED_TWO) > ALPHA


def test_a_wrong_verifier_fails_the_same_test() -> None:
    pairs = [first_two(siblings_tree, wrong_verify, s) for s in range(N_SEEDS)]
    assert chi_square_p(Counter(p[0] for p in pairs), EXPECTED_ONE) < 1e-9


@pytest.mark.parametrize("name", list(SHAPES))
def test_every_tree_emits_plain_samplings_text_for_the_same_seed(name: str) -> None:
    """With draws keyed by position, a tree's text is plain sampling's text, seed by seed."""
    for seed in range(300):
        plain = sample_plain(lambda text: TARGET[text[-1]], [ANCHOR], 12, seed)
        text = [ANCHOR]
        while len(text) < 13:
            tree = SHAPES[name](text[-1])
            _, new = verify_sampled(tree, lambda r, t=tree: TARGET[t.tokens[r]], seed,
                                    len(text))
            text.extend(new)
        assert text[1:13] == plain, seed


def test_the_target_is_far_from_a_point_mass() -> None:
    entropy = -sum(p * math.log(p) for p in TARGET[ANCHOR] if p > 0)
    assert entropy > 0.8


def test_sample_token_is_the_draw_from_the_transformed_distribution() -> None:
    rng = np.random.default_rng(5)
    for _ in range(200):
        logits = rng.normal(size=300).astype(np.float32)
        params = SamplingParams(temperature=float(rng.uniform(0.3, 1.5)),
                                top_k=int(rng.choice([0, 5, 40])),
                                top_p=float(rng.choice([1.0, 0.9])),
                                min_p=float(rng.choice([0.0, 0.05])), seed=int(rng.integers(9)))
        pos = int(rng.integers(1000))
        want = draw(transformed_probs(logits, params), keyed_uniform(params.seed, pos))
        assert sample_token(logits, params, pos) == want
    assert sample_token(np.array([0.1, 2.0, 1.0]), GREEDY, 3) == 1
