"""Throughput and latency under load (issue 37): our server with ``max_concurrent=N`` against
llama-server with ``--parallel N``, closed loop (N clients, each sending its next request when its
last one ends) or open loop (requests arriving at a set rate, Poisson).

Requests: the first user turn of every conversation of the ``short`` subset and every Spec-Bench
conversation (tools dropped: a single turn each), in a fixed order, cycled to ``--requests`` per
point, each streamed with ``max_tokens=--max-tokens``. The load generator is a thread per client
over the project's own client (:class:`adaspark.serving.client.ChatClient`, the client clock of
every run), not an outside load tool: the times are then measured as every other result here is.

Per arm and point: aggregate output tok/s (tokens of every reply over the wall time from the first
request sent to the last reply done), per-request decode tok/s (client clock), time to first
token and inter-token latency (a request's mean gap between token events) at p50 and p99 over
requests, queue wait (our server's ``timings.queue_ms``) and mean rows per step and requests per
step (ours). Our servers keep their store in one directory across the points of an arm (slot 0's
file is the one-slot server's: AdaSpark's learned state is carried from point to point).

Writes, under ``--out`` (default ``runs/benchmarks/load``), what
:func:`adaspark.runs.load.run_points` writes (its docstring says what each figure is): one row per
request, one per point, the settings and provenance. A killed benchmark resumes; other settings
need a new ``--out``. The pipeline's ``load`` stage runs the same points from the ``load`` config
group (``dvc exp run -S preset=load``).

    .venv/bin/python benchmarks/load.py --arms ar,chain3,adaspark,llamacpp-ar,llamacpp-chain \
        --clients 1,2,4,8 --requests 40
    .venv/bin/python benchmarks/load.py --mode open --rates 0.5,1,2 --clients 8
    .venv/bin/python benchmarks/load.py target=tiny drafter=tiny-truncated --requests 8
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arms", default="ar,chain3,adaspark,llamacpp-ar,llamacpp-chain")
    ap.add_argument("--mode", choices=["closed", "open"], default="closed")
    ap.add_argument("--clients", default="1,2,4,8",
                    help="closed: clients per point; open: the servers' slots")
    ap.add_argument("--rates", default="0.5,1,2", help="open loop: requests per second")
    ap.add_argument("--requests", type=int, default=40)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--source", choices=["short+specbench", "specbench"],
                    default="short+specbench")
    ap.add_argument("--out", type=Path, default=REPO / "runs" / "benchmarks" / "load")
    ap.add_argument("--testset", type=Path, default=REPO / "runs" / "testset")
    args, overrides = ap.parse_known_args(argv)
    from adaspark.config import compose
    from adaspark.runs.load import LoadSettings, run_points

    settings = LoadSettings(
        arms=tuple(args.arms.split(",")), clients=tuple(int(x) for x in args.clients.split(",")),
        rates=tuple(float(x) for x in args.rates.split(",")), requests=args.requests,
        max_tokens=args.max_tokens, source=args.source, mode=args.mode, seed=args.seed)
    run_points(compose(overrides), settings, args.out, args.testset)
    return 0


if __name__ == "__main__":
    sys.exit(main())
