"""The candidate set of one round (§2.2, Figure 1).

The drafter's block gives, for each of ``B`` positions after the anchor, its pick and ``K-1``
siblings. The picks form a spine (the pick at position i hangs from the pick at position i-1, the
first from the anchor); the siblings at position i hang from the same parent as the pick and are
leaves. N-gram chains (§3.3) add nodes of their own. Candidates are indexed parents first, which
is what Proposition 1's tie rule needs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from adaspark.decoding.drafter.base import Block


@dataclass
class CandidateSet:
    """Flat candidate records, parents first. ``parent`` is -1 for a child of the anchor.

    ``source`` is ``pick``, ``sibling`` or ``ngram``; ``position`` is the depth below the anchor
    minus one; ``rank`` is the drafter's rank at that position (0 = pick, -1 for n-gram nodes).
    ``agreed`` marks drafter candidates an n-gram chain also proposed.
    """

    tokens: list[int] = field(default_factory=list)
    parent: list[int] = field(default_factory=list)
    source: list[str] = field(default_factory=list)
    position: list[int] = field(default_factory=list)
    rank: list[int] = field(default_factory=list)
    agreed: list[bool] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.tokens)

    def add(self, token: int, parent: int, source: str, position: int, rank: int) -> int:
        self.tokens.append(int(token))
        self.parent.append(int(parent))
        self.source.append(source)
        self.position.append(int(position))
        self.rank.append(int(rank))
        self.agreed.append(False)
        return len(self.tokens) - 1

    def children(self, parent: int) -> list[int]:
        return [j for j, p in enumerate(self.parent) if p == parent]

    def pick_index(self, position: int) -> int:
        """Index of the drafter's pick at ``position`` (0-based below the anchor)."""
        for j, (s, pos) in enumerate(zip(self.source, self.position, strict=True)):
            if s == "pick" and pos == position:
                return j
        raise KeyError(position)


def from_block(block: Block, n_positions: int | None = None, siblings: bool = True) -> CandidateSet:
    """The fixed-shape tree of one block (§2.2): picks as a spine, siblings as leaves.

    ``n_positions`` keeps only the first positions (a chain of three picks uses 3);
    ``siblings=False`` keeps only the picks (a chain).
    """
    cs = CandidateSet()
    parent = -1
    for i in range(block.B if n_positions is None else min(n_positions, block.B)):
        pick = cs.add(block.tokens[i, 0], parent, "pick", i, 0)
        if siblings:
            for k in range(1, block.K):
                cs.add(block.tokens[i, k], parent, "sibling", i, k)
        parent = pick
    return cs


def head_based_q(block: Block, cands: CandidateSet) -> np.ndarray:
    """The head-based estimate without its per-request offset (§3.3): a pick's confidence
    head, a sibling's share of the top-K softmax mass."""
    tot = block.probs.sum(axis=1)
    q = np.empty(len(cands))
    for j in range(len(cands)):
        i, k = cands.position[j], cands.rank[j]
        q[j] = block.confidence[i] if k == 0 else block.probs[i, k] / max(tot[i], 1e-30)
    return np.clip(q, 0.0, 1.0)
