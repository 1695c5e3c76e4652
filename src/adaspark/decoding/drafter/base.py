"""The drafter interface (§2.1): a block of B positions, top-K candidates per position.

Shaped after llama.cpp's ``common/speculative.h`` lifecycle (begin, draft, accept), with a registry
keyed by the Hydra option name instead of a switch. The dispatcher (:class:`DrafterStats`) keeps
the counters every drafter gets for free.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from adaspark.registry import Registry


@dataclass
class Block:
    """One drafted block.

    ``tokens[i, k]``: the k-th candidate at position i after the anchor (k = 0 is the pick).
    ``probs[i, k]``: the drafter's probability of that candidate (its softmax over the vocabulary).
    ``confidence[i]``: the confidence head h at position i (for a draft model, its probability of
    the pick). ``share[i]``: the pick's share of the top-K softmax mass (§3.3, sigma).
    ``draft_s``: the drafter's own time for this block (part of the round's fixed cost D).

    A DSpark block (``drafter/dspark.py``): the picks are the drafter's in-graph chain, each row's
    argmax under the Markov bias of the pick before it (§2.1); the siblings of a row are that
    row's other top-K tokens. In the candidate tree (:mod:`adaspark.decoding.candidates`, Figure
    1) a sibling at position i hangs from the pick at i-1 (the anchor for i = 0) and is a leaf,
    so the bias its row got in the graph is its own parent's: every drafter node carries the
    exact Markov bias of its parent, and nothing is computed on the host (a tree that hung
    drafter nodes below a sibling would need that sibling's bias, ``markov_w2 @
    markov_w1[sibling]``, which no arm here does). ``confidence`` is the confidence head h, an
    output of its own, and ``share`` comes from the row's softmax: Eq. (6)'s two inputs (§3.3)
    are distinct.
    """

    tokens: np.ndarray
    probs: np.ndarray
    confidence: np.ndarray
    draft_s: float = 0.0

    @property
    def B(self) -> int:
        return int(self.tokens.shape[0])

    @property
    def K(self) -> int:
        return int(self.tokens.shape[1])

    @property
    def share(self) -> np.ndarray:
        tot = self.probs.sum(axis=1)
        return np.where(tot > 0, self.probs[:, 0] / np.maximum(tot, 1e-30), 0.0)

    @property
    def picks(self) -> list[int]:
        return [int(t) for t in self.tokens[:, 0]]


class Drafter(ABC):
    """A block drafter. Contract:

    - ``begin(prompt)``: a new request starts with these committed tokens.
    - ``draft(committed, n_positions)``: a block for the positions after ``committed[-1]``; the
      drafter brings its own state up to ``committed`` first (catching up on tokens it has not
      seen, e.g. after rounds it did not draft).
    - ``close()``: free native resources.
    """

    name: str = "drafter"
    #: B, when the drafter has a block of its own (a DSpark file's ``dflash.block_size``); a
    #: draft model has none and takes ``drafter.block_positions``.
    block_positions: int | None = None
    #: Whether the drafter reads the target's hidden states (a hook on the target's committed
    #: rows, set before its first prefill): one such drafter per target.
    reads_target: bool = False
    #: Whether a block of any length is one forward (DSpark: its time does not grow with the
    #: positions drafted); else one forward per position (a draft model). Replay's device
    #: models price D by it (:mod:`adaspark.replay.device`).
    one_forward: bool = False

    @abstractmethod
    def begin(self, prompt: list[int]) -> None: ...

    @abstractmethod
    def draft(self, committed: list[int], n_positions: int) -> Block: ...

    def close(self) -> None:  # noqa: B027 - optional
        pass

    def sequences(self) -> list[Drafter]:
        """A drafter per request when the kind was built for several (``n_seqs``, a draft
        model's sequences sharing its context); itself alone otherwise."""
        return [self]

    @classmethod
    def draft_together(cls, asks: Sequence[tuple[Drafter, list[int], int]]) -> list[Block]:
        """The blocks of several requests, each ``(drafter, committed, n_positions)``, for a
        shared step (:mod:`adaspark.decoding.slots`): one request at a time, unless the kind
        batches them (a draft model's sequences in one context)."""
        return [d.draft(c, n) for d, c, n in asks]


@dataclass
class DrafterStats:
    """Counters kept by the dispatcher for every drafter: blocks drafted and their time (the rows
    verified and accepted are counted once, by source, in the loop's
    :class:`~adaspark.decoding.round.RoundCounts`)."""

    n_blocks: int = 0
    draft_s: float = 0.0


#: Every drafter by its config name (``drafter.kind``), imported on first use.
DRAFTERS: Registry[Callable[..., Drafter]] = Registry("drafter kind", {
    "draft-model": "adaspark.decoding.drafter.draft_model:DraftModelDrafter",
    "dspark": "adaspark.decoding.drafter.dspark:DSparkDrafter",
}, "adaspark.decoding.drafter.base.DRAFTERS; drafter.kind in conf/drafter/", base=Drafter)


def make_drafter(kind: str, **kwargs: Any) -> Drafter:
    return DRAFTERS.get(kind)(**kwargs)
