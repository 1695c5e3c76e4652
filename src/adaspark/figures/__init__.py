"""The paper's Figures 3-10, regenerated from this project's runs (issue 6).

One module per figure (``fig3`` .. ``fig10``), each with one function named after the figure that
takes records (DataFrames) and returns a matplotlib figure carrying its caption (computed from
the data, :func:`adaspark.figures.style.attach_caption`), and a ``build(records, options)`` that
finds those records under a run directory. The shared look and the PNG / PDF files are
:mod:`adaspark.figures.style`'s.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType

from matplotlib.figure import Figure

from adaspark.figures import fig3, fig4, fig5, fig6, fig7, fig8, fig9, fig10
from adaspark.tables.inputs import Options, Records


@dataclass(frozen=True)
class FigureSpec:
    """One figure: its file name, number, the module's function and the stages it reads."""

    name: str
    number: int
    module: ModuleType

    @property
    def build(self) -> Callable[[Records, Options], Figure]:
        return self.module.build  # type: ignore[no-any-return]

    @property
    def stages(self) -> tuple[str, ...]:
        return tuple(self.module.STAGES)

    @property
    def filled_by(self) -> str:
        return str(self.module.FILLED_BY)


_MODULES = (fig3, fig4, fig5, fig6, fig7, fig8, fig9, fig10)
FIGURES: dict[str, FigureSpec] = {
    f"fig{i}": FigureSpec(f"fig{i}", i, m) for i, m in enumerate(_MODULES, start=3)
}

__all__ = ["FIGURES", "FigureSpec"]
