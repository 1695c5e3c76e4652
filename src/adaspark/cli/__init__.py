"""``adaspark <command> key=value ...``: every command composes ``conf/`` with its overrides.

Commands: ``generate`` (decode one prompt with an arm), ``models`` (assemble and check the model
files of ``data/models.json``), ``serve``, ``run``, ``dspark-file`` (write a DSpark drafter GGUF
for a target: random or oracle weights), ``replay`` (an arm's width rule over a run's
labelled replies, priced by a device model), ``device-shape`` and ``device-source`` (what
``scripts/device_profile.sh`` needs to profile a device) and ``config`` (print the composed
config).
Every command checks its composed config against :mod:`adaspark.schema` before it runs: a bad
value exits 2 with the key, the value and what is allowed; any other failure exits 1.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable

from adaspark.config import ConfigError, compose, to_dict

COMMANDS: dict[str, Callable[[list[str]], int]] = {}


def command(name: str) -> Callable[[Callable[[list[str]], int]], Callable[[list[str]], int]]:
    def deco(fn: Callable[[list[str]], int]) -> Callable[[list[str]], int]:
        COMMANDS[name] = fn
        return fn

    return deco


@command("models")
def cmd_models(args: list[str]) -> int:
    """Assemble every model file of the manifest (or ``keys=a,b``) and check its sha256."""
    from adaspark import model_files

    keys = None
    for a in args:
        k, _, v = a.partition("=")
        if k == "keys":
            keys = [x for x in v.split(",") if x]
        else:
            raise ConfigError(f"models takes only keys=a,b; got {a!r}")
    entries = model_files.load_manifest()
    for key in keys or list(entries):
        if key not in entries:
            raise ConfigError(f"unknown model {key!r}; the manifest names {sorted(entries)}")
        path = model_files.assemble(key, log=lambda m: print(m, file=sys.stderr))
        model_files.verified_path(key)
        print(f"ok  {key}  {path}")
    return 0


@command("generate")
def cmd_generate(args: list[str]) -> int:
    """Decode one prompt with ``arm=``; ``json=true`` prints a JSON object last."""
    from adaspark.cli.generate import run_generate
    from adaspark.config_check import validate
    from adaspark.overrides import check_overrides

    check_overrides(args, "generate")
    cfg = compose(args)
    checked = validate(cfg, command="generate")
    assert checked.arm is not None  # generate composes arm=
    result = run_generate(cfg, checked.arm, checked.sampling)
    if not cfg.json:
        print(result["text"])
    else:
        print(json.dumps({k: v for k, v in result.items() if k != "meta"} | {
            "meta": result["meta"]}, ensure_ascii=False))
    return 3 if result.get("greedy_match") is False else 0


@command("dspark-file")
def cmd_dspark_file(args: list[str]) -> int:
    """Write a DSpark drafter GGUF for the target (kind=random|oracle out=FILE ...)."""
    from adaspark.cli.dspark_file import cli_main

    return cli_main(args)


@command("device-shape")
def cmd_device_shape(args: list[str]) -> int:
    """Write a GGUF's shape file for scripts/device_profile.sh (model=KEY|FILE out=FILE.json)."""
    from adaspark.replay.profile import cli_shape

    return cli_shape(args)


@command("device-source")
def cmd_device_source(args: list[str]) -> int:
    """Pack the built llama.cpp source for scripts/device_profile.sh (out=FILE.tar.gz)."""
    from adaspark.replay.profile import cli_source

    return cli_source(args)


@command("config")
def cmd_config(args: list[str]) -> int:
    """Print the composed config (``format=yaml``: as params.yaml), after checking it."""
    from adaspark.config_check import validate
    from adaspark.overrides import check_overrides

    fmt = [a for a in args if a.startswith("format=")]
    if fmt and fmt[-1] not in ("format=yaml", "format=json"):
        raise ConfigError(f"{fmt[-1]} is not allowed: format must be yaml or json")
    check_overrides([a for a in args if not a.startswith("format=")], "config")
    cfg = compose([a for a in args if not a.startswith("format=")])
    validate(cfg, command="config")
    if fmt and fmt[-1] == "format=yaml":
        from omegaconf import OmegaConf

        print(OmegaConf.to_yaml(cfg), end="")
    else:
        print(json.dumps(to_dict(cfg), indent=2))
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(__doc__)
        for name, fn in COMMANDS.items():
            print(f"  {name:10s} {(fn.__doc__ or '').strip().splitlines()[0]}")
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"adaspark: unknown command {name!r}; commands: {sorted(COMMANDS)}",
              file=sys.stderr)
        return 2
    from adaspark.stages import exit_code

    return exit_code(f"adaspark {name}", lambda: COMMANDS[name](rest))


@command("serve")
def cmd_serve(args: list[str]) -> int:
    """Serve ``arm=`` over an OpenAI-compatible HTTP API (port=, host=, store=, exact=): the
    words whose key is a field of :class:`~adaspark.serving.main.ServeOptions` are the server's
    options; the rest compose ``conf/`` (``arm=NAME`` picks the arm, ``exact=true|false`` the
    kernels)."""
    from dataclasses import fields

    from adaspark.config import split_words
    from adaspark.config_check import validate
    from adaspark.overrides import check_overrides
    from adaspark.serving.main import ServeOptions, serve

    rest, words = split_words(args, {f.name for f in fields(ServeOptions)})
    opts = ServeOptions.from_overrides(words)
    check_overrides(rest, "serve")
    cfg = compose(rest)
    checked = validate(cfg, command="serve")
    assert checked.arm is not None  # serve composes arm=
    exact = False if cfg.get("exact") is None else bool(cfg.exact)
    return serve(cfg, checked.arm, opts, exact=exact, sampling=checked.sampling)


@command("run")
def cmd_run(args: list[str]) -> int:
    """Run ``run_arms=[a,b]`` over ``run.subset`` through their servers (out=DIR)."""
    from pathlib import Path

    from adaspark.config_check import validate
    from adaspark.overrides import check_overrides
    from adaspark.runs.launcher import run_arms
    from adaspark.runs.run import compose_for_run
    from adaspark.runs.settings import RunError, RunSettings

    out = Path("runs/adhoc")
    rest = []
    for a in args:
        k, eq, v = a.partition("=")
        if eq and k == "out":
            if not v:
                raise ConfigError("out= is empty: name the directory the runs go to, "
                                  "e.g. out=runs/adhoc")
            out = Path(v)
        else:
            rest.append(a)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"out={out} is a file, not a directory: name a directory for the "
                          "arms' run directories (it is created when missing)")
    check_overrides(rest, "run")
    try:
        cfg = compose_for_run(rest)
        checked = validate(cfg, command="run")
        settings = checked.run if checked.run is not None else RunSettings.from_config(cfg)
        summaries = run_arms(cfg, [str(e) for e in cfg.run_arms], out, settings)
    except ConfigError:
        raise
    except RunError as e:
        print(f"adaspark run: {e}", file=sys.stderr)
        return 1
    return 0 if all(s.n_replies for s in summaries) else 1


@command("replay")
def cmd_replay(args: list[str]) -> int:
    """Replay ``arm=`` over a run's labelled replies (run_dir=DIR device=recorded|NAME)."""
    from adaspark.replay.command import replay_main

    return replay_main(args)
