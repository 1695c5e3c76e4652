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

The set is a structure of arrays with room for n-gram nodes after the drafter's, so that the
scheduler's compiled kernels (``adaspark.jit``) read and extend it in place; its fields are views
of the live candidates.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from adaspark.decoding.drafter.base import Block
from adaspark.jit import kernel

PICK, SIBLING, NGRAM = "pick", "sibling", "ngram"
#: Kinds by code (the ``kind`` array holds the code: 0 pick, 1 sibling, 2 n-gram).
KINDS = (PICK, SIBLING, NGRAM)
KIND_CODE = {k: i for i, k in enumerate(KINDS)}
#: Where a verified row came from (Table 7): drafter only, drafter and an n-gram chain, n-gram only.
SOURCES = ("drafter", "agreed", "ngram")
#: Room for n-gram nodes a new set keeps (a verify holds at most 63 candidates).
NGRAM_ROOM = 64

#: field -> (dtype, value of a fresh slot)
_FIELDS = {"tokens": (np.int64, 0), "parent": (np.int64, -1), "kind": (np.int64, 0),
           "position": (np.int64, 0), "head_q": (np.float64, 0.0), "agreed": (np.bool_, False),
           "evidence": (np.int64, -1), "run": (np.int64, 0), "contra": (np.int64, -1),
           "src_p": (np.float64, 0.0)}


_TEMPLATES: dict[int, dict[str, np.ndarray]] = {}


def _fresh(capacity: int) -> dict[str, np.ndarray]:
    """Every field's array of ``capacity`` fresh slots (copies of a kept template)."""
    t = _TEMPLATES.get(capacity)
    if t is None:
        t = _TEMPLATES[capacity] = {f: np.full(capacity, v, dtype=d)
                                    for f, (d, v) in _FIELDS.items()}
    return {f: a.copy() for f, a in t.items()}


@dataclass(frozen=True)
class CandidateArrays:
    """The live candidates' fields as arrays (views; ``kind`` as codes of :data:`KINDS`)."""

    tokens: np.ndarray
    parent: np.ndarray
    kind: np.ndarray
    agreed: np.ndarray
    evidence: np.ndarray
    run: np.ndarray
    contra: np.ndarray
    src_p: np.ndarray


