"""Stage ``load``: throughput and latency under load (issue 37), the ``load`` config group's points
(:mod:`adaspark.runs.load`): our server with ``max_concurrent=N`` against llama-server
``--parallel N``. Off in the default preset (``load.arms: []``: the stage writes its settings and
no point); ``dvc exp run -S preset=load`` fills it. A killed stage resumes point by point.

    python -m adaspark.stages.load --params params.yaml --out runs/load
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from omegaconf import OmegaConf

from adaspark.analysis.load import write_load_figure
from adaspark.runs.load import LoadSettings, run_points
from adaspark.stages import load_params, stage_main


@stage_main("load")
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--out", default="runs/load", type=Path)
    ap.add_argument("--testset", default="runs/testset", type=Path)
    a = ap.parse_args(argv)
    params = load_params(a.params)
    settings = LoadSettings.of(params["load"])
    points = run_points(OmegaConf.create(params), settings, a.out, a.testset)
    write_load_figure(a.out)
    print(f"load: {len(points)} point(s) in {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
