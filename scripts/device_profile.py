#!/usr/bin/env python3
"""A device cost profile from random weights (issue 16, "Device cost profiles"): the verify-cost
survey of §3.2 (Table 1, Figure 3) over a GGUF with the *shapes and tensor types* of a target
but random values, plus the drafters' time per round, written as a device model file that
replay reads (``adaspark.replay.device``).

A verify's time depends on the model's shapes and weight format, not on its weight values, so a
machine without the model files (no network, nothing but what travels with the working tree) can
still price the paper's regime. This script is standalone on purpose: Python with numpy and
ctypes over a freshly built ``libllama`` (the ctypes bindings are llama-cpp-python's own
``llama_cpp.py`` from the same sdist as the source, matched to its ``llama.h``), and the ``gguf``
package vendored in llama.cpp's source. It imports nothing of the project. ``scripts/
device_profile.sh`` builds llama.cpp and runs it.

What it measures mirrors our engine's fast mode (``adaspark.decoding.engine.Target``): one
context of 64 sequences in one unified KV cache, micro-batches of 512, every core, prompts
prefilled in chunks of 128; a verify of ``w`` rows is the first ``w - 1`` candidates of a
``B x K`` DSpark block in best-first order (picks as a spine, siblings as leaves, Figure 1), one
sequence per leaf copied from sequence 0, every row with logits, the argmax read back; the
verify's cells are dropped after it. Each width is verified ``rounds`` times in a row per pass,
the first ``dropped`` dropped; passes alternate ascending and descending width order. Rows are
appended to ``survey.jsonl`` as they are measured (a run cut short keeps them) with the columns
of ``survey.parquet`` (``adaspark.replay.survey``).

Drafters: each ``--drafter`` shape file gets a random-weight GGUF too. A draft model's round is
``B`` one-token decodes; a ``dflash`` (DSpark) drafter's round is the injection of the rows a
verify committed (two, the embedded pair's typical acceptance) plus one block forward of its
``B`` positions, borrowing the target's context (``ctx_other``). Both are timed at each context.

Writes under ``--out``: ``models/*.gguf`` (deleted at the end unless ``--keep-models``),
``survey.jsonl``, ``drafters.jsonl``, ``device.yaml`` (the device model) and ``profile.json``
(settings, machine, GPU, build, timings).
"""

from __future__ import annotations

import argparse
import ctypes
import importlib
import json
import os
import platform
import subprocess
import sys
import time
import types
import typing
from pathlib import Path
from typing import Any

import numpy as np

SHAPE_FORMAT = "adaspark-gguf-shape/1"
N_SEQ_MAX = 64
N_BATCH = 512
PREFILL_CHUNK = 128
INJECT_ROWS = 2
#: fp16 scale fields, by byte offset, of each block of a quantized type (ggml-common.h)
F16_FIELDS = {"Q4_0": (0,), "Q4_1": (0, 2), "Q5_0": (0,), "Q5_1": (0, 2), "Q8_0": (0,),
              "Q2_K": (80, 82), "Q3_K": (108,), "Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (208,),
              "IQ4_NL": (0,), "IQ4_XS": (0,)}
#: the fp16 scale written into every block: about 0.05 over the type's largest |quant x
#: sub-scale|, so that random quants give weights of at most ~0.05 (no overflow in fp16 paths)
SCALES = {"Q4_0": 8, "Q4_1": 16, "Q5_0": 16, "Q5_1": 32, "Q8_0": 128, "Q2_K": 15 * 3,
          "Q3_K": 32 * 4, "Q4_K": 63 * 15, "Q5_K": 63 * 31, "Q6_K": 128 * 32,
          "IQ4_NL": 127, "IQ4_XS": 127 * 32}


def say(msg: str) -> None:
    print(f"device-profile: {msg}", file=sys.stderr, flush=True)


class ProfileError(RuntimeError):
    """Bad input; the message names the problem and the fix."""


# ---------------------------------------------------------------------------------------------
# Imports from the source tree


def import_gguf(gguf_py: Path) -> Any:
    if not (gguf_py / "gguf" / "__init__.py").is_file():
        raise ProfileError(f"{gguf_py} holds no gguf package: pass --gguf-py LLAMA_SRC/gguf-py")
    sys.path.insert(0, str(gguf_py))
    return importlib.import_module("gguf")


