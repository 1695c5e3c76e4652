"""Typed schemas of the config groups the code reads, checked once where a command composes its
config (HARNESS "One config truth": the same schema standalone and in the pipeline).

Each group is a plain frozen dataclass whose fields are the keys the code reads; a field's
metadata (:func:`~adaspark.checks.spec`) gives its range or its choices, and
:func:`~adaspark.checks.check_group` checks a composed mapping against a group and returns the
dataclass; any value of the wrong type or out of range is a :class:`~adaspark.config.ConfigError`
that names the key, the value and what is allowed.

Groups: the top-level keys of ``adaspark generate`` (:class:`GenerateOptions`), ``target``
(:class:`TargetConfig`), ``drafter`` (:class:`DrafterConfig`), an arm (:class:`ArmConfig`, with the
keys of its width rule in the rule class's ``Options`` and a llama-server arm's ``server:`` in
:class:`LlamaServerOptions`), the ``run`` group (``adaspark.runs.settings.RunSettings``, whose
fields carry the same metadata), the scheduler's constants (``adaspark.rules.adaspark.config``,
Appendix B) and the statistics of the tables and figures (:class:`TablesOptions`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Literal

from omegaconf import OmegaConf

from adaspark.checks import check_group, plain, spec
from adaspark.config import ConfigError

#: The smallest context a model may be given: llama.cpp caps its batch (and the rows that may
#: carry logits) at the context asked for, and the widest verify is 64 rows plus the prompt.
MIN_N_CTX = 128

# ---------------------------------------------------------------------------------------------
# The groups


@dataclass(frozen=True)
class GenerateOptions:
    """The top-level keys of ``conf/config.yaml`` that ``adaspark generate`` reads."""

    prompt: str
    system: str | None
    chat: bool
    max_tokens: int = spec(min=1)
    json: bool = False
    check_greedy: bool = False
    trace: bool = False
    exact: bool | None = None
    threads: int | None = spec(min=1, default=None)


@dataclass(frozen=True)
class EngineOptions:
    """The top-level keys every command that loads a model reads."""

    exact: bool | None = None
    threads: int | None = spec(min=1, default=None)


@dataclass(frozen=True)
class TargetConfig:
    """``conf/target/<name>.yaml``: a manifest model or a user's own GGUF (``path``)."""

    name: str
    n_ctx: int = spec(min=MIN_N_CTX)
    model: str | None = None
    path: str | None = None
    #: layers offloaded to the GPU (null: all on a GPU build, none on a CPU build; -1: all);
    #: :func:`adaspark.decoding.backend.gpu_layers`
    n_gpu_layers: int | None = spec(min=-1, default=None)


@dataclass(frozen=True)
class DrafterConfig:
    """``conf/drafter/<name>.yaml``: the block's shape (B positions, K candidates, §2.2)."""

    name: str
    kind: str
    candidates_per_position: int = spec(min=1)
    n_ctx: int = spec(min=MIN_N_CTX)
    # null: the drafter's own block (a DSpark file's dflash.block_size); a draft model needs it
    block_positions: int | None = spec(min=1, default=None)
    model: str | None = None
    path: str | None = None
    n_gpu_layers: int | None = spec(min=-1, default=None)  # as TargetConfig.n_gpu_layers


