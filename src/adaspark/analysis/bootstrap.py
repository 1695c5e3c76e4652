"""The bootstrap interval of a geometric mean of ratios, over conversations (§4.1).

:func:`bootstrap_geomean` is ``scipy.stats.bootstrap`` over conversation indices: the data given
to scipy is the array ``0 .. n_conversations - 1``; a resample draws that many indices with
replacement, and its statistic pools the drawn conversations' replies, the mean of all their log
ratios (a reply-weighted mean, not a mean of conversation means). The interval is scipy's
``percentile`` interval by default, as the paper (2,000 resamples, 95%); ``BCa`` (bias-corrected
and accelerated) is the option ``tables.bootstrap_method``. Percentiles are taken on the
log-ratio scale (linear interpolation, NumPy's default) and mapped back with ``exp``.

Resamples come from a seeded :class:`numpy.random.Generator` (``numpy.random.default_rng``) and
are drawn in batches of at most :data:`MAX_DRAW_ELEMENTS` indices (scipy's ``batch``), so memory
stays bounded however many conversations there are; the statistic is vectorised over a batch.

:class:`StatsInputError` is the error of every statistics function (here and
:mod:`adaspark.analysis.stats`): this is the lowest module of the two.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Literal

import numpy as np
import pandas as pd
import scipy.stats

from adaspark.schema import BOOTSTRAP_METHODS

#: Resamples of the percentile bootstrap (§4.1).
DEFAULT_N_RESAMPLES = 2000
#: Two-sided coverage of the interval (§4.1: 95%).
DEFAULT_CONFIDENCE = 0.95
#: Fixed seed of the bootstrap when the caller gives none; recorded in every result.
DEFAULT_SEED = 20240601
#: scipy's interval methods offered (:data:`adaspark.schema.BOOTSTRAP_METHODS`): the paper's
#: percentile interval, and BCa.
BootstrapMethod = Literal["percentile", "BCa"]
DEFAULT_BOOTSTRAP_METHOD: BootstrapMethod = "percentile"
#: Bound on the number of drawn indices held at once (one batch of resamples), to bound memory.
MAX_DRAW_ELEMENTS = 4_000_000


class StatsInputError(ValueError):
    """Bad input to a statistics function: the message says what and where."""


def check_int(value: object, name: str, minimum: int) -> int:
    """``value`` as an int of at least ``minimum``, or a :class:`StatsInputError` naming it."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise StatsInputError(f"{name} must be an integer, got {value!r}")
    if int(value) < minimum:
        raise StatsInputError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def check_method(method: object) -> BootstrapMethod:
    """``method`` if it is one of :data:`BOOTSTRAP_METHODS`, else a :class:`StatsInputError`."""
    if method not in BOOTSTRAP_METHODS:
        raise StatsInputError(f"bootstrap method must be one of {list(BOOTSTRAP_METHODS)}, "
                              f"got {method!r}")
    return method  # type: ignore[return-value]


def _cluster_codes(n_values: int, clusters: np.ndarray | Sequence[Hashable] | None) -> np.ndarray:
    if clusters is None:
        return np.arange(n_values)
    labels = list(clusters)
    if len(labels) != n_values:
        raise StatsInputError(f"{len(labels)} cluster labels for {n_values} log ratios")
    codes, _ = pd.factorize(pd.Series(labels, dtype=object))
    return np.asarray(codes)


def bootstrap_geomean(
    log_ratios: np.ndarray | Sequence[float],
    clusters: np.ndarray | Sequence[Hashable] | None = None,
    *,
    seed: int = DEFAULT_SEED,
    n_resamples: int = DEFAULT_N_RESAMPLES,
    confidence: float = DEFAULT_CONFIDENCE,
    method: BootstrapMethod = DEFAULT_BOOTSTRAP_METHOD,
) -> tuple[float, float, float, np.ndarray]:
    """Geometric mean of ratios and its bootstrap interval (§4.1; module docstring).

    ``log_ratios`` holds one log ratio per reply. With ``clusters`` (one label per reply: its
    conversation) each resample draws as many clusters as there are, with replacement, and takes
    every reply of each drawn cluster; with ``clusters=None`` each reply is its own cluster (the
    reply-level bootstrap, which ignores correlation within a conversation). Each resample's
    statistic is the mean log ratio over the replies it holds.

    Returns ``(ratio, lo, hi, boot_ratios)``: the point estimate ``exp(mean(log_ratios))``, the
    interval's bounds (``method``: ``percentile``, the ``(1 - confidence) / 2`` and
    ``(1 + confidence) / 2`` percentiles of the resampled ratios; or ``BCa``), and the resampled
    ratios themselves (length ``n_resamples``). With one cluster (scipy needs two observations)
    or, for ``BCa``, clusters that all have the same mean (BCa's acceleration is then 0/0),
    every resample is the point estimate, and so is the interval.
    """
    values = np.asarray(log_ratios, dtype=float)
    if values.ndim != 1 or values.size == 0:
        raise StatsInputError("bootstrap needs a non-empty 1-D array of log ratios")
    if not np.all(np.isfinite(values)):
        raise StatsInputError("bootstrap log ratios must be finite")
    n_resamples = check_int(n_resamples, "n_resamples", minimum=1)
    seed = check_int(seed, "seed", minimum=0)
    if not (isinstance(confidence, float | int) and 0.0 < float(confidence) < 1.0):
        raise StatsInputError(f"confidence must lie strictly between 0 and 1, got {confidence!r}")
    method = check_method(method)
    codes = _cluster_codes(values.size, clusters)
    n_clusters = int(codes.max()) + 1
    cluster_sum = np.bincount(codes, weights=values, minlength=n_clusters)
    cluster_n = np.bincount(codes, minlength=n_clusters).astype(float)
    point_log = float(values.mean())
    if n_clusters == 1 or (method == "BCa" and np.ptp(cluster_sum / cluster_n) == 0):
        return (float(np.exp(point_log)),) * 3 + (np.full(n_resamples, np.exp(point_log)),)

    def pooled_log_mean(drawn: np.ndarray, axis: int = -1) -> np.ndarray:
        """Mean log ratio of all replies of the drawn conversations (indices along ``axis``)."""
        return cluster_sum[drawn].sum(axis=axis) / cluster_n[drawn].sum(axis=axis)

    result = scipy.stats.bootstrap(
        (np.arange(n_clusters),), pooled_log_mean, n_resamples=n_resamples,
        batch=max(1, MAX_DRAW_ELEMENTS // n_clusters), vectorized=True,
        confidence_level=float(confidence), method=method, rng=np.random.default_rng(seed))
    boot_log = result.bootstrap_distribution
    lo_log, hi_log = result.confidence_interval
    return (float(np.exp(point_log)), float(np.exp(lo_log)), float(np.exp(hi_log)),
            np.exp(boot_log))
