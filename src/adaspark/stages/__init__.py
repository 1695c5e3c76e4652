"""Pipeline stage entry points: one module per DVC stage, each with ``main(argv)``."""

import argparse
import json
from pathlib import Path
from typing import Any


def load_params(path: str | Path) -> dict[str, Any]:
    """The composed ``params.yaml`` as a plain dict (every stage reads its sections from it)."""
    from omegaconf import OmegaConf

    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(
            f"{p} does not exist: compose it with `adaspark config format=yaml > {p}`"
        )
    params = OmegaConf.to_container(OmegaConf.load(p), resolve=True)
    if not isinstance(params, dict):
        raise ValueError(f"{p} is not a mapping of config sections")
    return params  # type: ignore[return-value]


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


def write_index(path: Path, index: dict[str, Any]) -> None:
    """A stage's JSON index of what it wrote, atomically (temporary file, then rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(index, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    tmp.replace(path)
