"""A run directory's files: ``replies.parquet`` (appended one reply at a time, atomically),
``run.json`` (the fingerprint), ``summary.json``, ``crash.json`` and ``run.lock``. A killed run
resumes at the first missing reply. One process writes a run directory at a time
(:class:`RunLock`), and a resume reads only rows its own arm entry and fingerprint made.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import socket
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from adaspark.io import write_json, write_parquet
from adaspark.runs.rows import REQUIRED_COLUMNS, ROW_SCHEMA, ReplyRow
from adaspark.runs.settings import RunError, RunMismatchError

ROWS_FILE = "replies.parquet"
RUN_FILE = "run.json"
SUMMARY_FILE = "summary.json"
CRASH_FILE = "crash.json"
#: Held (``flock``) by the process writing the directory, for the run's life; the OS releases it
#: when that process dies, so a killed run resumes. It names its holder.
LOCK_FILE = "run.lock"
#: Instead of replies: an arm the run stage did not run, and why (its drafter has no file).
NOT_RUN_FILE = "not-run.json"


# ---------------------------------------------------------------------------------------------
# The results directory


def _flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(d, dict):
        out: dict[str, Any] = {}
        for k, v in d.items():
            out.update(_flatten(v, f"{prefix}{k}."))
        return out
    return {prefix.rstrip("."): d}


def corrupt_file_message(path: Path, error: Any) -> str:
    """What to say about a run directory's file that cannot be read."""
    return (f"{path} cannot be read ({error}): it is damaged or not a file a run wrote. Delete "
            f"it (or the whole directory {path.parent}) to run again from the start, or use "
            "another output directory")


class RunLock:
    """The one-writer lock of a run directory: an exclusive ``flock`` on ``DIR/run.lock``, held
    from :meth:`acquire` to :meth:`release` (or the holder's death). A second run into the
    directory is refused with a :class:`RunError` naming the holder (pid, host, start time)."""

    def __init__(self, out_dir: Path) -> None:
        self.path = Path(out_dir) / LOCK_FILE
        self.fd: int | None = None

    def acquire(self) -> RunLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder_words(os.pread(fd, 4096, 0))
            os.close(fd)
            raise RunError(f"{self.path.parent} is being written by another run ({holder}): "
                           "one run writes a run directory at a time. Wait for it to end (or "
                           "stop it), or use another output directory") from None
        # the holder's own record, on the file it holds (not replaced: the lock is its inode)
        me = {"pid": os.getpid(), "host": socket.gethostname(),
              "started": datetime.now(UTC).isoformat(timespec="seconds")}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(me).encode(), 0)
        self.fd = fd
        return self

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing the descriptor releases the flock
            self.fd = None

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def _holder_words(raw: bytes) -> str:
    """``pid P on host H since T`` from a lock file's record (or that it names none)."""
    try:
        h = json.loads(raw.decode("utf-8"))
        return f"pid {h['pid']} on host {h['host']}, started {h['started']}"
    except (ValueError, KeyError, TypeError):
        return "its holder not yet recorded"


def clear_run_dir(out_dir: Path) -> None:
    """Delete a run directory's results for a fresh start, keeping the lock its run holds."""
    import shutil

    for p in Path(out_dir).iterdir():
        if p.name == LOCK_FILE:
            continue
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        else:
            p.unlink()


def write_run_json(path: Path, obj: Any) -> None:
    """One of a run directory's JSON files (``run.json``, ``summary.json``, ``crash.json``)."""
    write_json(path, obj, default=str)


