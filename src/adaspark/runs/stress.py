"""Our server under stress (issue 37's robustness target): ``clients`` threads, each sending
``requests`` streamed requests one after another to a server with ``slots`` slots and a queue of
``queue`` (fewer than the clients, so some requests find the queue full), about ``cancel_share``
of them left by their client mid-stream.

Each request's prompt is drawn (seeded) from a pool of Spec-Bench and ``short`` first turns; a
request chosen for cancelling is left after its first 1 to 4 token events; a 503 is retried after
its ``Retry-After``. Before the load, the same server answers each prompt of the pool alone: the
one-at-a-time text every completed reply is compared with.

The checks (:func:`verdicts`), each a written rule over the counts:

- ``no_request_lost``: every request ended exactly once on the client (a reply or a cancel), and
  the server's own outcome counts (``/health``'s ``requests``) agree: its ``queued`` requests all
  ended (``queued`` = the sum of the other outcomes but ``refused``), none failed, its ``finished``
  and ``cancelled`` add up to the client's replies and cancels and ``finished`` is at least the
  client's replies (a cancel the server saw only after its last token counts as finished there),
  and its ``refused`` and ``dropped_busy`` add up to the client's 503s. A request answered twice
  would break the sum.
- ``replies_exact`` (exact mode): every completed reply is its prompt's one-at-a-time text, or
  leaves it at a near tie: the reply has a token whose top-2 logit gap is under 0.5 starting at
  or before the first character that differs (``timings.near_tie_chars``; counted).
- ``server_up``: after the load ``/health`` answers with nothing active or queued and one more
  request is served.
- ``memory_flat``: the server's resident memory (sampled each second) over the last quarter of the
  load at most ``MEMORY_SLACK`` above its second quarter, plus ``MEMORY_SLACK_MB`` (the first
  quarter holds the warm-up's allocations).
- ``busy_answered_503``: at least one request found the queue full and got 503 with
  ``Retry-After``.

:func:`run_stress` writes ``stress.json`` (settings, counts, checks, provenance) and
``requests.csv`` under its directory, atomically, when the load ends; a killed run starts over
(it is one unit of a few minutes on the tiny model).
"""

from __future__ import annotations

import json
import os
import random
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from adaspark.decoding.engine import common_prefix
from adaspark.io import csv_text, write_json, write_text

#: ``memory_flat``: the last quarter's RSS may exceed the second quarter's by this share ...
MEMORY_SLACK = 0.05
#: ... plus this many MiB
MEMORY_SLACK_MB = 16.0


@dataclass(frozen=True)
class StressSettings:
    """A stress run: its ``arm``, server ``slots`` and ``queue``, ``clients`` x ``requests``,
    ``max_tokens`` per reply, the share of requests cancelled, the prompt pool's size and the
    seed of the draws."""

    arm: str = "chain3"
    slots: int = 4
    queue: int = 2
    clients: int = 8
    requests: int = 50
    max_tokens: int = 24
    cancel_share: float = 0.1
    pool: int = 16
    seed: int = 0


@dataclass(frozen=True)
class Planned:
    """One request of one client: its prompt's index in the pool, streamed or not, and the token
    event after which the client leaves (None: it reads the whole reply)."""

    client: int
    index: int
    prompt: int
    stream: bool
    leave_after: int | None


def plan(s: StressSettings) -> list[list[Planned]]:
    """Every client's requests, drawn from ``s.seed``: a request that will be cancelled is
    streamed (a client leaves a stream); the others are streamed or not, half and half."""
    rng = random.Random(s.seed)
    out = []
    for c in range(s.clients):
        mine = []
        for i in range(s.requests):
            leave = rng.randint(1, 4) if rng.random() < s.cancel_share else None
            mine.append(Planned(c, i, rng.randrange(s.pool), leave is not None or
                                rng.random() < 0.5, leave))
        out.append(mine)
    return out


