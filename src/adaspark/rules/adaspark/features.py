"""What Eq. (6) reads about a round's drafter candidates (§3.3), per position of the block.

The candidates themselves are the one :class:`~adaspark.decoding.candidates.CandidateSet`; this
module keeps only what is AdaSpark's own: per drafter position ``logit h`` (the confidence head),
``logit sigma`` (the pick's share of the top-K softmax mass, computed from the siblings' total so
a share near 1 keeps its precision) and ``log r`` (a candidate's mass over the siblings' total),
computed once per round as arrays.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from adaspark.decoding.drafter.base import Block
from adaspark.jit import kernel


@kernel
def logit(p: float, eps: float) -> float:
    """``log(p / (1 - p))`` of ``p`` clipped to ``[eps, 1 - eps]``."""
    p = min(max(p, eps), 1.0 - eps)
    return math.log(p / (1.0 - p))


@dataclass
class Features:
    """Eq. (6)'s drafter features: ``lh[i]``, ``ls[i]`` per position, ``logr[i, k]`` per
    candidate (rank ``k`` at position ``i``)."""

    lh: np.ndarray
    ls: np.ndarray
    logr: np.ndarray


def block_features(block: Block, logit_eps: float, log_r_floor: float) -> Features:
    """The features of every position of ``block``: logits clipped at ``logit_eps``, ``log r``
    floored at ``log_r_floor`` (and equal to it where the siblings hold no mass):
    :func:`feature_arrays`."""
    lh, ls, logr = feature_arrays(np.ascontiguousarray(block.probs, dtype=np.float64),
                                   np.ascontiguousarray(block.confidence, dtype=np.float64),
                                   logit_eps, log_r_floor)
    return Features(lh=lh, ls=ls, logr=logr)


@kernel
def feature_arrays(probs: np.ndarray, conf: np.ndarray, eps: float,
                    floor: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per position ``i``: ``logit h``, ``logit sigma = log(p_pick / siblings' total)`` clipped
    to the logit clip, and per candidate ``log r = log(p / siblings' total)`` (``1e-300`` added
    inside each log) floored, or the floor where the siblings hold no mass."""
    B, K = probs.shape
    clip = math.log((1.0 - eps) / eps)
    lh = np.empty(B)
    ls = np.empty(B)
    logr = np.empty((B, K))
    for i in range(B):
        total = 0.0
        for k in range(1, K):
            total += probs[i, k]
        log_sib = math.log(total + 1e-300)
        for k in range(K):
            v = math.log(probs[i, k] + 1e-300) - log_sib
            if k == 0:
                ls[i] = -clip if v < -clip else clip if v > clip else v
            logr[i, k] = (v if v > floor else floor) if total > 0.0 else floor
        h = min(max(conf[i], eps), 1.0 - eps)
        lh[i] = math.log(h / (1.0 - h))
    return lh, ls, logr
