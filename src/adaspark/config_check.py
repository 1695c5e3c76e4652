"""The one check of a composed config (HARNESS "One config truth"): :func:`validate` checks
every group a command reads, once, before anything runs or is written, each group by its own
typed dataclass (:mod:`adaspark.schema`, :class:`~adaspark.runs.settings.RunSettings`,
:class:`~adaspark.runs.cluster.LauncherSettings`, the scheduler's constants of
:mod:`adaspark.rules.adaspark.config`) through :mod:`adaspark.checks`; :func:`read_params` reads a
pipeline stage's ``params.yaml`` and checks it the same way."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from adaspark.checks import check_group, check_value, plain
from adaspark.config import ConfigError
from adaspark.decoding.sampling import SamplingParams
from adaspark.runs.cluster import LauncherSettings
from adaspark.runs.settings import RunSettings
from adaspark.schema import (
    ArmConfig,
    DrafterConfig,
    EngineOptions,
    GenerateOptions,
    TablesOptions,
    TargetConfig,
    arm_view,
    check_arm,
    check_drafter_kind,
    check_scheduler,
)


@dataclass
class Checked:
    """What :func:`validate` checked, typed, for the command to use rather than check again: the
    command's arm (``arm=``), the arms under ``arms:`` it checked (by key: every one, or a run's
    ``run_arms``) and the ``run`` group."""

    arm: ArmConfig | None = None
    arms: dict[str, ArmConfig] = field(default_factory=dict)
    run: RunSettings | None = None
    sampling: SamplingParams | None = None


def check_run_arms(raw: Any) -> list[str]:
    """``run_arms``: a non-empty list of arm entries (``name`` or ``name@repeat``)."""
    value = plain(raw)
    entries = check_value("run_arms", value, list[str])
    if not entries:
        raise ConfigError("run_arms=[] names no arm: list at least one, e.g. run_arms=[ar,chain3]")
    return entries


# ---------------------------------------------------------------------------------------------
# What each command checks


def validate(cfg: Any, *, command: str) -> Checked:
    """Check every group ``command`` reads from its composed config (once, before anything
    runs or is written): ``generate``, ``serve``, ``run``, ``replay``, ``config`` or a pipeline
    ``stage``
    (the params file: each group it holds)."""
    raw = plain(cfg)
    if not isinstance(raw, dict):
        raise ConfigError("the config must be a mapping of groups")
    out = Checked()
    if command == "generate":
        check_group(GenerateOptions, raw, "")
    else:
        check_group(EngineOptions, raw, "")
        if command == "config" and "max_tokens" in raw:
            check_group(GenerateOptions, raw, "")
    if raw.get("sampling") is not None:
        got = SamplingParams.check(raw["sampling"], partial=command == "stage")
        out.sampling = got if isinstance(got, SamplingParams) else None
    for name, cls in (("target", TargetConfig), ("drafter", DrafterConfig)):
        if name in raw or command in ("generate", "serve", "run", "replay"):
            checked = check_group(cls, raw.get(name), name, partial=command == "stage")
            if isinstance(checked, DrafterConfig):
                check_drafter_kind(checked.kind)
    drafters = raw.get("drafters") or {}
    if not isinstance(drafters, dict):
        raise ConfigError("drafters must be a mapping of drafter files by name "
                          "(conf/config.yaml's `drafter@drafters.<name>` entries)")
    for name, d in drafters.items():
        checked = check_group(DrafterConfig, d, f"drafters.{name}", partial=command == "stage")
        kind = checked.kind if isinstance(checked, DrafterConfig) else checked.get("kind")
        if kind is not None:
            check_drafter_kind(kind)
    if "arm" in raw and command in ("generate", "serve", "config", "replay"):
        out.arm = check_arm(raw["arm"], "arm")
    arms = raw.get("arms") or {}
    if command == "run":
        entries = check_run_arms(raw.get("run_arms"))
        for e in entries:
            key = e if e in arms else e.partition("@")[0]
            if key in arms:  # a missing arm is the runner's clear error
                out.arms[key] = check_arm(arms[key], f"arms.{key}")
    else:
        if "run_arms" in raw:
            check_value("run_arms", raw["run_arms"], list[str])
        for key, a in arms.items():
            out.arms[key] = check_arm(a, f"arms.{key}")
    checked_arms = ([out.arm] if out.arm is not None else []) + list(out.arms.values())
    if "drafters" in raw or command in ("generate", "serve", "run"):
        for a in checked_arms:
            arm_view(raw, a)  # an arm's own drafter is composed under drafters
    if "scheduler" in raw and raw["scheduler"] is not None:
        check_scheduler(raw["scheduler"])
        for a in checked_arms:  # an arm's own `constants:` override the composed ones
            constants = getattr(a.rule, "constants", None)
            if constants and isinstance(raw["scheduler"], dict):
                check_scheduler(OmegaConf.merge(raw["scheduler"], constants))
    if "run" in raw and command in ("run", "config", "stage"):
        if command == "stage":  # a params file may name some keys only
            groups = RunSettings.check_keys(raw["run"]).get("groups") or {}
        else:
            out.run = RunSettings.check(raw["run"])
            groups = out.run.groups
        unknown = [(g, a) for g, members in groups.items() for a in members
                   if "arms" in raw and a not in arms]
        if unknown:
            g, a = unknown[0]
            raise ConfigError(f"run.groups.{g} names the arm {a!r}, which is not under `arms:` "
                              f"(it has {sorted(arms)}): fix the name, or compose the arm with "
                              f"`- arm@arms.{a}: {a}` in conf/config.yaml's defaults")
    if "launcher" in raw and command in ("run", "config", "stage"):
        LauncherSettings.from_config(raw)
    if raw.get("tables") is not None:
        TablesOptions.check(raw["tables"])
    return out


def read_params(path: str | Path) -> DictConfig:
    """The composed ``params.yaml``, checked by :func:`validate` (every group it holds); a
    missing, unreadable or bad file is a :class:`~adaspark.config.ConfigError` that names it."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(
            f"{p} does not exist: compose it with `adaspark config format=yaml > {p}`"
        )
    try:
        cfg = OmegaConf.load(p)
    except Exception as e:  # a YAML parser's error, whichever it is
        raise ConfigError(f"{p} is not a YAML file of config sections ({e})") from None
    if not isinstance(cfg, DictConfig):
        raise ConfigError(f"{p} is not a mapping of config sections")
    try:
        validate(cfg, command="stage")
    except ConfigError as e:
        raise ConfigError(f"{p}: {e}") from None
    return cfg
