"""A small synthetic run directory, laid out as the pipeline lays out ``runs/`` — for the tests of
the tables, figures and report, and for the notebooks' committed example.

EVERYTHING HERE IS MADE UP. Per-reply rows have the runner's schema
(:data:`adaspark.runs.rows.ROW_SCHEMA`) with speeds drawn from fixed per-arm levels, a
per-conversation effect and noise; the main runs' request summaries are drawn, not measured; the
instrumented runs are the real scheduler (:class:`~adaspark.rules.adaspark.rule.AdaSparkRule`)
run against the seeded simulator (:mod:`adaspark.rules.adaspark.simulator`), so their per-round logs
and summaries have the real schemas; the survey and Figure 5 rows follow a made-up cost law.
Every ``run.json`` says ``"synthetic": true``.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import fields
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from adaspark.analysis import records as inp

#: Per-arm decode speed level (tok/s) of the synthetic runs.
SPEED: dict[str, float] = {
    inp.LLAMACPP_AR: 26.0, inp.AR: 25.0, inp.LLAMACPP_CHAIN: 19.0, inp.CHAIN3: 21.0,
    inp.FULLCHAIN: 20.0, inp.TREE16: 17.0, inp.COSTMODEL: 22.5, inp.ADASPARK: 23.5,
    inp.CLASSES: 23.2, inp.WIDTH1: 25.5,
    inp.LLAMACPP_DSPARK: 14.0, inp.CHAIN3_DSPARK: 28.0, inp.ADASPARK_DSPARK: 35.0,
    **{arm: 23.5 - 0.09 * abs(w - 6) ** 1.3 for w, arm in inp.PINNED.items()},
}
DEFAULT_ARMS = (inp.LLAMACPP_AR, inp.AR, inp.LLAMACPP_CHAIN, inp.CHAIN3, inp.ADASPARK, inp.WIDTH1)
PAPER_ARMS = (inp.LLAMACPP_CHAIN, inp.CHAIN3, inp.FULLCHAIN, inp.TREE16, inp.COSTMODEL,
              inp.ADASPARK, *inp.PINNED.values(), inp.CLASSES, inp.WIDTH1,
              *inp.DSPARK_BLOCK.arms)
SCHEDULER_ARMS = {inp.ADASPARK, inp.COSTMODEL, inp.TREE16, inp.CLASSES, inp.WIDTH1,
                  *inp.PINNED.values()}
TARGET_FILE = "synthetic-target.gguf"


def _plan(conversations_per_source: int, turns: int, first: int = 0) -> list[dict[str, Any]]:
    """Reply keys of a synthetic subset, in serving order (ToolACE turns give two replies)."""
    out = []
    for s, _, _ in inp.SOURCES:
        for c in range(first, first + conversations_per_source):
            for t in range(turns):
                base = 3000 if s == "longbench" else 200
                prompt = base + 400 * c + 600 * t
                for reply in (0, 1) if s == "toolace" else (0,):
                    out.append({"set": s, "conversation": f"{s}-{c:02d}", "turn": t,
                                "reply": reply, "prompt_tokens": prompt + 60 * reply,
                                "kind": "tool" if s == "toolace" else "chat"})
    return out


def _summary(rng: np.random.Generator, order: int, arm: str) -> dict[str, Any]:
    """A drawn request summary (the fields Tables 2 and 9 and Figure 4 read)."""
    tree = int(rng.integers(30, 60))
    nodes = int(tree * rng.integers(14, 20))
    head = float(rng.uniform(0.14, 0.18))
    fitted = head * float(rng.uniform(0.82, 0.97)) if order > 0 else head * 1.05
    learned = [2, 4, 8, 16, 32, 64] + ([3, 5, 6, 12] if order > 3 else [])
    widths = list(range(8, 65, 8)) if arm == inp.CLASSES else sorted(learned)
    return {
        "request_id": f"{order + 1:05d}-{hashlib.sha1(f'{arm}{order}'.encode()).hexdigest()[:8]}",
        "rounds": tree, "tree_rounds": tree, "width1_rounds": 0, "committed": 2 * tree,
        "scheduler_time_s": 0.4 * tree, "rows_drafter": 3 * tree, "rows_agreed": tree // 4,
        "rows_ngram": tree // 5, "accepted_drafter": tree, "accepted_agreed": tree // 8,
        "accepted_ngram": tree // 10, "labelled_nodes": nodes,
        "logloss_fitted": fitted if arm != inp.COSTMODEL else None, "logloss_head": head,
        "rounds_priced_fitted": int(tree * (0.3 if order == 0 else 1.0)),
        "cold_start_rounds": 18 if order == 0 else 0, "cold_start_s": 7.0 if order == 0 else 0.0,
        "refits_adopted": 1, "widths_learned": widths,
    }


def _rows(arm: str, repeat: int, plan: list[dict[str, Any]], cap: int, seed: int,
          summaries: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    from adaspark.runs.rows import ReplyRow

    rng = np.random.default_rng([seed, sum(arm.encode()), repeat])
    conv_effect: dict[str, float] = {}
    rows = []
    for i, key in enumerate(plan):
        conv = key["conversation"]
        if conv not in conv_effect:
            conv_rng = np.random.default_rng([seed, sum(conv.encode())])
            conv_effect[conv] = float(np.exp(conv_rng.normal(0, 0.12)))
        tokens = int(min(cap, 40 + (i * 37) % 200))
        status = "cut" if tokens >= cap else "finished"
        tps = SPEED[arm] * conv_effect[conv] * float(np.exp(rng.normal(0, 0.04)))
        if key["set"] == "longbench" and arm not in (inp.AR, inp.LLAMACPP_AR):
            tps *= 1.1
        if arm == inp.LLAMACPP_CHAIN and i == 3 and cap >= 8192:
            tokens, status = 8192, "looped"
        if key["set"] == "toolace" and key["reply"] == 0 and key["turn"] == 1:
            tokens, status = 1, "single-delta"
        vary = rng.random() < (0.2 if key["turn"] else 0.08)
        text = f"{conv}/{key['turn']}/{key['reply']}" + (f"/{arm}" if vary else "")
        timings: dict[str, Any] = {"rounds": tokens // 2, "draft_n": 3 * tokens}
        if summaries is not None:
            timings["rule_summary"] = summaries[i]
        elif arm in SCHEDULER_ARMS:
            timings["rule_summary"] = _summary(rng, i, arm)
        base: dict[str, Any] = {
            "arm": arm, "repeat": repeat, "set": key["set"], "conversation": conv,
            "turn": key["turn"], "reply": key["reply"], "status": status,
            "decode_tps": float("nan") if status == "single-delta" else tps,
            "completion_tokens": tokens, "prompt_tokens": key["prompt_tokens"],
            "entry": arm if repeat == 1 else f"{arm}@{repeat}",
            "engine": "llama-server" if arm.startswith("llamacpp") else "ours",
            "kind": key["kind"], "reply_kind": "reply", "text": text,
            "text_sha256": hashlib.sha256(text.encode()).hexdigest(),
            "timings": json.dumps(timings), "max_tokens": cap, "tool_calls": "[]",
            "finish_reason": "length" if status in ("cut", "looped") else "stop",
            "wall_time": "2026-01-01T00:00:00+00:00", "fingerprint": "synthetic",
        }
        row = {}
        for f in fields(ReplyRow):
            default: Any = {"int": 0, "float": float("nan"), "str": ""}.get(
                f.type if isinstance(f.type, str) else f.type.__name__, None)
            row[f.name] = base.get(f.name, default)
        rows.append(row)
    return rows


def _write_run(run_dir: Path, rows: list[dict[str, Any]], subset: str, cap: int,
               arm: str) -> None:
    from adaspark.runs.rows import ROW_SCHEMA
    from adaspark.runs.store import ROWS_FILE, RUN_FILE

    run_dir.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=ROW_SCHEMA), run_dir / ROWS_FILE)
    engine = "llama-server" if arm.startswith("llamacpp") else "ours"
    meta = {
        "synthetic": True,
        "fingerprint": {
            "engine": engine,
            "binary": {"libllama_sha256": "0" * 64, "llama_cpp_python": "synthetic"},
            "models": {"target": {"file": TARGET_FILE, "sha256": "1" * 64, "n_ctx": 8192}},
            "arm": {"name": arm}, "run": {"subset": subset, "cap": cap, "protocol_cap": 8192},
            "threads": 2,
        },
        "fingerprint_sha256": "synthetic",
        "created": "2026-01-01T00:00:00+00:00",
    }
    (run_dir / RUN_FILE).write_text(json.dumps(meta, indent=1) + "\n")


def _instrumented(run_dir: Path, arm: str, plan: list[dict[str, Any]], cap: int,
                  seed: int, max_tokens: int, subset: str) -> None:
    """The real scheduler on the simulator, with per-round logs, one request per reply."""
    from adaspark.rules.adaspark.rule import AdaSparkRule
    from adaspark.rules.adaspark.simulator import (
        DrafterProcess,
        Environment,
        OneSidedNoise,
        RisingCost,
        Simulator,
        TextProcess,
    )

    env = Environment(cost=RisingCost(base=0.030, per_row=0.030, slope=0.02),
                      text=TextProcess(copy_start=0.02), drafter=DrafterProcess(B=4, K=8),
                      fixed=0.05, noise=OneSidedNoise(p_clean=0.75, mean_extra=0.1), seed=seed)
    rule = AdaSparkRule(acceptance="fitted" if arm == inp.ADASPARK else "head",
                        ngram=arm == inp.ADASPARK, log_dir=str(run_dir / inp.ROUNDS_DIR))
    sim = Simulator(env)
    summaries = []
    for i, key in enumerate(plan):
        reply = sim.run_request(rule, i, min(key["prompt_tokens"], 1500), max_tokens)
        summaries.append(reply.summary)
    rows = _rows(arm, 1, plan, cap, seed, summaries=summaries)
    for row, s in zip(rows, summaries, strict=True):
        row["completion_tokens"] = int(s["committed"])
        if row["status"] != "single-delta":
            row["status"] = "finished"
    _write_run(run_dir, rows, subset, cap, arm)


def _survey(path: Path, widths: list[int], prompts: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    rows = []
    for ctx in (443, 1596, 8444):
        for p in range(prompts):
            for pass_index in (0, 1):
                order = widths if pass_index == 0 else widths[::-1]
                for w in order:
                    law = (36.0 + 35.0 * (w - 1) ** 0.95) * (1 + 0.04 * ctx / 1000 * (1 + w / 16))
                    for rnd in range(5):
                        rows.append({
                            "context": ctx, "context_paper": ctx,
                            "prompt": f"{ctx}{chr(65 + p)}", "pass_index": pass_index,
                            "width": w, "round": rnd, "kept": rnd >= 2,
                            "verify_ms": law * float(1 + rng.exponential(0.03)),
                        })
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_parquet(path, index=False)
    (path.parent / "survey.json").write_text(json.dumps({"synthetic": True}) + "\n")


def _fig5(path: Path, prompts: int, seed: int) -> None:
    rng = np.random.default_rng(seed + 5)
    rows = []
    for ctx in (443, 1596, 8444):
        for p in range(prompts):
            for w in (8, 16):
                rounds = int(rng.integers(90, 130)) if w == 8 else int(rng.integers(80, 120))
                per_round = 0.30 * (1 + 0.03 * ctx / 1000) * (1.0 if w == 8 else 1.35)
                rows.append({
                    "context": ctx, "context_paper": ctx, "prompt": f"{ctx}{chr(65 + p)}",
                    "width": w, "arm": f"adaspark-w{w}", "rounds": rounds, "tokens": 256,
                    "decode_s": rounds * per_round * float(1 + rng.normal(0, 0.02)),
                })
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_parquet(path, index=False)
    (path.parent / "fig5.json").write_text(json.dumps({"synthetic": True}) + "\n")


def synthetic_params(preset: str = "paper") -> dict[str, Any]:
    """The params sections that name what :func:`make_synthetic_runs` writes for ``preset``
    (``target``, ``preset``, ``run_arms``, ``run``, ``extra_runs``), as the pipeline's
    ``params.yaml`` would: the stages read exactly those runs (:class:`~adaspark.analysis.records.
    RunSelection`)."""
    if preset not in ("paper", "default"):
        raise ValueError(f"preset must be 'paper' or 'default', not {preset!r}")
    paper = preset == "paper"
    return {
        "target": {"name": Path(TARGET_FILE).stem, "model": None, "path": TARGET_FILE},
        "preset": {"name": preset},
        "run_arms": list(PAPER_ARMS if paper else DEFAULT_ARMS),
        "run": {"subset": "evaluation" if paper else "short", "cap": 8192 if paper else 128},
        "extra_runs": {
            "repeat": {"arms": [inp.ADASPARK] if paper else []},
            "heldout": {"arms": [inp.LLAMACPP_CHAIN, inp.ADASPARK, inp.LLAMACPP_DSPARK,
                                 inp.ADASPARK_DSPARK] if paper else [],
                        "subset": "heldout"},
            "short": {"arms": [inp.LLAMACPP_AR, inp.AR] if paper else [], "subset": "short"},
            "instrumented": {"arms": [inp.ADASPARK, inp.COSTMODEL], "subset": "short"},
        },
    }


def make_synthetic_runs(root: Path, *, preset: str = "paper", seed: int = 0,
                        conversations_per_source: int = 2, turns: int = 2,
                        instrumented_tokens: int = 96) -> Path:
    """Write a synthetic ``runs/`` under ``root`` (see the module docstring); return ``root``.

    ``preset="paper"`` runs every arm, AdaSpark twice, the held-out conversations, the AR arms
    on the short subset and the full survey; ``preset="default"`` only the default pipeline's
    arms on the short subset with the reduced survey (so tables show dashes where it ran less).
    """
    params = synthetic_params(preset)  # what it writes: the runs these params name
    root = Path(root)
    paper = preset == "paper"
    cap, subset = params["run"]["cap"], params["run"]["subset"]
    extra = params["extra_runs"]
    plan = _plan(conversations_per_source, turns)
    for arm in params["run_arms"]:
        _write_run(root / inp.ARMS_DIR / arm, _rows(arm, 1, plan, cap, seed), subset, cap, arm)
    for arm in extra["repeat"]["arms"]:
        _write_run(root / inp.EXTRA_DIR / "repeat" / f"{arm}@2",
                   _rows(arm, 2, plan, cap, seed), subset, cap, arm)
    held = _plan(1, turns, first=conversations_per_source)
    for arm in extra["heldout"]["arms"]:
        _write_run(root / inp.EXTRA_DIR / "heldout" / arm, _rows(arm, 1, held, cap, seed + 1),
                   extra["heldout"]["subset"], cap, arm)
    short = _plan(1, turns)
    for arm in extra["short"]["arms"]:
        _write_run(root / inp.EXTRA_DIR / "short" / arm, _rows(arm, 1, short, cap, seed + 2),
                   extra["short"]["subset"], cap, arm)
    for arm in extra["instrumented"]["arms"]:
        _instrumented(root / inp.EXTRA_DIR / "instrumented" / arm, arm, short, cap, seed,
                      instrumented_tokens, extra["instrumented"]["subset"])
    widths = ([1, 2, 4, 6, 8, 10, 12, 16, 20, 24, 32, 40, 48, 63] if paper
              else [1, 2, 4, 8, 16, 32])
    _survey(root / inp.SURVEY_FILE, widths, 3 if paper else 1, seed)
    _fig5(root / inp.FIG5_FILE, 3 if paper else 1, seed)
    (root / inp.MODELS_FILE).write_text(json.dumps({
        "target": {"path": TARGET_FILE, "bytes": 0, "sha256": "1" * 64, "manifest": None},
        "drafter": {"path": "synthetic-drafter.gguf", "bytes": 0, "sha256": "2" * 64,
                    "manifest": None},
        "synthetic": True}, indent=1) + "\n")
    (root / "README.md").write_text(
        "# Synthetic run directory\n\nMade by `synthetic_runs.make_synthetic_runs` "
        f"(preset {preset}, seed {seed}). Every number here is made up: it exercises the "
        "tables, figures, report and notebooks, and measures nothing.\n")
    return root
