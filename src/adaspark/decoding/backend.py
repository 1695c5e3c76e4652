"""The llama.cpp build's compute backend (issue 16, "GPU builds"): what follows from it for the
engine and llama-server.

``scripts/setup.sh`` builds llama.cpp for one backend (``ADASPARK_BACKEND=cpu|cuda|metal|auto``;
``scripts/backend.sh`` makes the choice) and records it in the venv's build file. Three rules
follow, as pure functions of the backend so that they are tested on a CPU machine:

* **Layers offloaded** (``target.n_gpu_layers``, ``drafter.n_gpu_layers``): null means every
  layer on a GPU build and none on a CPU build; a number of layers on a CPU build is refused (it
  would be ignored by llama.cpp, silently).
* **Exact mode is a CPU property.** Its bit-identity with plain decoding rests on the CPU kernels
  (HARNESS "Kernels"); a GPU build refuses ``exact=true`` with a message saying so, and the
  commands whose default is exact mode (``generate``) default to fast mode there.
* **llama-server's flags**: ``--n-gpu-layers`` and ``--n-gpu-layers-draft`` on a GPU build only.
"""

from __future__ import annotations

from typing import Final

from adaspark.config import ConfigError

BACKENDS: Final = ("cpu", "cuda", "metal")
GPU_BACKENDS: Final = ("cuda", "metal")
#: llama.cpp's ``llama_model_params.n_gpu_layers`` for "every layer" (llama.h: negative = all).
ALL_LAYERS: Final = -1

REBUILD_HINT = ("rebuild for a GPU with `ADASPARK_BACKEND=cuda bash scripts/setup.sh` (on a "
                "machine where `nvidia-smi -L` lists a GPU and nvcc is on PATH)")


class BackendError(ConfigError):
    """A setting the build's backend cannot honour; the message names the key and the fix."""


def build_backend() -> str:
    """The backend of the llama.cpp build this venv uses (``cpu`` for a build recorded before
    backends were recorded: those were all CPU builds)."""
    from adaspark import paths

    try:
        backend = str(paths.build_info().get("backend") or "cpu")
    except FileNotFoundError:
        return "cpu"
    if backend not in BACKENDS:
        raise BackendError(f"the build file {paths.build_info_file()} names backend "
                           f"{backend!r}, not one of {', '.join(BACKENDS)}: rerun "
                           "`bash scripts/setup.sh`")
    return backend


def is_gpu(backend: str) -> bool:
    return backend in GPU_BACKENDS


def gpu_layers(value: int | None, backend: str, key: str) -> int:
    """``llama_model_params.n_gpu_layers`` for the config value ``value`` of ``key``: null gives
    every layer on a GPU build (:data:`ALL_LAYERS`) and 0 on a CPU build; ``-1`` is every layer;
    a positive count (or -1) on a CPU build is refused."""
    if value is None:
        return ALL_LAYERS if is_gpu(backend) else 0
    if value < ALL_LAYERS:
        raise BackendError(f"{key}={value}: a number of layers (0 or more), -1 for every layer, "
                           "or null for the build's default")
    if value != 0 and not is_gpu(backend):
        raise BackendError(f"{key}={value}, but this llama.cpp build has no GPU backend "
                           f"(backend {backend}): set {key}=0 or null, or {REBUILD_HINT}")
    return int(value)


def server_gpu_flags(target_layers: int, drafter_layers: int | None, backend: str) -> list[str]:
    """llama-server's offload flags for resolved layer counts (:func:`gpu_layers`); none on a
    CPU build, where llama-server would only warn that it ignores them."""
    if not is_gpu(backend):
        return []

    def word(n: int) -> str:
        return "all" if n == ALL_LAYERS else str(n)

    flags = ["--n-gpu-layers", word(target_layers)]
    if drafter_layers is not None:
        flags += ["--n-gpu-layers-draft", word(drafter_layers)]
    return flags


def check_exact(exact: bool, backend: str) -> None:
    """Refuse exact mode on a GPU build (its bit-identity is a property of the CPU kernels)."""
    if exact and is_gpu(backend):
        raise BackendError(
            f"exact=true needs a CPU build of llama.cpp; this one runs on {backend}. Exact mode's "
            "bit-identity with plain decoding is a property of llama.cpp's CPU kernels (HARNESS "
            "\"Kernels\"), which a GPU build does not run: pass exact=false (fast mode; Table 10 "
            "then reports near-tie differences), or run the check on a CPU build "
            "(ADASPARK_BACKEND=cpu bash scripts/setup.sh)")


def default_exact(backend: str) -> bool:
    """``generate``'s kernel mode when ``exact`` is null: exact on a CPU build, fast on a GPU."""
    return not is_gpu(backend)


def configured_gpu_layers(group: object, key: str, backend: str | None = None) -> int:
    """:func:`gpu_layers` of a ``target`` or ``drafter`` group's ``n_gpu_layers`` (a typed
    config or a mapping; absent means null), for this venv's build unless ``backend`` is given."""
    value = group.get("n_gpu_layers") if isinstance(group, dict) or hasattr(group, "get") \
        else getattr(group, "n_gpu_layers", None)
    return gpu_layers(None if value is None else int(value), backend or build_backend(),
                      f"{key}.n_gpu_layers")
