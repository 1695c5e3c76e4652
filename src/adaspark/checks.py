"""One way to check a config value (HARNESS "One config truth"): a field's metadata
(:func:`spec`) gives its range or its choices, :func:`check_value` checks one value against its
type and metadata and :func:`check_group` a mapping against a frozen dataclass. Any value of the
wrong type or out of range is a :class:`~adaspark.config.ConfigError` that names the key, the
value and what is allowed. Bools must be YAML booleans (``exact=maybe`` is refused), integers real
integers (``max_tokens=1.5`` and ``max_tokens=true`` are refused).

Every config group of the package is checked here: :mod:`adaspark.schema`'s groups, the run
group, the scheduler's constants (:mod:`adaspark.rules.adaspark.config`), replay's settings.
"""

from __future__ import annotations

import itertools
import math
import types
import typing
from dataclasses import MISSING, field, fields
from typing import Any, Literal

from omegaconf import DictConfig, ListConfig, OmegaConf

from adaspark.config import ConfigError


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


