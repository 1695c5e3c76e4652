"""From a composed config to the running parts of an arm: target, drafter, width rule.

Arms are files in ``conf/arm/``; ``width_rule`` names a rule in the registry of
``adaspark.width_rules`` and ``rule`` holds its keyword arguments.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from omegaconf import DictConfig, OmegaConf

import adaspark.drafter.draft_model  # noqa: F401  (registers the draft-model drafter)
from adaspark import model_files
from adaspark.drafter.base import Drafter, make_drafter
from adaspark.engine import Target
from adaspark.width_rules import WidthRule, make_rule


def _register_scheduler() -> None:
    """The scheduler's rules register themselves on import, when the module exists."""
    try:
        import adaspark.scheduler.scheduler  # noqa: F401
    except ModuleNotFoundError as e:
        if e.name is None or not e.name.startswith("adaspark.scheduler"):
            raise


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


def make_arm_rule(arm: DictConfig, exact: bool) -> WidthRule:
    _register_scheduler()
    rule_cfg = arm.get("rule")
    kwargs = {} if rule_cfg is None else OmegaConf.to_container(rule_cfg, resolve=True)
    if not isinstance(kwargs, dict):
        raise ValueError(f"arm {arm.name}: `rule` must be a mapping of keyword arguments")
    if arm.get("engine", "ours") != "ours":
        raise ValueError(f"arm {arm.name} runs on {arm.engine}, not on our engine")
    return make_rule(str(arm.width_rule), **kwargs)


def build(cfg: DictConfig, arm: DictConfig, *, exact: bool) -> Parts:
    rule = make_arm_rule(arm, exact)
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
