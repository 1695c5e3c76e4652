"""Table 14's constants are in conf/scheduler/adaspark.yaml, named as in the table, load into
the typed config and reach the code; every named alternative changes what the code does; every
arm file builds its rule."""

from __future__ import annotations

import glob
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from omegaconf import OmegaConf

from adaspark.arms import make_arm_rule
from adaspark.decoding.candidates import PICK, CandidateSet
from adaspark.decoding.drafter.base import Block
from adaspark.decoding.round import RoundOutcome, RoundState
from adaspark.rules.adaspark import acceptance as acc
from adaspark.rules.adaspark.chooser import (
    Gains,
    LongRunRate,
    MarginGain,
    Valuer,
    choose,
    counts_as_ngram,
    ngram_order,
    reference_width,
)
from adaspark.rules.adaspark.config import CHOICES, SchedulerConfig, load_config
from adaspark.rules.adaspark.cost_law import (
    ContextLaw,
    CostClass,
    FixedCostClock,
    Level,
    context_basis,
)
from adaspark.rules.adaspark.ngram import NgramIndex
from adaspark.rules.adaspark.rule import AdaSparkPlan, AdaSparkRule
from adaspark.rules.adaspark.simulator import (
    DrafterProcess,
    Environment,
    RisingCost,
    Simulator,
    StepCost,
)
from adaspark.rules.adaspark.width_table import WidthTable
from adaspark.rules.fixed import Chain
from adaspark.schema import check_arm

PROMPT = [5, 6, 7]


def block() -> Block:
    """Four positions of eight candidates; the heads 0.9, 0.6, 0.3, 0.05."""
    rng = np.random.default_rng(0)
    probs = np.sort(rng.random((4, 8)), axis=1)[:, ::-1] * 0.2
    return Block(tokens=np.arange(32).reshape(4, 8), probs=probs,
                 confidence=np.array([0.9, 0.6, 0.3, 0.05]))


def plan_once(rule: AdaSparkRule, prompt: list[int] = PROMPT,
              blk: Block | None = None) -> AdaSparkPlan:
    state = RoundState(list(prompt), 0, 64, 4)
    assert rule.wants_block(state)
    plan = rule.plan(state, blk if blk is not None else block())
    assert isinstance(plan, AdaSparkPlan) and plan.round is not None
    return plan


def rejected_rounds(rule: AdaSparkRule, n: int, restart: bool = True) -> AdaSparkRule:
    """``n`` identical rounds in which the target rejects every candidate (the anchor only is
    accepted, its bonus token 999 is no candidate): one labelled parent a round, the anchor's
    eight candidates, all labelled 0. With ``restart`` each round is a new request, so the
    per-request intercept starts at 0 and, while every coefficient sits at its prior, the
    model's probabilities (and so every gradient) are the same each round."""
    for _ in range(n):
        if restart:
            rule.begin_request(PROMPT)
        plan = plan_once(rule)
        rule.observe(plan, RoundOutcome.of(plan, [0], [999], verify_s=0.02, fixed_s=0.01))
    return rule


def fitted(rule: AdaSparkRule) -> acc.AcceptanceModel:
    assert rule.model is not None
    return rule.model


def first_round_off_the_prior(cfg: SchedulerConfig) -> int:
    """The first of the identical rejected rounds after which a coefficient leaves its prior."""
    rule = AdaSparkRule(width=2, ngram=False, config=cfg)
    rule.begin_request(PROMPT)
    prior = list(fitted(rule).prior)
    for k in range(1, 200):
        rejected_rounds(rule, 1)
        if any(abs(w - p) > 1e-12 for w, p in zip(fitted(rule).w, prior, strict=True)):
            return k
    raise AssertionError("no coefficient left its prior in 200 rounds")


