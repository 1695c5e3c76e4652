"""Stage: the six-source test set, rebuilt by the fixed rule where its sources can be read and
checked against the committed lock (issue 4; paper Appendix A).

    python -m adaspark.stages.testset --out runs/testset [--mirror NAME=DIR ...] [--offline]
                                      [--allow-mismatch]
    python -m adaspark.stages.testset --write-lock

Steps: check the vendored copy under ``data/`` (set files, ``manifest.json``, raw source files)
against ``data/testset.lock.json``; rebuild Spec-Bench from the vendored ``question.jsonl``;
rebuild every other source from its mirror (``--mirror toolace=DIR``) or from the dataset hub at
the pinned revision, or, where neither can be read, take the vendored copy (saying so in one
line); check every conversation against the lock; then write ``<set>.json`` for the six sets,
``subsets.json`` and ``lock-check.json`` to ``--out``. On a mismatch only ``lock-check.json`` is
written and the stage fails, naming each conversation that moved, unless ``--allow-mismatch``.
Plain arguments, no Hydra: the pipeline maps its params onto them.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from adaspark import paths
from adaspark.io import write_bytes, write_json
from adaspark.testset.build import BuildLog, Built, Probe, build_sets, shown
from adaspark.testset.lock import (
    LOCK_FILE,
    LockMismatchError,
    Mismatch,
    check_files,
    check_set,
    lock_path,
    make_lock,
    read_lock,
    read_vendored_files,
    vendored_sets,
    write_lock,
)
from adaspark.testset.model import SET_NAMES
from adaspark.testset.readers import SourceUnavailable, hub_reachable
from adaspark.testset.subsets import subsets_to_json


@dataclass
class StageResult:
    ok: bool
    allowed: bool
    report: dict[str, Any]
    log: list[str] = field(default_factory=list)


def mismatch_json(ms: Sequence[Mismatch]) -> list[dict[str, Any]]:
    return [{"set": m.set_name, "conversation": m.conversation, "problem": m.problem} for m in ms]


def run(
    out_dir: Path,
    *,
    data_dir: Path | None = None,
    mirrors: Mapping[str, Path] | None = None,
    try_hub: bool = True,
    allow_mismatch: bool = False,
    probe: Probe = hub_reachable,
) -> StageResult:
    """Build or check the set and write the stage's outputs to ``out_dir``."""
    data_dir = data_dir or paths.data_dir()
    lock = read_lock(lock_path(data_dir))
    files = read_vendored_files(data_dir)
    vendored_problems = check_files(files, lock)
    log = BuildLog()
    built: dict[str, Built] = {}
    if not vendored_problems or allow_mismatch:
        built = build_sets(
            files, mirrors=mirrors, try_hub=try_hub, probe=probe, data_dir=data_dir, log=log
        )
    set_problems = {name: check_set(b.set_file, lock) for name, b in built.items()}
    n_problems = len(vendored_problems) + sum(len(v) for v in set_problems.values())
    ok = n_problems == 0
    report = {
        "ok": ok,
        "allowed_mismatch": (not ok) and allow_mismatch,
        "lock": shown(lock_path(data_dir)),
        "vendored": {"files": len(files), "mismatches": mismatch_json(vendored_problems)},
        "sets": {
            name: {
                "origin": b.origin,
                "rebuilt": b.rebuilt,
                "conversations": len(b.set_file.conversations),
                "turns": sum(len(c.turns) for c in b.set_file.conversations),
                "mismatches": mismatch_json(set_problems[name]),
            }
            for name, b in built.items()
        },
        "log": log.lines,
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    write_json(out_dir / "lock-check.json", report)
    if not (ok or allow_mismatch):
        for stale in [*(f"{n}.json" for n in SET_NAMES), "subsets.json"]:
            (out_dir / stale).unlink(missing_ok=True)  # nothing to run on from an earlier run
    else:
        for name in SET_NAMES:
            if name in built:
                write_bytes(out_dir / f"{name}.json", built[name].data)
        if len(built) == len(SET_NAMES):
            sets = [built[n].set_file for n in SET_NAMES]
            write_json(out_dir / "subsets.json", subsets_to_json(sets))
    return StageResult(ok, (not ok) and allow_mismatch, report, log.lines)


def describe(result: StageResult) -> list[str]:
    """The stage's summary lines: what each set came from and every mismatch."""
    lines = []
    for m in result.report["vendored"]["mismatches"]:
        where = m["set"] if m["conversation"] is None else f"{m['set']}/{m['conversation']}"
        lines.append(f"testset: MISMATCH vendored {where}: {m['problem']}")
    for name, s in result.report["sets"].items():
        lines.append(
            f"testset: {name}: {s['conversations']} conversations, {s['turns']} turns, "
            f"{s['origin']}" + ("" if not s["mismatches"] else f", {len(s['mismatches'])} moved")
        )
        for m in s["mismatches"]:
            where = name if m["conversation"] is None else f"{name}/{m['conversation']}"
            lines.append(f"testset: MISMATCH {where}: {m['problem']}")
    return lines


def parse_mirror(spec: str) -> tuple[str, Path]:
    name, sep, path = spec.partition("=")
    if not sep or name not in SET_NAMES or not path:
        raise argparse.ArgumentTypeError(
            f"--mirror takes NAME=DIR with NAME one of {', '.join(SET_NAMES)}; got {spec!r}"
        )
    return name, Path(path)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m adaspark.stages.testset",
        description="Build or check the six-source test set against data/testset.lock.json.",
    )
    p.add_argument("--out", type=Path, help="output directory (e.g. runs/testset)")
    p.add_argument("--data", type=Path, default=None, help="the data/ directory (default: repo's)")
    p.add_argument(
        "--mirror",
        type=parse_mirror,
        action="append",
        default=[],
        metavar="NAME=DIR",
        help="read source NAME from a local mirror of its dataset repository",
    )
    p.add_argument("--offline", action="store_true", help="do not try the dataset hub")
    p.add_argument(
        "--allow-mismatch",
        action="store_true",
        help="write the outputs even when the set does not match the lock (reported)",
    )
    p.add_argument(
        "--write-lock",
        action="store_true",
        help=f"rewrite data/{LOCK_FILE} from the vendored copy and exit",
    )
    args = p.parse_args(argv)
    if not args.write_lock and args.out is None:
        p.error("--out DIR is required (or --write-lock)")
    return args


