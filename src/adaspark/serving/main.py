"""Our engine behind an OpenAI-compatible HTTP API (§4.1: every arm is measured over its engine's
HTTP API, streamed, on the client's clock).

    adaspark serve arm=chain3 target=tiny drafter=tiny-truncated port=8080 [exact=false]
                   [store=DIR] [host=127.0.0.1] [chat_template=FILE] [busy_wait_s=0]
                   [max_concurrent=1] [max_queue=64]
                   [warmup=true|false] [round_log=DIR] [trace_log=DIR] [tool_fallback=generic|none]
    python -m adaspark.serving.main --params params.yaml --arm NAME [--exact|--fast] [--port N]
                                    [--store DIR] [--host H] [--chat-template FILE] [...]

The server's own options are the fields of :class:`ServeOptions`, the one spelling of them:
``key=value`` words for ``adaspark serve`` (:meth:`ServeOptions.from_overrides`), ``--key-name``
flags for ``python -m adaspark.serving.main`` (:func:`add_options`, :meth:`ServeOptions.to_argv`,
:meth:`ServeOptions.from_argv`). Three arguments are not the server's options and stay apart:
the composed config (``adaspark serve`` composes ``conf/``; the module reads ``--params``), the
arm (``arm=NAME`` picks a config file; ``--arm`` names a key under ``arms:``) and the kernel mode
(the config key ``exact=true|false``; ``--exact``/``--fast`` override it). :func:`main_argv`
builds the module's whole argument list, which :func:`parse_main_args` reads back.

Routes: ``POST /v1/chat/completions`` (``stream`` true or false), ``GET /health``,
``GET /v1/models`` (whose ``meta`` records the arm, model files, kernel mode and llama.cpp build).

* The arm is fixed at start; its learned store (AdaSpark's cost and acceptance models) lives in a
  directory given at start (default: a fresh directory per arm under ``runs/serve/``).
  An ``X-Request-Id`` header names the request in the rule's per-round log.
* One request at a time by default, as in the paper: a request that arrives while another
  decodes waits up to ``busy_wait_s`` seconds, then gets 503; it never touches the running one.
  With ``max_concurrent=N`` (N > 1), up to N requests decode together, one verify batch per
  step, and up to ``max_queue`` more wait for a slot, each at most ``busy_wait_s`` seconds;
  past either, 503 with ``Retry-After`` (:mod:`adaspark.serving.batching`). ``GET /health``
  then reports the slots, active requests, queue length and rows per step.
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
import typing
from dataclasses import dataclass, fields
from datetime import datetime
from pathlib import Path
from typing import Any, NoReturn

from omegaconf import DictConfig, OmegaConf

from adaspark import paths
from adaspark.checks import check_value, spec
from adaspark.config import ConfigError
from adaspark.decoding.sampling import SamplingParams
from adaspark.schema import ArmConfig, check_arm
from adaspark.serving.batching import start_runner
from adaspark.serving.http import make_app
from adaspark.serving.requests import TOOL_FALLBACKS
from adaspark.serving.service import ArmService

DEFAULT_PORT = 8080
DEFAULT_HOST = "127.0.0.1"


# ---------------------------------------------------------------------------------------------
# Entry points


@dataclass(frozen=True)
class ServeOptions:
    """Where and how to serve; everything about the engine comes from the config. Each field's
    metadata (:func:`adaspark.checks.spec`) gives its range or choices and its help line; values
    are checked when the options are made (a :class:`~adaspark.config.ConfigError` naming the
    key, the value and what is allowed)."""

    host: str = spec(default=DEFAULT_HOST, help="address to listen on")
    port: int = spec(min=0, max=65535, default=DEFAULT_PORT,
                     help="port to listen on (0 = a free port)")
    store: Path | None = spec(default=None, help="the arm's learned store (default: a fresh "
                              "directory under runs/serve/<arm>/)")
    chat_template: Path | None = spec(default=None, help="a Jinja chat template file in place "
                                      "of the model's own")
    busy_wait_s: float = spec(min=0, default=0.0, help="seconds a request waits for the one "
                              "decoding (with max_concurrent > 1: for a slot, in the queue) "
                              "before it gets 503")
    max_concurrent: int = spec(min=1, max=64, default=1, help="requests decoding together, "
                               "one verify batch per step (1: one at a time, the paper's "
                               "protocol)")
    max_queue: int = spec(min=0, default=64, help="with max_concurrent > 1: requests that may "
                          "wait for a slot; one more gets 503")
    warmup: bool = spec(default=True, help="decode a few tokens before listening")
    round_log: Path | None = spec(default=None, help="directory of the width rule's per-round "
                                  "log (Parquet)")
    trace_log: Path | None = spec(default=None, help="directory of every round's trace, one "
                                  "Parquet file per request (what `adaspark replay` reads)")
    tool_fallback: str = spec(choices=TOOL_FALLBACKS, default="generic",
                              help="tools for a chat template without tool support")

    def __post_init__(self) -> None:
        hints = typing.get_type_hints(type(self))
        for f in fields(self):
            value = getattr(self, f.name)
            if hints[f.name] == Path | None:
                if value is not None and not isinstance(value, Path):
                    raise ConfigError(f"{f.name}={value!r} is not allowed: {f.name} must be a "
                                      "path or null")
                continue
            object.__setattr__(self, f.name, check_value(f.name, value, hints[f.name],
                                                         dict(f.metadata)))
        if not self.host:
            raise ConfigError("host= is empty: name the address to listen on, e.g. "
                              "host=127.0.0.1")

    @classmethod
    def from_overrides(cls, words: dict[str, str]) -> ServeOptions:
        """From ``adaspark serve``'s own ``key=value`` words (text): each value parsed by its
        field's type and checked; an unknown key is refused, naming the known ones."""
        known = [f.name for f in fields(cls)]
        unknown = sorted(k for k in words if k not in known)
        if unknown:
            raise ConfigError(f"unknown server option(s) {', '.join(unknown)}; the server takes "
                              f"{', '.join(known)}")
        return cls(**{k: _from_text(cls, k, v) for k, v in words.items()})

    @classmethod
    def from_argv(cls, argv: list[str]) -> ServeOptions:
        """From ``--key-name=value`` flags (what :meth:`to_argv` writes); a bad value or an
        unknown flag is a :class:`~adaspark.config.ConfigError`."""
        parser = _Parser(prog="ServeOptions.from_argv", add_help=False)
        add_options(parser)
        return options_of(_parse(parser, argv))

    def to_argv(self) -> list[str]:
        """The flags that give these options to :meth:`from_argv` (and to
        ``python -m adaspark.serving.main``): one per field that is not at its default."""
        out: list[str] = []
        for f in fields(self):
            value = getattr(self, f.name)
            if value == f.default:
                continue
            flag = _flag(f.name)
            if isinstance(value, bool):
                out.append(flag if value else "--no-" + flag[2:])
            else:
                out.append(f"{flag}={value}")  # one word: a value may start with "-"
        return out


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _from_text(cls: type, key: str, text: str) -> Any:
    """The value of field ``key`` of ``cls`` written as ``text``, checked (a ConfigError naming
    the key, the text and what is allowed otherwise)."""
    f = next(f for f in fields(cls) if f.name == key)
    tp = typing.get_type_hints(cls)[key]
    if tp == Path | None:
        return Path(text) if text else None
    value: Any = text
    try:
        if tp is bool:
            value = {"true": True, "false": False}.get(text.lower(), text)
        elif tp is int:
            value = int(text)
        elif tp is float:
            value = float(text)
    except ValueError:
        pass  # left as text: check_value names it and what is allowed
    return check_value(key, value, tp, dict(f.metadata))


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are :class:`ConfigError` (a clear message, exit code 2
    through :func:`adaspark.stages.exit_code`), not a usage line and ``SystemExit``."""

    def error(self, message: str) -> NoReturn:
        raise ConfigError(f"{self.prog}: {message}")


def add_options(parser: argparse.ArgumentParser) -> None:
    """Add a ``--key-name`` flag for each field of :class:`ServeOptions` (a bool as
    ``--name``/``--no-name``), parsed and checked as :meth:`ServeOptions.from_overrides` does.
    Each flag's value lands under the field's name."""
    hints = typing.get_type_hints(ServeOptions)
    for f in fields(ServeOptions):
        meta = dict(f.metadata)
        help_ = meta.get("help", "")
        if "choices" in meta:
            help_ += f" (one of {', '.join(meta['choices'])})"
        if hints[f.name] is bool:
            parser.add_argument(_flag(f.name), dest=f.name, default=None,
                                action=argparse.BooleanOptionalAction,
                                help=f"{help_} (default {str(f.default).lower()})")
            continue

        def parse(text: str, key: str = f.name) -> Any:
            try:
                return _from_text(ServeOptions, key, text)
            except ConfigError as e:
                raise argparse.ArgumentTypeError(str(e)) from None

        parser.add_argument(_flag(f.name), dest=f.name, default=None, type=parse,
                            metavar=f.name.upper(), help=f"{help_} (default {f.default})")


def options_of(ns: argparse.Namespace) -> ServeOptions:
    """The :class:`ServeOptions` in a namespace parsed with :func:`add_options`' flags (a flag
    not given keeps the field's default)."""
    given = {f.name: getattr(ns, f.name) for f in fields(ServeOptions)
             if getattr(ns, f.name, None) is not None}
    return ServeOptions(**given)


