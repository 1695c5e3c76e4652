"""The one registry pattern: config names to ``"module:object"`` paths, imported on first use.

Every name a config may give (``arm.width_rule``, ``drafter.kind``) is looked up in a
:class:`Registry` written out in one place, the module that defines the interface. Nothing is
registered by importing a module, so what a name means never depends on which modules happen to
have been imported; a name that is not in the table raises :class:`UnknownNameError`, which lists
the known ones. A new rule or drafter is one line in its table, or, without editing the package,
its own ``"module:Class"`` path given as the name (``width_rule:
examples.adaptive_chain:AdaptiveChain``): the module is imported from ``PYTHONPATH`` or the
checkout (beside ``conf/``). Every object a registry hands out is checked against the table's
base class.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from adaspark import paths
from adaspark.config import ConfigError

T = TypeVar("T")


class UnknownNameError(ConfigError):
    """A config names a rule, drafter or other registered object that does not exist."""

    def __init__(self, what: str, name: object, known: list[str], where: str) -> None:
        self.what, self.name, self.known = what, name, known
        super().__init__(f"unknown {what} {name!r}; known: {', '.join(known)} "
                         f"(the names of {where})")


@dataclass(frozen=True)
class Registry(Generic[T]):
    """``what`` (for messages), ``entries`` (name -> ``"package.module:Object"``) and ``where``
    (the table's place, named in the error for an unknown name)."""

    what: str
    entries: Mapping[str, str]
    where: str
    #: The class every registered object must be (or subclass); None: any object.
    base: type | None = None

    def names(self) -> list[str]:
        return sorted(self.entries)

    def __contains__(self, name: object) -> bool:
        return name in self.entries or is_object_path(name)

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def get(self, name: object) -> T:
        """The object registered as ``name`` (or at the ``"module:Class"`` path ``name``),
        imported now and checked against :attr:`base`."""
        if isinstance(name, str) and name in self.entries:
            path = self.entries[name]
        elif is_object_path(name):
            path = str(name)
        else:
            raise UnknownNameError(self.what, name, self.names(), self.where)
        obj = load_object(path, self.what)
        if self.base is not None and not (isinstance(obj, type) and issubclass(obj, self.base)):
            raise ConfigError(f"{self.what} {name!r} is {obj!r}, not a subclass of "
                              f"{self.base.__module__}.{self.base.__qualname__}")
        return obj  # type: ignore[no-any-return]


def is_object_path(name: object) -> bool:
    """Whether ``name`` is a ``"module:Object"`` path rather than a table's name."""
    if not isinstance(name, str):
        return False
    module, colon, attr = name.partition(":")
    return bool(colon) and all(p.isidentifier() for p in module.split(".")) and attr.isidentifier()


def load_object(path: str, what: str) -> Any:
    """The object at ``"module:Object"``; the module is looked for on ``sys.path`` and then in
    the checkout whose ``conf/`` the config comes from. A path that names nothing is a
    :class:`ConfigError` that says so."""
    module, _, attr = path.partition(":")
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name is None or not module.startswith(e.name):
            raise  # the module exists; something it imports does not
        root = str(paths.checkout_root())
        if root in sys.path:
            raise ConfigError(f"{what} {path!r}: no module {module!r} on PYTHONPATH or in the "
                              f"checkout {root}") from None
        sys.path.append(root)  # an arm file's own module, beside the config (conf/)
        return load_object(path, what)
    obj = getattr(mod, attr, None)
    if obj is None:
        raise ConfigError(f"{what} {path!r}: module {module!r} has no {attr!r}")
    return obj
