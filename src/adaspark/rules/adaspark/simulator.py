"""A deterministic, seeded environment that plays the engine's part for the scheduler.

It produces the drafter's blocks, verifies trees greedily against a known text, and reports a
verify time and a fixed cost D, so the real scheduler modules run through the real
:class:`~adaspark.decoding.round.WidthRule` interface thousands of rounds per second.

- **Text.** Each request's text (prompt and reply) is drawn once: random tokens, with copies of
  earlier passages (start probability, continuation probability), so the n-gram source has
  something to find and its true continuation probability is known.
- **Drafter.** At the position ``j`` of the text predicted at depth ``i`` below the anchor, the
  pick's share ``sigma`` is drawn from a Beta law; the pick is the target's token with the known
  probability ``p = sigmoid(alpha + beta logit sigma - depth_decay i)``; otherwise the target's
  token is sibling ``k`` with probability ``(1 - p) coverage r_k`` (``r_k`` its share of the
  siblings' total), else absent. The confidence head is ``sigmoid(head_scale logit p + head_bias
  + head_noise N(0, 1))``: miscalibrated as §3.3 describes when ``head_scale != 1`` or
  ``head_bias != 0``. Draws are keyed by (request, text position) and coupled across depths
  (one uniform decides the rank, the depth only moves the threshold), so two arms see the same
  drafter on the same text (common random numbers).
- **Verify time.** A function of width and context (:class:`StepCost` for step-shaped and
  non-monotone costs, :class:`RisingCost` for a cost rising with every row), times one-sided
  interference (:class:`OneSidedNoise`), keyed by the round's anchor position.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from adaspark.decoding.drafter.base import Block
from adaspark.decoding.loop import RequestSession, Verified, run_rounds
from adaspark.decoding.round import RoundPlan, WidthRule
from adaspark.decoding.tree import Tree, accepted_path
from adaspark.rules.adaspark.cost_law import CostClass
from adaspark.rules.adaspark.width_table import WidthTable


class CostShape(Protocol):
    def __call__(self, rows: int, context: int) -> float: ...


@dataclass(frozen=True)
class StepCost:
    """Verify seconds constant on classes ``(tops[k-1], tops[k]]`` at ``levels[k]``, growing
    with context by ``slope`` (fraction per 1,000 tokens, per class if a tuple); width 1 costs
    ``plain``. Non-monotone levels give a cheaper wider class (the 48-vs-40 inversion)."""

    tops: tuple[int, ...]
    levels: tuple[float, ...]
    slope: float | tuple[float, ...] = 0.0
    plain: float | None = None

    def __call__(self, rows: int, context: int) -> float:
        if rows <= 1 and self.plain is not None:
            return self.plain * (1.0 + self._slope(0) * context / 1000.0)
        k = min(bisect.bisect_left(self.tops, rows), len(self.tops) - 1)
        return self.levels[k] * (1.0 + self._slope(k) * context / 1000.0)

    def _slope(self, k: int) -> float:
        return self.slope[k] if isinstance(self.slope, tuple) else self.slope


@dataclass(frozen=True)
class RisingCost:
    """Verify seconds ``base + per_row * rows``, growing with context by ``slope`` (fraction per
    1,000 tokens): every row adds time (the routed target, or this CPU)."""

    base: float
    per_row: float
    slope: float = 0.0

    def __call__(self, rows: int, context: int) -> float:
        return (self.base + self.per_row * rows) * (1.0 + self.slope * context / 1000.0)


@dataclass(frozen=True)
class OneSidedNoise:
    """Interference: with probability ``1 - p_clean`` a round is slower by an exponential factor
    of mean ``mean_extra``; nothing makes it faster (Prop. 3). ``jitter`` adds a small two-sided
    uniform term (fraction)."""

    p_clean: float = 0.7
    mean_extra: float = 0.2
    jitter: float = 0.0

    def factors(self, rng: np.random.Generator, n: int) -> np.ndarray:
        slow = rng.random(n) >= self.p_clean
        f = 1.0 + np.where(slow, rng.exponential(self.mean_extra, n), 0.0)
        if self.jitter:
            f = f * (1.0 + self.jitter * (2.0 * rng.random(n) - 1.0))
        return f


@dataclass(frozen=True)
class TextProcess:
    vocab: int = 4000
    copy_start: float = 0.01
    copy_continue: float = 0.9
    copy_min_back: int = 16


@dataclass(frozen=True)
class DrafterProcess:
    B: int = 4
    K: int = 8
    alpha: float = 0.5
    beta: float = 1.5
    depth_decay: float = 0.15
    share_a: float = 2.0
    share_b: float = 1.2
    coverage: float = 0.6
    sibling_decay: float = 0.7
    top_mass: tuple[float, float] = (0.6, 0.98)
    head_scale: float = 1.0
    head_bias: float = 0.0
    head_noise: float = 0.0


@dataclass(frozen=True)
class Environment:
    """One simulated deployment: text, drafter, verify cost, fixed cost D, interference."""

    cost: CostShape
    text: TextProcess = TextProcess()
    drafter: DrafterProcess = DrafterProcess()
    fixed: float = 0.01
    fixed_slope: float = 0.0
    draft_share: float = 0.8          # the drafter's part of D (the rest: the tree build)
    noise: OneSidedNoise = OneSidedNoise()
    max_rows: int = 64
    seed: int = 0


#: 24 learned widths (the most a table learns): the scheduler benchmark's and its replay's.
WIDTHS_24 = (2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 20, 24, 28, 32, 40, 48, 56,
             60, 64)
#: The contexts each learned width is measured at (three each at three contexts, one more).
LEARNED_CONTEXTS = (300, 300, 300, 1400, 1400, 1400, 5000, 5000, 5000, 1800)


def learn_widths(table: WidthTable, env: Environment, widths: tuple[int, ...],
                 factor: Callable[[int, int], float]) -> None:
    """Give ``table`` the classes topped by ``widths``, each measured at every context of
    :data:`LEARNED_CONTEXTS` (fitted laws, levels, clock, then the end-of-request refit), as a
    long-running deployment would have. Measurement ``i`` of class ``j`` takes
    ``env.cost(top, context) * factor(i, j)``; of D (``j = -1``, measured first at each context)
    ``env.fixed * factor(i, -1)``."""
    cfg = table.cfg
    table.classes = []
    lo = 2
    for hi in widths:
        table.classes.append(CostClass(cfg, lo, hi))
        lo = hi + 1
    for i, ctx in enumerate(LEARNED_CONTEXTS):
        phi = table.basis(ctx)
        table.observe_fixed(ctx, env.fixed * factor(i, -1), phi)
        for j, k in enumerate(table.classes):
            table.observe_verify(k.hi, ctx, env.cost(k.hi, ctx) * factor(i, j), phi)
    table.refit()


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def _logit(p: np.ndarray) -> np.ndarray:
    p = np.clip(p, 1e-6, 1 - 1e-6)
    return np.log(p / (1 - p))


@dataclass
class RequestWorld:
    """One request's text and every draw the drafter and the clock will use."""

    text: np.ndarray
    prompt_len: int
    sigma: np.ndarray        # [text position]: the pick's share
    logit_p: np.ndarray      # [text position]: logit of the pick's acceptance at depth 0
    head_noise: np.ndarray
    u: np.ndarray
    mass: np.ndarray
    noise_verify: np.ndarray  # [anchor position]
    noise_fixed: np.ndarray


