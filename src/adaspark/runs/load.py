"""Throughput and latency under load (issue 37): our server with ``max_concurrent=N`` against
llama-server with ``--parallel N``, closed loop (N clients, each sending its next request when its
last one ends) or open loop (requests arriving at a set rate, Poisson).

Requests: the first user turn of every conversation of the ``short`` subset and every Spec-Bench
conversation (``source: short+specbench``; tools dropped: a single turn each), or Spec-Bench's
alone (``specbench``: short prompts, where long prefills would hide the decode), in a fixed order,
cycled to ``requests`` per point, each streamed with ``max_tokens``. The load generator is a
thread per client over the project's own client (:class:`adaspark.serving.client.ChatClient`, the
client clock of every run), not an outside load tool: its times are measured as every other
result here is.

Per arm and point (:func:`summarise`): aggregate output tok/s (every reply's tokens over the wall
time from the first request sent to the last reply done), per-request decode tok/s (client
clock), time to first token and inter-token latency (a request's mean gap between token events)
at p50 and p99 over requests, queue wait (our server's ``timings.queue_ms``), mean rows and
requests per step (ours) and our server's step times from ``/health``. Our servers keep their
store in one directory across the points of an arm (slot 0's file is the one-slot server's), so
AdaSpark's learned state is carried from point to point, in the order the points run (N rising).

:func:`run_points` writes ``requests.csv`` (one row per request), ``points.csv`` and ``load.json``
(settings, llama.cpp build, machine) under its directory, point by point, atomically; a point
already in ``points.csv`` with the same settings is skipped, so a killed run resumes.
"""

from __future__ import annotations

import csv
import os
import random
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from adaspark.config import ConfigError
from adaspark.io import csv_text, write_json, write_text


@dataclass(frozen=True)
class LoadSettings:
    """A load run's points: ``arms`` (our arms and llama-server's), ``clients`` (closed loop:
    clients per point; open loop: the servers' slots), ``rates`` (open loop: requests per
    second), ``requests`` per point, ``max_tokens`` per reply, the prompts' ``source``, the
    ``mode`` and the open loop's arrival ``seed``."""

    arms: tuple[str, ...]
    clients: tuple[int, ...]
    rates: tuple[float, ...]
    requests: int
    max_tokens: int
    source: str
    mode: str
    seed: int

    def __post_init__(self) -> None:
        if self.mode not in ("closed", "open"):
            raise ConfigError(f"load.mode={self.mode!r}: use closed or open")
        if self.source not in ("short+specbench", "specbench"):
            raise ConfigError(f"load.source={self.source!r}: use short+specbench or specbench")
        if any(n < 1 for n in self.clients) or self.requests < 1 or self.max_tokens < 1:
            raise ConfigError("load.clients, load.requests and load.max_tokens must be >= 1")
        if self.mode == "open" and (not self.rates or any(r <= 0 for r in self.rates)):
            raise ConfigError("load.rates must be > 0 requests per second in open loop")

    @classmethod
    def of(cls, raw: Any) -> LoadSettings:
        d = dict(raw)
        known = {"arms", "clients", "rates", "requests", "max_tokens", "source", "mode", "seed"}
        unknown = sorted(set(d) - known)
        missing = sorted(known - set(d))
        if unknown or missing:
            raise ConfigError(f"load: unknown key(s) {unknown}, missing {missing}; the keys "
                              f"are {sorted(known)}")
        return cls(arms=tuple(str(a) for a in d["arms"]),
                   clients=tuple(int(n) for n in d["clients"]),
                   rates=tuple(float(r) for r in d["rates"]), requests=int(d["requests"]),
                   max_tokens=int(d["max_tokens"]), source=str(d["source"]),
                   mode=str(d["mode"]), seed=int(d["seed"]))


POINT_KEYS = ["arm", "mode", "clients", "rate", "requests", "max_tokens", "source"]
ROW_KEYS = ["status", "t_send", "t_done", "tokens", "ttft_s", "itl_s", "decode_tps", "queue_ms",
            "rows_per_step", "companions", "error"]


def prompts(testset: Path, n: int, source: str) -> list[str]:
    """First user turns of the ``short`` subset and of Spec-Bench (``source`` ``short+specbench``)
    or of Spec-Bench alone (``specbench``: short prompts, for a machine where long prefills
    would dominate), cycled to ``n``."""
    from adaspark.runs.conversation import plan_subset
    from adaspark.testset.lock import load_checked_sets

    sets = load_checked_sets(testset)
    texts = ([p.conversation.turns[0].text for p in plan_subset(sets, "short")]
             if source == "short+specbench" else [])
    spec = next(s for s in sets if s.name == "specbench")
    texts += [c.turns[0].text for c in spec.conversations if c.turns[0].text not in texts]
    return [texts[i % len(texts)] for i in range(n)]


