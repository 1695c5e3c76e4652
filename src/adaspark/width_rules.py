"""Width rules: what a round verifies (Algorithm 1, lines 5-12), behind one interface.

A rule sees the round's state and the drafter's block, and returns the verify tree (a
:class:`RoundPlan`); after the verify it is told the outcome. The speculative loop in
``adaspark.decode`` runs any registered rule, so later rules (the AdaSpark scheduler, §3) only
register themselves here. Rules are looked up by their config name (``arm.width_rule``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from adaspark.candidates import CandidateSet, from_block
from adaspark.drafter.base import Block
from adaspark.tree import Tree, best_first_order, chain_tree, prefix_tree


@dataclass
class RoundState:
    """What a rule may read before the verify. ``committed[-1]`` is the anchor."""

    committed: list[int]
    round_index: int
    max_rows: int
    block_positions: int

    @property
    def context(self) -> int:
        return len(self.committed)

    @property
    def anchor(self) -> int:
        return self.committed[-1]


@dataclass
class RoundPlan:
    """The verify a rule asks for. ``cand_of_row[r-1]`` is the candidate held by row r."""

    tree: Tree
    candidates: CandidateSet | None = None
    cand_of_row: list[int] = field(default_factory=list)
    why: str = "choice"
    info: dict[str, Any] = field(default_factory=dict)
    state: Any = None  # the rule's own per-round state, handed back in observe()


@dataclass
class RoundOutcome:
    """What the verify did: the accepted rows (from the anchor), the committed tokens, the
    measured verify time and the round's fixed cost D (drafter forward plus tree build).

    ``draft_s`` is the drafter's part of D (the rest is the tree build: the rule's ``plan``);
    ``commit_s`` is the target's commit after the verify (Figure 7's anatomy of a round)."""

    path: list[int]
    new_tokens: list[int]
    verify_s: float
    fixed_s: float
    draft_s: float = 0.0
    commit_s: float = 0.0


class WidthRule(ABC):
    """Contract: ``begin_request`` once per reply, then per round ``wants_block`` (may this
    round call the drafter?), ``plan`` and ``observe``; ``end_request`` after the reply."""

    name: str = "rule"
    uses_drafter: bool = True

    def begin_request(self, prompt: list[int], request_id: str | None = None) -> None:  # noqa: B027
        pass

    def wants_block(self, state: RoundState) -> bool:
        return self.uses_drafter

    def block_positions(self, default: int) -> int:
        """Positions to draft this round (the drafter's B unless the rule uses fewer)."""
        return default

    @abstractmethod
    def plan(self, state: RoundState, block: Block | None) -> RoundPlan: ...

    def observe(self, plan: RoundPlan, outcome: RoundOutcome) -> None:  # noqa: B027
        pass

    def end_request(self) -> dict[str, Any]:
        return {}


WIDTH_RULES: dict[str, Callable[..., WidthRule]] = {}


def register_rule(name: str) -> Callable[[type[WidthRule]], type[WidthRule]]:
    def deco(cls: type[WidthRule]) -> type[WidthRule]:
        if name in WIDTH_RULES:
            raise ValueError(f"width rule {name!r} registered twice")
        WIDTH_RULES[name] = cls
        cls.name = name
        return cls

    return deco


def make_rule(name: str, **kwargs: Any) -> WidthRule:
    if name not in WIDTH_RULES:
        raise KeyError(f"unknown width rule {name!r}; known rules: {sorted(WIDTH_RULES)}")
    return WIDTH_RULES[name](**kwargs)


def head_based_q(block: Block, cands: CandidateSet) -> np.ndarray:
    """The head-based estimate without its per-request offset (§3.3): a pick's confidence
    head, a sibling's share of the top-K softmax mass."""
    tot = block.probs.sum(axis=1)
    q = np.empty(len(cands))
    for j in range(len(cands)):
        i, k = cands.position[j], cands.rank[j]
        q[j] = block.confidence[i] if k == 0 else block.probs[i, k] / max(tot[i], 1e-30)
    return np.clip(q, 0.0, 1.0)


# -- rules without learned models -------------------------------------------------------------


@register_rule("ar")
class Autoregressive(WidthRule):
    """Plain decode: width 1, the anchor alone, no drafter."""

    uses_drafter = False

    def plan(self, state: RoundState, block: Block | None) -> RoundPlan:
        return RoundPlan(chain_tree(state.anchor, []), why="ar")


@register_rule("chain")
class Chain(WidthRule):
    """The drafter's first ``positions`` picks verified as a chain laid out as a tree
    (``chain3``: llama.cpp's default of at most three draft tokens; ``fullchain``: all B)."""

    def __init__(self, positions: int | None = None) -> None:
        if positions is not None and (isinstance(positions, bool) or positions < 1):
            raise ValueError(f"a chain verifies at least 1 position, got positions={positions}")
        self.positions = positions

    def block_positions(self, default: int) -> int:
        return default if self.positions is None else min(default, self.positions)

    def plan(self, state: RoundState, block: Block | None) -> RoundPlan:
        assert block is not None
        n = block.B if self.positions is None else min(self.positions, block.B)
        n = min(n, state.max_rows - 1)
        cands = from_block(block, n_positions=n, siblings=False)
        tree = chain_tree(state.anchor, cands.tokens, max_rows=state.max_rows)
        return RoundPlan(tree, cands, list(range(n)), why="pinned")


@register_rule("pinned")
class Pinned(WidthRule):
    """A fixed width, filled best-first by the drafter's probabilities (Prop. 1's order with the
    head-based estimate), laid out depth-first."""

    def __init__(self, width: int) -> None:
        if width < 1:
            raise ValueError(f"a pinned width must be at least 1 row, got {width}")
        self.width = width

    def plan(self, state: RoundState, block: Block | None) -> RoundPlan:
        assert block is not None
        cands = from_block(block)
        q = head_based_q(block, cands)
        order, S = best_first_order(cands.parent, q)
        n = min(self.width, state.max_rows, len(cands) + 1)
        tree, rows = prefix_tree(state.anchor, cands.tokens, cands.parent, order, n,
                                 cands.source, max_rows=state.max_rows)
        return RoundPlan(tree, cands, rows, why="pinned", info={"S": float(S[n - 1])})
