"""llama.cpp's process and context setup: the kernel mode (HARNESS "Kernels"), the backend and
its log, loading a GGUF and the context parameters every context of ours shares.

The engine (:mod:`adaspark.decoding.engine`) and the drafters build on these; nothing here holds a
request's state.
"""

from __future__ import annotations

import ctypes
import os
import threading
from pathlib import Path

_PROCESS_MODE: str | None = None
_LOCK = threading.Lock()
_LOG_CB = None  # keep the ctypes callback alive


class EngineError(RuntimeError):
    """llama.cpp refused an operation; the message says which and what to do."""


def _llama():
    """Import llama_cpp lazily, so pure modules never load the shared library."""
    import llama_cpp

    return llama_cpp


def set_kernel_mode(exact: bool) -> str:
    """Fix this process's kernel mode before the first matmul; refuse to switch it later."""
    global _PROCESS_MODE
    mode = "exact" if exact else "fast"
    if exact:
        from adaspark.decoding.backend import build_backend, check_exact

        check_exact(True, build_backend())
    with _LOCK:
        if _PROCESS_MODE is None:
            env = os.environ.get("GGML_CPU_TILED_MM")
            if exact:
                os.environ["GGML_CPU_TILED_MM"] = "0"
            elif env is not None and env.strip() == "0":
                raise EngineError(
                    "fast mode asked for, but GGML_CPU_TILED_MM=0 is set in the environment "
                    "(that is exact mode's kernel switch). Unset it, or pass exact=true."
                )
            _PROCESS_MODE = mode
            _init_backend()
        elif _PROCESS_MODE != mode:
            raise EngineError(
                f"this process already runs llama.cpp in {_PROCESS_MODE} mode; its kernel "
                f"switch is read once per process, so {mode} mode needs a new process"
            )
    return mode


def kernel_mode() -> str | None:
    return _PROCESS_MODE


def _init_backend() -> None:
    global _LOG_CB
    ll = _llama()
    ll.llama_backend_init()
    verbose = os.environ.get("ADASPARK_LLAMA_LOG", "") not in ("", "0")

    shown = [False]

    @ll.llama_log_callback
    def _log(level, text, _user):  # type: ignore[no-untyped-def]
        # ggml_log_level: 1 debug, 2 info, 3 warn, 4 error, 5 continues the previous line
        show = verbose or level == 4 or (level == 5 and shown[0])
        shown[0] = show
        if show and text:
            os.write(2, text)

    _LOG_CB = _log
    ll.llama_log_set(_log, ctypes.c_void_p(0))


def context_record(cp, mp, *, exact: bool, n_ctx_asked: int) -> dict[str, object]:
    """The context parameters a run records, named as llama-server's flags, so that its settings
    and ours can be compared (issue 12, plain-decode parity; README "Plain decode parity")."""
    ll = _llama()
    fa = {ll.LLAMA_FLASH_ATTN_TYPE_AUTO: "auto", ll.LLAMA_FLASH_ATTN_TYPE_ENABLED: "on",
          ll.LLAMA_FLASH_ATTN_TYPE_DISABLED: "off"}.get(cp.flash_attn_type, "?")
    types = {ll.GGML_TYPE_F16: "f16", ll.GGML_TYPE_F32: "f32", ll.GGML_TYPE_Q8_0: "q8_0"}
    load = {getattr(ll, f"LLAMA_LOAD_MODE_{m}"): m.lower()
            for m in ("AUTO", "DIRECT_IO", "MLOCK", "MMAP", "MMAP_MLOCK", "NONE")}
    return {"ctx_size": n_ctx_asked, "batch_size": int(cp.n_batch),
            "ubatch_size": int(cp.n_ubatch), "threads": int(cp.n_threads),
            "threads_batch": int(cp.n_threads_batch), "flash_attn": fa,
            "cache_type_k": types.get(int(cp.type_k), str(cp.type_k)),
            "cache_type_v": types.get(int(cp.type_v), str(cp.type_v)),
            "n_seq_max": int(cp.n_seq_max), "kv_unified": bool(cp.kv_unified),
            "load_mode": load.get(int(mp.load_mode), str(mp.load_mode)),
            "repack": bool(mp.use_extra_bufts), "tiled_mm": not exact,
            "n_gpu_layers": int(mp.n_gpu_layers)}


def load_gguf(path: Path, *, exact: bool, what: str = "",
              n_gpu_layers: int = 0) -> tuple[ctypes.c_void_p, object]:
    """llama.cpp's model for ``path`` (exact mode without repacked weights) with
    ``n_gpu_layers`` layers offloaded (0: on the CPU; -1: every layer;
    :func:`adaspark.decoding.backend.gpu_layers` resolves the config's value) and the parameters
    it was loaded with; ``what`` names the file in the error (e.g. "the drafter ")."""
    ll = _llama()
    mp = ll.llama_model_default_params()
    mp.n_gpu_layers = n_gpu_layers
    if exact:
        mp.use_extra_bufts = False
    model = ll.llama_model_load_from_file(str(path).encode(), mp)
    if not model:
        raise EngineError(f"llama.cpp could not load {what}{path} (not a GGUF it can read?)")
    return model, mp


def context_params(n_ctx: int, n_batch: int, *, n_seq_max: int, exact: bool,
                   threads: int | None = None, kv_unified: bool = True):
    """The context parameters every context of ours shares: one logical batch the size of the
    micro-batch, every core (or ``threads``) for decode and batch, flash attention forced on in
    exact mode (its kernels are the deterministic path), no perf counters."""
    ll = _llama()
    cp = ll.llama_context_default_params()
    cp.n_ctx = n_ctx
    cp.n_batch = n_batch
    cp.n_ubatch = n_batch
    cp.n_seq_max = n_seq_max
    cp.kv_unified = kv_unified
    nt = threads or os.cpu_count() or 1
    cp.n_threads = nt
    cp.n_threads_batch = nt
    if exact:
        cp.flash_attn_type = ll.LLAMA_FLASH_ATTN_TYPE_ENABLED
    cp.no_perf = True
    return cp


def free_native(owner: object) -> None:
    """Free ``owner.ctx`` then ``owner.model`` (each once; safe on a half-built owner)."""
    ll = _llama()
    if getattr(owner, "ctx", None):
        ll.llama_free(owner.ctx)
        owner.ctx = None
    if getattr(owner, "model", None):
        ll.llama_model_free(owner.model)
        owner.model = None


def model_meta(model: ctypes.c_void_p, key: str) -> str | None:
    """A metadata value of a loaded model as text (None when the key is absent)."""
    buf = ctypes.create_string_buffer(4096)
    n = _llama().llama_model_meta_val_str(model, key.encode(), buf, 4096)
    return buf.value.decode("utf-8", errors="replace") if n >= 0 else None
