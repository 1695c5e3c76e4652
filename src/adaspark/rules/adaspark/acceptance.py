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

from adaspark.decoding.candidates import NGRAM, PICK, CandidateSet
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


def shift(q: np.ndarray | float, b: float) -> Any:
    """``sigmoid(logit(q) + b)``, written so 0 and 1 stay fixed."""
    if b == 0.0:
        return q
    w = np.asarray(q) * math.exp(b)
    return w / (w + 1.0 - np.asarray(q))


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
    (Eq. 6), computed once per round."""

    __slots__ = ("base", "coef", "features", "idx", "u")

    def __init__(self, tree: CandidateSet, features: Features, context: int,
                 cfg: AcceptanceConfig, unit: float) -> None:
        self.features = features
        self.u = context / unit
        idx: list[int] = []
        coef: list[int] = []
        base: list[float] = []
        edges = cfg.run_edges
        eps = cfg.logit_eps
        for j in (*sorted(tree.marked), *range(tree.n_drafted, len(tree))):
            kind = tree.kind[j]
            if kind == NGRAM:
                idx.append(j)
                coef.append(NEW + bucket(tree.evidence[j], tree.run[j], edges))
                base.append(logit(tree.src_p[j], eps))
            elif tree.agreed[j]:
                idx.append(j)
                off = AGREED_PICK if kind == PICK else AGREED_SIB
                coef.append(off + bucket(tree.evidence[j], tree.run[j], edges))
                base.append(max(0.0, logit(tree.src_p[j], eps)))
            elif tree.contra[j] >= 0:
                idx.append(j)
                off = CONTRA_PICK if kind == PICK else CONTRA_SIB
                coef.append(off + tree.contra[j])
                base.append(-max(0.0, logit(tree.src_p[j], eps)))
        self.idx = np.asarray(idx, dtype=np.int64)
        self.coef = np.asarray(coef, dtype=np.int64)
        self.base = np.asarray(base, dtype=np.float64)

    def coef_of(self) -> dict[int, int]:
        return dict(zip(self.idx.tolist(), self.coef.tolist(), strict=True))


def softmax_by_parent(scores: np.ndarray, parent: np.ndarray) -> np.ndarray:
    """Eq. (6)'s normalisation: each parent's candidates and *none* in one softmax."""
    e = np.exp(np.minimum(np.maximum(scores, -60.0), 60.0))  # np.clip's values, faster
    grp = parent + 1
    denom = 1.0 + np.bincount(grp, weights=e, minlength=len(scores) + 1)
    return e / denom[grp]


class AcceptanceModel:
    """Eq. (6) with its online learning. The coefficients, their FTRL state, the per-bucket label
    counts and the guard outlive requests (the store); the intercept restarts with each request."""

    def __init__(self, cfg: AcceptanceConfig) -> None:
        self.cfg = cfg
        self.prior: list[float] = prior_coefficients(cfg).tolist()
        self.w: list[float] = list(self.prior)
        self.z = [0.0] * N_COEF
        self.n = [0.0] * N_COEF
        self.m = [0.0] * N_COEF
        self.labels = [0] * N_COEF
        self._w_arr: np.ndarray | None = None
        self.guard = [0.0, 0.0]      # decayed log loss: fitted model, head-based estimate
        self.seen = 0                # labelled parents
        self.b = 0.0
        self.b_g2 = 0.0
        self._keep = 0.5 ** (1.0 / cfg.guard_half_life)
        self._gate_updates = cfg.gate_counts == "updates"

    # -- pricing ----------------------------------------------------------------------------

    def prices(self) -> bool:
        """The guard: the fitted model prices the tree only while its decayed loss is lower."""
        return self.guard[0] < self.guard[1]

    def weights(self) -> np.ndarray:
        if self._w_arr is None:
            self._w_arr = np.asarray(self.w, dtype=np.float64)
        return self._w_arr

    def scores(self, tree: CandidateSet, terms: RoundTerms) -> np.ndarray:
        w = self.w   # Python floats: the same products as the array's, without its indexing
        B, D = tree.B, tree.n_drafted
        f = terms.features
        n = len(tree)
        if D:
            depth = w[DEPTH] * np.arange(B, dtype=np.float64)
            common = w[A_SIB + 2] * f.lh + w[A_SIB + 3] * f.ls + depth
            blk = w[A_SIB] + w[A_SIB + 1] * f.logr + common[:, None]
            blk[:, 0] = w[A_PICK] + w[A_PICK + 1] * f.lh + w[A_PICK + 2] * f.ls + depth
            if n == D:   # the block alone: its scores are the array itself
                s = blk.reshape(D)
            else:
                s = np.zeros(n)
                s[:D] = blk.ravel()
        else:
            s = np.zeros(n)
        s += w[CONTEXT] * terms.u + self.b
        if len(terms.idx):
            s[terms.idx] += self.weights()[terms.coef] + terms.base
        return s

    def probabilities(self, tree: CandidateSet, terms: RoundTerms,
                      parent: np.ndarray) -> np.ndarray:
        return softmax_by_parent(self.scores(tree, terms), parent)

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
        sqrt(min(G + gb^2, cap_b))))`` on ``gb = sum_j (q_j - y_j)``. Written with local
        variables: a round takes about 40 such steps."""
        K, D = tree.K, tree.n_drafted
        w, z_, n_, m_, prior_, labels = self.w, self.z, self.n, self.m, self.prior, self.labels
        c = self.cfg
        rate_d, rate_b = c.drafter_ftrl_rate, c.ngram_bucket_ftrl_rate
        cap, gate_k = c.squared_gradient_cap, c.prior_gate
        beta, l2 = c.drafter_ftrl_stabiliser, c.drafter_l2
        gate_updates = self._gate_updates
        b, b_g2 = self.b, self.b_g2
        b_cap, b_rate = c.intercept_squared_gradient_cap, c.intercept_adagrad_rate
        b_beta, band = c.adagrad_stabiliser, c.intercept_band
        sqrt, copysign, finite = math.sqrt, math.copysign, math.isfinite
        for group, label in groups:
            # the gradient of each fixed coefficient, and how many candidates read it
            gp0 = gp1 = gp2 = gs0 = gs1 = gs2 = gs3 = g_dep = g_ctx = gb = 0.0
            n_pick = n_sib = n_dep = n_ctx = 0
            g_bucket: dict[int, float] = {}
            for j in group:
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
                        gs1 += d * logr[i][k]
                        gs2 += d * lh[i]
                        gs3 += d * ls[i]
                        n_sib += 1
                    if i:
                        g_dep += d * i
                        n_dep += 1
                if u:
                    g_ctx += d * u
                    n_ctx += 1
                cb = coef_of.get(j)
                if cb is not None:
                    g_bucket[cb] = g_bucket.get(cb, 0.0) + d
                    labels[cb] += 1
            steps: list[tuple[int, float]] = []   # (coefficient, gradient), each at most once
            if n_pick:
                steps += ((A_PICK, gp0), (A_PICK + 1, gp1), (A_PICK + 2, gp2))
                labels[A_PICK] += n_pick
                labels[A_PICK + 1] += n_pick
                labels[A_PICK + 2] += n_pick
            if n_sib:
                steps += ((A_SIB, gs0), (A_SIB + 1, gs1), (A_SIB + 2, gs2), (A_SIB + 3, gs3))
                labels[A_SIB] += n_sib
                labels[A_SIB + 1] += n_sib
                labels[A_SIB + 2] += n_sib
                labels[A_SIB + 3] += n_sib
            if n_dep:
                steps.append((DEPTH, g_dep))
                labels[DEPTH] += n_dep
            if n_ctx:
                steps.append((CONTEXT, g_ctx))
                labels[CONTEXT] += n_ctx
            if g_bucket:
                steps += g_bucket.items()
            for i, g in steps:
                if not finite(g):
                    continue
                rate = rate_b if i >= NEW else rate_d
                prior = prior_[i]
                n_old = n_[i]
                n_new = n_old + g * g
                if n_new > cap:
                    n_new = cap
                sq_new = sqrt(n_new)
                zi = z_[i] + g - (sq_new - sqrt(n_old)) / rate * (w[i] - prior)
                z_[i] = zi
                n_[i] = n_new
                m = m_[i] + 1.0
                m_[i] = m
                gate = gate_k * (sqrt(m) if gate_updates else sq_new)
                if abs(zi) <= gate:
                    w[i] = prior
                else:
                    w[i] = prior - (zi - copysign(gate, zi)) / ((beta + sq_new) / rate + l2)
            if finite(gb):
                b_g2 = min(b_g2 + gb * gb, b_cap)
                b = b - b_rate * gb / (b_beta + sqrt(b_g2))
                b = -band if b < -band else band if b > band else b
        self.b, self.b_g2 = b, b_g2
        self._w_arr = None

    def score_guard(self, loss_model: float, loss_head: float) -> None:
        """One labelled parent's log loss under both estimates, before either learns."""
        k = self._keep
        self.guard = [self.guard[0] * k + loss_model, self.guard[1] * k + loss_head]
        self.seen += 1

    def begin_request(self) -> None:
        self.b = 0.0
        self.b_g2 = 0.0

    def bucket_labels(self, coef: int) -> int:
        return self.labels[coef]

    # -- the store --------------------------------------------------------------------------

    def to_state(self) -> dict[str, Any]:
        return {"prior": list(self.prior), "w": list(self.w), "z": list(self.z),
                "n": list(self.n), "m": list(self.m), "labels": list(self.labels),
                "guard": list(self.guard), "seen": self.seen}

    def load_state(self, s: dict[str, Any]) -> None:
        if len(s["w"]) != N_COEF:
            raise ValueError(f"stored acceptance model has {len(s['w'])} coefficients, "
                             f"this one {N_COEF}")
        self.prior = [float(x) for x in s["prior"]]
        self.w = [float(x) for x in s["w"]]
        self.z = [float(x) for x in s["z"]]
        self.n = [float(x) for x in s["n"]]
        self.m = [float(x) for x in s["m"]]
        self.labels = [int(x) for x in s["labels"]]
        self._w_arr = None
        self.guard = [float(x) for x in s["guard"]]
        self.seen = int(s["seen"])


