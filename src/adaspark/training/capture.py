"""What the drafter learns from: the target's features at the drafter's layers and its greedy
labels, captured over training text (issue 15).

Two calls of the engine, both in fast mode (the serving path's kernels):

* :func:`greedy_replies`: the target's own greedy replies to prompts, several sequences decoded
  in one batch (one row per sequence per step, as llama-server's parallel slots do), so that a
  2-core machine makes them at several times one sequence's rate; with ``layers`` it keeps the
  layer inputs of every row it decodes (the prompt's prefill and each reply step), so a reply is
  captured as it is made (:func:`reply_document`): its labels are its own tokens;
* :func:`capture`: one prefill over a plain text with logits on every row, keeping each row's
  argmax (the target's greedy choice after that prefix) and the inputs of the drafter's target
  layers (``llama_get_embeddings_layer_inp``, the DSpark issue's capture call).

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
    ll = _llama()
    toks = [int(t) for t in tokens]
    if len(toks) >= model.seq_cells:
        raise EngineError(f"a text of {len(toks)} tokens does not fit the {model.seq_cells} "
                          "cells of a capture sequence: raise its n_ctx or cut the text shorter")
    ll.llama_memory_seq_rm(model.mem, seq, -1, -1)
    labels = np.zeros(len(toks), dtype=np.int32)
    parts = []
    step = min(chunk, model.n_batch)
    for start in range(0, len(toks), step):
        part = toks[start:start + step]
        n = len(part)
        model._fill(part, range(start, start + n), [[seq]] * n, [True] * n)
        model._decode()
        labels[start:start + n] = model.logits(n).argmax(axis=1)
        parts.append(layer_rows(model, layers, n))
    ll.llama_memory_seq_rm(model.mem, seq, -1, -1)
    return Captured(np.asarray(toks, dtype=np.int32), labels, np.concatenate(parts, axis=0),
                    anchor_from)


def layer_rows(model: Model, layers: Sequence[int], n: int) -> np.ndarray:
    """The last decode's ``n`` batch rows of the inputs of ``layers`` (:func:`enable_capture`
    first), concatenated per row in ``layers`` order, as float16 ``(n, len(layers) * n_embd)``."""
    x = ext()
    d = int(_llama().llama_model_n_embd(model.model))
    out = np.empty((n, len(layers) * d), dtype=np.float16)
    for k, lid in enumerate(layers):
        out[:, k * d:(k + 1) * d] = np.ctypeslib.as_array(
            x.get_embeddings_layer_inp(model.ctx, int(lid)), shape=(n, d))
    return out


def reply_rows(prompt: Sequence[int], reply: Sequence[int]) -> list[int]:
    """The rows the target decoded for a greedy reply: the prompt and every reply token but the
    last (whose row was never decoded); a reply document's tokens (:func:`reply_document`)."""
    return [int(t) for t in prompt] + [int(t) for t in reply[:-1]]


def reply_document(prompt: Sequence[int], reply: Sequence[int],
                   feats: list[np.ndarray]) -> Captured:
    """A prompt and the target's greedy reply as one captured text: the rows the target decoded
    (the prompt and every reply token but the last), their layer inputs ``feats`` in order, and
    as labels each row's next token, which is the target's argmax from the prompt's last row on
    (the reply is greedy). The prompt's other rows were decoded without logits: their labels are
    the text's next tokens, context only (``anchor_from``, the reply's first token, is where
    anchors and read labels start)."""
    toks = np.asarray(reply_rows(prompt, reply), dtype=np.int32)
    labels = np.asarray([*toks[1:], reply[-1]], dtype=np.int32)
    f = np.concatenate(feats, axis=0)
    if f.shape[0] != toks.shape[0]:
        raise EngineError(f"captured {f.shape[0]} feature rows for {toks.shape[0]} decoded rows")
    return Captured(toks, labels, f, len(prompt))


def greedy_replies(model: Model, prompts: Sequence[Sequence[int]], max_tokens: int, *,
                   parallel: int = 8, layers: Sequence[int] | None = None,
                   on_done: Callable[[int, list[int], Captured | None], None] | None = None,
                   ) -> list[list[int]]:
    """The target's greedy reply to each prompt (at most ``max_tokens``, ending at an
    end-of-generation token, which is kept), ``parallel`` sequences per decode step, one row per
    sequence (as llama-server's parallel slots decode). A freed slot takes the next prompt.

    With ``layers`` (:func:`enable_capture` first) the inputs of those target layers are kept for
    every row the target decodes, the prompt's prefill and each reply step, so a reply's features
    come with it at no second prefill: ``on_done(i, reply, captured)`` gets the
    :func:`reply_document` (``None`` without ``layers``) as each reply ends."""
    ll = _llama()
    parallel = max(1, min(parallel, model.n_seq_max))
    room = model.seq_cells
    out: list[list[int] | None] = [None] * len(prompts)
    todo = list(range(len(prompts)))[::-1]
    slots: dict[int, tuple[int, list[int], int]] = {}  # seq -> (prompt index, reply, next pos)
    nxt: dict[int, int] = {}  # seq -> token to decode next
    feats: dict[int, list[np.ndarray]] = {}  # seq -> captured rows so far

    def start(seq: int) -> None:
        i = todo.pop()
        p = [int(t) for t in prompts[i]]
        if len(p) + max_tokens >= room:
            raise EngineError(f"prompt {i} ({len(p)} tokens) and {max_tokens} reply tokens do "
                              f"not fit the {room} cells of a sequence: raise n_ctx")
        ll.llama_memory_seq_rm(model.mem, seq, -1, -1)
        feats[seq] = []
        for s in range(0, len(p), model.n_batch):
            part = p[s:s + model.n_batch]
            last = s + len(part) == len(p)
            model._fill(part, range(s, s + len(part)), [[seq]] * len(part),
                        [last and j == len(part) - 1 for j in range(len(part))])
            model._decode()
            if layers:
                feats[seq].append(layer_rows(model, layers, len(part)))
        first = int(model.logits(1)[0].argmax())
        slots[seq] = (i, [first], len(p))
        nxt[seq] = first

    def finish(seq: int) -> None:
        i, reply, _ = slots.pop(seq)
        nxt.pop(seq)
        rows = feats.pop(seq)
        ll.llama_memory_seq_rm(model.mem, seq, -1, -1)
        out[i] = reply
        if on_done is not None:
            doc = reply_document(prompts[i], reply, rows) if layers else None
            on_done(i, reply, doc)

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
        rows = layer_rows(model, layers, len(seqs)) if layers else None
        for k, (s, tok) in enumerate(zip(seqs, picks, strict=True)):
            i, reply, pos = slots[s]
            reply.append(int(tok))
            slots[s] = (i, reply, pos + 1)
            nxt[s] = int(tok)
            if rows is not None:
                feats[s].append(rows[k:k + 1].copy())   # not a view: the step's rows go
    return [r if r is not None else [] for r in out]
