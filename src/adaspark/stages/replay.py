"""Stage ``replay`` (issue 14, "Replay"): the exactness check, then every configured arm
replayed over the labelled replies under every configured device model.

    python -m adaspark.stages.replay --params params.yaml --runs runs/labelled \\
        --labels runs/labels --survey runs/survey --timing runs/extra/instrumented \\
        --out runs/replay

1. ``cpu-measured``: the device model of this machine, fitted from the survey stage's
   ``survey.parquet`` (each width's measured points) with D and the host time from the fast-mode
   instrumented run's round trace (``--timing``; the labelled run's where it has none), written
   to ``OUT/devices/cpu-measured.yaml`` (``adaspark replay device=FILE`` takes it).
2. The exactness check: each of ``replay.labelled_arms`` replayed over its own run under its
   recorded times (``OUT/check/<arm>/``). A replay that is not exact fails the stage: it is a
   bug to find, not a tolerance to widen.
3. Each arm of ``replay.arms`` over ``replay.replies_of``'s replies under each of
   ``replay.devices`` (``OUT/<device>/<arm>/``: the trace files, ``replies.parquet`` in a run's
   shape and the rule's own round log, every record marked as replay with the device model).
   Arms whose drafter has no file are left out and named. Then Figure 5's pair, the pinned 8-
   and 16-row trees with n-gram candidates off (the fig5 stage's arms), over the same replies
   (``OUT/<device>/fig5/w8``, ``w16``), and over Figure 5's own prompts where
   ``replay.fig5_prompts`` (``OUT/<device>/fig5/prompts.parquet``). Figures 5 and 8 in replay
   form are drawn per device model (``OUT/<device>/figures/``).
4. Replay against reality: each arm of ``run_arms`` that is replayed, again under
   ``cpu-measured`` but at the run stage's cap (``run.cap``), over the same conversations
   (``OUT/cpu-measured/at-run-cap/<arm>``; ``summary.json``'s ``reality``), so that the claims
   stage sets it beside the arm's real run.

5. Several requests at once: ``replay.batch_arms`` in a closed loop of each of
   ``replay.batch_clients`` clients under every device model, with the synthetic batch law of
   :mod:`adaspark.replay.batch` (``OUT/batch/points.csv``; none unless the preset sets
   clients: the load preset does).

The labels come from the labels stage only (the engine is never loaded to label here).
``OUT/summary.json`` indexes it all; the report's replay section reads it
(:mod:`adaspark.analysis.replay`).
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from adaspark import io
from adaspark.stages import stage_main

CHECK_DIR = "check"
#: Figure 5's replays (``OUT/<device>/fig5/w8``, ``w16``): below the arms' own directories.
FIG5_DIR = "fig5"
FIG5_WIDTHS = (8, 16)
DEVICES_DIR = "devices"
#: Replays at the run stage's cap under cpu-measured (``OUT/cpu-measured/at-run-cap/<arm>``).
REALITY_DIR = "at-run-cap"
#: The closed-loop batch replay's points (``OUT/batch/points.csv``; issue 37).
BATCH_DIR = "batch"
BATCH_POINTS = "points.csv"


def timing_traces(timing: Path, labelled: Path, arm: str) -> Path:
    """Where cpu-measured's D and host time come from: ``arm``'s fast-mode round trace in
    ``timing`` (the instrumented run, fast kernels as the survey), else the labelled run's
    (exact mode: its draft model catches up one token per decode, so D is longer)."""
    from adaspark.config import ConfigError
    from adaspark.replay.command import arm_trace_dir

    try:
        return arm_trace_dir(timing, arm)
    except ConfigError:
        return arm_trace_dir(labelled, arm)


def timing_arms(cfg: Any, timing: Path) -> list[tuple[str, str | None, list[Any]]]:
    """The arms of ``extra_runs.instrumented.arms`` with fast-mode round traces in ``timing``
    (the instrumented runs; another arm's directory there, from another config, is left out),
    sorted by name: each arm's name, its drafter kind (None for an arm that drafts nothing) and
    traces."""
    from adaspark.arms import make_arm_rule
    from adaspark.config import ConfigError
    from adaspark.decoding.round_trace import read_traces
    from adaspark.replay.command import arm_trace_dir
    from adaspark.runs.settings import ArmEntry, arm_config
    from adaspark.schema import arm_view, scheduler_mapping

    named = set(cfg.extra_runs.instrumented.arms)
    out: list[tuple[str, str | None, list[Any]]] = []
    for d in sorted(p for p in timing.glob("*") if p.is_dir() and p.name in named):
        try:
            arm = arm_config(cfg, ArmEntry.parse(d.name))
            traces = read_traces(arm_trace_dir(timing, d.name))
        except ConfigError:
            continue  # not an arm of this config, or no trace
        view = arm_view(cfg, arm)
        drafts = make_arm_rule(arm, scheduler_mapping(view)).uses_drafter
        if traces:
            out.append((d.name, str(view.drafter.kind) if drafts else None, traces))
    return out


def timing_by_kind(arms: list[tuple[str, str | None, list[Any]]]) -> dict[str, list[Any]]:
    """The instrumented runs' round traces (:func:`timing_arms`) by drafter kind, every
    drafting arm of a kind pooled (its blocks of several sizes): cpu-measured's D per kind."""
    out: dict[str, list[Any]] = {}
    for _name, kind, traces in arms:
        if kind is not None:
            out.setdefault(kind, []).extend(traces)
    return out


def write_device(path: Path, model: Any) -> Path:
    """A device model as a ``conf/device/`` file (one that :func:`load_device` reads back)."""
    raw = dataclasses.asdict(model)
    raw = {k: v for k, v in raw.items() if v is not None and k != "sha256"}  # computed on load
    head = (f"# {model.name}: fitted by the replay stage (adaspark.stages.replay) from this "
            "machine's survey and a run's round trace (`sources` says which); MEASURED here, "
            "not reconstructed.\n")
    from omegaconf import OmegaConf

    return io.write_text(path, head + OmegaConf.to_yaml(OmegaConf.create(raw)))


def shown_path(path: Path | str) -> str:
    """A file as users read it: relative to the working directory (the checkout) when inside
    it, else its name alone, so that no machine's directories show in the report."""
    p = Path(path).resolve()
    try:
        return str(p.relative_to(Path.cwd().resolve()))
    except ValueError:
        return p.name


def device_entry(model: Any, where: str) -> dict[str, Any]:
    return {"name": model.name, "label": model.label, "sha256": model.sha256,
            "description": model.description,
            "paper_target": model.paper_target, "file": where, "max_rows": model.max_rows,
            "draft_ms": model.draft_ms, "host_ms": model.host_ms,
            "verify": dataclasses.asdict(model.verify), "sources": model.sources}


def fig5_prompts(cfg: Any, params: dict[str, Any], labels: Path, device: str, out: Path) -> Path:
    """Figure 5 over its own prompts (labelled by the labels stage): each prompt decoded for
    ``fig5.max_tokens`` tokens at each pinned width, n-gram candidates off, a fresh rule per run
    (the fig5 stage's protocol), priced by ``device``. Writes ``out/prompts.parquet`` with the
    fig5 stage's columns (:data:`adaspark.analysis.figures.fig5.FIG5_COLUMNS`)."""
    import json

    import pandas as pd
    import pyarrow as pa

    from adaspark.analysis.figures.fig5 import FIG5_COLUMNS
    from adaspark.arms import make_arm_rule
    from adaspark.decoding.tree import MAX_ROWS_EXACT
    from adaspark.replay.command import Labeller, pricer_for
    from adaspark.replay.labels import prompt_key
    from adaspark.replay.loop import replay_reply
    from adaspark.replay.settings import FIG5_PROMPTS
    from adaspark.schema import check_arm, scheduler_mapping, target_config
    from adaspark.stages.fig5 import pinned_arm

    spec = json.loads((labels / FIG5_PROMPTS).read_text(encoding="utf-8"))
    pricer = pricer_for(device, [])
    n_ctx = int(target_config(cfg).n_ctx)
    rows = []
    for w in spec["widths"]:
        arm = check_arm(pinned_arm(params, int(w)), f"arms.adaspark-w{w}")
        lab = Labeller(cfg, arm, labels, engine=False)
        lab.close()  # the store only: no engine is loaded here
        for i, p in enumerate(spec["prompts"]):
            have = lab.store.get(p["tokens"])
            if have is None:
                raise RuntimeError(f"Figure 5's prompt {p['prompt']} ({prompt_key(p['tokens'])}) "
                                   f"has no labels in {lab.store.dir}: rerun the labels stage")
            rule = make_arm_rule(arm, scheduler_mapping(lab.view))
            r = replay_reply(rule, have, int(spec["max_tokens"]), pricer.fresh(), seq=i,
                             request_id=p["prompt"], block_positions=lab.block_positions,
                             max_rows=min(pricer.model.max_rows, MAX_ROWS_EXACT), n_ctx=n_ctx)
            rows.append({"context": p["context"], "context_paper": p["context_paper"],
                         "prompt": p["prompt"], "width": int(w), "arm": str(arm.name),
                         "rounds": len(r.rounds), "tokens": len(r.tokens),
                         "decode_s": r.decode_s, "replay": True, "device": pricer.name})
    frame = pd.DataFrame(rows, columns=[*FIG5_COLUMNS, "replay", "device"])
    io.write_json(out / "prompts.json", {"contexts_left_out": spec.get("contexts_left_out", [])})
    return io.write_parquet(out / "prompts.parquet", pa.Table.from_pandas(frame,
                                                                          preserve_index=False))


@stage_main("replay")
def batch_points(cfg: Any, s: Any, runs: Path, labels: Path, files: dict[str, str],
                 skipped: dict[str, str], say: Any) -> list[dict[str, Any]]:
    """``replay.batch_arms`` at each of ``replay.batch_clients`` under every device model
    (:func:`adaspark.replay.batch.replay_arm_load`); an arm without a drafter file is left
    out, as in step 3. One row per arm, device and number of clients."""
    from adaspark.replay.batch import replay_arm_load
    from adaspark.runs.settings import ArmEntry, arm_config

    if not s.batch_clients:
        return []
    labels_arm = arm_config(cfg, ArmEntry.parse(s.replies_of))
    out: list[dict[str, Any]] = []
    for dev, path in files.items():
        for name in [n for n in s.batch_arms if n not in skipped]:
            t = time.perf_counter()
            rows = replay_arm_load(cfg, arm_config(cfg, ArmEntry.parse(name)), runs,
                                   device=path, clients=s.batch_clients,
                                   replies_of=s.replies_of, labels=labels,
                                   replies=s.batch_replies, labels_arm=labels_arm)
            out += rows
            say(f"batch replay: {name} under {dev}: " + ", ".join(
                f"N={r['clients']} {r['aggregate_tps']:.0f} tok/s" for r in rows)
                + f" ({time.perf_counter() - t:.0f} s)")
    return out


def run_turns(params: dict[str, Any]) -> set[tuple[str, str, int]]:
    """The ``(set, conversation, turn)`` the run stage's subset covers (``run.subset``): the
    replies a replay is set beside the real runs on."""
    from adaspark.runs.conversation import plan_subset
    from adaspark.runs.settings import RunSettings
    from adaspark.testset import load_checked_sets

    settings = RunSettings.from_config(params)
    plan = plan_subset(load_checked_sets(settings.testset_dir()), settings.subset)
    return {(p.set_name, p.conversation.name, t) for p in plan for t in range(p.n_turns)}


def main(argv: list[str] | None = None) -> int:
    from adaspark.analysis.replay import screen_summary
    from adaspark.decoding.round_trace import read_traces
    from adaspark.replay.command import replay_arm, survey_device
    from adaspark.replay.device import device_path, load_device
    from adaspark.replay.price_check import price_check
    from adaspark.replay.settings import CPU_MEASURED, read_replay_params
    from adaspark.runs.settings import ArmEntry, arm_config, no_drafter_file
    from adaspark.schema import check_arm
    from adaspark.stages.fig5 import pinned_arm

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--runs", default="runs/labelled", type=Path)
    ap.add_argument("--labels", default="runs/labels", type=Path)
    ap.add_argument("--survey", default="runs/survey", type=Path)
    ap.add_argument("--timing", default="runs/extra/instrumented", type=Path,
                    help="a fast-mode run with round traces (cpu-measured's D and host time)")
    ap.add_argument("--out", default="runs/replay", type=Path)
    a = ap.parse_args(argv)
    cfg, params, s = read_replay_params(a.params)
    t0 = time.perf_counter()

    def say(m: str) -> None:
        print(m, file=sys.stderr, flush=True)

    quiet = lambda _m: None  # noqa: E731  (each replay's own lines; the stage prints its own)

    # 1. the device models, cpu-measured fitted here (D from the instrumented runs, read once)
    instrumented = timing_arms(cfg, a.timing) if CPU_MEASURED in s.devices else []
    devices: dict[str, dict[str, Any]] = {}
    files: dict[str, str] = {}
    for name in s.devices:
        if name == CPU_MEASURED:
            model = survey_device(a.survey / "survey.parquet",
                                  read_traces(timing_traces(a.timing, a.runs, s.replies_of)),
                                  name=CPU_MEASURED, by_kind=timing_by_kind(instrumented))
            path = write_device(a.out / DEVICES_DIR / f"{CPU_MEASURED}.yaml", model)
            model = load_device(str(path))  # the file it wrote is the one replayed
        else:
            path = device_path(name)
            model = load_device(name)
        files[name] = str(path)
        devices[name] = device_entry(model, shown_path(path))
        if name == CPU_MEASURED:  # its prices against the instrumented runs' own rounds
            devices[name]["price_check"] = {
                arm: price_check(traces, model, kind)
                for arm, kind, traces in instrumented}

    # 2. the exactness check
    check: dict[str, Any] = {}
    for i, name in enumerate(s.labelled_arms, 1):
        arm = arm_config(cfg, ArmEntry.parse(name))
        out = a.out / CHECK_DIR / name
        shutil.rmtree(out, ignore_errors=True)
        r = replay_arm(cfg, arm, a.runs, device="recorded", out=out, labels=a.labels,
                       engine=False, log=quiet)
        check[name] = r
        say(f"replay check {i}/{len(s.labelled_arms)}: {name}: {r['rounds_identical']}/"
            f"{r['rounds_compared']} rounds identical, committed identical "
            f"{r['committed_identical']} -> {'EXACT' if r['exact'] else 'NOT EXACT'}")

    # 3. every arm under every device model
    skipped = {n: why for n in s.arms
               if (why := no_drafter_file(cfg, arm_config(cfg, ArmEntry.parse(n))))}
    arms = [n for n in s.arms if n not in skipped]
    replays: dict[str, dict[str, Any]] = {}
    n_all, k = len(arms) * len(s.devices), 0
    for dev in s.devices:
        replays[dev] = {}
        for name in arms:
            k += 1
            arm = arm_config(cfg, ArmEntry.parse(name))
            out = a.out / dev / name
            shutil.rmtree(out, ignore_errors=True)
            r = replay_arm(cfg, arm, a.runs, device=files[dev], out=out,
                           replies_of=s.replies_of, labels=a.labels, engine=False, log=quiet)
            replays[dev][name] = r
            say(f"replay {k}/{n_all}: {name} under {dev}: {r['tokens_per_s']:.1f} tok/s, "
                f"{r['tokens_per_round']:.2f} tokens per round")
        # Figure 5: the pinned 8- and 16-row trees with n-gram candidates off, as the fig5
        # stage runs them, over the same replies
        for w in FIG5_WIDTHS:
            arm = check_arm(pinned_arm(params, w), f"arms.adaspark-w{w}")
            out = a.out / dev / FIG5_DIR / f"w{w}"
            shutil.rmtree(out, ignore_errors=True)
            replay_arm(cfg, arm, a.runs, device=files[dev], out=out, replies_of=s.replies_of,
                       labels=a.labels, engine=False, log=quiet)
        if s.fig5_prompts:
            fig5_prompts(cfg, params, a.labels, files[dev], a.out / dev / FIG5_DIR)
            say(f"replay: Figure 5's prompts under {dev}")
    # 4. replay against reality: each arm the run stage ran on this machine, replayed under
    # cpu-measured at the run stage's cap over the same conversations (analysis.claims)
    reality: dict[str, dict[str, Any]] = {}
    run_cap = int((params.get("run") or {}).get("cap") or 0) or None
    if CPU_MEASURED in s.devices:
        in_run = run_turns(params)
        for name in [n for n in arms if n in (params.get("run_arms") or [])]:
            arm = arm_config(cfg, ArmEntry.parse(name))
            out = a.out / CPU_MEASURED / REALITY_DIR / name
            shutil.rmtree(out, ignore_errors=True)
            reality[name] = replay_arm(cfg, arm, a.runs, device=files[CPU_MEASURED], out=out,
                                       replies_of=s.replies_of, labels=a.labels, engine=False,
                                       log=quiet, cap=run_cap, conversations=in_run
                                       ) | {"cap": run_cap}
            say(f"replay at the run's cap {run_cap}: {name} under {CPU_MEASURED}: "
                f"{reality[name]['tokens_per_s']:.1f} tok/s")
    # 5. several requests at once: the closed-loop batch replay (a synthetic batch law)
    batch = batch_points(cfg, s, a.runs, a.labels, files, skipped, say)
    (a.out / BATCH_DIR / BATCH_POINTS).unlink(missing_ok=True)  # never an earlier run's
    if batch:
        io.write_text(a.out / BATCH_DIR / BATCH_POINTS, io.csv_text(batch))
    from adaspark.analysis.replay import write_figures

    for dev in s.devices:  # Figures 5 and 8 in replay form, one pair per device model
        write_figures(a.out, dev)
    summary = {"replies_of": s.replies_of, "subset": s.subset, "cap": s.cap,
               "runs": str(a.runs), "labels": str(a.labels), "devices": devices,
               "check": check, "replays": replays, "reality": reality,
               "skipped_arms": skipped, "batch_points": len(batch),
               "stage_s": round(time.perf_counter() - t0, 2)}
    io.write_json(a.out / "summary.json", summary)
    print(screen_summary(summary))
    bad = [n for n, r in check.items() if not r["exact"]]
    if bad:
        print(f"replay: the exactness check failed for {', '.join(bad)} (see "
              f"{a.out / CHECK_DIR}/<arm>/summary.json): a replay that is not exact is a bug",
              file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