def percentile(xs: list[float], q: float) -> float | None:
    xs = sorted(x for x in xs if x is not None)
    if not xs:
        return None
    k = min(len(xs) - 1, max(0, round(q / 100 * (len(xs) - 1))))
    return xs[k]


def one_request(url: str, text: str, max_tokens: int) -> dict[str, Any]:
    from adaspark.serving.client import ChatClient, ServerReplyError

    t0 = time.perf_counter()
    with ChatClient(url) as c:
        try:
            r = c.chat([{"role": "user", "content": text}], max_tokens=max_tokens)
        except ServerReplyError as e:
            return dict.fromkeys(ROW_KEYS) | {"status": e.status, "t_send": t0,
                                              "t_done": time.perf_counter(), "tokens": 0,
                                              "error": str(e)[:300]}
    n = r.completion_tokens
    itl = (r.decode_s / (r.n_token_events - 1)
           if r.decode_s is not None and r.n_token_events > 1 else None)
    tm = r.timings or {}
    return {"status": 200, "error": None, "t_send": r.t_request, "t_done": r.t_done, "tokens": n,
            "ttft_s": r.ttft_s, "itl_s": itl, "decode_tps": r.decode_tps,
            "queue_ms": tm.get("queue_ms"), "rows_per_step": tm.get("rows_per_step"),
            "companions": tm.get("companions_per_step")}


