"""The scheduler's constants (Appendix B, Table 14) as typed, frozen dataclasses.

Every value lives in ``conf/scheduler/<name>.yaml``; the dataclasses have no defaults, so a key
missing from the file is an error rather than a silent literal. Each field's metadata
(:func:`adaspark.checks.spec`) is its range or its choices, from its meaning in the paper; they
are checked by :func:`adaspark.checks.check_value`, where every config value is checked.
``load_config`` reads the file and applies an optional mapping of overrides (Hydra-style nested
keys).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from adaspark import paths
from adaspark.checks import check_group, spec
from adaspark.config import ConfigError
from adaspark.decoding.tree import MAX_WIDTH

#: The longest context the n-gram index keys (``ngram.KEY``): ``follower_context`` and
#: ``copy_min_match`` at most.
NGRAM_KEY = 6


@dataclass(frozen=True)
class CostModelConfig:
    """§3.2: the learned width table, the context law (Eq. 4) and the price (Eq. 5)."""

    quantile_tau: float = spec(gt=0.0, lt=1.0)
    context_basis_unit: int = spec(min=1)
    l1: float = spec(min=0.0)
    l2: float = spec(min=0.0)
    ftrl_rate: float = spec(gt=0.0)
    ftrl_stabiliser: float = spec(gt=0.0)
    squared_gradient_cap: float = spec(gt=0.0)
    sample_bank_per_band: int = spec(min=1)
    refit_holdout_fraction: float = spec(min=0.0, lt=1.0)
    refit_holdout_min_band: int = spec(min=1)
    law_clamp: tuple[float, float] = spec(gt=0.0, increasing="weak")
    level_window: int = spec(min=1)
    level_clamp: tuple[float, float] = spec(gt=0.0, increasing="weak")
    level_against: str = spec(choices=("at_sample", "current_law"))
    measurements_before_priced: int = spec(min=1)
    samples_before_law: int = spec(min=1)
    starting_ladder: tuple[int, ...] = spec(min=2, max=MAX_WIDTH, increasing="strict", min_len=1)
    split_hold_rounds: int = spec(min=0)
    steep_interval: float = spec(gt=0.0)
    most_widths_learned: int = spec(min=1, max=MAX_WIDTH - 1)
    declared_class_step: int = spec(min=1, max=MAX_WIDTH - 1)
    refit_epochs: int = spec(min=0)
    refit_min_span: float = spec(min=1.0)
    law_seed_intercept: bool
    clock: str = spec(choices=("residual", "raw"))
    cold_start: str = spec(choices=("ladder", "bounded"))


@dataclass(frozen=True)
class WidthChoiceConfig:
    """§3.4: Eq. (7), the long-run rate, the gains and the hysteresis."""

    rate_half_life_rounds: float = spec(gt=0.0)
    rate_warm_rounds: int = spec(min=0)
    gain_clamp: tuple[float, float] = spec(gt=0.0, increasing="weak")
    gain_shrinkage: float = spec(min=0.0)
    gain_reference_width: int = spec(min=2, max=MAX_WIDTH)
    gain_reference: str = spec(choices=("fixed", "narrowest_offered"))
    ratio_margin: float = spec(min=0.0)
    hysteresis_margin: float = spec(min=0.0)
    gain_ridge_floor: float = spec(gt=0.0)
    gain_pivot_u: float = spec(min=0.0)
    gain_memory_rounds: float = spec(min=1.0)
    gain_min_predicted: float = spec(min=0.0)
    agreed_counts_as: str = spec(choices=("ngram", "drafter"))
    width1_forecast: str = spec(choices=("realised",))


@dataclass(frozen=True)
class AcceptanceConfig:
    """§3.3: Eq. (6), its learning, the head-based estimate and the guard."""

    drafter_ftrl_rate: float = spec(gt=0.0)
    drafter_ftrl_stabiliser: float = spec(gt=0.0)
    drafter_l2: float = spec(min=0.0)
    ngram_bucket_ftrl_rate: float = spec(gt=0.0)
    prior_gate: float = spec(min=0.0)
    squared_gradient_cap: float = spec(gt=0.0)
    intercept_adagrad_rate: float = spec(min=0.0)
    intercept_band: float = spec(min=0.0)
    intercept_squared_gradient_cap: float = spec(gt=0.0)
    guard_half_life: float = spec(gt=0.0)
    head_offset_adagrad_rate: float = spec(min=0.0)
    head_offset_band: float = spec(min=0.0)
    adagrad_stabiliser: float = spec(gt=0.0)
    prior_pick_intercept: float = spec()
    gate_counts: str = spec(choices=("squared_gradients", "updates"))
    logit_eps: float = spec(gt=0.0, lt=0.5)
    log_r_floor: float = spec(max=0.0)
    psi: str = spec(choices=("depth_and_context",))
    copy_long_match: int = spec(min=1)
    follower_count_edge: int = spec(min=1)
    run_edges: tuple[int, int] = spec(min=1, increasing="strict")
    offset_labels: str = spec(choices=("all_candidates", "placed"))


@dataclass(frozen=True)
class NgramConfig:
    """§3.3: the n-gram index over the request's own text and its chains."""

    follower_context: int = spec(min=1, max=NGRAM_KEY)
    chain_depth_limit: int = spec(min=1)
    exploration_period: int = spec(min=1)
    exploration_counts: str = spec(choices=("ngram_rounds", "all_tree_rounds"))
    copy_min_match: int = spec(min=1, max=NGRAM_KEY)
    copy_max_match: int = spec(min=1)
    followers_kept: int = spec(min=1)
    occurrences_kept: int = spec(min=1)
    precision_prior: tuple[float, float] = spec(gt=0.0, increasing="weak")
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
    """One section, every key present and checked (:func:`adaspark.checks.check_group`)."""
    got = check_group(cls, raw, f"scheduler.{where}", extra="refuse")
    return replace(got, **{f.name: tuple(v) for f in fields(cls)
                           if isinstance(v := getattr(got, f.name), list)})


def from_mapping(raw: dict[str, Any]) -> SchedulerConfig:
    """A :class:`SchedulerConfig` from a plain nested mapping (every key required)."""
    unknown = sorted(raw.keys() - _SECTIONS.keys())
    if unknown:
        raise ConfigError(f"scheduler config: unknown sections {unknown}; it has "
                          f"{', '.join(_SECTIONS)}")
    return validate(SchedulerConfig(**{k: _section(cls, dict(raw.get(k, {})), k)
                                       for k, cls in _SECTIONS.items()}))


#: The values a named choice may take (the first is the default in conf/scheduler/adaspark.yaml),
#: read from the fields' metadata.
CHOICES: dict[tuple[str, str], tuple[str, ...]] = {
    (section, f.name): tuple(f.metadata["choices"])
    for section, cls in _SECTIONS.items() for f in fields(cls) if "choices" in f.metadata}


def validate(cfg: SchedulerConfig) -> SchedulerConfig:
    """What one key's range cannot say: a match measured back at least as far as it must
    reach (``copy_max_match >= copy_min_match``)."""
    ng = cfg.ngram_fill
    if ng.copy_max_match < ng.copy_min_match:
        raise ConfigError(f"scheduler.ngram_fill.copy_max_match={ng.copy_max_match} is below "
                          f"copy_min_match={ng.copy_min_match}: a match is measured back at "
                          "least as far as it must reach; raise copy_max_match")
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
