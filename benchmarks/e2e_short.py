"""End to end on the short subset (§4.1, Table 4 in small): every default arm through its own
HTTP server, timed on the client's clock, then per-arm decode tok/s (the headline, §4.1) and the
ratios with 95% bootstrap intervals over conversations (``adaspark.analysis.stats``), and beside
them, per arm, the median time to first token, the end-to-end tok/s and the drafter's median
prompt prefill (:func:`end_to_end`).

Arms, in this order: ``llamacpp-ar``, ``ar``, ``llamacpp-chain``, ``chain3``, ``adaspark``,
``adaspark-w1``; an arm whose width rule is not registered yet is skipped, and the output says
so. Each arm runs from an empty store into its own directory and resumes there if killed (the
runner's protocol). The embedded pair (Qwen2.5-Coder 1.5B / 0.5B) is the default.

Writes, under ``--out`` (default ``runs/benchmarks/e2e_short``): ``<arm>/replies.parquet`` (the
runner's rows), ``replies.parquet`` (all arms), ``throughput.csv``, ``ratios.csv`` and
``e2e_short.json`` (both, with the run settings and skipped arms).

``--order interleaved`` (``run.order``, :mod:`adaspark.runs.order`) keeps the servers of the
preset's ``run.groups`` group (the default preset: these six arms) up together and sends each
reply to every arm in turn, so that drift of a busy machine falls on every arm alike; the default
is ``sequential`` (arm after arm). Use a new ``--out`` per order: a run does not resume over
results made in the other order.

    .venv/bin/python benchmarks/e2e_short.py                       # short subset, cap 128
    .venv/bin/python benchmarks/e2e_short.py --subset smoke --cap 16 --out runs/benchmarks/e2e_smoke
    .venv/bin/python benchmarks/e2e_short.py target=tiny drafter=tiny-truncated  # Hydra overrides
    .venv/bin/python benchmarks/e2e_short.py --order interleaved --out runs/benchmarks/e2e_int
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ARMS = ["llamacpp-ar", "ar", "llamacpp-chain", "chain3", "adaspark", "adaspark-w1"]
#: (A, B): A's decode speed over B's. The paper's headline comparisons and each engine's own
#: speculation speedup (Table 4, left and right).
PAIRS = [
    ("adaspark", "llamacpp-chain"),
    ("adaspark", "chain3"),
    ("chain3", "llamacpp-chain"),
    ("ar", "llamacpp-ar"),
    ("llamacpp-chain", "llamacpp-ar"),
    ("chain3", "ar"),
    ("adaspark", "ar"),
    ("adaspark-w1", "ar"),
    ("adaspark-w1", "adaspark"),
    # the DSpark block (issue 15): the same comparisons on the project's own DSpark drafter
    ("adaspark-dspark", "llamacpp-dspark"),
    ("adaspark-dspark", "chain3-dspark"),
    ("chain3-dspark", "llamacpp-dspark"),
    ("llamacpp-dspark", "llamacpp-ar"),
    ("chain3-dspark", "ar"),
    ("adaspark-dspark", "ar"),
]

#: The end-to-end keys each ``throughput`` row gains (:func:`end_to_end`).
E2E_KEYS = ("median_ttft_s", "e2e_tokens_per_s", "e2e_tokens", "e2e_s",
            "median_drafter_prefill_s", "e2e_n_replies")


def runnable(arms: list[str], cfg) -> tuple[list[str], dict[str, str]]:
    """The arms whose width rule is registered (llama-server arms always are)."""
    from adaspark.rules.base import WIDTH_RULES

    keep, skipped = [], {}
    for a in arms:
        arm = cfg.arms[a]
        if arm.get("engine") == "llama-server" or str(arm.width_rule) in WIDTH_RULES:
            keep.append(a)
        else:
            skipped[a] = (f"width rule {arm.width_rule!r} is not registered (known: "
                          f"{WIDTH_RULES.names()})")
    return keep, skipped


def end_to_end(df, arm: str) -> dict:
    """The arm's time to first token and end-to-end speed beside its decode speed (the headline,
    ``tokens_per_s``): ``median_ttft_s``, ``e2e_tokens_per_s`` (reply tokens over the time from
    sending the request to the last token, summed over replies), ``e2e_tokens``, ``e2e_s``,
    ``median_drafter_prefill_s`` (NaN for llama-server's arms, which do not report it) and
    ``e2e_n_replies`` (:func:`adaspark.analysis.throughput.arm_end_to_end`); NaN when no reply
    has a time to first token."""
    from adaspark.analysis.bootstrap import StatsInputError
    from adaspark.analysis.throughput import arm_end_to_end

    try:
        e = arm_end_to_end(df, arm)
    except StatsInputError:
        return {k: float("nan") for k in E2E_KEYS}
    return {"median_ttft_s": e.median_ttft_s, "e2e_tokens_per_s": e.tokens_per_s,
            "e2e_tokens": e.tokens, "e2e_s": e.e2e_s,
            "median_drafter_prefill_s": e.median_drafter_prefill_s, "e2e_n_replies": e.n_replies}


def analyse(out: Path, arms: list[str], seed: int, write: bool = True) -> dict:
    """Throughput, end to end and :data:`PAIRS`' ratios over the arm stores under ``out``;
    with ``write`` also ``replies.parquet``, ``throughput.csv`` and ``ratios.csv`` there (off
    when ``out`` is another stage's output, such as a pipeline run's ``runs/arms``)."""
    import pandas as pd

    from adaspark.analysis import stats
    from adaspark.analysis.throughput import arm_throughput
    from adaspark.runs.store import ResultStore

    frames = [pd.DataFrame(ResultStore(out / a).rows()) for a in arms]
    df = pd.concat([f for f in frames if not f.empty], ignore_index=True)
    if write:
        df.to_parquet(out / "replies.parquet")
    throughput = []
    for a in arms:
        try:
            row = arm_throughput(df, a).as_dict()
        except stats.StatsInputError as e:
            row = {"arm": a, "tokens_per_s": float("nan"), "note": str(e)}
        throughput.append(row | end_to_end(df, a))
    ratios = []
    for a, b in PAIRS:
        if a not in arms or b not in arms:
            continue
        try:
            c = stats.compare(df, a, b, seed=seed)
            ratios.append(c.as_dict() | {"cell": c.format(3)})
        except stats.StatsInputError as e:
            ratios.append({"arm_a": a, "arm_b": b, "ratio": float("nan"), "note": str(e)})
    if write:
        pd.DataFrame(throughput).to_csv(out / "throughput.csv", index=False)
        pd.DataFrame(ratios).to_csv(out / "ratios.csv", index=False)
    statuses = df.groupby(["arm", "status"]).size().unstack(fill_value=0)
    return {"throughput": throughput, "ratios": ratios,
            "statuses": {a: {k: int(v) for k, v in row.items()}
                         for a, row in statuses.iterrows()}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--subset", default="short")
    ap.add_argument("--cap", type=int, default=128)
    ap.add_argument("--arms", default=",".join(ARMS), help="comma-separated arm names")
    ap.add_argument("--out", type=Path, default=REPO / "runs" / "benchmarks" / "e2e_short")
    ap.add_argument("--testset", default="data/testset",
                    help="the checked test set (default: the vendored copy)")
    ap.add_argument("--seed", type=int, default=20240601, help="bootstrap seed")
    ap.add_argument("--order", choices=["sequential", "interleaved"], default="sequential",
                    help="run.order: arm after arm, or the preset's groups interleaved")
    ap.add_argument("overrides", nargs="*", help="Hydra overrides (target=..., drafter=...)")
    a = ap.parse_args(argv)

    from rich.console import Console

    from adaspark.runs.launcher import run_arms
    from adaspark.runs.order import plan_units
    from adaspark.runs.run import compose_for_run
    from adaspark.runs.settings import RunSettings

    console = Console(stderr=True)
    arms = [x for x in a.arms.split(",") if x]
    cfg = compose_for_run([*a.overrides, f"run_arms=[{','.join(arms)}]",
                           f"run.subset={a.subset}", f"run.cap={a.cap}",
                           f"run.testset={a.testset}", f"run.order={a.order}"])
    keep, skipped = runnable(arms, cfg)
    for arm, why in skipped.items():
        console.print(f"e2e_short: skipping {arm}: {why}")
    if not keep:
        console.print("e2e_short: no arm to run")
        return 1
    settings = RunSettings.from_config(cfg)
    a.out.mkdir(parents=True, exist_ok=True)
    summaries = run_arms(cfg, keep, a.out, settings)
    result = analyse(a.out, keep, a.seed)
    result |= {"subset": a.subset, "cap": a.cap, "order": a.order,
               "units": [[*u.entries] for u in plan_units(keep, settings.order,
                                                          settings.groups)],
               "arms": keep, "skipped": skipped,
               "target": str(cfg.target.name), "drafter": str(cfg.drafter.name),
               "summaries": [s.__dict__ for s in summaries]}
    (a.out / "e2e_short.json").write_text(json.dumps(result, indent=1, default=str) + "\n")
    console.print("  (decode tok/s is the headline, §4.1; TTFT and e2e are end to end)")
    console.print(f"  {'arm':16s} {'decode tok/s':>12s} {'TTFT s':>8s} {'e2e tok/s':>9s} "
                  f"{'prefill s':>9s}")
    for t in result["throughput"]:
        console.print(f"  {t['arm']:16s} {t['tokens_per_s']:12.2f} {t['median_ttft_s']:8.2f} "
                      f"{t['e2e_tokens_per_s']:9.2f} {t['median_drafter_prefill_s']:9.2f}")
    for r in result["ratios"]:
        console.print(f"  {r['arm_a']} / {r['arm_b']}: {r.get('cell', r.get('note'))}")
    console.print(f"e2e_short: written to {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
