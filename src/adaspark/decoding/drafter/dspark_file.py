"""DSpark drafter files the project writes itself, and the reader that checks one against a
target (§2.1: a DSpark drafter reads hidden states from selected layers of the target and gives
the B positions after the anchor in one forward; a low-rank Markov head biases each position by
the pick before it; a confidence head predicts per position whether the pick survives).

No DSpark or DFlash weights exist for our targets, so this module writes ``dflash``-architecture
GGUFs with the ``gguf`` package, the target's ``tokenizer.*`` keys copied in, in two kinds:

* ``random``: every tensor drawn from a seeded normal (non-zero): plumbing. It loads in llama.cpp
  and runs in ``llama-server --spec-type draft-dspark``; its drafts are noise, so almost nothing
  is accepted.
* ``oracle``: a zero backbone and a Markov head built from a text's greedy successors, so that its
  drafts are a known continuation and its acceptance is exactly predictable; one transition can
  be corrupted so that a partial accept happens at a known position.

Facts of the vendored llama.cpp relied on (read in ``src/models/dflash.cpp``,
``src/llama-arch.cpp``, ``common/speculative.cpp``, ``tools/server/server-context.cpp`` and
``conversion/qwen.py``; nothing copied):

* Metadata: ``dflash.target_layers`` (required; ids of target *layer inputs*: id ``i`` is the
  input of the target's block ``i``, recorded by the ``llama`` graph for ``0 <= i < n_layer``;
  the converter writes the HF ``target_layer_ids`` plus one), ``dflash.block_size``,
  ``dflash.sample_from_anchor`` (absent means true), ``dflash.has_confidence_head``,
  ``tokenizer.ggml.mask_token_id``; DFlash2 adds ``dflash.selector_rank``,
  ``dflash.selector_top_k``, ``dflash.conv_kernel_size``, ``dflash.conv_group_size`` and the
  ``selector_*`` tensors. The drafter's hidden size must be the target's: the feature input
  ``fc`` is ``len(target_layers) * n_embd`` wide on the drafter side while llama-server gathers
  ``len(target_layers) * n_embd_target`` floats per row.
* Tensors: ``fc``, ``enc.output_norm``, ``output_norm``, per block ``attn_norm``, ``attn_q``,
  ``attn_k``, ``attn_v``, ``attn_output``, ``attn_q_norm``, ``attn_k_norm``, ``ffn_norm``,
  ``ffn_gate``, ``ffn_up``, ``ffn_down``; DSpark adds ``markov_w1`` ``{R, n_vocab}``,
  ``markov_w2`` ``{R, n_vocab_draft}`` and optionally ``conf_proj`` ``{n_embd + R, 1}`` with a
  bias; ``token_embd`` and ``output`` are optional: without them the drafter borrows the
  target's embeddings and output head through ``llama_context_params.ctx_other`` (llama-server
  always sets it to the target context). Files written here carry neither, so they are small.
* A token batch is the block ``[anchor, MASK, ...]`` at the positions after the committed text
  (the anchor is the last sampled token, not yet decoded by the target). Attention over the
  drafter's KV (the injected features of the committed text) and inside the block is
  non-causal. Each block layer is pre-norm residual; the final ``output_norm`` then the (borrowed)
  output head give ``base`` logits per block row.
* The Markov head (DSpark): with ``sample_from_anchor`` true every block row is a draft slot;
  row 0's logits are ``base[0] + markov_w2 @ markov_w1[anchor]`` and row ``i``'s are
  ``base[i] + markov_w2 @ markov_w1[argmax(row i-1)]``: the conditioning token is the greedy
  pick of the row before, computed in the graph. Row ``i`` drafts the token at position
  ``anchor + i + 1``. The confidence of row ``i`` is ``sigmoid(conf_proj . [h_i ;
  markov_w1[prev_i]] + b)`` with ``h_i`` the row's ``output_norm`` output.
* llama-server (``draft-dspark``) decodes a block of ``n_max`` rows (``--spec-draft-n-max``,
  default 3, clamped to ``block_size``), not the file's full block; it drafts the top candidate
  of each row, truncates the draft to ``n_remaining - 1`` tokens (``n_remaining`` = the reply's
  cap minus the tokens generated so far) and counts ``draft_n`` after that cut; a round with
  room for no draft token drafts nothing. ``draft_n_accepted`` sums each verify's accepted prefix.

The oracle construction (what the tests rely on). All backbone tensors are zero, including
``output_norm``'s weight, so every block row's final hidden state is exactly zero (RMS norm of the
residual stream times a zero weight), its borrowed-head ``base`` logits are exactly zero for every
token, whatever the injected features and the block length, and its ``h_i`` is zero. The logits
of a row are then the Markov bias alone. The bias is one-hot: for each distinct token ``s`` that
some transition leads to there is one rank column ``c(s)``; ``markov_w1[t, c(succ(t))] = 1``
and ``markov_w2[s, c(s)] = scale`` (default 10), everything else zero, so the logits of a row
conditioned on ``t`` are ``scale`` at ``succ(t)`` and exactly 0 elsewhere: a unique argmax.
``succ`` is read from a text (the target's greedy continuation of a prompt, produced by our
engine with the ``ar`` rule): ``succ(text[i]) = text[i+1]`` at the *first* occurrence of
``text[i]`` (a token that recurs with another successor keeps its first one; these conflicts
are counted and listed), and every token that is not a source (the fallback itself included)
maps to a fallback token, the first id from 100 up that the text does not use, through a column
of its own. Corrupting the transition at index ``i`` (``text[i]`` must be that token's first
occurrence) maps ``text[i]`` to a wrong token (the next unused id) instead of ``text[i+1]``.

Predicted drafts: at a round whose anchor is ``a``, row ``i`` drafts ``succ^(i+1)(a)``, for any
block length. With a reference reply ``g`` (the target's greedy tokens) and the anchor at
``g[j]``, the accepted prefix is the longest ``k`` with ``succ^m(g[j]) == g[j+m]`` for
``m <= k``; ``predict_server_rounds`` (module ``dspark_predict``) walks llama-server's loop
over ``g`` with that rule, and its ``markov_successors`` reads ``succ`` back from a file's own
tensors. The confidence head of the oracle: ``conf_proj`` is ``+4`` on every successor column
(the corrupted one included) and ``-4`` on the fallback column, bias 0: ``h = sigmoid(4) =
0.982`` for a known transition, ``sigmoid(-4) = 0.018`` after a token the text never continues.
The K-1 siblings of a row are all tied at logit 0: nothing may be read from their order.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from adaspark.decoding.drafter.gguf_meta import GGUFFormatError, GGUFMeta, read_meta
from adaspark.io import atomic_path

ARCH = "dflash"
KEY_TARGET_LAYERS = f"{ARCH}.target_layers"
KEY_BLOCK_SIZE = f"{ARCH}.block_size"
KEY_SAMPLE_FROM_ANCHOR = f"{ARCH}.sample_from_anchor"
KEY_HAS_CONFIDENCE = f"{ARCH}.has_confidence_head"
KEY_EMBEDDING = f"{ARCH}.embedding_length"
KEY_BLOCK_COUNT = f"{ARCH}.block_count"
KEY_MASK = "tokenizer.ggml.mask_token_id"
KEY_TOKENS = "tokenizer.ggml.tokens"
#: DFlash2 metadata (conv + candidate selector): refused by :func:`check_for_target` for now.
DFLASH2_KEYS = (f"{ARCH}.selector_rank", f"{ARCH}.selector_top_k",
                f"{ARCH}.conv_kernel_size", f"{ARCH}.conv_group_size")
DFLASH2_TENSORS = ("selector_hidden.weight", "selector_predecessor.weight",
                   "selector_successor.weight")
#: Our own keys (llama.cpp ignores unknown keys).
KEY_KIND = "adaspark.dspark.kind"
KEY_SEED = "adaspark.dspark.seed"
KEY_TEXT = "adaspark.dspark.text"
KEY_CORRUPT_AT = "adaspark.dspark.corrupt_at"
KEY_FALLBACK = "adaspark.dspark.fallback_token"

KINDS = ("random", "oracle")


class DSparkFileError(ValueError):
    """A drafter file that does not fit its target (or cannot be read): the message names the
    key and the fix."""


#: The longest block our engine and llama-server can decode: the ``dflash`` graph builds the
#: Markov head's chain position by position, and llama.cpp sizes a drafter's graph at
#: ``max(1024, 8 x its tensors)`` nodes (``llama_context::graph_max_nodes``); a longer block
#: overflows it and aborts the process (``GGML_ASSERT(obj_new)``). Measured on the tiny target
#: (one block, confidence head): 64 positions decode, 128 abort; a ``d2t`` vocabulary adds nodes
#: per position, so the limit keeps a margin (twice speculative.cpp's default block of 16).
MAX_BLOCK_SIZE = 32


# ---------------------------------------------------------------------------------------------
# Reading GGUF metadata


def gguf_meta(path: str | Path) -> GGUFMeta:
    """A GGUF's metadata and tensor table (:mod:`~adaspark.decoding.drafter.gguf_meta`)."""
    try:
        return read_meta(path)
    except (OSError, GGUFFormatError) as e:
        raise DSparkFileError(f"{e}: point at a GGUF file") from e


