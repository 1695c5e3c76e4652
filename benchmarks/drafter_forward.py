"""A round's drafting time by drafter kind (§2.1; issue 13's report): one DSpark block forward
against the draft model's B forwards, for the same B and K, on the same target and prompt.

The DSpark file has random weights of the target's shape (``adaspark dspark-file kind=random``:
its speed does not depend on the weights); the draft model is the composed ``drafter`` group (the
embedded pair by default). Both draft at the same anchor after the same prompt, fast kernels (as
deployed), each block ``--reps`` times after ``--warmup`` dropped ones; the time is the drafter's
own ``Block.draft_s`` (what the round log records as Figure 7's draft segment). A draft model's
repeated block at one anchor re-decodes the anchor and B - 1 picks each time, as in a round that
accepted nothing; a DSpark round's injection of its committed rows (one row then) is left out.

Writes ``<out>.json``: per kind the median and quartiles in ms, the ratio, B, K, the prompt's
length, the files' sha256 (the random file's is recorded, not kept), the machine and versions.

    .venv/bin/python benchmarks/drafter_forward.py [--block 8] [--reps 30] [--prompt-tokens 400]
        [--out runs/benchmarks/drafter_forward] [overrides, e.g. target=tiny drafter=tiny-self]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def quartiles_ms(seconds: list[float]) -> dict[str, float]:
    q = statistics.quantiles(seconds, n=4) if len(seconds) > 1 else [seconds[0]] * 3
    return {"median_ms": 1e3 * statistics.median(seconds), "q1_ms": 1e3 * q[0],
            "q3_ms": 1e3 * q[2], "n": len(seconds)}


def time_blocks(drafter, committed: list[int], block: int, reps: int, warmup: int) -> list[float]:
    times = []
    for i in range(warmup + reps):
        b = drafter.draft(list(committed), block)
        if i >= warmup:
            times.append(b.draft_s)
    return times


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--block", type=int, default=8, help="B: positions per block (default 8)")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--prompt-tokens", type=int, default=400)
    ap.add_argument("--out", default=str(REPO / "runs" / "benchmarks" / "drafter_forward"))
    ap.add_argument("overrides", nargs="*", help="config overrides, e.g. target=tiny")
    a = ap.parse_args(argv)
    if "GGML_CPU_TILED_MM" in os.environ:  # fast kernels: the switch is read per process
        env = {k: v for k, v in os.environ.items() if k != "GGML_CPU_TILED_MM"}
        os.execve(sys.executable, [sys.executable, *sys.argv], env)

    from adaspark import arms, model_files, provenance
    from adaspark.analysis.report import machine_info
    from adaspark.config import compose
    from adaspark.decoding.drafter import dspark_file as dsf
    from adaspark.io import write_json
    from adaspark.schema import check_arm
    from benchmarks.verify_cost import context_prompts

    results: dict[str, dict] = {}
    files: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        cfg = compose(["arm=chain3", *a.overrides])
        tpath, _ = model_files.resolve(cfg.target)
        dsp = dsf.write_random(tpath, Path(tmp) / "random.gguf", seed=0,
                               shape=dsf.DrafterShape(block_size=a.block))
        runs = {
            "draft-model": compose(["arm=chain3", *a.overrides,
                                    f"drafter.block_positions={a.block}"]),
            "dspark": compose(["arm=chain3", *a.overrides, "drafter=dspark",
                               f"drafter.path={dsp}",
                               f"drafter.candidates_per_position="
                               f"{cfg.drafter.candidates_per_position}"]),
        }
        for kind, c in runs.items():
            parts = arms.build(c, check_arm(c.arm, "arm"), exact=False)
            try:
                t, d = parts.target, parts.drafter
                assert d is not None
                prompt = context_prompts(lambda s, t=t: t.tokenize(s, add_special=False),
                                         [a.prompt_tokens])[a.prompt_tokens]
                t.prefill(prompt)
                d.begin(prompt)
                secs = time_blocks(d, t.committed, a.block, a.reps, a.warmup)
                results[kind] = quartiles_ms(secs) | {"K": int(d.top_k)}
                files[kind] = {k: v for k, v in parts.models.get("drafter", {}).items()}
                files[kind]["sha256"] = files[kind].get("sha256") or \
                    model_files.recorded_sha256(Path(files[kind]["path"]))
                files["target"] = parts.models["target"]
                print(f"{kind}: B={a.block} median {results[kind]['median_ms']:.1f} ms "
                      f"(q1 {results[kind]['q1_ms']:.1f}, q3 {results[kind]['q3_ms']:.1f})",
                      file=sys.stderr, flush=True)
            finally:
                parts.close()
    out = {
        "what": "one round's drafting time by drafter kind, fast kernels: a DSpark block "
                "forward (random weights of the target's shape) against the draft model's B "
                "forwards",
        "block": a.block, "prompt_tokens": a.prompt_tokens, "reps": a.reps,
        "warmup": a.warmup, "kinds": results,
        "draft_model_over_dspark": results["draft-model"]["median_ms"]
        / results["dspark"]["median_ms"],
        "files": files, "machine": machine_info(),
        "provenance": provenance.run_metadata({"overrides": a.overrides}, {}),
    }
    path = write_json(Path(a.out).with_suffix(".json"), out, default=str)
    print(f"draft model / DSpark: {out['draft_model_over_dspark']:.2f}x  -> {path}",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    sys.exit(main())
