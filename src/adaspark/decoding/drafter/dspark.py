"""A DSpark (or DFlash) block drafter: one forward of a ``dflash``-architecture GGUF gives the
whole block (§2.1), from hidden states captured in the target (issue 13, "Our engine").

The drafter's KV holds, per committed position, the target's captured features: the inputs of
the file's ``target_layers`` (concatenated in that order, ``n_embd`` floats each), written as an
embedding batch. It spans exactly the committed text the target has decoded (every committed
token but the anchor): the target calls :meth:`DSparkDrafter.inject` through its committed-rows
hook (:data:`adaspark.decoding.engine.CommittedRows`) after every prefill chunk and every
verify's commit, with the rows the commit kept, so a verify's rejected rows are never injected.
In exact mode the accepted path is decoded again at the head of the next verify (the target's
backlog); its features were injected from the verify that accepted it (exact mode's tree rows are
bit-identical to the same rows as a chain), so the backlog rows are not injected twice.

One drafter forward per round decodes the file's *full* block ``[anchor, MASK x (B-1)]`` at the
anchor's position and the ones after it, and an arm takes a prefix of it (attention inside the
block is non-causal: a shorter block would give other drafts), so every arm sees the same block at
the same anchor; the block's cells are removed right after. For §3.3's Eq. (6), the confidence is
the file's confidence head h and the pick's share is computed from the row's softmax, two distinct
inputs.

Facts of the vendored llama.cpp relied on (``src/models/dflash.cpp``, ``src/llama-context.cpp``,
``src/llama-batch.cpp``, ``common/speculative.cpp``; nothing copied): a dflash drafter without its
own ``token_embd``/``output`` needs ``llama_context_params.ctx_other`` set to the target's
context; a token batch's rows are all draft slots when ``dflash.sample_from_anchor`` is true (row
``i`` drafts the token at the anchor's position ``+ i + 1``); the DSpark Markov head biases row
``i`` by ``markov_w2 @ markov_w1[argmax(row i-1)]`` (row 0 by the anchor) in the graph, and is
skipped when a block is longer than ``dflash.block_size``, and needs equal-size blocks (one here:
one sequence); the confidence head's ``sigmoid(conf_proj . [h_i; markov_w1[prev_i]] + b)`` is
output through ``llama_get_embeddings_nextn``, broadcast over ``n_embd`` floats per output row
(``llama_set_embeddings_nextn(ctx, true, masked=true)``); block-internal attention is non-causal
(``llama_set_causal_attn(ctx, false)``) unless ``dflash.attention.causal`` is true; the target's
layer-input capture (``llama_get_embeddings_layer_inp``) is indexed by batch row; an embedding
row of a ``llama_batch_ext`` must be ``len(target_layers) * n_embd_target`` floats.
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from adaspark.decoding.drafter.base import Block, Drafter
from adaspark.decoding.drafter.draft_model import top_k_softmax
from adaspark.decoding.drafter.dspark_file import (
    DSparkFile,
    DSparkFileError,
    check_for_target,
    read_dspark_file,
    read_target,
)
from adaspark.decoding.engine import EngineError, Target, _llama
from adaspark.decoding.llama_ext import ext
from adaspark.decoding.native import context_params, free_native, load_gguf, model_meta

#: Rows per injection batch (the drafter context's batch size; a prefill chunk is at most 128).
INJECT_BATCH = 512


def block_tokens(anchor: int, mask: int, block: int) -> list[int]:
    """The drafter's token block: the anchor, then ``block - 1`` mask tokens."""
    return [int(anchor)] + [int(mask)] * (block - 1)


def batch_pos(p: int):
    """A ``llama_batch_ext`` row's position (``llama_batch_ext_set_pos`` reads up to four, for
    M-RoPE models; a text model reads the first): ``p`` three times, then 0."""
    return (_llama().llama_pos * 4)(p, p, p, 0)


def gather_features(layers: Sequence[np.ndarray], rows: Sequence[int]) -> np.ndarray:
    """Per row, the concatenation (in ``target_layers`` order) of each layer's captured input:
    ``layers[k]`` is layer k's capture, ``(n_batch_rows, n_embd)``."""
    idx = np.asarray(list(rows), dtype=np.int64)
    return np.ascontiguousarray(np.concatenate([a[idx] for a in layers], axis=1),
                                dtype=np.float32)