def trained_law(cfg: SchedulerConfig) -> ContextLaw:
    """40 verifies whose time rises with context, every third one 50% slow."""
    cm = cfg.cost_model
    law = ContextLaw(cm)
    for i in range(40):
        c = 200 + 200 * i
        law.observe(c, 0.02 * (1 + c / 4000) * (1.5 if i % 3 == 0 else 1.0),
                    context_basis(c, cm.context_basis_unit))
    return law


def law_at(cfg: SchedulerConfig, context: int) -> float:
    p = trained_law(cfg).predict(context_basis(context, cfg.cost_model.context_basis_unit))
    assert p is not None
    return p


def measured_table(cfg: SchedulerConfig) -> WidthTable:
    """Every ladder width measured three times: flat to 8 rows (20 ms), then 40 ms."""
    table = WidthTable(cfg.cost_model, 64)
    cost = StepCost(tops=(8, 64), levels=(0.02, 0.04))
    for c in (500, 520, 540, 560, 580):
        phi = table.basis(c)
        table.observe_fixed(c, 0.01, phi)
        for k in list(table.classes):
            table.observe_verify(k.hi, c, cost(k.hi, c), phi)
    return table


def rounds_until_split(cfg: SchedulerConfig) -> int:
    table = measured_table(cfg)
    prices = table.class_prices(table.basis(560))
    for k in range(1, 100):
        table.hold(8)
        if table.split(lambda w, p: True, prices) is not None:
            return k
    raise AssertionError("never split")


def split_width(cfg: SchedulerConfig) -> int | None:
    table = measured_table(cfg)
    prices = table.class_prices(table.basis(560))
    for _ in range(cfg.cost_model.split_hold_rounds):
        table.hold(8)
    return table.split(lambda w, p: w > 8, prices)


def widths_learned(cfg: SchedulerConfig) -> int:
    """Splits wherever allowed, each new width measured at once, for 200 held rounds."""
    table = measured_table(cfg)
    cost = StepCost(tops=(8, 64), levels=(0.02, 0.04))
    for _ in range(200):
        table.hold(8)
        m = table.split(lambda w, p: True, table.class_prices(table.basis(560)))
        if m is not None:
            for c in (500, 520, 540):
                table.observe_verify(m, c, cost(m, c), table.basis(c))
    return len(table.widths())


def measurements_of_the_narrowest(cfg: SchedulerConfig) -> int:
    table = WidthTable(cfg.cost_model, 64)
    n = 0
    while table.measurement_width() == 2:
        table.observe_verify(2, 500, 0.02, table.basis(500))
        n += 1
    return n


def samples_until_the_law(cfg: SchedulerConfig) -> int:
    law = ContextLaw(cfg.cost_model)
    n = 0
    while not law.ready:
        law.observe(500, 0.02, context_basis(500, cfg.cost_model.context_basis_unit))
        n += 1
    return n


def bank_size(cfg: SchedulerConfig) -> int:
    law = ContextLaw(cfg.cost_model)
    for i in range(20):
        law.observe(300 + i, 0.02, context_basis(300 + i, cfg.cost_model.context_basis_unit))
    return sum(len(v) for v in law.bank.values())


def held_out(cfg: SchedulerConfig, n: int) -> int:
    """Samples the refit holds out of one band of ``n``."""
    law = ContextLaw(cfg.cost_model)
    for i in range(n):
        law.observe(300 + i, 0.02, context_basis(300 + i, cfg.cost_model.context_basis_unit))
    return len(law.split_bank()[1])


def level_of_a_slower_machine(cfg: SchedulerConfig) -> float:
    """A law fitted at 10 ms, then eight verifies at 1 s read against it: the level is the
    clamp's top."""
    cm = cfg.cost_model
    phi = context_basis(500, cm.context_basis_unit)
    law = ContextLaw(cm)
    for _ in range(3):
        law.observe(500, 0.01, phi)
    level = Level(cm)
    for _ in range(8):
        level.observe(1.0, phi, law)
    level.refresh(law)
    return level.value


def level_window(cfg: SchedulerConfig) -> int:
    k = CostClass(cfg.cost_model, 2, 2)
    for i in range(12):
        k.observe(500 + i, 0.02, context_basis(500 + i, cfg.cost_model.context_basis_unit), 1.0)
    return len(k.level.window)


