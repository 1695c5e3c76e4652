"""A same-vocabulary small model as a block drafter (HARNESS "The parts": the drafter row).

It runs B greedy steps of the small model after the anchor, one forward per position, and keeps the
top-K of each step's softmax: the pick (its argmax) and K-1 siblings with their probabilities. Its
confidence for a position is its probability of the pick; the pick's share is that probability
over the top-K mass (§3.3). The small model's own KV cache is kept in step with what the target
committed: before drafting it drops the cells past the longest common prefix of its cached tokens
and the committed ones, then decodes the committed tokens it has not seen (catching up after rounds
it did not draft, inside this round's fixed cost D). At the start of a request it prefills the
prompt in whole chunks, as the target does, so that its drafts do not depend on earlier requests.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from adaspark.decoding.drafter.base import Block, Drafter
from adaspark.decoding.engine import PREFILL_CHUNK_FAST, EngineError, Model
from adaspark.decoding.tree import MAX_ROWS_EXACT


def top_k_softmax(logits: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-``k`` ids by logit (descending, ties to the lower id) and their softmax probabilities
    over the full vocabulary."""
    idx = np.argpartition(-logits, k - 1)[:k]
    idx = idx[np.lexsort((idx, -logits[idx]))]
    m = float(logits.max())
    z = float(np.exp(logits.astype(np.float64) - m).sum())
    probs = np.exp(logits[idx].astype(np.float64) - m) / z
    return idx.astype(np.int64), probs


class DraftModelDrafter(Drafter):
    """B greedy steps of a small GGUF with the target's vocabulary (checked against
    ``target_vocab``, or the loaded ``target``'s token list, when either is given)."""

    def __init__(self, path: str | Path, n_ctx: int, *, exact: bool, top_k: int = 8,
                 threads: int | None = None, target_vocab: list[bytes] | None = None,
                 target: Model | None = None, n_gpu_layers: int = 0) -> None:
        self.model = Model(path, n_ctx, exact=exact, threads=threads, n_seq_max=1,
                           n_gpu_layers=n_gpu_layers)
        self.top_k = top_k
        self.exact = exact
        if target_vocab is None and target is not None:  # the loaded target's token list
            target_vocab = target.token_texts()
        if target_vocab is not None:
            check_same_vocab(target_vocab, self.model.token_texts(), str(path))
        self.cached: list[int] = []  # tokens whose KV is in the drafter's sequence 0
        self.chunk = MAX_ROWS_EXACT if exact else PREFILL_CHUNK_FAST
        self.n_canonical = 0  # leading cells written by whole prefill chunks

    def close(self) -> None:
        self.model.close()

    def begin(self, prompt: list[int]) -> None:
        """Prefill the prompt (all but its last token) as the target does: in whole chunks at
        multiples of the chunk size, reusing cached cells only in whole chunks that an earlier
        prefill wrote, so a request's drafts do not depend on what this process drafted before
        (:class:`adaspark.decoding.engine.Target`, "Prefill and history"). Within a request, drafts
        reuse whatever still matches."""
        end = len(prompt) - 1
        self.model.prefill_in_chunks(prompt[:end], self.cached, self.n_canonical, self.chunk)
        self.cached = list(prompt[:end])
        self.n_canonical = end // self.chunk * self.chunk

    def _sync(self, committed: list[int]) -> np.ndarray:
        """Bring the KV to ``committed`` and return the logits after its last token."""
        # exact mode: one token per decode, as the draft steps decode theirs, so a cell's values
        # do not depend on how the rounds before committed it (a batch of k tokens and k
        # one-token decodes differ on the CPU kernels, by up to 0.72 of a logit on the tiny pair:
        # measured for issue 14) and a block depends only on the committed text
        kept = self.model.catch_up(self.cached, committed,
                                   step=1 if self.exact else None).reused
        self.n_canonical = min(self.n_canonical, kept)
        self.cached = list(committed)
        return self.model.logits(1)[0]

    def _step(self, token: int) -> np.ndarray:
        m = self.model
        m._fill([token], [len(self.cached)], [[0]], [True])
        m._decode()
        self.cached.append(token)
        return m.logits(1)[0]

    def draft(self, committed: list[int], n_positions: int) -> Block:
        if len(committed) + n_positions >= self.model.n_ctx:
            raise EngineError(f"drafter context of {self.model.n_ctx} tokens is full")
        t0 = time.perf_counter()
        K = self.top_k
        toks = np.zeros((n_positions, K), dtype=np.int64)
        probs = np.zeros((n_positions, K))
        logits = self._sync(committed)
        for i in range(n_positions):
            toks[i], probs[i] = top_k_softmax(logits, K)
            if i + 1 < n_positions:
                logits = self._step(int(toks[i, 0]))
        return Block(toks, probs, probs[:, 0].copy(), draft_s=time.perf_counter() - t0)


    def draft_next(self, committed: list[int], n_positions: int, previous: Block) -> Block:
        """The block at ``committed`` when ``previous`` was this drafter's last block, drafted
        at ``committed[:-1]``, and its pick at row 0 is ``committed[-1]``: then this block's
        first rows are ``previous``'s later rows (the same one-token decodes of the same tokens
        at the same positions over the same cells) and only its last row needs a step. The
        replay's labels draft at every position of a text (:mod:`adaspark.replay.labels`), so
        where the drafter's first pick is right a position costs one step instead of a block;
        otherwise (or when the drafter's cache is not that of ``previous``) this is
        :meth:`draft`. Either way the block is :meth:`draft`'s."""
        picks = [int(t) for t in previous.tokens[:, 0]]
        B = len(picks)
        if (B != n_positions or B < 2 or picks[0] != committed[-1]
                or self.cached != [*committed[:-1], *picks[:-1]]
                or len(committed) + n_positions >= self.model.n_ctx):
            return self.draft(committed, n_positions)
        t0 = time.perf_counter()
        toks = np.zeros((n_positions, self.top_k), dtype=np.int64)
        probs = np.zeros((n_positions, self.top_k))
        toks[:-1], probs[:-1] = previous.tokens[1:], previous.probs[1:]
        toks[-1], probs[-1] = top_k_softmax(self._step(picks[-1]), self.top_k)
        return Block(toks, probs, probs[:, 0].copy(), draft_s=time.perf_counter() - t0)


def check_same_vocab(target: list[bytes], drafter: list[bytes], drafter_name: str) -> None:
    """Refuse a drafter whose token list differs from the target's, naming the first
    differing id."""
    for i, (a, b) in enumerate(zip(target, drafter, strict=False)):
        if a != b:
            raise EngineError(
                f"drafter {drafter_name} does not share the target's vocabulary: token {i} is "
                f"{b!r} in the drafter and {a!r} in the target. Use a drafter built on the same "
                "tokenizer."
            )
    if len(target) != len(drafter):
        raise EngineError(
            f"drafter {drafter_name} has {len(drafter)} tokens, the target {len(target)}: the "
            f"first differing id is {min(len(target), len(drafter))}"
        )
