"""The code, tests, benchmarks and notebooks are ruff clean (pyproject.toml's rules)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_ruff_is_clean():
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    assert ruff, "ruff is missing: it is a dev dependency (pip install -e '.[dev]')"
    done = subprocess.run([ruff, "check", "--no-cache", "."], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
