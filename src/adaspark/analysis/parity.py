"""Plain-decode parity: one engine's decode speed over another's, measured alternated (issue 12).

Two servers are up at once and every prompt is served by both in turn, rotating which goes first
(:func:`rotation`), so slow drift of a busy machine falls on both alike. Each repetition of a
prompt gives one *pair* of replies; its log ratio is ``log(speed A / speed B)`` on the client's
clock (§4.1, :func:`adaspark.serving.client.decode_tps`). The ratio of a prompt is the geometric
mean over its pairs, with a bootstrap interval over those pairs; a group of prompts (a context
band, a kind of prompt, all of them) pools its pairs with the prompts as clusters, as §4.1
resamples conversations (:func:`adaspark.analysis.bootstrap.bootstrap_geomean`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from itertools import pairwise
from typing import Any

import numpy as np

from adaspark.analysis.bootstrap import DEFAULT_SEED, StatsInputError, bootstrap_geomean


def rotation(arms: Sequence[str], index: int) -> list[str]:
    """The order in which the ``index``-th request goes to ``arms``: the list rotated by
    ``index``, so that over ``len(arms)`` consecutive requests each arm goes first once."""
    if not arms:
        raise StatsInputError("rotation needs at least one arm")
    k = index % len(arms)
    return [*arms[k:], *arms[:k]]


@dataclass(frozen=True)
class PairedReply:
    """One repetition of one prompt, served by both arms: their client-clock decode speeds
    (tok/s, ``None`` for a single-delta reply) and the prompt's length in tokens."""

    prompt: str
    group: str
    rep: int
    prompt_tokens: int
    completion_tokens: int
    speed_a: float | None
    speed_b: float | None

    @property
    def log_ratio(self) -> float | None:
        if not self.speed_a or not self.speed_b:
            return None
        return math.log(self.speed_a / self.speed_b)

    @property
    def context(self) -> float:
        """The context the reply decodes at: the prompt plus half the reply (as Tables 3/9)."""
        return self.prompt_tokens + self.completion_tokens / 2


@dataclass(frozen=True)
class ParityRatio:
    """A's speed over B's for a set of pairs: the geometric mean and its 95% interval."""

    label: str
    ratio: float
    lo: float
    hi: float
    n_pairs: int
    n_prompts: int
    context_min: float
    context_max: float
    n_dropped: int = 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def cell(self, digits: int = 3) -> str:
        return f"{self.ratio:.{digits}f} ({self.lo:.{digits}f}-{self.hi:.{digits}f})"


def ratio_of(pairs: Sequence[PairedReply], label: str, *, seed: int = DEFAULT_SEED) -> ParityRatio:
    """The geometric-mean ratio of ``pairs`` with a bootstrap interval that resamples prompts
    (each prompt's repetitions together); one prompt resamples its repetitions instead. Pairs
    with a single-delta reply are dropped and counted."""
    kept = [p for p in pairs if p.log_ratio is not None]
    if not kept:
        raise StatsInputError(f"{label}: no pair has a decode speed on both arms")
    logs = np.array([p.log_ratio for p in kept], dtype=float)
    prompts = [p.prompt for p in kept]
    clusters = prompts if len(set(prompts)) > 1 else None
    ratio, lo, hi, _ = bootstrap_geomean(logs, clusters, seed=seed)
    ctx = [p.context for p in kept]
    return ParityRatio(label=label, ratio=ratio, lo=lo, hi=hi, n_pairs=len(kept),
                       n_prompts=len(set(prompts)), context_min=min(ctx), context_max=max(ctx),
                       n_dropped=len(pairs) - len(kept))


def band_label(context: float, edges: Sequence[int]) -> str:
    """The band of ``context`` tokens among ascending ``edges``: ``under E0``, ``E0-E1``, ...,
    ``En and over``."""
    if not edges or list(edges) != sorted(set(edges)):
        raise StatsInputError(f"band edges must be ascending and distinct, got {list(edges)}")
    if context < edges[0]:
        return f"under {edges[0]:,}"
    for lo, hi in pairwise(edges):
        if context < hi:
            return f"{lo:,}-{hi - 1:,}"
    return f"{edges[-1]:,} and over"


def grouped(pairs: Sequence[PairedReply], key: Callable[[PairedReply], str], *,
            seed: int = DEFAULT_SEED) -> list[ParityRatio]:
    """One :class:`ParityRatio` per value of ``key``, in order of first appearance."""
    groups: dict[str, list[PairedReply]] = {}
    for p in pairs:
        groups.setdefault(key(p), []).append(p)
    return [ratio_of(g, k, seed=seed) for k, g in groups.items()
            if any(p.log_ratio is not None for p in g)]


def parity_report(pairs: Sequence[PairedReply], *, band_edges: Sequence[int] = (512, 2048),
                  seed: int = DEFAULT_SEED) -> dict[str, Any]:
    """Per prompt (ordered by context), per group, per context band and over all pairs."""
    by_prompt = sorted(grouped(pairs, lambda p: p.prompt, seed=seed),
                       key=lambda r: r.context_min)
    return {
        "per_prompt": [r.as_dict() for r in by_prompt],
        "per_group": [r.as_dict() for r in grouped(pairs, lambda p: p.group, seed=seed)],
        "per_band": [r.as_dict() for r in sorted(
            grouped(pairs, lambda p: band_label(p.context, band_edges), seed=seed),
            key=lambda r: r.context_min)],
        "overall": ratio_of(pairs, "all", seed=seed).as_dict(),
        "worst_prompt": min(by_prompt, key=lambda r: r.ratio).as_dict() if by_prompt else None,
    }