def rate_after(cfg: SchedulerConfig) -> float | None:
    """rho after 8 rounds of 2 tokens in 0.1 s, then 64 of 1 token in 0.1 s (one band)."""
    rate = LongRunRate(cfg.width_choice)
    for _ in range(8):
        rate.observe(500, 2.0, 0.1)
    for _ in range(64):
        rate.observe(500, 1.0, 0.1)
    return rate.rate(500)


def rounds_before_rho(cfg: SchedulerConfig) -> int:
    rate = LongRunRate(cfg.width_choice)
    n = 0
    while rate.rate(500) is None:
        rate.observe(500, 2.0, 0.1)
        n += 1
    return n


def gain_after(cfg: SchedulerConfig, realised: float, n: int) -> float:
    """``n`` observations at the pivot, predicted 1, realised ``realised``."""
    g = MarginGain(cfg.width_choice)
    for _ in range(n):
        g.observe(cfg.width_choice.gain_pivot_u, 1.0, realised)
    return g.at(cfg.width_choice.gain_pivot_u)


def choice(cfg: SchedulerConfig, rho: float | None, p4: float) -> int:
    """Widths 2 and 4 with 1.5 and 2 expected tokens (S = 0.5 after one candidate, 1 after
    three), the incumbent 2 at 10 ms, 4 rows at ``p4`` seconds, no fixed cost."""
    s = np.array([0.0, 0.5, 0.75, 1.0])
    v = Valuer(s, np.zeros(4), 2, Gains(), 0.0, rho)
    return choose(v, [(2, 0.010), (4, p4)], 2, cfg.width_choice).width


def intercept_after(cfg: SchedulerConfig, rounds: int) -> float:
    rule = AdaSparkRule(width=2, ngram=False, config=cfg)
    rule.begin_request(PROMPT)
    return fitted(rejected_rounds(rule, rounds, restart=False)).b


def guard_of_an_old_loss(cfg: SchedulerConfig) -> float:
    model = acc.AcceptanceModel(cfg.acceptance_model)
    model.score_guard(1.0, 0.0)
    for _ in range(256):
        model.score_guard(0.0, 0.0)
    return model.guard[0]


def head_offset_after(cfg: SchedulerConfig, n: int) -> float:
    head = acc.HeadEstimate(cfg.acceptance_model)
    for _ in range(n):
        head.observe([0.9], [False])
    return head.b


def pick_q_at_the_prior(cfg: SchedulerConfig) -> float:
    rule = AdaSparkRule(width=2, ngram=False, config=cfg)
    rule.begin_request(PROMPT)
    q = plan_once(rule).round.q_model  # type: ignore[union-attr]
    assert q is not None
    return float(q[0])


def follower_of(cfg: SchedulerConfig) -> int | None:
    """The text has (8, 9) followed by 1 and 2, but no earlier (5, 8, 9)."""
    ix = NgramIndex(cfg.ngram_fill, 16, 2)
    ix.extend([7, 8, 9, 1, 0, 6, 8, 9, 2, 0, 4, 8, 9, 2])
    p = ix.step([5, 8, 9])
    return None if p is None else p.token


REPEATING = list(range(100, 160)) + list(range(100, 104))


def deepest_ngram_node(cfg: SchedulerConfig) -> int:
    rule = AdaSparkRule(config=cfg)
    rule.begin_request(REPEATING)
    cands = plan_once(rule, REPEATING, Block(tokens=np.array([[1, 2], [3, 4]]),
                                             probs=np.array([[0.5, 0.1], [0.5, 0.1]]),
                                             confidence=np.array([0.6, 0.6]))).round.cands
    assert cands is not None
    depth = {-1: 0}
    for j, p in enumerate(cands.parent):
        depth[j] = depth[p] + 1
    return max(depth.values())


