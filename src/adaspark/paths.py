"""Machine paths, read in one place.

Environment variables are only for where things live on this machine:

- ``ADASPARK_CACHE``: the per-machine cache (model files, the llama.cpp build), default
  ``~/.cache/adaspark``.
- ``ADASPARK_CONF``: the Hydra config directory, default ``conf/`` of the checkout.

The checkout whose ``conf/`` and ``data/`` a command reads is the one the working directory is
in (:func:`checkout_root`), not necessarily the one the package was imported from: a second clone
that shares the first clone's virtual environment must read its own configs and manifests.
Outside any checkout it is the package's own (:data:`REPO_ROOT`).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

#: The checkout the package was imported from (an editable install's source tree).
REPO_ROOT = Path(__file__).resolve().parents[2]


def is_checkout(d: Path) -> bool:
    """Whether ``d`` is a checkout of this project: its ``conf/config.yaml``, ``data/`` and a
    ``pyproject.toml`` naming the ``adaspark`` project."""
    pyproject = d / "pyproject.toml"
    if not ((d / "conf" / "config.yaml").is_file() and (d / "data").is_dir()
            and pyproject.is_file()):
        return False
    try:
        text = pyproject.read_text(encoding="utf-8")
    except OSError:
        return False
    return 'name = "adaspark"' in text


def checkout_root(cwd: Path | None = None) -> Path:
    """The checkout the working directory (or ``cwd``) is in, else the package's own."""
    here = Path(cwd or Path.cwd()).resolve()
    for d in (here, *here.parents):
        if is_checkout(d):
            return d
    return REPO_ROOT


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
    """A path as given when absolute or present from the working directory, else under the
    checkout (a relative ``runs/testset`` read from outside the repository)."""
    p = Path(path)
    if not p.is_absolute() and not p.exists():
        p = checkout_root() / p
    return p


def conf_dir() -> Path:
    return Path(os.environ.get("ADASPARK_CONF", checkout_root() / "conf")).resolve()


def data_dir() -> Path:
    return checkout_root() / "data"


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
