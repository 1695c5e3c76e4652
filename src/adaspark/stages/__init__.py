"""Pipeline stage entry points: one module per DVC stage, each with ``main(argv)``."""

import argparse
import functools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from adaspark.config_check import read_params


def load_params(path: str | Path) -> dict[str, Any]:
    """The composed ``params.yaml`` as a plain dict (every stage reads its sections from it)."""
    from omegaconf import OmegaConf

    params = OmegaConf.to_container(read_params(path), resolve=True)
    assert isinstance(params, dict)
    return params  # type: ignore[return-value]


def exit_code(name: str, call: Callable[[], int]) -> int:
    """``call()``'s exit status, with its failures shown as one line, not a traceback: a bad
    configuration exits 2, anything else it cannot do exits 1 (``adaspark`` and every stage)."""
    from adaspark.config import ConfigError

    try:
        return call()
    except ConfigError as e:
        print(f"{name}: bad configuration: {e}", file=sys.stderr)
        return 2
    except (FileNotFoundError, RuntimeError, ValueError, KeyError) as e:
        print(f"{name}: {type(e).__name__}: {e}", file=sys.stderr)
        return 1


def stage_main(name: str) -> Callable[[Callable[..., int]], Callable[..., int]]:
    """A stage's ``main`` whose failures a user sees as one line (:func:`exit_code`)."""

    def deco(main: Callable[..., int]) -> Callable[..., int]:
        @functools.wraps(main)
        def wrapped(*args: Any, **kwargs: Any) -> int:
            return exit_code(name, lambda: main(*args, **kwargs))

        return wrapped

    return deco


def output_args(doc: str, out: str, example: str) -> argparse.ArgumentParser:
    """The arguments of a stage that writes paper outputs from run directories (tables,
    figures): ``--params``, ``--runs``, ``--out`` and ``--only``."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--runs", default="runs", type=Path)
    ap.add_argument("--out", default=out, type=Path)
    ap.add_argument("--only", default="", type=lambda s: [x for x in s.split(",") if x] or None,
                    help=f"comma-separated names, e.g. {example}")
    return ap


