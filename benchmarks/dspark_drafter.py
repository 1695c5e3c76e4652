"""The trained DSpark drafter against the draft-model drafter (issue 15, "What it must show").

Part 1, acceptance and forward time (our engine, fast kernels, greedy): each prompt is decoded
with the ``fullchain`` rule (all B picks of the block verified as one chain) once per drafter,
on the ``short`` subset's first turns and on prompts of our own outside the test set and the
training prompts (``adaspark.training.corpus.prompts`` with another seed, the training ones
removed). Per drafter: the mean acceptance length (1 + accepted drafts per drafting round,
vLLM's definition), the per-position acceptance (position i accepted given i - 1 was), and the
median ms of one round's drafting (the DSpark file's one forward against the draft model's B
forwards).

Part 2, end to end (``benchmarks/e2e_short.py``): ``llamacpp-ar``, ``ar``, ``chain3-dspark``,
``adaspark-dspark`` and ``llamacpp-dspark`` on ``short``, decode tok/s on the client's clock, and
llama-server's own acceptance counters for ``llamacpp-dspark``; then Table 2 (head-based against
fitted log loss) from ``adaspark-dspark``'s replies, whose head is the file's real confidence
head.

Writes ``<out>/dspark_drafter.json`` (both parts, the files' sha256, the settings).

    .venv/bin/python benchmarks/dspark_drafter.py [--cap 128] [--own 8] [--skip-e2e]
        [--e2e-from runs] [--drafters dspark-embedded,draft-model] [--order interleaved]
        [--out runs/benchmarks/dspark_drafter]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EXPORTS = sorted((REPO / "runs" / "drafter" / "export").glob("*.gguf"))
DRAFTERS = {"dspark-embedded": ["drafter=dspark-embedded"], "draft-model": ["drafter=embedded"],
            # the unquantized export with every draft row: the committed file's acceptance cost
            "dspark-f16": ["drafter=dspark-embedded", "drafter.path=" + str(next(iter(
                p for p in EXPORTS if p.name.endswith("-f16.gguf")), "missing"))],
            # the quantized export before `drafter install` commits it: a new training's file
            "dspark-export": ["drafter=dspark-embedded", "drafter.path=" + str(next(iter(
                p for p in EXPORTS if not p.name.endswith("-f16.gguf")), "missing"))]}
E2E_ARMS = ["llamacpp-ar", "ar", "chain3-dspark", "adaspark-dspark", "llamacpp-dspark"]


def own_prompts(n: int) -> list[str]:
    """Prompts of our own: the corpus's makers with another seed, minus the training prompts."""
    from omegaconf import OmegaConf

    from adaspark.training.corpus import prompts

    p = OmegaConf.load(REPO / "train" / "params.yaml").drafter_data
    used = {d.text for d in prompts(int(p.n_prompts), int(p.seed))}
    return [d.text for d in prompts(4 * n, 7919) if d.text not in used][:n]


def short_prompts() -> list[str]:
    from adaspark.runs.conversation import plan_subset
    from adaspark.testset.model import read_set

    sets = [read_set(p) for p in sorted((REPO / "data" / "testset").glob("*.json"))
            if p.name != "manifest.json"]
    return [p.conversation.turns[0].text for p in plan_subset(sets, "short")]


def chain_acceptance(overrides: list[str], texts: dict[str, list[str]], cap: int) -> dict:
    """Decode every prompt with ``fullchain`` and this drafter; acceptance and drafting time."""
    from adaspark import arms
    from adaspark.cli.generate import prompt_tokens
    from adaspark.config import compose
    from adaspark.decoding.loop import generate
    from adaspark.schema import check_arm

    cfg = compose(["arm=fullchain", *overrides, f"max_tokens={cap}", "prompt=x"])
    parts = arms.build(cfg, check_arm(cfg.arm, "arm"), exact=False)
    out: dict[str, dict] = {}
    try:
        B = parts.block_positions
        for group, prompts in texts.items():
            acc, draft_s, rounds = [], [], 0
            for text in prompts:
                cfg.prompt = text
                toks = prompt_tokens(parts.target, cfg)
                g = generate(parts.target, toks, cap, parts.rule, parts.drafter, B,
                             want_trace=True)
                for t in g.records:
                    if t.picks:
                        acc.append(t.accepted)
                        draft_s.append(t.draft_s)
                rounds += g.rounds
            per_pos = []
            for i in range(1, B + 1):
                reached = sum(1 for a in acc if a >= i - 1)
                per_pos.append(sum(1 for a in acc if a >= i) / reached if reached else None)
            out[group] = {
                "prompts": len(prompts), "drafting_rounds": len(acc),
                "mean_acceptance_length": 1 + statistics.fmean(acc) if acc else None,
                "per_position": per_pos,
                "draft_ms_median": 1e3 * statistics.median(draft_s) if draft_s else None,
                "block": B, "drafter": parts.models.get("drafter")}
    finally:
        parts.close()
    return out


