"""Compiled kernels: the scheduler's per-round loops (issue 12, "Scheduler host time").

The scheduler's per-round work is many small sequential steps (FTRL and AdaGrad per label, the
n-gram index, Prop. 1's order over ~70 candidates), which CPython runs at about a microsecond
per operation and numpy cannot vectorise at this size. :func:`kernel` compiles such a function
with numba in nopython mode: IEEE arithmetic (no ``fastmath``: no reassociation, no contraction),
so a kernel computes what the Python it replaced computed, operation for operation (libm's
``exp``/``log`` as ``math`` calls them). Each kernel is compiled on its first call in a machine
and cached on disk; a changed source is compiled again. The cache lives under the per-machine
cache (``$ADASPARK_CACHE/numba``, or ``NUMBA_CACHE_DIR`` where that is set), never beside the
source: the pipeline's stages depend on ``src/``, and a kernel compiled by one stage must not
make the next see its own code as changed.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, TypeVar

from adaspark import paths

os.environ.setdefault("NUMBA_CACHE_DIR", str(paths.cache_dir() / "numba"))

import numba  # reads NUMBA_CACHE_DIR when first imported
import numba.core.config

if numba.core.config.CACHE_DIR != os.environ["NUMBA_CACHE_DIR"]:  # numba came in earlier
    numba.core.config.reload_config()

F = TypeVar("F", bound=Callable[..., Any])


def kernel(fn: F) -> F:
    """``fn`` compiled by numba (nopython, cached on disk, no fastmath)."""
    return numba.njit(cache=True, fastmath=False)(fn)  # type: ignore[no-any-return]
