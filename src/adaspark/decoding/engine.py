"""The target engine: llama.cpp through llama-cpp-python's C API, one ``llama_decode`` per verify.

§2.2 and §3.5 of the paper, on HARNESS's recipe. Sequence 0 holds the committed prefix except the
anchor (the last committed token, not yet decoded). A verify of a tree puts every row in one
batch: the anchor and each candidate at position ``P + depth``, each row tagged with the sequence
ids of every leaf below it (a node belongs to every root-to-leaf sequence through it), after the
prefix was shared with each leaf sequence by ``llama_memory_seq_cp``. Logits come back for every
row. Committing copies the accepted path's cells from a leaf below it into sequence 0 and drops
every other sequence (``llama_memory_seq_keep``), so the main sequence always spans exactly the
committed positions. A target can also be one request's part of a shared context
(:mod:`adaspark.decoding.slots`): then its sequences are a range of the context's, and a verify's
rows are staged (:meth:`Target.stage`) into one batch with the other requests'.

Kernel modes (HARNESS "Kernels"): *fast* is llama.cpp's default CPU kernels; *exact* turns off
weight repacking (``use_extra_bufts=False``) and the tiled matmul (``GGML_CPU_TILED_MM=0``) and
forces flash attention, so that tree rows of up to 63 rows are bit-identical to the same rows
verified as a chain. The tiled-matmul switch is read once per process, so a process has one mode.
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from adaspark.decoding.native import (
    EngineError,
    _llama,
    context_params,
    context_record,
    free_native,
    load_gguf,
    model_meta,
    set_kernel_mode,
)
from adaspark.decoding.tree import MAX_ROWS_EXACT, MAX_ROWS_FAST, Tree, walk_path

#: Prefill writes the KV cache in chunks that start at multiples of this many positions, and a
#: later prefill reuses only whole chunks (see :class:`Target`). Exact mode uses its widest
#: batch, 63 rows. In fast mode a smaller chunk means fewer tokens decoded again at each turn,
#: a larger one a faster prefill: measured here (embedded target, 2,048 tokens, 2 threads),
#: 64-row chunks prefill at 72-79 tok/s, 128 at 87, 256 at 90, 512 at 86-89.
PREFILL_CHUNK_FAST = 128

#: The committed-rows hook (issue 13): called right after a decode with the batch rows that hold
#: committed tokens, in position order, and the position of the first (the rows' positions are
#: consecutive). A drafter that reads the target's captured hidden states (DSpark) sets it on the
#: target (:attr:`Model.on_committed_rows`) to inject exactly the committed rows; ``None`` (the
#: default) costs nothing.
CommittedRows = Callable[[Sequence[int], int], None]


#: The scratch sequence of exact mode's padding row (:meth:`Target._decode`): the last of the
#: target's 64, never a tree's (a tree of n rows uses sequences 1..leaves, and a one-row batch
#: holds no tree).
PAD_SEQ = 63


@dataclass
class VerifyResult:
    """What one verify returns: per row the target's argmax, optionally the top-2 logit gap and
    the logits themselves, and its times (seconds).

    ``verify_s`` is the whole verify of the tree's rows, the time the cost model learns (§3.2):
    ``build_s`` (sharing the prefix with each leaf sequence, ``llama_memory_seq_cp``, and filling
    the batch: both grow with the width), ``decode_s`` (the forward, ``llama_decode``) and the
    read-out of the argmax (and gaps) after it (``readout_s``: reading the rows' logits over the
    vocabulary, llama.cpp's output read by numpy). ``backlog_rows``: rows exact mode decodes again
    at the batch's head (the previous round's path, the class docstring), so its time is that of
    ``backlog_rows`` more rows; fast mode has none. Measurement runs use fast mode."""

    argmax: np.ndarray
    verify_s: float
    build_s: float = 0.0
    decode_s: float = 0.0
    readout_s: float = 0.0
    backlog_rows: int = 0
    gap: np.ndarray | None = None
    logits: np.ndarray | None = None


@dataclass(frozen=True)
class Prefill:
    """What a prefill did: ``reused`` leading cells kept from the cache (the prompt tokens that
    llama-server reports as ``cache_n``), ``decoded`` tokens decoded after them, and the seconds
    the decodes took."""

    reused: int
    decoded: int
    seconds: float


@dataclass(frozen=True)
class Commit:
    """What a commit accepted (§2.2): ``path``, the tree rows of the greedy path from the anchor
    (row 0) on, and ``tokens``, the newly committed tokens: the accepted candidates and the
    target's argmax after the path (the bonus)."""

    path: tuple[int, ...]
    tokens: tuple[int, ...]