def import_bindings(bindings: Path, lib_dir: Path) -> Any:
    """llama-cpp-python's ctypes module ``llama_cpp.llama_cpp`` over ``lib_dir``'s libllama,
    without the package's high-level ``__init__`` (which needs more than numpy)."""
    mod = bindings / "llama_cpp" / "llama_cpp.py"
    if not mod.is_file():
        raise ProfileError(f"{mod} is missing: pass --bindings DIR holding llama_cpp/llama_cpp.py"
                           " (the source tarball has it under bindings/)")
    if not any(lib_dir.glob("libllama.*")):
        raise ProfileError(f"no libllama in {lib_dir}: build llama.cpp first "
                           "(scripts/device_profile.sh does)")
    try:
        import typing_extensions  # noqa: F401
    except ImportError:  # the bindings import only TypeAlias from it
        shim = types.ModuleType("typing_extensions")
        shim.TypeAlias = typing.TypeAlias  # type: ignore[attr-defined]
        sys.modules["typing_extensions"] = shim
    os.environ["LLAMA_CPP_LIB_PATH"] = str(lib_dir)
    pkg = types.ModuleType("llama_cpp")
    pkg.__path__ = [str(bindings / "llama_cpp")]  # type: ignore[attr-defined]
    sys.modules["llama_cpp"] = pkg
    return importlib.import_module("llama_cpp.llama_cpp")


_KEEP: list[Any] = []  # the log callback must outlive every llama.cpp call


def quiet(ll: Any) -> None:
    """llama.cpp's log: warnings and errors only (its load and graph messages fill screens)."""
    @ll.llama_log_callback
    def log(level: int, text: bytes, _user: Any) -> None:
        if level >= 3:  # GGML_LOG_LEVEL_WARN, _ERROR
            sys.stderr.write(text.decode("utf-8", errors="replace"))

    _KEEP.append(log)
    ll.llama_log_set(log, None)


# ---------------------------------------------------------------------------------------------
# A random-weight GGUF of a shape file


def read_shape(path: Path) -> dict[str, Any]:
    try:
        shape = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise ProfileError(f"cannot read the shape file {path}: {e}") from None
    if shape.get("format") != SHAPE_FORMAT:
        raise ProfileError(f"{path} is not a shape file ({SHAPE_FORMAT}); write one with "
                           "`adaspark device-shape model=FILE.gguf out=FILE.json`")
    return shape


def random_tensor(gguf: Any, name: str, shape: list[int], qtype: str,
                  rng: np.random.Generator, vocab: int = 0) -> tuple[np.ndarray, Any]:
    """Random data of ``qtype`` for a tensor of ``shape`` (ggml order, fastest first): normal
    values of scale 0.02 for float types; random quants with a fixed fp16 scale per block for a
    quantized type (so no block decodes to inf or NaN); token ids below ``vocab`` for an integer
    tensor."""
    t = getattr(gguf.GGMLQuantizationType, qtype, None)
    if t is None:
        raise ProfileError(f"tensor {name}: unknown ggml type {qtype}")
    n = int(np.prod(shape))
    if qtype in ("I8", "I16", "I32", "I64"):  # an index map (a DSpark file's d2t): valid ids
        return (np.arange(n) % max(1, vocab)).astype(f"int{qtype[1:]}").reshape(shape[::-1]), t
    if qtype in ("F32", "F16", "BF16"):
        x = (rng.standard_normal(n, dtype=np.float32) * 0.02).reshape(shape[::-1])
        if qtype == "F32":
            return x, t
        if qtype == "F16":
            return x.astype(np.float16), t
        return gguf.quants.quantize(x, t), t
    if qtype not in F16_FIELDS:
        raise ProfileError(f"tensor {name} is {qtype}, a type this writer has no block layout "
                           f"for (it knows {', '.join(['F32', 'F16', 'BF16', *F16_FIELDS])})")
    block, size = gguf.GGML_QUANT_SIZES[t]
    if shape[0] % block:
        raise ProfileError(f"tensor {name}: row of {shape[0]} is not a multiple of {qtype}'s "
                           f"block of {block}")
    n_blocks = n // block
    raw = rng.integers(0, 256, size=(n_blocks, size), dtype=np.uint8)
    scale = np.frombuffer(np.float16(0.05 / SCALES[qtype]).tobytes(), dtype=np.uint8)
    for off in F16_FIELDS[qtype]:
        raw[:, off:off + 2] = scale
    row_bytes = shape[0] // block * size
    return raw.reshape(*shape[1:][::-1], row_bytes), t