class HeadEstimate:
    """The head-based estimate's per-request logit offset, learned by AdaGrad per labelled node
    (gradient ``q' - y``), restarted with each request."""

    def __init__(self, cfg: AcceptanceConfig) -> None:
        self.cfg = cfg
        self.b = 0.0
        self.g2 = 0.0

    def begin_request(self) -> None:
        self.b = 0.0
        self.g2 = 0.0

    def apply(self, q: np.ndarray) -> np.ndarray:
        return shift(q, self.b)

    def observe(self, q_raw: Sequence[float], accepted: Sequence[bool]) -> None:
        """AdaGrad steps on labelled nodes, in order: raw estimates ``q_raw`` (outside [0, 1]:
        skipped) and whether each was the target's pick."""
        c = self.cfg
        b, g2 = self.b, self.g2
        rate, beta, band = c.head_offset_adagrad_rate, c.adagrad_stabiliser, c.head_offset_band
        exp, sqrt = math.exp, math.sqrt
        for q, y in zip(q_raw, accepted, strict=True):
            if not 0.0 <= q <= 1.0:
                continue
            if b == 0.0:
                qs = q
            else:
                wq = q * exp(b)
                qs = wq / (wq + 1.0 - q)
            g = qs - (1.0 if y else 0.0)
            g2 += g * g
            b = b - rate * g / (beta + sqrt(g2))
            b = -band if b < -band else band if b > band else b   # clamp, as min(max())
        self.b, self.g2 = b, g2