def make_text(proc: TextProcess, n: int, rng: np.random.Generator) -> np.ndarray:
    out = np.empty(n, dtype=np.int64)
    fresh = rng.integers(0, proc.vocab, n)
    starts = rng.random(n)
    conts = rng.random(n)
    backs = rng.random(n)
    src = -1
    for i in range(n):
        if src >= 0 and conts[i] < proc.copy_continue:
            out[i] = out[src]
            src += 1
            continue
        src = -1
        if i > proc.copy_min_back and starts[i] < proc.copy_start:
            src = int(backs[i] * (i - proc.copy_min_back))
            out[i] = out[src]
            src += 1
            continue
        out[i] = fresh[i]
    return out


class Simulator:
    """Runs a :class:`WidthRule` against an :class:`Environment`, one request at a time."""

    def __init__(self, env: Environment) -> None:
        self.env = env
        d = env.drafter
        r = np.exp(-d.sibling_decay * np.arange(d.K - 1))
        self.r = r / r.sum()
        self.cum_r = np.cumsum(self.r)

    def world(self, request: int, prompt_len: int, max_tokens: int) -> RequestWorld:
        env, d = self.env, self.env.drafter
        rng = np.random.default_rng([env.seed, request])
        n = prompt_len + max_tokens + d.B + 2
        text = make_text(env.text, n, rng)
        sigma = rng.beta(d.share_a, d.share_b, n)
        logit_p = d.alpha + d.beta * _logit(sigma)
        head_noise = d.head_noise * rng.standard_normal(n)
        u = rng.random(n)
        mass = rng.uniform(d.top_mass[0], d.top_mass[1], n)
        nv = env.noise.factors(rng, n)
        nf = env.noise.factors(rng, n)
        return RequestWorld(text, prompt_len, sigma, logit_p, head_noise, u, mass, nv, nf)

    def block(self, w: RequestWorld, L: int, positions: int) -> tuple[Block, np.ndarray]:
        """The block drafted after the anchor ``text[L-1]``, and each candidate's true
        probability of acceptance given its parent's (``[B, K]``)."""
        d = self.env.drafter
        B = min(positions, d.B, len(w.text) - L)
        K = d.K
        idx = L + np.arange(B)
        dep = np.arange(B)
        sigma = w.sigma[idx]
        p = _sigmoid(w.logit_p[idx] - d.depth_decay * dep)
        u = w.u[idx]
        mass = w.mass[idx]
        probs = np.empty((B, K))
        probs[:, 0] = sigma * mass
        probs[:, 1:] = ((1.0 - sigma) * mass)[:, None] * self.r[None, :]
        q_true = np.empty((B, K))
        q_true[:, 0] = p
        q_true[:, 1:] = ((1.0 - p) * d.coverage)[:, None] * self.r[None, :]
        toks = (self.env.text.vocab + 1 + ((idx[:, None] * d.B + dep[:, None]) * K
                                           + np.arange(K)[None, :]) % 10_000_000)
        rank = np.full(B, -1)
        rank[u < p] = 0
        rest = ~(u < p)
        v = (u - p) / np.maximum(1.0 - p, 1e-12)
        in_sib = rest & (v < d.coverage)
        if in_sib.any():
            k = np.searchsorted(self.cum_r, v[in_sib] / d.coverage, side="right") + 1
            rank[in_sib] = np.minimum(k, K - 1)
        has = rank >= 0
        toks[has, rank[has]] = w.text[idx[has]]
        conf = _sigmoid(d.head_scale * _logit(p) + d.head_bias + w.head_noise[idx])
        return Block(tokens=toks.astype(np.int64), probs=probs, confidence=conf), q_true

    def verify(self, w: RequestWorld, L: int, tree: Tree) -> tuple[list[int], list[int]]:
        """Greedy acceptance against the text: the target's argmax at depth ``d`` of the true
        path is ``text[L + d]``. Returns the accepted rows and the committed tokens."""
        argmax = np.zeros(tree.n_rows, dtype=np.int64)
        depths = tree.depths()
        for r in range(tree.n_rows):
            argmax[r] = w.text[min(L + depths[r], len(w.text) - 1)]
        path = accepted_path(tree, argmax)
        m = len(path) - 1
        return path, w.text[L: L + m + 1].tolist()

    def run_request(self, rule: WidthRule, request: int, prompt_len: int,
                    max_tokens: int, keep_rounds: bool = False) -> SimReply:
        """One request through the round loop (:func:`adaspark.decoding.loop.run_rounds`) in
        this environment's synthetic world (:class:`SimWorld`)."""
        w = self.world(request, prompt_len, max_tokens)
        world = SimWorld(self, w)
        session = RequestSession(rule, list(world.committed), keep_records=True)
        with session:
            run_rounds(world, session, max_tokens, self.env.drafter.B)
        recs = session.records
        reply = SimReply(request=request, prompt_len=prompt_len,
                         tokens=sum(len(o.new_tokens) for o in recs),
                         seconds=sum(o.round_s for o in recs), rounds=len(recs),
                         widths=[o.rows for o in recs], summary=session.summary)
        if keep_rounds:
            reply.round_tokens = [len(o.new_tokens) for o in recs]
            reply.round_seconds = [o.round_s for o in recs]
            reply.round_why = [o.why for o in recs]
        return reply

    def run(self, rule: WidthRule, requests: range | list[int], prompt_len: int | list[int],
            max_tokens: int, keep_rounds: bool = False) -> list[SimReply]:
        out = []
        for i, r in enumerate(requests):
            pl = prompt_len if isinstance(prompt_len, int) else prompt_len[i % len(prompt_len)]
            out.append(self.run_request(rule, r, pl, max_tokens, keep_rounds))
        return out


