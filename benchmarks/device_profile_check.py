"""Random weights against the real model: does a device profile price verifies as the real
target does (issue 16, "Device cost profiles")?

Runs, one after the other on an idle machine, (1) the survey stage on the real embedded pair
(``python -m adaspark.stages.survey``, the default preset's widths and contexts) and (2)
``scripts/device_profile.sh`` on the embedded target's shape file (random weights, this machine's
backend) at the contexts the real survey measured, with the same widths, passes and rounds; then
sets each (context, width) median of the random-weight run beside the real one.

Writes ``<out>/real/`` (the survey stage's files), ``<out>/random/`` (the profile's files, with
the source tarball it was built from) and ``<out>/check.json``: per context and width both
medians and their ratio, per width the geometric mean ratio over contexts, and the Eq. (3) fits
of both as device models.

    .venv/bin/python benchmarks/device_profile_check.py [--out runs/benchmarks/device_profile]
        [--reuse]   # keep a finished real or random part from an earlier run
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHAPES = REPO / "data" / "devices" / "shapes"
TARGET_SHAPE = SHAPES / "qwen2.5-coder-1.5b-instruct-q4_k_m.json"


def sh(argv: list[str], **kw: object) -> None:
    print("+ " + " ".join(argv), file=sys.stderr, flush=True)
    subprocess.run(argv, check=True, cwd=REPO, **kw)  # type: ignore[call-overload]


def median(xs: list[float]) -> float:
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


def medians(rows: list[dict]) -> dict[tuple[int, int], float]:
    by: dict[tuple[int, int], list[float]] = {}
    for r in rows:
        if r["kept"]:
            by.setdefault((int(r["context"]), int(r["width"])), []).append(float(r["verify_ms"]))
    return {k: median(v) for k, v in by.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=REPO / "runs" / "benchmarks" / "device_profile")
    ap.add_argument("--params", type=Path, default=REPO / "params.yaml")
    ap.add_argument("--reuse", action="store_true")
    a = ap.parse_args()
    py = sys.executable
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    real, rand = a.out / "real", a.out / "random"
    t0 = time.perf_counter()
    if not (REPO / "runs" / "testset" / "subsets.json").is_file():
        sh([py, "-m", "adaspark.stages.testset", "--out", "runs/testset", "--offline"], env=env)
    if not (a.reuse and (real / "survey.json").is_file()):
        sh([py, "-m", "adaspark.stages.survey", "--params", str(a.params), "--out", str(real)],
           env=env)
    t_real = time.perf_counter() - t0
    meta = json.loads((real / "survey.json").read_text())
    settings = meta.get("settings") or meta.get("meta", {}).get("settings")
    contexts = sorted({int(p["context"]) for p in meta["prompts"]})
    widths = [int(w) for w in meta["widths_measured"]]
    t1 = time.perf_counter()
    if not (a.reuse and (rand / "device.yaml").is_file()):
        tarball = a.out / "llama-src.tar.gz"
        sh([py, "-m", "adaspark.cli", "device-source", f"out={tarball}"], env=env)
        args = (f"--widths {','.join(map(str, widths))} --contexts {','.join(map(str, contexts))}"
                f" --passes {settings['passes']} --rounds {settings['rounds']} --dropped "
                f"{settings['dropped_rounds']} --block-positions {settings['block_positions']}"
                " --name cpu-random-check")
        sh(["bash", "scripts/device_profile.sh", str(tarball), str(TARGET_SHAPE), str(rand)],
           env={**env, "ADASPARK_BACKEND": "cpu", "PROFILE_ARGS": args})
    t_rand = time.perf_counter() - t1
    import pandas as pd

    real_rows = pd.read_parquet(real / "survey.parquet").to_dict("records")
    rand_rows = [json.loads(x) for x in (rand / "survey.jsonl").read_text().splitlines()]
    m_real, m_rand = medians(real_rows), medians(rand_rows)
    cells = []
    for (c, w), v in sorted(m_real.items()):
        r = m_rand.get((c, w))
        if r is not None:
            cells.append({"context": c, "width": w, "real_ms": round(v, 2),
                          "random_ms": round(r, 2), "ratio": round(r / v, 3)})
    per_width = {}
    for w in widths:
        rs = [x["ratio"] for x in cells if x["width"] == w]
        if rs:
            per_width[str(w)] = round(math.exp(sum(map(math.log, rs)) / len(rs)), 3)
    all_r = [x["ratio"] for x in cells]
    out = {"what": "random-weight profile of the embedded target against the real model's "
                   "survey, this machine, CPU backend, same widths/contexts/passes/rounds",
           "contexts": contexts, "widths": widths, "cells": cells,
           "per_width_geomean_ratio": per_width,
           "overall_geomean_ratio": round(math.exp(sum(map(math.log, all_r)) / len(all_r)), 3)
           if all_r else None,
           "ratio_range": [min(all_r), max(all_r)] if all_r else None,
           "real_s": round(t_real, 1), "random_s": round(t_rand, 1),
           "random_profile": json.loads((rand / "profile.json").read_text()).get("timings")}
    (a.out / "check.json").write_text(json.dumps(out, indent=1))
    print(f"{'ctx':>6} {'width':>5} {'real ms':>9} {'random ms':>9} {'ratio':>6}")
    for x in cells:
        print(f"{x['context']:>6} {x['width']:>5} {x['real_ms']:>9.1f} {x['random_ms']:>9.1f} "
              f"{x['ratio']:>6.3f}")
    print(f"per width (geometric mean over contexts): {per_width}; overall "
          f"{out['overall_geomean_ratio']}; real {t_real:.0f} s, random {t_rand:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