def _parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """``argv`` parsed; an unknown argument is a ConfigError that lists the known flags."""
    ns, rest = parser.parse_known_args(argv)
    if rest:
        flags = sorted(o for a in parser._actions for o in a.option_strings if o.startswith("--"))
        raise ConfigError(f"{parser.prog}: unknown argument(s) {' '.join(rest)}; the known "
                          f"flags are {', '.join(flags)}")
    return ns


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


def serve(cfg: DictConfig, arm: ArmConfig, opts: ServeOptions, *, exact: bool,
          sampling: SamplingParams | None = None) -> int:
    """Load the (checked) arm and serve until interrupted; ``sampling``: the values of the
    sampling fields a request leaves out (the checked ``sampling`` group)."""
    import uvicorn

    sock = bind_socket(opts.host, opts.port)  # first: a taken port fails before the model loads
    try:
        store = opts.store or fresh_store_dir(str(arm.name))
        service = ArmService(cfg, arm, exact=exact, store_dir=Path(store),
                             chat_template=opts.chat_template, round_log=opts.round_log,
                             trace_log=opts.trace_log,
                             warmup=opts.warmup, tool_fallback=opts.tool_fallback,
                             sampling_defaults=sampling, max_concurrent=opts.max_concurrent)
        if service.batched:
            start_runner(service, max_queue=opts.max_queue, queue_wait_s=opts.busy_wait_s)
    except BaseException:
        sock.close()
        raise
    port = int(sock.getsockname()[1])
    app = make_app(service, busy_wait_s=opts.busy_wait_s)
    # uvloop and httptools: the event loop's time per streamed token is taken from the decode
    # on a 2-core machine (issue 12, plain-decode parity); h11 and asyncio's loop cost twice it.
    config = uvicorn.Config(app, host=opts.host, port=port, log_level="warning", loop="uvloop",
                            http="httptools",
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


@dataclass(frozen=True)
class MainArgs:
    """The arguments of ``python -m adaspark.serving.main``: the composed config file, the key of
    the arm under its ``arms:``, the kernel mode (None: the file's ``exact``) and the server's
    options."""

    params: Path
    arm: str
    exact: bool | None
    options: ServeOptions


def _main_parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="adaspark.serving.main", description="serve one arm of a composed "
                 "params file")
    ap.add_argument("--params", required=True, type=Path, help="composed config (params.yaml)")
    ap.add_argument("--arm", required=True, help="key under `arms:` in the params file")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--exact", dest="exact", action="store_const", const=True, default=None,
                      help="exact kernels (correctness checks)")
    mode.add_argument("--fast", dest="exact", action="store_const", const=False,
                      help="llama.cpp's default kernels")
    add_options(ap)
    return ap


