"""The typed config schemas (adaspark.schema): every composed config the project ships passes,
and every value of the wrong type or out of range is refused naming the key, the value and what
is allowed (issue 10, item 6)."""

from __future__ import annotations

import pytest
from helpers import REPO, run_defaults

from adaspark.checks import check_value
from adaspark.config import ConfigError, compose
from adaspark.config_check import read_params, validate
from adaspark.runs.run import compose_for_run
from adaspark.runs.settings import RunSettings


@pytest.mark.parametrize("args", [[], ["preset=paper"], ["preset=smoke", "target=tiny",
                                                          "drafter=tiny-truncated"]])
def test_shipped_configs_pass(args):
    validate(compose(args), command="config")
    validate(compose(args), command="generate")


def test_every_arm_file_passes():
    for f in sorted((REPO / "conf" / "arm").glob("*.yaml")):
        validate(compose([f"arm={f.stem}"]), command="generate")


def test_committed_params_pass():
    read_params(REPO / "params.yaml")


@pytest.mark.parametrize("override,key,allowed", [
    ("max_tokens=-1", "max_tokens=-1", "an integer >= 1"),
    ("max_tokens=0", "max_tokens=0", "an integer >= 1"),
    ("max_tokens=1.5", "max_tokens=1.5", "an integer >= 1"),
    ("max_tokens=true", "max_tokens=true", "an integer >= 1"),
    ("max_tokens=null", "max_tokens=null", "an integer >= 1"),
    ("exact=maybe", "exact='maybe'", "true or false or null"),
    ("threads=abc", "threads='abc'", "an integer >= 1 or null"),
    ("threads=0", "threads=0", "an integer >= 1 or null"),
    ("chat=1", "chat=1", "true or false"),
    ("check_greedy=maybe", "check_greedy='maybe'", "true or false"),
    ("target.n_ctx=16", "target.n_ctx=16", "an integer >= 128"),
    ("drafter.candidates_per_position=0", "drafter.candidates_per_position=0",
     "an integer >= 1"),
    ("drafter.block_positions=2.5", "drafter.block_positions=2.5", "an integer >= 1"),
    ("arm.positions=0", "arm.positions=0", "an integer >= 1 or null"),
    ("arm.positions=-3", "arm.positions=-3", "an integer >= 1 or null"),
    ("arms.adaspark.width=1", "arms.adaspark.width=1",
     "an integer from 2 to 64 or one of 'learned'"),
    ("arms.adaspark.ngram=maybe", "arms.adaspark.ngram='maybe'", "true or false"),
    ("arms.adaspark.acceptance=guess", "arms.adaspark.acceptance='guess'", "'fitted', 'head'"),
    ("arms.llamacpp-chain.server.spec_draft_n_max=0",
     "arms.llamacpp-chain.server.spec_draft_n_max=0", "an integer >= 1"),
    ("scheduler.cost_model.l1=abc", "scheduler.cost_model.l1='abc'", "a number"),
    ("tables.bootstrap_method=bca", "tables.bootstrap_method='bca'", "one of 'percentile', 'BCa'"),
    ("tables.n_resamples=0", "tables.n_resamples=0", "an integer >= 1"),
    ("+tables.bootstrap_metod=BCa", "tables.bootstrap_metod", "tables takes bootstrap_method"),
])
def test_nonsense_is_refused_with_key_value_and_allowed(override, key, allowed):
    with pytest.raises(ConfigError) as e:
        validate(compose(["arm=chain3", override]), command="generate")
    assert key in str(e.value) and allowed in str(e.value)


def test_unknown_rule_key_and_empty_run_arms():
    with pytest.raises(ConfigError, match=r"arm\.positions; arm takes name, .* no other key"):
        validate(compose(["arm=ar", "+arm.positions=3"]), command="generate")
    with pytest.raises(ConfigError, match=r"run_arms=\[\] names no arm"):
        validate(compose_for_run(["run_arms=[]"]), command="run")


