"""The one writer of the project's files, and the one dataclass -> Arrow schema mapper.

Every file the package writes goes through this module, whole files atomically: the bytes go to
a temporary sibling (same directory, so the rename cannot cross file systems), are flushed to
disk, and the temporary file is renamed over the target. A reader sees the old file or the new
one, never half of either; a failure mid-write leaves the old file as it was and no temporary
file behind. Parent directories are created.

- :func:`write_bytes`, :func:`write_text`, :func:`write_json` (the project's JSON formatting:
  ``json.dumps(obj, indent=1, ensure_ascii=False) + "\\n"`` unless told otherwise),
  :func:`write_parquet`, and :func:`csv_text` (rows of dicts as CSV text, for
  :func:`write_text`);
- :func:`atomic_path` for writers that need a path of their own (matplotlib ``savefig``, the
  GGUF writer, a model file streamed from wheels): it yields the temporary sibling, with the
  target's suffix so that writers that pick a format by extension pick the right one;
- :func:`open_new` to stream bytes into the temporary file :func:`atomic_path` yielded;
- :func:`open_append` for logs that grow while a process runs (a server's stdout): not a
  whole-file write, so not atomic;
- :func:`scratch_dir` for a throwaway working directory (a LaTeX build).

:func:`arrow_schema` maps a record dataclass to its Arrow schema (the reply row, the scheduler's
round records and request summaries). It lives here, beside :func:`write_parquet`, because a
record's Arrow schema is its on-disk form and this module owns the on-disk form of everything.

``tests/test_io.py`` scans the package's source and fails on any write outside this module.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import os
import secrets
import shutil
import tempfile
import types
import typing
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

import pyarrow as pa
import pyarrow.parquet as pq


def _temp_sibling(path: Path) -> Path:
    """A fresh name beside ``path`` (hidden, unique per call, ending in ``path``'s suffix)."""
    return path.with_name(f".{path.stem}.{secrets.token_hex(4)}.tmp{path.suffix}")


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary sibling of ``path`` for a writer to create; on success it is flushed to
    disk and renamed over ``path``, on any exception it is removed and ``path`` left as it was.

    The writer must create the temporary file (a missing one is an error naming the writer's
    fault): ``with atomic_path(out / "fig.png") as tmp: fig.savefig(tmp)``.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temp_sibling(target)
    try:
        yield tmp
        if not tmp.is_file():
            raise FileNotFoundError(f"the writer of {target} did not create its temporary file "
                                    f"{tmp}: write to the path atomic_path yields")
        _fsync(tmp)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def open_new(tmp: Path) -> BinaryIO:
    """Create the temporary file :func:`atomic_path` yielded, for writing bytes in pieces (a
    model file streamed from wheels); an existing file is an error. The caller closes it."""
    return open(tmp, "xb")


def write_bytes(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically; return the path."""
    target = Path(path)
    with atomic_path(target) as tmp, open_new(tmp) as f:
        f.write(data)
    return target


def write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically; return the path."""
    return write_bytes(path, text.encode("utf-8"))


def json_text(obj: Any, *, indent: int | None = 1, ensure_ascii: bool = False,
              default: Callable[[Any], Any] | None = None, allow_nan: bool = True) -> str:
    """The project's JSON form of ``obj``: ``json.dumps`` with these options, one newline after."""
    return json.dumps(obj, indent=indent, ensure_ascii=ensure_ascii, default=default,
                      allow_nan=allow_nan) + "\n"


def csv_text(rows: list[dict[str, Any]]) -> str:
    """``rows`` as CSV with a header; the columns are every key of every row, in first-seen
    order (a row without a key leaves its cell empty)."""
    cols = list(dict.fromkeys(k for r in rows for k in r))
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=cols)
    w.writeheader()
    w.writerows(rows)
    return buf.getvalue()


def write_json(path: str | Path, obj: Any, *, indent: int | None = 1, ensure_ascii: bool = False,
               default: Callable[[Any], Any] | None = None, allow_nan: bool = True) -> Path:
    """Write :func:`json_text` of ``obj`` to ``path`` atomically; return the path."""
    return write_text(path, json_text(obj, indent=indent, ensure_ascii=ensure_ascii,
                                      default=default, allow_nan=allow_nan))


def write_parquet(path: str | Path, table: pa.Table) -> Path:
    """Write ``table`` as Parquet to ``path`` atomically; return the path."""
    target = Path(path)
    with atomic_path(target) as tmp:
        pq.write_table(table, tmp)
    return target


def open_append(path: str | Path) -> BinaryIO:
    """Open ``path`` for appending bytes (created with its parents if missing), for a log that
    grows while a process runs. The caller closes it."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    return open(target, "ab")


@contextmanager
def scratch_dir() -> Iterator[Path]:
    """A temporary working directory, removed with what is in it on exit."""
    d = tempfile.mkdtemp(prefix="adaspark-")
    try:
        yield Path(d)
    finally:
        shutil.rmtree(d, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# Records as Arrow


_ARROW_TYPES: dict[Any, pa.DataType] = {
    int: pa.int64(), float: pa.float64(), str: pa.string(), bool: pa.bool_(),
}


def _arrow_type(tp: Any) -> pa.DataType | None:
    """The Arrow type of one resolved annotation, or ``None`` when there is none."""
    if tp in _ARROW_TYPES:
        return _ARROW_TYPES[tp]
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        return _arrow_type(inner[0]) if len(inner) == 1 and len(args) == 2 else None
    if origin is list and len(args) == 1:
        item = _arrow_type(args[0])
        return pa.list_(item) if item is not None else None
    return None


def arrow_schema(cls: type) -> pa.Schema:
    """The Arrow schema of record dataclass ``cls``: one nullable field per dataclass field, in
    order, leaving out private fields (a leading ``_``: running sums). ``int``, ``float``,
    ``str``, ``bool``, ``list[...]`` of those and ``X | None`` (Optional) are mapped; any other
    annotation is a ``TypeError`` naming the class, the field and its type."""
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
        raise TypeError(f"arrow_schema takes a dataclass type, not {cls!r}")
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        if f.name.startswith("_"):
            continue
        arrow = _arrow_type(hints[f.name])
        if arrow is None:
            raise TypeError(
                f"{cls.__name__}.{f.name}: no Arrow type for {hints[f.name]!r}; use int, float, "
                "str, bool, list[...] of those, or one of them | None")
        out.append(pa.field(f.name, arrow, nullable=True))
    return pa.schema(out)
