"""What the drafter learns from: the target's features at the drafter's layers and its greedy
labels, captured over training text (issue 15).

Two calls of the engine, both in fast mode (the serving path's kernels):

* :func:`greedy_replies`: the target's own greedy replies to prompts, several sequences decoded
  in one batch (one row per sequence per step, as llama-server's parallel slots do), so that a
  2-core machine makes them at a few times one sequence's rate;
* :func:`capture`: one prefill over a text with logits on every row, keeping each row's argmax
  (the target's greedy choice after that prefix) and the inputs of the drafter's target layers
  (``llama_get_embeddings_layer_inp``, the DSpark issue's capture call).

A captured text is a :class:`Captured`: tokens, labels (``labels[j]`` is the target's argmax at
position ``j``, its prediction of token ``j + 1``), features (float16) and the first position
that may be an anchor (the reply's first token for a chat reply, 1 for plain text).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from adaspark.decoding.engine import EngineError, Model, _llama
from adaspark.decoding.llama_ext import ext


@dataclass
class Captured:
    tokens: np.ndarray  # int32 (S,)
    labels: np.ndarray  # int32 (S,): the target's argmax at each position
    feats: np.ndarray  # float16 (S, n_feat * n_embd), layer inputs in target_layers order
    anchor_from: int  # first position that may be an anchor

    def __len__(self) -> int:
        return int(self.tokens.shape[0])


def enable_capture(model: Model, layers: Sequence[int]) -> None:
    """Ask the target context to keep the inputs of ``layers`` for every row it decodes."""
    x = ext()
    for lid in layers:
        x.set_embeddings_layer_inp(model.ctx, int(lid), True)


def capture(model: Model, tokens: Sequence[int], layers: Sequence[int], *, anchor_from: int,
            chunk: int = 256, seq: int = 0) -> Captured:
    """Prefill ``tokens`` into sequence ``seq`` (emptied first) with logits on every row; keep
    each row's argmax and the rows' inputs of ``layers`` (:func:`enable_capture` first)."""
    ll, x = _llama(), ext()
    toks = [int(t) for t in tokens]
    if len(toks) >= model.n_ctx:
        raise EngineError(f"a text of {len(toks)} tokens does not fit the capture context of "
                          f"{model.n_ctx}: raise its n_ctx or cut the text shorter")
    ll.llama_memory_seq_rm(model.mem, seq, -1, -1)
    d = int(ll.llama_model_n_embd(model.model))
    labels = np.zeros(len(toks), dtype=np.int32)
    feats = np.zeros((len(toks), len(layers) * d), dtype=np.float16)
    step = min(chunk, model.n_batch)
    for start in range(0, len(toks), step):
        part = toks[start:start + step]
        n = len(part)
        model._fill(part, range(start, start + n), [[seq]] * n, [True] * n)
        model._decode()
        labels[start:start + n] = model.logits(n).argmax(axis=1)
        for k, lid in enumerate(layers):
            cap = np.ctypeslib.as_array(x.get_embeddings_layer_inp(model.ctx, int(lid)),
                                        shape=(n, d))
            feats[start:start + n, k * d:(k + 1) * d] = cap
    ll.llama_memory_seq_rm(model.mem, seq, -1, -1)
    return Captured(np.asarray(toks, dtype=np.int32), labels, feats, anchor_from)


def greedy_replies(model: Model, prompts: Sequence[Sequence[int]], max_tokens: int, *,
                   parallel: int = 8, on_done: Callable[[int, list[int]], None] | None = None,
                   ) -> list[list[int]]:
    """The target's greedy reply to each prompt (at most ``max_tokens``, ending at an
    end-of-generation token, which is kept), ``parallel`` sequences per decode step. A freed slot
    takes the next prompt. ``on_done(i, reply)`` is called as each reply ends."""
    ll = _llama()
    parallel = max(1, min(parallel, model.n_seq_max))
    out: list[list[int] | None] = [None] * len(prompts)
    todo = list(range(len(prompts)))[::-1]
    slots: dict[int, tuple[int, list[int], int]] = {}  # seq -> (prompt index, reply, next pos)
    nxt: dict[int, int] = {}  # seq -> token to decode next

    def start(seq: int) -> None:
        i = todo.pop()
        p = [int(t) for t in prompts[i]]
        if len(p) + max_tokens >= model.n_ctx:
            raise EngineError(f"prompt {i} ({len(p)} tokens) and {max_tokens} reply tokens do "
                              f"not fit the context of {model.n_ctx}")
        ll.llama_memory_seq_rm(model.mem, seq, -1, -1)
        for s in range(0, len(p), model.n_batch):
            part = p[s:s + model.n_batch]
            last = s + len(part) == len(p)
            model._fill(part, range(s, s + len(part)), [[seq]] * len(part),
                        [last and j == len(part) - 1 for j in range(len(part))])
            model._decode()
        first = int(model.logits(1)[0].argmax())
        slots[seq] = (i, [first], len(p))
        nxt[seq] = first

    def finish(seq: int) -> None:
        i, reply, _ = slots.pop(seq)
        nxt.pop(seq)
        ll.llama_memory_seq_rm(model.mem, seq, -1, -1)
        out[i] = reply
        if on_done is not None:
            on_done(i, reply)

    for seq in range(parallel):
        if todo:
            start(seq)
    while slots:
        for seq in [s for s, (_, r, _) in slots.items()
                    if len(r) >= max_tokens or model.is_eog(r[-1])]:
            finish(seq)
            if todo:
                start(seq)
        if not slots:
            break
        seqs = sorted(slots)
        model._fill([nxt[s] for s in seqs], [slots[s][2] for s in seqs], [[s] for s in seqs],
                    [True] * len(seqs))
        model._decode()
        picks = model.logits(len(seqs)).argmax(axis=1)
        for s, tok in zip(seqs, picks, strict=True):
            i, reply, pos = slots[s]
            reply.append(int(tok))
            slots[s] = (i, reply, pos + 1)
            nxt[s] = int(tok)
    return [r if r is not None else [] for r in out]