def one(url: str, text: str, p: Planned, max_tokens: int) -> dict[str, Any]:
    """Send ``p`` until it is not refused; its outcome (``reply`` or ``cancelled``), the 503s it
    got first (each with ``Retry-After``) and, for a reply, its text and near ties."""
    import httpx

    body = {"messages": [{"role": "user", "content": text}], "max_tokens": max_tokens,
            "stream": p.stream, "temperature": 0}
    refused = retry_after_missing = 0
    with httpx.Client(base_url=url, timeout=httpx.Timeout(600.0, connect=10.0)) as http:
        while True:
            with http.stream("POST", "/v1/chat/completions", json=body) as r:
                if r.status_code == 503:
                    refused += 1
                    retry_after_missing += not r.headers.get("Retry-After")
                    r.read()
                    time.sleep(float(r.headers.get("Retry-After") or 1))
                    continue
                tried = {"refused": refused, "retry_after_missing": retry_after_missing}
                if r.status_code != 200:
                    r.read()
                    return tried | {"outcome": f"http {r.status_code}", "error": r.text[:300]}
                if not p.stream:
                    d = json.loads(r.read())
                    return tried | {"outcome": "reply",
                                    "text": d["choices"][0]["message"]["content"],
                                    "near_tie_chars": (d.get("timings") or {}).get(
                                        "near_tie_chars")}
                return tried | _read_stream(r, p)


def _read_stream(r: Any, p: Planned) -> dict[str, Any]:
    """A streamed reply's outcome: ``cancelled`` once the client left after ``p.leave_after``
    token events, else the reply's text and near-tie positions."""
    text, events, ties = [], 0, None
    for line in r.iter_lines():
        payload = line[len("data:"):].strip() if line.startswith("data:") else ""
        if not payload or payload == "[DONE]":
            continue
        d = json.loads(payload)
        if d.get("timings"):
            ties = d["timings"].get("near_tie_chars")
        for ch in d.get("choices") or []:
            piece = (ch.get("delta") or {}).get("content")
            if piece:
                text.append(piece)
                events += 1
        if p.leave_after is not None and events >= p.leave_after:
            return {"outcome": "cancelled"}  # closes the stream
    return {"outcome": "reply", "text": "".join(text), "near_tie_chars": ties}


def _rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def memory_growth(samples: list[float]) -> tuple[float, float] | None:
    """The median RSS (MiB) of the second and of the last quarter of ``samples``."""
    if len(samples) < 8:
        return None
    q = len(samples) // 4
    med = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
    return med(samples[q:2 * q]), med(samples[-q:])


def left_at_near_tie(text: str, alone: str, near_tie_chars: list[int] | None) -> bool:
    """Whether ``text`` leaves ``alone`` at a near tie: a near-tie token starts at or before the
    first character where they differ (a token that differs starts there or earlier)."""
    first = common_prefix(text, alone)
    return any(c <= first for c in near_tie_chars or [])


def verdicts(rows: list[dict[str, Any]], server: dict[str, int], alone: dict[int, str],
             rss: list[float], *, exact: bool, up: bool) -> dict[str, Any]:
    """Each check of the module docstring: ``{"pass": bool, ...its numbers}``."""
    replies = [r for r in rows if r["outcome"] == "reply"]
    cancels = sum(r["outcome"] == "cancelled" for r in rows)
    refused = sum(r["refused"] for r in rows)
    other = [r for r in rows if r["outcome"] not in ("reply", "cancelled")]
    ended = sum(v for k, v in server.items() if k not in ("queued", "refused"))
    lost = {"pass": (not other and server.get("queued") == ended and server.get("failed") == 0
                     and server.get("finished", 0) + server.get("cancelled", 0)
                     == len(replies) + cancels
                     and server.get("finished", 0) >= len(replies)
                     and server.get("refused", 0) + server.get("dropped_busy", 0) == refused),
            "client": {"replies": len(replies), "cancelled": cancels, "refused_503": refused,
                       "other": len(other)},
            "server": server}
    differ = [r for r in replies if r["text"] != alone[r["prompt"]]]
    unexplained = [r for r in differ
                   if not left_at_near_tie(r["text"], alone[r["prompt"]], r.get("near_tie_chars"))]
    out = {"no_request_lost": lost,
           "replies_exact": {"pass": not unexplained, "compared": len(replies),
                             "differ_at_near_ties": len(differ) - len(unexplained),
                             "differ_unexplained": len(unexplained)} if exact else
           {"pass": None, "why": "not exact mode: no near-tie rule"},
           "server_up": {"pass": up},
           "busy_answered_503": {"pass": refused > 0 and not any(r.get("retry_after_missing")
                                                                 for r in rows),
                                 "refused_503": refused}}
    g = memory_growth(rss)
    out["memory_flat"] = ({"pass": None, "why": f"{len(rss)} samples: too few"} if g is None else
                          {"pass": g[1] <= g[0] * (1 + MEMORY_SLACK) + MEMORY_SLACK_MB,
                           "second_quarter_mb": round(g[0], 1), "last_quarter_mb": round(g[1], 1),
                           "samples": len(rss)})
    return out