def explores_on_the_15th_round(cfg: SchedulerConfig) -> bool:
    prompt = [10, 11, 12, 13, 14, 15, 16, 17, 90, 91, 10, 11, 12, 13]
    blk = Block(tokens=np.arange(500, 532).reshape(4, 8),
                probs=np.tile(np.linspace(0.6, 0.01, 8), (4, 1)),
                confidence=np.array([0.95, 0.9, 0.9, 0.9]))
    rule = AdaSparkRule(width=5, config=cfg)
    rule.begin_request(prompt)
    rule.exploration_clock = 14
    return plan_once(rule, prompt, blk).round.explored  # type: ignore[union-attr]


def reference_width_of_the_first_round(cfg: SchedulerConfig) -> int:
    rule = AdaSparkRule(ngram=False, config=cfg)
    rule.begin_request(PROMPT)
    return plan_once(rule).round.n0  # type: ignore[union-attr]


def rate_closed_form(half_life: float) -> float:
    """:func:`rate_after` by hand: with ``G(n) = (1 - k^n) / (1 - k)``, ``k = 2^(-1/h)``, the
    8 old rounds weigh ``k^64`` = 2^(-64/h): tokens ``2 G(8) k^64 + G(64)`` over seconds
    ``0.1 (G(8) k^64 + G(64))``."""
    k = 0.5 ** (1.0 / half_life)

    def g(n: int) -> float:
        return (1.0 - k**n) / (1.0 - k)

    old = k**64
    return (2.0 * g(8) * old + g(64)) / (0.1 * (g(8) * old + g(64)))


UNKNOWN = object()


@dataclass(frozen=True)
class Probe:
    """One constant of Table 14: its section and key, the paper's value, another value, what
    the code builds from it (``read``) and, where it is known by hand, what that reads at the
    paper's value and at the other. ``rises``: the reading grows with the constant."""

    section: str
    key: str
    paper: Any
    other: Any
    read: Callable[[SchedulerConfig], Any]
    at_paper: Any = UNKNOWN
    at_other: Any = UNKNOWN
    rises: bool | None = None


