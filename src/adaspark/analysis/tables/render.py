"""How a table frame becomes text: cell formats, dashes, and the CSV, Markdown and LaTeX files.

A table function (``adaspark.analysis.tables.tableN``) returns a :class:`pandas.DataFrame` whose
cells are numbers (formatted here by ``attrs["formats"]``: a column name to a ``str.format``
pattern), strings already in the paper's form (an interval cell such as ``1.87× [1.80, 1.95]``), or
missing (NaN or None: a dash, "not run in this preset"). ``attrs`` also carries ``caption``
(computed from the data), ``title``, ``notes`` and ``bold`` (cells to set in bold, as ``(row
position, column)`` pairs: Table 3's best pinned width) and ``row_formats`` (a row position to a
pattern for its numbers, overriding the column's: Table 6's tok/s row).

The CSV holds the raw values (numbers unrounded, an empty field for a dash); Markdown and LaTeX
hold the formatted cells.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from adaspark.io import write_text

DASH = "–"
MINUS = "−"
TIMES = "×"


def is_missing(value: Any) -> bool:
    """NaN, None or pandas' NA: a cell the preset did not fill."""
    if value is None:
        return True
    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):
        return False


def cell_text(value: Any, fmt: str | None = None) -> str:
    """One cell as printed: a dash when missing, ``fmt`` applied to numbers, the paper's minus."""
    if is_missing(value):
        return DASH
    if isinstance(value, str):
        return value
    if fmt is not None:
        try:
            text = fmt.format(value)
        except (TypeError, ValueError):
            text = str(value)
    elif isinstance(value, float) and math.isfinite(value) and value.is_integer():
        text = f"{int(value):,}"
    elif isinstance(value, int):
        text = f"{value:,}"
    else:
        text = str(value)
    if text.startswith("-") and text[1:2].isdigit():
        text = MINUS + text[1:]
    return text


def formatted(frame: pd.DataFrame) -> pd.DataFrame:
    """The frame as strings, every cell formatted and bold cells marked by ``**``."""
    formats: dict[str, str] = frame.attrs.get("formats", {})
    row_formats: dict[int, str] = frame.attrs.get("row_formats", {})
    out = pd.DataFrame(
        {c: [cell_text(v, row_formats.get(i, formats.get(str(c))))
             for i, v in enumerate(frame[c])] for c in frame.columns},
        index=range(len(frame)),
    )
    for row, col in frame.attrs.get("bold", []):
        if col in out.columns and 0 <= row < len(out) and out.at[row, col] != DASH:
            out.at[row, col] = f"**{out.at[row, col]}**"
    return out


def ci_text(ratio: float, lo: float, hi: float, digits: int = 2) -> str | None:
    """``1.87× [1.80, 1.95]`` (Tables 3-6, 9), or None (a dash) when the ratio is missing."""
    if is_missing(ratio) or not math.isfinite(ratio):
        return None
    return f"{ratio:.{digits}f}{TIMES} [{lo:.{digits}f}, {hi:.{digits}f}]"


def fraction_text(num: int, den: int) -> str | None:
    """``81/95`` (Tables 2 and 10), or None when there is nothing to count."""
    return None if den <= 0 else f"{num}/{den}"


def width_ranges(widths: Sequence[int]) -> str | None:
    """Widths as the paper lists them (Table 9): runs of three or more as ``2–4``."""
    ws = sorted({int(w) for w in widths})
    if not ws:
        return None
    parts: list[str] = []
    start = prev = ws[0]
    for w in [*ws[1:], None]:
        if w is not None and w == prev + 1:
            prev = w
            continue
        if prev - start >= 2:
            parts.append(f"{start}{DASH}{prev}")
        else:
            parts.extend(str(x) for x in range(start, prev + 1))
        if w is not None:
            start = prev = w
    return ", ".join(parts)


# ---------------------------------------------------------------------------------------------
# Markdown and LaTeX


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|")


def to_markdown(frame: pd.DataFrame) -> str:
    """A GitHub-flavoured Markdown table of the formatted cells."""
    cells = formatted(frame)
    head = "| " + " | ".join(_md_escape(str(c)) for c in cells.columns) + " |"
    rule = "|" + "|".join("---" for _ in cells.columns) + "|"
    body = ["| " + " | ".join(_md_escape(v) for v in row) + " |" for row in cells.to_numpy()]
    return "\n".join([head, rule, *body]) + "\n"


_LATEX_SPECIAL = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    TIMES: r"$\times$",
    MINUS: r"$-$",
    DASH: "--",
    "α": r"$\alpha$",
    "β": r"$\beta$",
    "≥": r"$\geq$",
    "§": r"\S{}",
    "·": r"$\cdot$",
    "°": r"$^\circ$",
}


def latex_escape(text: str) -> str:
    """Plain text for a LaTeX table cell (pdfLaTeX-safe: ×, −, – and Greek mapped)."""
    out = []
    for ch in text:
        out.append(_LATEX_SPECIAL.get(ch, ch))
    return "".join(out)


def _latex_cell(text: str) -> str:
    if text.startswith("**") and text.endswith("**") and len(text) > 4:
        return r"\textbf{" + latex_escape(text[2:-2]) + "}"
    return latex_escape(text)


def to_latex(frame: pd.DataFrame, label: str | None = None) -> str:
    """A ``table`` environment (booktabs rules) with the caption computed from the data."""
    cells = formatted(frame)
    align = "l" + "r" * (len(cells.columns) - 1)
    lines = [r"\begin{table}[t]", r"\centering", r"\small"]
    caption = frame.attrs.get("caption")
    if caption:
        lines.append(r"\caption{" + latex_escape(str(caption)) + "}")
    if label:
        lines.append(r"\label{" + label + "}")
    lines += [r"\begin{tabular}{" + align + "}", r"\toprule"]
    lines.append(" & ".join(latex_escape(str(c)) for c in cells.columns) + r" \\")
    lines.append(r"\midrule")
    for row in cells.to_numpy():
        lines.append(" & ".join(_latex_cell(v) for v in row) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}", r"\end{table}"]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------
# Writing


def write_table(frame: pd.DataFrame, out_dir: Path, name: str) -> list[Path]:
    """``<name>.csv`` (raw values), ``<name>.md`` (caption, table, notes) and ``<name>.tex``."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / f"{name}.{ext}" for ext in ("csv", "md", "tex")]
    write_text(paths[0], frame.to_csv(index=False))
    md = []
    caption = frame.attrs.get("caption")
    if caption:
        md += [f"**{frame.attrs.get('label', name)}.** {caption}", ""]
    md.append(to_markdown(frame))
    for note in frame.attrs.get("notes", []):
        md.append(f"- {note}")
    write_text(paths[1], "\n".join(md).rstrip() + "\n")
    write_text(paths[2], to_latex(frame, label=f"tab:{name}"))
    return paths


def missing_cells(frame: pd.DataFrame, columns: Sequence[Hashable] | None = None) -> int:
    """How many cells are dashes (not filled by this preset)."""
    cols = list(columns) if columns is not None else list(frame.columns)
    return int(sum(is_missing(v) for c in cols for v in frame[c]))
