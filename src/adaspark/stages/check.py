"""Stage ``check``, after every arm's run: fail loudly unless the runs are complete and every
speculative arm really speculated (issue 5; §4.1's exclusions counted as Table 4 counts them).

    python -m adaspark.stages.check --params params.yaml --runs runs/arms --out runs/check.json

For each entry of ``run_arms`` (its directory ``<runs>/<entry>``) it requires:

* no crash (no ``crash.json``) and a finished run (``summary.json``), made for the subset and cap
  the params name now;
* a row for every (conversation, turn) of the subset, and a second row for each tool turn whose
  first reply called a tool; no reply twice (texts may differ between arms: Table 10 counts that);
* for every speculative arm, drafted candidates in every reply of 32 tokens or more (llama-server
  arms: from its ``draft_n`` totals). An arm that offers width 1 (``adaspark-w1``) is exempt and
  reports its share of width-1 rounds instead.

It reports, per arm and in total, the counts of cut, looped and single-delta replies, and writes
everything to ``--out``. Exit status 1 names every problem.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from adaspark.config_check import read_params
from adaspark.io import write_json
from adaspark.runs.conversation import Planned, plan_subset
from adaspark.runs.rows import CUT, LOOPED, SINGLE_DELTA
from adaspark.runs.settings import (
    ArmEntry,
    RunError,
    RunSettings,
    arm_config,
    no_drafter_file,
)
from adaspark.runs.store import CRASH_FILE, NOT_RUN_FILE, RUN_FILE, SUMMARY_FILE, ResultStore
from adaspark.stages import stage_main
from adaspark.testset import SetFile, load_checked_sets

#: Replies at least this long must have drafted in a speculative arm.
MIN_DRAFT_TOKENS = 32


@dataclass
class ArmCheck:
    entry: str
    problems: list[str] = field(default_factory=list)
    replies: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    speculative: bool = False
    width1_exempt: bool = False
    width1_share: float | None = None
    after_resume: int = 0  # replies made by the server of a resumed run
    not_run: str | None = None  # why the run stage left the arm out (no drafter file)


def expected_keys(plan: list[Planned], rows: dict[tuple[str, str, int, int], dict[str, Any]]
                  ) -> tuple[list[tuple[str, str, int, int]], list[str]]:
    """The replies the subset asks for, given what the arm's first replies did."""
    keys, missing = [], []
    for p in plan:
        for ti, turn in enumerate(p.conversation.turns[: p.n_turns]):
            k0 = (p.set_name, p.conversation.name, ti, 0)
            keys.append(k0)
            r0 = rows.get(k0)
            if r0 is None:
                missing.append(f"{p.set_name}/{p.conversation.name} turn {ti}")
                continue
            if turn.result is not None and r0["n_tool_calls"] > 0:
                k1 = (p.set_name, p.conversation.name, ti, 1)
                keys.append(k1)
                if k1 not in rows:
                    missing.append(f"{p.set_name}/{p.conversation.name} turn {ti} (the answer "
                                   "after the tool result)")
    return keys, missing