TABLE_14 = [
    # cost model (§3.2)
    Probe("cost_model", "quantile_tau", 0.15, 0.5, lambda c: law_at(c, 4000), rises=True),
    Probe("cost_model", "context_basis_unit", 8192, 4096,
          lambda c: WidthTable(c.cost_model, 64).basis(8192)[1], 1.0, 2.0),
    Probe("cost_model", "l1", 0.002, 0.5, lambda c: law_at(c, 8000) - law_at(c, 200),
          rises=False),
    Probe("cost_model", "l2", 0.01, 10.0, lambda c: law_at(c, 8000) - law_at(c, 200),
          rises=False),
    Probe("cost_model", "ftrl_rate", 0.05, 0.5, lambda c: law_at(c, 4000), rises=True),
    Probe("cost_model", "ftrl_stabiliser", 1.0, 50.0, lambda c: law_at(c, 4000), rises=False),
    Probe("cost_model", "squared_gradient_cap", 400.0, 1.0, lambda c: max(trained_law(c).n),
          rises=True, at_other=1.0),
    Probe("cost_model", "sample_bank_per_band", 16, 5, bank_size, 16, 5),
    Probe("cost_model", "refit_holdout_fraction", 0.25, 0.5, lambda c: held_out(c, 16), 4, 8),
    Probe("cost_model", "refit_holdout_min_band", 4, 5, lambda c: held_out(c, 4), 1, 0),
    # the law's top: 3 (or 1.5) times the class's lowest time, 22 ms
    Probe("cost_model", "law_clamp", (0.5, 3.0), [0.5, 1.5], lambda c: law_at(c, 10**6),
          3.0 * 0.022, 1.5 * 0.022),
    Probe("cost_model", "level_window", 8, 3, level_window, 8, 3),
    Probe("cost_model", "level_clamp", (0.5, 2.0), [0.5, 4.0], level_of_a_slower_machine,
          2.0, 4.0),
    Probe("cost_model", "measurements_before_priced", 3, 5, measurements_of_the_narrowest,
          3, 5),
    Probe("cost_model", "samples_before_law", 3, 5, samples_until_the_law, 3, 5),
    Probe("cost_model", "starting_ladder", (2, 4, 8, 16, 32, 64), [4, 16, 64],
          lambda c: WidthTable(c.cost_model, 64).widths(), [2, 4, 8, 16, 32, 64], [4, 16, 64]),
    Probe("cost_model", "split_hold_rounds", 8, 3, rounds_until_split, 8, 3),
    # 8 -> 16 rows doubles the time: steep, split next to the held 8; flat: at the midpoint
    Probe("cost_model", "steep_interval", 0.25, 2.0, split_width, 9, 12),
    Probe("cost_model", "most_widths_learned", 24, 9, widths_learned, 24, 9),
    # width choice (§3.4)
    # a shorter half-life forgets the 8 early rounds at 20 tok/s sooner: rho nearer 10
    Probe("width_choice", "rate_half_life_rounds", 64, 8, rate_after, rate_closed_form(64),
          rate_closed_form(8), rises=True),
    Probe("width_choice", "rate_warm_rounds", 8, 3, rounds_before_rho, 8, 3),
    Probe("width_choice", "gain_clamp", (0.25, 4.0), [0.25, 2.0], lambda c: gain_after(c, 100, 50),
          4.0, 2.0),
    # one observation, predicted 1, realised 2: (2 + 0.02 + 0.05) / (1 + 0.02 + 0.05)
    Probe("width_choice", "gain_shrinkage", 0.02, 1.0, lambda c: gain_after(c, 2.0, 1),
          2.07 / 1.07, 3.05 / 2.05),
    Probe("width_choice", "gain_reference_width", 8, 16, reference_width_of_the_first_round,
          8, 16),
    # per-round ratios 1.5 / 0.010 = 150 and 2 / 0.013 = 153.8: 2.6% better, short of 4%
    Probe("width_choice", "ratio_margin", 0.04, 0.01, lambda c: choice(c, None, 0.013), 2, 4),
    # rho = 100: V(2) = 0.5, V(4) = 0.55; the margin is 0.04 (0.01) x 1.5 tokens
    Probe("width_choice", "hysteresis_margin", 0.04, 0.01, lambda c: choice(c, 100.0, 0.0145),
          2, 4),
    # acceptance model (§3.3)
    Probe("acceptance_model", "drafter_ftrl_rate", 0.05, 0.5,
          lambda c: fitted(rejected_rounds(AdaSparkRule(width=2, ngram=False, config=c),
                                           12)).w[acc.A_PICK]),
    Probe("acceptance_model", "drafter_ftrl_stabiliser", 1.0, 20.0,
          lambda c: fitted(rejected_rounds(AdaSparkRule(width=2, ngram=False, config=c),
                                           12)).w[acc.A_PICK]),
    Probe("acceptance_model", "drafter_l2", 0.01, 50.0,
          lambda c: fitted(rejected_rounds(AdaSparkRule(width=2, ngram=False, config=c),
                                           12)).w[acc.A_PICK]),
    # constant gradients while at the prior: |z| = k |g| > 3 sqrt(k g^2) first at k = 10 (> 9);
    # with a gate of 2, at k = 5 (> 4)
    Probe("acceptance_model", "prior_gate", 3.0, 2.0, first_round_off_the_prior, 10, 5),
    Probe("acceptance_model", "squared_gradient_cap", 400.0, 0.5,
          lambda c: max(fitted(rejected_rounds(AdaSparkRule(width=2, ngram=False, config=c),
                                               3)).n), rises=True, at_other=0.5),
    # one rejected round: the anchor's candidates sum to 0.9 + (1 - 0.9) / 2 = 0.95, so the
    # intercept's gradient is 0.95 and b = -rate 0.95 / (1 + 0.95)
    Probe("acceptance_model", "intercept_adagrad_rate", 0.15, 0.3,
          lambda c: intercept_after(c, 1), -0.15 * 0.95 / 1.95, -0.3 * 0.95 / 1.95),
    Probe("acceptance_model", "intercept_band", 2.0, 0.05, lambda c: intercept_after(c, 1),
          -0.15 * 0.95 / 1.95, -0.05),
    Probe("acceptance_model", "intercept_squared_gradient_cap", 16.0, 0.5,
          lambda c: intercept_after(c, 1), -0.15 * 0.95 / 1.95,
          -0.15 * 0.95 / (1 + math.sqrt(0.5))),
    # a loss 256 labelled parents old weighs 2^-1 (with a half-life of 128: 2^-2)
    Probe("acceptance_model", "guard_half_life", 256, 128, guard_of_an_old_loss, 0.5, 0.25),
    # one wrong pick at head 0.9: b = -rate 0.9 / (1 + 0.9)
    Probe("acceptance_model", "head_offset_adagrad_rate", 0.15, 0.3,
          lambda c: head_offset_after(c, 1), -0.15 * 0.9 / 1.9, -0.3 * 0.9 / 1.9),
    Probe("acceptance_model", "head_offset_band", 2.0, 0.1, lambda c: head_offset_after(c, 400),
          -2.0, -0.1),
    # the siblings' exp(log r) sum to 1; a pick scoring a_0 + logit h: q = 2 x 9 / (1 + 18 + 1)
    # = 0.9, its head, with a_0 = ln 2; 9 / (1 + 9 + 1) with a_0 = 0
    Probe("acceptance_model", "prior_pick_intercept", math.log(2.0), 0.0, pick_q_at_the_prior,
          0.9, 9.0 / 11.0),
    # n-gram fill (§3.3)
    Probe("ngram_fill", "follower_context", 3, 2, follower_of, None, 2),
    Probe("ngram_fill", "chain_depth_limit", 32, 5, deepest_ngram_node, 32, 5),
    Probe("ngram_fill", "exploration_period", 16, 15, explores_on_the_15th_round, False, True),
]


