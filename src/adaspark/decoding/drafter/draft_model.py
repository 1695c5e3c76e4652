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

import copy
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from adaspark.decoding.drafter.base import Block, Drafter
from adaspark.decoding.engine import PREFILL_CHUNK_FAST, EngineError, Model, common_prefix
from adaspark.decoding.native import _llama
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
    ``target_vocab``, or the loaded ``target``'s token list, when either is given), in sequence
    ``seq`` of its context.

    Several requests (issue 37). A context built with ``n_seqs`` sequences serves as many
    requests: :meth:`sequences` gives a drafter per sequence, sharing the context, and
    :meth:`draft_together` drafts their blocks in one batched forward per position (each
    request's catch-up rows in one decode, then at each position one row per request), so a
    step's drafting costs B decodes, not B per request. In exact mode a decode holds one row
    (:func:`_draft_group`), so the requests' rows are decoded one at a time, as alone."""

    def __init__(self, path: str | Path, n_ctx: int, *, exact: bool, top_k: int = 8,
                 threads: int | None = None, target_vocab: list[bytes] | None = None,
                 target: Model | None = None, n_gpu_layers: int = 0, n_seqs: int = 1) -> None:
        self.model = Model(path, n_ctx, exact=exact, threads=threads, n_seq_max=n_seqs,
                           n_gpu_layers=n_gpu_layers)
        self.top_k = top_k
        self.exact = exact
        if target_vocab is None and target is not None:  # the loaded target's token list
            target_vocab = target.token_texts()
        if target_vocab is not None:
            check_same_vocab(target_vocab, self.model.token_texts(), str(path))
        self.seq = 0
        self.n_seqs = n_seqs
        self._users = [1]  # drafters open on this context (shared by :meth:`sequences`)
        self.cached: list[int] = []  # tokens whose KV is in this drafter's sequence
        self.chunk = MAX_ROWS_EXACT if exact else PREFILL_CHUNK_FAST
        self.n_canonical = 0  # leading cells written by whole prefill chunks

    def sequences(self) -> list[Drafter]:
        """A drafter per sequence of this context: this one (sequence 0), then one for each
        other, each with its own cached tokens. The context is freed when all are closed."""
        out: list[Drafter] = [self]
        for k in range(1, self.n_seqs):
            d = copy.copy(self)
            d.seq, d.cached, d.n_canonical = k, [], 0
            self._users[0] += 1
            out.append(d)
        return out

    def close(self) -> None:
        if self._users[0] > 0:
            self._users[0] -= 1
            if self._users[0] == 0:
                self.model.close()

    def begin(self, prompt: list[int]) -> None:
        """Prefill the prompt (all but its last token) as the target does: in whole chunks at
        multiples of the chunk size, reusing cached cells only in whole chunks that an earlier
        prefill wrote, so a request's drafts do not depend on what this process drafted before
        (:class:`adaspark.decoding.engine.Target`, "Prefill and history"). Within a request, drafts
        reuse whatever still matches."""
        end = len(prompt) - 1
        self.model.prefill_in_chunks(prompt[:end], self.cached, self.n_canonical, self.chunk,
                                     seq=self.seq)
        self.cached = list(prompt[:end])
        self.n_canonical = end // self.chunk * self.chunk

    def _step(self, token: int) -> np.ndarray:
        return _decode_next([self], [token])[0]

    def draft(self, committed: list[int], n_positions: int) -> Block:
        return self.draft_together([(self, committed, n_positions)])[0]

    @classmethod
    def draft_together(cls, asks: Sequence[tuple[Drafter, list[int], int]]) -> list[Block]:
        """The blocks of several requests, each ``(drafter, committed, n_positions)``: the
        drafters that share a context draft in one batched forward per position (the class
        docstring); each block's ``draft_s`` is the time of its group's drafting (what each of
        its requests waited)."""
        groups: dict[int, list[int]] = {}
        for i, (d, _c, _n) in enumerate(asks):
            if not isinstance(d, DraftModelDrafter):
                raise TypeError(f"draft_together takes draft-model drafters, not {type(d)}")
            groups.setdefault(id(d.model), []).append(i)
        out: list[Block | None] = [None] * len(asks)
        for members in groups.values():
            sub = [asks[i] for i in members]
            for i, b in zip(members, _draft_group(sub), strict=True):  # type: ignore[arg-type]
                out[i] = b
        return out  # type: ignore[return-value]

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


def _decode_next(drafters: Sequence[DraftModelDrafter], tokens: Sequence[int]) -> np.ndarray:
    """One decode on the drafters' shared context: ``tokens[k]`` after drafter ``k``'s cached
    tokens, in its sequence, each then cached; the logits of those rows (a view)."""
    m = drafters[0].model
    m._fill(list(tokens), [len(d.cached) for d in drafters], [[d.seq] for d in drafters],
            [True] * len(drafters))
    m._decode()
    for d, t in zip(drafters, tokens, strict=True):
        d.cached.append(int(t))
    return m.logits(len(drafters))


def _draft_group(asks: Sequence[tuple[DraftModelDrafter, list[int], int]]) -> list[Block]:
    """:meth:`DraftModelDrafter.draft_together` for drafters on one context: bring each
    sequence to its committed tokens (the cells past the common prefix dropped, the rest decoded,
    every request's rows in one batch) with the logits after each last token, then at each
    position one row per request that drafts that deep. In exact mode every decode holds one row
    and a request's catch-up one token (a batch of k tokens and k one-token decodes differ on the
    CPU kernels, by up to 0.72 of a logit on the tiny pair: measured for issue 14), so a block
    depends only on its committed text."""
    t0 = time.perf_counter()
    m = asks[0][0].model
    exact = asks[0][0].exact
    K = asks[0][0].top_k
    ll_rm = _llama().llama_memory_seq_rm
    toks = [np.zeros((n, K), dtype=np.int64) for _d, _c, n in asks]
    probs = [np.zeros((n, K)) for _d, _c, n in asks]
    # (token, position, seq, the ask whose last catch-up row it is, else -1)
    rows: list[tuple[int, int, int, int]] = []
    for i, (d, committed, n) in enumerate(asks):
        if not committed:
            raise EngineError("cannot draft after an empty sequence")
        if len(committed) + n >= m.n_ctx:
            raise EngineError(f"drafter context of {m.n_ctx} tokens is full")
        keep = common_prefix(d.cached, committed[:-1])
        ll_rm(m.mem, d.seq, keep, -1)
        d.n_canonical = min(d.n_canonical, keep)
        todo = committed[keep:]
        rows += [(t, keep + j, d.seq, i if j == len(todo) - 1 else -1)
                 for j, t in enumerate(todo)]
        d.cached = list(committed)
    step = 1 if exact else m.n_batch
    for start in range(0, len(rows), step):
        part = rows[start:start + step]
        m._fill([r[0] for r in part], [r[1] for r in part], [[r[2]] for r in part],
                [r[3] >= 0 for r in part])
        m._decode()
        owners = [r[3] for r in part if r[3] >= 0]
        logits = m.logits(len(owners))
        for k, i in enumerate(owners):
            toks[i][0], probs[i][0] = top_k_softmax(logits[k], K)
    for pos in range(1, max(n for _d, _c, n in asks)):
        live = [i for i, (_d, _c, n) in enumerate(asks) if n > pos]
        for part in ([[i] for i in live] if exact else [live]):
            logits = _decode_next([asks[i][0] for i in part],
                                  [int(toks[i][pos - 1, 0]) for i in part])
            for k, i in enumerate(part):
                toks[i][pos], probs[i][pos] = top_k_softmax(logits[k], K)
    spent = time.perf_counter() - t0
    return [Block(t, p, p[:, 0].copy(), draft_s=spent) for t, p in zip(toks, probs, strict=True)]


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
