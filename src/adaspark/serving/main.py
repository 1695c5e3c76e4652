"""Our engine behind an OpenAI-compatible HTTP API (§4.1: every arm is measured over its engine's
HTTP API, streamed, on the client's clock).

    adaspark serve arm=chain3 target=tiny drafter=tiny-truncated port=8080 [exact=false]
                   [store=DIR] [host=127.0.0.1] [chat_template=FILE] [busy_wait_s=0]
                   [tool_fallback=generic|none]
    python -m adaspark.serving.main --params params.yaml --arm NAME --port N --store DIR [--exact]

Routes: ``POST /v1/chat/completions`` (``stream`` true or false), ``GET /health``,
``GET /v1/models`` (whose ``meta`` records the arm, model files, kernel mode and llama.cpp build).

* The arm is fixed at start; its learned store (AdaSpark's cost and acceptance models) lives in a
  directory given at start (default: a fresh directory per arm under ``runs/serve/``).
  An ``X-Request-Id`` header names the request in the rule's per-round log.
* One request at a time, as in the paper: a request that arrives while another decodes waits up
  to ``busy_wait_s`` seconds, then gets 503; it never touches the running one.
* The previous request's KV stays and the longest common token prefix is reused
  (``Target.prefill``), as llama-server's ``cache_prompt`` does.
* Streaming sends one server-sent event per generated token, the tokens of one round back to
  back (HARNESS "Client clock"): the client's clock then measures decode the same way for this
  server and llama-server. A token whose text is held back (an incomplete UTF-8 character, a
  possible ``<tool_call>`` tag) or that has none (the end-of-generation token) gets an event with
  an empty delta. The last chunk carries ``usage`` and ``timings``: rounds, drafted and accepted
  candidates in total (``draft_n``, ``draft_n_accepted``, llama-server's names) and per source,
  widths, and the width rule's own per-request summary.
* Tools are rendered by the model's chat template and calls parsed from the output
  (:mod:`adaspark.serving.tool_calls`); a template without tool support gets the generic fallback
  (``tool_fallback=generic``, the default) or, as the vendored llama-server does, no tools at
  all (``tool_fallback=none``).
* The decode loop is synchronous; it runs on one engine thread and hands each round's tokens to
  the HTTP side through a queue. A client that disconnects mid-stream stops the decode after the
  current round (the committed state stays consistent) and the server keeps serving.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from adaspark import paths
from adaspark.schema import arm_config
from adaspark.serving.http import make_app
from adaspark.serving.requests import TOOL_FALLBACKS
from adaspark.serving.service import ArmService

DEFAULT_PORT = 8080
DEFAULT_HOST = "127.0.0.1"


# ---------------------------------------------------------------------------------------------
# Entry points


@dataclass
class ServeOptions:
    """Where and how to serve; everything about the engine comes from the config."""

    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    store: Path | None = None
    chat_template: Path | None = None
    busy_wait_s: float = 0.0
    warmup: bool = True
    round_log: Path | None = None
    tool_fallback: str = "generic"


def free_port(host: str = DEFAULT_HOST) -> int:
    """A port free on ``host`` right now (for port=0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class ServeError(RuntimeError):
    """The server cannot start; the message says why and what to do."""


def bind_socket(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` (0 = a free port), as uvicorn binds it; a clear
    :class:`ServeError` when the address is taken or not this machine's."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise ServeError(f"cannot listen on {host}:{port} ({e.strerror or e}): pick another "
                         "port= (port=0 takes a free one), stop what holds this one, or check "
                         "that host= is an address of this machine") from None
    sock.set_inheritable(True)
    return sock


def fresh_store_dir(arm: str) -> Path:
    """A new directory per arm under ``runs/serve/`` (an empty store: a cold arm)."""
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    base = paths.checkout_root() / "runs" / "serve" / arm
    d = base / stamp
    k = 1
    while d.exists():
        k += 1
        d = base / f"{stamp}-{k}"
    return d


def serve(cfg: DictConfig, arm: DictConfig, opts: ServeOptions, *, exact: bool) -> int:
    """Load the arm and serve until interrupted."""
    typed = arm_config(arm, f"arms.{arm.name}")
    import uvicorn

    sock = bind_socket(opts.host, opts.port)  # first: a taken port fails before the model loads
    try:
        store = opts.store or fresh_store_dir(str(arm.name))
        service = ArmService(cfg, typed, exact=exact, store_dir=Path(store),
                             chat_template=opts.chat_template, round_log=opts.round_log,
                             warmup=opts.warmup, tool_fallback=opts.tool_fallback)
    except BaseException:
        sock.close()
        raise
    port = int(sock.getsockname()[1])
    app = make_app(service, busy_wait_s=opts.busy_wait_s)
    config = uvicorn.Config(app, host=opts.host, port=port, log_level="warning",
                            access_log=False, lifespan="off", timeout_keep_alive=600,
                            timeout_graceful_shutdown=5)
    print(f"adaspark serve: arm {arm.name} on {cfg.target.name}, "
          f"{'exact' if exact else 'fast'} kernels, store {store}, tools "
          f"{service.caps.format}; listening on http://{opts.host}:{port}",
          file=sys.stderr, flush=True)
    try:
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        cur = service.current
        if cur is not None:
            cur.cancel.set()
        service.close()
    return 0


#: ``adaspark serve`` keys that are not part of the composed config.
SERVE_KEYS = ("host", "port", "store", "chat_template", "busy_wait_s", "warmup", "round_log",
              "tool_fallback")


def serve_command(args: list[str]) -> int:
    """``adaspark serve key=value ...``: compose ``conf/`` with the overrides, serve ``arm``."""
    from adaspark.config import compose
    from adaspark.schema import validate

    raw: dict[str, Any] = {}
    rest = []
    for a in args:
        key, eq, value = a.partition("=")
        if not eq or key not in SERVE_KEYS:
            rest.append(a)
            continue
        raw[key] = value
    opts = serve_options(raw)
    cfg = compose(rest)
    validate(cfg, command="serve")
    exact = False if cfg.get("exact") is None else bool(cfg.exact)
    return serve(cfg, cfg.arm, opts, exact=exact)


def serve_options(raw: dict[str, str]) -> ServeOptions:
    """:class:`ServeOptions` from ``adaspark serve``'s own ``key=value`` arguments (text), each
    checked: a bad one is a ConfigError naming the key, the value and what is allowed."""
    from adaspark.config import ConfigError
    from adaspark.schema import check_value

    opts = ServeOptions()
    for key, value in raw.items():
        if key == "port":
            try:
                port = int(value)
            except ValueError:
                raise ConfigError(f"port={value!r} is not allowed: port must be an integer "
                                  "from 0 to 65535 (0 = a free port)") from None
            opts.port = check_value("port", port, int, {"min": 0, "max": 65535})
        elif key == "busy_wait_s":
            try:
                wait = float(value)
            except ValueError:
                raise ConfigError(f"busy_wait_s={value!r} is not allowed: busy_wait_s must be "
                                  "a number >= 0 (seconds)") from None
            opts.busy_wait_s = check_value("busy_wait_s", wait, float, {"min": 0})
        elif key in ("warmup",):
            flags = {"true": True, "false": False}
            if value.lower() not in flags:
                raise ConfigError(f"{key}={value!r} is not allowed: {key} must be true or false")
            opts.warmup = flags[value.lower()]
        elif key == "tool_fallback":
            if value not in TOOL_FALLBACKS:
                raise ConfigError(f"tool_fallback={value!r} is not allowed: tool_fallback must "
                                  f"be one of {', '.join(TOOL_FALLBACKS)}")
            opts.tool_fallback = value
        elif key == "host":
            if not value:
                raise ConfigError("host= is empty: name the address to listen on, e.g. "
                                  "host=127.0.0.1")
            opts.host = value
        else:
            setattr(opts, key, Path(value) if value else None)
    return opts


def main(argv: list[str] | None = None) -> int:
    """``python -m adaspark.serving.main --params FILE --arm NAME ...``: serve one arm of a composed
    ``params.yaml`` (how the run stage starts our engine)."""
    ap = argparse.ArgumentParser(description="serve one arm of a composed params file")
    ap.add_argument("--params", required=True, help="composed config (params.yaml)")
    ap.add_argument("--arm", required=True, help="key under `arms:` in the params file")
    ap.add_argument("--host", default=DEFAULT_HOST)
    ap.add_argument("--port", type=int, default=DEFAULT_PORT)
    ap.add_argument("--store", type=Path, default=None)
    ap.add_argument("--chat-template", type=Path, default=None)
    ap.add_argument("--round-log", type=Path, default=None)
    ap.add_argument("--busy-wait-s", type=float, default=0.0)
    ap.add_argument("--no-warmup", action="store_true")
    ap.add_argument("--tool-fallback", choices=TOOL_FALLBACKS, default="generic")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--exact", action="store_true", help="exact kernels (correctness checks)")
    mode.add_argument("--fast", action="store_true", help="llama.cpp's default kernels")
    a = ap.parse_args(argv)
    cfg = OmegaConf.load(a.params)
    assert isinstance(cfg, DictConfig)
    arms_cfg = cfg.get("arms") or {}
    if a.arm not in arms_cfg:
        print(f"adaspark.serving.main: {a.params} has no arm {a.arm!r} under `arms:`; it has "
              f"{sorted(arms_cfg)}", file=sys.stderr)
        return 2
    exact = bool(a.exact) if (a.exact or a.fast) else bool(cfg.get("exact") or False)
    opts = ServeOptions(host=a.host, port=a.port, store=a.store, chat_template=a.chat_template,
                        busy_wait_s=a.busy_wait_s, warmup=not a.no_warmup,
                        round_log=a.round_log, tool_fallback=a.tool_fallback)
    return serve(cfg, arms_cfg[a.arm], opts, exact=exact)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
