"""Each named CHOICE of the scheduler, both settings, on the simulator (issue 12).

For every CHOICE the paper's words decide between (``store.persist_fast_state``,
``cost_model.level_against``, ``acceptance_model.gate_counts``, ``cost_model.cold_start``,
``width_choice.gain_reference``), the AdaSpark arm (and ``adaspark-w1``, for the cold start) runs
on three simulated deployments, several seeds each, and the run's rate (tokens per simulated
second: deterministic, no wall clock) is reported per setting with the ratio to the file's
setting. ``persist_fast_state`` only matters across a restart, so every run stops after half its
requests, saves the store and continues with a new scheduler loaded from it; the rate is the
second half's.

Deployments: ``gpu-steps`` (8-16 verified rows cost about one, as on the paper's GPUs),
``cpu-embedded`` (this CPU's survey of the embedded target: 1 row 39 ms, 8 rows 379 ms, 32 rows
1,019 ms; D = 60 ms) and ``context-growth`` (a cost rising with rows and context, prompts of
300 to 6,000 tokens). A simulated result, labelled so wherever it is quoted.

    .venv/bin/python benchmarks/scheduler_choices.py [--out runs/benchmarks/scheduler_choices.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from adaspark.rules.adaspark.config import load_config
from adaspark.rules.adaspark.rule import AdaSparkRule
from adaspark.rules.adaspark.simulator import (
    DrafterProcess,
    Environment,
    RisingCost,
    Simulator,
    StepCost,
    TextProcess,
    rate_of,
)

#: (section, key, settings): the first setting is compared against each other one.
CHOICES: list[tuple[str, str, list[Any]]] = [
    ("store", "persist_fast_state", [True, False]),
    ("cost_model", "level_against", ["current_law", "at_sample"]),
    ("acceptance_model", "gate_counts", ["squared_gradients", "updates"]),
    ("cost_model", "cold_start", ["ladder", "bounded"]),
    ("width_choice", "gain_reference", ["narrowest_offered", "fixed"]),
]


def deployments(seed: int) -> dict[str, tuple[Environment, list[int]]]:
    text = TextProcess(vocab=3000, copy_start=0.02, copy_continue=0.9)
    return {
        "gpu-steps": (Environment(
            cost=StepCost(tops=(8, 16, 32, 64), levels=(0.025, 0.027, 0.036, 0.060),
                          slope=0.02, plain=0.024),
            drafter=DrafterProcess(B=8, K=8, alpha=1.0), text=text, fixed=0.008,
            seed=seed), [400, 1600, 6000]),
        "cpu-embedded": (Environment(
            cost=StepCost(tops=(2, 4, 8, 16, 32, 64),
                          levels=(0.074, 0.136, 0.379, 0.440, 1.019, 2.0), plain=0.039),
            drafter=DrafterProcess(B=4, K=8, alpha=0.5), text=text, fixed=0.060,
            seed=seed), [300, 800, 2000]),
        "context-growth": (Environment(
            cost=RisingCost(base=0.020, per_row=0.0006, slope=0.05),
            drafter=DrafterProcess(B=8, K=8, alpha=1.0), text=text, fixed=0.010,
            seed=seed), [300, 2000, 6000]),
    }


def run_with_restart(env: Environment, prompts: list[int], constants: dict[str, Any],
                     arm: dict[str, Any], requests: int, tokens: int) -> float:
    """Half the requests, a restart from the store, the other half: the second half's rate."""
    with tempfile.TemporaryDirectory() as tmp:
        store = str(Path(tmp) / "store.json")
        half = requests // 2
        sim = Simulator(env)
        sim.run(AdaSparkRule(store=store, constants=constants, **arm), range(half), prompts,
                tokens)
        after = sim.run(AdaSparkRule(store=store, constants=constants, **arm),
                        range(half, requests), prompts, tokens)
    return rate_of(after)


def survey(seeds: list[int], requests: int, tokens: int) -> dict[str, Any]:
    base = load_config("adaspark")
    out: dict[str, Any] = {}
    for section, key, settings in CHOICES:
        arms = {"adaspark": {}}
        if key == "cold_start":
            arms["adaspark-w1"] = {"offer_width1": True}
        per: dict[str, Any] = {}
        for arm_name, arm in arms.items():
            for dep in deployments(0):
                rates: dict[str, list[float]] = {str(v): [] for v in settings}
                for seed in seeds:
                    env, prompts = deployments(seed)[dep]
                    for v in settings:
                        rates[str(v)].append(run_with_restart(
                            env, prompts, {section: {key: v}}, arm, requests, tokens))
                ref = str(settings[0])
                per[f"{arm_name}/{dep}"] = {
                    "rate_mean": {v: statistics.fmean(r) for v, r in rates.items()},
                    "ratio_to_" + ref: {v: statistics.fmean(a / b for a, b in
                                                            zip(r, rates[ref], strict=True))
                                        for v, r in rates.items() if v != ref},
                    "seeds": seeds,
                }
                print(f"{section}.{key} {arm_name}/{dep}: "
                      + ", ".join(f"{v} {statistics.fmean(r):.2f}" for v, r in rates.items()),
                      file=sys.stderr)
        out[f"{section}.{key}"] = {"file_setting": getattr(getattr(base, section), key),
                                   "settings": [str(v) for v in settings], "runs": per}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="runs/benchmarks/scheduler_choices.json")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--requests", type=int, default=12)
    ap.add_argument("--tokens", type=int, default=200)
    a = ap.parse_args(argv)
    result = {"label": "simulated (adaspark.rules.adaspark.simulator): not a measurement",
              "requests": a.requests, "tokens_per_request": a.tokens,
              "choices": survey(list(range(a.seeds)), a.requests, a.tokens)}
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"written to {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
