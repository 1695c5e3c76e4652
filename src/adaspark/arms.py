"""From a composed config to the running parts of an arm: target, drafter, width rule.

Arms are files in ``conf/arm/``, read as :class:`~adaspark.schema.ArmConfig`: ``width_rule``
names a rule of :data:`adaspark.rules.base.WIDTH_RULES` and ``rule`` holds its keyword
arguments.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from adaspark import model_files
from adaspark.config import ConfigError
from adaspark.decoding.backend import configured_gpu_layers
from adaspark.decoding.drafter.base import Drafter, make_drafter
from adaspark.decoding.engine import Target
from adaspark.decoding.round import WidthRule
from adaspark.decoding.slots import SlotTarget
from adaspark.rules.base import rule_class
from adaspark.schema import (
    ArmConfig,
    arm_view,
    drafter_config,
    drafter_key,
    scheduler_mapping,
    target_config,
)


@dataclass
class Parts:
    target: Target
    rule: WidthRule
    drafter: Drafter | None
    block_positions: int
    models: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def drafters(self) -> list[Drafter | None]:
        return [self.drafter]

    def close(self) -> None:
        if self.drafter is not None:
            self.drafter.close()
        self.target.close()


def make_arm_rule(arm: ArmConfig, scheduler: Mapping[str, Any] | None = None,
                  **extra: Any) -> WidthRule:
    """The width rule of an arm, built from its checked options (``width_rule`` names the class,
    ``arms.adaspark.width=8`` pins AdaSpark's width; ``extra``: keywords the caller adds). A rule
    whose class declares
    :attr:`~adaspark.decoding.round.WidthRule.needs_scheduler` gets the composed ``scheduler``
    group, so ``-S scheduler.<part>.<key>=...`` reaches it."""
    if arm.engine != "ours":
        raise ValueError(f"arm {arm.name} runs on {arm.engine}, not on our engine")
    cls = rule_class(str(arm.width_rule))
    if (scheduler is not None and cls.needs_scheduler and "scheduler" not in extra
            and getattr(arm.rule, "scheduler", None) is None):
        extra = extra | {"scheduler": dict(scheduler)}
    return cls.from_options(arm.rule, **extra)


def build_drafter(view: Any, arm: ArmConfig, target: Target, *, exact: bool,
                  n_seqs: int = 1, n_ctx: int | None = None) -> tuple[Drafter, dict[str, Any]]:
    """The drafter ``arm`` names (``view``: the composed config through
    :func:`~adaspark.schema.arm_view`), loaded beside the running ``target``, and its model
    entry (path, sha256). A DSpark drafter hooks the target's committed rows, so it must be
    built before the target's first prefill. With ``n_seqs`` > 1 a draft model's context holds
    a sequence per request (its ``sequences()``), of at least ``n_ctx`` tokens in all."""
    drafter_cfg = drafter_config(view)
    key = drafter_key(arm)
    why = (model_files.not_for_target(str(drafter_cfg.model), view.target, key)
           if drafter_cfg.model and not drafter_cfg.path else None)
    if why or (not drafter_cfg.path and not drafter_cfg.model):
        raise ConfigError(f"arm {arm.name}: "
                          + (why or f"the drafter {drafter_cfg.name} has no file: set "
                             f"{key}.path=FILE (the drafter's GGUF)")
                          + ("" if key == "drafter" else
                             f"; the arm names its own drafter ({key}), so drafter.path "
                             "does not reach it"))
    dpath, dsha = model_files.resolve(drafter_cfg)
    shared = {} if n_seqs == 1 else {"n_seqs": n_seqs}
    drafter = make_drafter(
        drafter_cfg.kind, path=dpath, n_ctx=max(drafter_cfg.n_ctx, n_ctx or 0), exact=exact,
        top_k=drafter_cfg.candidates_per_position, threads=view.get("threads"), target=target,
        n_gpu_layers=configured_gpu_layers(drafter_cfg, key), **shared,
    )
    return drafter, {"path": str(dpath), "sha256": dsha}


def build(cfg: Any, arm: ArmConfig, *, exact: bool, **rule_extra: Any) -> Parts:
    """The running parts of ``arm`` under the composed ``cfg`` (its ``target``, ``drafter``
    (the arm's own, :func:`~adaspark.schema.arm_view`), ``scheduler`` and ``threads``, read
    through their typed schemas)."""
    cfg = arm_view(cfg, arm)
    target_cfg, drafter_cfg = target_config(cfg), drafter_config(cfg)
    threads = cfg.get("threads")
    rule = make_arm_rule(arm, scheduler_mapping(cfg), **rule_extra)
    tpath, tsha = model_files.resolve(target_cfg)
    # A rule without a drafter verifies one row: plain decode, on llama-server's context
    # settings in fast mode (Target, "Plain decode").
    target = Target(tpath, target_cfg.n_ctx, exact=exact, threads=threads,
                    plain=not rule.uses_drafter and not exact,
                    n_gpu_layers=configured_gpu_layers(target_cfg, "target"))
    models = {"target": {"path": str(tpath), "sha256": tsha}}
    drafter = None
    block_positions = drafter_cfg.block_positions
    if rule.uses_drafter:
        try:
            drafter, models["drafter"] = build_drafter(cfg, arm, target, exact=exact)
        except Exception:
            target.close()
            raise
        block_positions = block_positions or getattr(drafter, "block_positions", None)
    if block_positions is None and rule.uses_drafter:
        raise ConfigError(f"drafter {drafter_cfg.name} (kind {drafter_cfg.kind}) has no "
                          f"block_positions: set {drafter_key(arm)}.block_positions=B")
    if rule.uses_drafter:   # the scheduler's kernels, compiled or loaded before any timed round
        from adaspark.rules.adaspark.simulator import warm_kernels

        warm_kernels()
    return Parts(target, rule, drafter, block_positions or 1, models)


@dataclass
class SlotParts:
    """The running parts of an arm serving ``n_slots`` requests together
    (:mod:`adaspark.decoding.slots`): the shared target context, and per slot a width rule and a
    drafter (None for an arm without one)."""

    target: SlotTarget
    rules: list[WidthRule]
    drafters: list[Drafter | None]
    block_positions: int
    models: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def rule(self) -> WidthRule:
        return self.rules[0]

    def close(self) -> None:
        for d in self.drafters:
            if d is not None:
                d.close()
        self.target.close()


def build_slots(cfg: Any, arm: ArmConfig, *, exact: bool, n_slots: int,
                rule_extra: Sequence[Mapping[str, Any]]) -> SlotParts:
    """The parts of ``arm`` for ``n_slots`` concurrent requests: one target context divided
    into slots, and per slot its rule (``rule_extra[k]``: keywords the caller adds, such as the
    slot's own store file) and its own drafter (each a context of its own: a draft model's per
    request sequences; a drafter that reads the target's hidden states is refused, since it
    hooks one target)."""
    if len(rule_extra) != n_slots:
        raise ValueError(f"{n_slots} slots need {n_slots} rule keyword sets")
    cfg = arm_view(cfg, arm)
    target_cfg, drafter_cfg = target_config(cfg), drafter_config(cfg)
    scheduler = scheduler_mapping(cfg)
    rules = [make_arm_rule(arm, scheduler, **extra) for extra in rule_extra]
    if rules[0].uses_drafter and drafter_cfg.kind == "dspark":
        raise ConfigError(f"arm {arm.name}: a DSpark drafter reads one target's hidden states, "
                          "so it does not serve several requests at once yet; serve it with "
                          "max_concurrent=1, or pick an arm with a draft-model drafter")
    tpath, tsha = model_files.resolve(target_cfg)
    target = SlotTarget(tpath, target_cfg.n_ctx, exact=exact, n_slots=n_slots,
                        threads=cfg.get("threads"),
                        n_gpu_layers=configured_gpu_layers(target_cfg, "target"))
    models = {"target": {"path": str(tpath), "sha256": tsha}}
    drafters: list[Drafter | None] = [None] * n_slots
    try:
        if rules[0].uses_drafter and not exact:  # one context, a sequence per slot
            first, models["drafter"] = build_drafter(cfg, arm, target, exact=exact,
                                                     n_seqs=n_slots, n_ctx=target.n_ctx)
            drafters = list(first.sequences())
            if len(drafters) != n_slots:
                raise ConfigError(f"arm {arm.name}: its drafter serves {len(drafters)} "
                                  f"request(s) at once, not {n_slots}")
        elif rules[0].uses_drafter:  # a context per slot (slots, "Drafting")
            for k in range(n_slots):
                drafters[k], models["drafter"] = build_drafter(cfg, arm, target, exact=exact)
    except Exception:
        for d in drafters:
            if d is not None:
                d.close()
        target.close()
        raise
    block_positions = drafter_cfg.block_positions or (
        getattr(drafters[0], "block_positions", None) if drafters[0] is not None else None)
    if rules[0].uses_drafter:
        from adaspark.rules.adaspark.simulator import warm_kernels

        warm_kernels()
    return SlotParts(target, rules, drafters, block_positions or 1, models)
