"""The scheduler's constants (Appendix B, Table 14) as typed, frozen dataclasses.

Every value lives in ``conf/scheduler/<name>.yaml``; the dataclasses have no defaults, so a key
missing from the file is an error rather than a silent literal. ``load_config`` reads the file and
applies an optional mapping of overrides (Hydra-style nested keys).
"""

from __future__ import annotations

import typing
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from adaspark import paths


@dataclass(frozen=True)
class CostModelConfig:
    """§3.2: the learned width table, the context law (Eq. 4) and the price (Eq. 5)."""

    quantile_tau: float
    context_basis_unit: int
    l1: float
    l2: float
    ftrl_rate: float
    ftrl_stabiliser: float
    squared_gradient_cap: float
    sample_bank_per_band: int
    refit_holdout_fraction: float
    refit_holdout_min_band: int
    law_clamp: tuple[float, float]
    level_window: int
    level_clamp: tuple[float, float]
    level_against: str
    measurements_before_priced: int
    samples_before_law: int
    starting_ladder: tuple[int, ...]
    split_hold_rounds: int
    steep_interval: float
    most_widths_learned: int
    declared_class_step: int
    refit_epochs: int
    refit_min_span: float
    law_seed_intercept: bool
    clock: str
    cold_start: str


@dataclass(frozen=True)
class WidthChoiceConfig:
    """§3.4: Eq. (7), the long-run rate, the gains and the hysteresis."""

    rate_half_life_rounds: float
    rate_warm_rounds: int
    gain_clamp: tuple[float, float]
    gain_shrinkage: float
    gain_reference_width: int
    gain_reference: str
    ratio_margin: float
    hysteresis_margin: float
    gain_ridge_floor: float
    gain_pivot_u: float
    gain_memory_rounds: float
    gain_min_predicted: float
    agreed_counts_as: str
    width1_forecast: str


@dataclass(frozen=True)
class AcceptanceConfig:
    """§3.3: Eq. (6), its learning, the head-based estimate and the guard."""

    drafter_ftrl_rate: float
    drafter_ftrl_stabiliser: float
    drafter_l2: float
    ngram_bucket_ftrl_rate: float
    prior_gate: float
    squared_gradient_cap: float
    intercept_adagrad_rate: float
    intercept_band: float
    intercept_squared_gradient_cap: float
    guard_half_life: float
    head_offset_adagrad_rate: float
    head_offset_band: float
    adagrad_stabiliser: float
    prior_pick_intercept: float
    gate_counts: str
    logit_eps: float
    log_r_floor: float
    psi: str
    copy_long_match: int
    follower_count_edge: int
    run_edges: tuple[int, int]
    offset_labels: str


@dataclass(frozen=True)
class NgramConfig:
    """§3.3: the n-gram index over the request's own text and its chains."""

    follower_context: int
    chain_depth_limit: int
    exploration_period: int
    exploration_counts: str
    copy_min_match: int
    copy_max_match: int
    followers_kept: int
    occurrences_kept: int
    precision_prior: tuple[float, float]
    precision_scores_prompt: bool


@dataclass(frozen=True)
class StoreConfig:
    """What the persisted store holds beyond the learned laws (a named choice)."""

    persist_fast_state: bool


@dataclass(frozen=True)
class SchedulerConfig:
    cost_model: CostModelConfig
    width_choice: WidthChoiceConfig
    acceptance_model: AcceptanceConfig
    ngram_fill: NgramConfig
    store: StoreConfig


_SECTIONS: dict[str, type] = {
    "cost_model": CostModelConfig,
    "width_choice": WidthChoiceConfig,
    "acceptance_model": AcceptanceConfig,
    "ngram_fill": NgramConfig,
    "store": StoreConfig,
}