class CandidateSet:
    """Per-candidate arrays, parents first; ``len()`` candidates are live, the first
    ``n_drafted`` the drafter's. ``parent`` is -1 for a child of the anchor.

    ``position`` is the depth below the anchor minus one; ``head_q`` the head-based estimate
    before its per-request offset (§3.3: a pick's confidence head, a sibling's share of the top-K
    softmax mass, an n-gram node's proposal probability). The n-gram chains fill ``agreed`` (a
    drafter candidate a chain also proposed), ``contra`` (the evidence class of a proposal that
    contradicted a drafter candidate, -1 for none), ``evidence`` and ``run`` (an n-gram or agreed
    node's evidence class and the n-gram nodes above it on its path) and ``src_p`` (the
    proposal's probability). A drafter candidate a chain agreed with or contradicted is *marked*
    (:meth:`marked`). Each field reads as an array view of the live candidates; assigning a
    sequence to ``tokens`` starts a set of that many (every other field at its fresh value), and
    assigning another field sets it for them.
    """

    __slots__ = ("B", "K", "_a", "_n", "n_drafted")

    def __init__(self, capacity: int = 0) -> None:
        self._a = _fresh(capacity)
        self._n = 0
        self.n_drafted = 0
        self.B = 0
        self.K = 0

    def __len__(self) -> int:
        return self._n

    # -- the fields, as views ---------------------------------------------------------------

    def _get(self, f: str) -> np.ndarray:
        return self._a[f][: self._n]

    def _set(self, f: str, values: Sequence) -> None:
        v = np.asarray(values, dtype=_FIELDS[f][0])
        if f == "tokens":
            self._n = 0
            self.reserve(len(v))
            self._n = len(v)
            for g, (_, fresh) in _FIELDS.items():
                self._a[g][: self._n] = fresh
        elif len(v) != self._n:
            raise ValueError(f"{len(v)} values of {f} for {self._n} candidates")
        self._a[f][: self._n] = v

    tokens = property(lambda s: s._get("tokens"), lambda s, v: s._set("tokens", v))
    parent = property(lambda s: s._get("parent"), lambda s, v: s._set("parent", v))
    position = property(lambda s: s._get("position"), lambda s, v: s._set("position", v))
    head_q = property(lambda s: s._get("head_q"), lambda s, v: s._set("head_q", v))
    agreed = property(lambda s: s._get("agreed"), lambda s, v: s._set("agreed", v))
    evidence = property(lambda s: s._get("evidence"), lambda s, v: s._set("evidence", v))
    run = property(lambda s: s._get("run"), lambda s, v: s._set("run", v))
    contra = property(lambda s: s._get("contra"), lambda s, v: s._set("contra", v))
    src_p = property(lambda s: s._get("src_p"), lambda s, v: s._set("src_p", v))

    @property
    def kind(self) -> list[str]:
        """Each candidate's kind (:data:`KINDS`)."""
        return [KINDS[k] for k in self._get("kind").tolist()]

    @kind.setter
    def kind(self, values: Sequence[str]) -> None:
        self._set("kind", np.asarray([KIND_CODE[k] for k in values], dtype=np.int64))

    def reserve(self, capacity: int) -> None:
        """Room for at least ``capacity`` candidates (kept values stay)."""
        have = len(self._a["tokens"])
        if capacity <= have:
            return
        fresh = _fresh(max(capacity, 2 * have))
        for f, a in fresh.items():
            a[: self._n] = self._a[f][: self._n]
        self._a = fresh

    def buffers(self) -> dict[str, np.ndarray]:
        """The whole arrays, live candidates first (the n-gram chains' kernel appends in
        place, then :meth:`grow_to` the count it returns)."""
        return self._a

    def grow_to(self, n: int) -> None:
        """The first ``n`` slots of the buffers are live (after a kernel appended to them)."""
        if not self._n <= n <= len(self._a["tokens"]):
            raise ValueError(f"{n} live candidates: have {self._n}, room for "
                             f"{len(self._a['tokens'])}")
        self._n = n

    def arrays(self) -> CandidateArrays:
        """The live candidates' fields for the scheduler's kernels (views, no copies)."""
        g = self._get
        return CandidateArrays(tokens=g("tokens"), parent=g("parent"), kind=g("kind"),
                               agreed=g("agreed"), evidence=g("evidence"), run=g("run"),
                               contra=g("contra"), src_p=g("src_p"))

    # -- reading one candidate ------------------------------------------------------------------

    def kind_of(self, j: int) -> str:
        return KINDS[int(self._a["kind"][j])]

    def source(self, j: int) -> str:
        """Candidate ``j``'s class in :data:`SOURCES`: ``drafter`` (drafter only), ``agreed``
        (a drafter candidate an n-gram chain also proposed) or ``ngram`` (n-gram only)."""
        if self._a["kind"][j] == 2:
            return "ngram"
        return "agreed" if self._a["agreed"][j] else "drafter"

    def is_ngram_source(self, j: int, agreed_counts: bool = True) -> bool:
        """Whether node ``j`` counts toward S_ng: an n-gram node, or (``agreed_counts``) an
        agreed drafter node."""
        return bool(self._a["kind"][j] == 2 or (agreed_counts and self._a["agreed"][j]))

    def ngram_mask(self, agreed_counts: bool) -> np.ndarray:
        """:meth:`is_ngram_source` of every candidate at once."""
        mask = self._get("kind") == 2
        return mask | self._get("agreed") if agreed_counts else mask

    def marked(self) -> list[int]:
        """The drafter candidates an n-gram chain agreed with or contradicted, ascending."""
        D = self.n_drafted
        a = self._a
        return np.flatnonzero(a["agreed"][:D] | (a["contra"][:D] >= 0)).tolist()

    def path_products(self, q: np.ndarray) -> np.ndarray:
        """:func:`~adaspark.decoding.tree.path_products` of this set (Eq. 1)."""
        from adaspark.decoding.tree import path_products

        return path_products(self._get("parent"), q)

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
        tokens = self._a["tokens"]
        kids = self.drafter_children(node)
        for j in reversed(kids):
            if tokens[j] == token:
                return j
        parent = self._a["parent"]
        for j in range(self.n_drafted, self._n):
            if parent[j] == node and tokens[j] == token:
                return j
        return None

    def children_of(self, parents: Iterable[int]) -> dict[int, list[int]]:
        """Every candidate (placed or not) of each parent in ``parents``, in index order."""
        out: dict[int, list[int]] = {p: list(self.drafter_children(p)) for p in parents}
        get = out.get
        D = self.n_drafted
        for j, p in enumerate(self._get("parent")[D:].tolist(), start=D):
            kids = get(p)
            if kids is not None:
                kids.append(j)
        return out

    def add_ngram(self, token: int, parent: int, position: int, evidence: int, run: int,
                  p: float) -> int:
        """Append an n-gram node below ``parent`` (a chain's proposal of probability ``p``)."""
        j = self._n
        self.reserve(j + 1)
        a = self._a
        a["tokens"][j], a["parent"][j], a["kind"][j] = int(token), parent, 2
        a["position"][j], a["head_q"][j], a["agreed"][j] = position, p, False
        a["evidence"][j], a["run"][j], a["contra"][j], a["src_p"][j] = evidence, run, -1, p
        self._n = j + 1
        return j


