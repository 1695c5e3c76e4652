"""The typed config schemas (adaspark.schema): every composed config the project ships passes,
and every value of the wrong type or out of range is refused naming the key, the value and what
is allowed (issue 10, item 6)."""

from __future__ import annotations

import pytest
from helpers import REPO

from adaspark.config import ConfigError, compose
from adaspark.runs.run import compose_for_run
from adaspark.runs.settings import RunSettings
from adaspark.schema import check_value, validate
from adaspark.stages import read_params


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
    ("arms.adaspark.width=1", "arms.adaspark.width=1", "an integer >= 2 or one of 'learned'"),
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
        RunSettings.from_config({"run": run})


def test_values_keep_their_types():
    assert check_value("k", 3, float) == 3.0
    assert check_value("k", [1, 2], tuple[float, float]) == (1.0, 2.0)
    assert check_value("k", None, int | None, {"min": 1}) is None
    with pytest.raises(ConfigError, match="a list of strings"):
        check_value("k", [1], list[str])