def write_random_gguf(gguf: Any, shape: dict[str, Any], path: Path, seed: int) -> None:
    """A GGUF with ``shape``'s architecture, metadata and tensors (names, shapes, types) and
    random values; no tokenizer ("none", with the vocabulary's size): tokens are random ids."""
    arch = shape["arch"]
    w = gguf.GGUFWriter(str(path), arch)
    for kv in shape["metadata"]:
        key, vtype, value = kv["key"], kv["type"], kv["value"]
        if key in ("general.architecture",) or key.startswith("tokenizer."):
            continue
        vt = getattr(gguf.GGUFValueType, vtype)
        if vt == gguf.GGUFValueType.ARRAY:
            w.add_key_value(key, value, vt, sub_type=getattr(gguf.GGUFValueType, kv["sub_type"]))
        else:
            w.add_key_value(key, value, vt)
    w.add_string("tokenizer.ggml.model", "none")
    w.add_uint32(f"{arch}.vocab_size", int(shape["n_vocab"]))
    rng = np.random.default_rng(seed)
    for t in shape["tensors"]:
        data, qt = random_tensor(gguf, t["name"], list(t["shape"]), t["type"], rng,
                                 int(shape["n_vocab"]))
        plain = t["type"] in ("F32", "F16", "I8", "I16", "I32", "I64")  # typed by the array
        w.add_tensor(t["name"], data, raw_dtype=None if plain else qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# ---------------------------------------------------------------------------------------------
# The engine's fast-mode verify, in ctypes


class Context:
    """A model and one context over it, with the engine's fast-mode parameters."""

    def __init__(self, ll: Any, path: Path, n_ctx: int, *, n_seq_max: int, n_gpu_layers: int,
                 threads: int, other: Context | None = None, n_batch: int = N_BATCH) -> None:
        self.ll = ll
        mp = ll.llama_model_default_params()
        mp.n_gpu_layers = n_gpu_layers
        self.model = ll.llama_model_load_from_file(str(path).encode(), mp)
        if not self.model:
            raise ProfileError(f"llama.cpp could not load {path}")
        cp = ll.llama_context_default_params()
        cp.n_ctx, cp.n_batch, cp.n_ubatch = n_ctx, n_batch, n_batch
        cp.n_seq_max, cp.kv_unified = n_seq_max, True  # as the engine's Model
        cp.n_threads = cp.n_threads_batch = threads
        cp.no_perf = True
        if other is not None:
            cp.ctx_other = other.ctx
        self.ctx = ll.llama_init_from_model(self.model, cp)
        if not self.ctx:
            raise ProfileError(f"llama.cpp could not create a context of {n_ctx} for {path}")
        self.mem = ll.llama_get_memory(self.ctx)
        self.n_vocab = int(ll.llama_vocab_n_tokens(ll.llama_model_get_vocab(self.model)))
        self.batch = ll.llama_batch_init(max(n_batch, 64), 0, n_seq_max)

    def close(self) -> None:
        ll = self.ll
        ll.llama_batch_free(self.batch)
        ll.llama_free(self.ctx)
        ll.llama_model_free(self.model)

    def fill(self, tokens: list[int], positions: list[int], seqs: list[list[int]],
             logits: list[bool]) -> None:
        b = self.batch
        b.n_tokens = len(tokens)
        for i, (t, p, s, o) in enumerate(zip(tokens, positions, seqs, logits, strict=True)):
            b.token[i], b.pos[i], b.n_seq_id[i], b.logits[i] = t, p, len(s), int(o)
            for k, sid in enumerate(s):
                b.seq_id[i][k] = sid

    def decode(self) -> None:
        rc = self.ll.llama_decode(self.ctx, self.batch)
        self.ll.llama_synchronize(self.ctx)
        if rc != 0:
            raise ProfileError(f"llama_decode failed ({rc}) on {self.batch.n_tokens} rows")

    def prefill(self, tokens: list[int]) -> None:
        self.ll.llama_memory_clear(self.mem, True)
        for a in range(0, len(tokens), PREFILL_CHUNK):
            part = tokens[a:a + PREFILL_CHUNK]
            self.fill(part, list(range(a, a + len(part))), [[0]] * len(part),
                      [False] * len(part))
            self.decode()

    def verify(self, anchor_pos: int, tokens: list[int], parents: list[int]) -> float:
        """One tree verify (the engine's :meth:`Target.verify`, fast mode) and its discard;
        returns the seconds from building the batch to the argmax."""
        ll, n = self.ll, len(tokens)
        t0 = time.perf_counter()
        depth = [0] * n
        for r in range(1, n):
            depth[r] = depth[parents[r]] + 1
        if n == 1:
            seqs = [[0]]
        else:
            has_child = set(parents[1:])
            leaves = [r for r in range(n) if r not in has_child]
            seqs = [[] for _ in range(n)]
            for k, leaf in enumerate(leaves, start=1):
                r = leaf
                while r != -1:
                    seqs[r].append(k)
                    r = parents[r]
                ll.llama_memory_seq_cp(self.mem, 0, k, -1, -1)
        self.fill(tokens, [anchor_pos + d for d in depth], seqs, [True] * n)
        self.decode()
        lg = np.ctypeslib.as_array(ll.llama_get_logits(self.ctx), shape=(n, self.n_vocab))
        lg.argmax(axis=1)
        dt = time.perf_counter() - t0
        ll.llama_memory_seq_keep(self.mem, 0)
        ll.llama_memory_seq_rm(self.mem, 0, anchor_pos, -1)
        return dt


def block_tree(width: int, B: int, K: int) -> list[int]:
    """Parents of a verify of ``width`` rows: the anchor and the first ``width - 1`` candidates,
    best first, of a ``B x K`` block whose candidates at position i hang from the pick of
    position i-1 (Figure 1). Path probabilities are a fixed stand-in (each pick 0.6, the r-th
    sibling 0.4 / 2^r): the shape, not the values, is what a verify's time depends on."""
    cands = []  # (q, index, parent candidate)
    for i in range(B):
        for r in range(K):
            share = 0.6 if r == 0 else 0.4 / 2 ** r
            cands.append((0.6 ** i * share, i * K + r, -1 if i == 0 else (i - 1) * K))
    order = sorted(cands, key=lambda c: (-c[0], c[1]))[: width - 1]
    row_of = {-1: 0}
    parents = [-1]
    for _, idx, par in order:
        parents.append(row_of[par])
        row_of[idx] = len(parents) - 1
    return parents


def pass_orders(widths: list[int], passes: int) -> list[list[int]]:
    up = sorted(set(widths))
    return [up if p % 2 == 0 else up[::-1] for p in range(passes)]


def append_row(path: Path, row: dict[str, Any]) -> None:
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(row) + "\n")
        f.flush()
        os.fsync(f.fileno())