@pytest.mark.parametrize("run,key", [
    ({"subset": "bogus"}, "run.subset='bogus'"), ({"cap": 0}, "run.cap=0"),
    ({"port": 70000}, "run.port=70000"), ({"exact": "maybe"}, "run.exact='maybe'"),
    ({"tool_fallback": "x"}, "run.tool_fallback='x'"), ({"cap": 1.5}, "run.cap=1.5"),
])
def test_run_group_types_and_ranges(run, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.").replace("[", r"\[")):
        RunSettings.from_config({"run": run_defaults(**run)})


def test_values_keep_their_types():
    assert check_value("k", 3, float) == 3.0
    assert check_value("k", [1, 2], tuple[float, float]) == (1.0, 2.0)
    assert check_value("k", None, int | None, {"min": 1}) is None
    with pytest.raises(ConfigError, match="a list of strings"):
        check_value("k", [1], list[str])


# -- issue 34, item 7: every scheduler constant has its range or its choices ------------------


@pytest.mark.parametrize("override,shown,allowed", [
    ("cost_model.quantile_tau=1.5", "quantile_tau=1.5", "a number (finite) > 0.0 and < 1.0"),
    ("cost_model.level_window=0", "level_window=0", "an integer >= 1"),
    ("cost_model.law_clamp=[3.0,0.5]", "law_clamp=[3.0,0.5]", "in increasing order"),
    ("cost_model.most_widths_learned=0", "most_widths_learned=0", "from 1 to 63"),
    ("cost_model.split_hold_rounds=-5", "split_hold_rounds=-5", "an integer >= 0"),
    ("cost_model.starting_ladder=[]", "starting_ladder=[]", "at least 1 long"),
    ("cost_model.starting_ladder=[0,-4]", "starting_ladder=[0,-4]", "each from 2 to 64"),
    ("cost_model.starting_ladder=[8,4]", "starting_ladder=[8,4]", "strictly increasing"),
    ("cost_model.measurements_before_priced=-1", "measurements_before_priced=-1", ">= 1"),
    ("width_choice.gain_clamp=[-1.0,0.0]", "gain_clamp=[-1.0,0.0]", "each > 0.0"),
    ("width_choice.rate_half_life_rounds=0", "rate_half_life_rounds=0", "> 0.0"),
    ("acceptance_model.logit_eps=0.0", "logit_eps=0.0", "> 0.0 and < 0.5"),
    ("acceptance_model.logit_eps=nan", "logit_eps=nan", "(finite)"),
    ("ngram_fill.exploration_period=0", "exploration_period=0", "an integer >= 1"),
    ("ngram_fill.follower_context=7", "follower_context=7", "from 1 to 6"),
    ("cost_model.clock=wall", "clock='wall'", "one of 'residual', 'raw'"),
])
def test_scheduler_constants_out_of_range_are_refused(override, shown, allowed):
    with pytest.raises(ConfigError) as e:
        validate(compose(["arm=adaspark", f"scheduler.{override}"]), command="generate")
    shown = f"scheduler.{override.split('.')[0]}.{shown}"
    assert shown in str(e.value) and allowed in str(e.value), str(e.value)


def test_an_arms_own_constants_are_checked_too():
    with pytest.raises(ConfigError, match=r"scheduler\.ngram_fill\.exploration_period=0"):
        validate(compose(["arm=adaspark", "+arm.constants={ngram_fill:{exploration_period:0}}"]),
                 command="generate")


def test_copy_max_match_reaches_copy_min_match():
    with pytest.raises(ConfigError, match="copy_max_match=3 is below copy_min_match=4"):
        validate(compose(["scheduler.ngram_fill.copy_max_match=3"]), command="generate")


def test_every_scheduler_key_has_a_range_or_choices():
    """Each key of conf/scheduler/ but a bool, and a logit that may be any finite number,
    carries its range or its choices in the field's metadata."""
    import typing
    from dataclasses import fields

    from adaspark.rules.adaspark.config import _SECTIONS

    any_finite = {"prior_pick_intercept"}
    bare = [f"{s}.{f.name}" for s, cls in _SECTIONS.items() for f in fields(cls)
            if typing.get_type_hints(cls)[f.name] is not bool and f.name not in any_finite
            and not {"min", "max", "gt", "lt", "choices"} & f.metadata.keys()]
    assert bare == []


@pytest.mark.parametrize("override,shown", [
    ("arm.width=1000", "arm.width=1000"),
    ("arms.adaspark-w4.width=65", "arms.adaspark-w4.width=65"),
])
def test_a_pinned_width_past_the_widest_verify_is_refused(override, shown):
    from adaspark.decoding.tree import MAX_ROWS_FAST, MAX_WIDTH

    assert MAX_WIDTH == MAX_ROWS_FAST
    with pytest.raises(ConfigError, match=shown.replace(".", r"\.") + ".*from 2 to 64"):
        validate(compose(["arm=adaspark-w4", override]), command="generate")


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_numbers_are_refused(value):
    with pytest.raises(ConfigError, match="finite"):
        check_value("k", value, float, {"min": 0.0})


# -- issue 34, item 6: a key no schema knows, or a known key at the wrong level ---------------


@pytest.mark.parametrize("command,override,meant", [
    ("run", "exact=true", "did you mean run.exact=true?"),
    ("run", "max_tokens=8", "its top-level keys: threads; and the config groups: run.cap"),
    ("serve", "max_tokens=8", "does not read the top-level key max_tokens"),
    ("generate", "cap=16", "did you mean run.cap=16?"),
    ("generate", "+foo=1", "foo is not a key of the config"),
    ("config", "+exct=true", "did you mean exact=true?"),
    ("run", "run.cpa=16", "did you mean run.cap=16?"),
    ("generate", "+target.pth=x.gguf", "did you mean target.path=x.gguf?"),
    ("serve", "scheduler.cost_model.quantile_ta=0.2",
     "did you mean scheduler.cost_model.quantile_tau=0.2?"),
])
def test_an_unknown_or_misplaced_key_is_refused_with_the_key_it_meant(command, override, meant):
    from adaspark.overrides import check_overrides

    with pytest.raises(ConfigError, match=meant.replace(".", r"\.").replace("?", r"\?")):
        check_overrides([override], command)


@pytest.mark.parametrize("command", ["generate", "serve", "run", "replay", "config"])
def test_config_groups_are_taken_by_every_command(command):
    from adaspark.overrides import check_overrides

    check_overrides(["target=tiny", "drafter=tiny-truncated", "arm=adaspark", "launcher=ray",
                     "preset=smoke", "run_arms=[ar]", "run.cap=16", "threads=2",
                     "scheduler.cost_model.l1=0.1", "arms.adaspark.width=8",
                     "drafters.dspark.path=F", "+arm@arms.tree16=tree16", "+target.path=F",
                     "launcher.workers=2", "tables.seed=1"], command)
    if command in ("generate", "serve", "replay", "config"):
        check_overrides(["exact=true"], command)
    if command in ("generate", "config"):
        check_overrides(["max_tokens=4", "prompt=a=b", "system=", "json=true"], command)
