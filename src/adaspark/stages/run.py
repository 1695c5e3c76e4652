"""Stage ``run`` (one item of the DVC matrix over ``run_arms``): one arm over the run's subset,
through its server, timed on the client's clock (§4.1, Appendix A; issue 5).

    python -m adaspark.stages.run --arm NAME[@REPEAT] --params params.yaml --out DIR
                                  [--set KEY=VALUE ...] [--on-mismatch refuse|restart]
                                  [--group-from KEY]

Reads ``arms.<NAME>`` (or ``arms.<NAME@REPEAT>``), ``target``, ``drafter``, ``threads`` and the
``run`` section (subset, cap, kernels, ...) of the composed params file; writes
``DIR/replies.parquet`` (one row per timed reply), ``DIR/run.json`` (fingerprint and server
metadata), ``DIR/summary.json``, the server's log and, for scheduler arms, the learned store.
A killed run resumes at the first missing reply; a run refuses to append to results made with
another binary, model file or config (``--on-mismatch restart`` deletes them and starts over
instead, as DVC would). On a failure ``DIR/crash.json`` says what happened.

Run order (``run.order``, :mod:`adaspark.runs.order`): with ``--group-from KEY`` (the params key
listing the stage's arms, ``run_arms`` for the run stage) and ``run.order=interleaved``, the arm
runs with the other arms of its ``run.groups`` group that KEY lists, their servers up together,
each into its sibling directory ``DIR/../<arm>``. The first of the group's stages that DVC runs
serves the whole group; the others find their replies stored and send nothing. Without
``--group-from`` (the repeat, held-out and instrumented stages) the arm runs alone.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

import yaml
from omegaconf import DictConfig, ListConfig, OmegaConf

from adaspark.config import ConfigError
from adaspark.config_check import read_params, validate
from adaspark.runs.launcher import run_unit_launched
from adaspark.runs.order import RunUnit, plan_units, unit_of
from adaspark.runs.progress import summary_table
from adaspark.runs.settings import ArmEntry, RunError, RunSettings, arm_config, no_drafter_file
from adaspark.runs.store import NOT_RUN_FILE
from adaspark.stages import stage_main


def apply_sets(cfg: DictConfig, sets: list[str]) -> None:
    """Merge ``KEY=VALUE`` items into ``cfg`` (a stage's own variant of the params: another
    subset, the round log on), each value read as YAML."""
    for item in sets:
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise ValueError(f"--set {item!r}: expected KEY=VALUE, e.g. run.subset=heldout")
        OmegaConf.update(cfg, key, yaml.safe_load(value) if value else None, merge=True)


def write_skipped(out: Path, entry: str, why: str, on_mismatch: str) -> None:
    """Mark ``out`` as the directory of an arm that was not run (``NOT_RUN_FILE``: the
    reason), so the tables show the arm as not run and why. Results stored there by an earlier
    run (with a drafter file since unset) are removed under ``--on-mismatch restart`` and
    refused otherwise: they are not this config's."""
    from adaspark.io import write_json

    if out.is_dir() and any(p.name != NOT_RUN_FILE for p in out.iterdir()):
        if on_mismatch != "restart":
            raise RunError(f"{out} holds results of an earlier run of {entry}, which is not run "
                           f"now ({why}); delete {out} or pass --on-mismatch restart")
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / NOT_RUN_FILE, {"arm": entry, "not_run": why})


@stage_main("run")
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arm", required=True, help="a run_arms entry: NAME or NAME@REPEAT")
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--out", required=True, type=Path, help="the arm's run directory")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="change one value of the params before reading them (YAML value, "
                    "e.g. --set run.subset=heldout --set run.round_log=true); repeatable")
    ap.add_argument("--on-mismatch", choices=["refuse", "restart"], default="refuse",
                    help="results in --out made with another binary, model or config: refuse "
                    "(default) or delete them and start over (the pipeline's choice)")
    ap.add_argument("--group-from", metavar="KEY", default=None,
                    help="the params key listing this stage's arms (e.g. run_arms): with "
                    "run.order=interleaved the arm runs with its group's arms among them")
    a = ap.parse_args(argv)
    cfg = read_params(a.params)
    apply_sets(cfg, a.set)
    validate(cfg, command="stage")  # again: --set changed it
    try:
        settings = RunSettings.from_config(cfg)
        entries = [a.arm]
        if a.group_from is not None:
            listed = OmegaConf.select(cfg, a.group_from)
            if not isinstance(listed, list | ListConfig) or a.arm not in listed:
                raise RunError(f"--group-from {a.group_from}: the params' {a.group_from} is "
                               f"{listed!r}, not a list holding the arm {a.arm!r}")
            entries = [str(e) for e in listed]
        unit = unit_of(a.arm, plan_units(entries, settings.order, settings.groups))
        dirs = {e: a.out.parent / e for e in unit.entries} | {a.arm: a.out}
        skipped = {e: why for e in unit.entries
                   if (why := no_drafter_file(cfg, arm_config(cfg, ArmEntry.parse(e))))}
        for e, why in skipped.items():
            write_skipped(dirs[e], e, why, a.on_mismatch)
        if a.arm in skipped:
            print(f"run {a.arm}: not run: {skipped[a.arm]}", file=sys.stderr)
            return 0
        unit = RunUnit(tuple(e for e in unit.entries if e not in skipped), unit.group)
        for e in unit.entries:  # an arm not run before, whose drafter file is set now
            (dirs[e] / NOT_RUN_FILE).unlink(missing_ok=True)
        if len(unit.entries) > 1 and a.out.name != a.arm:
            raise RunError(f"--out {a.out}: an interleaved group's arms go to sibling "
                           f"directories named by arm, so --out must end in /{a.arm}")
        summaries = run_unit_launched(cfg, unit, dirs, settings, on_mismatch=a.on_mismatch)
        summary = summaries[unit.entries.index(a.arm)]
    except ConfigError:
        raise
    except (RuntimeError, FileNotFoundError, ValueError, KeyError) as e:
        print(f"run {a.arm}: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    from rich.console import Console

    Console(stderr=True, width=None if sys.stderr.isatty() else 150).print(
        summary_table(summaries))
    if summary.n_replies == 0:
        print(f"run {a.arm}: no reply was stored", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