def survey(tgt: Context, out: Path, a: argparse.Namespace, rng: np.random.Generator) -> None:
    rows_path = out / "survey.jsonl"
    for ctx in a.contexts:
        prompt = rng.integers(0, tgt.n_vocab, size=ctx).tolist()
        t0 = time.perf_counter()
        tgt.prefill(prompt[:-1])
        say(f"context {ctx:,}: prefilled in {time.perf_counter() - t0:.1f} s")
        anchor = ctx - 1
        for p, order in enumerate(pass_orders(a.widths, a.passes)):
            for w in order:
                parents = block_tree(w, a.block_positions, a.candidates)
                tokens = [prompt[-1], *rng.integers(0, tgt.n_vocab, size=w - 1).tolist()]
                for rnd in range(a.rounds):
                    dt = tgt.verify(anchor, tokens, parents)
                    append_row(rows_path, {
                        "context": ctx, "context_paper": ctx, "prompt": f"random-{ctx}",
                        "pass_index": p, "width": w, "round": rnd,
                        "kept": rnd >= a.dropped, "verify_ms": 1e3 * dt})
        here = [json.loads(x) for x in rows_path.read_text().splitlines()]
        med = {w: float(np.median([r["verify_ms"] for r in here if r["context"] == ctx
                                   and r["width"] == w and r["kept"]])) for w in a.widths}
        say(f"context {ctx:,}: " + " ".join(f"{w}:{m:.1f}ms" for w, m in med.items()))