class ResultStore:
    """``replies.parquet`` and ``run.json`` of one run directory."""

    def __init__(self, out_dir: Path) -> None:
        self.dir = Path(out_dir)
        self.rows_path = self.dir / ROWS_FILE
        self.run_path = self.dir / RUN_FILE

    def fingerprint_check(self, fingerprint: dict[str, Any]) -> str:
        """Create ``run.json`` or check it; return the fingerprint's hash."""
        digest = hashlib.sha256(json.dumps(fingerprint, sort_keys=True, default=str)
                                .encode()).hexdigest()[:16]
        self.dir.mkdir(parents=True, exist_ok=True)
        if self.run_path.exists():
            old = self.run_meta()
            if old.get("fingerprint_sha256") != digest:
                a, b = _flatten(old.get("fingerprint", {})), _flatten(fingerprint)
                diffs = [f"{k}: {a.get(k)!r} -> {b.get(k)!r}" for k in sorted(set(a) | set(b))
                         if a.get(k) != b.get(k)]
                raise RunMismatchError(
                    f"{self.dir} holds results made with another binary, model file, config, "
                    "test set or decoding code; a run does not append to them. What changed:"
                    "\n  " + "\n  ".join(diffs)
                    + f"\nUse another output directory, or delete {self.dir} to start over.")
        elif self.rows_path.exists():
            raise RunMismatchError(f"{self.rows_path} exists without {self.run_path}: its origin "
                                   "is unknown. Delete it, or use another output directory.")
        else:
            from adaspark.provenance import git_state

            write_run_json(self.run_path, {"fingerprint": fingerprint,
                                             "fingerprint_sha256": digest,
                                             "created": datetime.now(UTC).isoformat(),
                                             "git": git_state()})
        return digest

    def note(self, **extra: Any) -> None:
        """Add keys to ``run.json`` (server metadata, resumes)."""
        d = self.run_meta()
        d.update(extra)
        write_run_json(self.run_path, d)

    def run_meta(self) -> dict[str, Any]:
        """``run.json``; a :class:`RunError` naming the file when it is not a JSON object."""
        try:
            d = json.loads(self.run_path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise RunError(corrupt_file_message(self.run_path, e)) from None
        if not isinstance(d, dict):
            raise RunError(corrupt_file_message(self.run_path, "not a JSON object"))
        return d

    def table(self) -> pa.Table:
        if not self.rows_path.exists():
            return ROW_SCHEMA.empty_table()
        try:
            table = pq.read_table(self.rows_path)
        except (pa.ArrowException, OSError) as e:
            raise RunError(corrupt_file_message(self.rows_path, e)) from None
        missing = [c for c in (*REQUIRED_COLUMNS, "entry", "fingerprint")
                   if c not in table.column_names]
        if missing:
            raise RunError(corrupt_file_message(self.rows_path, f"no column {missing[0]!r}"))
        for f in ROW_SCHEMA:  # a column added since the file was written (node, hardware): null
            if f.name not in table.column_names:
                table = table.append_column(f, pa.nulls(table.num_rows, f.type))
        try:  # the file's columns as the rows a run writes (a foreign schema fails here)
            return table.select(ROW_SCHEMA.names).cast(ROW_SCHEMA)
        except (pa.ArrowException, ValueError) as e:
            raise RunError(corrupt_file_message(self.rows_path, e)) from None

    def check_rows(self, rows: list[dict[str, Any]], entry: str, digest: str) -> None:
        """Refuse stored rows that another arm entry or another fingerprint made (a file copied
        from another run directory): a resume would count them as this run's replies."""
        for r in rows:
            if r.get("entry") != entry or r.get("fingerprint") != digest:
                raise RunMismatchError(
                    f"{self.rows_path} holds a reply of arm entry {r.get('entry')!r} with "
                    f"fingerprint {r.get('fingerprint')!r}, but this run directory is arm entry "
                    f"{entry!r} with fingerprint {digest} ({self.run_path}): the file comes "
                    f"from another run. Delete it (or the whole directory {self.dir}) to run "
                    "again from the start, or use another output directory")

    def rows(self) -> list[dict[str, Any]]:
        return self.table().to_pylist()

    def append(self, row: ReplyRow) -> None:
        """Append one row: the old rows and the new one go to a temporary file that then
        replaces ``replies.parquet`` (a reader sees the old or the new file, never half)."""
        new = pa.Table.from_pylist([asdict(row)], schema=ROW_SCHEMA)
        old = self.table()
        table = pa.concat_tables([old.cast(ROW_SCHEMA), new]) if old.num_rows else new
        write_parquet(self.rows_path, table)
