"""From a composed config to the running parts of an arm: target, drafter, width rule.

Arms are files in ``conf/arm/``; ``width_rule`` names a rule in the registry of
``adaspark.rules.base`` and ``rule`` holds its keyword arguments.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from omegaconf import DictConfig, OmegaConf

from adaspark import model_files
from adaspark.decoding.drafter.base import Drafter, make_drafter
from adaspark.decoding.engine import Target
from adaspark.rules.base import WidthRule, rule_class


@dataclass
class Parts:
    target: Target
    rule: WidthRule
    drafter: Drafter | None
    block_positions: int
    models: dict[str, dict[str, Any]] = field(default_factory=dict)

    def close(self) -> None:
        if self.drafter is not None:
            self.drafter.close()
        self.target.close()


#: Keys of an arm file that describe the arm; every other key is a keyword of its width rule.
ARM_KEYS = ("name", "engine", "width_rule", "description")


def rule_kwargs(arm: DictConfig) -> dict[str, Any]:
    raw = OmegaConf.to_container(arm, resolve=True)
    assert isinstance(raw, dict)
    out = {str(k): v for k, v in raw.items() if k not in (*ARM_KEYS, "rule")}
    nested = raw.get("rule")  # also accepted: the keywords nested under `rule:`
    if isinstance(nested, dict):
        out |= {str(k): v for k, v in nested.items()}
    return out


def make_arm_rule(arm: DictConfig, scheduler: DictConfig | None = None,
                  **extra: Any) -> WidthRule:
    """The width rule of an arm: ``width_rule`` names it, the arm's other keys are its keyword
    arguments (``arms.adaspark.width=8`` pins AdaSpark's width). Rules that take the scheduler's
    constants get the composed ``scheduler`` group, so ``-S scheduler.<part>.<key>=...`` reaches
    them (the rule class says so: :attr:`~adaspark.rules.base.WidthRule.needs_scheduler`)."""
    if arm.get("engine", "ours") != "ours":
        raise ValueError(f"arm {arm.name} runs on {arm.engine}, not on our engine")
    kwargs = rule_kwargs(arm) | extra
    name = str(arm.width_rule)
    cls = rule_class(name)
    if isinstance(scheduler, DictConfig) and cls.needs_scheduler and "scheduler" not in kwargs:
        kwargs["scheduler"] = OmegaConf.to_container(scheduler, resolve=True)
    try:
        return cls(**kwargs)
    except TypeError as e:
        raise ValueError(f"arm {arm.name}: the keys of its file do not fit rule {name!r}: {e}"
                         ) from None


def build(cfg: DictConfig, arm: DictConfig, *, exact: bool, **rule_extra: Any) -> Parts:
    rule = make_arm_rule(arm, cfg.get("scheduler"), **rule_extra)
    tpath, tsha = model_files.resolve(cfg.target)
    target = Target(tpath, int(cfg.target.n_ctx), exact=exact, threads=cfg.get("threads"))
    models = {"target": {"path": str(tpath), "sha256": tsha}}
    drafter = None
    if rule.uses_drafter:
        dpath, dsha = model_files.resolve(cfg.drafter)
        drafter = make_drafter(
            str(cfg.drafter.kind), path=dpath, n_ctx=int(cfg.drafter.n_ctx), exact=exact,
            top_k=int(cfg.drafter.top_k), threads=cfg.get("threads"),
            target_vocab=target.token_texts(),
        )
        models["drafter"] = {"path": str(dpath), "sha256": dsha}
    return Parts(target, rule, drafter, int(cfg.drafter.block_positions), models)