def time_draft_model(ll: Any, path: Path, a: argparse.Namespace, rng: np.random.Generator,
                     out: Path, name: str) -> None:
    """A draft model's round: ``draft_positions`` one-token decodes at each context."""
    top = max(N_BATCH, max(a.contexts) + a.draft_positions + 8)
    m = Context(ll, path, top, n_seq_max=1, n_gpu_layers=a.n_gpu_layers, threads=a.threads)
    try:
        for ctx in a.contexts:
            m.prefill(rng.integers(0, m.n_vocab, size=ctx).tolist())
            for rnd in range(a.rounds):
                t0 = time.perf_counter()
                for i in range(a.draft_positions):
                    m.fill([int(rng.integers(0, m.n_vocab))], [ctx + i], [[0]], [True])
                    m.decode()
                    np.ctypeslib.as_array(ll.llama_get_logits(m.ctx),
                                          shape=(1, m.n_vocab)).argmax()
                dt = time.perf_counter() - t0
                ll.llama_memory_seq_rm(m.mem, 0, ctx, -1)
                append_row(out / "drafters.jsonl", {
                    "drafter": name, "kind": "draft-model", "context": ctx, "round": rnd,
                    "kept": rnd >= a.dropped, "positions": a.draft_positions,
                    "draft_ms": 1e3 * dt})
    finally:
        m.close()


def time_dflash(ll: Any, path: Path, shape: dict[str, Any], tgt: Context,
                a: argparse.Namespace, rng: np.random.Generator, out: Path, name: str) -> None:
    """A DSpark drafter's round: inject :data:`INJECT_ROWS` committed rows' target features,
    then one block forward of its B positions ([anchor, MASK...], non-causal), at each
    context."""
    meta = {kv["key"]: kv["value"] for kv in shape["metadata"]}
    B = int(meta.get("dflash.block_size", a.block_positions))
    n_layers_in = len(meta.get("dflash.target_layers", [])) or 1
    mask = 0  # the file has no tokenizer here: any id is a mask as far as time goes
    n_embd_tgt = int(ll.llama_model_n_embd(tgt.model))
    top = max(N_BATCH, max(a.contexts) + B + 8)
    d = Context(ll, path, top, n_seq_max=1, n_gpu_layers=a.n_gpu_layers, threads=a.threads,
                other=tgt)
    ll.llama_set_causal_attn(d.ctx, bool(meta.get("dflash.attention.causal", False)))
    width = n_layers_in * n_embd_tgt
    batch = ll.llama_batch_ext_init(d.ctx)

    def pos4(p: int) -> Any:
        return (ll.llama_pos * 4)(p, p, p, 0)

    def inject(start: int, n: int) -> None:
        for a0 in range(start, start + n, PREFILL_CHUNK):
            ll.llama_batch_ext_clear(batch)
            for p in range(a0, min(start + n, a0 + PREFILL_CHUNK)):
                row = (ctypes.c_float * width)(*rng.standard_normal(width).astype(np.float32))
                idx = ll.llama_batch_ext_add_embd(batch, 0, ll.llama_embd(row, 1, width))
                ll.llama_batch_ext_set_pos(batch, idx, pos4(p))
            rc = ll.llama_process(d.ctx, ll.LLAMA_PROCESS_TYPE_DECODE, batch)
            if rc != 0:
                raise ProfileError(f"the dflash drafter's feature injection failed ({rc})")

    n_vocab_d = d.n_vocab
    try:
        for ctx in a.contexts:
            P = ctx - 1  # the anchor's position: the drafter's KV holds 0..P-1
            ll.llama_memory_clear(d.mem, True)
            inject(0, P - INJECT_ROWS)
            for rnd in range(a.rounds):
                t0 = time.perf_counter()
                ll.llama_memory_seq_rm(d.mem, 0, P - INJECT_ROWS, -1)
                inject(P - INJECT_ROWS, INJECT_ROWS)
                ll.llama_batch_ext_clear(batch)
                for i, tok in enumerate([int(rng.integers(0, tgt.n_vocab))] + [mask] * (B - 1)):
                    idx = ll.llama_batch_ext_add_token(batch, 0, tok)
                    ll.llama_batch_ext_set_pos(batch, idx, pos4(P + i))
                    ll.llama_batch_ext_set_output_logits(batch, idx, True)
                rc = ll.llama_process(d.ctx, ll.LLAMA_PROCESS_TYPE_DECODE, batch)
                ll.llama_synchronize(d.ctx)
                if rc != 0:
                    raise ProfileError(f"the dflash drafter's block forward failed ({rc})")
                np.ctypeslib.as_array(ll.llama_get_logits(d.ctx), shape=(B, n_vocab_d)).argmax(1)
                dt = time.perf_counter() - t0
                append_row(out / "drafters.jsonl", {
                    "drafter": name, "kind": "dspark", "context": ctx, "round": rnd,
                    "kept": rnd >= a.dropped, "positions": B, "draft_ms": 1e3 * dt})
    finally:
        ll.llama_batch_ext_free(batch)
        d.close()


