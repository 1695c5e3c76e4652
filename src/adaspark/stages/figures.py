"""Stage ``figures``: the paper's Figures 3-10 from this run's records (issue 6).

    python -m adaspark.stages.figures --params params.yaml --runs runs --out figures

Each figure of :data:`adaspark.analysis.figures.FIGURES` is built from the records under ``--runs``
and written as ``<out>/figN.png`` and ``.pdf``; ``<out>/figures.json`` indexes them (captions
computed from the data, which preset fills an empty panel) for the report. A figure whose input is
missing is not written: the stage names the stage that makes the input and exits 1 after writing the
others. It reads the runs the params name, as the tables stage does (:mod:`adaspark.stages.tables`).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from adaspark.analysis.figures import FIGURES
from adaspark.analysis.figures.style import info_of, save
from adaspark.analysis.outputs import build_outputs
from adaspark.analysis.records import Options
from adaspark.analysis.run_selection import RunSelection, selection_from_params
from adaspark.io import write_json
from adaspark.stages import load_params, output_args, stage_main
from adaspark.stages.tables import options_from_params


def write_figures(runs: Path, out: Path, options: Options, only: list[str] | None = None, *,
                  selection: RunSelection | None) -> tuple[dict[str, Any], list[str]]:
    """Build and write every figure (or ``only`` those) from the run directories ``selection``
    names (None: every one under ``runs``); return the index and the errors."""
    def write(fig: Figure, name: str) -> dict[str, Any]:
        info = info_of(fig)
        files = save(fig, out, name)
        return {"title": info.get("title", ""), "caption": info.get("caption", ""),
                "complete": info.get("complete", True), "files": [str(p) for p in files]}

    entries, errors = build_outputs(FIGURES, runs, options, only, write, selection)
    index = {"preset": options.preset, "target": options.target, "runs": str(runs),
             "figures": entries}
    write_json(out / "figures.json", index)
    return index, errors


@stage_main("figures")
def main(argv: list[str] | None = None) -> int:
    ap = output_args(__doc__, "figures", "fig3,fig8")
    a = ap.parse_args(argv)
    params = load_params(a.params)
    # a stale run directory raises StaleRunError: stage_main shows it and exits 1
    index, errors = write_figures(a.runs, a.out, options_from_params(params), a.only,
                                  selection=selection_from_params(params))
    for e in index["figures"]:
        if not e.get("error"):
            print(f"figures: {e['label']} -> {a.out}/{e['name']}.png|pdf"
                  + ("" if e["complete"] else " (partly not run in this preset)"))
    for err in errors:
        print(f"figures: FAILED {err}", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
