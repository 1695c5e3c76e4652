"""Typed schemas of the config groups the code reads, checked once where a command composes its
config (HARNESS "One config truth": the same schema standalone and in the pipeline).

Each group is a plain frozen dataclass whose fields are the keys the code reads; a field's
metadata (:func:`spec`) gives its range or its choices. :func:`check_group` checks a composed
mapping against a group and returns the dataclass; any value of the wrong type or out of range is
a :class:`~adaspark.config.ConfigError` that names the key, the value and what is allowed. Bools
must be YAML booleans (``exact=maybe`` is refused), integers real integers (``max_tokens=1.5``
and ``max_tokens=true`` are refused).

Groups: the top-level keys of ``adaspark generate`` (:class:`GenerateOptions`), ``target``
(:class:`TargetConfig`), ``drafter`` (:class:`DrafterConfig`), an arm (:class:`ArmConfig`, with the
keys of its width rule in :data:`RULE_OPTIONS` and a llama-server arm's ``server:`` in
:class:`LlamaServerOptions`), the ``run`` group (``adaspark.runs.settings.RunSettings``, whose
fields carry the same metadata), the scheduler's constants (``adaspark.rules.adaspark.config``,
Appendix B) and the statistics of the tables and figures (:class:`TablesOptions`).
"""

from __future__ import annotations

import itertools
import math
import types
import typing
from dataclasses import MISSING, dataclass, field, fields, replace
from typing import Any, Literal

from omegaconf import DictConfig, ListConfig, OmegaConf

from adaspark.config import ConfigError

#: The smallest context a model may be given: llama.cpp caps its batch (and the rows that may
#: carry logits) at the context asked for, and the widest verify is 64 rows plus the prompt.
MIN_N_CTX = 128
#: The widest verify (HARNESS "Widths"; ``adaspark.decoding.tree.MAX_ROWS_FAST``): no width a
#: config names may exceed it.
MAX_WIDTH = 64


def spec(*, min: float | None = None, max: float | None = None, gt: float | None = None,
         lt: float | None = None, choices: tuple[Any, ...] | None = None,
         increasing: Literal["strict", "weak"] | None = None, min_len: int | None = None,
         default: Any = MISSING, default_factory: Any = MISSING,
         help: str | None = None) -> Any:
    """A dataclass field with its allowed range (``min``/``max`` inclusive, ``gt``/``lt``
    exclusive; for a list, of every element) or ``choices``, for a list ``increasing``
    (``strict``: each element above the one before; ``weak``: not below it) and ``min_len``,
    and optionally a ``help`` line (for a command-line option built from the field); a list's
    empty default is ``default_factory=list``."""
    meta = {k: v for k, v in (("min", min), ("max", max), ("gt", gt), ("lt", lt),
                              ("choices", choices), ("increasing", increasing),
                              ("min_len", min_len), ("help", help))
            if v is not None}
    if default_factory is not MISSING:
        return field(default_factory=default_factory, metadata=meta)
    if default is MISSING:
        return field(metadata=meta)
    return field(default=default, metadata=meta)


# ---------------------------------------------------------------------------------------------
# Checking one value against a type hint


def _type_words(tp: Any) -> str:
    if tp is type(None):
        return "null"
    if tp is bool:
        return "true or false"
    if tp is int:
        return "an integer"
    if tp is float:
        return "a number"
    if tp is str:
        return "a string"
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_words(a) for a in args)
    if origin in (list, tuple):
        inner = args[0] if args else Any
        plural = {str: "strings", int: "integers", float: "numbers", bool: "true/false values"}
        return f"a list of {plural[inner]}" if inner in plural else "a list"
    if origin is dict or tp is dict:
        return "a mapping"
    return str(tp)


def _range_words(meta: dict[str, Any]) -> str:
    lo, hi = meta.get("min"), meta.get("max")
    gt, lt = meta.get("gt"), meta.get("lt")
    if lo is not None and hi is not None:
        return f" from {lo} to {hi}"
    low = f" >= {lo}" if lo is not None else f" > {gt}" if gt is not None else ""
    high = f" <= {hi}" if hi is not None else f" < {lt}" if lt is not None else ""
    return f"{low} and{high}" if low and high else low + high


def _list_words(meta: dict[str, Any]) -> str:
    """What ``meta`` asks of a list beyond its elements' type and range."""
    words = []
    if meta.get("min_len"):
        words.append(f"at least {meta['min_len']} long")
    if meta.get("increasing") == "strict":
        words.append("strictly increasing")
    elif meta.get("increasing") == "weak":
        words.append("in increasing order (low, high)")
    return (", " + ", ".join(words)) if words else ""


