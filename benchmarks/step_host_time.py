"""A shared step's time split (issue 37): llama.cpp's part (the target's decode and the read-out
of its logits) against ours (rules, staging, commits, the rounds' bookkeeping), per request and
step, for requests decoding together in one process (no server, no HTTP threads).

``--requests`` requests of the embedded pair, fast mode, one :class:`~adaspark.decoding.slots.Batch`
(AdaSpark with the batch rule, as the server runs it); ``--warmup`` steps first, then ``--steps``
steps measured from their :class:`~adaspark.decoding.slots.StepRecord` s. Writes
``runs/benchmarks/step_host_time.json`` (one entry per arm: µs per request and step for ours and
the read-out, ms per step for the decode and the drafts, rows per step) and prints a table.

    .venv/bin/python benchmarks/step_host_time.py --arms ar,chain3,adaspark --requests 4
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PROMPTS = ["Write a python function that sorts a list with merge sort.",
           "Explain TCP in two lines.", "def fib(n):", "List five prime numbers and why.",
           "Write a haiku about rust.", "What is a monad?", "Sum of 1..100?",
           "Name three sorting algorithms."]


def measure(arm: str, n: int, steps: int, warmup: int) -> dict[str, float]:
    from adaspark.decoding.drafter.draft_model import DraftModelDrafter
    from adaspark.decoding.loop import RequestSession
    from adaspark.decoding.slots import Batch, SlotTarget
    from adaspark.model_files import verified_path
    from adaspark.rules.adaspark.batch import BatchChooser
    from adaspark.rules.adaspark.rule import AdaSparkRule
    from adaspark.rules.base import make_rule

    rules = {"ar": lambda: make_rule("ar"), "chain3": lambda: make_rule("chain", positions=3),
             "adaspark": AdaSparkRule}
    if arm not in rules:
        raise SystemExit(f"--arms: {arm!r} is not one of {sorted(rules)}")
    target = SlotTarget(verified_path("qwen2.5-coder-1.5b-instruct-q4_k_m"), 8192, exact=False,
                        n_slots=n)
    # one draft-model context with a sequence per request, as the server builds it in fast mode
    drafters = ([None] * n if arm == "ar" else
                DraftModelDrafter(verified_path("qwen2.5-coder-0.5b-instruct-q4_k_m"), 8192,
                                  exact=False, n_seqs=n).sequences())
    try:
        batch = Batch(target, drafters, 4,
                      divider=BatchChooser() if arm == "adaspark" else None)
        for i in range(n):
            prompt = target.tokenize(PROMPTS[i % len(PROMPTS)])
            batch.admit(RequestSession(rules[arm](), prompt, f"r{i}"), warmup + steps + 64)
        for _ in range(warmup):
            batch.step()
        batch.steps.clear()
        for _ in range(steps):
            batch.step()
        st = batch.steps
        mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
        return {"ours_us_per_request_step": mean([s.host_s / len(s.slots) for s in st]) * 1e6,
                "readout_us_per_request_step":
                    mean([s.readout_s / len(s.slots) for s in st]) * 1e6,
                "decode_ms_per_step": mean([s.decode_s for s in st]) * 1e3,
                "draft_ms_per_step": mean([s.draft_s for s in st]) * 1e3,
                "rows_per_step": mean([s.total_rows for s in st]), "steps": len(st)}
    finally:
        for d in drafters:
            if d is not None:
                d.close()
        target.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arms", default="ar,chain3,adaspark")
    ap.add_argument("--requests", type=int, default=4)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--out", type=Path, default=REPO / "runs" / "benchmarks" /
                    "step_host_time.json")
    a = ap.parse_args(argv)
    from adaspark import provenance
    from adaspark.io import write_json

    arms = {arm: measure(arm, a.requests, a.steps, a.warmup) for arm in a.arms.split(",")}
    write_json(a.out, {"requests": a.requests, "steps": a.steps, "warmup": a.warmup,
                       "arms": arms, "llama": provenance.llama_build(),
                       "versions": provenance.versions(), "git": provenance.git_state(),
                       "machine": {"cpus": os.cpu_count(), "host": os.uname().nodename}})
    print(f"{'arm':<10}{'ours µs':>9}{'read-out µs':>13}{'decode ms':>11}{'draft ms':>10}"
          f"{'rows':>6}   (per request and step; ms per step)")
    for arm, m in arms.items():
        print(f"{arm:<10}{m['ours_us_per_request_step']:>9.0f}"
              f"{m['readout_us_per_request_step']:>13.0f}{m['decode_ms_per_step']:>11.1f}"
              f"{m['draft_ms_per_step']:>10.1f}{m['rows_per_step']:>6.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
