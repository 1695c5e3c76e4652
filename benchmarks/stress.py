"""Our server under stress (issue 37): 8 clients x 50 streamed requests against a server with 4
slots and a queue of 2, about a tenth of them left by their client mid-stream, in exact mode.

It checks, each by a written rule (:mod:`adaspark.runs.stress`): no request lost or answered
twice (the client's outcomes against the server's own counts), every completed reply equal to its
prompt's one-at-a-time text (near ties aside, counted), the server up and idle afterwards, its
memory flat over the load, and the requests beyond the queue answered 503 with ``Retry-After``.

Writes ``stress.json`` (settings, each check's verdict and numbers, provenance) and
``requests.csv`` under ``--out`` (default ``runs/benchmarks/stress``). The tiny pair by default
(a few minutes on 2 cores); name the embedded pair for the real target (an hour or more here):

    .venv/bin/python benchmarks/stress.py
    .venv/bin/python benchmarks/stress.py --arm adaspark
    .venv/bin/python benchmarks/stress.py target=embedded drafter=embedded --max-tokens 16
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TINY = ["target=tiny", "drafter=tiny-truncated"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arm", default="chain3")
    ap.add_argument("--slots", type=int, default=4)
    ap.add_argument("--queue", type=int, default=2)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--requests", type=int, default=50, help="per client")
    ap.add_argument("--max-tokens", type=int, default=24)
    ap.add_argument("--cancel-share", type=float, default=0.1)
    ap.add_argument("--pool", type=int, default=16, help="distinct prompts")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--fast", action="store_true", help="fast kernels (no near-tie rule)")
    ap.add_argument("--out", type=Path, default=REPO / "runs" / "benchmarks" / "stress")
    ap.add_argument("--testset", type=Path, default=REPO / "data" / "testset")
    args, overrides = ap.parse_known_args(argv)
    from adaspark.config import compose
    from adaspark.runs.load import prompts
    from adaspark.runs.stress import StressSettings, run_stress

    if args.clients <= args.slots + args.queue:
        ap.error(f"--clients {args.clients} must exceed --slots + --queue "
                 f"({args.slots + args.queue}) for some requests to find the queue full")
    s = StressSettings(arm=args.arm, slots=args.slots, queue=args.queue, clients=args.clients,
                       requests=args.requests, max_tokens=args.max_tokens,
                       cancel_share=args.cancel_share, pool=args.pool, seed=args.seed)
    cfg = compose(overrides or TINY)
    result = run_stress(cfg, s, args.out, prompts(args.testset, s.pool, "specbench"),
                        exact=not args.fast)
    return 0 if all(c["pass"] is not False for c in result["checks"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
