"""The fixed width rules: autoregressive decode, a chain of the drafter's picks, and a pinned
width filled best first by the head-based estimate (the baselines of §4 and Table 6).
"""

from __future__ import annotations

from adaspark.decoding.candidates import from_block
from adaspark.decoding.drafter.base import Block
from adaspark.decoding.round import RoundPlan, RoundState, WidthRule
from adaspark.decoding.tree import best_first_order, chain_tree, prefix_tree

# -- rules without learned models -------------------------------------------------------------


class Autoregressive(WidthRule):
    """Plain decode: width 1, the anchor alone, no drafter."""

    name = "ar"

    uses_drafter = False

    def plan(self, state: RoundState, block: Block | None) -> RoundPlan:
        return RoundPlan(chain_tree(state.anchor, []), why="ar")


class Chain(WidthRule):
    """The drafter's first ``positions`` picks verified as a chain laid out as a tree
    (``chain3``: llama.cpp's default of at most three draft tokens; ``fullchain``: all B)."""

    name = "chain"

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


class Pinned(WidthRule):
    """A fixed width, filled best-first by the drafter's probabilities (Prop. 1's order with the
    head-based estimate), laid out depth-first."""

    name = "pinned"

    def __init__(self, width: int) -> None:
        if width < 1:
            raise ValueError(f"a pinned width must be at least 1 row, got {width}")
        self.width = width

    def plan(self, state: RoundState, block: Block | None) -> RoundPlan:
        assert block is not None
        cands = from_block(block)
        order, S = best_first_order(cands.parent, cands.head_q)
        n = min(self.width, state.max_rows, len(cands) + 1)
        tree, rows = prefix_tree(state.anchor, cands.tokens, cands.parent, order, n,
                                 cands.kind, max_rows=state.max_rows)
        return RoundPlan(tree, cands, rows, why="pinned", info={"S": float(S[n - 1])})
