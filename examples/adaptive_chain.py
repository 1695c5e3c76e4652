"""A width rule written outside the package: an adaptive chain (README, "Adding a width rule").

The round verifies the drafter's first ``length`` picks as a chain. After a round that accepted
every draft the chain grows by one position, after a round that rejected one it halves
(additive increase, multiplicative decrease), between 1 and ``most`` positions; each request
starts again at ``start``. An arm file names it as ``width_rule:
examples.adaptive_chain:AdaptiveChain`` (``conf/arm/adaptive-chain.yaml``); its keywords are
:class:`AdaptiveChainOptions`, checked where the arm is read like every rule's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from adaspark.checks import spec
from adaspark.decoding.candidates import from_block
from adaspark.decoding.drafter.base import Block
from adaspark.decoding.round import RoundOutcome, RoundPlan, RoundState, WidthRule
from adaspark.decoding.tree import chain_tree


@dataclass(frozen=True)
class AdaptiveChainOptions:
    """The arm file's keys: the chain's first length, and its longest."""

    start: int = spec(min=1, default=3)
    most: int = spec(min=1, max=63, default=8)


class AdaptiveChain(WidthRule):
    name = "adaptive-chain"
    Options = AdaptiveChainOptions

    def __init__(self, options: AdaptiveChainOptions | None = None, **keywords: Any) -> None:
        o = self.options_of(options, **keywords)  # the defaults: AdaptiveChainOptions'
        self.start, self.most = o.start, o.most
        self.length = o.start

    def begin_request(self, prompt: list[int], request_id: str | None = None) -> None:
        self.length = min(self.start, self.most)

    def block_positions(self, default: int) -> int:
        return min(default, self.length)  # draft no deeper than the chain will verify

    def plan(self, state: RoundState, block: Block | None) -> RoundPlan:
        assert block is not None
        n = min(self.length, block.B, state.max_rows - 1)
        cands = from_block(block, n_positions=n, siblings=False)
        tree = chain_tree(state.anchor, cands.tokens, max_rows=state.max_rows)
        return RoundPlan(tree, cands, list(range(n)), why="adaptive")

    def observe(self, plan: RoundPlan, outcome: RoundOutcome) -> None:
        if outcome.accepted == plan.tree.n_rows - 1:
            self.length = min(self.length + 1, self.most)
        else:
            self.length = max(1, self.length // 2)

    def end_request(self) -> dict[str, Any]:
        return {"length": self.length}
