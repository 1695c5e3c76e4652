"""Table 14's constants are in conf/scheduler/adaspark.yaml, named as in the table, and load into
the typed config; every arm file builds its rule."""

from __future__ import annotations

import glob
import math

import pytest
from omegaconf import OmegaConf

from adaspark.rules.adaspark.config import load_config
from adaspark.rules.adaspark.rule import AdaSparkRule
from adaspark.rules.arms import make_arm_rule
from adaspark.rules.fixed import Chain
from adaspark.schema import check_arm


def test_table_14_values() -> None:
    c = load_config("adaspark")
    cm, wc, am, ng = c.cost_model, c.width_choice, c.acceptance_model, c.ngram_fill
    assert cm.quantile_tau == 0.15 and cm.context_basis_unit == 8192
    assert (cm.l1, cm.l2) == (0.002, 0.01)
    assert (cm.ftrl_rate, cm.ftrl_stabiliser, cm.squared_gradient_cap) == (0.05, 1.0, 400.0)
    assert cm.sample_bank_per_band == 16 and cm.refit_holdout_fraction == 0.25
    assert cm.refit_holdout_min_band == 4 and cm.law_clamp == (0.5, 3.0)
    assert (cm.level_window, cm.level_clamp) == (8, (0.5, 2.0))
    assert (cm.measurements_before_priced, cm.samples_before_law) == (3, 3)
    assert cm.starting_ladder == (2, 4, 8, 16, 32, 64)
    assert (cm.split_hold_rounds, cm.steep_interval, cm.most_widths_learned) == (8, 0.25, 24)
    assert (wc.rate_half_life_rounds, wc.rate_warm_rounds) == (64, 8)
    assert wc.gain_clamp == (0.25, 4.0) and wc.gain_shrinkage == 0.02
    assert wc.gain_reference_width == 8
    assert (wc.ratio_margin, wc.hysteresis_margin) == (0.04, 0.04)
    assert (am.drafter_ftrl_rate, am.drafter_ftrl_stabiliser, am.drafter_l2) == (0.05, 1.0, 0.01)
    assert am.ngram_bucket_ftrl_rate == 0.5 and am.prior_gate == 3.0
    assert am.squared_gradient_cap == 400.0
    assert (am.intercept_adagrad_rate, am.intercept_band,
            am.intercept_squared_gradient_cap) == (0.15, 2.0, 16.0)
    assert am.guard_half_life == 256
    assert (am.head_offset_adagrad_rate, am.head_offset_band) == (0.15, 2.0)
    assert am.prior_pick_intercept == pytest.approx(math.log(2.0))
    assert (ng.follower_context, ng.chain_depth_limit, ng.exploration_period) == (3, 32, 16)


def test_every_key_has_a_comment_and_no_key_is_missing() -> None:
    text = open(glob.glob("conf/scheduler/adaspark.yaml")[0]).read()
    for line in text.splitlines():
        if line.startswith("  ") and ":" in line and not line.strip().startswith("#"):
            assert "#" in line, f"key without a comment: {line!r}"
    with pytest.raises(ValueError, match="missing keys"):
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


@pytest.mark.parametrize("section,key,value", [
    ("cost_model", "clock", "raw"), ("cost_model", "level_against", "at_sample"),
    ("width_choice", "agreed_counts_as", "drafter"),
    ("acceptance_model", "gate_counts", "updates"),
    ("acceptance_model", "offset_labels", "placed"),
    ("ngram_fill", "exploration_counts", "all_tree_rounds"),
])
def test_every_named_alternative_runs(section: str, key: str, value: str) -> None:
    from adaspark.rules.adaspark.simulator import (
        DrafterProcess,
        Environment,
        Simulator,
        StepCost,
        TextProcess,
    )

    env = Environment(cost=StepCost(tops=(8, 64), levels=(0.02, 0.04)),
                      drafter=DrafterProcess(B=4, K=8), seed=1,
                      text=TextProcess(copy_start=0.05))
    rule = AdaSparkRule(constants={section: {key: value}}, offer_width1=True)
    assert getattr(getattr(rule.cfg, section), key) == value
    reps = Simulator(env).run(rule, range(2), [300], 120)
    assert all(r.tokens >= 120 for r in reps)
