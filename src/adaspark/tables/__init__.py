"""The paper's Tables 1-10, regenerated from this project's runs (issue 6).

One module per table (``table1`` .. ``table10``), each with one function named after the table
that takes records (DataFrames) and returns a frame, and a ``build(records, options)`` that finds
those records under a run directory (:class:`adaspark.tables.inputs.Records`). Formatting and
the CSV / Markdown / LaTeX files are :mod:`adaspark.tables.render`'s.
"""

from __future__ import annotations

from adaspark.outputs import OutputSpec, registry
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

TABLES: dict[str, OutputSpec] = registry(
    "Table", "table", (table1, table2, table3, table4, table5, table6, table7, table8, table9,
                       table10), start=1)

__all__ = ["TABLES", "Options", "Records"]
