"""Registries are tables keyed by config name, filled without import side effects (issue 11)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from adaspark.config import ConfigError, compose
from adaspark.config_check import validate
from adaspark.decoding.drafter.base import DRAFTERS, Drafter
from adaspark.decoding.round import WidthRule
from adaspark.registry import Registry, UnknownNameError
from adaspark.rules.base import WIDTH_RULES, make_rule, rule_class
from adaspark.schema import check_arm


@pytest.mark.parametrize("name", WIDTH_RULES.names())
def test_every_width_rule_resolves_to_its_class(name: str) -> None:
    cls = rule_class(name)
    assert issubclass(cls, WidthRule) and cls.name == name
    assert isinstance(cls.uses_drafter, bool) and isinstance(cls.needs_scheduler, bool)


def test_what_a_rule_needs_is_declared_by_its_class() -> None:
    assert not rule_class("ar").uses_drafter and rule_class("chain").uses_drafter
    assert rule_class("adaspark").needs_scheduler
    assert not any(rule_class(n).needs_scheduler for n in ("ar", "chain", "pinned"))


def test_every_drafter_kind_resolves() -> None:
    for name in DRAFTERS:
        assert issubclass(DRAFTERS.get(name), Drafter)


@pytest.mark.parametrize("name", WIDTH_RULES.names())
def test_every_rule_declares_its_options_and_is_built_from_them(name: str) -> None:
    cls = rule_class(name)
    assert dataclasses.is_dataclass(cls.Options)
    raw = {"name": "x", "width_rule": name} | ({"width": 8} if name == "pinned" else {})
    arm = check_arm(raw, "arms.x")
    assert isinstance(arm.rule, cls.Options)
    assert isinstance(cls.from_options(arm.rule), cls)


def test_a_registry_checks_what_it_hands_out_against_its_base() -> None:
    reg: Registry[type] = Registry("thing", {"pi": "math:pi", "path": "pathlib:Path"}, "a table",
                                   base=object)
    assert reg.get("path").__name__ == "Path"
    with pytest.raises(ConfigError, match=r"not a subclass of builtins\.object"):
        reg.get("pi")
    with pytest.raises(ConfigError, match=r"subclass of adaspark\.decoding\.round\.WidthRule"):
        rule_class("pathlib:Path")
    with pytest.raises(ConfigError, match="no module 'no_such_module'"):
        rule_class("no_such_module:Rule")
    with pytest.raises(ConfigError, match="has no 'Nope'"):
        rule_class("adaspark.rules.fixed:Nope")


def test_a_name_means_the_same_whatever_was_imported_before() -> None:
    """A fresh interpreter that imports only the registry's module sees every rule, and getting
    one imports its module then, not before."""
    code = ("import sys; from adaspark.rules.base import WIDTH_RULES, rule_class; "
            "assert 'adaspark.rules.adaspark.rule' not in sys.modules; "
            "print(','.join(WIDTH_RULES.names())); rule_class('adaspark'); "
            "assert 'adaspark.rules.adaspark.rule' in sys.modules")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ",".join(WIDTH_RULES.names())


def test_an_unknown_name_lists_the_known_ones() -> None:
    with pytest.raises(UnknownNameError, match=r"unknown width rule 'nope'; known: adaspark, ar"):
        make_rule("nope")
    with pytest.raises(UnknownNameError,
                       match=r"unknown drafter kind .medusa.; known: draft-model, dspark"):
        DRAFTERS.get("medusa")
    reg: Registry[int] = Registry("thing", {"a": "math:pi"}, "a test table")
    with pytest.raises(UnknownNameError, match=r"the names of a test table") as e:
        reg.get(3)
    assert isinstance(e.value, ConfigError) and e.value.known == ["a"]


def test_the_config_check_refuses_an_unknown_rule_or_drafter_kind() -> None:
    with pytest.raises(UnknownNameError, match=r"arms\.x\.width_rule"):
        check_arm({"name": "x", "width_rule": "nope"}, "arms.x")
    cfg = compose(["target=tiny", "drafter=tiny-truncated", "drafter.kind=eagle"])
    with pytest.raises(UnknownNameError, match="unknown drafter kind 'eagle'"):
        validate(cfg, command="generate")