def _tokens_digest(tokens: Sequence[str]) -> str:
    h = hashlib.sha256()
    for t in tokens:
        h.update(t.encode("utf-8", "surrogatepass") + b"\0")
    return h.hexdigest()


@dataclass(frozen=True)
class TargetShape:
    """What a drafter file must match in its target GGUF."""

    path: Path
    architecture: str
    n_layer: int
    n_embd: int
    n_head: int
    n_head_kv: int
    n_ff: int
    rms_eps: float
    rope_freq_base: float
    n_ctx_train: int
    n_vocab: int
    tokenizer_model: str
    tokens_digest: str
    special: dict[str, int] = field(default_factory=dict)  # bos/eos/padding/unknown/mask ids


def read_target(path: str | Path) -> TargetShape:
    """The shape of a target GGUF (``{arch}.block_count``, ``.embedding_length``, ...) and a
    digest of its token list."""
    path = Path(path)
    f = gguf_meta(path)
    arch = str(f.get("general.architecture", ""))
    if not arch:
        raise DSparkFileError(f"{path} has no general.architecture: not a model GGUF")
    if arch == ARCH:
        raise DSparkFileError(f"{path} is a {ARCH} drafter, not a target: pass the target GGUF")

    def need(key: str) -> Any:
        v = f.get(f"{arch}.{key}")
        if v is None:
            raise DSparkFileError(f"target {path} lacks {arch}.{key}")
        return v

    tokens = f.get(KEY_TOKENS)
    if not tokens:
        raise DSparkFileError(f"target {path} has no {KEY_TOKENS}: it carries no tokenizer")
    n_head = int(need("attention.head_count"))
    special = {k: int(f.get(f"tokenizer.ggml.{k}_token_id"))
               for k in ("bos", "eos", "padding", "unknown", "mask")
               if f.get(f"tokenizer.ggml.{k}_token_id") is not None}
    return TargetShape(
        path=path, architecture=arch, n_layer=int(need("block_count")),
        n_embd=int(need("embedding_length")), n_head=n_head,
        n_head_kv=int(f.get(f"{arch}.attention.head_count_kv", n_head)),
        n_ff=int(need("feed_forward_length")),
        rms_eps=float(f.get(f"{arch}.attention.layer_norm_rms_epsilon", 1e-6)),
        rope_freq_base=float(f.get(f"{arch}.rope.freq_base", 10000.0)),
        n_ctx_train=int(f.get(f"{arch}.context_length", 4096)),
        n_vocab=len(tokens), tokenizer_model=str(f.get("tokenizer.ggml.model", "")),
        tokens_digest=_tokens_digest(tokens), special=special,
    )


