"""The one registry pattern: config names to ``"module:object"`` paths, imported on first use.

Every name a config may give (``arm.width_rule``, ``drafter.kind``) is looked up in a
:class:`Registry` written out in one place, the module that defines the interface. Nothing is
registered by importing a module, so what a name means never depends on which modules happen to
have been imported; a name that is not in the table raises :class:`UnknownNameError`, which lists
the known ones. A new rule or drafter is one line in its table.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

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

    def names(self) -> list[str]:
        return sorted(self.entries)

    def __contains__(self, name: object) -> bool:
        return name in self.entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def get(self, name: object) -> T:
        """The object registered as ``name``, imported now."""
        if not isinstance(name, str) or name not in self.entries:
            raise UnknownNameError(self.what, name, self.names(), self.where)
        module, _, attr = self.entries[name].partition(":")
        obj: Any = getattr(importlib.import_module(module), attr)
        return obj  # type: ignore[no-any-return]
