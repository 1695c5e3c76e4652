"""The scheduler's store (§3.2, "Cold start"; §3.3): what it learned, persisted between runs.

One JSON file holds the width table (classes, laws with their banks and FTRL accumulators,
clock), the long-run rates, the gains, and the acceptance model; a restarted scheduler resumes
from it. Written atomically (:func:`adaspark.io.write_json`) at the end of each request.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Protocol

from adaspark.io import write_json

STORE_VERSION = 1
#: The learned parts a store holds besides the width table, by their key in the store.
PARTS = ("rate", "gains", "forecast", "model")


class Persistent(Protocol):
    def to_state(self) -> Any: ...

    def load_state(self, s: Any) -> None: ...


class TableState(Protocol):
    def to_state(self, fast: bool) -> Any: ...

    def load_state(self, s: Any) -> None: ...


def learned_state(max_rows: int | None, width: str | int, table: TableState | None,
                  parts: dict[str, Persistent | None], chooser: dict[str, Any] | None,
                  fast: bool) -> dict[str, Any]:
    """Everything that outlives a request, as the store holds it: the widest verify and the
    width mode it was learned for, the width table, each of :data:`PARTS` (``None`` for a part
    the arm has not), and with ``fast`` (``store.persist_fast_state``) the chooser's own state
    (incumbent, width-1 incumbent, exploration clock) and the table's fast state."""
    s: dict[str, Any] = {"max_rows": max_rows, "width": width,
                         "table": None if table is None else table.to_state(fast)}
    for k in PARTS:
        part = parts[k]
        s[k] = None if part is None else part.to_state()
    if fast:
        s["chooser"] = chooser
    return s


def load_learned(s: dict[str, Any], max_rows: int | None, width: str | int,
                 table: TableState | None, parts: dict[str, Persistent | None]
                 ) -> dict[str, Any] | None:
    """Load a store's state (:func:`learned_state`) into the parts; return its chooser state
    (``None`` when the store has none). A store learned for another widest verify or width mode
    is refused with an error that says so."""
    if s["max_rows"] != max_rows or s["width"] != width:
        raise ValueError(
            f"the store was written for width {s['width']!r} with {s['max_rows']} rows at "
            f"most; this arm has width {width!r} and {max_rows} rows "
            "(exact and fast modes, and arms, need their own store files)")
    if table is not None and s["table"] is not None:
        table.load_state(s["table"])
    for k in PARTS:
        part = parts[k]
        if part is not None and s.get(k) is not None:
            part.load_state(s[k])
    return s.get("chooser")


def save_store(path: str | Path, state: dict[str, Any]) -> None:
    write_json(path, {"version": STORE_VERSION, **state}, indent=None, ensure_ascii=True,
               allow_nan=False)


def load_store(path: str | Path) -> dict[str, Any] | None:
    """The stored state, or ``None`` when there is no store yet."""
    p = Path(path)
    if not p.is_file():
        return None
    try:
        state = json.loads(p.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"store {p} cannot be read ({e}): it is damaged or not a store this "
                         "scheduler wrote; move it aside (or delete it) to start from an empty "
                         "store") from None
    if not isinstance(state, dict):
        raise ValueError(f"store {p} holds {type(state).__name__}, not a store's JSON object; "
                         "move it aside (or delete it) to start from an empty store")
    if state.get("version") != STORE_VERSION:
        raise ValueError(f"store {p} has version {state.get('version')}, this scheduler reads "
                         f"version {STORE_VERSION}; move it aside to start from empty")
    return state