@dataclass(frozen=True)
class DSparkFile:
    """The metadata of a ``dflash``-architecture GGUF (DFlash or DSpark)."""

    path: Path
    target_layers: tuple[int, ...]
    block_size: int
    hidden_size: int
    n_layer: int  # the drafter's own blocks
    n_vocab: int  # its tokenizer's tokens
    tokenizer_model: str
    tokens_digest: str
    mask_token_id: int | None
    sample_from_anchor: bool  # absent: true (llama.cpp's default)
    has_confidence_head: bool  # the key; absent: whether conf_proj is in the file
    markov_rank: int | None  # None: a DFlash file (no Markov head)
    d2t: np.ndarray | None  # reduced draft vocabulary: draft row -> target token id
    own_embeddings: bool  # token_embd in the file (else borrowed through ctx_other)
    own_output: bool  # output in the file (else the target's head through ctx_other)
    selector: dict[str, int]  # DFlash2 selector/conv keys present (refused for now)
    kind: str | None  # our own files: random | oracle

    @property
    def is_dspark(self) -> bool:
        return self.markov_rank is not None

    @property
    def is_dflash2(self) -> bool:
        return bool(self.selector)

    @property
    def draft_vocab(self) -> int:
        return self.n_vocab if self.d2t is None else int(self.d2t.shape[0])


