"""Plain-decode parity: our ``ar`` against ``llamacpp-ar``, both servers up at once, alternated.

Issue 12 ("Plain decode parity"). Both arms' servers are started as a run starts them
(``adaspark.runs.launch``), and every prompt is sent to both in turn, the order rotating per
request (``adaspark.analysis.parity.rotation``), so that a busy machine's drift falls on both.
Prompts, in three groups:

* ``short``: a few one-line coding prompts (``--short-reps`` repetitions each);
* ``first-turn``: the first turn of each conversation of the ``short`` subset, with its tools
  (from a few dozen tokens to about 3k: the long-context part of the gap);
* ``document``: the longest LongBench document cut to about ``--doc-tokens`` tokens each.

Each reply is timed on the client's clock (``adaspark.serving.client``); the JSON (``--out``)
holds every reply, both servers' settings (command line, our engine's context parameters,
llama-server's ``/props``) and the ratio ``ar / llamacpp-ar`` per prompt (by context), per
group, per context band and overall, each with a 95% bootstrap interval
(``adaspark.analysis.parity``). ``server_ratio`` beside it is the same ratio on the speeds the
servers report (``timings.predicted_per_second``): the engines alone, without the streaming.

    .venv/bin/python benchmarks/plain_parity.py --out runs/benchmarks/plain_parity.json
    .venv/bin/python benchmarks/plain_parity.py --out /tmp/pp.json --max-tokens 16 \
        --reps 1 --short-reps 1 --doc-tokens '' target=tiny          # smoke test
    .venv/bin/python benchmarks/plain_parity.py --out pooled.json --pool a.json b.json  # pool runs
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from adaspark import io

REPO = Path(__file__).resolve().parents[1]
ARMS = ("ar", "llamacpp-ar")
SHORT_PROMPTS = (
    "Write a Python function that checks whether a string is a palindrome.",
    "Explain the difference between a list and a tuple in Python.",
    "Write a SQL query that returns the ten most recent orders per customer.",
    "Write a bash one-liner that counts the lines of every .py file under a folder.",
)
#: Characters per token assumed when cutting a document to a context; the reply's measured
#: ``prompt_tokens`` is what the report uses.
CHARS_PER_TOKEN = 3.6


@dataclass
class Prompt:
    name: str
    group: str
    messages: list[dict[str, Any]]
    reps: int
    tools: list[dict[str, Any]] | None = None


@dataclass
class Served:
    arm: str
    prompt: str
    group: str
    rep: int
    position: int  # 0 = this arm went first for this repetition
    prompt_tokens: int
    completion_tokens: int
    decode_tps: float | None
    server_tps: float | None
    ttft_s: float | None
    text_sha: str
    extra: dict[str, Any] = field(default_factory=dict)


def prompts(testset: Path, subset: str, reps: int, short_reps: int,
            doc_tokens: list[int]) -> list[Prompt]:
    from adaspark.runs.conversation import plan_subset
    from adaspark.testset import load_checked_sets

    out = [Prompt(f"short-{i}", "short", [{"role": "user", "content": text}], short_reps)
           for i, text in enumerate(SHORT_PROMPTS)]
    sets = load_checked_sets(testset)
    for p in plan_subset(sets, subset):
        turn = p.conversation.turns[0]
        out.append(Prompt(f"{p.set_name}/{p.conversation.name}", "first-turn",
                          [{"role": "user", "content": turn.text}], reps,
                          tools=p.conversation.tools or None))
    if doc_tokens:
        docs = [c.turns[0].text for s in sets if s.name == "longbench" for c in s.conversations]
        doc = max(docs, key=len)
        for n in doc_tokens:
            cut = doc[: int(n * CHARS_PER_TOKEN)]
            out.append(Prompt(f"document-{n}", "document", [{"role": "user", "content":
                              f"Summarise this document in a few sentences.\n\n{cut}"}], reps))
    return out


def serve_once(client: Any, arm: str, p: Prompt, rep: int, position: int,
               max_tokens: int) -> Served:
    import hashlib

    r = client.chat(p.messages, max_tokens=max_tokens, tools=p.tools,
                    request_id=f"parity-{p.name.replace('/', '_')}-{rep}")
    server = r.timings.get("predicted_per_second")
    return Served(arm=arm, prompt=p.name, group=p.group, rep=rep, position=position,
                  prompt_tokens=r.prompt_tokens, completion_tokens=r.completion_tokens,
                  decode_tps=r.decode_tps, ttft_s=r.ttft_s,
                  server_tps=float(server) if server else None,
                  text_sha=hashlib.sha256(r.text.encode()).hexdigest()[:16],
                  extra={"cache_n": r.timings.get("cache_n"),
                         "prompt_ms": r.timings.get("prompt_ms")})


def pairs_of(served: list[Served], speed: str) -> list[Any]:
    from adaspark.analysis.parity import PairedReply

    by_key: dict[tuple[str, int], dict[str, Served]] = {}
    for s in served:
        by_key.setdefault((s.prompt, s.rep), {})[s.arm] = s
    out = []
    for (_prompt, rep), d in by_key.items():
        if set(d) != set(ARMS):
            continue
        a, b = d[ARMS[0]], d[ARMS[1]]
        out.append(PairedReply(prompt=a.prompt, group=a.group, rep=rep,
                               prompt_tokens=a.prompt_tokens,
                               completion_tokens=a.completion_tokens,
                               speed_a=getattr(a, speed), speed_b=getattr(b, speed)))
    return out


def server_settings(url: str, ours: bool) -> dict[str, Any]:
    import httpx

    with httpx.Client(base_url=url, timeout=30.0) as http:
        if ours:
            meta = http.get("/v1/models").json()["data"][0]["meta"]
            return {k: meta.get(k) for k in ("engine", "exact", "n_ctx", "threads",
                                             "context_params", "llama")}
        props = http.get("/props").json()
        keep = ("total_slots", "build_info", "model_path")
        n_ctx = (props.get("default_generation_settings") or {}).get("n_ctx")
        return {k: props.get(k) for k in keep} | {"n_ctx": n_ctx}


def pool(files: list[Path], out: Path, edges: list[int], seed: int) -> int:
    """``--pool``: one report over several runs' replies (a run's repetition ``r`` of file ``i``
    becomes ``r + 1000 i``, so pairs never cross runs). Runs of another target or reply length
    are refused, not mixed."""
    served: list[Served] = []
    first: dict[str, Any] | None = None
    for i, f in enumerate(files):
        try:
            d = json.loads(f.read_text(encoding="utf-8"))
            got = {k: d["settings"][k] for k in ("target", "max_tokens", "threads")}
            replies = d["replies"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            print(f"plain_parity: {f} is not an output of this benchmark ({e}): pass the files "
                  "that --out wrote", file=sys.stderr)
            return 2
        why = ("named twice" if files.index(f) != i else
               "a pooled output" if "pooled_from" in d["settings"] else None)
        if why:
            print(f"plain_parity: {f} is {why}: pool each run's own file once", file=sys.stderr)
            return 2
        if first is None:
            first = got
        elif got != first:
            print(f"plain_parity: {f} was run with {got}, {files[0]} with {first}: runs of "
                  "another target, reply length or thread count are not pooled", file=sys.stderr)
            return 2
        for r in replies:
            served.append(Served(**(r | {"rep": int(r["rep"]) + 1000 * i})))
    result = ratios(served, edges, seed) | {
        "settings": first | {"pooled_from": [str(f) for f in files]},
        "replies": [s.__dict__ for s in served],
    }
    io.write_json(out, result, default=str)
    report(result)
    print(f"plain_parity: {len(files)} runs pooled, written to {out}", file=sys.stderr)
    return 0


def ratios(served: list[Served], edges: list[int], seed: int) -> dict[str, Any]:
    """The report's ratios: on the client's clock and on the servers' own timings."""
    from adaspark.analysis.parity import parity_report

    return {"arms": {"a": ARMS[0], "b": ARMS[1]},
            "ratio": parity_report(pairs_of(served, "decode_tps"), band_edges=edges, seed=seed),
            "server_ratio": parity_report(pairs_of(served, "server_tps"), band_edges=edges,
                                          seed=seed)}