class SimWorld:
    """A request's synthetic world as the round loop's :class:`~adaspark.decoding.loop.RoundWorld`:
    the simulated drafter's block, greedy acceptance against the world's text and the
    environment's prices (the fixed cost D when the round drafted, the verify cost by rows and
    context, each with the world's noise); no end of generation, no context limit."""

    measured = False
    drafts = True
    n_ctx = 1 << 62

    def __init__(self, sim: Simulator, w: RequestWorld) -> None:
        self.sim, self.w = sim, w
        self.committed: list[int] = w.text[: w.prompt_len].tolist()
        self.max_rows = sim.env.max_rows

    def draft(self, positions: int) -> Block:
        return self.sim.block(self.w, len(self.committed), positions)[0]

    def verify(self, plan: RoundPlan, block: Block | None, round_index: int) -> Verified:
        env, w, L = self.sim.env, self.w, len(self.committed)
        fixed = 0.0
        if block is not None:
            fixed = env.fixed * (1.0 + env.fixed_slope * L / 1000.0) * w.noise_fixed[L]
        verify_s = env.cost(plan.tree.n_rows, L) * w.noise_verify[L]
        path, new = self.sim.verify(w, L, plan.tree)
        self.committed.extend(new)
        return Verified(path, new, verify_s, fixed_s=fixed, draft_s=env.draft_share * fixed,
                        round_s=fixed + verify_s)

    def is_eog(self, token: int) -> bool:
        return False


