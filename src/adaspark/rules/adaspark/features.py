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


def logit(p: float, eps: float) -> float:
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
    floored at ``log_r_floor`` (and equal to it where the siblings hold no mass)."""
    probs = np.asarray(block.probs, dtype=np.float64)
    conf = np.asarray(block.confidence, dtype=np.float64)
    clip = math.log((1.0 - logit_eps) / logit_eps)
    tiny = 1e-300
    sib_total = probs[:, 1:].sum(axis=1)
    log_sib = np.log(sib_total + tiny)
    log_r = np.log(probs + tiny) - log_sib[:, None]   # column 0 is the pick's logit sigma
    # np.minimum(np.maximum(...)) is np.clip without its per-call overhead (same values)
    ls = np.minimum(np.maximum(log_r[:, 0], -clip), clip)
    if sib_total.min() > 0.0:
        logr = np.maximum(log_r, log_r_floor)
    else:
        logr = np.where((sib_total > 0)[:, None], np.maximum(log_r, log_r_floor), log_r_floor)
    h = np.minimum(np.maximum(conf, logit_eps), 1.0 - logit_eps)
    return Features(lh=np.log(h / (1.0 - h)), ls=ls, logr=logr)
