"""The fixed width rules: autoregressive decode, a chain of the drafter's picks, and a pinned
width filled best first by the head-based estimate (the baselines of §4 and Table 6).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from adaspark.checks import spec
from adaspark.decoding.candidates import from_block
from adaspark.decoding.drafter.base import Block
from adaspark.decoding.round import RoundPlan, RoundState, WidthRule
from adaspark.decoding.tree import MAX_WIDTH, best_first_order, chain_tree, prefix_tree


@dataclass(frozen=True)
class ChainOptions:
    """``width_rule: chain``: the first ``positions`` picks as a chain (null = all B)."""

    positions: int | None = spec(min=1, default=None)


@dataclass(frozen=True)
class PinnedOptions:
    """``width_rule: pinned``: a fixed row count."""

    width: int = spec(min=1, max=MAX_WIDTH)


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
    Options = ChainOptions

    def __init__(self, options: ChainOptions | None = None, **keywords: Any) -> None:
        self.positions = self.options_of(options, **keywords).positions

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
    Options = PinnedOptions

    def __init__(self, options: PinnedOptions | None = None, **keywords: Any) -> None:
        self.width = self.options_of(options, **keywords).width

    def plan(self, state: RoundState, block: Block | None) -> RoundPlan:
        assert block is not None
        cands = from_block(block)
        order, S = best_first_order(cands.parent, cands.head_q)
        n = min(self.width, state.max_rows, len(cands) + 1)
        tree, rows = prefix_tree(state.anchor, cands.tokens, cands.parent, order, n,
                                 cands.kind, max_rows=state.max_rows)
        return RoundPlan(tree, cands, rows, why="pinned", info={"S": float(S[n - 1])})