def report(result: dict[str, Any]) -> None:
    """The ratio per prompt, per context band and overall, on standard error."""
    for r in result["ratio"]["per_prompt"]:
        print(f"  {r['label']:28s} ctx {r['context_min']:6.0f}  {ARMS[0]}/{ARMS[1]} "
              f"{r['ratio']:.3f} ({r['lo']:.3f}-{r['hi']:.3f})", file=sys.stderr)
    for r in result["ratio"]["per_band"] + [result["ratio"]["overall"]]:
        print(f"  {r['label']:28s} {r['ratio']:.3f} ({r['lo']:.3f}-{r['hi']:.3f}) "
              f"n={r['n_pairs']}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="the JSON file to write")
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--reps", type=int, default=3, help="repetitions of each long prompt")
    ap.add_argument("--short-reps", type=int, default=4, help="repetitions of each short one")
    ap.add_argument("--doc-tokens", default="1024",
                    help="comma-separated contexts of the cut documents ('' for none)")
    ap.add_argument("--subset", default="short", help="whose first turns are prompts")
    ap.add_argument("--testset", type=Path, default=REPO / "data" / "testset")
    ap.add_argument("--bands", default="512,2048", help="context band edges (tokens)")
    ap.add_argument("--seed", type=int, default=20240601, help="bootstrap seed")
    ap.add_argument("--pool", type=Path, nargs="+", metavar="JSON",
                    help="serve nothing: pool the replies of these earlier outputs (same target "
                         "and reply length) into one report, each file's repetitions kept apart")
    ap.add_argument("overrides", nargs="*", help="Hydra overrides (target=..., threads=...)")
    a = ap.parse_args(argv)
    if a.pool:
        return pool(a.pool, a.out, [int(x) for x in a.bands.split(",") if x.strip()], a.seed)

    from adaspark.analysis.parity import rotation
    from adaspark.runs.launch import launch
    from adaspark.runs.run import compose_for_run
    from adaspark.runs.settings import ArmEntry, RunSettings, arm_config
    from adaspark.serving.client import ChatClient

    docs = [int(x) for x in a.doc_tokens.split(",") if x.strip()]
    plan = prompts(a.testset, a.subset, a.reps, a.short_reps, docs)
    cfg = compose_for_run([*a.overrides, f"run_arms=[{','.join(ARMS)}]"])
    settings = RunSettings.from_config(cfg)
    work = a.out.with_suffix("")  # the servers' logs and stores
    t0 = time.monotonic()
    served: list[Served] = []
    with ExitStack() as stack:
        clients, meta = {}, {}
        for arm in ARMS:
            entry = ArmEntry.parse(arm)
            proc = stack.enter_context(launch(cfg, entry, arm_config(cfg, entry), work / arm,
                                              settings))
            clients[arm] = stack.enter_context(ChatClient(proc.url))
            meta[arm] = {"argv": proc.argv} | server_settings(proc.url, arm == "ar")
        print(f"plain_parity: both servers up after {time.monotonic() - t0:.0f} s; "
              f"{sum(p.reps for p in plan)} repetitions of {len(plan)} prompts", file=sys.stderr)
        k = 0
        for p in plan:
            for rep in range(p.reps):
                for pos, arm in enumerate(rotation(ARMS, k)):
                    served.append(serve_once(clients[arm], arm, p, rep, pos, a.max_tokens))
                k += 1
            last = served[-2:]
            print(f"  {p.name:28s} {last[0].prompt_tokens:5d} tok  " + "  ".join(
                f"{s.arm} {s.decode_tps or math.nan:6.2f}" for s in last), file=sys.stderr)
    edges = [int(x) for x in a.bands.split(",") if x.strip()]
    tokens = {(s.prompt, s.arm): s.prompt_tokens for s in served}
    differ = {p.name: {arm: tokens.get((p.name, arm)) for arm in ARMS} for p in plan
              if abs((tokens.get((p.name, ARMS[0])) or 0) - (tokens.get((p.name, ARMS[1])) or 0))
              > 2}
    for name, n in differ.items():
        print(f"plain_parity: {name}: the servers' prompts differ ({n} tokens; a template "
              "without tools renders them on our server only): not the same work", file=sys.stderr)
    result = ratios(served, edges, a.seed) | {
        "settings": {"max_tokens": a.max_tokens, "reps": a.reps, "short_reps": a.short_reps,
                     "doc_tokens": docs, "subset": a.subset, "overrides": a.overrides,
                     "target": str(cfg.target.name), "threads": cfg.get("threads"),
                     "order": "alternated, rotated per repetition", "servers": meta},
        "prompt_tokens_differ": differ,
        "replies": [s.__dict__ for s in served],
        "wall_s": time.monotonic() - t0,
    }
    io.write_json(a.out, result, default=str)
    report(result)
    print(f"plain_parity: {result['wall_s']:.0f} s, written to {a.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