def read_dspark_file(path: str | Path) -> DSparkFile:
    """Read a ``dflash`` GGUF's metadata; refuse a file of another architecture or one without
    ``dflash.target_layers`` (llama.cpp refuses it too)."""
    path = Path(path)
    f = gguf_meta(path)
    arch = str(f.get("general.architecture", ""))
    if arch != ARCH:
        raise DSparkFileError(
            f"{path} has general.architecture={arch or 'nothing'!r}, not {ARCH!r}: a DSpark "
            "drafter is a dflash GGUF (write one with `adaspark dspark-file`, or convert one with "
            "llama.cpp's converter)")
    layers = f.get(KEY_TARGET_LAYERS)
    if not layers:
        raise DSparkFileError(f"{path} has no {KEY_TARGET_LAYERS}: llama.cpp cannot load it; "
                              "write the target layer-input ids into the file")
    tensors = f.tensors
    w1 = tensors.get("markov_w1.weight")
    tokens = f.get(KEY_TOKENS) or []
    conf_key = f.get(KEY_HAS_CONFIDENCE)
    anchor = f.get(KEY_SAMPLE_FROM_ANCHOR)
    mask = f.get(KEY_MASK)
    kind = f.get(KEY_KIND)
    return DSparkFile(
        path=path, target_layers=tuple(int(x) for x in layers),
        block_size=int(f.get(KEY_BLOCK_SIZE, 16)),  # speculative.cpp's default
        hidden_size=int(f.get(KEY_EMBEDDING, 0)),
        n_layer=int(f.get(KEY_BLOCK_COUNT, 0)),
        n_vocab=len(tokens), tokenizer_model=str(f.get("tokenizer.ggml.model", "")),
        tokens_digest=_tokens_digest(tokens) if tokens else "",
        mask_token_id=None if mask is None else int(mask),
        sample_from_anchor=True if anchor is None else bool(anchor),
        has_confidence_head=("conf_proj.weight" in tensors) if conf_key is None
        else bool(conf_key),
        markov_rank=None if w1 is None else int(w1.ne[0]),
        d2t=f.tensor("d2t").reshape(-1).astype(np.int64) if "d2t" in tensors else None,
        own_embeddings="token_embd.weight" in tensors,
        own_output="output.weight" in tensors,
        selector={k: int(f.get(k)) for k in DFLASH2_KEYS if f.get(k) is not None}
        | {k: 1 for k in DFLASH2_TENSORS if k in tensors},
        kind=None if kind is None else str(kind),
    )


