"""Stage ``report``: ``paper/report.md`` and ``paper/report.html`` (and ``report.pdf`` where a
LaTeX engine is installed) from the tables, the figures and the run's metadata (issue 6).

    python -m adaspark.stages.report --params params.yaml --runs runs --tables paper/tables \
        --figures figures --out paper

See :mod:`adaspark.analysis.report` for what the report holds.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from adaspark.analysis.report import write_report
from adaspark.stages import load_params, stage_main
from adaspark.stages.tables import options_from_params


@stage_main("report")
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--runs", default="runs", type=Path)
    ap.add_argument("--tables", default="paper/tables", type=Path)
    ap.add_argument("--figures", default="figures", type=Path)
    ap.add_argument("--out", default="paper", type=Path)
    a = ap.parse_args(argv)
    params = load_params(a.params)
    if not (a.tables / "tables.json").is_file():
        print(f"report: {a.tables / 'tables.json'} is missing: the `tables` stage makes it "
              "(dvc repro tables)", file=sys.stderr)
        return 1
    if not (a.figures / "figures.json").is_file():
        print(f"report: {a.figures / 'figures.json'} is missing: the `figures` stage makes it "
              "(dvc repro figures)", file=sys.stderr)
        return 1
    # a stale run or an unreadable run file: stage_main, exit 1 with the message
    written = write_report(a.runs, a.tables, a.figures, a.out, params, options_from_params(params))
    for p in written:
        print(f"report: wrote {p}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
