"""The scheduler's store (§3.2, "Cold start"; §3.3): what it learned, persisted between runs.

One JSON file holds the width table (classes, laws with their banks and FTRL accumulators,
clock), the long-run rates, the gains, and the acceptance model; a restarted scheduler resumes
from it. Written atomically (:func:`adaspark.io.write_json`) at the end of each request.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from adaspark.io import write_json

STORE_VERSION = 1


def save_store(path: str | Path, state: dict[str, Any]) -> None:
    write_json(path, {"version": STORE_VERSION, **state}, indent=None, ensure_ascii=True,
               allow_nan=False)


def load_store(path: str | Path) -> dict[str, Any] | None:
    """The stored state, or ``None`` when there is no store yet."""
    p = Path(path)
    if not p.is_file():
        return None
    state = json.loads(p.read_text())
    if state.get("version") != STORE_VERSION:
        raise ValueError(f"store {p} has version {state.get('version')}, this scheduler reads "
                         f"version {STORE_VERSION}; move it aside to start from empty")
    return state