def check_arm(cfg: Any, entry_text: str, run_dir: Path, settings: RunSettings,
              sets: list[SetFile]) -> ArmCheck:
    entry = ArmEntry.parse(entry_text)
    res = ArmCheck(entry.entry)
    if not run_dir.is_dir():
        res.problems.append(f"no run directory {run_dir}: the arm did not run")
        return res
    if (run_dir / NOT_RUN_FILE).exists():  # the run stage left it out (its drafter has no file)
        res.not_run = no_drafter_file(cfg, arm_config(cfg, entry))
        if res.not_run is None:
            res.problems.append(f"{run_dir / NOT_RUN_FILE} says the arm was not run, but its "
                                "drafter file is set now: run its stage again")
        return res
    if (run_dir / CRASH_FILE).exists():
        crash = json.loads((run_dir / CRASH_FILE).read_text())
        res.problems.append(f"crashed: {crash.get('error')}")
    if not (run_dir / SUMMARY_FILE).exists():
        res.problems.append("the run did not finish (no summary.json)")
    if not (run_dir / RUN_FILE).exists():
        res.problems.append("no run.json: not a run directory")
        return res
    fp = json.loads((run_dir / RUN_FILE).read_text()).get("fingerprint", {})
    ran = fp.get("run", {})
    for key in ("subset", "cap"):
        if ran.get(key) != getattr(settings, key):
            res.problems.append(f"the run used {key}={ran.get(key)!r}, the params say "
                                f"{getattr(settings, key)!r}: run it again")
    arm = arm_config(cfg, entry)
    res.speculative = arm.speculative
    res.width1_exempt = bool(getattr(arm.rule, "offer_width1", False))
    rows_list = ResultStore(run_dir).rows()
    rows: dict[tuple[str, str, int, int], dict[str, Any]] = {}
    for r in rows_list:
        k = (r["set"], r["conversation"], r["turn"], r["reply"])
        if k in rows:
            res.problems.append(f"reply {k} stored twice")
        rows[k] = r
    plan = plan_subset(sets, settings.subset)
    keys, missing = expected_keys(plan, rows)
    for m in missing:
        res.problems.append(f"no reply for {m}")
    extra = set(rows) - set(keys)
    for k in sorted(extra):
        res.problems.append(f"reply {k} is not part of subset {settings.subset}")
    res.replies = len(rows)
    statuses = [r["status"] for r in rows.values()]
    res.counts = {s: statuses.count(s) for s in (CUT, LOOPED, SINGLE_DELTA)}
    res.after_resume = sum(int(r.get("after_resume") or 0) for r in rows.values())
    if res.speculative:
        if res.width1_exempt:
            n_rounds = sum(r["server_rounds"] for r in rows.values()
                           if r["server_rounds"] == r["server_rounds"])
            n_w1 = sum(r["server_width1_rounds"] for r in rows.values()
                       if r["server_width1_rounds"] == r["server_width1_rounds"])
            res.width1_share = n_w1 / n_rounds if n_rounds else None
        else:
            for k, r in rows.items():
                if r["completion_tokens"] >= MIN_DRAFT_TOKENS and r["server_drafted"] <= 0:
                    res.problems.append(
                        f"reply {k} has {r['completion_tokens']} tokens but drafted nothing "
                        "(is the drafter loaded? for llama-server, check --spec-type in "
                        f"{run_dir / 'server.log'})")
    return res


def check_runs(cfg: Any, runs_dir: Path, sets: list[SetFile] | None = None) -> dict[str, Any]:
    settings = RunSettings.from_config(cfg)
    sets = sets if sets is not None else load_checked_sets(settings.testset_dir())
    entries = [str(e) for e in cfg.get("run_arms") or []]
    if not entries:
        raise RunError("run_arms is empty: nothing to check")
    checks = [check_arm(cfg, e, runs_dir / e, settings, sets) for e in entries]
    totals = {s: sum(c.counts.get(s, 0) for c in checks) for s in (CUT, LOOPED, SINGLE_DELTA)}
    return {
        "ok": not any(c.problems for c in checks),
        "subset": settings.subset, "cap": settings.cap,
        "totals": totals,
        "arms": {c.entry: {"ok": not c.problems, "problems": c.problems, "replies": c.replies,
                           "counts": c.counts, "speculative": c.speculative,
                           "width1_exempt": c.width1_exempt, "width1_share": c.width1_share,
                           "after_resume": c.after_resume, "not_run": c.not_run}
                 for c in checks},
    }


@stage_main("check")
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--runs", default="runs/arms", type=Path)
    ap.add_argument("--out", default="runs/check.json", type=Path)
    a = ap.parse_args(argv)
    cfg = read_params(a.params)
    try:
        report = check_runs(cfg, a.runs)
    except (RunError, FileNotFoundError) as e:
        print(f"check: {e}", file=sys.stderr)
        return 1
    write_json(a.out, report, ensure_ascii=True)
    for entry, r in report["arms"].items():
        if r["not_run"] is not None:
            print(f"check: {entry}: not run: {r['not_run']}")
            continue
        c = r["counts"]
        extra = ("" if r["width1_share"] is None
                 else f", width-1 rounds {100 * r['width1_share']:.1f}%")
        if r["after_resume"]:
            extra += (f", {r['after_resume']} made by a resumed run (for llama-server arms its "
                      "prompt cache started empty, so such a reply may differ from an "
                      "uninterrupted run's at a near tie)")
        print(f"check: {entry}: {r['replies']} replies, {c.get(CUT, 0)} cut, "
              f"{c.get(LOOPED, 0)} looped, {c.get(SINGLE_DELTA, 0)} single-delta{extra}"
              f"{'' if r['ok'] else ' -- FAILED'}")
        for p in r["problems"]:
            print(f"check: FAILED {entry}: {p}", file=sys.stderr)
    t = report["totals"]
    print(f"check: all arms: {t[CUT]} cut, {t[LOOPED]} looped, {t[SINGLE_DELTA]} single-delta")
    if not report["ok"]:
        print("check: FAILED (see above)", file=sys.stderr)
        return 1
    print("check: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