@dataclass(frozen=True)
class ArmConfig:
    """An arm, ``conf/arm/<name>.yaml``, as the code reads it (:func:`check_arm` makes one):
    the keys every arm has, its width rule's keywords (``rule``: the rule class's checked
    ``Options``, from the file's other keys or the ones nested under ``rule:``) and a
    llama-server arm's ``server:`` options (:class:`LlamaServerOptions`)."""

    name: str
    engine: Literal["ours", "llama-server"] = "ours"
    width_rule: str | None = None
    description: str | None = None
    # the arm's own drafter, a file of conf/drafter/ composed under `drafters.<name>`
    # (null: the composed `drafter` group): :func:`arm_view`
    drafter: str | None = None
    rule: Any = None
    server: LlamaServerOptions | None = None

    @property
    def speculative(self) -> bool:
        """Whether the arm drafts (llama-server: a ``spec_type``; ours: its rule's class says)."""
        if self.engine == "llama-server":
            return self.server is not None and self.server.spec_type not in (None, "none")
        from adaspark.rules.base import rule_class

        return rule_class(str(self.width_rule)).uses_drafter

    @property
    def needs_scheduler(self) -> bool:
        """Whether the arm's rule takes the composed ``scheduler`` group (Table 14)."""
        if self.engine != "ours":
            return False
        from adaspark.rules.base import rule_class

        return rule_class(str(self.width_rule)).needs_scheduler

    def as_mapping(self) -> dict[str, Any]:
        """The arm as a config mapping again (flat rule keywords), for a config snapshot."""
        out: dict[str, Any] = {"name": self.name, "engine": self.engine,
                               "width_rule": self.width_rule, "description": self.description}
        if self.drafter is not None:
            out["drafter"] = self.drafter
        if self.engine == "llama-server":
            return out | {"server": asdict(self.server or LlamaServerOptions())}
        return out | ({f.name: getattr(self.rule, f.name) for f in fields(self.rule)}
                      if self.rule is not None else {})


@dataclass(frozen=True)
class LlamaServerOptions:
    """A llama-server arm's ``server:`` mapping (its speculative flags). The draft count and
    probability cut have no default here: a speculative arm's file names them (llama.cpp's own
    defaults are written once, in ``conf/arm/llamacpp-chain.yaml`` and
    ``conf/arm/llamacpp-dspark.yaml``), so another build's defaults cannot change a run."""

    spec_type: str | None = None
    spec_draft_n_max: int | None = spec(min=1, default=None)
    spec_draft_p_min: float | None = spec(min=0.0, max=1.0, default=None)
    extra_args: list[str] = field(default_factory=list)


#: The bootstrap intervals offered (``scipy.stats.bootstrap``'s ``method``): the paper's
#: percentile interval (§4.1) and the bias-corrected and accelerated one.
BOOTSTRAP_METHODS: tuple[str, ...] = ("percentile", "BCa")


@dataclass(frozen=True)
class TablesOptions:
    """``tables`` (§4.1): the statistics every table and figure shares. Each key is optional
    here; its default is :mod:`adaspark.analysis.bootstrap`'s (read by
    ``adaspark.stages.tables.options_from_params``)."""

    seed: int = spec(min=0)
    n_resamples: int = spec(min=1)
    bootstrap_method: str = spec(choices=BOOTSTRAP_METHODS)
    context_split_tokens: int = spec(min=1)

    @classmethod
    def check(cls, raw: Any) -> dict[str, Any]:
        """The ``tables`` group checked (its one check, for the config and the tables stage):
        the keys it holds, each optional."""
        return check_group(cls, raw, "tables", extra="refuse", partial=True)  # type: ignore[no-any-return]


def target_config(cfg: Any) -> TargetConfig:
    """The composed config's ``target`` group, typed."""
    return check_group(TargetConfig, cfg.get("target"), "target")  # type: ignore[no-any-return]


def drafter_config(cfg: Any) -> DrafterConfig:
    """The composed config's ``drafter`` group, typed (its ``kind`` a registered drafter)."""
    drafter: DrafterConfig = check_group(DrafterConfig, cfg.get("drafter"), "drafter")
    check_drafter_kind(drafter.kind)
    return drafter


def arm_view(cfg: Any, arm: ArmConfig) -> Any:
    """The composed config as ``arm`` runs it: when the arm file names its own drafter
    (``drafter: <name>``), its ``drafter`` group is ``drafters.<name>`` (conf/config.yaml composes
    each file of conf/drafter/ there: ``drafters.dspark.path=FILE`` sets that one's file);
    otherwise ``cfg`` itself. So arms with a draft model and arms with a DSpark file run side by
    side under one config. Every reader of an arm's drafter (its parts, its server, its run's
    fingerprint) reads it through this view; applying it twice gives the same view."""
    if arm.drafter is None:
        return cfg
    drafters = cfg.get("drafters") or {}
    if arm.drafter not in drafters:
        raise ConfigError(
            f"arm {arm.name} names drafter {arm.drafter!r}, which is not under `drafters:` "
            f"(it has {sorted(drafters)}): fix the arm's `drafter:`, or compose the file with "
            f"`- drafter@drafters.{arm.drafter}: {arm.drafter}` in conf/config.yaml's defaults")
    view = OmegaConf.create(plain(cfg))
    view.drafter = drafters[arm.drafter]
    return view