def _allowed_words(tp: Any, meta: dict[str, Any]) -> str:
    """What ``tp`` with the range or choices of ``meta`` allows, in words (``an integer >= 1 or
    null``: the range goes with the number it bounds, the choices with the string)."""
    union = typing.get_origin(tp) in (typing.Union, types.UnionType)
    members = list(typing.get_args(tp)) if union else [tp]
    members.sort(key=lambda a: a is type(None))
    words = []
    for a in members:
        if a is str and meta.get("choices") is not None:
            words.append("one of " + ", ".join(repr(c) for c in meta["choices"]))
        elif a in (int, float):
            words.append(_type_words(a) + (" (finite)" if a is float else "")
                         + _range_words(meta))
        elif typing.get_origin(a) in (list, tuple):
            rng = _range_words(meta)
            floats = float in typing.get_args(a)
            words.append(_type_words(a) + (" (finite)" if floats else "")
                         + (f", each{rng}" if rng else "") + _list_words(meta))
        else:
            words.append(_type_words(a))
    return " or ".join(words)


def _matches(value: Any, tp: Any) -> tuple[bool, Any]:
    """Whether ``value`` is of type ``tp``; the value as the code should use it."""
    if tp is Any:
        return True, value
    if tp is type(None):
        return value is None, value
    if tp is bool:
        return isinstance(value, bool), value
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool), value
    if tp is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        return ok, float(value) if ok else value
    if tp is str:
        return isinstance(value, str), value
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is Literal:
        return any(value == a and type(value) is type(a) for a in args), value
    if origin in (typing.Union, types.UnionType):
        for a in args:
            ok, v = _matches(value, a)
            if ok:
                return True, v
        return False, value
    if origin in (list, tuple):
        if not isinstance(value, list | tuple):
            return False, value
        if origin is tuple and args and args[-1] is not Ellipsis:
            if len(value) != len(args):
                return False, value
            inner = list(args)
        else:
            inner = [args[0] if args else Any] * len(value)
        out = []
        for x, a in zip(value, inner, strict=True):
            ok, v = _matches(x, a)
            if not ok:
                return False, value
            out.append(v)
        return True, tuple(out) if origin is tuple else out
    if origin is dict or tp is dict:
        return isinstance(value, dict), value
    raise TypeError(f"schema type {tp!r} is not supported")


def _in_range(v: Any, meta: dict[str, Any]) -> bool:
    """Whether the number ``v`` is finite and within ``meta``'s bounds (a non-number: True)."""
    if isinstance(v, bool) or not isinstance(v, int | float):
        return True
    if isinstance(v, float) and not math.isfinite(v):
        return False
    lo, hi, gt, lt = (meta.get(k) for k in ("min", "max", "gt", "lt"))
    return not ((lo is not None and v < lo) or (hi is not None and v > hi)
                or (gt is not None and v <= gt) or (lt is not None and v >= lt))


def _list_ok(v: list[Any] | tuple[Any, ...], meta: dict[str, Any]) -> bool:
    """Whether the list ``v`` is long enough, in order and every element within range."""
    if len(v) < meta.get("min_len", 0) or not all(_in_range(x, meta) for x in v):
        return False
    order = meta.get("increasing")
    pairs = list(itertools.pairwise(v))
    if order == "strict":
        return all(a < b for a, b in pairs)
    if order == "weak":
        return all(a <= b for a, b in pairs)
    return True


def check_value(key: str, value: Any, tp: Any, meta: dict[str, Any] | None = None) -> Any:
    """``value`` checked against the type hint ``tp`` and the range or choices in ``meta``
    (numbers must be finite; a list's range applies to each element);
    a :class:`ConfigError` naming ``key``, the value and what is allowed otherwise."""
    meta = meta or {}
    ok, v = _matches(value, tp)
    choices = meta.get("choices")
    allowed = _allowed_words(tp, meta)
    if ok and choices is not None and isinstance(v, str) and v not in choices:
        ok = False
    if ok and not _in_range(v, meta):
        ok = False
    if ok and isinstance(v, list | tuple) and not _list_ok(v, meta):
        ok = False
    if not ok:
        raise ConfigError(f"{key}={_show(value)} is not allowed: {key} must be {allowed}")
    return v


def _show(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, list | tuple):
        return "[" + ",".join(_show(x) for x in value) + "]"
    return str(value)


def plain(section: Any) -> Any:
    """A DictConfig or ListConfig as plain Python containers (interpolations resolved)."""
    from omegaconf.errors import OmegaConfBaseException

    if isinstance(section, DictConfig | ListConfig):
        try:
            return OmegaConf.to_container(section, resolve=True)
        except OmegaConfBaseException as e:
            raise ConfigError(f"the config cannot be resolved: {e}") from None
    return section