def _section(cls: type, raw: dict[str, Any], where: str) -> Any:
    names = {f.name for f in fields(cls)}
    missing = sorted(names - raw.keys())
    unknown = sorted(raw.keys() - names)
    if missing or unknown:
        raise ValueError(f"scheduler config section {where!r}: missing keys {missing}, "
                         f"unknown keys {unknown}")
    from adaspark.schema import check_value

    hints = typing.get_type_hints(cls)
    out = {}
    for f in fields(cls):
        v = raw[f.name]
        check_value(f"scheduler.{where}.{f.name}", v, hints[f.name])  # types, as in Table 14
        out[f.name] = tuple(v) if isinstance(v, list) else v
    return cls(**out)


def from_mapping(raw: dict[str, Any]) -> SchedulerConfig:
    """A :class:`SchedulerConfig` from a plain nested mapping (every key required)."""
    unknown = sorted(raw.keys() - _SECTIONS.keys())
    if unknown:
        raise ValueError(f"scheduler config: unknown sections {unknown}")
    return validate(SchedulerConfig(**{k: _section(cls, dict(raw.get(k, {})), k)
                                       for k, cls in _SECTIONS.items()}))


#: The values a named choice may take (the first is the default in conf/scheduler/adaspark.yaml).
CHOICES: dict[tuple[str, str], tuple[str, ...]] = {
    ("cost_model", "clock"): ("residual", "raw"),
    ("cost_model", "level_against"): ("at_sample", "current_law"),
    ("cost_model", "cold_start"): ("ladder", "bounded"),
    ("width_choice", "gain_reference"): ("fixed", "narrowest_offered"),
    ("width_choice", "agreed_counts_as"): ("ngram", "drafter"),
    ("width_choice", "width1_forecast"): ("realised",),
    ("acceptance_model", "gate_counts"): ("squared_gradients", "updates"),
    ("acceptance_model", "psi"): ("depth_and_context",),
    ("acceptance_model", "offset_labels"): ("all_candidates", "placed"),
    ("ngram_fill", "exploration_counts"): ("ngram_rounds", "all_tree_rounds"),
}


#: Ranges the code needs: the n-gram index keys contexts of at most 6 tokens (``ngram.KEY``).
RANGES: dict[tuple[str, str], tuple[int, int]] = {
    ("ngram_fill", "follower_context"): (1, 6),
    ("ngram_fill", "copy_min_match"): (1, 6),
}


def validate(cfg: SchedulerConfig) -> SchedulerConfig:
    """Refuse a named choice the code does not implement, or a value outside :data:`RANGES`."""
    for (section, key), allowed in CHOICES.items():
        v = getattr(getattr(cfg, section), key)
        if v not in allowed:
            raise ValueError(f"scheduler config {section}.{key} = {v!r}; one of {allowed}")
    for (section, key), (lo, hi) in RANGES.items():
        v = getattr(getattr(cfg, section), key)
        if not lo <= v <= hi:
            raise ValueError(f"scheduler config {section}.{key} = {v!r}: the n-gram index "
                             f"keys contexts of {lo} to {hi} tokens; set it in that range")
    return cfg


def config_file(name: str) -> Path:
    return paths.conf_dir() / "scheduler" / f"{name}.yaml"


def load_config(source: str | dict[str, Any] | DictConfig = "adaspark",
                overrides: dict[str, Any] | None = None) -> SchedulerConfig:
    """Read ``conf/scheduler/<source>.yaml`` (or take an already composed mapping) and apply
    ``overrides`` (a nested mapping, e.g. ``{"width_choice": {"hysteresis_margin": 0.05}}``)."""
    if isinstance(source, str):
        f = config_file(source)
        if not f.is_file():
            raise FileNotFoundError(f"scheduler config {f} does not exist")
        base = OmegaConf.load(f)
    else:
        base = OmegaConf.create(source)
    if overrides:
        base = OmegaConf.merge(base, OmegaConf.create(overrides))
    raw = OmegaConf.to_container(base, resolve=True)
    assert isinstance(raw, dict)
    return from_mapping(raw)  # type: ignore[arg-type]
