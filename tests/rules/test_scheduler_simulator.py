"""The simulator is deterministic and seeded, and its drafter has the probabilities it claims."""

from __future__ import annotations

import numpy as np

from adaspark.decoding.tree import chain_tree
from adaspark.rules.adaspark.rule import AdaSparkRule
from adaspark.rules.adaspark.simulator import DrafterProcess, Environment, Simulator, StepCost

ENV = Environment(cost=StepCost(tops=(8, 64), levels=(0.02, 0.04)),
                  drafter=DrafterProcess(B=4, K=8), seed=9)


def test_same_seed_same_run_other_seed_other_run() -> None:
    a = Simulator(ENV).run(AdaSparkRule(), range(2), [300], 150)
    b = Simulator(ENV).run(AdaSparkRule(), range(2), [300], 150)
    assert [r.widths for r in a] == [r.widths for r in b]
    assert [r.seconds for r in a] == [r.seconds for r in b]
    other = Environment(cost=ENV.cost, drafter=ENV.drafter, seed=10)
    c = Simulator(other).run(AdaSparkRule(), range(2), [300], 150)
    assert [r.seconds for r in a] != [r.seconds for r in c]


def test_the_drafter_accepts_with_its_known_probabilities() -> None:
    """Over many blocks, a pick at depth 0 is the target's token with the frequency of its
    known q, and a sibling with its own."""
    sim = Simulator(ENV)
    w = sim.world(0, 100, 6000)
    hits = np.zeros((8,))
    expect = np.zeros((8,))
    for L in range(100, 6000):
        blk, q = sim.block(w, L, 4)
        expect += q[0]
        hits += blk.tokens[0] == w.text[L]
    assert np.allclose(hits / 5900, expect / 5900, atol=0.02)


def test_verify_is_greedy_acceptance_against_the_text() -> None:
    sim = Simulator(ENV)
    w = sim.world(0, 50, 20)
    L = 50
    good = chain_tree(int(w.text[L - 1]), [int(t) for t in w.text[L:L + 3]])
    path, new = sim.verify(w, L, good)
    assert path == [0, 1, 2, 3] and new == w.text[L:L + 4].tolist()
    bad = chain_tree(int(w.text[L - 1]), [-5, int(w.text[L + 1])])
    path, new = sim.verify(w, L, bad)
    assert path == [0] and new == [int(w.text[L])]