# ---------------------------------------------------------------------------------------------
# The device model (the format of adaspark.replay.device)


def fit_widths(rows: list[dict[str, Any]]) -> tuple[list[int], list[float], list[float],
                                                    list[int]]:
    """Eq. (3) per width: least-squares ``alpha + beta * c/1000`` over each context's median of
    the kept rounds (``adaspark.replay.device.device_from_survey``'s fit); a slope or intercept
    below 0 is set to 0 (the intercept to the fastest median) and the width reported."""
    widths = sorted({r["width"] for r in rows if r["kept"]})
    out_a, out_b, clamped = [], [], []
    for w in widths:
        ctxs = sorted({r["context"] for r in rows if r["kept"] and r["width"] == w})
        med = [float(np.median([r["verify_ms"] for r in rows if r["kept"] and r["width"] == w
                                and r["context"] == c])) for c in ctxs]
        if len(ctxs) < 2:
            a_, b_ = med[0], 0.0
        else:
            x = np.asarray(ctxs, dtype=float) / 1000.0
            b_, a_ = (float(v) for v in np.polyfit(x, np.asarray(med), 1))
        if a_ < 0 or b_ < 0:
            clamped.append(w)
            a_ = a_ if a_ >= 0 else min(med)
            b_ = max(b_, 0.0)
        out_a.append(round(a_, 4))
        out_b.append(round(b_, 4))
    return widths, out_a, out_b, clamped


def yaml_value(v: Any) -> str:
    return json.dumps(v)  # JSON scalars and flow lists are YAML


def write_device_yaml(path: Path, name: str, rows: list[dict[str, Any]], draft_ms: float,
                      draft_source: str, machine: dict[str, Any], label_source: str,
                      weights: str = "random-weight") -> None:
    widths, alphas, betas, clamped = fit_widths(rows)
    sources = {"verify": f"least-squares alpha + beta c per width over survey.jsonl's medians "
                         f"({label_source})",
               "draft_ms": draft_source,
               "host_ms": "0: a replay's host time is this project's scheduler; set it from a "
                          "run's round trace on the device",
               "machine": machine.get("summary", "")}
    if clamped:
        sources["clamped"] = (f"widths {clamped}: a fitted slope or intercept below 0 was set "
                              "to 0 (the intercept to the width's fastest median)")
    lines = [f"# Device model measured by scripts/device_profile.sh ({label_source}).",
             f"name: {yaml_value(name)}", "label: measured",
             f"description: {yaml_value(weights + ' profile of ' + label_source)}",
             "verify:", f"  rows: {yaml_value(widths)}", f"  alpha_ms: {yaml_value(alphas)}",
             f"  beta_ms_per_1k: {yaml_value(betas)}", "  shape: step",
             f"draft_ms: {round(float(draft_ms), 4)}", "host_ms: 0.0", "sources:"]
    lines += [f"  {k}: {yaml_value(v)}" for k, v in sources.items()]
    tmp = path.with_suffix(".tmp")
    tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")
    tmp.replace(path)


