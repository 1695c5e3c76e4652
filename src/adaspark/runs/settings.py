"""The ``run`` config group (:class:`RunSettings`, typed) and an arm's entry in a run
(:class:`ArmEntry`): which arm, its engine, and what its rule needs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from adaspark import paths
from adaspark.checks import check_group, spec
from adaspark.config import ConfigError
from adaspark.decoding.sampling import SamplingParams
from adaspark.schema import ArmConfig, arm_view, check_arm, drafter_key
from adaspark.serving.requests import TOOL_FALLBACKS
from adaspark.testset.subsets import SUBSETS

#: ``run.order``'s choices (:mod:`adaspark.runs.order`).
ORDERS = ("sequential", "interleaved")


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
    """The ``run`` config group (``conf/run/default.yaml``, where each key's default is written
    and described; a field here has none). The fields' metadata are their ranges and choices
    (:mod:`adaspark.checks`)."""

    subset: str = spec(choices=tuple(SUBSETS))
    cap: int = spec(min=1)
    protocol_cap: int = spec(min=1)
    exact: bool
    host: str
    port: int = spec(min=0, max=65535)
    testset: str
    chat_template: str | None
    tool_fallback: str = spec(choices=TOOL_FALLBACKS)
    round_log: bool
    warmup: bool
    startup_timeout_s: float = spec(min=1)
    request_timeout_s: float = spec(min=1)
    order: str = spec(choices=ORDERS)
    groups: dict[str, list[str]]

    @classmethod
    def check(cls, section: Any) -> RunSettings:
        """The section checked against the fields' types, ranges and choices (``groups``:
        :func:`check_groups`); every key is needed (``conf/run/default.yaml`` has them all)."""
        return cls._check(section, partial=False)  # type: ignore[return-value]

    @classmethod
    def check_keys(cls, section: Any) -> dict[str, Any]:
        """The keys ``section`` holds, checked as :meth:`check` checks them (a params file that
        names only some of them)."""
        return cls._check(section, partial=True)  # type: ignore[return-value]

    @classmethod
    def _check(cls, section: Any, *, partial: bool) -> RunSettings | dict[str, Any]:
        try:
            settings = check_group(cls, section, "run", extra="refuse", partial=partial)
        except RunConfigError:
            raise
        except ConfigError as e:
            raise RunConfigError(str(e)) from None
        if isinstance(settings, dict):
            if "groups" in settings:
                settings["groups"] = check_groups(settings["groups"])
            return settings
        settings.groups = check_groups(settings.groups)
        return settings

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


def check_groups(groups: Mapping[str, Any]) -> dict[str, list[str]]:
    """``run.groups``: a mapping of group names to lists of arm names; an arm in one group at
    most; no repeat entry (``<arm>@N`` runs alone, around its group)."""
    out: dict[str, list[str]] = {}
    seen: dict[str, str] = {}
    for name, arms in groups.items():
        if not isinstance(arms, list | tuple) or not all(isinstance(a, str) for a in arms):
            raise RunConfigError(f"run.groups.{name}={arms!r} is not allowed: a group is a list "
                                 "of arm names, e.g. run.groups={default: [ar, chain3]}")
        for a in arms:
            if "@" in a:
                raise RunConfigError(
                    f"run.groups.{name} names the repeat entry {a!r}: a repeat runs alone, "
                    f"before or after its group (Table 3); list {a.partition('@')[0]!r} instead")
            if a in seen:
                raise RunConfigError(f"run.groups: arm {a!r} is in groups {seen[a]!r} and "
                                     f"{name!r}; an arm belongs to one group at most")
            seen[a] = str(name)
        out[str(name)] = list(arms)
    return out


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


def arm_config(cfg: Any, entry: ArmEntry) -> ArmConfig:
    """The arm's typed config from ``arms.<entry>`` or ``arms.<name>``."""
    arms = cfg.get("arms") or {}
    for key in (entry.entry, entry.name):
        if key in arms:
            return check_arm(arms[key], f"arms.{key}")
    raise RunError(f"no arm {entry.entry!r} under `arms:` in the config; it has {sorted(arms)}. "
                   f"Add `- arm@arms.{entry.name}: {entry.name}` to conf/config.yaml's defaults")


def no_drafter_file(cfg: Any, arm: ArmConfig) -> str | None:
    """Why ``arm`` is not run here, or None: an arm naming its own drafter (``drafter:``) whose
    ``drafters.<name>`` entry has no file (a DSpark arm before a DSpark file exists for the
    target). Such arms sit in a preset's ``run_arms`` and join it once the file is set."""
    if arm.drafter is None or not arm.speculative:
        return None
    view = arm_view(cfg, arm)
    d = view.drafter
    if d.get("path"):
        return None
    if d.get("model"):
        from adaspark.model_files import not_for_target

        return not_for_target(str(d["model"]), view.target, drafter_key(arm))
    return (f"arm {arm.name} names the drafter {arm.drafter!r}, whose file is not set "
            f"({drafter_key(arm)}.path is null): set it to a drafter file for this target, "
            f"e.g. `dvc exp run -S {drafter_key(arm)}.path=FILE`")


def run_sampling(cfg: Any) -> SamplingParams | None:
    """A run's sampling: the config's ``sampling`` group, or None when it is absent or greedy
    (temperature 0, every run of the paper's protocol). Each reply is sampled with its own seed
    (:func:`adaspark.runs.rows.reply_seed`), recorded in ``replies.parquet``'s ``seed``."""
    raw = cfg.get("sampling")
    if raw is None:
        return None
    s = SamplingParams.check(raw)
    return None if s.greedy else s
