"""The paper's Tables 1-10, regenerated from this project's runs (issue 6).

One module per table (``table1`` .. ``table10``), each with one function named after the table
that takes records (DataFrames) and returns a frame, and a ``build(records, options)`` that finds
those records under a run directory (:class:`adaspark.tables.inputs.Records`). Formatting and
the CSV / Markdown / LaTeX files are :mod:`adaspark.tables.render`'s.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType

import pandas as pd

from adaspark.tables import (
    table1,
    table2,
    table3,
    table4,
    table5,
    table6,
    table7,
    table8,
    table9,
    table10,
)
from adaspark.tables.inputs import Options, Records


@dataclass(frozen=True)
class TableSpec:
    """One table: its file name, number, the module's function and the stages it reads."""

    name: str
    number: int
    module: ModuleType

    @property
    def build(self) -> Callable[[Records, Options], pd.DataFrame]:
        return self.module.build  # type: ignore[no-any-return]

    @property
    def stages(self) -> tuple[str, ...]:
        return tuple(self.module.STAGES)

    @property
    def filled_by(self) -> str:
        return str(self.module.FILLED_BY)


_MODULES = (table1, table2, table3, table4, table5, table6, table7, table8, table9, table10)
TABLES: dict[str, TableSpec] = {
    f"table{i}": TableSpec(f"table{i}", i, m) for i, m in enumerate(_MODULES, start=1)
}

__all__ = ["TABLES", "Options", "Records", "TableSpec"]
