"""Where a run's units run (``launcher`` in the config): on this machine
(:func:`adaspark.runs.run.run_unit`) or over a Ray cluster (:mod:`adaspark.runs.cluster`), and the
run of several arms in ``run.order`` that ``adaspark run`` and the benchmark start."""

from __future__ import annotations

import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from adaspark.runs.cluster import LauncherSettings, ray_cluster, run_unit_ray
from adaspark.runs.order import RunUnit, plan_units
from adaspark.runs.progress import ArmSummary, ProgressView, summary_table
from adaspark.runs.run import run_unit
from adaspark.runs.settings import RunSettings
from adaspark.testset import load_checked_sets


def run_unit_launched(cfg: Any, unit: RunUnit, dirs: dict[str, Path], settings: RunSettings,
                      **kw: Any) -> list[ArmSummary]:
    """:func:`run_unit` on this machine, or over a Ray cluster when the config's launcher is
    ``ray`` (:mod:`adaspark.runs.cluster`)."""
    launcher = LauncherSettings.from_config(cfg)
    if launcher.name == "ray":
        kw.pop("sets", None)
        kw.pop("view", None)
        return run_unit_ray(cfg, unit, dirs, settings, launcher, **kw)
    return run_unit(cfg, unit, dirs, settings, **kw)


def run_arms(cfg: Any, entries: list[str], out_root: Path, settings: RunSettings, *,
             stream: Any = None) -> list[ArmSummary]:
    """Several arms (``adaspark run``, the benchmark), each into ``out_root/<entry>``, in
    ``run.order`` (:func:`adaspark.runs.order.plan_units`); one table at the end, in the
    entries' order."""
    units = plan_units(entries, settings.order, settings.groups)
    sets = load_checked_sets(settings.testset_dir())
    by_entry: dict[str, ArmSummary] = {}
    launcher = LauncherSettings.from_config(cfg)
    with ExitStack() as stack, ProgressView(stream) as view:
        if launcher.name == "ray":  # one cluster for every unit
            stack.enter_context(ray_cluster(launcher, lambda m: print(m, file=sys.stderr)))
        for u in units:
            summaries = run_unit_launched(cfg, u, {e: out_root / e for e in u.entries},
                                          settings, sets=sets, view=view)
            by_entry.update(zip(u.entries, summaries, strict=True))
        view.console.print(summary_table([by_entry[e] for e in entries]))
    return [by_entry[e] for e in entries]