#: A token that differs from plain greedy decoding is a near tie when the target's two best
#: logits at that row differ by less than this (HARNESS "Near tie").
NEAR_TIE_GAP = 0.5


def top2_gap(logits: np.ndarray) -> np.ndarray:
    """Per row, best logit minus second best (a near tie is a gap under 0.5, HARNESS)."""
    part = np.partition(logits, -2, axis=1)
    return (part[:, -1] - part[:, -2]).astype(np.float64)


def common_prefix(a: Sequence[object], b: Sequence[object]) -> int:
    """How many leading items (tokens, or a text's characters) ``a`` and ``b`` share."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def reusable_prefix(common: int, canonical: int, chunk: int) -> int:
    """How many leading cached cells a prefill may keep: the common prefix with the new prompt,
    no further than the cells whole prefill chunks wrote, rounded down to a whole chunk."""
    return min(common, canonical) // chunk * chunk


def prefill_chunks(start: int, end: int, chunk: int) -> list[tuple[int, int]]:
    """Positions ``[start, end)`` cut at the multiples of ``chunk`` (``start`` is one)."""
    if start % chunk:
        raise ValueError(f"a prefill starts at a chunk boundary, not at {start}")
    return [(a, min(a + chunk, end)) for a in range(start, end, chunk)]


class Model:
    """A loaded GGUF with its vocabulary and chat template, and one context over it."""

    def __init__(
        self,
        path: str | Path,
        n_ctx: int,
        *,
        exact: bool,
        threads: int | None = None,
        n_seq_max: int = 64,
        n_batch: int = 512,
        kv_unified: bool = True,
        n_gpu_layers: int = 0,
    ) -> None:
        path = Path(path)
        if not path.is_file():
            raise EngineError(
                f"model file {path} does not exist. Run `adaspark models` for the embedded "
                "models, or point target.path / drafter.path at your GGUF file"
            )
        set_kernel_mode(exact)
        ll = _llama()
        self.path = path
        self.exact = exact
        self.n_batch = n_batch
        self.model, mp = load_gguf(path, exact=exact, n_gpu_layers=n_gpu_layers)
        self.vocab = ll.llama_model_get_vocab(self.model)
        self.n_vocab = int(ll.llama_vocab_n_tokens(self.vocab))
        cp = context_params(n_ctx, n_batch, n_seq_max=n_seq_max, exact=exact, threads=threads,
                            kv_unified=kv_unified)
        self.ctx = ll.llama_init_from_model(self.model, cp)
        if not self.ctx:
            raise EngineError(f"llama.cpp could not create a context of {n_ctx} tokens for {path}")
        # llama.cpp caps the batch (and the rows that may carry logits) at the context asked
        # for, then pads the context to a multiple of 256: batches and prompts follow what was
        # asked for, so neither outgrows the context's buffers (a native abort otherwise).
        self.n_ctx = min(n_ctx, int(ll.llama_n_ctx(self.ctx)))
        self.n_batch = min(n_batch, int(ll.llama_n_batch(self.ctx)))
        self.mem = ll.llama_get_memory(self.ctx)
        self.n_seq_max = n_seq_max
        #: cells one sequence may hold: the whole context in a unified cache, else its share
        self.seq_cells = self.n_ctx if kv_unified else self.n_ctx // max(1, n_seq_max)
        self.context_params = context_record(cp, mp, exact=exact, n_ctx_asked=n_ctx)
        self._batch = ll.llama_batch_init(max(n_batch, MAX_ROWS_FAST), 0, n_seq_max)
        self.add_bos = bool(ll.llama_vocab_get_add_bos(self.vocab))
        self._pieces: dict[tuple[int, bool], bytes] = {}
        self.on_committed_rows: CommittedRows | None = None
        self.n_decodes = 0  # llama_decode calls on this context

    def close(self) -> None:
        ll = _llama()
        if getattr(self, "_batch", None) is not None:
            ll.llama_batch_free(self._batch)
            self._batch = None
        free_native(self)

    def __del__(self) -> None:  # pragma: no cover - interpreter shutdown order varies
        try:
            self.close()
        except Exception:
            pass

    # -- vocabulary ------------------------------------------------------------------------

    def token_texts(self) -> list[bytes]:
        ll = _llama()
        return [ll.llama_vocab_get_text(self.vocab, i) for i in range(self.n_vocab)]

    def is_eog(self, token: int) -> bool:
        return bool(_llama().llama_vocab_is_eog(self.vocab, token))

    def tokenize(self, text: str, *, add_special: bool = True,
                 parse_special: bool = True) -> list[int]:
        ll = _llama()
        raw = text.encode("utf-8")
        cap = len(raw) + 8
        buf = (ll.llama_token * cap)()
        n = ll.llama_tokenize(self.vocab, raw, len(raw), buf, cap, add_special, parse_special)
        if n < 0:
            cap = -n
            buf = (ll.llama_token * cap)()
            n = ll.llama_tokenize(self.vocab, raw, len(raw), buf, cap, add_special, parse_special)
        return list(buf[:n])

    def token_bytes(self, token: int, special: bool = False) -> bytes:
        """The token's piece (streaming asks for each generated token's: cached)."""
        key = (token, special)
        piece = self._pieces.get(key)
        if piece is None:
            piece = self._pieces[key] = self._piece(token, special)
        return piece

    def _piece(self, token: int, special: bool) -> bytes:
        ll = _llama()
        buf = ctypes.create_string_buffer(64)
        n = ll.llama_token_to_piece(self.vocab, token, buf, 64, 0, special)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = ll.llama_token_to_piece(self.vocab, token, buf, -n, 0, special)
        return buf.raw[:n]

    def detokenize(self, tokens: list[int]) -> str:
        return b"".join(self.token_bytes(t) for t in tokens).decode("utf-8", errors="replace")

    def chat_template(self) -> str | None:
        raw = _llama().llama_model_chat_template(self.model, None)
        return raw.decode("utf-8") if raw else None

    def meta(self, key: str) -> str | None:
        return model_meta(self.model, key)

    # -- batches ---------------------------------------------------------------------------

    def _fill(self, tokens, positions, seq_ids, want_logits) -> None:
        b = self._batch
        b.n_tokens = len(tokens)
        for i, (t, p, s, w) in enumerate(zip(tokens, positions, seq_ids, want_logits, strict=True)):
            b.token[i] = t
            b.pos[i] = p
            b.n_seq_id[i] = len(s)
            for k, sid in enumerate(s):
                b.seq_id[i][k] = sid
            b.logits[i] = 1 if w else 0

    def _decode(self) -> float:
        ll = _llama()
        t0 = time.perf_counter()
        rc = ll.llama_decode(self.ctx, self._batch)
        ll.llama_synchronize(self.ctx)
        dt = time.perf_counter() - t0
        self.n_decodes += 1
        if rc != 0:
            raise EngineError(
                f"llama_decode failed with code {rc} on a batch of {self._batch.n_tokens} rows "
                "(1 = no KV slot: the context is full; raise n_ctx or shorten the prompt)"
            )
        return dt

    def prefill_in_chunks(self, tokens: list[int], cached: list[int], n_canonical: int,
                          chunk: int, seq: int = 0) -> Prefill:
        """Make sequence ``seq`` hold exactly ``tokens``, decoded (no logits) in chunks at
        multiples of ``chunk`` after the cells it may keep of ``cached`` (what it holds now, of
        which whole chunks wrote the first ``n_canonical``): see :class:`Target`, "Prefill and
        history". Returns the cells kept, the tokens decoded and the seconds spent decoding."""
        keep = reusable_prefix(common_prefix(cached, tokens), n_canonical, chunk)
        _llama().llama_memory_seq_rm(self.mem, seq, keep, -1)
        spent = 0.0
        for start, end in prefill_chunks(keep, len(tokens), chunk):
            self._fill(tokens[start:end], range(start, end), [[seq]] * (end - start),
                       [False] * (end - start))
            spent += self._decode()
            if self.on_committed_rows is not None:
                self.on_committed_rows(range(end - start), start)
        return Prefill(reused=keep, decoded=len(tokens) - keep, seconds=spent)

    def logits(self, n_rows: int) -> np.ndarray:
        """View of the logits of the last decode's ``n_rows`` output rows (do not keep it)."""
        ptr = _llama().llama_get_logits(self.ctx)
        return np.ctypeslib.as_array(ptr, shape=(n_rows, self.n_vocab))

    def seq_pos_range(self, seq: int) -> tuple[int, int]:
        ll = _llama()
        return (int(ll.llama_memory_seq_pos_min(self.mem, seq)),
                int(ll.llama_memory_seq_pos_max(self.mem, seq)))


