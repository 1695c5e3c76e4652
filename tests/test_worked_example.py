"""The README's worked example of a new width rule (``examples/adaptive_chain.py``, named by
``conf/arm/adaptive-chain.yaml`` as ``module:Class``): checked like every arm, lossless through
``adaspark generate``, stepping through the one round loop in the simulator; the pipeline's smoke
run and replay run it too (``tests/test_pipeline_repro.py``)."""

from __future__ import annotations

import json

import pytest
from helpers import run_cli

from adaspark.arms import make_arm_rule
from adaspark.config import ConfigError, compose
from adaspark.decoding.round import RoundOutcome, RoundPlan, RoundState
from adaspark.rules.adaspark.simulator import DrafterProcess, Environment, Simulator, StepCost
from adaspark.schema import check_arm
from examples.adaptive_chain import AdaptiveChain, AdaptiveChainOptions

TINY = ["target=tiny", "drafter=tiny-truncated"]


def test_the_arm_file_names_the_rule_and_its_options_are_checked() -> None:
    cfg = compose(TINY)
    arm = check_arm(cfg.arms["adaptive-chain"], "arms.adaptive-chain")
    assert arm.rule == AdaptiveChainOptions(start=3, most=8)
    rule = make_arm_rule(arm)
    assert isinstance(rule, AdaptiveChain) and (rule.start, rule.most) == (3, 8)
    with pytest.raises(ConfigError, match=r"arms\.x\.most"):
        check_arm({"name": "x", "width_rule": "examples.adaptive_chain:AdaptiveChain",
                   "most": 0}, "arms.x")


def test_the_chain_grows_after_a_full_accept_and_halves_after_a_reject() -> None:
    rule = AdaptiveChain(start=4, most=5)
    rule.begin_request([1, 2, 3])
    sim = Simulator(Environment(cost=StepCost(tops=(8, 64), levels=(0.02, 0.04)),
                                drafter=DrafterProcess(B=8)))
    world = sim.world(0, 50, 40)
    state = RoundState(committed=world.text[:50].tolist(), round_index=0, max_rows=64,
                       block_positions=8)
    block, _ = sim.block(world, 50, 8)
    lengths = []
    for accepted in (4, 5, 5, 2, 0):
        plan: RoundPlan = rule.plan(state, block)
        lengths.append(plan.tree.n_rows - 1)
        path = list(range(accepted + 1))
        rule.observe(plan, RoundOutcome.of(plan, path, [0] * (accepted + 1), 0.01, 0.0))
    assert lengths == [4, 5, 5, 5, 2] and rule.length == 1


def test_a_simulated_request_adapts_its_chain() -> None:
    sim = Simulator(Environment(cost=StepCost(tops=(8, 64), levels=(0.02, 0.04))))
    reply = sim.run_request(AdaptiveChain(start=3, most=8), 0, 200, 120)
    assert reply.tokens >= 120 and len(set(reply.widths)) > 2, reply.widths


def test_generate_runs_it_losslessly() -> None:
    done = run_cli("generate", "arm=adaptive-chain", *TINY, "max_tokens=48", "exact=true",
                   "check_greedy=true", "json=true")
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["greedy_match"] is True and out["drafted"] > 0, out