def drafter_key(arm: ArmConfig) -> str:
    """Where the drafter ``arm`` runs with is set: ``drafter`` or ``drafters.<name>``."""
    return "drafter" if arm.drafter is None else f"drafters.{arm.drafter}"


def scheduler_mapping(cfg: Any) -> dict[str, Any] | None:
    """The composed ``scheduler`` group as a plain mapping, or None. A rule that takes it builds
    its :class:`SchedulerConfig` from it, which checks it (as :func:`check_scheduler` does when a
    command or stage validates its config)."""
    raw = plain(cfg.get("scheduler"))
    return None if raw is None else dict(raw)


def check_drafter_kind(kind: str) -> None:
    """``drafter.kind`` names a drafter of :data:`adaspark.decoding.drafter.base.DRAFTERS`."""
    from adaspark.decoding.drafter.base import DRAFTERS
    from adaspark.registry import UnknownNameError

    if kind not in DRAFTERS:
        raise UnknownNameError("drafter kind", kind, DRAFTERS.names(),
                               "drafter.kind; adaspark.decoding.drafter.base.DRAFTERS")


def check_arm(raw: Any, where: str) -> ArmConfig:
    """An arm's common keys, its width rule's keywords (checked against the rule class's
    ``Options``; the class from :data:`adaspark.rules.base.WIDTH_RULES` or a ``module:Class``
    path) and a llama-server arm's ``server:``."""
    raw = plain(raw)
    common_keys = ("name", "engine", "width_rule", "description", "drafter")
    arm = check_group(ArmConfig, {k: v for k, v in raw.items() if k in common_keys}, where)
    if arm.engine == "llama-server":
        server = check_group(LlamaServerOptions, raw.get("server") or {}, f"{where}.server",
                             extra="refuse")
        if server.spec_type not in (None, "none"):
            unnamed = [k for k in ("spec_draft_n_max", "spec_draft_p_min")
                       if getattr(server, k) is None]
            if unnamed:
                raise ConfigError(
                    f"{where}.server.{unnamed[0]} is not set: a speculative llama-server arm "
                    "names its draft count and probability cut (llama.cpp's defaults are 3 and "
                    "0.0; conf/arm/llamacpp-chain.yaml names them), so that another build's "
                    "defaults cannot change the run")
        return replace(arm, server=server)
    from adaspark.registry import UnknownNameError
    from adaspark.rules.base import WIDTH_RULES, rule_class

    if arm.width_rule is None:
        raise ConfigError(f"{where}.width_rule is null: an arm on our engine names a width rule "
                          f"(one of {', '.join(WIDTH_RULES.names())}, or a module:Class path)")
    if arm.width_rule not in WIDTH_RULES:
        raise UnknownNameError("width rule", arm.width_rule, WIDTH_RULES.names(),
                               f"{where}.width_rule; adaspark.rules.base.WIDTH_RULES, or a "
                               "module:Class path")
    cls = rule_class(arm.width_rule).Options
    keys = {str(k): v for k, v in raw.items() if k not in (*common_keys, "rule", "server")}
    if isinstance(raw.get("rule"), dict):
        keys |= {str(k): v for k, v in raw["rule"].items()}
    common = ", ".join(common_keys)
    rule_keys = ", ".join(f.name for f in fields(cls)) or "no other key"
    opts = check_group(cls, keys, where, extra="refuse",
                       takes=f"{common} and, for width rule {arm.width_rule!r}, {rule_keys}")
    check = getattr(opts, "check", None)
    if check is not None:
        check(where)
    return replace(arm, rule=opts)


def check_scheduler(raw: Any) -> None:
    """The scheduler's constants (Appendix B, Table 14), typed by
    ``adaspark.rules.adaspark.config``."""
    from adaspark.rules.adaspark.config import from_mapping

    from_mapping(plain(raw))
