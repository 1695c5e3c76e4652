"""Stage ``tables``: the paper's Tables 1-10 from this run's records (issue 6).

    python -m adaspark.stages.tables --params params.yaml --runs runs --out paper/tables

Each table of :data:`adaspark.analysis.tables.TABLES` is built from the records under ``--runs`` and
written as ``<out>/tableN.csv`` (raw values), ``.md`` and ``.tex``; ``<out>/tables.json`` indexes
them (formatted cells, captions, notes, which preset fills the dashes) for the report. A table
whose input is missing is not written: the stage names the stage that makes the input and exits 1
after writing the others.

Reads from the params file: ``target.name`` (the label), ``preset.name`` and the ``tables``
section (``seed``, ``n_resamples``, ``bootstrap_method`` (``percentile``, the paper's, or
``BCa``), ``context_split_tokens``: the bootstrap of §4.1, recorded in ``tables.json``), and which
runs to read: ``run_arms`` and ``extra_runs`` name the directories, ``target``, ``drafter``,
``run.subset``, ``extra_runs.<group>.subset``, ``run.cap`` and ``preset.name`` what each must have
recorded (:class:`adaspark.analysis.run_selection.RunSelection`; other directories under
``--runs`` are left out, a named one that disagrees fails the stage).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pandas as pd

from adaspark.analysis.bootstrap import (
    DEFAULT_BOOTSTRAP_METHOD,
    DEFAULT_N_RESAMPLES,
    DEFAULT_SEED,
)
from adaspark.analysis.outputs import build_outputs
from adaspark.analysis.records import Options
from adaspark.analysis.run_selection import RunSelection, selection_from_params
from adaspark.analysis.tables import TABLES
from adaspark.analysis.tables.render import formatted, missing_cells, write_table
from adaspark.io import write_json
from adaspark.schema import TablesOptions
from adaspark.stages import load_params, output_args, stage_main


def options_from_params(params: dict[str, Any]) -> Options:
    """The statistics options of the ``tables`` params section (checked by
    :class:`adaspark.schema.TablesOptions`; a missing key takes
    :mod:`adaspark.analysis.bootstrap`'s default), and the target's label."""
    section = TablesOptions.check(params.get("tables") or {})
    preset = params.get("preset")
    return Options(
        target=str((params.get("target") or {}).get("name") or "target"),
        seed=int(section.get("seed", DEFAULT_SEED)),
        n_resamples=int(section.get("n_resamples", DEFAULT_N_RESAMPLES)),
        bootstrap_method=section.get("bootstrap_method", DEFAULT_BOOTSTRAP_METHOD),
        context_split_tokens=int(section.get("context_split_tokens", 2048)),
        preset=str(preset.get("name") if isinstance(preset, dict) else preset or "default"),
    )


def write_tables(runs: Path, out: Path, options: Options, only: list[str] | None = None, *,
                 selection: RunSelection | None) -> tuple[dict[str, Any], list[str]]:
    """Build and write every table (or ``only`` those) from the run directories ``selection``
    names (None: every one under ``runs``); return the index and the errors."""
    def write(frame: pd.DataFrame, name: str) -> dict[str, Any]:
        files = write_table(frame, out, name)
        cells = formatted(frame)
        return {
            "title": frame.attrs.get("title", ""), "caption": frame.attrs.get("caption", ""),
            "notes": frame.attrs.get("notes", []), "dashes": missing_cells(frame),
            "columns": [str(c) for c in cells.columns], "rows": cells.to_numpy().tolist(),
            "files": [str(p) for p in files],
        }

    entries, errors = build_outputs(TABLES, runs, options, only, write, selection)
    index = {"preset": options.preset, "target": options.target, "seed": options.seed,
             "n_resamples": options.n_resamples, "bootstrap_method": options.bootstrap_method,
             "context_split_tokens": options.context_split_tokens, "runs": str(runs),
             "tables": entries}
    write_json(out / "tables.json", index)
    return index, errors


@stage_main("tables")
def main(argv: list[str] | None = None) -> int:
    ap = output_args(__doc__, "paper/tables", "table1,table4")
    a = ap.parse_args(argv)
    params = load_params(a.params)
    # a stale run directory raises StaleRunError: stage_main shows it and exits 1
    index, errors = write_tables(a.runs, a.out, options_from_params(params), a.only,
                                 selection=selection_from_params(params))
    for e in index["tables"]:
        if not e.get("error"):
            print(f"tables: {e['label']} -> {a.out}/{e['name']}.csv|md|tex"
                  + (f" ({e['dashes']} dashes: not run in this preset)" if e["dashes"] else ""))
    for err in errors:
        print(f"tables: FAILED {err}", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