def check_for_target(info: DSparkFile, target: TargetShape) -> DSparkFile:
    """Refuse a drafter file that does not fit ``target``, naming the key and the fix; return
    ``info`` when it fits. A ``d2t`` reduced draft vocabulary is accepted (its ids must be
    distinct target ids); DFlash2 files are refused (not supported yet)."""
    p, t = info.path, target.path
    check_block_size(info.block_size, f"{p}: {KEY_BLOCK_SIZE}")
    if info.is_dflash2:
        raise DSparkFileError(
            f"{p} is a DFlash2 drafter ({', '.join(sorted(info.selector))}): DFlash2's candidate "
            "selector is not supported yet; use a DFlash or DSpark file (no selector_* keys)")
    bad = [i for i in info.target_layers if not 0 <= i < target.n_layer]
    if bad:
        raise DSparkFileError(
            f"{p}: {KEY_TARGET_LAYERS}={list(info.target_layers)} names layer input(s) {bad}, "
            f"but the target {t.name} has {target.n_layer} blocks (layer inputs 0.."
            f"{target.n_layer - 1}): write the drafter for this target, or pick a target with "
            "that many layers")
    if info.hidden_size != target.n_embd:
        raise DSparkFileError(
            f"{p}: {KEY_EMBEDDING}={info.hidden_size} differs from the target's hidden size "
            f"{target.architecture}.embedding_length={target.n_embd} ({t.name}): the drafter "
            "reads the target's hidden states and borrows its embeddings, so it must be written "
            "for a target of the same hidden size")
    if not info.n_vocab:
        raise DSparkFileError(
            f"{p} has no {KEY_TOKENS}: copy the target's tokenizer.* keys into the drafter")
    if (info.n_vocab != target.n_vocab or info.tokens_digest != target.tokens_digest
            or info.tokenizer_model != target.tokenizer_model):
        raise DSparkFileError(
            f"{p}: its tokenizer ({KEY_TOKENS}: {info.n_vocab} tokens, model "
            f"{info.tokenizer_model!r}) differs from the target's ({target.n_vocab} tokens, "
            f"model {target.tokenizer_model!r}, {t.name}): the drafter must carry the target's "
            "tokenizer (a reduced draft vocabulary goes in a d2t tensor, not in the tokenizer)")
    if info.d2t is not None:
        d = info.d2t
        if d.size == 0 or d.min() < 0 or d.max() >= target.n_vocab or np.unique(d).size != d.size:
            raise DSparkFileError(
                f"{p}: its d2t tensor must map each draft row to a distinct target token id in "
                f"0..{target.n_vocab - 1}: rewrite d2t as absolute target ids")
    if info.mask_token_id is not None and not 0 <= info.mask_token_id < target.n_vocab:
        raise DSparkFileError(
            f"{p}: {KEY_MASK}={info.mask_token_id} is outside the vocabulary (0.."
            f"{target.n_vocab - 1}): set it to a token id of the target's vocabulary")
    return info


def check_block_size(block: int, where: str) -> None:
    """Refuse a block of fewer than 1 or more than :data:`MAX_BLOCK_SIZE` positions."""
    if not 1 <= block <= MAX_BLOCK_SIZE:
        raise DSparkFileError(
            f"{where}={block}: a DSpark block holds 1 to {MAX_BLOCK_SIZE} positions (llama.cpp's "
            f"drafter graph holds no longer Markov chain; a longer one aborts the process): "
            f"write the file with block <= {MAX_BLOCK_SIZE}")


def check_dspark_file(path: str | Path, target_path: str | Path) -> DSparkFile:
    """Read a drafter file and check it against its target GGUF (what loading calls)."""
    return check_for_target(read_dspark_file(path), read_target(target_path))


# ---------------------------------------------------------------------------------------------
# Writing


@dataclass(frozen=True)
class DrafterShape:
    """The drafter's own hyperparameters; the hidden size and heads are the target's."""

    block_size: int = 8
    target_layers: tuple[int, ...] | None = None  # None: default_target_layers(n_layer)
    n_layers: int = 1
    markov_rank: int = 32  # random files (write_oracle's rank= sizes the oracle's)
    confidence_head: bool = True
    mask_token_id: int | None = None  # None: the target's mask, padding or eos token
    sample_from_anchor: bool = True
    n_ff: int | None = None  # the blocks' FFN width; None: the target's

    def ff_for(self, target: TargetShape) -> int:
        return int(self.n_ff or target.n_ff)

    def layers_for(self, target: TargetShape) -> tuple[int, ...]:
        layers = self.target_layers or default_target_layers(target.n_layer)
        bad = [i for i in layers if not 0 <= i < target.n_layer]
        if bad:
            raise DSparkFileError(
                f"target layers {list(layers)}: {bad} outside the target's layer inputs 0.."
                f"{target.n_layer - 1} ({target.path.name}); choose ids below {target.n_layer}")
        return tuple(int(i) for i in layers)

    def mask_for(self, target: TargetShape) -> int:
        if self.mask_token_id is not None:
            if not 0 <= self.mask_token_id < target.n_vocab:
                raise DSparkFileError(f"mask={self.mask_token_id} is outside the target's "
                                      f"vocabulary 0..{target.n_vocab - 1}")
            return self.mask_token_id
        for k in ("mask", "padding", "eos"):
            if k in target.special:
                return target.special[k]
        return 0


