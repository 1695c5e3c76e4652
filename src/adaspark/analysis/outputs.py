"""The paper's outputs as registries (lm-evaluation-harness style): Tables 1-10
(:data:`adaspark.analysis.tables.TABLES`) and Figures 3-10
(:data:`adaspark.analysis.figures.FIGURES`).

Each entry is one module with ``build(records, options)``, ``STAGES`` (the pipeline stages it
reads) and ``FILLED_BY`` (which preset fills it). :func:`build_outputs` is the loop the
``tables`` and ``figures`` stages share: build each entry, write it, and index it, or record the
stage that makes its missing input.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from adaspark.analysis.records import Options, Records
    from adaspark.analysis.run_selection import RunSelection


@dataclass(frozen=True)
class OutputSpec:
    """One table or figure: its kind (``Table`` | ``Figure``), file name, number and module."""

    kind: str
    name: str
    number: int
    module: ModuleType

    @property
    def label(self) -> str:
        return f"{self.kind} {self.number}"

    @property
    def build(self) -> Callable[[Records, Options], Any]:
        return self.module.build  # type: ignore[no-any-return]

    @property
    def stages(self) -> tuple[str, ...]:
        return tuple(self.module.STAGES)

    @property
    def filled_by(self) -> str:
        return str(self.module.FILLED_BY)


def registry(kind: str, prefix: str, modules: Sequence[ModuleType],
             start: int) -> dict[str, OutputSpec]:
    """``{prefix}{n}`` -> its spec, numbering ``modules`` from ``start``."""
    return {f"{prefix}{i}": OutputSpec(kind, f"{prefix}{i}", i, m)
            for i, m in enumerate(modules, start=start)}


def build_outputs(specs: Mapping[str, OutputSpec], runs: Path, options: Options,
                  only: Sequence[str] | None,
                  write: Callable[[Any, str], dict[str, Any]],
                  selection: RunSelection | None) -> tuple[list[dict[str, Any]], list[str]]:
    """Build every spec (or ``only`` those) from the records under ``runs`` and
    ``write(built, name)`` it; return the index entries (``write``'s fields added to each) and
    the errors of the ones whose input is missing.

    ``selection`` names the run directories to read (the stages pass the params' one; None
    reads every directory); a named directory holding another run raises
    :class:`~adaspark.analysis.run_selection.StaleRunError` before anything is built."""
    from adaspark.analysis.records import CorruptInputError, MissingInputError, Records

    records = Records(runs, target_label=options.target, selection=selection)
    entries: list[dict[str, Any]] = []
    errors: list[str] = []
    for name, spec in specs.items():
        if only and name not in only:
            continue
        entry: dict[str, Any] = {"name": name, "number": spec.number, "label": spec.label,
                                 "stages": spec.stages, "filled_by": spec.filled_by}
        try:
            built = spec.build(records, options)
        except (MissingInputError, CorruptInputError) as e:
            errors.append(f"{spec.label}: {e}")
            entry |= {"title": spec.module.__doc__.splitlines()[0], "error": str(e)}
            entries.append(entry)
            continue
        entries.append(entry | write(built, name) | {"error": None})
    return entries, errors
