"""The candidate tree of one round (§2.2, Figure 1), with what Eq. (6) reads about each node.

The drafter's block gives, for each of ``B`` positions, its pick and ``K-1`` siblings; candidate
``j = i*K + k`` is rank ``k`` at position ``i``. The picks form a spine (the pick at position ``i``
hangs from the pick at ``i-1``, the first from the anchor) and the siblings hang from the same
parent as the pick, as leaves. N-gram chains (``ngram.add_chains``) append nodes after the
drafter's and mark drafter candidates agreed or contradicted. Candidates are indexed parents first,
which Proposition 1's tie rule needs.

Per drafter position the features of Eq. (6) are kept as arrays: ``logit h`` (confidence head),
``logit sigma`` (the pick's share of the top-K softmax mass, computed from the siblings' total so
a share near 1 keeps its precision) and ``log r`` (a sibling's share of the siblings' total).
"""

from __future__ import annotations

import math

import numpy as np

from adaspark.decoding.drafter.base import Block

PICK, SIBLING, NGRAM = 0, 1, 2
KIND_NAMES = ("pick", "sibling", "ngram")


def logit(p: float, eps: float) -> float:
    p = min(max(p, eps), 1.0 - eps)
    return math.log(p / (1.0 - p))


class CandidateTree:
    """Flat per-candidate lists (grown by the n-gram chains) plus the drafter's feature arrays."""

    __slots__ = ("B", "K", "agreed", "by_edge", "contra", "evidence", "head_q", "kind", "lh",
                 "logr", "ls", "marked", "n_drafted", "parent", "position", "run", "src_p",
                 "tokens")

    def __init__(self) -> None:
        self.tokens: list[int] = []
        self.parent: list[int] = []
        self.kind: list[int] = []
        self.position: list[int] = []
        self.head_q: list[float] = []       # the head-based estimate before its offset
        self.agreed: list[bool] = []
        self.evidence: list[int] = []       # n-gram node / agreed: the proposal's evidence class
        self.run: list[int] = []            # n-gram nodes above it on its path, when proposed
        self.contra: list[int] = []         # drafter node contradicted: that proposal's class
        self.src_p: list[float] = []        # p_src of the proposal that made/agreed/contradicted it
        self.by_edge: dict[tuple[int, int], int] = {}
        self.marked: set[int] = set()       # drafter nodes a chain agreed with or contradicted
        self.n_drafted = 0
        self.B = 0
        self.K = 0
        self.lh = np.zeros(0)
        self.ls = np.zeros(0)
        self.logr = np.zeros((0, 0))

    def __len__(self) -> int:
        return len(self.tokens)

    @classmethod
    def from_block(cls, block: Block, logit_eps: float, log_r_floor: float,
                   max_positions: int | None = None) -> CandidateTree:
        """The fixed-shape tree of one block (picks as a spine, siblings as leaves)."""
        t = cls()
        B = block.B if max_positions is None else min(block.B, max_positions)
        K = block.K
        tokens = np.asarray(block.tokens[:B], dtype=np.int64)
        probs = np.asarray(block.probs[:B], dtype=np.float64)
        conf = np.asarray(block.confidence[:B], dtype=np.float64)
        total = probs.sum(axis=1)
        clip = math.log((1.0 - logit_eps) / logit_eps)
        tiny = 1e-300
        sib_total = probs[:, 1:].sum(axis=1)
        log_sib = np.log(sib_total + tiny)
        ls = np.clip(np.log(probs[:, 0] + tiny) - log_sib, -clip, clip)
        logr = np.log(probs + tiny) - log_sib[:, None]
        logr = np.where((sib_total > 0)[:, None], np.maximum(logr, log_r_floor), log_r_floor)
        share = probs / np.where(total > 0, total, np.inf)[:, None]
        h = np.clip(conf, logit_eps, 1.0 - logit_eps)
        t.lh = np.log(h / (1.0 - h))
        t.ls = ls
        t.logr = logr
        t.B, t.K = B, K
        head = share.copy()
        head[:, 0] = np.clip(conf, 0.0, 1.0)
        t.tokens = tokens.ravel().tolist()
        t.head_q = np.clip(head, 0.0, 1.0).ravel().tolist()
        n = B * K
        t.n_drafted = n
        t.parent = [-1 if i == 0 else (i - 1) * K for i in range(B) for _ in range(K)]
        t.kind = [PICK if k == 0 else SIBLING for _ in range(B) for k in range(K)]
        t.position = [i for i in range(B) for _ in range(K)]
        t.agreed = [False] * n
        t.evidence = [-1] * n
        t.run = [0] * n
        t.contra = [-1] * n
        t.src_p = [0.0] * n
        t.by_edge = {(p, tok): j for j, (p, tok) in enumerate(zip(t.parent, t.tokens,
                                                                    strict=True))}
        return t

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

    def pick(self, position: int) -> int:
        return position * self.K

    def add_ngram(self, token: int, parent: int, position: int, evidence: int, run: int,
                  p: float) -> int:
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

    def is_ngram_source(self, j: int, agreed_counts: bool = True) -> bool:
        """Whether node ``j`` counts toward S_ng: an n-gram node, or (``agreed_counts``) an
        agreed drafter node."""
        return self.kind[j] == NGRAM or (agreed_counts and self.agreed[j])

    def source(self, j: int) -> str:
        """``drafter`` (drafter only), ``agreed`` or ``ngram`` (n-gram only)."""
        if self.kind[j] == NGRAM:
            return "ngram"
        return "agreed" if self.agreed[j] else "drafter"

    def children_of(self, parents: set[int]) -> dict[int, list[int]]:
        """Every candidate (placed or not) of each parent in ``parents``."""
        out: dict[int, list[int]] = {p: [] for p in parents}
        for j, p in enumerate(self.parent):
            if p in out:
                out[p].append(j)
        return out