def default_target_layers(n_layer: int, k: int = 3) -> tuple[int, ...]:
    """``k`` layer inputs spread from the third block to the third from last (2, 15, 28 for a
    30-block target), as DFlash drafters spread theirs over the target's depth."""
    lo, hi = min(2, n_layer - 1), max(min(2, n_layer - 1), n_layer - 2)
    return tuple(sorted({int(np.rint(x)) for x in np.linspace(lo, hi, k)}))


def backbone_shapes(target: TargetShape, shape: DrafterShape) -> dict[str, tuple[int, ...]]:
    """Numpy shapes (ggml's ne reversed) of the backbone tensors of a dflash drafter."""
    d, hd = target.n_embd, target.n_embd // target.n_head
    kv = hd * target.n_head_kv
    n_in = len(shape.layers_for(target)) * d
    ff = shape.ff_for(target)
    out: dict[str, tuple[int, ...]] = {
        "fc.weight": (d, n_in), "enc.output_norm.weight": (d,), "output_norm.weight": (d,)}
    for i in range(shape.n_layers):
        b = f"blk.{i}."
        out |= {b + "attn_norm.weight": (d,), b + "attn_q.weight": (hd * target.n_head, d),
                b + "attn_k.weight": (kv, d), b + "attn_v.weight": (kv, d),
                b + "attn_output.weight": (d, hd * target.n_head),
                b + "attn_q_norm.weight": (hd,), b + "attn_k_norm.weight": (hd,),
                b + "ffn_norm.weight": (d,), b + "ffn_gate.weight": (ff, d),
                b + "ffn_up.weight": (ff, d), b + "ffn_down.weight": (d, ff)}
    return out


def random_tensors(target: TargetShape, shape: DrafterShape, seed: int) -> dict[str, np.ndarray]:
    """Seeded normal weights (norm weights near 1, matrices scaled by 1/sqrt(fan-in)), a Markov
    head of rank ``shape.markov_rank`` and, when asked, a confidence head."""
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    for name, shp in backbone_shapes(target, shape).items():
        if len(shp) == 1:
            out[name] = (1.0 + 0.1 * rng.standard_normal(shp)).astype(np.float32)
        else:
            out[name] = (rng.standard_normal(shp) / np.sqrt(shp[1])).astype(np.float32)
    r = shape.markov_rank
    if r < 1:
        raise DSparkFileError(f"rank={r}: the Markov head needs a rank of at least 1")
    out["markov_w1.weight"] = rng.standard_normal((target.n_vocab, r)).astype(np.float32)
    out["markov_w2.weight"] = (rng.standard_normal((target.n_vocab, r)) / np.sqrt(r)).astype(
        np.float32)
    if shape.confidence_head:
        out["conf_proj.weight"] = (rng.standard_normal((1, target.n_embd + r))
                                   / np.sqrt(target.n_embd + r)).astype(np.float32)
        out["conf_proj.bias"] = rng.standard_normal((1,)).astype(np.float32)
    return out


@dataclass(frozen=True)
class SuccessorTable:
    """The oracle's transitions: ``successor[t]`` for every source token of the text, the
    fallback for every other token, the corrupted index (or None) and the conflicts (tokens that
    recur with another successor than their first one: index of the recurrence)."""

    text: tuple[int, ...]
    successor: dict[int, int]
    fallback: int
    corrupt_at: int | None
    wrong: int | None  # the corrupted transition's token
    conflicts: tuple[int, ...]

    def __call__(self, token: int) -> int:
        return self.successor.get(int(token), self.fallback)


def _absent_tokens(text: Sequence[int], n_vocab: int, count: int, start: int = 100) -> list[int]:
    seen = set(text)
    out = [t for t in range(start, n_vocab) if t not in seen][:count]
    if len(out) < count:
        raise DSparkFileError("the text uses nearly the whole vocabulary: no token is left "
                              "for the fallback; use a shorter text")
    return out