def agrees(value: Any, expected: Any) -> bool:
    """Equal, floats to a relative 1e-9 (hand formulas and the code round differently)."""
    if isinstance(expected, float):
        return value == pytest.approx(expected, rel=1e-9)
    return bool(value == expected)


@pytest.mark.parametrize("p", TABLE_14, ids=lambda p: f"{p.section}.{p.key}")
def test_table_14_values_are_the_defaults_and_reach_the_code(p: Probe) -> None:
    """The default is the paper's value, and the object the code builds from the constant
    reads it: overriding the constant (an arm's ``constants``) changes what it does, as far as
    known by hand to the value."""
    default = load_config("adaspark")
    value = getattr(getattr(default, p.section), p.key)
    assert value == (pytest.approx(p.paper) if isinstance(p.paper, float) else p.paper)
    other = load_config("adaspark", {p.section: {p.key: p.other}})
    at_paper, at_other = p.read(default), p.read(other)
    if p.at_paper is not UNKNOWN:
        assert agrees(at_paper, p.at_paper), (at_paper, p.at_paper)
    if p.at_other is not UNKNOWN:
        assert agrees(at_other, p.at_other), (at_other, p.at_other)
    assert at_paper != at_other
    if p.rises is not None:
        assert (at_other > at_paper) == (p.rises == (p.other > p.paper)), (at_paper, at_other)


def test_every_key_has_a_comment_and_no_key_is_missing() -> None:
    text = open(glob.glob("conf/scheduler/adaspark.yaml")[0]).read()
    for line in text.splitlines():
        if line.startswith("  ") and ":" in line and not line.strip().startswith("#"):
            assert "#" in line, f"key without a comment: {line!r}"
    with pytest.raises(ValueError, match=r"scheduler\.cost_model\.quantile_tau is missing"):
        load_config({"cost_model": {}, "width_choice": {}, "acceptance_model": {},
                     "ngram_fill": {}, "store": {}})


