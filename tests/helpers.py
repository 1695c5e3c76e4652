"""Helpers shared by the tests (model paths, the command line in a subprocess)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TINY = "smollm2-135m-instruct-q4_1"
TINY_CUT = "smollm2-135m-instruct-q4_1-first22"
TARGET = "qwen2.5-coder-1.5b-instruct-q4_k_m"
DRAFTER = "qwen2.5-coder-0.5b-instruct-q4_k_m"


def run_defaults(**overrides: object) -> dict[str, object]:
    """``conf/run/default.yaml`` (where the run group's defaults are written) with
    ``overrides``, as a mapping."""
    import yaml

    raw = yaml.safe_load((REPO / "conf" / "run" / "default.yaml").read_text(encoding="utf-8"))
    return {**raw, **overrides}


def run_settings(**overrides: object):  # -> RunSettings
    """:func:`run_defaults`, checked."""
    from adaspark.runs.settings import RunSettings

    return RunSettings.check(run_defaults(**overrides))


def model(key: str) -> Path:
    from adaspark import model_files

    return model_files.verified_path(key)


def run_cli(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "GGML_CPU_TILED_MM"}
    return subprocess.run([sys.executable, "-m", "adaspark.cli", *args], capture_output=True,
                          text=True, timeout=timeout, cwd=REPO, env=env)