def learn_round(cands: CandidateSet, features: Features, accepted: list[int], bonus: int,
                q_head: list[float], head_raw: list[float], q_model: list[float] | None,
                terms: RoundTerms | None, placed: set[int], model: AcceptanceModel | None,
                head: HeadEstimate | None, offset_all: bool) -> tuple[int, float, float]:
    """Algorithm 1, line 17: every candidate of every accepted parent (the anchor and the
    ``accepted`` candidates; placed or not) is labelled by the target's pick after it (the next
    accepted candidate's token, or the ``bonus`` token last). Per parent the guard scores both
    estimates before either learns, then the fitted model learns the groups
    (:meth:`AcceptanceModel.learn_groups`) and the head offset (``head``, ``None`` when off) each
    candidate (only the ``placed`` ones unless ``offset_all``). Returns the labelled candidates
    and the summed log losses of the fitted model (0 without one) and of the head-based estimate.

    A parent's log loss is ``sum_j -log(x_j)`` over its candidates in index order, ``x_j = q_j``
    for the one carrying the pick and ``1 - q_j`` otherwise, ``q_j`` clipped to
    ``[1e-12, 1 - 1e-12]``."""
    parents = [-1, *accepted]
    tokens = cands.tokens
    picks = [tokens[j] for j in accepted] + [int(bonus)]
    groups = cands.children_of(parents)
    fitted = model is not None and q_model is not None
    log = math.log
    lo, hi = 1e-12, 1.0 - 1e-12
    n_lab, loss_m, loss_h = 0, 0.0, 0.0
    labelled: list[tuple[list[int], int | None]] = []
    offset_q: list[float] = []     # the head offset's labelled nodes, in the round's order
    offset_y: list[bool] = []
    for parent, pick in zip(parents, picks, strict=True):
        group = groups[parent]
        if not group:
            continue
        label = None
        for j in group:
            if tokens[j] == pick:
                label = j
                break
        lh_ = lm = 0.0
        for j in group:
            x = q_head[j]
            x = lo if x < lo else hi if x > hi else x
            lh_ += -log(x) if j == label else -log(1.0 - x)
            if q_model is not None:
                x = q_model[j]
                x = lo if x < lo else hi if x > hi else x
                lm += -log(x) if j == label else -log(1.0 - x)
            if head is not None and (offset_all or j in placed):
                offset_q.append(head_raw[j])
                offset_y.append(j == label)
        n_lab += len(group)
        loss_h += lh_
        loss_m += lm
        if fitted:
            assert model is not None
            model.score_guard(lm, lh_)
            labelled.append((group, label))
    if fitted:   # the guard scored every parent before the model learns any
        assert model is not None and q_model is not None and terms is not None
        model.learn_groups(cands, labelled, q_model, terms.coef_of(), terms.u,
                           features.lh.tolist(), features.ls.tolist(), features.logr.tolist())
    if head is not None:   # its steps read nothing the model's learning changes
        head.observe(offset_q, offset_y)
    return n_lab, loss_m, loss_h
