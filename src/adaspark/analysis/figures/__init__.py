"""The paper's Figures 3-10, regenerated from this project's runs (issue 6).

One module per figure (``fig3`` .. ``fig10``), each with one function named after the figure that
takes records (DataFrames) and returns a matplotlib figure carrying its caption (computed from the
data, :func:`adaspark.analysis.figures.style.attach_caption`), and a ``build(records, options)``
that finds those records under a run directory. The shared look and the PNG / PDF files are
:mod:`adaspark.analysis.figures.style`'s.
"""

from __future__ import annotations

from adaspark.analysis.figures import fig3, fig4, fig5, fig6, fig7, fig8, fig9, fig10
from adaspark.analysis.outputs import OutputSpec, registry

FIGURES: dict[str, OutputSpec] = registry(
    "Figure", "fig", (fig3, fig4, fig5, fig6, fig7, fig8, fig9, fig10), start=3)

__all__ = ["FIGURES"]
