"""The paper's own numbers, as data (``data/paper-values.json``).

Every cell of the paper's Tables 1-10, as printed (the text of the cell: ``1.87× [1.80, 1.95]``,
``−12.2%``, ``–`` for a width not run), and the numbers each figure caption states (Figures 3-10;
under ``text``, numbers the body states about the same figure). Multi-level headers are flattened
(Table 4's "over own AR" columns become ``... / own AR``; Table 5's column groups prefix their
columns) and Table 6's per-target block headers become a ``target`` column, so a paper table has the
same columns as the table this project regenerates (:mod:`adaspark.analysis.tables`), and the report
places the two side by side. Ours hold a block per drafter kind where the paper's hold its targets
(Tables 4-6), so Tables 4 and 5 add ``drafter`` and ``baseline`` columns and name the llama.cpp
and chain columns by role; the paper's cells are its DSpark drafters', and the report says so
beside a block whose drafter is a stand-in.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import pandas as pd

from adaspark import paths

#: Where the values live (committed).
VALUES_FILE = "paper-values.json"


def values_path() -> Path:
    """The committed JSON file of the paper's values."""
    return paths.data_dir() / VALUES_FILE


@cache
def _document(path: str) -> dict[str, Any]:
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    if not isinstance(doc, dict) or "tables" not in doc or "figures" not in doc:
        raise ValueError(f"{path} is not a paper-values file (no 'tables' and 'figures' keys)")
    return doc


def document(path: Path | None = None) -> dict[str, Any]:
    """The whole JSON document (cached per path)."""
    return _document(str(path or values_path()))


def targets(path: Path | None = None) -> list[str]:
    """The paper's four targets, in its order."""
    return list(document(path)["targets"])


def paper_table(name: str, path: Path | None = None) -> pd.DataFrame:
    """The paper's table ``name`` (``"table1"`` .. ``"table10"``) as printed, one string per cell.

    ``attrs["title"]`` and ``attrs["section"]`` hold the table's short title and its section.
    """
    tables = document(path)["tables"]
    if name not in tables:
        raise KeyError(f"no paper table {name!r}; known: {sorted(tables)}")
    t = tables[name]
    frame = pd.DataFrame(t["rows"], columns=t["columns"], dtype=object)
    frame.attrs["title"] = t["title"]
    frame.attrs["section"] = t["section"]
    return frame


def paper_figure(name: str, path: Path | None = None) -> dict[str, Any]:
    """The numbers the paper states for figure ``name`` (``"fig3"`` .. ``"fig10"``):
    ``{"section", "title", "caption": {...}, "text": {...}}``."""
    figures = document(path)["figures"]
    if name not in figures:
        raise KeyError(f"no paper figure {name!r}; known: {sorted(figures)}")
    fig = dict(figures[name])
    fig.setdefault("text", {})
    return fig
