"""The report's building blocks: a :class:`Section` (a heading and its paragraphs, lists,
tables side by side and figures, in order) and a table frame as cells (:func:`frame_cells`), which
the report (:mod:`adaspark.analysis.report`) and its parts, replay's among them, assemble."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

Table = tuple[str, list[str], list[list[str]]]


@dataclass
class Section:
    """One part of the report: a heading and blocks in order: ``("p", text)``,
    ``("ul", [items])``, ``("tables", [(title, columns, rows), ...])`` (set side by side in
    HTML) and ``("figure", (png path, caption))``."""

    heading: str
    level: int = 2
    blocks: list[tuple[str, Any]] = field(default_factory=list)

    def p(self, text: str) -> Section:
        self.blocks.append(("p", text))
        return self

    def ul(self, items: list[str]) -> Section:
        if items:
            self.blocks.append(("ul", list(items)))
        return self

    def tables(self, *tables: Table) -> Section:
        self.blocks.append(("tables", list(tables)))
        return self

    def figure(self, png: Path, caption: str) -> Section:
        self.blocks.append(("figure", (png, caption)))
        return self


def frame_cells(frame: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    from adaspark.analysis.tables.render import formatted

    cells = formatted(frame)
    return [str(c) for c in cells.columns], cells.to_numpy().tolist()
