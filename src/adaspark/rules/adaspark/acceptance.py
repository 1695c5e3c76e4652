"""Acceptance model (§3.3, Eq. 6), the head-based estimate it competes with, and the guard.

At most one child of an accepted parent is the target's argmax, so the candidates of one parent
and an explicit *none* share one softmax: ``q_j = exp(s_j) / (1 + sum_i exp(s_i))`` over every
candidate of the parent, placed or not, so each q is fixed before the tree is chosen (Prop. 1).

Scores (coefficient layout below)::

    pick     s = a0 + a1 logit h + a2 logit sigma                 + psi + b_req
    sibling  s = a3 + a4 log r + a5 logit h + a6 logit sigma      + psi + b_req
    n-gram   s = logit p_src + w_bucket                           + psi + b_req
    agreed   its drafter score + max(0, logit p_src) + w_agreed[bucket, pick|sibling]
    contra   its drafter score - max(0, logit p_src) + w_contra[evidence, pick|sibling]
    psi      w_depth * position (drafter nodes) + w_context * c / 8192 (every node)

A bucket is the n-gram proposal's evidence class (follower seen once | twice or more | copy |
long copy) crossed with the number of n-gram nodes above the node on its path (0 | 1-2 | 3+).
The prior derives from the features' definitions: the pick scores ``ln 2 + logit h`` (which makes
its q exactly h), a sibling ``log r``, everything else 0. Each coefficient learns by FTRL-Proximal
on its deviation from the prior and leaves the prior only once its accumulated gradient exceeds
``3 sqrt(m)`` after ``m`` updates; the per-request intercept learns by AdaGrad.

The head-based estimate is a pick's confidence head, a sibling's share of the top-K softmax mass
and an n-gram node's source precision (an agreed node keeps its drafter estimate), all shifted by a
per-request logit offset. The guard scores every labelled parent under both before either learns
and lets the fitted model price the tree only while its decayed log loss is the lower.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from adaspark.decoding.candidates import CandidateArrays, CandidateSet
from adaspark.jit import kernel
from adaspark.rules.adaspark.config import AcceptanceConfig
from adaspark.rules.adaspark.features import Features, logit
from adaspark.rules.adaspark.ngram import EVIDENCE_NAMES, run_class

N_EVIDENCE = len(EVIDENCE_NAMES)
N_RUN = 3
N_BUCKETS = N_EVIDENCE * N_RUN
#: Coefficient layout.
A_PICK, A_SIB = 0, 3          # a0..a2 (pick), a3..a6 (sibling)
DEPTH, CONTEXT = 7, 8
NEW = 9                        # n-gram-only buckets
AGREED_PICK = NEW + N_BUCKETS
AGREED_SIB = AGREED_PICK + N_BUCKETS
CONTRA_PICK = AGREED_SIB + N_BUCKETS
CONTRA_SIB = CONTRA_PICK + N_EVIDENCE
N_COEF = CONTRA_SIB + N_EVIDENCE


@kernel
def bucket(evidence: int, run: int, run_edges: tuple[int, int]) -> int:
    return evidence * N_RUN + run_class(run, run_edges)


def bucket_name(coef: int) -> str:
    """A readable name of a bucket coefficient (records, reports)."""
    if coef >= CONTRA_PICK:
        kind = "contra-pick" if coef < CONTRA_SIB else "contra-sib"
        return f"{kind}/{EVIDENCE_NAMES[(coef - CONTRA_PICK) % N_EVIDENCE]}"
    base = NEW if coef < AGREED_PICK else AGREED_PICK if coef < AGREED_SIB else AGREED_SIB
    kind = {NEW: "new", AGREED_PICK: "agreed-pick", AGREED_SIB: "agreed-sib"}[base]
    b = coef - base
    return f"{kind}/{EVIDENCE_NAMES[b // N_RUN]}/r{('0', '1-2', '3+')[b % N_RUN]}"


@kernel
def shift(q: Any, b: float) -> Any:
    """``sigmoid(logit(q) + b)``, written so 0 and 1 stay fixed (``q`` a float or an array)."""
    if b == 0.0:
        return q
    w = q * math.exp(b)
    return w / (w + 1.0 - q)


def prior_coefficients(cfg: AcceptanceConfig) -> np.ndarray:
    """The prior from the features' definitions (§3.3, "Learning"): the pick scores
    ``ln 2 + logit h``, a sibling ``log r``; share coefficients, psi and buckets start at 0."""
    w = np.zeros(N_COEF)
    w[A_PICK] = cfg.prior_pick_intercept
    w[A_PICK + 1] = 1.0   # logit h, as it is
    w[A_SIB + 1] = 1.0    # log r, as it is
    return w


class RoundTerms:
    """What the model reads about one round's candidates: the drafter positions' features, the
    sparse bucket terms and the fixed ``base`` of each n-gram, agreed or contradicted node
    (Eq. 6), computed once per round (:func:`bucket_terms`): ``coef_all`` every candidate's bucket
    coefficient (-1: none) and ``base_all`` its fixed score; ``idx``, ``coef`` and ``base`` the
    same for the nodes that have one (ascending)."""

    __slots__ = ("base_all", "coef_all", "features", "u")

    def __init__(self, tree: CandidateSet, features: Features, context: int,
                 cfg: AcceptanceConfig, unit: float, arrays: CandidateArrays | None = None) -> None:
        self.features = features
        self.u = context / unit
        a = arrays if arrays is not None else tree.arrays()
        e0, e1 = cfg.run_edges
        self.coef_all, self.base_all = bucket_terms(a.kind, a.agreed, a.evidence, a.run, a.contra,
                                              a.src_p, cfg.logit_eps, e0, e1)

    @classmethod
    def of(cls, features: Features, u: float, coef_all: np.ndarray,
           base_all: np.ndarray) -> RoundTerms:
        """Terms :func:`bucket_terms` already computed (the rule's round kernel)."""
        t = cls.__new__(cls)
        t.features, t.u, t.coef_all, t.base_all = features, u, coef_all, base_all
        return t

    @property
    def idx(self) -> np.ndarray:
        return np.flatnonzero(self.coef_all >= 0)

    @property
    def coef(self) -> np.ndarray:
        return self.coef_all[self.idx]

    @property
    def base(self) -> np.ndarray:
        return self.base_all[self.idx]

    def coef_of(self) -> dict[int, int]:
        return dict(zip(self.idx.tolist(), self.coef.tolist(), strict=True))


@kernel
def bucket_terms(kind: np.ndarray, agreed: np.ndarray, evidence: np.ndarray, run: np.ndarray,
           contra: np.ndarray, src_p: np.ndarray, eps: float, e0: int,
           e1: int) -> tuple[np.ndarray, np.ndarray]:
    """Per candidate its bucket coefficient (-1: none) and fixed score: an n-gram node's
    ``NEW + bucket`` and ``logit p_src``; an agreed drafter node's agreed bucket and
    ``max(0, logit p_src)``; a contradicted one's evidence class and ``-max(0, logit p_src)``."""
    n = kind.shape[0]
    coef = np.full(n, -1, dtype=np.int64)
    base = np.zeros(n)
    for j in range(n):
        k = kind[j]
        bucket_j = bucket(evidence[j], run[j], (e0, e1))
        if k == 2:   # n-gram
            coef[j] = NEW + bucket_j
            base[j] = logit(src_p[j], eps)
        elif agreed[j]:
            coef[j] = (AGREED_PICK if k == 0 else AGREED_SIB) + bucket_j
            base[j] = max(0.0, logit(src_p[j], eps))
        elif contra[j] >= 0:
            coef[j] = (CONTRA_PICK if k == 0 else CONTRA_SIB) + contra[j]
            base[j] = -max(0.0, logit(src_p[j], eps))
    return coef, base


@kernel
def softmax_by_parent(scores: np.ndarray, parent: np.ndarray) -> np.ndarray:
    """Eq. (6)'s normalisation, each parent's candidates and *none* in one softmax:
    ``q_j = e_j / (1 + sum of e over j's parent's candidates)``, ``e = exp(clip(s, +-60))``,
    each parent's sum accumulated in index order."""
    n = scores.shape[0]
    e = np.empty(n)
    sums = np.zeros(n + 1)
    for j in range(n):
        x = scores[j]
        x = -60.0 if x < -60.0 else 60.0 if x > 60.0 else x
        e[j] = math.exp(x)
        sums[parent[j] + 1] += e[j]
    q = np.empty(n)
    for j in range(n):
        q[j] = e[j] / (1.0 + sums[parent[j] + 1])
    return q


@kernel
def eq6_scores(w: np.ndarray, b: float, u: float, lh: np.ndarray, ls: np.ndarray,
            logr: np.ndarray, D: int, K: int, coef: np.ndarray,
            base: np.ndarray) -> np.ndarray:
    """:meth:`AcceptanceModel.scores` (Eq. 6 before its softmax)."""
    n = coef.shape[0]
    s = np.zeros(n)
    if D:
        for i in range(D // K):
            depth = w[DEPTH] * float(i)
            common = w[A_SIB + 2] * lh[i] + w[A_SIB + 3] * ls[i] + depth
            s[i * K] = w[A_PICK] + w[A_PICK + 1] * lh[i] + w[A_PICK + 2] * ls[i] + depth
            for k in range(1, K):
                s[i * K + k] = w[A_SIB] + w[A_SIB + 1] * logr[i, k] + common
    add = w[CONTEXT] * u + b
    for j in range(n):
        s[j] += add
    for j in range(n):
        if coef[j] >= 0:
            s[j] += w[coef[j]] + base[j]
    return s


class AcceptanceModel:
    """Eq. (6) with its online learning. The coefficients, their FTRL state, the per-bucket label
    counts and the guard outlive requests (the store); the intercept restarts with each request."""

    def __init__(self, cfg: AcceptanceConfig) -> None:
        self.cfg = cfg
        # float64 and int64 arrays: the learning kernels update them in place
        self.prior = prior_coefficients(cfg)
        self.w = self.prior.copy()
        self.z = np.zeros(N_COEF)
        self.n = np.zeros(N_COEF)
        self.m = np.zeros(N_COEF)
        self.labels = np.zeros(N_COEF, dtype=np.int64)
        self.guard = np.zeros(2)     # decayed log loss: fitted model, head-based estimate
        self.seen = 0                # labelled parents
        self._keep = 0.5 ** (1.0 / cfg.guard_half_life)
        #: the intercept b, its AdaGrad sum and the guard's decay (the kernels update it)
        self.state = np.array([0.0, 0.0, self._keep])
        self._gate_updates = cfg.gate_counts == "updates"
        c = cfg
        #: the learning kernels' constants, in their order (:func:`_learn_group`)
        self.constants = (c.drafter_ftrl_rate, c.ngram_bucket_ftrl_rate, c.squared_gradient_cap,
                          c.prior_gate, c.drafter_ftrl_stabiliser, c.drafter_l2,
                          self._gate_updates, c.intercept_squared_gradient_cap,
                          c.intercept_adagrad_rate, c.adagrad_stabiliser, c.intercept_band)

    @property
    def b(self) -> float:
        """The per-request intercept."""
        return float(self.state[0])

    @b.setter
    def b(self, v: float) -> None:
        self.state[0] = v

    @property
    def b_g2(self) -> float:
        return float(self.state[1])

    @b_g2.setter
    def b_g2(self, v: float) -> None:
        self.state[1] = v

    # -- pricing ----------------------------------------------------------------------------

    def prices(self) -> bool:
        """The guard: the fitted model prices the tree only while its decayed loss is lower."""
        return self.guard[0] < self.guard[1]

    def weights(self) -> np.ndarray:
        return self.w

    def scores(self, tree: CandidateSet, terms: RoundTerms) -> np.ndarray:
        """Eq. (6)'s scores ``s_j`` of every candidate (:func:`eq6_scores`)."""
        f = terms.features
        K = max(tree.K, 1)
        logr = np.asarray(f.logr, dtype=np.float64).reshape(tree.B, K) if tree.B else \
            np.zeros((0, K))
        return eq6_scores(self.w, self.b, terms.u, np.asarray(f.lh, dtype=np.float64),
                       np.asarray(f.ls, dtype=np.float64), logr, tree.n_drafted, K,
                       terms.coef_all, terms.base_all)

    def probabilities(self, tree: CandidateSet, terms: RoundTerms,
                      parent: np.ndarray) -> np.ndarray:
        return softmax_by_parent(self.scores(tree, terms), np.asarray(parent, dtype=np.int64))

    # -- learning ---------------------------------------------------------------------------

    def learn_groups(self, tree: CandidateSet, groups: Sequence[tuple[list[int], int | None]],
                     q: Sequence[float], coef_of: dict[int, int], u: float,
                     lh: Sequence[float], ls: Sequence[float],
                     logr: Sequence[Sequence[float]]) -> None:
        """The round's labelled parents, in order: each ``(group, label)`` is a parent's
        candidates and the one that carried the target's pick (``None``: none); ``q`` is the
        model's probability of every candidate, computed before the round's labels.

        Per group, each coefficient a candidate reads gets ``g = sum_j (q_j - y_j) x_j`` over the
        group (in the group's order), then one gated FTRL-Proximal step on its deviation
        ``d = w - prior`` from the prior (non-finite ``g`` skipped)::

            n' = min(n + g^2, cap)        z' = z + g - (sqrt(n') - sqrt(n)) / rate * d
            gate = prior_gate * (sqrt(m') | sqrt(n'))       (m' = m + 1: ``gate_counts``)
            w' = prior                                       if |z'| <= gate
            w' = prior - (z' - sign(z') gate) / ((beta + sqrt(n')) / rate + l2)   else

        and the intercept one AdaGrad step ``b' = clamp(b - rate_b gb / (beta_b +
        sqrt(min(G + gb^2, cap_b))))`` on ``gb = sum_j (q_j - y_j)``: :func:`_learn_group`."""
        n = len(tree)
        members = np.asarray([j for g, _ in groups for j in g], dtype=np.int64)
        starts = np.cumsum([0, *(len(g) for g, _ in groups)]).astype(np.int64)
        label = np.asarray([-1 if y is None else y for _, y in groups], dtype=np.int64)
        coef = np.full(n, -1, dtype=np.int64)
        for j, c in coef_of.items():
            coef[j] = c
        qa = np.asarray(q, dtype=np.float64)
        la, sa = np.asarray(lh, dtype=np.float64), np.asarray(ls, dtype=np.float64)
        ra = np.asarray(logr, dtype=np.float64).reshape(max(tree.B, 0), -1) if tree.B else \
            np.zeros((0, max(tree.K, 1)))
        for k in range(len(label)):
            _learn_group(members[starts[k]:starts[k + 1]], int(label[k]), qa, coef, u,
                         tree.n_drafted, max(tree.K, 1), la, sa, ra, self.w, self.z, self.n,
                         self.m, self.prior, self.labels, self.state, *self.constants)

    def score_guard(self, loss_model: float, loss_head: float) -> None:
        """One labelled parent's log loss under both estimates, before either learns."""
        k = self._keep
        self.guard[0] = self.guard[0] * k + loss_model
        self.guard[1] = self.guard[1] * k + loss_head
        self.seen += 1

    def begin_request(self) -> None:
        self.b = 0.0
        self.b_g2 = 0.0

    def bucket_labels(self, coef: int) -> int:
        return self.labels[coef]

    # -- the store --------------------------------------------------------------------------

    def to_state(self) -> dict[str, Any]:
        return {"prior": self.prior.tolist(), "w": self.w.tolist(), "z": self.z.tolist(),
                "n": self.n.tolist(), "m": self.m.tolist(), "labels": self.labels.tolist(),
                "guard": self.guard.tolist(), "seen": self.seen}

    def load_state(self, s: dict[str, Any]) -> None:
        if len(s["w"]) != N_COEF:
            raise ValueError(f"stored acceptance model has {len(s['w'])} coefficients, "
                             f"this one {N_COEF}")
        self.prior = np.asarray(s["prior"], dtype=np.float64)
        self.w = np.asarray(s["w"], dtype=np.float64)
        self.z = np.asarray(s["z"], dtype=np.float64)
        self.n = np.asarray(s["n"], dtype=np.float64)
        self.m = np.asarray(s["m"], dtype=np.float64)
        self.labels = np.asarray(s["labels"], dtype=np.int64)
        self.guard = np.asarray(s["guard"], dtype=np.float64)
        self.seen = int(s["seen"])


class HeadEstimate:
    """The head-based estimate's per-request logit offset, learned by AdaGrad per labelled node
    (gradient ``q' - y``), restarted with each request."""

    def __init__(self, cfg: AcceptanceConfig) -> None:
        self.cfg = cfg
        self.state = np.zeros(2)   # the offset b and its AdaGrad sum (the kernels update it)
        self.constants = (cfg.head_offset_adagrad_rate, cfg.adagrad_stabiliser,
                          cfg.head_offset_band)

    @property
    def b(self) -> float:
        return float(self.state[0])

    @property
    def g2(self) -> float:
        return float(self.state[1])

    def begin_request(self) -> None:
        self.state[:] = 0.0

    def apply(self, q: np.ndarray) -> np.ndarray:
        return shift(q, self.b)

    def observe(self, q_raw: Sequence[float], accepted: Sequence[bool]) -> None:
        """AdaGrad steps on labelled nodes, in order: raw estimates ``q_raw`` (outside [0, 1]:
        skipped) and whether each was the target's pick (:func:`_head_step`)."""
        for q, y in zip(q_raw, accepted, strict=True):
            _head_step(self.state, float(q), bool(y), *self.constants)


def learn_round(cands: CandidateSet, features: Features, accepted: list[int], bonus: int,
                q_head: Sequence[float], head_raw: Sequence[float],
                q_model: Sequence[float] | None, terms: RoundTerms | None, placed: set[int],
                model: AcceptanceModel | None, head: HeadEstimate | None, offset_all: bool,
                parent: np.ndarray | None = None) -> tuple[int, float, float]:
    """Algorithm 1, line 17: every candidate of every accepted parent (the anchor and the
    ``accepted`` candidates; placed or not) is labelled by the target's pick after it (the next
    accepted candidate's token, or the ``bonus`` token last). Per parent the guard scores both
    estimates before either learns, then the fitted model learns the groups
    (:meth:`AcceptanceModel.learn_groups`) and the head offset (``head``, ``None`` when off) each
    candidate (only the ``placed`` ones unless ``offset_all``). Returns the labelled candidates
    and the summed log losses of the fitted model (0 without one) and of the head-based estimate.

    A parent's log loss is ``sum_j -log(x_j)`` over its candidates in index order, ``x_j = q_j``
    for the one carrying the pick and ``1 - q_j`` otherwise, ``q_j`` clipped to
    ``[1e-12, 1 - 1e-12]``. The work is :func:`_learn_round`'s (``parent``: the candidates'
    parents as an array, when the caller has it)."""
    fitted = model is not None and q_model is not None
    mdl = model if fitted else None
    if terms is not None and fitted:
        coef = terms.coef_all
    else:
        coef = np.full(len(cands), -1, dtype=np.int64)
    if head is not None and not offset_all:
        mark = np.zeros(len(cands), dtype=np.bool_)
        mark[list(placed)] = True
    else:
        mark = _NOTHING_PLACED   # not read
    f = features
    buf = cands.buffers()
    n = len(cands)
    n_lab, loss_m, loss_h, n_parents = _learn_round(
        buf["tokens"][:n], parent if parent is not None else buf["parent"][:n],
        cands.n_drafted, max(cands.K, 1), cands.B,
        np.asarray(accepted, dtype=np.int64), int(bonus),
        np.asarray(q_head, dtype=np.float64), np.asarray(head_raw, dtype=np.float64),
        np.asarray(q_model, dtype=np.float64) if fitted else _NO_Q,
        fitted, coef, terms.u if terms is not None else 0.0,
        np.asarray(f.lh, dtype=np.float64), np.asarray(f.ls, dtype=np.float64),
        np.asarray(f.logr, dtype=np.float64).reshape(cands.B, -1) if cands.B else
        np.zeros((0, 1)),
        head is not None, offset_all, mark,
        *((mdl.w, mdl.z, mdl.n, mdl.m, mdl.prior, mdl.labels, mdl.guard, mdl.state)
          if mdl is not None else _NO_MODEL),
        head.state if head is not None else np.zeros(2),
        *(mdl.constants if mdl is not None else _NO_CONSTANTS),
        *(head.constants if head is not None else (0.0, 1.0, 0.0)))
    if mdl is not None:
        mdl.seen += int(n_parents)
    return int(n_lab), float(loss_m), float(loss_h)


_NOTHING_PLACED = np.zeros(0, dtype=np.bool_)
_NO_Q = np.zeros(0)
_NO_MODEL = (np.zeros(N_COEF), np.zeros(N_COEF), np.zeros(N_COEF), np.zeros(N_COEF),
             np.zeros(N_COEF), np.zeros(N_COEF, dtype=np.int64), np.zeros(2), np.zeros(3))
_NO_CONSTANTS = (1.0, 1.0, 1.0, 1.0, 1.0, 0.0, False, 1.0, 0.0, 1.0, 0.0)


# ---------------------------------------------------------------------------------------------
# The learning kernels (adaspark.jit): the same steps, in the same order, as the definitions in
# the docstrings above


@kernel
def _ftrl_step(i: int, g: float, rate: float, w: np.ndarray, z: np.ndarray, nn: np.ndarray,
               m: np.ndarray, prior: np.ndarray, cap: float, gate_k: float, gate_updates: bool,
               beta: float, l2: float) -> None:
    """One gated FTRL-Proximal step of coefficient ``i`` on gradient ``g``
    (:meth:`AcceptanceModel.learn_groups`)."""
    if not math.isfinite(g):
        return
    p = prior[i]
    n_old = nn[i]
    n_new = n_old + g * g
    if n_new > cap:
        n_new = cap
    sq_new = math.sqrt(n_new)
    zi = z[i] + g - (sq_new - math.sqrt(n_old)) / rate * (w[i] - p)
    z[i] = zi
    nn[i] = n_new
    mi = m[i] + 1.0
    m[i] = mi
    gate = gate_k * (math.sqrt(mi) if gate_updates else sq_new)
    if abs(zi) <= gate:
        w[i] = p
    else:
        w[i] = p - (zi - math.copysign(gate, zi)) / ((beta + sq_new) / rate + l2)


@kernel
def _learn_group(group: np.ndarray, label: int, q: np.ndarray, coef: np.ndarray, u: float,
                 D: int, K: int, lh: np.ndarray, ls: np.ndarray, logr: np.ndarray,
                 w: np.ndarray, z: np.ndarray, nn: np.ndarray, m: np.ndarray,
                 prior: np.ndarray, labels: np.ndarray, b_state: np.ndarray,
                 rate_d: float, rate_b: float, cap: float, gate_k: float, beta: float,
                 l2: float, gate_updates: bool, b_cap: float, b_rate: float, b_beta: float,
                 band: float) -> None:
    """One labelled parent's group: the gradients of every coefficient its candidates read,
    one FTRL step each (a coefficient is stepped once, whatever its order among the others),
    then the intercept's AdaGrad step (``b_state``: ``[b, G]``)."""
    gp0 = gp1 = gp2 = gs0 = gs1 = gs2 = gs3 = g_dep = g_ctx = gb = 0.0
    n_pick = n_sib = n_dep = n_ctx = 0
    g_bucket = np.zeros(N_COEF)
    touched = np.zeros(N_COEF, dtype=np.bool_)
    for t in range(group.shape[0]):
        j = group[t]
        d = q[j] - (1.0 if j == label else 0.0)
        gb += d
        if j < D:
            i = j // K
            k = j - i * K
            if k == 0:
                gp0 += d
                gp1 += d * lh[i]
                gp2 += d * ls[i]
                n_pick += 1
            else:
                gs0 += d
                gs1 += d * logr[i, k]
                gs2 += d * lh[i]
                gs3 += d * ls[i]
                n_sib += 1
            if i:
                g_dep += d * i
                n_dep += 1
        if u:
            g_ctx += d * u
            n_ctx += 1
        cb = coef[j]
        if cb >= 0:
            g_bucket[cb] += d
            touched[cb] = True
            labels[cb] += 1
    args = (w, z, nn, m, prior, cap, gate_k, gate_updates, beta, l2)
    if n_pick:
        _ftrl_step(A_PICK, gp0, rate_d, *args)
        _ftrl_step(A_PICK + 1, gp1, rate_d, *args)
        _ftrl_step(A_PICK + 2, gp2, rate_d, *args)
        for i in range(A_PICK, A_PICK + 3):
            labels[i] += n_pick
    if n_sib:
        _ftrl_step(A_SIB, gs0, rate_d, *args)
        _ftrl_step(A_SIB + 1, gs1, rate_d, *args)
        _ftrl_step(A_SIB + 2, gs2, rate_d, *args)
        _ftrl_step(A_SIB + 3, gs3, rate_d, *args)
        for i in range(A_SIB, A_SIB + 4):
            labels[i] += n_sib
    if n_dep:
        _ftrl_step(DEPTH, g_dep, rate_d, *args)
        labels[DEPTH] += n_dep
    if n_ctx:
        _ftrl_step(CONTEXT, g_ctx, rate_d, *args)
        labels[CONTEXT] += n_ctx
    for cb in range(N_COEF):
        if touched[cb]:
            _ftrl_step(cb, g_bucket[cb], rate_b if cb >= NEW else rate_d, *args)
    if math.isfinite(gb):
        b_g2 = min(b_state[1] + gb * gb, b_cap)
        b = b_state[0] - b_rate * gb / (b_beta + math.sqrt(b_g2))
        b_state[0] = -band if b < -band else band if b > band else b
        b_state[1] = b_g2


@kernel
def _head_step(state: np.ndarray, q: float, y: bool, rate: float, beta: float,
               band: float) -> None:
    """One AdaGrad step of the head offset (``state``: ``[b, G]``) on a node of raw estimate
    ``q`` (outside [0, 1]: skipped): gradient ``sigmoid(logit q + b) - y``."""
    if not 0.0 <= q <= 1.0:
        return
    b = state[0]
    if b == 0.0:
        qs = q
    else:
        wq = q * math.exp(b)
        qs = wq / (wq + 1.0 - q)
    g = qs - (1.0 if y else 0.0)
    g2 = state[1] + g * g
    b = b - rate * g / (beta + math.sqrt(g2))
    state[0] = -band if b < -band else band if b > band else b   # clamp, as min(max())
    state[1] = g2


@kernel
def _group_of(parent_node: int, parent: np.ndarray, D: int, K: int, B: int,
              out: np.ndarray) -> int:
    """Every candidate of ``parent_node`` (-1: the anchor), placed or not, in index order, into
    ``out``: its drafter children (one block row, ``CandidateSet.drafter_children``), then the
    n-gram nodes below it. Returns how many."""
    n = 0
    lo = hi = 0
    if parent_node == -1:
        if B > 0:
            lo, hi = 0, K
    elif parent_node < D and parent_node % K == 0:
        i = parent_node // K + 1
        if i < B:
            lo, hi = i * K, (i + 1) * K
    for j in range(lo, hi):
        out[n] = j
        n += 1
    for j in range(D, parent.shape[0]):
        if parent[j] == parent_node:
            out[n] = j
            n += 1
    return n


@kernel
def _learn_round(tokens: np.ndarray, parent: np.ndarray, D: int, K: int, B: int,
                 accepted: np.ndarray, bonus: int, q_head: np.ndarray, head_raw: np.ndarray,
                 q_model: np.ndarray, fitted: bool, coef: np.ndarray, u: float,
                 lh: np.ndarray, ls: np.ndarray, logr: np.ndarray, head_on: bool,
                 offset_all: bool, placed: np.ndarray, w: np.ndarray, z: np.ndarray,
                 nn: np.ndarray, m: np.ndarray, prior: np.ndarray, labels: np.ndarray,
                 guard: np.ndarray, w_state: np.ndarray, h_state: np.ndarray, rate_d: float,
                 rate_b: float, cap: float, gate_k: float, beta: float, l2: float,
                 gate_updates: bool, b_cap: float, b_rate: float, b_beta: float, band: float,
                 h_rate: float, h_beta: float, h_band: float) -> tuple[int, float, float, int]:
    """:func:`learn_round`: the guard scores every labelled parent (``guard`` decayed by
    ``w_state[2]``), the head offset steps on every labelled node in the round's order, then the
    fitted model learns the groups in order. Returns the labelled nodes, both summed log
    losses and the labelled parents."""
    n = parent.shape[0]
    n_par = accepted.shape[0] + 1
    members = np.empty(n_par * n, dtype=np.int64)
    starts = np.zeros(n_par + 1, dtype=np.int64)
    label_of = np.full(n_par, -1, dtype=np.int64)
    buf = np.empty(n, dtype=np.int64)
    lo, hi = 1e-12, 1.0 - 1e-12
    n_lab = 0
    loss_m = loss_h = 0.0
    n_groups = 0
    keep = w_state[2]
    for k in range(n_par):
        node = -1 if k == 0 else accepted[k - 1]
        pick = tokens[accepted[k]] if k < n_par - 1 else bonus
        cnt = _group_of(node, parent, D, K, B, buf)
        if cnt == 0:
            continue
        label = -1
        for t in range(cnt):
            if tokens[buf[t]] == pick:
                label = buf[t]
                break
        lh_ = lm = 0.0
        for t in range(cnt):
            j = buf[t]
            x = q_head[j]
            x = lo if x < lo else hi if x > hi else x
            lh_ += -math.log(x) if j == label else -math.log(1.0 - x)
            if fitted:
                x = q_model[j]
                x = lo if x < lo else hi if x > hi else x
                lm += -math.log(x) if j == label else -math.log(1.0 - x)
            if head_on and (offset_all or placed[j]):
                _head_step(h_state, head_raw[j], j == label, h_rate, h_beta, h_band)
        n_lab += cnt
        loss_h += lh_
        loss_m += lm
        if fitted:
            guard[0] = guard[0] * keep + lm
            guard[1] = guard[1] * keep + lh_
            s0 = starts[n_groups]
            members[s0:s0 + cnt] = buf[:cnt]
            starts[n_groups + 1] = s0 + cnt
            label_of[n_groups] = label
            n_groups += 1
    for g in range(n_groups):   # the guard scored every parent before the model learns any
        _learn_group(members[starts[g]:starts[g + 1]], label_of[g], q_model, coef, u, D, K,
                     lh, ls, logr, w, z, nn, m, prior, labels, w_state, rate_d, rate_b, cap,
                     gate_k, beta, l2, gate_updates, b_cap, b_rate, b_beta, band)
    return n_lab, loss_m, loss_h, n_groups
