"""Plain decode on the tree target's context against the one-sequence target's, interleaved.

Issue 12 (plain-decode parity): the ``ar`` arm's target holds one sequence, as llama-server's
``--parallel 1`` context does (``Target(plain=True)``); every other arm's target holds 64 in one
unified cache. Both load the same model in one fast-mode process, prefill the same prompt (random
tokens of ``--context`` length) and then decode token by token, alternating which goes first, so
a busy machine's drift falls on both. Prints the median verify time of each and the median of
the per-token speed ratios (plain over tree); ``--out`` writes them as JSON.

    .venv/bin/python benchmarks/plain_context.py --context 3000 --tokens 200 target=tiny
    .venv/bin/python benchmarks/plain_context.py --context 200,1500,3000 --out FILE
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import numpy as np


def measure(targets: dict, context: int, n_tokens: int, seed: int) -> dict:
    from adaspark.decoding.tree import chain_tree

    rng = np.random.default_rng(seed)
    prompt = [int(x) for x in rng.integers(100, 20000, context)]
    times: dict[str, list[float]] = {k: [] for k in targets}
    tokens: dict[str, list[int]] = {k: [] for k in targets}
    for t in targets.values():
        t.reset()
        t.prefill(prompt)
    names = list(targets)
    for i in range(n_tokens):
        for k in names[i % 2:] + names[: i % 2]:
            t = targets[k]
            res = t.verify(chain_tree(t.committed[-1], []))
            tokens[k].extend(t.commit(res).tokens)
            times[k].append(res.verify_s)
    ratios = [a / b for a, b in zip(times["tree"], times["plain"], strict=True)]
    return {"context": context, "tokens": n_tokens,
            "median_ms": {k: statistics.median(v) * 1e3 for k, v in times.items()},
            "plain_over_tree_speed": statistics.median(ratios),
            "same_tokens": tokens["tree"] == tokens["plain"]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--context", default="3000", help="comma-separated prompt lengths")
    ap.add_argument("--tokens", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path)
    ap.add_argument("overrides", nargs="*", help="Hydra overrides (target=..., threads=...)")
    a = ap.parse_args(argv)

    from adaspark import model_files
    from adaspark.config import compose
    from adaspark.decoding.engine import Target
    from adaspark.schema import target_config

    cfg = compose(a.overrides)
    tcfg = target_config(cfg)
    path, _ = model_files.resolve(tcfg)
    contexts = [int(x) for x in a.context.split(",") if x.strip()]
    n_ctx = min(int(tcfg.n_ctx), max(contexts) + a.tokens + 256)
    targets = {name: Target(path, n_ctx, exact=False, threads=cfg.get("threads"), plain=plain)
               for name, plain in (("tree", False), ("plain", True))}
    out = []
    for c in contexts:
        r = measure(targets, c, a.tokens, a.seed)
        out.append(r)
        print(f"context {c:5d}: tree {r['median_ms']['tree']:7.2f} ms, plain "
              f"{r['median_ms']['plain']:7.2f} ms, plain/tree speed "
              f"{r['plain_over_tree_speed']:.3f}, same tokens {r['same_tokens']}",
              file=sys.stderr)
    if a.out is not None:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps({"model": str(path), "results": out}, indent=1) + "\n")
    for t in targets.values():
        t.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
