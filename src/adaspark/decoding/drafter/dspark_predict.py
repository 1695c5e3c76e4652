"""What a zero-backbone DSpark file drafts, predicted on the host (§2.1; the construction is in
:mod:`adaspark.decoding.drafter.dspark_file`), and the greedy text an oracle file is built from.

llama.cpp facts relied on (``src/models/dflash.cpp``, ``common/speculative.cpp``,
``tools/server/server-context.cpp``): block row ``i`` of a DSpark drafter is biased by
``markov_w2 @ markov_w1[prev]`` with ``prev`` the anchor for row 0 and the greedy pick of row
``i-1`` after it (``ggml_argmax``: the first maximum); llama-server drafts ``min(n_max,
n_remaining - 1)`` tokens per round, top candidate of each row, and counts ``draft_n`` after
that cut and ``draft_n_accepted`` as the sum of accepted prefixes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from adaspark.decoding.drafter.dspark_file import DSparkFileError, gguf_meta


@dataclass(frozen=True)
class MarkovHead:
    """A file's Markov head on the host: ``bias(prev) = markov_w2 @ markov_w1[prev]`` (numpy
    ``(n_vocab, R)`` and ``(n_vocab_draft, R)``), draft rows mapped to target ids by ``d2t``."""

    w1: np.ndarray
    w2: np.ndarray
    d2t: np.ndarray | None = None

    @classmethod
    def from_file(cls, path: str | Path) -> MarkovHead:
        m = gguf_meta(path)
        if "markov_w1.weight" not in m.tensors:
            raise DSparkFileError(f"{path} has no markov_w1: not a DSpark file")
        d2t = m.tensor("d2t").reshape(-1).astype(np.int64) if "d2t" in m.tensors else None
        return cls(m.tensor("markov_w1.weight"), m.tensor("markov_w2.weight"), d2t)

    def bias(self, prev: int) -> np.ndarray:
        return self.w2 @ self.w1[int(prev)]

    def __call__(self, prev: int) -> int:
        """The greedy pick after ``prev`` when the backbone's logits are zero: the bias's first
        maximum (as ``ggml_argmax``), as a target token id."""
        j = int(np.argmax(self.bias(prev)))
        return j if self.d2t is None else int(self.d2t[j])


def markov_successors(path: str | Path, tokens: Iterable[int]) -> dict[int, int]:
    """The Markov head's greedy pick after each of ``tokens``, read from the file's
    ``markov_w1``/``markov_w2`` (and ``d2t``). For a zero-backbone file this *is* the draft
    chain."""
    head = MarkovHead.from_file(path)
    return {int(t): head(int(t)) for t in set(tokens)}


@dataclass(frozen=True)
class PredictedRound:
    """One llama-server draft round: the anchor's index in the reply, the drafts, how many are
    accepted."""

    anchor: int
    drafts: tuple[int, ...]
    accepted: int


def chain(successor: Callable[[int], int], anchor: int, n: int) -> tuple[int, ...]:
    """``succ(anchor), succ(succ(anchor)), ...``: ``n`` drafts of a zero-backbone file."""
    out, t = [], int(anchor)
    for _ in range(n):
        t = int(successor(t))
        out.append(t)
    return tuple(out)


def predict_server_rounds(reference: Sequence[int], successor: Callable[[int], int], *,
                          n_max: int = 3, max_tokens: int | None = None) -> list[PredictedRound]:
    """llama-server's ``draft-dspark`` rounds over a reply ``reference`` (the target's greedy
    tokens) with a zero-backbone drafter whose row picks follow ``successor``: each round drafts
    ``min(n_max, max_tokens - generated - 1)`` tokens after the anchor (none when that is not
    positive), accepts the longest matching prefix and emits it plus the target's next token."""
    ref = [int(x) for x in reference]
    cap = len(ref) if max_tokens is None else int(max_tokens)
    rounds: list[PredictedRound] = []
    j = 0
    while j + 1 < min(cap, len(ref)):
        n = min(n_max, cap - (j + 1) - 1)
        if n <= 0:
            break
        drafts = chain(successor, ref[j], n)
        k = 0
        while k < n and j + 1 + k < len(ref) and drafts[k] == ref[j + 1 + k]:
            k += 1
        rounds.append(PredictedRound(j, drafts, k))
        j += k + 1
    return rounds