def run_stress(cfg: Any, s: StressSettings, out: Path, texts: list[str], *,
               exact: bool = True) -> dict[str, Any]:
    """Start our server for ``s.arm`` of ``cfg``, answer ``texts`` (the pool) alone, then the load;
    write and return ``stress.json``'s content and print a one-screen summary."""
    import httpx
    from omegaconf import OmegaConf

    from adaspark import provenance
    from adaspark.config import to_dict
    from adaspark.serving.llama_server import ServerProcess, clean_env
    from adaspark.serving.main import MainArgs, ServeOptions, free_port, main_argv

    out.mkdir(parents=True, exist_ok=True)
    params = out / "params.yaml"
    write_text(params, OmegaConf.to_yaml(OmegaConf.create(to_dict(cfg))))
    port = free_port()
    opts = ServeOptions(port=port, store=out / "store", max_concurrent=s.slots,
                        max_queue=s.queue, busy_wait_s=3600.0)
    argv = [sys.executable, "-m", "adaspark.serving.main",
            *main_argv(MainArgs(params, s.arm, exact, opts))]
    plans = plan(s)
    rows: list[dict[str, Any]] = []
    lock = threading.Lock()
    rss: list[float] = []
    with ServerProcess(argv, port=port, log_path=out / "server.log", env=clean_env(exact=exact),
                       startup_timeout_s=900) as srv:
        alone = {}
        for k in range(s.pool):
            r = one(srv.url, texts[k], Planned(-1, k, k, False, None), s.max_tokens)
            alone[k] = r.get("text", "")
        print(f"stress: {s.pool} one-at-a-time replies; {s.clients} clients x {s.requests} "
              "requests", file=sys.stderr, flush=True)
        done = threading.Event()

        def sample() -> None:
            while not done.wait(1.0):
                m = _rss_mb(srv.proc.pid)
                if m is not None:
                    rss.append(m)

        def client(mine: list[Planned]) -> None:
            for p in mine:
                r = one(srv.url, texts[p.prompt], p, s.max_tokens)
                with lock:
                    rows.append(asdict(p) | r)
                    n = len(rows)
                if n % 50 == 0:
                    print(f"stress: {n}/{s.clients * s.requests} requests", file=sys.stderr,
                          flush=True)

        t0 = time.perf_counter()
        threads = [threading.Thread(target=client, args=(m,)) for m in plans]
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        done.set()
        wall = time.perf_counter() - t0
        time.sleep(0.5)  # the last cancel reaches the engine thread
        health = httpx.get(f"{srv.url}/health", timeout=30).json()
        after = one(srv.url, texts[0], Planned(-1, 0, 0, False, None), 4)
        up = (health.get("active") == 0 and health.get("queued") == 0
              and after["outcome"] == "reply")
        # /health was read before the last request; the pool's one-at-a-time replies came
        # first: they are taken out of the server's counts
        server = {k: v - (s.pool if k in ("queued", "finished") else 0)
                  for k, v in (health.get("requests") or {}).items()}
    checks = verdicts(rows, server, alone, rss, exact=exact, up=up)
    result = {"settings": asdict(s), "exact": exact, "target": cfg.target.name,
              "drafter": cfg.drafter.name, "wall_s": wall, "checks": checks,
              "llama": provenance.llama_build(), "versions": provenance.versions(),
              "git": provenance.git_state(),
              "machine": {"cpus": os.cpu_count(), "host": os.uname().nodename}}
    write_text(out / "requests.csv", csv_text(rows))
    write_json(out / "stress.json", result)
    print(screen(result))
    return result


def screen(result: dict[str, Any]) -> str:
    """The one-screen summary: the settings and each check's verdict and numbers."""
    s = result["settings"]
    lines = [f"stress: {s['arm']}, {s['slots']} slots, queue {s['queue']}, {s['clients']} "
             f"clients x {s['requests']} requests, {result['wall_s']:.0f} s "
             f"({result['target']}, {'exact' if result['exact'] else 'fast'} mode)"]
    for name, c in result["checks"].items():
        verdict = {True: "pass", False: "FAIL", None: "n/a"}[c["pass"]]
        rest = ", ".join(f"{k}={v}" for k, v in c.items() if k != "pass")
        lines.append(f"  {name:<20} {verdict:<5} {rest}")
    return "\n".join(lines)
