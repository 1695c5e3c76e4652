"""Stage ``sampled-replay`` (issue 36, "Results"): the sampling block in replay, each sampled arm
of our engine replayed over the sampled replies under every device model but this machine's.

    python -m adaspark.stages.sampled_replay --params params.yaml --runs runs \\
        --out runs/replay-sampled

For each temperature of ``extra_runs.sampled`` (its first run seed):

1. The replies of one sampled arm (:func:`replies_source`: ``replay.replies_of`` when it was
   sampled, else the first sampled arm of our engine) are labelled for every drafter the
   sampled arms of our engine use (:func:`adaspark.stages.labels.label_replies`): each
   position's label is the target's keyed draw there with the reply's own seed
   (:func:`adaspark.replay.labels.label_prompt_jointly`), so the labels play the part the
   greedy labels play in the replay stage, and a replay commits the same sampled text as the
   run (``tests/replay/test_replay_sampled.py``). ``OUT/labels/``, one store per drafter and
   sampling.
2. Each sampled arm of our engine is replayed over them under each device model of
   ``replay.devices`` but ``cpu-measured`` (``OUT/t<T>/<device>/<arm>/``: trace files,
   ``replies.parquet`` in a run's shape, ``summary.json``). This machine's figures are the
   sampled runs themselves; the others are the reconstructed (and synthetic) devices, each
   labelled as in the replay stage. llama-server's arms are not replayed (its loop is not a
   rule the replay can call).

``OUT/summary.json``: the seed, the replies labelled, the devices with their labels, the labels
made per temperature and every replay's figures (``replays``: temperature, device, arm,
rounds, tokens per round and per second); the report's sampling block reads it
(:func:`adaspark.analysis.sampling.replay_table`). With no sampled arm of our engine (every
preset but ``sampling``) it writes a summary saying so and does nothing else.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from adaspark import io
from adaspark.stages import stage_main

LABELS_DIR = "labels"


def replies_source(ours: list[str], replies_of: str) -> str | None:
    """Whose sampled replies are labelled and replayed: ``replies_of`` (the replay stage's)
    when it was sampled, else the first of ``ours``; None when no arm of our engine was."""
    if replies_of in ours:
        return replies_of
    return ours[0] if ours else None


@stage_main("sampled-replay")
def main(argv: list[str] | None = None) -> int:
    from adaspark.analysis.run_selection import REPLAY_SUMMARY, sampled_parent, temperature_dir
    from adaspark.decoding.round_trace import read_traces
    from adaspark.replay.command import arm_trace_dir, replay_arm, traces_sampling
    from adaspark.replay.device import device_path, load_device
    from adaspark.replay.settings import CPU_MEASURED, read_replay_params
    from adaspark.runs.settings import ArmEntry, arm_config, no_drafter_file
    from adaspark.stages.labels import label_depth, label_replies
    from adaspark.stages.replay import device_entry, shown_path

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--runs", default="runs", type=Path,
                    help="the runs' root (the sampled runs are extra/sampled-t<T>-s<S>/<arm>)")
    ap.add_argument("--out", default="runs/replay-sampled", type=Path)
    a = ap.parse_args(argv)
    cfg, params, s = read_replay_params(a.params)
    spec = (params.get("extra_runs") or {}).get("sampled") or {}
    t0 = time.perf_counter()

    def say(m: str) -> None:
        print(m, file=sys.stderr, flush=True)

    arms = [str(n) for n in spec.get("arms") or ()]
    ours = [n for n in arms if arm_config(cfg, ArmEntry.parse(n)).engine == "ours"]
    skipped = {n: why for n in ours
               if (why := no_drafter_file(cfg, arm_config(cfg, ArmEntry.parse(n))))}
    ours = [n for n in ours if n not in skipped]
    source = replies_source(ours, s.replies_of)
    temperatures = list(spec.get("temperatures") or ())  # as written: they name directories
    seeds = list(spec.get("seeds") or ())
    devices = [d for d in s.devices if d != CPU_MEASURED]
    summary: dict[str, Any] = {"replies_of": source, "seed": seeds[0] if seeds else None,
                               "subset": spec.get("subset"), "arms": ours,
                               "skipped_arms": skipped, "devices": {}, "labels": {},
                               "replays": []}
    if source is None or not temperatures or not seeds or not devices:
        summary["why"] = ("no sampled arm of our engine with a drafter file, temperature, seed "
                          "or device model other than cpu-measured in this preset "
                          "(preset=sampling has them)")
        io.write_json(a.out / REPLAY_SUMMARY, summary)
        print(f"sampled-replay: nothing to replay: {summary['why']}")
        return 0
    files = {d: str(device_path(d)) for d in devices}
    for d in devices:
        summary["devices"][d] = device_entry(load_device(d), shown_path(files[d]))
    depth = label_depth(params)
    n_all, k = len(temperatures) * len(devices) * len(ours), 0
    for temperature in temperatures:
        run_dir = a.runs / sampled_parent(temperature, seeds[0])
        traces = read_traces(arm_trace_dir(run_dir, source))
        sampling, reply_seeds = traces_sampling(traces)
        if sampling is None or float(sampling["temperature"]) != float(temperature):
            raise SystemExit(f"sampled-replay: {run_dir / source} holds greedy replies or "
                             f"another temperature's, not {temperature:g}: rerun the sampled "
                             "stage (`dvc repro sampled`)")
        tag = temperature_dir(temperature)
        done, _ = label_replies(cfg, traces, ours, a.out / LABELS_DIR, depth,
                                lambda m, t=tag: say(f"[{t}] {m}"), source=source,
                                sampling=sampling, seeds=reply_seeds)
        summary["labels"][tag] = {d: {k2: v for k2, v in x.items() if k2 != "identity"}
                                  for d, x in done.items()}
        for dev in devices:
            for name in ours:
                k += 1
                out = a.out / tag / dev / name
                shutil.rmtree(out, ignore_errors=True)
                r = replay_arm(cfg, arm_config(cfg, ArmEntry.parse(name)), run_dir,
                               device=files[dev], out=out, replies_of=source,
                               labels=a.out / LABELS_DIR, engine=False, log=lambda _m: None)
                summary["replays"].append({
                    "temperature": float(temperature), "device": dev, "arm": name,
                    "replies": r["replies"], "rounds": r["rounds"],
                    "tokens_per_round": r["tokens_per_round"],
                    "tokens_per_s": r["tokens_per_s"], "drafted": r["drafted"],
                    "accepted": r["accepted"], "widths": r["widths"]})
                say(f"sampled replay {k}/{n_all}: {name} at T={temperature:g} under {dev}: "
                    f"{r['tokens_per_s']:.1f} tok/s, {r['tokens_per_round']:.2f} tokens per "
                    "round")
    summary["stage_s"] = round(time.perf_counter() - t0, 2)
    io.write_json(a.out / REPLAY_SUMMARY, summary)
    print(f"sampled-replay: {len(ours)} arms x {len(temperatures)} temperatures x "
          f"{len(devices)} device models over {source}'s sampled replies, "
          f"{summary['stage_s']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