def parse_main_args(argv: list[str]) -> MainArgs:
    """``python -m adaspark.serving.main``'s arguments; a bad or unknown one is a
    :class:`ConfigError`."""
    ns = _parse(_main_parser(), argv)
    return MainArgs(params=ns.params, arm=ns.arm, exact=ns.exact, options=options_of(ns))


def main_argv(args: MainArgs) -> list[str]:
    """The arguments that :func:`parse_main_args` reads back as ``args`` (how the run stage
    starts our engine: :func:`adaspark.runs.launch.launch`)."""
    mode = [] if args.exact is None else ["--exact" if args.exact else "--fast"]
    return ["--params", str(args.params), "--arm", args.arm, *mode, *args.options.to_argv()]


def main(argv: list[str] | None = None) -> int:
    """``python -m adaspark.serving.main --params FILE --arm NAME ...``: serve one arm of a composed
    ``params.yaml`` (how the run stage starts our engine)."""
    try:
        a = parse_main_args(sys.argv[1:] if argv is None else argv)
    except ConfigError as e:
        print(e, file=sys.stderr)
        return 2
    cfg = OmegaConf.load(a.params)
    assert isinstance(cfg, DictConfig)
    arms_cfg = cfg.get("arms") or {}
    if a.arm not in arms_cfg:
        print(f"adaspark.serving.main: {a.params} has no arm {a.arm!r} under `arms:`; it has "
              f"{sorted(arms_cfg)}", file=sys.stderr)
        return 2
    exact = a.exact if a.exact is not None else bool(cfg.get("exact") or False)
    try:  # the params file is this process's edge: its arm is checked here, once
        arm = check_arm(arms_cfg[a.arm], f"arms.{a.arm}")
        sampling = (SamplingParams.check(cfg.sampling)
                    if cfg.get("sampling") is not None else None)
    except ConfigError as e:
        print(f"adaspark.serving.main: {a.params}: {e}", file=sys.stderr)
        return 2
    return serve(cfg, arm, a.options, exact=exact, sampling=sampling)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
