"""The one style of every figure (Figures 3-10): fonts, colours, the empty "not run in this
preset" panel, the caption a figure carries, and the PNG and PDF files it is written to."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from adaspark.io import atomic_path

NOT_RUN = "not run in this preset"
#: Okabe-Ito, colour-blind safe: one colour per series role.
COLOURS: dict[str, str] = {
    "blue": "#0072B2", "orange": "#E69F00", "green": "#009E73", "vermillion": "#D55E00",
    "sky": "#56B4E9", "purple": "#CC79A7", "yellow": "#F0E442", "grey": "#7F7F7F",
    "black": "#000000",
}
#: Series order used when a figure has several contexts or arms.
CYCLE: tuple[str, ...] = ("blue", "vermillion", "green", "orange", "purple", "sky")
#: Column width of a figure in inches (one panel) and the height of one panel.
PANEL_W, PANEL_H = 4.2, 3.0

RC: dict[str, Any] = {
    "font.size": 9,
    "axes.titlesize": 9.5,
    "axes.labelsize": 9,
    "legend.fontsize": 8,
    "xtick.labelsize": 8,
    "ytick.labelsize": 8,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.color": "#DDDDDD",
    "grid.linewidth": 0.5,
    "lines.linewidth": 1.5,
    "lines.markersize": 4,
    "savefig.bbox": "tight",
    "pdf.fonttype": 42,
}


@contextmanager
def style() -> Iterator[None]:
    """The figures' rcParams, for the duration of a block."""
    with plt.rc_context(RC):
        yield


def colour(i: int) -> str:
    return COLOURS[CYCLE[i % len(CYCLE)]]


def panels(n: int, *, ncols: int | None = None, sharey: bool = False) -> tuple[Figure, list[Axes]]:
    """A figure of ``n`` panels in a row (or ``ncols`` per row)."""
    ncols = max(1, min(n, ncols or n))
    nrows = (n + ncols - 1) // ncols
    with style():
        fig, axes = plt.subplots(nrows, ncols, figsize=(PANEL_W * ncols, PANEL_H * nrows),
                                 squeeze=False, sharey=sharey)
    flat = [ax for row in axes for ax in row]
    for ax in flat[n:]:
        ax.set_visible(False)
    return fig, flat[:n]


def not_run(ax: Axes, what: str = "", stage: str = "") -> None:
    """An empty panel marked "not run in this preset" (and what would fill it); keeps the
    panel's title."""
    title = ax.get_title()
    ax.cla()
    ax.set_title(title)
    ax.set_xticks([])
    ax.set_yticks([])
    ax.grid(False)
    for side in ("top", "right", "bottom", "left"):
        ax.spines[side].set_visible(True)
        ax.spines[side].set_color("#BBBBBB")
        ax.spines[side].set_linestyle((0, (3, 3)))
    detail = "\n".join(x for x in (what, stage) if x)
    ax.text(0.5, 0.5, NOT_RUN + (f"\n{detail}" if detail else ""), ha="center", va="center",
            transform=ax.transAxes, color=COLOURS["grey"], fontsize=9)


def attach_caption(fig: Figure, caption: str, *, label: str, title: str,
                   filled_by: str = "", complete: bool = True) -> Figure:
    """Store the caption computed from the data (and what the report needs) on the figure."""
    fig.adaspark = {  # type: ignore[attr-defined]
        "caption": caption, "label": label, "title": title, "filled_by": filled_by,
        "complete": complete,
    }
    return fig


def info_of(fig: Figure) -> dict[str, Any]:
    """What :func:`attach_caption` stored (empty for a figure made elsewhere)."""
    return dict(getattr(fig, "adaspark", {}))


def save(fig: Figure, out_dir: Path, name: str, *, close: bool = True) -> list[Path]:
    """``<name>.png`` (150 dpi) and ``<name>.pdf``, without time stamps, so reruns on the same
    records give the same files."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / f"{name}.png", out_dir / f"{name}.pdf"]
    with style():
        with atomic_path(paths[0]) as tmp:
            fig.savefig(tmp, dpi=150, metadata={"Software": None})
        with atomic_path(paths[1]) as tmp:
            fig.savefig(tmp, metadata={"CreationDate": None, "Creator": None, "Producer": None})
    if close:
        plt.close(fig)
    return paths