def write_lock_from_vendored(data_dir: Path | None = None) -> Path:
    files = read_vendored_files(data_dir)
    return write_lock(make_lock(vendored_sets(files), files), lock_path(data_dir))


def main(argv: Sequence[str] | None = None, *, probe: Probe = hub_reachable) -> int:
    args = parse_args(argv)
    if args.write_lock:
        print(f"testset: wrote {write_lock_from_vendored(args.data)}")
        return 0
    try:
        result = run(
            args.out,
            data_dir=args.data,
            mirrors=dict(args.mirror),
            try_hub=not args.offline,
            allow_mismatch=args.allow_mismatch,
            probe=probe,
        )
    except (SourceUnavailable, LockMismatchError) as e:
        print(f"testset: FAILED: {e}", file=sys.stderr)
        return 2
    for line in result.log:
        print(line)
    for line in describe(result):
        print(line)
    if not result.ok and not result.allowed:
        print(
            f"testset: FAILED: the set does not match data/{LOCK_FILE}; nothing but "
            f"{args.out / 'lock-check.json'} was written. If the change is intended, rewrite the "
            "lock (--write-lock) and commit it; to run on this set anyway, pass --allow-mismatch",
            file=sys.stderr,
        )
        return 1
    state = "matches the lock" if result.ok else "DOES NOT match the lock (allowed)"
    print(f"testset: the set {state}; wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