@dataclass
class SimReply:
    request: int
    prompt_len: int
    tokens: int = 0
    seconds: float = 0.0
    rounds: int = 0
    widths: list[int] = field(default_factory=list)
    round_tokens: list[int] = field(default_factory=list)
    round_seconds: list[float] = field(default_factory=list)
    round_why: list[str] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else math.nan


def rate_of(replies: list[SimReply]) -> float:
    """Tokens per simulated second over a run."""
    t = sum(r.tokens for r in replies)
    s = sum(r.seconds for r in replies)
    return t / s if s > 0 else math.nan


def warm_kernels() -> float:
    """Compile (the first time on a machine) or load the scheduler's kernels (``adaspark.jit``)
    before a timed round needs them: two short simulated requests through AdaSpark (learned
    widths, the fitted model, n-gram fill over a prompt long enough to grow the index, the
    end-of-request refit) and one through a pinned chain's layout. Returns the seconds it
    took."""
    import time

    from adaspark.rules.adaspark.rule import AdaSparkRule
    from adaspark.rules.base import make_rule

    t0 = time.perf_counter()
    env = Environment(cost=RisingCost(base=0.030, per_row=0.0004, slope=0.01),
                      text=TextProcess(vocab=300, copy_start=0.2, copy_continue=0.9),
                      drafter=DrafterProcess(B=4, K=4), fixed=0.010, max_rows=64, seed=0)
    sim = Simulator(env)
    sim.run(AdaSparkRule(offer_width1=True), [0, 1], 300, 48)
    sim.run(make_rule("pinned", width=6), [0], 40, 8)
    return time.perf_counter() - t0
