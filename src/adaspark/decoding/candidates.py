"""The candidate set of one round (§2.2, Figure 1): the one candidate type every width rule uses.

The drafter's block gives, for each of ``B`` positions after the anchor, its pick and ``K-1``
siblings; drafter candidate ``j = i*K + k`` is rank ``k`` at position ``i``. The picks form a spine
(the pick at position ``i`` hangs from the pick at ``i-1``, the first from the anchor); the
siblings at position ``i`` hang from the same parent as the pick and are leaves. N-gram chains
(§3.3, ``adaspark.rules.adaspark.ngram``) append nodes after the drafter's and mark drafter
candidates agreed or contradicted. Candidates are indexed parents first, which Proposition 1's
tie rule needs.

Each candidate has a ``kind`` (``pick``, ``sibling``, ``ngram``: what made it) and a
:meth:`~CandidateSet.source` (``drafter``, ``agreed``, ``ngram``: Table 7's classes, the names the
server's ``timings.by_source`` reports). The features Eq. (6) reads from the block live with the
AdaSpark scheduler (``adaspark.rules.adaspark.features``).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from adaspark.decoding.drafter.base import Block

PICK, SIBLING, NGRAM = "pick", "sibling", "ngram"
#: Where a verified row came from (Table 7): drafter only, drafter and an n-gram chain, n-gram only.
SOURCES = ("drafter", "agreed", "ngram")


class CandidateSet:
    """Flat per-candidate lists, parents first. ``parent`` is -1 for a child of the anchor.

    ``position`` is the depth below the anchor minus one; ``head_q`` the head-based estimate
    before its per-request offset (§3.3: a pick's confidence head, a sibling's share of the top-K
    softmax mass, an n-gram node's proposal probability). The n-gram chains fill ``agreed`` (a
    drafter candidate a chain also proposed), ``contra`` (the evidence class of a proposal that
    contradicted a drafter candidate, -1 for none), ``evidence`` and ``run`` (an n-gram or agreed
    node's evidence class and the n-gram nodes above it on its path), ``src_p`` (the proposal's
    probability) and ``marked`` (drafter candidates a chain agreed with or contradicted).
    ``by_edge`` maps ``(parent, token)`` to an n-gram node (a drafter candidate is found from the
    block's layout: :meth:`child`).
    """

    __slots__ = ("B", "K", "agreed", "by_edge", "contra", "evidence", "head_q", "kind", "marked",
                 "n_drafted", "parent", "position", "run", "src_p", "tokens")

    def __init__(self) -> None:
        self.tokens: list[int] = []
        self.parent: list[int] = []
        self.kind: list[str] = []
        self.position: list[int] = []
        self.head_q: list[float] = []
        self.agreed: list[bool] = []
        self.evidence: list[int] = []
        self.run: list[int] = []
        self.contra: list[int] = []
        self.src_p: list[float] = []
        self.by_edge: dict[tuple[int, int], int] = {}
        self.marked: set[int] = set()
        self.n_drafted = 0
        self.B = 0
        self.K = 0

    def __len__(self) -> int:
        return len(self.tokens)

    def source(self, j: int) -> str:
        """Candidate ``j``'s class in :data:`SOURCES`: ``drafter`` (drafter only), ``agreed``
        (a drafter candidate an n-gram chain also proposed) or ``ngram`` (n-gram only)."""
        if self.kind[j] == NGRAM:
            return "ngram"
        return "agreed" if self.agreed[j] else "drafter"

    def is_ngram_source(self, j: int, agreed_counts: bool = True) -> bool:
        """Whether node ``j`` counts toward S_ng: an n-gram node, or (``agreed_counts``) an
        agreed drafter node."""
        return self.kind[j] == NGRAM or (agreed_counts and self.agreed[j])

    def ngram_mask(self, agreed_counts: bool) -> np.ndarray:
        """:meth:`is_ngram_source` of every candidate at once (the drafter's ``n_drafted``
        candidates come first: :meth:`add_ngram` appends)."""
        D = self.n_drafted
        mask = np.zeros(len(self.tokens), dtype=bool)
        mask[D:] = [k == NGRAM for k in self.kind[D:]]
        if agreed_counts and True in self.agreed:
            mask |= np.asarray(self.agreed, dtype=bool)
        return mask

    def path_products(self, q: np.ndarray) -> np.ndarray:
        """:func:`~adaspark.decoding.tree.path_products` of this set (Eq. 1), with the same
        products: the drafter's block at once (a pick's or sibling's q times its parent pick's
        Q), then each n-gram node from its parent."""
        B, K, D = self.B, self.K, self.n_drafted
        qa = np.asarray(q, dtype=np.float64)
        spine = np.ones(B)
        if B > 1:
            np.cumprod(qa[:D:K][: B - 1], out=spine[1:])
        head = (qa[:D].reshape(B, K) * spine[:, None]).ravel()
        if len(qa) == D:
            return head
        out = head.tolist()
        parent = self.parent
        for j, qj in enumerate(qa[D:].tolist(), start=D):
            p = parent[j]
            out.append(qj * (1.0 if p == -1 else out[p]))
        return np.asarray(out, dtype=np.float64)

    def pick(self, position: int) -> int:
        """Index of the drafter's pick at ``position`` (0-based below the anchor)."""
        if not 0 <= position < self.B:
            raise IndexError(f"position {position} is outside the block's {self.B} positions")
        return position * self.K

    def drafter_children(self, node: int) -> range:
        """Drafter candidates hanging from ``node`` (-1 is the anchor)."""
        K = self.K
        if node == -1:
            return range(0, K if self.B > 0 else 0)
        if node < self.n_drafted and node % K == 0:
            i = node // K + 1
            if i < self.B:
                return range(i * K, (i + 1) * K)
        return range(0)

    def child(self, node: int, token: int) -> int | None:
        """The candidate below ``node`` (-1 is the anchor) carrying ``token``, or ``None``: a
        drafter candidate (the last of its block row with that token), else an n-gram node."""
        kids = self.drafter_children(node)
        if kids:
            row = self.tokens[kids.start:kids.stop]
            if token in row:
                return kids.stop - 1 - row[::-1].index(token)
        return self.by_edge.get((node, token))

    def children_of(self, parents: Iterable[int]) -> dict[int, list[int]]:
        """Every candidate (placed or not) of each parent in ``parents``, in index order."""
        # the drafter's children of a node are one block row (``drafter_children``); only the
        # n-gram nodes, appended after them, are searched
        out: dict[int, list[int]] = {p: list(self.drafter_children(p)) for p in parents}
        get = out.get
        D = self.n_drafted
        for j, p in enumerate(self.parent[D:], start=D):
            kids = get(p)
            if kids is not None:
                kids.append(j)
        return out

    def add_ngram(self, token: int, parent: int, position: int, evidence: int, run: int,
                  p: float) -> int:
        """Append an n-gram node below ``parent`` (a chain's proposal of probability ``p``)."""
        j = len(self.tokens)
        self.tokens.append(int(token))
        self.parent.append(parent)
        self.kind.append(NGRAM)
        self.position.append(position)
        self.head_q.append(p)
        self.agreed.append(False)
        self.evidence.append(evidence)
        self.run.append(run)
        self.contra.append(-1)
        self.src_p.append(p)
        self.by_edge[(parent, int(token))] = j
        return j


