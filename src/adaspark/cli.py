"""``adaspark <command> key=value ...``: every command composes ``conf/`` with its overrides.

Commands: ``generate`` (decode one prompt with an arm), ``models`` (assemble and check the model
files of ``data/models.json``).
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
    from adaspark.generate import run_generate

    cfg = compose(args)
    result = run_generate(cfg)
    if not cfg.json:
        print(result["text"])
    else:
        print(json.dumps({k: v for k, v in result.items() if k != "meta"} | {
            "meta": result["meta"]}, ensure_ascii=False))
    return 3 if result.get("greedy_match") is False else 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(__doc__)
        for name, fn in COMMANDS.items():
            print(f"  {name:10s} {(fn.__doc__ or '').strip().splitlines()[0]}")
        return 0
    name, rest = argv[0], argv[1:]
    if name == "config":  # print the composed config (as params.yaml with format=yaml)
        fmt = [a for a in rest if a.startswith("format=")]
        cfg = compose([a for a in rest if not a.startswith("format=")])
        if fmt and fmt[-1] == "format=yaml":
            from omegaconf import OmegaConf

            print(OmegaConf.to_yaml(cfg), end="")
        else:
            print(json.dumps(to_dict(cfg), indent=2))
        return 0
    if name not in COMMANDS:
        print(f"adaspark: unknown command {name!r}; commands: {sorted(COMMANDS)}",
              file=sys.stderr)
        return 2
    try:
        return COMMANDS[name](rest)
    except ConfigError as e:
        print(f"adaspark {name}: bad configuration: {e}", file=sys.stderr)
        return 2
    except (FileNotFoundError, RuntimeError, ValueError, KeyError) as e:
        print(f"adaspark {name}: {type(e).__name__}: {e}", file=sys.stderr)
        return 1


@command("serve")
def cmd_serve(args: list[str]) -> int:
    """Serve ``arm=`` over an OpenAI-compatible HTTP API (port=, host=, store=, exact=)."""
    from adaspark.server import serve_command

    return serve_command(args)


@command("run")
def cmd_run(args: list[str]) -> int:
    """Run ``run_arms=[a,b]`` over ``run.subset`` through their servers (out=DIR)."""
    from pathlib import Path

    from adaspark.runner import RunError, RunSettings, compose_for_run, run_arms

    out = Path("runs/adhoc")
    rest = []
    for a in args:
        k, eq, v = a.partition("=")
        if eq and k == "out":
            out = Path(v)
        else:
            rest.append(a)
    cfg = compose_for_run(rest)
    try:
        settings = RunSettings.from_config(cfg)
        summaries = run_arms(cfg, [str(e) for e in cfg.run_arms], out, settings)
    except RunError as e:
        print(f"adaspark run: {e}", file=sys.stderr)
        return 1
    return 0 if all(s.n_replies for s in summaries) else 1


if __name__ == "__main__":
    sys.exit(main())