def machine_info() -> dict[str, Any]:
    info: dict[str, Any] = {"host": platform.node(), "machine": platform.machine(),
                            "python": platform.python_version(), "cpus": os.cpu_count()}
    try:
        q = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                            "--format=csv,noheader"], capture_output=True, text=True, timeout=30)
        if q.returncode == 0 and q.stdout.strip():
            info["gpus"] = [ln.strip() for ln in q.stdout.strip().splitlines()]
    except (OSError, subprocess.SubprocessError):
        pass
    cpu = ""
    try:
        for ln in Path("/proc/cpuinfo").read_text().splitlines():
            if ln.startswith("model name"):
                cpu = ln.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    info["cpu"] = cpu
    info["summary"] = (f"{info['gpus'][0]}" if info.get("gpus") else
                       f"{cpu or platform.machine()}, {os.cpu_count()} threads")
    return info


def ints(text: str) -> list[int]:
    """``1,2,4`` or ranges ``1-64`` (inclusive), or both: ``1-8,16,32``."""
    out: list[int] = []
    try:
        for part in (x.strip() for x in text.split(",")):
            if not part:
                continue
            lo, dash, hi = part.partition("-")
            out += list(range(int(lo), int(hi) + 1)) if dash else [int(part)]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: comma-separated integers or ranges "
                                         "(1-64)") from None
    return sorted(set(out))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib-dir", type=Path, required=True, help="the build's libllama directory")
    ap.add_argument("--bindings", type=Path, required=True,
                    help="directory holding llama_cpp/llama_cpp.py (llama-cpp-python's ctypes)")
    ap.add_argument("--gguf-py", type=Path, required=True, help="LLAMA_SRC/gguf-py")
    ap.add_argument("--shape", type=Path, required=True, help="the target's shape file")
    ap.add_argument("--drafter", type=Path, action="append", default=[],
                    help="a drafter's shape file (repeatable)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--name", default=None, help="the device model's name")
    ap.add_argument("--build", type=Path, default=None, help="the build's BUILD_INFO file")
    ap.add_argument("--widths", type=ints, default=ints("1-64"),
                    help="rows per verify (default every width 1-64)")
    ap.add_argument("--contexts", type=ints, default=ints("443,1596,8444"))
    ap.add_argument("--passes", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--dropped", type=int, default=2)
    ap.add_argument("--block-positions", type=int, default=8)
    ap.add_argument("--candidates", type=int, default=8)
    ap.add_argument("--draft-positions", type=int, default=4,
                    help="a draft model's positions per round (the embedded drafter's B)")
    ap.add_argument("--verbose", action="store_true", help="llama.cpp's own log too")
    ap.add_argument("--n-gpu-layers", type=int, default=-1)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--keep-models", action="store_true")
    ap.add_argument("--model", type=Path, default=None,
                    help="time this GGUF (its real weights) instead of a random-weight file of "
                         "--shape: the control that tells weights from harness")
    a = ap.parse_args(argv)
    try:
        return run(a)
    except ProfileError as e:
        print(f"device-profile: {e}", file=sys.stderr)
        return 1


def run(a: argparse.Namespace) -> int:
    t_all = time.perf_counter()
    if a.rounds <= a.dropped:
        raise ProfileError(f"--rounds {a.rounds} must exceed --dropped {a.dropped}")
    reach = 1 + a.block_positions * a.candidates
    if max(a.widths) > min(64, reach) or min(a.widths) < 1:
        raise ProfileError(f"--widths must lie in 1..{min(64, reach)} (the widest verify, and a "
                           f"{a.block_positions}x{a.candidates} block's reach)")
    gguf = import_gguf(a.gguf_py)
    ll = import_bindings(a.bindings, a.lib_dir)
    if not a.verbose:
        quiet(ll)
    ll.llama_backend_init()
    out = a.out
    (out / "models").mkdir(parents=True, exist_ok=True)
    for f in ("survey.jsonl", "drafters.jsonl"):
        (out / f).unlink(missing_ok=True)
    shape = read_shape(a.shape)
    drafters = [(p, read_shape(p)) for p in a.drafter]
    machine = machine_info()
    build = json.loads(a.build.read_text()) if a.build and a.build.is_file() else {}
    meta: dict[str, Any] = {
        "format": "adaspark-device-profile/1", "label": "measured",
        "weights": ("random (shapes and tensor types of the shape files; no model values)"
                    if a.model is None else f"real: {a.model.name} (--model)"),
        "target_shape": {"file": a.shape.name, "source": shape.get("source")},
        "drafter_shapes": [{"file": p.name, "source": s.get("source")} for p, s in drafters],
        "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(a).items()},
        "machine": machine, "build": build, "gpu_offload": bool(ll.llama_supports_gpu_offload()),
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    (out / "profile.json").write_text(json.dumps(meta, indent=1, default=str))
    rng = np.random.default_rng(a.seed)
    t0 = time.perf_counter()
    if a.model is not None:  # the control: real weights through the same harness
        tpath = a.model
        say(f"timing the model file {tpath} itself (real weights)")
    else:
        tpath = out / "models" / "target.gguf"
        write_random_gguf(gguf, shape, tpath, a.seed)
        say(f"random target ({shape['arch']}, {tpath.stat().st_size / 2**20:.0f} MiB) written "
            f"in {time.perf_counter() - t0:.1f} s")
    # llama.cpp caps a context's batch and output rows at the context asked for: never below
    # the micro-batch
    n_ctx = max(N_BATCH, max(a.contexts) + max(a.widths) + 8)
    tgt = Context(ll, tpath, n_ctx, n_seq_max=N_SEQ_MAX, n_gpu_layers=a.n_gpu_layers,
                  threads=a.threads)
    timings: dict[str, float] = {}
    try:
        t0 = time.perf_counter()
        survey(tgt, out, a, rng)
        timings["survey_s"] = round(time.perf_counter() - t0, 2)
        draft: dict[str, float] = {}
        for i, (p, s) in enumerate(drafters):
            name = s.get("name") or p.stem
            dpath = out / "models" / f"drafter-{i}.gguf"
            write_random_gguf(gguf, s, dpath, a.seed + 1 + i)
            t0 = time.perf_counter()
            if s["arch"] == "dflash":
                time_dflash(ll, dpath, s, tgt, a, rng, out, name)
            else:
                time_draft_model(ll, dpath, a, rng, out, name)
            timings[f"drafter_{name}_s"] = round(time.perf_counter() - t0, 2)
            rows = [json.loads(x) for x in (out / "drafters.jsonl").read_text().splitlines()]
            kept = [r["draft_ms"] for r in rows if r["drafter"] == name and r["kept"]]
            draft[name] = float(np.median(kept))
            say(f"drafter {name} ({s['arch']}): {draft[name]:.1f} ms per round (median)")
    finally:
        tgt.close()
    rows = [json.loads(x) for x in (out / "survey.jsonl").read_text().splitlines()]
    timed = a.model.name if a.model is not None else shape.get("source", {}).get("file",
                                                                                 a.shape.stem)
    label = f"{timed} on {machine['summary']}"
    weights = "random-weight" if a.model is None else "real-weight"
    first = next(iter(draft.items()), None)
    name = a.name or f"profile-{platform.node()}"
    write_device_yaml(out / "device.yaml", name, rows, first[1] if first else 0.0,
                      (f"median round of the random-weight drafter {first[0]} over "
                       "drafters.jsonl" if first else "no drafter shape given: 0"),
                      machine, label, weights)
    for n, ms in list(draft.items())[1:]:
        write_device_yaml(out / f"device-{n}.yaml", f"{name}-{n}", rows, ms,
                          f"median round of the random-weight drafter {n} over drafters.jsonl",
                          machine, label, weights)
    meta.update({"timings": {**timings, "total_s": round(time.perf_counter() - t_all, 2)},
                 "draft_ms": draft, "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                              time.gmtime())})
    (out / "profile.json").write_text(json.dumps(meta, indent=1, default=str))
    if not a.keep_models:  # the random files (never --model's)
        for f in (out / "models").glob("*.gguf"):
            f.unlink()
    say(f"done in {time.perf_counter() - t_all:.0f} s: {out / 'device.yaml'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
