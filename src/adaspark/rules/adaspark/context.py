"""What a round of the AdaSpark rule decided in ``plan`` and what ``observe`` learns from
(:class:`RoundContext`): the round's context, its tree's candidates and their features, the
acceptance and cost forecasts that priced it (§3.3-3.4, Eq. 7); the round log's record
(:mod:`adaspark.rules.adaspark.records`) is derived from it."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from adaspark.decoding.candidates import CandidateSet
from adaspark.rules.adaspark import acceptance as acc
from adaspark.rules.adaspark.chooser import Gains
from adaspark.rules.adaspark.features import Features


@dataclass
class RoundContext:
    """What ``plan`` decided and what ``observe`` needs to learn from the outcome."""

    context: int
    drafted: bool
    why: str
    width: int
    explored: bool = False
    cands: CandidateSet | None = None
    features: Features | None = None
    order: list[int] = field(default_factory=list)
    parent: np.ndarray | None = None     # the candidates' parents, as an array
    rank: np.ndarray | None = None
    is_ng: np.ndarray | None = None      # the candidates Eq. (7) prices with the n-gram gain
    s: np.ndarray | None = None
    s_ng: np.ndarray | None = None
    head_raw: np.ndarray | None = None
    q_head: np.ndarray | None = None
    q_model: np.ndarray | None = None
    terms: acc.RoundTerms | None = None
    priced_fitted: bool = False
    offered: list[tuple[int, float]] = field(default_factory=list)
    n0: int = 0
    first: int = 0
    gains: Gains | None = None
    rho: float | None = None
    predicted_verify: float | None = None
    predicted_fixed: float | None = None
    s_chosen: tuple[float, float, float] = (0.0, 0.0, 0.0)
    q: np.ndarray | None = None          # the q that priced the tree (head or fitted)
    width_chosen: int = 0                # Eq. (7)'s pick (the tree may hold fewer rows)
    incumbent_before: int = 0            # the incumbent Eq. (7) compared against