def _layout(B: int, K: int) -> tuple[tuple[int, ...], tuple[str, ...], tuple[int, ...]]:
    """The parent, kind and position of every drafter candidate of a ``B x K`` block."""
    key = (B, K)
    hit = _LAYOUTS.get(key)
    if hit is None:
        parent = tuple(-1 if i == 0 else (i - 1) * K for i in range(B) for _ in range(K))
        kind = tuple(PICK if k == 0 else SIBLING for _ in range(B) for k in range(K))
        position = tuple(i for i in range(B) for _ in range(K))
        hit = _LAYOUTS[key] = (parent, kind, position)
    return hit


_LAYOUTS: dict[tuple[int, int], tuple[tuple[int, ...], tuple[str, ...], tuple[int, ...]]] = {}


def from_block(block: Block, n_positions: int | None = None, siblings: bool = True
               ) -> CandidateSet:
    """The fixed-shape tree of one block (§2.2): picks as a spine, siblings as leaves.

    ``n_positions`` keeps only the first positions (a chain of three picks uses 3);
    ``siblings=False`` keeps only the picks (a chain, ``K = 1``).
    """
    B = block.B if n_positions is None else max(0, min(n_positions, block.B))
    K = block.K if siblings else 1
    probs = np.asarray(block.probs, dtype=np.float64)[:B]
    total = probs.sum(axis=1)
    share = probs[:, :K] / np.where(total > 0, total, np.inf)[:, None]
    share[:, 0] = np.asarray(block.confidence, dtype=np.float64)[:B]
    cs = CandidateSet()
    cs.B, cs.K = B, K
    cs.tokens = np.asarray(block.tokens[:B, :K], dtype=np.int64).ravel().tolist()
    cs.head_q = np.minimum(np.maximum(share, 0.0), 1.0).ravel().tolist()  # np.clip's values
    n = B * K
    cs.n_drafted = n
    parent, kind, position = _layout(B, K)
    cs.parent = list(parent)
    cs.kind = list(kind)
    cs.position = list(position)
    cs.agreed = [False] * n
    cs.evidence = [-1] * n
    cs.run = [0] * n
    cs.contra = [-1] * n
    cs.src_p = [0.0] * n
    return cs