def successor_table(text: Sequence[int], n_vocab: int,
                    corrupt_at: int | None = None) -> SuccessorTable:
    """``succ(text[i]) = text[i+1]`` at the first occurrence of ``text[i]`` (see the module
    docstring); ``corrupt_at=i`` maps ``text[i]`` to a wrong token instead."""
    text = tuple(int(t) for t in text)
    if len(text) < 2:
        raise DSparkFileError("the oracle's text needs at least two tokens (one transition)")
    if any(not 0 <= t < n_vocab for t in text):
        raise DSparkFileError(f"the oracle's text has token ids outside 0..{n_vocab - 1}")
    succ: dict[int, int] = {}
    conflicts = []
    for i in range(len(text) - 1):
        s = succ.setdefault(text[i], text[i + 1])
        if s != text[i + 1]:
            conflicts.append(i)
    fallback, wrong_tok = _absent_tokens(text, n_vocab, 2)
    wrong = None
    if corrupt_at is not None:
        i = int(corrupt_at)
        if not 0 <= i < len(text) - 1:
            raise DSparkFileError(f"corrupt_at={i}: the text's transitions are 0.."
                                  f"{len(text) - 2}")
        first = text.index(text[i])
        if first != i:
            raise DSparkFileError(
                f"corrupt_at={i}: token {text[i]} first occurs at {first}, whose successor is the "
                f"one the table keeps; corrupt index {first} or another first occurrence")
        succ[text[i]] = wrong = wrong_tok
    return SuccessorTable(text=text, successor=succ, fallback=fallback,
                          corrupt_at=None if corrupt_at is None else int(corrupt_at),
                          wrong=wrong, conflicts=tuple(conflicts))


