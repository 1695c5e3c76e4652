"""Helpers of the reporting tests: a params file, and a synthetic run directory
(synthetic_runs) with the tables, figures and report the stages make of it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf
from synthetic_runs import make_synthetic_runs, synthetic_params

from adaspark.analysis.records import Options
from adaspark.stages import figures as figures_stage
from adaspark.stages import report as report_stage
from adaspark.stages import tables as tables_stage

#: Few resamples keep the tests fast; the statistics module's own tests cover the bootstrap.
FAST = Options(target="synthetic-target", n_resamples=200, seed=11)


def write_params(path: Path, preset: str, n_resamples: int = 200,
                 **sections: Any) -> Path:
    """A params file with what the tables, figures and report stages read: the runs
    ``make_synthetic_runs(preset=preset)`` writes (``synthetic_params``), few resamples, and
    ``sections`` replacing whole top-level sections."""
    params = synthetic_params(preset) | {
        "tables": {"seed": 11, "n_resamples": n_resamples, "context_split_tokens": 2048}}
    path.write_text(OmegaConf.to_yaml(OmegaConf.create(params | sections)))
    return path


@dataclass(frozen=True)
class Built:
    """A synthetic run directory and what the tables, figures and report stages made of it."""

    runs: Path
    tables: Path
    figures: Path
    paper: Path
    codes: tuple[int, int, int]


def build(root: Path, preset: str) -> Built:
    runs = make_synthetic_runs(root / "runs", preset=preset)
    params = write_params(root / "params.yaml", preset)
    paper, figures = root / "paper", root / "figures"
    common = ["--params", str(params), "--runs", str(runs)]
    codes = (
        tables_stage.main([*common, "--out", str(paper / "tables")]),
        figures_stage.main([*common, "--out", str(figures)]),
        report_stage.main([*common, "--tables", str(paper / "tables"), "--figures",
                           str(figures), "--out", str(paper)]),
    )
    return Built(runs, paper / "tables", figures, paper, codes)
