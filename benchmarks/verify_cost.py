"""Verify cost of real drafter trees against width and context (§3.2, the data of Figure 3).

For each context (about 443, 1,596 and 8,444 tokens of long documents from the published test
set, no text repeated) the target prefills the prompt, the drafter drafts a block of B = 8
positions, and the tree is filled best-first (Prop. 1 with the head-based estimate) to each width;
each width is verified ``reps`` times (passes alternate in direction), the verify discarded each
time. Both kernel modes run, each in its own process (the kernel switch is per process).

Writes ``<out>.parquet`` (one row per verify) and ``<out>.json`` (medians, the ratios
T(16)/T(2) and T(32)/T(8) at 1,596 tokens, and plain decode speeds of target and drafter).

    .venv/bin/python benchmarks/verify_cost.py [--reps 5] [--out runs/benchmarks/verify_cost]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

WIDTHS = [1, 2, 4, 6, 8, 10, 12, 16, 20, 24, 32, 40, 48, 63]
CONTEXTS = [443, 1596, 8444]
REPO = Path(__file__).resolve().parents[1]


def long_documents() -> list[str]:
    """Texts of the published LongBench conversations, in file order."""
    for p in (REPO / "data" / "testset" / "longbench.json",
              REPO.parent / "shared" / "data" / "published-testset" / "longbench.json"):
        if p.is_file():
            data = json.loads(p.read_text())
            return ["\n".join(t["text"] for t in c["turns"]) for c in data["conversations"]]
    raise FileNotFoundError("no longbench.json: vendor the published test set under data/testset/")


def context_prompts(tokenize, sizes: list[int]) -> dict[int, list[int]]:
    """One prompt per size: documents concatenated in order, cut to the first N tokens."""
    ids: list[int] = []
    for doc in long_documents():
        ids += tokenize(doc + "\n\n")
        if len(ids) >= max(sizes):
            break
    if len(ids) < max(sizes):
        raise ValueError(f"the documents give only {len(ids)} tokens, fewer than {max(sizes)}")
    return {n: ids[:n] for n in sizes}


def run_mode(exact: bool, reps: int, contexts: list[int], overrides: list[str]) -> dict:
    from adaspark import arms
    from adaspark.config import compose
    from adaspark.decoding.candidates import from_block
    from adaspark.decoding.loop import generate
    from adaspark.decoding.tree import best_first_order, prefix_tree
    from adaspark.rules.base import make_rule
    from adaspark.schema import check_arm

    cfg = compose(["arm=chain3", *overrides])
    parts = arms.build(cfg, check_arm(cfg.arm, "arm"), exact=exact)
    t, d = parts.target, parts.drafter
    assert d is not None
    rows = []
    widths = [w for w in WIDTHS if w <= t.max_rows]
    prompts = context_prompts(lambda s: t.tokenize(s, add_special=False), contexts)
    for n_ctx_tokens, prompt in prompts.items():
        t.prefill(prompt)
        block = d.draft(t.committed, 8)
        cands = from_block(block)
        order, _ = best_first_order(cands.parent, cands.head_q)
        trees = {w: prefix_tree(t.committed[-1], cands.tokens, cands.parent, order, w,
                                max_rows=t.max_rows)[0] for w in widths}
        for w in widths[:2]:  # warm-up, dropped
            t.verify(trees[w])
            t.discard()
        for rep in range(reps):
            for w in widths if rep % 2 == 0 else widths[::-1]:
                res = t.verify(trees[w])
                t.discard()
                rows.append({"mode": "exact" if exact else "fast", "context": n_ctx_tokens,
                             "width": w, "rep": rep, "verify_ms": res.verify_s * 1e3})
        here = [r for r in rows if r["context"] == n_ctx_tokens]
        meds = {w: statistics.median(r["verify_ms"] for r in here if r["width"] == w)
                for w in widths}
        print(f"[{'exact' if exact else 'fast'}] context {n_ctx_tokens}: "
              + " ".join(f"{w}:{m:.0f}" for w, m in meds.items()), file=sys.stderr, flush=True)
    # plain decode speeds at the shortest context
    short = prompts[min(contexts)]
    g = generate(t, short, 32, make_rule("ar"))
    tps_target = (len(g.tokens) - 1) / (g.token_times[-1] - g.token_times[0])
    d.begin(short)
    committed = list(short)
    d.draft(committed, 1)
    t0 = time.perf_counter()
    blk = d.draft(committed, 33)
    tps_drafter = (blk.B - 1) / (time.perf_counter() - t0)
    parts.close()
    return {"rows": rows, "decode_tps_target": tps_target, "decode_tps_drafter": tps_drafter}


def summarize(rows: list[dict]) -> dict:
    med: dict[str, dict[int, dict[int, float]]] = {}
    for r in rows:
        med.setdefault(r["mode"], {}).setdefault(r["context"], {}).setdefault(r["width"], [])
        med[r["mode"]][r["context"]][r["width"]].append(r["verify_ms"])  # type: ignore[union-attr]
    out: dict = {}
    for mode, by_ctx in med.items():
        m = {c: {w: statistics.median(v) for w, v in ws.items()} for c, ws in by_ctx.items()}
        out[mode] = {"median_ms": {str(c): {str(w): v for w, v in ws.items()}
                                   for c, ws in m.items()}}
        if 1596 in m:
            mm = m[1596]
            out[mode]["T16_over_T2_at_1596"] = mm[16] / mm[2]
            out[mode]["T32_over_T8_at_1596"] = mm[32] / mm[8]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--out", default=str(REPO / "runs" / "benchmarks" / "verify_cost"))
    ap.add_argument("--modes", default="fast,exact")
    ap.add_argument("--contexts", default=",".join(map(str, CONTEXTS)))
    ap.add_argument("--child", choices=["fast", "exact"], help=argparse.SUPPRESS)
    ap.add_argument("overrides", nargs="*", help="config overrides, e.g. target=tiny")
    a = ap.parse_args(argv)
    contexts = [int(c) for c in a.contexts.split(",")]
    if a.child:
        res = run_mode(a.child == "exact", a.reps, contexts, a.overrides)
        print(json.dumps(res))
        return 0
    import pandas as pd

    rows: list[dict] = []
    speeds = {}
    for mode in a.modes.split(","):
        env = {k: v for k, v in os.environ.items() if k != "GGML_CPU_TILED_MM"}
        p = subprocess.run([sys.executable, __file__, "--child", mode, "--reps", str(a.reps),
                            "--contexts", a.contexts, *a.overrides],
                           stdout=subprocess.PIPE, env=env, text=True)
        if p.returncode != 0:
            print(f"{mode} mode failed", file=sys.stderr)
            return p.returncode
        res = json.loads(p.stdout.strip().splitlines()[-1])
        rows += res["rows"]
        speeds[mode] = {"target_tokens_per_s": res["decode_tps_target"],
                        "drafter_tokens_per_s": res["decode_tps_drafter"]}
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".parquet.tmp")
    pd.DataFrame(rows).to_parquet(tmp, index=False)
    tmp.replace(out.with_suffix(".parquet"))
    summary = summarize(rows) | {"decode_speed": speeds, "reps": a.reps, "contexts": contexts,
                                 "widths": WIDTHS, "overrides": a.overrides}
    out.with_suffix(".json").write_text(json.dumps(summary, indent=2))
    print(json.dumps({m: {k: v for k, v in s.items() if k != "median_ms"}
                      for m, s in summary.items() if m in ("fast", "exact")} | {
                          "decode_speed": speeds}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
