"""The ``run`` config group (:class:`RunSettings`, typed) and an arm's entry in a run
(:class:`ArmEntry`): which arm, its engine, and what its rule needs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from adaspark import paths
from adaspark.config import ConfigError
from adaspark.runs.rows import PROTOCOL_CAP
from adaspark.schema import check_group, spec
from adaspark.testset.subsets import SUBSETS


class RunError(RuntimeError):
    """A run cannot start or continue; the message says why and what to do."""


class RunConfigError(RunError, ConfigError):
    """A value of the ``run`` group (or ``run_arms``) of the wrong type or out of range."""


class RunMismatchError(RunError):
    """The run directory holds results made by another binary, model file, config, test set or
    decoding code."""


# ---------------------------------------------------------------------------------------------
# Settings and arm entries


@dataclass
class RunSettings:
    """The ``run`` config group (``conf/run/default.yaml``); see that file for each key. The
    fields' metadata are their ranges and choices (:mod:`adaspark.schema`)."""

    subset: str = spec(choices=tuple(SUBSETS), default="short")
    cap: int = spec(min=1, default=128)
    protocol_cap: int = spec(min=1, default=PROTOCOL_CAP)
    exact: bool = False
    host: str = "127.0.0.1"
    port: int = spec(min=0, max=65535, default=0)
    testset: str = "runs/testset"
    chat_template: str | None = None
    tool_fallback: str = spec(choices=("generic", "none"), default="generic")
    round_log: bool = False
    warmup: bool = True
    startup_timeout_s: float = spec(min=1, default=900.0)
    request_timeout_s: float = spec(min=1, default=7200.0)

    @classmethod
    def check(cls, section: Any) -> RunSettings:
        """The section checked against the fields' types, ranges and choices."""
        try:
            return check_group(cls, section, "run", extra="refuse")
        except RunConfigError:
            raise
        except ConfigError as e:
            raise RunConfigError(str(e)) from None

    @classmethod
    def from_config(cls, cfg: Any) -> RunSettings:
        """From a composed config's ``run`` section (a mapping or a DictConfig)."""
        section = cfg.get("run") if hasattr(cfg, "get") else None
        if section is None:
            raise RunError(
                "the config has no `run` section: add `- run: default` to the defaults list of "
                "conf/config.yaml (then regenerate params.yaml with `adaspark config "
                "format=yaml > params.yaml`), or pass +run=default")
        return cls.check(section)

    @property
    def max_tokens(self) -> int:
        return min(self.cap, self.protocol_cap)

    def testset_dir(self) -> Path:
        return paths.from_cwd_or_repo(self.testset)


@dataclass(frozen=True)
class ArmEntry:
    """An entry of ``run_arms``: an arm name, optionally ``@repeat`` (``adaspark@2``)."""

    entry: str
    name: str
    repeat: int

    @classmethod
    def parse(cls, entry: str) -> ArmEntry:
        name, at, rep = entry.partition("@")
        if at and not rep.isdigit():
            raise RunError(f"arm entry {entry!r}: the repeat after @ must be a number")
        return cls(entry, name, int(rep) if at else 1)


def arm_config(cfg: Any, entry: ArmEntry) -> dict[str, Any]:
    """The arm's config from ``arms.<entry>`` or ``arms.<name>``."""
    arms = cfg.get("arms") or {}
    for key in (entry.entry, entry.name):
        if key in arms:
            a = arms[key]
            d = OmegaConf.to_container(a, resolve=True) if isinstance(a, DictConfig) else dict(a)
            assert isinstance(d, dict)
            return d
    raise RunError(f"no arm {entry.entry!r} under `arms:` in the config; it has {sorted(arms)}. "
                   f"Add `- arm@arms.{entry.name}: {entry.name}` to conf/config.yaml's defaults")


def rule_options(arm: dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments the arm gives its width rule (flat keys or a ``rule:`` mapping)."""
    from adaspark.rules.arms import rule_kwargs

    return rule_kwargs(OmegaConf.create(arm))


def is_speculative(arm: dict[str, Any]) -> bool:
    """Whether the arm drafts (llama-server: a ``spec_type``; ours: its rule uses a drafter)."""
    if arm.get("engine") == "llama-server":
        return (arm.get("server") or {}).get("spec_type") not in (None, "none")
    from adaspark.rules.base import rule_class

    return rule_class(str(arm.get("width_rule"))).uses_drafter


def uses_scheduler_constants(arm: dict[str, Any]) -> bool:
    """Whether the arm's rule takes the ``scheduler`` group (as ``arms.build`` decides)."""
    from adaspark.rules.base import rule_class

    if arm.get("engine", "ours") != "ours":
        return False
    return rule_class(str(arm.get("width_rule"))).needs_scheduler


def engine_of(arm: dict[str, Any]) -> str:
    engine = arm.get("engine", "ours")
    if engine not in ("ours", "llama-server"):
        raise RunError(f"arm {arm.get('name')}: engine must be `ours` or `llama-server`, not "
                       f"{engine!r}")
    return str(engine)