def oracle_markov(table: SuccessorTable, n_vocab: int, *, rank: int | None = None,
                  scale: float = 10.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``markov_w1``, ``markov_w2`` (numpy ``(n_vocab, R)``) and the confidence weights over the
    rank columns for a one-hot successor bias (module docstring)."""
    targets = sorted(set(table.successor.values()) | {table.fallback})
    need = len(targets)
    r = need if rank is None else int(rank)
    if r < need:
        raise DSparkFileError(f"rank={r} is below the {need} distinct successors of the text "
                              f"(fallback included): pass rank={need} or more, or a shorter text")
    col = {s: j for j, s in enumerate(targets)}
    w1 = np.zeros((n_vocab, r), dtype=np.float32)
    w1[:, col[table.fallback]] = 1.0
    for t, s in table.successor.items():
        w1[t, :] = 0.0
        w1[t, col[s]] = 1.0
    w2 = np.zeros((n_vocab, r), dtype=np.float32)
    for s, j in col.items():
        w2[s, j] = scale
    conf = np.zeros(r, dtype=np.float32)
    conf[:need] = 4.0
    conf[col[table.fallback]] = -4.0
    return w1, w2, conf


def oracle_tensors(target: TargetShape, shape: DrafterShape, table: SuccessorTable, *,
                   rank: int | None = None, scale: float = 10.0) -> dict[str, np.ndarray]:
    """The zero backbone plus the one-hot Markov head (and confidence head) of ``table``."""
    out = {n: np.zeros(s, dtype=np.float32) for n, s in backbone_shapes(target, shape).items()}
    w1, w2, conf = oracle_markov(table, target.n_vocab, rank=rank, scale=scale)
    out["markov_w1.weight"], out["markov_w2.weight"] = w1, w2
    if shape.confidence_head:
        out["conf_proj.weight"] = np.concatenate(
            [np.zeros(target.n_embd, dtype=np.float32), conf])[None, :]
        out["conf_proj.bias"] = np.zeros((1,), dtype=np.float32)
    return out


def write_dflash_gguf(out: str | Path, target: TargetShape, shape: DrafterShape,
                      tensors: Mapping[str, np.ndarray], *, name: str,
                      extra: Mapping[str, Any] | None = None,
                      types: Mapping[str, str] | None = None) -> Path:
    """Write a ``dflash`` GGUF: the drafter's hyperparameters (hidden size and heads of the
    target, its own FFN width), the DSpark keys, the target's ``tokenizer.*`` keys and
    ``tensors``: F32, except an int64 array (``d2t``, written as I64) and the tensors that
    ``types`` names a ggml type for (``"F16"``, ``"Q8_0"``, ``"Q4_0"``: quantized with the
    ``gguf`` package)."""
    import gguf

    out = Path(out)
    layers = shape.layers_for(target)
    check_block_size(shape.block_size, "block")
    tmeta = gguf_meta(target.path)
    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(out) as tmp:
        w = gguf.GGUFWriter(tmp, arch=ARCH)
        w.add_name(name)
        w.add_type("model")
        qtypes = {n: gguf.GGMLQuantizationType[t] for n, t in (types or {}).items()}
        ftype = {"Q8_0": gguf.LlamaFileType.MOSTLY_Q8_0, "Q4_0": gguf.LlamaFileType.MOSTLY_Q4_0,
                 "F16": gguf.LlamaFileType.MOSTLY_F16}
        vals = list((types or {}).values())
        main = max(sorted(set(vals)), key=vals.count) if vals else "F32"
        w.add_uint32(gguf.Keys.General.FILE_TYPE, int(ftype.get(main, 0)))
        w.add_uint32(f"{ARCH}.context_length", target.n_ctx_train)
        w.add_uint32(KEY_EMBEDDING, target.n_embd)
        w.add_uint32(KEY_BLOCK_COUNT, shape.n_layers)
        w.add_uint32(f"{ARCH}.feed_forward_length", shape.ff_for(target))
        w.add_uint32(f"{ARCH}.attention.head_count", target.n_head)
        w.add_uint32(f"{ARCH}.attention.head_count_kv", target.n_head_kv)
        w.add_float32(f"{ARCH}.attention.layer_norm_rms_epsilon", target.rms_eps)
        w.add_float32(f"{ARCH}.rope.freq_base", target.rope_freq_base)
        w.add_array(KEY_TARGET_LAYERS, list(layers))
        w.add_uint32(KEY_BLOCK_SIZE, shape.block_size)
        w.add_bool(KEY_SAMPLE_FROM_ANCHOR, shape.sample_from_anchor)
        w.add_bool(KEY_HAS_CONFIDENCE, "conf_proj.weight" in tensors)
        for key, fld in tmeta.fields.items():
            if key.startswith("tokenizer.") and key != KEY_MASK:
                sub = None if fld.sub_type is None else gguf.GGUFValueType(fld.sub_type)
                w.add_key_value(key, fld.value, gguf.GGUFValueType(fld.vtype), sub_type=sub)
        w.add_uint32(KEY_MASK, shape.mask_for(target))
        for k, v in (extra or {}).items():
            if isinstance(v, (list, tuple)):
                w.add_array(k, [int(x) for x in v])
            elif isinstance(v, str):
                w.add_string(k, v)
            else:
                w.add_int32(k, int(v))
        for n, arr in tensors.items():
            if np.asarray(arr).dtype == np.int64:
                w.add_tensor(n, np.ascontiguousarray(arr))
            elif n in qtypes and qtypes[n] != gguf.GGMLQuantizationType.F32:
                a = np.ascontiguousarray(arr, dtype=np.float32)
                w.add_tensor(n, gguf.quants.quantize(a, qtypes[n]),
                             raw_dtype=qtypes[n])
            else:
                w.add_tensor(n, np.ascontiguousarray(arr, dtype=np.float32))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
    return out


def write_random(target_path: str | Path, out: str | Path, *, seed: int = 0,
                 shape: DrafterShape | None = None) -> Path:
    """A random-weight DSpark file for ``target_path`` (plumbing; almost nothing accepted)."""
    shape = shape or DrafterShape()
    target = read_target(target_path)
    return write_dflash_gguf(out, target, shape, random_tensors(target, shape, seed),
                             name=f"adaspark random DSpark for {target.path.stem}",
                             extra={KEY_KIND: "random", KEY_SEED: seed})


def write_oracle(target_path: str | Path, out: str | Path, text: Sequence[int], *,
                 corrupt_at: int | None = None, shape: DrafterShape | None = None,
                 rank: int | None = None, scale: float = 10.0) -> tuple[Path, SuccessorTable]:
    """An oracle DSpark file whose drafts follow ``text``'s successors (module docstring)."""
    shape = shape or DrafterShape()
    target = read_target(target_path)
    table = successor_table(text, target.n_vocab, corrupt_at)
    path = write_dflash_gguf(
        out, target, shape, oracle_tensors(target, shape, table, rank=rank, scale=scale),
        name=f"adaspark oracle DSpark for {target.path.stem}",
        extra={KEY_KIND: "oracle", KEY_TEXT: list(table.text), KEY_FALLBACK: table.fallback,
               KEY_CORRUPT_AT: -1 if corrupt_at is None else int(corrupt_at)})
    return path, table