def closed_loop(url: str, texts: list[str], clients: int, max_tokens: int) -> list[dict]:
    todo = list(enumerate(texts))
    lock = threading.Lock()
    out: list[dict] = []

    def client() -> None:
        while True:
            with lock:
                if not todo:
                    return
                i, text = todo.pop(0)
            row = one_request(url, text, max_tokens) | {"index": i}
            with lock:
                out.append(row)

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def open_loop(url: str, texts: list[str], rate: float, max_tokens: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    out: list[dict] = []
    lock = threading.Lock()
    threads = []
    t = time.perf_counter()
    for i, text in enumerate(texts):
        t += rng.expovariate(rate)
        time.sleep(max(0.0, t - time.perf_counter()))

        def go(i: int = i, text: str = text) -> None:
            row = one_request(url, text, max_tokens) | {"index": i}
            with lock:
                out.append(row)

        th = threading.Thread(target=go)
        th.start()
        threads.append(th)
    for th in threads:
        th.join()
    return out


def summarise(rows: list[dict]) -> dict[str, Any]:
    ok = [r for r in rows if r["status"] == 200]
    wall = max(r["t_done"] for r in rows) - min(r["t_send"] for r in rows)
    tokens = sum(r["tokens"] for r in ok)
    col = lambda k: [r[k] for r in ok if r.get(k) is not None]  # noqa: E731
    mean = lambda xs: sum(xs) / len(xs) if xs else None  # noqa: E731
    return {"answered": len(ok), "refused": len(rows) - len(ok), "wall_s": wall,
            "aggregate_tps": tokens / wall if wall > 0 else None,
            "decode_tps_p50": percentile(col("decode_tps"), 50),
            "ttft_p50_s": percentile(col("ttft_s"), 50),
            "ttft_p99_s": percentile(col("ttft_s"), 99),
            "itl_p50_s": percentile(col("itl_s"), 50), "itl_p99_s": percentile(col("itl_s"), 99),
            "queue_p50_ms": percentile(col("queue_ms"), 50),
            "rows_per_step": mean(col("rows_per_step")),
            "requests_per_step": (mean(col("companions")) + 1) if col("companions") else None}


def server_for(cfg: Any, arm_name: str, clients: int, out: Path, params: Path):
    """A started server for ``arm_name`` with ``clients`` slots (a context manager)."""
    from adaspark.schema import check_arm
    from adaspark.serving.llama_server import (
        ServerProcess,
        clean_env,
        llama_server_process,
        spec_from_config,
    )
    from adaspark.serving.main import MainArgs, ServeOptions, free_port, main_argv

    arm = check_arm(cfg.arms[arm_name], f"arms.{arm_name}")
    log = out / "logs" / f"{arm_name}-{clients}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    port = free_port()
    if arm.engine == "llama-server":
        spec = spec_from_config(cfg, arm, port=port, parallel=clients)
        return llama_server_process(spec, log, startup_timeout_s=900)
    opts = ServeOptions(port=port, store=out / "stores" / arm_name, max_concurrent=clients,
                        max_queue=max(64, clients), busy_wait_s=3600.0)
    argv = [sys.executable, "-m", "adaspark.serving.main",
            *main_argv(MainArgs(params, arm_name, False, opts))]
    return ServerProcess(argv, port=port, log_path=log, env=clean_env(exact=False),
                         startup_timeout_s=900)


#: Our server's step times (``/health``, over its last steps; none for llama-server).
HEALTH_KEYS = ["step_ms", "decode_ms_per_step", "readout_ms_per_step", "draft_ms_per_step",
               "host_us_per_request_step"]


def _health(url: str) -> dict[str, Any]:
    """The server's ``/health`` (empty when it does not answer)."""
    import httpx

    from adaspark.serving.client import ChatClient

    try:
        with ChatClient(url, timeout_s=10) as c:
            return c.health()
    except (httpx.HTTPError, ValueError):  # gone: the point keeps its client-side figures
        return {}


def _append_csv(path: Path, rows: list[dict]) -> None:
    """``rows`` after the file's rows, the columns the union of both (rewritten atomically)."""
    old: list[dict] = []
    if path.is_file():
        with path.open() as f:
            old = list(csv.DictReader(f))
    write_text(path, csv_text(old + rows))


def read_points(out: Path) -> list[dict[str, Any]]:
    """The points a load run wrote (``points.csv``; none yet: an empty list)."""
    path = out / "points.csv"
    if not path.is_file():
        return []
    with path.open() as f:
        return list(csv.DictReader(f))


def run_points(cfg: Any, settings: LoadSettings, out: Path, testset: Path) -> list[dict]:
    """Every point of ``settings`` not yet in ``out`` (module docstring), each against a server
    started for it; returns every point, old and new, and prints a one-screen summary."""
    from omegaconf import OmegaConf

    from adaspark import provenance
    from adaspark.config import to_dict

    out.mkdir(parents=True, exist_ok=True)
    params = out / "params.yaml"
    write_text(params, OmegaConf.to_yaml(OmegaConf.create(to_dict(cfg))))
    points = read_points(out)
    have = {tuple(str(r[k]) for k in POINT_KEYS) for r in points}
    write_json(out / "load.json", {
        "settings": asdict(settings), "target": cfg.target.name, "drafter": cfg.drafter.name,
        "llama": provenance.llama_build(), "versions": provenance.versions(),
        "git": provenance.git_state(),
        "machine": {"cpus": os.cpu_count(), "host": os.uname().nodename}})
    todo = [(a, n, r) for a in settings.arms for n in settings.clients
            for r in (settings.rates if settings.mode == "open" else (0.0,))]
    texts = prompts(testset, settings.requests, settings.source) if todo else []
    for k, (arm, n, rate) in enumerate(todo, start=1):
        key = {"arm": arm, "mode": settings.mode, "clients": n, "rate": rate,
               "requests": settings.requests, "max_tokens": settings.max_tokens,
               "source": settings.source}
        if tuple(str(key[c]) for c in POINT_KEYS) in have:
            continue
        print(f"load [{k}/{len(todo)}]: {arm} N={n}" + (f" rate={rate}/s" if rate else ""),
              file=sys.stderr, flush=True)
        with server_for(cfg, arm, n, out, params) as srv:
            if settings.mode == "closed":
                rows = closed_loop(srv.url, texts, n, settings.max_tokens)
            else:
                rows = open_loop(srv.url, texts, rate, settings.max_tokens, settings.seed)
            health = _health(srv.url)
        s = summarise(rows) | {c: health.get(c) for c in HEALTH_KEYS}
        points.append(key | s)
        print(f"  {s['aggregate_tps']:.2f} tok/s aggregate, {s['answered']}/{len(rows)} "
              "answered", file=sys.stderr, flush=True)
        _append_csv(out / "requests.csv", [key | r for r in rows])
        write_text(out / "points.csv", csv_text(points))
    print(_screen(points))
    return points


def _screen(points: list[dict]) -> str:
    lines = [f"{'arm':<16}{'N':>3}{'rate':>6}{'agg tok/s':>11}{'dec p50':>9}{'ttft p99':>10}"
             f"{'itl p99':>9}{'rows/step':>10}"]
    fmt = lambda v, p=2: "-" if v in (None, "") else f"{float(v):.{p}f}"  # noqa: E731
    for p in points:
        lines.append(f"{p['arm']:<16}{p['clients']:>3}{fmt(p['rate'], 1):>6}"
                     f"{fmt(p['aggregate_tps']):>11}{fmt(p['decode_tps_p50']):>9}"
                     f"{fmt(p['ttft_p99_s']):>10}{fmt(p['itl_p99_s'], 3):>9}"
                     f"{fmt(p['rows_per_step'], 1):>10}")
    return "\n".join(lines)


