"""The registry of width rules by config name (``arm.width_rule``); the interface a rule
implements (Algorithm 1, lines 5-12) is :class:`adaspark.decoding.round.WidthRule`.
"""

from __future__ import annotations

from typing import Any

from adaspark.decoding.round import WidthRule
from adaspark.registry import Registry

#: Every width rule by its config name (``arm.width_rule``), imported on first use.
WIDTH_RULES: Registry[type[WidthRule]] = Registry("width rule", {
    "ar": "adaspark.rules.fixed:Autoregressive",
    "chain": "adaspark.rules.fixed:Chain",
    "pinned": "adaspark.rules.fixed:Pinned",
    "adaspark": "adaspark.rules.adaspark.rule:AdaSparkRule",
}, "adaspark.rules.base.WIDTH_RULES; an arm's width_rule, or a module:Class path",
    base=WidthRule)


def rule_class(name: str) -> type[WidthRule]:
    """The class registered as ``name`` (raises :class:`UnknownNameError` for another)."""
    return WIDTH_RULES.get(name)


def make_rule(name: str, **kwargs: Any) -> WidthRule:
    return rule_class(name)(**kwargs)