class Target(Model):
    """The target model with its committed sequence and the tree verify of §2.2.

    KV layout. llama.cpp refills freed cells from the lowest one, and flash attention sums over
    cells in buffer order, so keeping a tree's accepted cells (scattered among rejected ones in
    the depth-first layout) lets later tokens land in cells before earlier positions: the rows
    still agree with plain decode in argmax, not bit for bit. Fast mode accepts that (it keeps the
    path's cells: no extra work). Exact mode keeps sequence 0 contiguous and in position order:
    it drops every tree cell after the verify and decodes the accepted tokens again at the head of
    the next verify's batch (rows without logits, in sequence 0 and every leaf sequence), so each
    token's KV is written once, in order. Those rows (``VerifyResult.backlog_rows``) cost time
    in the verify's batch (decoding them in a forward of their own breaks exact mode's cache
    order: tested), which is one reason exact mode is for correctness checks and fast mode for
    measurement (HARNESS "Kernels"): every measurement run and the cost model's learning in them
    are fast mode, where a verify of n rows decodes n rows.

    Prefill and history. A prefill writes the prompt's KV in chunks that start at multiples of
    ``prefill_chunk`` (128 positions in fast mode, 63 in exact mode) and keeps cached cells of the
    longest common prefix with the previous sequence only as far as whole prefill chunks wrote
    them, rounded down to a whole chunk (:func:`reusable_prefix`); the cells verify batches wrote
    are decoded again. A turn's cache then depends on its tokens only, not on what the process
    decoded before (fast kernels give a row values that depend on its batch), so a fresh process
    (a resumed run's new server) makes the reply an uninterrupted one makes. :meth:`prefill`
    returns what it reused and decoded (:class:`Prefill`).

    Plain decode. ``plain=True`` (fast mode only) makes a target that verifies one row: its
    context holds one sequence in its own stream, as llama-server's ``--parallel 1`` context
    does, so that the ``ar`` arm and ``llamacpp-ar`` decode on the same context settings
    (:attr:`context_params` records them).
    """

    def __init__(self, path: str | Path, n_ctx: int, *, exact: bool, threads: int | None = None,
                 prefill_chunk: int | None = None, plain: bool = False, n_gpu_layers: int = 0,
                 n_seq_max: int = 64):
        if plain and exact:
            raise EngineError("a plain-decode target is a fast-mode context; exact mode keeps "
                              "its one context layout for every arm (pass plain=False)")
        # A tree needs a sequence per leaf in one unified cache; plain decode needs one
        # sequence, and then gets llama-server's `--parallel 1` context (one sequence, its own
        # stream), the same tokens. Its speed against 64 unified sequences was within the noise
        # of a busy 2-core machine (0.91-1.04 per token at 3k tokens of context, tiny model,
        # interleaved): `benchmarks/plain_context.py` measures it (issue 12).
        super().__init__(path, n_ctx, exact=exact, threads=threads,
                         n_seq_max=1 if plain else n_seq_max, kv_unified=not plain,
                         n_gpu_layers=n_gpu_layers)
        self.max_rows = 1 if plain else MAX_ROWS_EXACT if exact else MAX_ROWS_FAST
        if self.n_batch < self.max_rows:
            self.close()
            raise EngineError(
                f"a target context of {n_ctx} tokens is too small: a verify of up to "
                f"{self.max_rows} rows needs at least that many; raise target.n_ctx")
        self.prefill_chunk = prefill_chunk or (MAX_ROWS_EXACT if exact else PREFILL_CHUNK_FAST)
        self.committed: list[int] = []
        self.n_kv = 0  # committed tokens whose cells are in sequence 0 (a prefix)
        self.n_canonical = 0  # leading cells written by whole prefill chunks (reusable)
        self._pending: tuple[Tree, list[list[int]], int] | None = None  # tree, seqs, backlog
        # The sequences a request uses: its committed prefix in ``seq0``, a tree's leaves in
        # ``leaf_ids``, exact mode's padding row in ``pad_seq``; a target that owns its context
        # has them all (:mod:`adaspark.decoding.slots` divides one context between requests).
        self.seq0 = 0
        self.leaf_ids: Sequence[int] = range(1, PAD_SEQ)
        self.pad_seq = PAD_SEQ
        self.owns_context = True
        self._out0 = 0  # this target's first output row in the last decode's logits

    def _decode(self) -> float:
        """One ``llama_decode``; in exact mode a one-row batch gets a padding row.

        Past 512 KV cells llama.cpp's attention takes another path for a batch of one row
        (HARNESS facts), so a one-row verify, flush or prefill chunk would give values that a
        row of any wider batch does not; a cell it writes then shifts every later logit. Exact
        mode never decodes one row alone: the batch carries a copy of the row in a scratch
        sequence (no logits, its cell dropped after the decode), so every row of every batch
        takes the multi-row path and a text's logits do not depend on how its rounds were
        batched. Fast mode decodes as llama.cpp does."""
        b = self._batch
        if not self.exact or b.n_tokens != 1:
            return super()._decode()
        b.token[1], b.pos[1], b.n_seq_id[1], b.logits[1] = b.token[0], b.pos[0], 1, 0
        b.seq_id[1][0] = self.pad_seq
        b.n_tokens = 2
        try:
            return super()._decode()
        finally:
            _llama().llama_memory_seq_rm(self.mem, self.pad_seq, -1, -1)

    @property
    def n_past(self) -> int:
        """Position of the anchor: every committed token but the last."""
        return max(0, len(self.committed) - 1)

    def reset(self) -> None:
        ll = _llama()
        if self.owns_context:
            ll.llama_memory_clear(self.mem, True)
        else:
            for seq in (self.seq0, *self.leaf_ids):
                ll.llama_memory_seq_rm(self.mem, seq, -1, -1)
        self.committed = []
        self.n_kv = 0
        self.n_canonical = 0
        self._pending = None

    def _decode_seq0(self, tokens: list[int], start: int) -> float:
        """Decode ``tokens`` into sequence 0 from position ``start``, in batches of at most
        ``n_batch`` rows (exact mode: at most 63, the widest batch on the exact path)."""
        step = MAX_ROWS_EXACT if self.exact else self.n_batch
        spent = 0.0
        for off in range(0, len(tokens), step):
            chunk = tokens[off : off + step]
            pos = range(start + off, start + off + len(chunk))
            self._fill(chunk, pos, [[self.seq0]] * len(chunk), [False] * len(chunk))
            spent += self._decode()
        return spent

    def prefill(self, tokens: list[int]) -> Prefill:
        """Commit ``tokens``; decode all but the last (the anchor). Reuses the longest common
        prefix already in the cache, as llama-server's ``cache_prompt`` does, but only in whole
        prefill chunks (see the class docstring), so the cache after a prefill does not depend
        on what this process decoded before. Returns how many prompt tokens came from the cache,
        how many were decoded and the seconds it took."""
        if not tokens:
            raise EngineError("cannot prefill an empty prompt")
        if len(tokens) >= self.n_ctx:
            raise EngineError(
                f"prompt of {len(tokens)} tokens does not fit the context of {self.n_ctx}"
            )
        if self._pending is not None:
            self.discard()
        done = self.prefill_in_chunks(tokens[:-1], self.committed[: self.n_kv],
                                      self.n_canonical, self.prefill_chunk, self.seq0)
        self.committed = list(tokens)
        self.n_kv = len(tokens) - 1
        self.n_canonical = (len(tokens) - 1) // self.prefill_chunk * self.prefill_chunk
        return done

    def flush(self) -> None:
        """Decode committed tokens not yet in the cache (exact mode's re-decoded path), so that
        sequence 0 holds every committed token but the anchor."""
        if self._pending is not None:
            raise EngineError("a verify is pending: commit() or discard() it first")
        self._decode_seq0(self.committed[self.n_kv : -1], self.n_kv)
        self.n_kv = self.n_past

    def follow(self, text: Sequence[int]) -> Commit:
        """Commit the longest prefix of ``text`` that is the target's greedy continuation and
        the argmax after it (as :meth:`commit`), in one forward of the anchor and ``text`` written
        straight into sequence 0, the rows past the first disagreement dropped: cells stay in
        position order, and exact mode's rows are those of any batch of up to 63 rows (the
        replay's labels of a known reply, :mod:`adaspark.replay.labels`)."""
        if len(text) + 1 > self.max_rows or self.n_past + len(text) + 1 >= self.n_ctx:
            raise EngineError(f"a text of {len(text)} tokens exceeds the verify's rows or the "
                              "context")
        self.flush()  # refuses a pending verify
        P = self.n_past
        rows = [self.committed[-1], *map(int, text)]
        self._fill(rows, range(P, P + len(rows)), [[self.seq0]] * len(rows),
                   [True] * len(rows))
        self._decode()
        self._out0 = 0
        argmax = self.logits(len(rows)).argmax(axis=1)
        n = next((i for i in range(1, len(rows)) if int(argmax[i - 1]) != rows[i]), len(rows))
        _llama().llama_memory_seq_rm(self.mem, self.seq0, P + n, -1)
        if self.on_committed_rows is not None:
            self.on_committed_rows(list(range(n)), P)
        new = (*rows[1:n], int(argmax[n - 1]))
        self.committed.extend(new)
        self.n_kv = P + n
        return Commit(path=tuple(range(n)), tokens=new)

    def stage(self, tree: Tree) -> tuple[list[int], list[int], list[list[int]], list[bool]]:
        """The batch rows of a verify of ``tree`` (tokens, positions, sequence ids, whether each
        row wants logits): exact mode's backlog first, then the tree's rows, each tagged with the
        leaves below it after the prefix was shared with each leaf's sequence. The verify is
        pending from here until :meth:`commit` or :meth:`discard`."""
        if self._pending is not None:
            raise EngineError("a verify is pending: commit() or discard() it first")
        if not self.committed:
            raise EngineError("nothing committed: prefill a prompt first")
        if tree.tokens[0] != self.committed[-1]:
            raise EngineError(
                f"tree anchor {tree.tokens[0]} is not the last committed token "
                f"{self.committed[-1]}"
            )
        if tree.n_rows > self.max_rows:
            raise EngineError(f"tree of {tree.n_rows} rows exceeds {self.max_rows} rows")
        ll = _llama()
        P = self.n_past
        depths = tree.depths()
        if P + max(depths) >= self.n_ctx:
            raise EngineError(f"context full: {P} + {max(depths) + 1} rows > n_ctx {self.n_ctx}")
        if P - self.n_kv + tree.n_rows > self.max_rows:
            self.flush()  # backlog and tree together would leave the exact path's widths
        backlog = self.committed[self.n_kv : -1]
        if tree.n_rows == 1:
            seqs: list[list[int]] = [[self.seq0]]
            shared = [self.seq0]
        else:
            leaves = tree.leaves()
            if len(leaves) > len(self.leaf_ids):
                raise EngineError(f"a tree of {len(leaves)} leaves exceeds this target's "
                                  f"{len(self.leaf_ids)} leaf sequences")
            seqs = [[] for _ in range(tree.n_rows)]
            for k, leaf in enumerate(leaves):
                sid = self.leaf_ids[k]
                r = leaf
                while r != -1:
                    seqs[r].append(sid)
                    r = tree.parents[r]
                ll.llama_memory_seq_cp(self.mem, self.seq0, sid, -1, -1)
            shared = [self.seq0, *self.leaf_ids[: len(leaves)]]
        self._pending = (tree, seqs, len(backlog))
        return (backlog + list(tree.tokens), [*range(self.n_kv, P), *(P + d for d in depths)],
                [shared] * len(backlog) + seqs, [False] * len(backlog) + [True] * tree.n_rows)

    def verify(self, tree: Tree, *, want_gaps: bool = False,
               want_logits: bool = False) -> VerifyResult:
        """One forward over every row of ``tree``; the state stays pending until
        :meth:`commit` or :meth:`discard`."""
        t_build = time.perf_counter()
        self._fill(*self.stage(tree))
        build_s = time.perf_counter() - t_build
        try:
            dt = self._decode()
        except EngineError:
            self.discard()
            raise
        self._out0 = 0
        res = self.result(tree.n_rows, want_gaps=want_gaps, want_logits=want_logits)
        res.build_s, res.decode_s = build_s, dt
        res.verify_s = time.perf_counter() - t_build
        return res

    def result(self, n_rows: int, *, want_gaps: bool = False,
               want_logits: bool = False) -> VerifyResult:
        """The pending verify's read-out (argmax, and gaps or logits when asked) from this
        target's ``n_rows`` output rows of the last decode; the caller sets the times."""
        assert self._pending is not None
        t0 = time.perf_counter()
        lg = self.logits(n_rows)
        res = VerifyResult(argmax=lg.argmax(axis=1).astype(np.int64), verify_s=0.0,
                           backlog_rows=self._pending[2])
        if want_gaps:
            res.gap = top2_gap(lg)
        if want_logits:
            res.logits = lg.copy()
        res.readout_s = time.perf_counter() - t0
        return res

    def logits(self, n_rows: int) -> np.ndarray:
        """View of this target's ``n_rows`` output rows of the last decode (do not keep it)."""
        return super().logits(self._out0 + n_rows)[self._out0 :]

    def _drop_tree(self, n_leaves: int) -> None:
        """Drop every leaf sequence of a verify (the cells only they hold are freed)."""
        ll = _llama()
        if self.owns_context:
            ll.llama_memory_seq_keep(self.mem, self.seq0)
            return
        for sid in self.leaf_ids[:n_leaves]:
            ll.llama_memory_seq_rm(self.mem, sid, -1, -1)

    def discard(self) -> None:
        """Drop a pending verify's cells; the committed state is as before it."""
        if self._pending is None:
            return
        tree, _, _ = self._pending
        self._drop_tree(len(tree.leaves()) if tree.n_rows > 1 else 0)
        _llama().llama_memory_seq_rm(self.mem, self.seq0, self.n_kv, -1)
        self._pending = None

    def commit(self, result: VerifyResult, target_token: Callable[[int], int] | None = None
               ) -> Commit:
        """Accept the path of the pending verify (§2.2): its rows and the new tokens (accepted
        candidates, then the target's token after the path). ``target_token(r)``: the target's
        token at row ``r`` (its argmax, or a draw: :mod:`adaspark.decoding.sampling`)."""
        if self._pending is None:
            raise EngineError("nothing to commit: verify() a tree first")
        ll = _llama()
        tree, seqs, n_backlog = self._pending
        path, bonus = walk_path(tree, target_token or (lambda r: int(result.argmax[r])))
        P = self.n_past
        if self.on_committed_rows is not None:
            # the path's rows hold the committed tokens at P.. (the anchor first); exact mode's
            # backlog rows head the batch and were reported when their verify committed them
            self.on_committed_rows([n_backlog + r for r in path], P)
        if tree.n_rows == 1:
            self.n_kv = P + 1
        elif self.exact:
            self._drop_tree(len(tree.leaves()))  # the committed cells stay, tree cells go
            self.n_kv = P
        else:
            ll.llama_memory_seq_cp(self.mem, seqs[path[-1]][0], self.seq0, P, P + len(path))
            self._drop_tree(len(tree.leaves()))
            self.n_kv = P + len(path)
        self._pending = None
        new = [tree.tokens[r] for r in path[1:]] + [int(bonus)]
        self.committed.extend(new)
        return Commit(path=tuple(path), tokens=tuple(new))