def test_overrides_reach_the_typed_config() -> None:
    c = load_config("adaspark", {"width_choice": {"hysteresis_margin": 0.05}})
    assert c.width_choice.hysteresis_margin == 0.05
    with pytest.raises(ValueError, match="gate_counts"):
        load_config("adaspark", {"acceptance_model": {"gate_counts": "sometimes"}})


@pytest.mark.parametrize("name,kind,width", [
    ("fullchain", Chain, None), ("tree16", AdaSparkRule, 16),
    ("costmodel", AdaSparkRule, "learned"),
    ("adaspark", AdaSparkRule, "learned"), ("adaspark-w4", AdaSparkRule, 4),
    ("adaspark-w5", AdaSparkRule, 5), ("adaspark-w6", AdaSparkRule, 6),
    ("adaspark-w8", AdaSparkRule, 8), ("adaspark-w12", AdaSparkRule, 12),
    ("adaspark-w16", AdaSparkRule, 16), ("adaspark-classes", AdaSparkRule, "classes"),
    ("adaspark-w1", AdaSparkRule, "learned"),
])
def test_arm_files_build_their_rules(name: str, kind: type, width: object) -> None:
    arm = OmegaConf.load(f"conf/arm/{name}.yaml")
    assert arm.name == name and arm.engine == "ours"
    rule = make_arm_rule(check_arm(arm, f"arms.{name}"))
    assert isinstance(rule, kind)
    if isinstance(rule, AdaSparkRule):
        assert rule.width_mode == width
        assert (rule.model is None) == (name in ("tree16", "costmodel"))
        assert rule.ngram_on == (name not in ("tree16", "costmodel"))
        assert rule.offer_width1 == (name == "adaspark-w1")
        assert rule.bounded == (name == "adaspark-w1")  # the extension's bounded cold start


# -- the named alternatives (CHOICE keys): what each setting does, on a synthetic case --------


def clock_reading(cfg: SchedulerConfig) -> float:
    """D (the round's fixed cost) of 10, 12 and 11 ms at one context: ``raw`` reads the
    window's minimum in seconds; ``residual`` reads D against D's own law, about 1."""
    clock = FixedCostClock(cfg.cost_model)
    phi = context_basis(500, cfg.cost_model.context_basis_unit)
    for d in (0.010, 0.012, 0.011):
        clock.observe(500, d, phi)
    return clock.reading()


def level_after_one_slow_verify(cfg: SchedulerConfig) -> float:
    """Three verifies at 50 ms fit the law, then one at 100 ms: read at the sample (before it
    trains the law) its ratio sets the level alone, about 2; read against the law now, the
    three earlier verifies keep it near 1."""
    k = CostClass(cfg.cost_model, 2, 2)
    phi = context_basis(500, cfg.cost_model.context_basis_unit)
    for t in (0.05, 0.05, 0.05, 0.10):
        k.observe(500, t, phi, 1.0)
    return k.level.value


def ngram_share_of_an_agreed_pick(cfg: SchedulerConfig) -> float:
    """One agreed pick at q = 0.8: Eq. (7)'s S_ng holds it (priced by g_n) or not (by g_d)."""
    cands = CandidateSet()
    cands.tokens, cands.parent, cands.kind, cands.agreed = [1], [-1], [PICK], [True]
    agreed = AdaSparkRule(config=cfg).agreed_counts
    _, _, s_ng = ngram_order(cands, np.array([0.8]), counts_as_ngram(cands, agreed))
    return float(s_ng[1])


def head_offset_after_a_placed_pick(cfg: SchedulerConfig) -> float:
    """Width 2 places only the anchor's pick (head 0.9); the target rejects it and every
    sibling. ``placed``: the offset learns from the pick alone, b = -0.15 x 0.9 / (1 + 0.9);
    ``all_candidates``: from the seven unplaced siblings too, which pull it further down."""
    rule = AdaSparkRule(width=2, ngram=False, config=cfg)
    rejected_rounds(rule, 1)
    return rule.head.b