def check_group(cls: type, raw: Any, where: str, *, extra: str = "allow",
                takes: str | None = None, partial: bool = False) -> Any:
    """The mapping ``raw`` as an instance of the dataclass ``cls``, every field checked.

    ``where`` prefixes the key in messages (``target`` gives ``target.n_ctx``). ``extra``:
    what to do with keys ``cls`` does not name: ``allow`` (kept out of the instance) or
    ``refuse`` (``takes`` then says which keys are allowed). A field without a default must
    be present, unless ``partial`` (then only the keys present are checked and a mapping of
    them is returned: a stage's params file may hold only what that stage reads)."""
    raw = plain(raw)
    prefix = f"{where}." if where else ""
    if not isinstance(raw, dict):
        raise ConfigError(f"{where or 'the config'} must be a mapping of keys, not "
                          f"{_show(raw)}")
    hints = typing.get_type_hints(cls)
    known = {f.name for f in fields(cls)}
    unknown = sorted(str(k) for k in raw if k not in known)
    if unknown and extra == "refuse":
        raise ConfigError(f"unknown key(s) {', '.join(prefix + k for k in unknown)}; "
                          f"{where or 'this group'} takes {takes or ', '.join(sorted(known))}")
    out: dict[str, Any] = {}
    for f in fields(cls):
        if f.name not in raw:
            if not partial and f.default is MISSING and f.default_factory is MISSING:
                raise ConfigError(f"{prefix}{f.name} is missing; it must be "
                                  f"{_allowed_words(hints[f.name], dict(f.metadata))}")
            continue
        out[f.name] = check_value(prefix + f.name, raw[f.name], hints[f.name], dict(f.metadata))
    return out if partial else cls(**out)


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
    the keys every arm has, its width rule's keywords (``rule``: the file's other keys, or the
    ones nested under ``rule:``) and a llama-server arm's ``server:`` options."""

    name: str
    engine: Literal["ours", "llama-server"] = "ours"
    width_rule: str | None = None
    description: str | None = None
    # the arm's own drafter, a file of conf/drafter/ composed under `drafters.<name>`
    # (null: the composed `drafter` group): :func:`arm_view`
    drafter: str | None = None
    rule: dict[str, Any] = field(default_factory=dict)
    server: dict[str, Any] = field(default_factory=dict)

    @property
    def speculative(self) -> bool:
        """Whether the arm drafts (llama-server: a ``spec_type``; ours: its rule's class says)."""
        if self.engine == "llama-server":
            return self.server.get("spec_type") not in (None, "none")
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
            return out | {"server": dict(self.server)}
        return out | dict(self.rule)


@dataclass(frozen=True)
class ChainOptions:
    """``width_rule: chain``: the first ``positions`` picks as a chain (null = all B)."""

    positions: int | None = spec(min=1, default=None)


@dataclass(frozen=True)
class PinnedOptions:
    """``width_rule: pinned``: a fixed row count."""

    width: int = spec(min=1, max=MAX_WIDTH)


@dataclass(frozen=True)
class AdaSparkOptions:
    """``width_rule: adaspark`` (§3): learned, kernel-class or pinned widths (a pinned width needs
    the anchor and at least one candidate)."""

    width: int | str = spec(min=2, max=MAX_WIDTH, choices=("learned", "classes"),
                            default="learned")
    acceptance: Literal["fitted", "head"] = "fitted"
    ngram: bool = True
    offer_width1: bool = False
    rate_rule: Literal["long_run", "ratio"] = "long_run"
    head_offset: bool = True
    scheduler: str | dict[str, Any] = "adaspark"
    constants: dict[str, Any] | None = None
    store: str | None = None
    log_dir: str | None = None


@dataclass(frozen=True)
class LlamaServerOptions:
    """A llama-server arm's ``server:`` mapping (its speculative flags)."""

    spec_type: str | None = None
    spec_draft_n_max: int = spec(min=1, default=3)
    spec_draft_p_min: float = spec(min=0.0, max=1.0, default=0.0)
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


@dataclass(frozen=True)
class NoOptions:
    """``width_rule: ar``: plain decode takes no keywords."""


