"""Compiled kernels: the scheduler's per-round loops (issue 12, "Scheduler host time").

The scheduler's per-round work is many small sequential steps (FTRL and AdaGrad per label, the
n-gram index, Prop. 1's order over ~70 candidates), which CPython runs at about a microsecond
per operation and numpy cannot vectorise at this size. :func:`kernel` compiles such a function
with numba in nopython mode: IEEE arithmetic (no ``fastmath``: no reassociation, no contraction),
so a kernel computes what the Python it replaced computed, operation for operation (libm's
``exp``/``log`` as ``math`` calls them). Each kernel is compiled on its first call in a machine
and cached beside its module (``NUMBA_CACHE_DIR`` moves the cache); a changed source is compiled
again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import numba

F = TypeVar("F", bound=Callable[..., Any])


def kernel(fn: F) -> F:
    """``fn`` compiled by numba (nopython, cached on disk, no fastmath)."""
    return numba.njit(cache=True, fastmath=False)(fn)  # type: ignore[no-any-return]