class DSparkDrafter(Drafter):
    """A ``dflash`` GGUF (DFlash or DSpark) drafting for ``target``, whose context it borrows.

    The keyword contract is :class:`~adaspark.decoding.drafter.draft_model.DraftModelDrafter`'s
    plus ``target`` (the loaded :class:`~adaspark.decoding.engine.Target`) and
    ``block_positions`` (the most positions a round may ask for: the file's block by default).
    """

    name = "dspark"
    reads_target = True
    one_forward = True

    def __init__(self, path: str | Path, n_ctx: int, *, exact: bool, top_k: int = 8,
                 threads: int | None = None, target_vocab: list[bytes] | None = None,
                 target: Target | None = None, n_gpu_layers: int = 0) -> None:
        del target_vocab  # the tokenizer is checked against the target's GGUF below
        if target is None:
            raise EngineError("drafter kind dspark reads the target's hidden states: it needs "
                              "the loaded target (target=)")
        if target.on_committed_rows is not None:
            raise EngineError("the target already feeds another drafter's features; build one "
                              "DSpark drafter per target")
        self.info: DSparkFile = check_for_target(read_dspark_file(path), read_target(target.path))
        if not self.info.sample_from_anchor:
            raise DSparkFileError(
                f"{path}: dflash.sample_from_anchor=false (a bonus-anchor block, whose row 0 is "
                "not a draft) is not supported by our engine yet; use a file with "
                "sample_from_anchor true")
        ll = _llama()
        self.target, self.exact, self.top_k = target, exact, top_k
        self.path = Path(path)
        self.model, _ = load_gguf(self.path, exact=exact, what="the drafter ",
                                  n_gpu_layers=n_gpu_layers)
        cp = context_params(n_ctx, max(INJECT_BATCH, self.info.block_size), n_seq_max=1,
                            exact=exact, threads=threads)
        cp.ctx_other = target.ctx  # the drafter borrows the target's embeddings and head
        self.ctx = ll.llama_init_from_model(self.model, cp)
        if not self.ctx:
            ll.llama_model_free(self.model)
            self.model = None
            raise EngineError(f"llama.cpp could not create a context of {n_ctx} tokens for the "
                              f"drafter {path}")
        self.n_ctx = min(n_ctx, int(ll.llama_n_ctx(self.ctx)))
        self.mem = ll.llama_get_memory(self.ctx)
        self.n_vocab = int(ll.llama_vocab_n_tokens(ll.llama_model_get_vocab(self.model)))
        self.n_embd = int(ll.llama_model_n_embd(self.model))
        self.n_embd_tgt = int(ll.llama_model_n_embd(target.model))
        self.block = self.info.block_size
        self.block_positions = self.block
        vocab = ll.llama_model_get_vocab(self.model)
        self.mask = (self.info.mask_token_id if self.info.mask_token_id is not None
                     else int(ll.llama_vocab_mask(vocab)))
        x = ext()
        x.set_embeddings_nextn(self.ctx, True, True)
        ll.llama_set_causal_attn(self.ctx,
                                 model_meta(self.model, "dflash.attention.causal") == "true")
        for lid in self.info.target_layers:
            x.set_embeddings_layer_inp(target.ctx, lid, True)
        self._batch = ll.llama_batch_ext_init(self.ctx)
        self.inject_s = 0.0  # injection time since the last block (added to its draft_s)
        self.prefill_inject_s = 0.0  # the request's prompt (inside the target's prefill time)
        target.on_committed_rows = self.inject

    def close(self) -> None:
        ll = _llama()
        if getattr(self, "target", None) is not None and \
                self.target.on_committed_rows == self.inject:
            self.target.on_committed_rows = None
        if getattr(self, "_batch", None):
            ll.llama_batch_ext_free(self._batch)
            self._batch = None
        free_native(self)

    # -- the drafter's KV: the committed text's features ---------------------------------------

    def kv_end(self) -> int:
        """One past the last position in the drafter's KV (0 when empty)."""
        return int(_llama().llama_memory_seq_pos_max(self.mem, 0)) + 1

    def inject(self, rows: Sequence[int], pos0: int) -> None:
        """The target's committed-rows hook: drop the drafter's cells from ``pos0`` on, then write
        the captured features of the target's batch ``rows`` at ``pos0, pos0 + 1, ...``."""
        t0 = time.perf_counter()
        ll, x = _llama(), ext()
        rows = list(rows)
        ll.llama_memory_seq_rm(self.mem, 0, pos0, -1)
        if rows:
            n_rows = max(rows) + 1
            caps = [np.ctypeslib.as_array(x.get_embeddings_layer_inp(self.target.ctx, lid),
                                          shape=(n_rows, self.n_embd_tgt))
                    for lid in self.info.target_layers]
            feats = gather_features(caps, rows)
            width = feats.shape[1]
            base = feats.ctypes.data
            for off in range(0, len(rows), INJECT_BATCH):
                ll.llama_batch_ext_clear(self._batch)
                for i in range(off, min(off + INJECT_BATCH, len(rows))):
                    row = ctypes.cast(base + i * width * 4, ctypes.POINTER(ctypes.c_float))
                    idx = ll.llama_batch_ext_add_embd(self._batch, 0,
                                                      ll.llama_embd(row, 1, width))
                    pos = batch_pos(pos0 + i)
                    if idx < 0 or not ll.llama_batch_ext_set_pos(self._batch, idx, pos):
                        raise EngineError(f"could not add feature row {i} to the drafter's "
                                          f"batch (code {idx})")
                rc = ll.llama_process(self.ctx, ll.LLAMA_PROCESS_TYPE_DECODE, self._batch)
                if rc != 0:
                    raise EngineError(f"the drafter's feature injection failed with code {rc} "
                                      "(1 = its context is full: raise drafter.n_ctx)")
        self.inject_s += time.perf_counter() - t0

    def begin(self, prompt: list[int]) -> None:
        """The target's prefill injected the prompt's features; check the KV spans them."""
        self.prefill_inject_s, self.inject_s = self.inject_s, 0.0
        want = len(prompt) - 1
        _llama().llama_memory_seq_rm(self.mem, 0, want, -1)
        if self.kv_end() != want:
            raise EngineError(
                f"the DSpark drafter's KV spans {self.kv_end()} positions, the prompt's decoded "
                f"text {want}: the target was prefilled before this drafter was attached; build "
                "the drafter right after the target, before its first prefill")

    # -- one forward per round -----------------------------------------------------------------

    def draft(self, committed: list[int], n_positions: int) -> Block:
        """The file's full block at the anchor ``committed[-1]``; the first ``n_positions``
        rows, top-K each.

        Picks are the in-graph chain (each row's argmax, under the Markov bias of the pick before
        it); a row's siblings are the row's other top-K tokens. A sibling hangs from the same
        parent as the row's pick (the pick before, or the anchor) and is a leaf of the candidate
        tree, so the row's in-graph bias is exactly its own parent's
        (:class:`~adaspark.decoding.drafter.base.Block`).
        ``probs`` are each row's softmax (so ``share``, the pick's share of the top-K mass, is the
        drafter's distribution) and ``confidence`` is the confidence head h, a separate output:
        Eq. (6)'s two inputs (§3.3) stay distinct. A DFlash file (no confidence head) gets the
        pick's probability as its confidence, as a draft model does."""
        B = self.block
        if n_positions > B:
            raise EngineError(f"a round asked for {n_positions} positions, but the DSpark file's "
                              f"block is {B}: set drafter.block_positions to at most {B}")
        t0 = time.perf_counter()
        ll = _llama()
        P = len(committed) - 1
        if P + B > self.n_ctx:
            raise EngineError(f"drafter context of {self.n_ctx} tokens is full")
        if self.kv_end() != P:
            raise EngineError(
                f"the DSpark drafter's KV spans {self.kv_end()} positions, the committed text "
                f"{P}: it is out of step with the target (drafted without the target's hook?)")
        ll.llama_batch_ext_clear(self._batch)
        for i, tok in enumerate(block_tokens(committed[-1], self.mask, B)):
            idx = ll.llama_batch_ext_add_token(self._batch, 0, tok)
            pos = batch_pos(P + i)
            ll.llama_batch_ext_set_pos(self._batch, idx, pos)
            ll.llama_batch_ext_set_output_logits(self._batch, idx, True)
        rc = ll.llama_process(self.ctx, ll.LLAMA_PROCESS_TYPE_DECODE, self._batch)
        if rc != 0:
            raise EngineError(f"the drafter's block decode failed with code {rc}")
        logits = np.ctypeslib.as_array(ll.llama_get_logits(self.ctx), shape=(B, self.n_vocab))
        K = self.top_k
        toks = np.zeros((n_positions, K), dtype=np.int64)
        probs = np.zeros((n_positions, K))
        for i in range(n_positions):
            toks[i], probs[i] = top_k_softmax(logits[i], K)
        if self.info.has_confidence_head:
            h = np.ctypeslib.as_array(ext().get_embeddings_nextn(self.ctx),
                                      shape=(B, self.n_embd))
            conf = h[:n_positions, 0].astype(np.float64)
        else:
            conf = probs[:, 0].copy()
        ll.llama_memory_seq_rm(self.mem, 0, P, -1)  # the block's cells go
        draft_s = time.perf_counter() - t0 + self.inject_s
        self.inject_s = 0.0
        return Block(toks, probs, conf, draft_s=draft_s)