def e2e(out: Path, cap: int, run_root: Path | None = None, order: str = "interleaved") -> dict:
    """``benchmarks/e2e_short.py`` over the arms above, then Table 2 from adaspark-dspark and
    llama-server's own counters from llamacpp-dspark. With ``run_root`` (a pipeline run's
    ``runs/``, ``--e2e-from``) nothing is run: the same figures are read from its ``arms/``
    stores, which the default preset's run stage fills on ``short`` in interleaved order."""
    import pandas as pd

    from adaspark.analysis.records import read_replies, request_summaries
    from adaspark.analysis.tables.table2 import table2_acceptance_prediction

    sys.path.insert(0, str(REPO / "benchmarks"))
    from e2e_short import analyse

    if run_root is None:
        d = out / "e2e"
        r = subprocess.run([sys.executable, str(REPO / "benchmarks" / "e2e_short.py"), "--cap",
                            str(cap), "--arms", ",".join(E2E_ARMS), "--out", str(d),
                            "--order", order], cwd=REPO)
        if r.returncode != 0:
            return {"error": f"e2e_short exited {r.returncode}"}
        res = json.loads((d / "e2e_short.json").read_text())
    else:
        d = run_root / "arms"
        missing = [a for a in E2E_ARMS if not (d / a / "replies.parquet").is_file()]
        if missing:
            raise SystemExit(f"dspark_drafter: --e2e-from {run_root}: no replies for {missing} "
                             f"under {d}; run the default pipeline's run stage first "
                             "(dvc repro run)")
        res = analyse(d, E2E_ARMS, 20240601, write=False) | {
            "source": f"pipeline run {run_root} (stage run)"}
    rows = read_replies(d / "adaspark-dspark")  # in serving order, as Table 2 reads them
    t2 = table2_acceptance_prediction(request_summaries(rows), "qwen2.5-coder-1.5b", "short")
    res["table2_adaspark_dspark"] = json.loads(t2.to_json(orient="records"))[0]
    srv = pd.read_parquet(d / "llamacpp-dspark" / "replies.parquet")
    # llama-server's own counters (timings.draft_n, draft_n_accepted), summed over replies. Its
    # rounds are not counted; with --spec-draft-n-max 3 and p_min 0 every full round drafts 3,
    # so 1 + 3 * accepted / drafted estimates the acceptance length from them.
    drafted, accepted = int(srv["server_drafted"].sum()), int(srv["server_accepted"].sum())
    res["llamacpp_dspark_counters"] = {
        "draft_n": drafted, "draft_n_accepted": accepted,
        "acceptance_rate": accepted / drafted if drafted else None,
        "acceptance_length_if_3_a_round": 1 + 3 * accepted / drafted if drafted else None}
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cap", type=int, default=128)
    ap.add_argument("--own", type=int, default=8, help="prompts of our own")
    ap.add_argument("--skip-e2e", action="store_true")
    ap.add_argument("--e2e-from", type=Path, default=None, metavar="RUNS",
                    help="read part 2 from a pipeline run's runs/ instead of running it")
    ap.add_argument("--drafters", default="dspark-embedded,draft-model",
                    help=f"comma-separated, of {sorted(DRAFTERS)}")
    ap.add_argument("--out", type=Path, default=REPO / "runs" / "benchmarks" / "dspark_drafter")
    ap.add_argument("--order", choices=["sequential", "interleaved"], default="interleaved",
                    help="part 2's run order (the default preset's groups when interleaved)")
    a = ap.parse_args(argv)
    from adaspark import provenance
    from adaspark.io import write_json

    texts = {"short": short_prompts(), "own": own_prompts(a.own)}
    t0 = time.time()
    prev = a.out / "dspark_drafter.json"
    result: dict = {"settings": {k: str(v) if isinstance(v, Path) else v
                                 for k, v in vars(a).items()}, "versions": provenance.versions(),
                    "acceptance": {}}
    if prev.is_file():  # another --drafters run: keep its drafters
        result["acceptance"] = json.loads(prev.read_text()).get("acceptance", {})
    for name in [d for d in a.drafters.split(",") if d]:   # "": part 2 alone
        over = DRAFTERS[name]
        print(f"== {name}: fullchain on {sum(map(len, texts.values()))} prompts", flush=True)
        result["acceptance"][name] = chain_acceptance(over, texts, a.cap)
        write_json(a.out / "dspark_drafter.json", result)
    if not a.skip_e2e:
        result["e2e"] = e2e(a.out, a.cap, a.e2e_from, a.order)
    result["seconds"] = time.time() - t0
    write_json(a.out / "dspark_drafter.json", result)
    print("\nacceptance in a chain of B (1 + accepted drafts per drafting round):")
    for name, groups in result["acceptance"].items():
        for g, r in groups.items():
            print(f"  {name:16s} {g:6s} {r['mean_acceptance_length']:.3f}  per position "
                  f"{[round(x, 3) if x is not None else None for x in r['per_position']]}  "
                  f"draft {r['draft_ms_median']:.1f} ms (B={r['block']})")
    if "e2e" in result:
        print(json.dumps({k: v for k, v in result["e2e"].items() if k != "settings"},
                         indent=1)[:3000])
    return 0


if __name__ == "__main__":
    sys.exit(main())
