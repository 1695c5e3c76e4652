"""The paper's Tables 1-10, regenerated from this project's runs (issue 6).

One module per table (``table1`` .. ``table10``), each with one function named after the table
that takes records (DataFrames) and returns a frame, and a ``build(records, options)`` that finds
those records under a run directory (:class:`adaspark.analysis.records.Records`). Formatting and
the CSV / Markdown / LaTeX files are :mod:`adaspark.analysis.tables.render`'s.
"""

from __future__ import annotations

from adaspark.analysis.outputs import OutputSpec, registry
from adaspark.analysis.tables import (
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

TABLES: dict[str, OutputSpec] = registry(
    "Table", "table", (table1, table2, table3, table4, table5, table6, table7, table8, table9,
                       table10), start=1)

__all__ = ["TABLES"]
