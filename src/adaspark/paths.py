"""Machine paths, read in one place.

Environment variables are only for where things live on this machine:

- ``ADASPARK_CACHE``: the per-machine cache (model files, the llama.cpp build), default
  ``~/.cache/adaspark``.
- ``ADASPARK_CONF``: the Hydra config directory, default ``conf/`` of this checkout.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def cache_dir() -> Path:
    """``ADASPARK_CACHE`` if set, else the cache the setup command used, else the default."""
    env = os.environ.get("ADASPARK_CACHE")
    if env:
        return Path(env)
    f = build_info_file()
    if f.is_file():
        try:
            cache = json.loads(f.read_text()).get("cache")
        except ValueError:
            cache = None
        if cache:
            return Path(cache)
    return Path.home() / ".cache" / "adaspark"


def models_dir() -> Path:
    return cache_dir() / "models"


def from_cwd_or_repo(path: str | Path) -> Path:
    """A path as given when absolute or present from the working directory, else under this
    checkout (a relative ``runs/testset`` read from outside the repository)."""
    p = Path(path)
    if not p.is_absolute() and not p.exists():
        p = REPO_ROOT / p
    return p


def conf_dir() -> Path:
    return Path(os.environ.get("ADASPARK_CONF", REPO_ROOT / "conf")).resolve()


def data_dir() -> Path:
    return REPO_ROOT / "data"


def build_info_file() -> Path:
    """Written by ``scripts/setup.sh`` into the venv: where the llama.cpp build lives."""
    return Path(sys.prefix) / "adaspark-llama-build.json"


def build_info() -> dict[str, str]:
    """The llama.cpp build this venv uses (library dir, llama-server, commit, sdist hash)."""
    f = build_info_file()
    if not f.is_file():
        raise FileNotFoundError(
            f"{f} is missing: this environment was not made by the setup command. "
            "Run `bash scripts/setup.sh` from the repository root."
        )
    return json.loads(f.read_text())
