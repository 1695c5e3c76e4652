"""One candidate set (§2.2), its rows counted by source once (Table 7), the AdaSpark rule's
extracted functions: the width-1 switch (§3.4), the summary's counts, the store's state."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from adaspark.decoding.candidates import NGRAM, SIBLING, from_block
from adaspark.decoding.drafter.base import Block
from adaspark.decoding.round import (
    RoundCounts,
    RoundOutcome,
    RoundPlan,
    count_by_source,
    positions_tested,
)
from adaspark.decoding.tree import make_tree
from adaspark.rules.adaspark.chooser import width1_switch
from adaspark.rules.adaspark.config import load_config
from adaspark.rules.adaspark.records import RequestSummary, add_counts
from adaspark.rules.adaspark.store import learned_state, load_learned


def block() -> Block:
    return Block(tokens=np.array([[10, 11, 12], [20, 21, 22]]),
                 probs=np.array([[0.5, 0.3, 0.2], [0.6, 0.0, 0.0]]),
                 confidence=np.array([0.8, 0.7]))


def test_a_block_is_a_spine_of_picks_with_sibling_leaves_and_head_estimates() -> None:
    cs = from_block(block())
    assert cs.tokens.tolist() == [10, 11, 12, 20, 21, 22]
    assert cs.parent.tolist() == [-1, -1, -1, 0, 0, 0]
    assert cs.kind[:3] == ["pick", SIBLING, SIBLING]
    assert cs.position.tolist() == [0, 0, 0, 1, 1, 1]
    # a pick's head is its confidence; a sibling's its share of the top-K mass
    assert cs.head_q == pytest.approx([0.8, 0.3, 0.2, 0.7, 0.0, 0.0])
    assert cs.pick(1) == 3 and list(cs.drafter_children(0)) == [3, 4, 5]
    chain = from_block(block(), n_positions=1, siblings=False)
    assert chain.tokens.tolist() == [10] and chain.parent.tolist() == [-1] and chain.K == 1
    with pytest.raises(IndexError, match="outside the block"):
        cs.pick(2)


def test_each_candidate_has_one_source() -> None:
    cs = from_block(block())
    cs.agreed[3] = True
    j = cs.add_ngram(30, 3, 2, evidence=0, run=1, p=0.9)
    assert cs.kind[j] == NGRAM and cs.child(3, 30) == j and cs.child(3, 31) is None
    assert [cs.source(i) for i in range(len(cs))] == [
        "drafter", "drafter", "drafter", "agreed", "drafter", "drafter", "ngram"]


def plan_of(cand_of_row: list[int]) -> RoundPlan:
    cs = from_block(block())
    cs.agreed[3] = True
    cs.add_ngram(30, 3, 2, evidence=0, run=1, p=0.9)   # candidate 6, below the agreed pick
    toks = [99, *(cs.tokens[j] for j in cand_of_row)]
    row_of = {c: r + 1 for r, c in enumerate(cand_of_row)}
    parents = [-1, *(0 if cs.parent[c] == -1 else row_of[cs.parent[c]] for c in cand_of_row)]
    return RoundPlan(make_tree(toks, parents), cs, cand_of_row)


def test_rows_are_counted_by_source_once_per_round() -> None:
    plan = plan_of([0, 3, 6, 1])     # rows 1..4: pick, agreed pick, n-gram node, sibling
    assert count_by_source(plan, range(1, 5)) == {"drafter": 2, "agreed": 1, "ngram": 1}
    assert count_by_source(plan, []) == {}
    out = RoundOutcome.of(plan, [0, 1, 2, 3], [10, 20, 30, 7], 0.02, 0.01)
    assert out.counts == RoundCounts(1, {"drafter": 2, "agreed": 1, "ngram": 1},
                                     {"drafter": 1, "agreed": 1, "ngram": 1}, [1, 1, 1], [1, 1, 1])
    # a plan without candidates (plain decode) counts nothing; its rows would be the drafter's
    assert count_by_source(RoundPlan(make_tree([5], [-1])), range(1, 1)) == {}
    assert RoundPlan(make_tree([5, 6], [-1, 0])).row_source(1) == "drafter"


def test_a_round_tests_each_position_of_its_path_and_the_one_after_when_a_child_waits() -> None:
    #   0 - 1 - 2 - 3        a chain of three with a sibling of row 1 (row 4) and a child of
    #    \- 4   \- 5        row 2 beside row 3 (row 5)
    tree = make_tree([9, 1, 2, 3, 4, 5], [-1, 0, 1, 2, 0, 2])
    assert positions_tested(tree, [0]) == 1           # the first candidates were rejected
    assert positions_tested(tree, [0, 4]) == 1        # the sibling accepted, a leaf
    assert positions_tested(tree, [0, 1, 2]) == 3     # rows 3 and 5 both rejected
    assert positions_tested(tree, [0, 1, 2, 3]) == 3  # the whole chain accepted: nothing after
    assert positions_tested(make_tree([9], [-1]), [0]) == 0  # plain decode tests nothing
    total = RoundCounts()
    for path in ([0], [0, 1, 2], [0, 1, 2, 3], [0, 4]):
        total.add(RoundOutcome.of(RoundPlan(tree), path, [7] * len(path), 0.0, 0.0).counts)
    assert total.positions() == {"1": {"tested": 4, "accepted": 3},
                                 "2": {"tested": 2, "accepted": 2},
                                 "3": {"tested": 2, "accepted": 1}}
    assert RoundCounts().positions() == {}


def test_a_reply_sums_its_rounds_and_reports_each_source_seen() -> None:
    total = RoundCounts()
    total.add(RoundCounts(1, {"drafter": 3}, {"drafter": 1}))
    total.add(RoundCounts(1, {"drafter": 1, "ngram": 2}, {"ngram": 2}))
    assert (total.rounds, total.n_drafted, total.n_accepted) == (2, 6, 3)
    assert total.as_dict() == {"drafter": {"drafted": 4, "accepted": 1},
                               "ngram": {"drafted": 2, "accepted": 2}}
    s = RequestSummary("r")
    add_counts(s, total)
    assert s.rounds == 2
    assert (s.rows_drafter, s.rows_agreed, s.rows_ngram) == (4, 0, 2)
    assert (s.accepted_drafter, s.accepted_agreed, s.accepted_ngram) == (1, 0, 2)


CW = dataclasses.replace(load_config().width_choice, ratio_margin=0.1, hysteresis_margin=0.05)


@pytest.mark.parametrize(("incumbent", "t1", "forecast", "rho", "plain"), [
    # the ratio (rho unknown): plain decode 1/0.01 = 100 tok/s against 2/0.025 = 80 tok/s
    (False, 0.01, (2.0, 0.025), None, True),    # 100 > 80 * 1.1: switch to plain decode
    (False, 0.01, (2.0, 0.0215), None, False),  # 100 < 93.02 * 1.1: the drafted round stays
    (True, 0.01, (2.0, 0.0215), None, True),    # 93.02 < 100 * 1.1: plain decode stays
    # rho = 100 tok/s: plain 1 - 1 = 0, drafted 2 - 100 * 0.0196 = 0.04
    (False, 0.01, (2.0, 0.0196), 100.0, False),  # 0 < 0.04 + 0.05 * 2: keep drafting
    (True, 0.01, (2.0, 0.0196), 100.0, True),    # 0.04 < 0 + 0.05 * 1: keep plain decode
    (True, 0.01, (2.0, 0.0190), 100.0, False),   # 0.1 > 0.05: switch back to drafting
])
def test_the_width1_switch_keeps_the_incumbent_unless_beaten_by_the_margin(
        incumbent: bool, t1: float, forecast: tuple[float, float], rho: float | None,
        plain: bool) -> None:
    got = width1_switch(incumbent, t1, forecast, rho, CW)
    assert got is plain


class Part:
    def __init__(self, v: int) -> None:
        self.v = v

    def to_state(self) -> dict[str, int]:
        return {"v": self.v}

    def load_state(self, s: dict[str, int]) -> None:
        self.v = s["v"]


class Table(Part):
    def to_state(self, fast: bool) -> dict[str, int]:  # type: ignore[override]
        return {"v": self.v, "fast": int(fast)}


def test_the_store_state_round_trips_and_refuses_another_arm() -> None:
    parts = {"rate": Part(1), "gains": Part(2), "forecast": Part(3), "model": None}
    chooser = {"incumbent": 8, "w1_incumbent": False, "exploration_clock": 5}
    s = learned_state(64, "learned", Table(4), parts, chooser, fast=True)
    assert s == {"max_rows": 64, "width": "learned", "table": {"v": 4, "fast": 1},
                 "rate": {"v": 1}, "gains": {"v": 2}, "forecast": {"v": 3}, "model": None,
                 "chooser": chooser}
    assert "chooser" not in learned_state(64, "learned", None, parts, chooser, fast=False)
    fresh = {"rate": Part(0), "gains": Part(0), "forecast": Part(0), "model": Part(0)}
    table = Table(0)
    assert load_learned(s, 64, "learned", table, fresh) == chooser
    assert [fresh[k].v for k in ("rate", "gains", "forecast", "model")] == [1, 2, 3, 0]  # type: ignore[union-attr]
    assert table.v == 4
    with pytest.raises(ValueError, match="written for width 'learned' with 64 rows"):
        load_learned(s, 32, "learned", table, fresh)