#: The keywords of each width rule of :data:`adaspark.rules.base.WIDTH_RULES` (a test checks that
#: the two tables name the same rules).
RULE_OPTIONS: dict[str, type] = {
    "ar": NoOptions,
    "chain": ChainOptions,
    "pinned": PinnedOptions,
    "adaspark": AdaSparkOptions,
}


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
    """An arm's common keys, its width rule's keywords and a llama-server arm's ``server:``."""
    raw = plain(raw)
    common_keys = ("name", "engine", "width_rule", "description", "drafter")
    arm = check_group(ArmConfig, {k: v for k, v in raw.items() if k in common_keys}, where)
    if arm.engine == "llama-server":
        server = raw.get("server") or {}
        check_group(LlamaServerOptions, server, f"{where}.server", extra="refuse")
        return replace(arm, server=dict(server))
    from adaspark.registry import UnknownNameError
    from adaspark.rules.base import WIDTH_RULES

    if arm.width_rule is None:
        raise ConfigError(f"{where}.width_rule is null: an arm on our engine names a width rule "
                          f"(one of {', '.join(WIDTH_RULES.names())})")
    if arm.width_rule not in WIDTH_RULES:
        raise UnknownNameError("width rule", arm.width_rule, WIDTH_RULES.names(),
                               f"{where}.width_rule; adaspark.rules.base.WIDTH_RULES")
    cls = RULE_OPTIONS[arm.width_rule]
    keys = {str(k): v for k, v in raw.items() if k not in (*common_keys, "rule", "server")}
    if isinstance(raw.get("rule"), dict):
        keys |= {str(k): v for k, v in raw["rule"].items()}
    common = ", ".join(common_keys)
    rule_keys = ", ".join(f.name for f in fields(cls)) or "no other key"
    opts = check_group(cls, keys, where, extra="refuse",
                       takes=f"{common} and, for width rule {arm.width_rule!r}, {rule_keys}")
    if arm.width_rule == "adaspark" and isinstance(opts.width, int) and opts.offer_width1:
        raise ConfigError(f"{where}.offer_width1=true needs learned or class widths, not the "
                          f"pinned {where}.width={opts.width}")
    return replace(arm, rule=keys)


def check_scheduler(raw: Any) -> None:
    """The scheduler's constants (Appendix B, Table 14), typed by
    ``adaspark.rules.adaspark.config``."""
    from adaspark.rules.adaspark.config import from_mapping

    try:
        from_mapping(plain(raw))
    except ValueError as e:
        if isinstance(e, ConfigError):
            raise
        raise ConfigError(str(e)) from None


def check_run_arms(raw: Any) -> list[str]:
    """``run_arms``: a non-empty list of arm entries (``name`` or ``name@repeat``)."""
    value = plain(raw)
    entries = check_value("run_arms", value, list[str])
    if not entries:
        raise ConfigError("run_arms=[] names no arm: list at least one, e.g. run_arms=[ar,chain3]")
    return entries


# ---------------------------------------------------------------------------------------------
# What each command checks


def validate(cfg: Any, *, command: str) -> None:
    """Check every group ``command`` reads from its composed config (once, before anything
    runs or is written): ``generate``, ``serve``, ``run``, ``replay``, ``config`` or a pipeline
    ``stage``
    (the params file: each group it holds)."""
    raw = plain(cfg)
    if not isinstance(raw, dict):
        raise ConfigError("the config must be a mapping of groups")
    if command == "generate":
        check_group(GenerateOptions, raw, "")
    else:
        check_group(EngineOptions, raw, "")
        if command == "config" and "max_tokens" in raw:
            check_group(GenerateOptions, raw, "")
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
    checked_arms = []
    if "arm" in raw and command in ("generate", "serve", "config", "replay"):
        checked_arms.append(check_arm(raw["arm"], "arm"))
    arms = raw.get("arms") or {}
    if command == "run":
        entries = check_run_arms(raw.get("run_arms"))
        for e in entries:
            key = e if e in arms else e.partition("@")[0]
            if key in arms:  # a missing arm is the runner's clear error
                checked_arms.append(check_arm(arms[key], f"arms.{key}"))
    else:
        if "run_arms" in raw:
            check_value("run_arms", raw["run_arms"], list[str])
        for key, a in arms.items():
            checked_arms.append(check_arm(a, f"arms.{key}"))
    if "drafters" in raw or command in ("generate", "serve", "run"):
        for a in checked_arms:
            arm_view(raw, a)  # an arm's own drafter is composed under drafters
    if "scheduler" in raw and raw["scheduler"] is not None:
        check_scheduler(raw["scheduler"])
        for a in checked_arms:  # an arm's own `constants:` override the composed ones
            constants = a.rule.get("constants") if a.width_rule == "adaspark" else None
            if constants and isinstance(raw["scheduler"], dict):
                check_scheduler(OmegaConf.merge(raw["scheduler"], constants))
    if "run" in raw and command in ("run", "config", "stage"):
        from adaspark.runs.settings import RunSettings

        run = RunSettings.check(raw["run"])
        unknown = [(g, a) for g, members in run.groups.items() for a in members
                   if "arms" in raw and a not in arms]
        if unknown:
            g, a = unknown[0]
            raise ConfigError(f"run.groups.{g} names the arm {a!r}, which is not under `arms:` "
                              f"(it has {sorted(arms)}): fix the name, or compose the arm with "
                              f"`- arm@arms.{a}: {a}` in conf/config.yaml's defaults")
    if "launcher" in raw and command in ("run", "config", "stage"):
        from adaspark.runs.cluster import LauncherSettings

        LauncherSettings.from_config(raw)
    if raw.get("tables") is not None:
        check_group(TablesOptions, raw["tables"], "tables", extra="refuse", partial=True)