@kernel
def _fill_block(tokens: np.ndarray, probs: np.ndarray, conf: np.ndarray, B: int, K: int,
                out_tokens: np.ndarray, parent: np.ndarray, kind: np.ndarray,
                position: np.ndarray, head_q: np.ndarray) -> None:
    """The first ``B`` positions' first ``K`` candidates of a block, row by row: a pick's head
    estimate is its confidence, a sibling's its share of its row's whole mass (0 when the row
    has none), clipped to [0, 1]."""
    for i in range(B):
        total = 0.0
        for k in range(probs.shape[1]):
            total += probs[i, k]
        for k in range(K):
            j = i * K + k
            out_tokens[j] = tokens[i, k]
            parent[j] = -1 if i == 0 else (i - 1) * K
            kind[j] = 0 if k == 0 else 1
            position[j] = i
            h = conf[i] if k == 0 else (probs[i, k] / total if total > 0 else 0.0)
            head_q[j] = min(max(h, 0.0), 1.0)


def from_block(block: Block, n_positions: int | None = None, siblings: bool = True,
               room: int = NGRAM_ROOM) -> CandidateSet:
    """The fixed-shape tree of one block (§2.2): picks as a spine, siblings as leaves, with
    ``room`` for n-gram nodes after them.

    ``n_positions`` keeps only the first positions (a chain of three picks uses 3);
    ``siblings=False`` keeps only the picks (a chain, ``K = 1``).
    """
    B = block.B if n_positions is None else max(0, min(n_positions, block.B))
    K = block.K if siblings else 1
    n = B * K
    cs = CandidateSet(n + room)
    cs.B, cs.K = B, K
    a = cs.buffers()
    dense = np.ascontiguousarray
    _fill_block(dense(block.tokens, dtype=np.int64), dense(block.probs, dtype=np.float64),
                dense(block.confidence, dtype=np.float64), B, K, a["tokens"], a["parent"],
                a["kind"], a["position"], a["head_q"])
    cs.n_drafted = n
    cs.grow_to(n)
    return cs