def exploration_clock_after_three_rounds(cfg: SchedulerConfig) -> int:
    """No n-gram candidates: ``ngram_rounds`` counts none of the three tree rounds."""
    rule = AdaSparkRule(width=4, ngram=False, config=cfg)
    rejected_rounds(rule, 3)
    return rule.exploration_clock


def reference_width_offered_without_8(cfg: SchedulerConfig) -> int:
    """Offered 2, 4, 12 and 16 rows (8 priced out): ``fixed`` keeps n0 at 8 rows, the paper's
    reading; ``narrowest_offered`` moves it to 12."""
    return reference_width([2, 4, 12, 16], cfg.width_choice)


def widest_measured_on_a_linear_cost(cfg: SchedulerConfig) -> int:
    """Every row costs a decode and the drafter is weak (tests/rules/test_scheduler_cold_start
    has the arithmetic): the ladder measures 32 rows; ``bounded`` stops at 16 or less."""
    env = Environment(cost=RisingCost(base=0.0, per_row=0.039),
                      drafter=DrafterProcess(B=4, K=8, alpha=-2.0), fixed=0.01, seed=3)
    rule = AdaSparkRule(ngram=False, config=cfg)
    Simulator(env).run(rule, range(2), [300], 120)
    assert rule.table is not None
    top = max(k.hi for k in rule.table.classes if k.measured > 0)
    return 32 if top >= 32 else 16 if top <= 16 else top


ALTERNATIVES: dict[tuple[str, str], tuple[Callable[[SchedulerConfig], Any], Any, Any]] = {
    # (what it changes, reading at the default, reading at the alternative)
    ("cost_model", "clock"): (clock_reading, None, 0.010),
    ("cost_model", "level_against"): (level_after_one_slow_verify, None, None),
    ("width_choice", "agreed_counts_as"): (ngram_share_of_an_agreed_pick, 0.8, 0.0),
    ("acceptance_model", "gate_counts"): (first_round_off_the_prior, 10, 3),
    ("acceptance_model", "offset_labels"): (head_offset_after_a_placed_pick, None,
                                            -0.15 * 0.9 / 1.9),
    ("ngram_fill", "exploration_counts"): (exploration_clock_after_three_rounds, 0, 3),
    ("width_choice", "gain_reference"): (reference_width_offered_without_8, 8, 12),
    ("cost_model", "cold_start"): (widest_measured_on_a_linear_cost, 32, 16),
}


def test_every_named_alternative_with_two_settings_is_tested_here() -> None:
    two = {k for k, v in CHOICES.items() if len(v) > 1}
    assert two <= ALTERNATIVES.keys(), sorted(two - ALTERNATIVES.keys())


@pytest.mark.parametrize("section,key", list(ALTERNATIVES), ids=lambda x: str(x))
def test_every_named_alternative_changes_what_the_code_does(section: str, key: str) -> None:
    read, at_default, at_alternative = ALTERNATIVES[(section, key)]
    default_value, alternative = CHOICES[(section, key)][:2]
    default = load_config("adaspark")
    assert getattr(getattr(default, section), key) == default_value
    other = load_config("adaspark", {section: {key: alternative}})
    a, b = read(default), read(other)
    if at_default is not None:
        assert a == pytest.approx(at_default, rel=1e-9)
    if at_alternative is not None:
        assert b == pytest.approx(at_alternative, rel=1e-9)
    assert a != b
    if key == "clock":            # residual: a ratio near 1, not seconds
        assert a == pytest.approx(1.0, abs=0.05)
    if key == "level_against":    # at the sample: the slow ratio, ~2; current law: near 1
        assert a == pytest.approx(2.0, abs=0.05) and b == pytest.approx(1.0, abs=0.05)
    if key == "offset_labels":    # the unplaced siblings, all rejected, pull it further down
        assert a < b < 0.0
