"""The committed lock of the test set, and the check that names every conversation that moved.

Appendix A: each conversation records its source row id and a hash of its text, each file the
source revision it was built from, so a rebuild that differs says which conversation moved. The
published hash covers only the turns' texts; the lock (``data/testset.lock.json``) therefore
holds, per conversation, that hash and a full sha256 of the conversation's canonical JSON (tools,
results, kinds and provenance included), and the sha256 of every vendored file (the set files,
``manifest.json`` and the raw source files). A set that does not match its lock fails, naming
each conversation, unless the caller allows the mismatch (config ``allow_mismatch``).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from adaspark import paths
from adaspark.io import write_json
from adaspark.testset.model import (
    SET_NAMES,
    Conversation,
    SetFile,
    SetFormatError,
    canonical_sha256,
    conversation_from_json,
    joined_text,
    loads_set,
    text_hash,
)

LOCK_FILE = "testset.lock.json"
#: The vendored files the lock covers, relative to ``data/``.
VENDORED_SET_DIR = "testset"
VENDORED_FILES: tuple[str, ...] = (
    *(f"{VENDORED_SET_DIR}/{n}.json" for n in SET_NAMES),
    f"{VENDORED_SET_DIR}/manifest.json",
    "sources/spec-bench/question.jsonl",
    "sources/longbench/config/dataset2prompt.json",
    "sources/longbench/config/dataset2maxlen.json",
)
REWRITE_HINT = (
    "if the change is intended, rewrite the lock with "
    "`python -m adaspark.stages.testset --write-lock` and commit it with the change; to run on "
    "this set anyway, pass --allow-mismatch"
)


def lock_path(data_dir: Path | None = None) -> Path:
    return (data_dir or paths.data_dir()) / LOCK_FILE


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class ConversationLock:
    name: str
    sha256: str  # the published 16-hex-digit hash of the turns' texts
    canonical_sha256: str  # full sha256 of the whole conversation's canonical JSON


@dataclass
class Lock:
    files: dict[str, str]  # path under data/ -> sha256
    sets: dict[str, list[ConversationLock]]


def lock_conversation(c: Conversation) -> ConversationLock:
    return ConversationLock(c.name, text_hash(c.texts), canonical_sha256(c))


def make_lock(sets: Iterable[SetFile], files: Mapping[str, bytes]) -> Lock:
    return Lock(
        files={path: sha256_bytes(data) for path, data in files.items()},
        sets={s.name: [lock_conversation(c) for c in s.conversations] for s in sets},
    )


def lock_to_json(lock: Lock) -> dict[str, Any]:
    return {
        "about": (
            "sha256 of every vendored file under data/, and per conversation the published "
            "hash of its turns' texts (sha256, 16 hex digits) and the sha256 of its whole "
            "canonical JSON; checked by adaspark.testset.lock (issue 4, paper Appendix A)"
        ),
        "files": dict(lock.files),
        "sets": {
            name: [
                {"name": c.name, "sha256": c.sha256, "canonical_sha256": c.canonical_sha256}
                for c in convs
            ]
            for name, convs in lock.sets.items()
        },
    }


def lock_from_json(raw: Mapping[str, Any]) -> Lock:
    return Lock(
        files=dict(raw["files"]),
        sets={
            name: [ConversationLock(c["name"], c["sha256"], c["canonical_sha256"]) for c in convs]
            for name, convs in raw["sets"].items()
        },
    )


def read_lock(path: Path | None = None) -> Lock:
    path = path or lock_path()
    if not path.is_file():
        raise LockMismatchError(
            [Mismatch("lock", None, f"{path} is missing")],
            hint="restore it from git, or write it with "
            "`python -m adaspark.stages.testset --write-lock`",
        )
    try:
        return lock_from_json(json.loads(path.read_text(encoding="utf-8")))
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, AttributeError,
            ValueError) as e:
        what = f"missing key {e}" if isinstance(e, KeyError) else str(e)
        raise LockMismatchError(
            [Mismatch("lock", None, f"{path} is not a valid lock file ({what})")],
            hint="restore it from git (`git checkout -- data/testset.lock.json`), or write it "
            "with `python -m adaspark.stages.testset --write-lock`",
        ) from None


def write_lock(lock: Lock, path: Path | None = None) -> Path:
    path = path or lock_path()
    write_json(path, lock_to_json(lock))
    return path


# --- the check -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Mismatch:
    """One way a set differs from its lock; ``conversation`` is None for a file-level one."""

    set_name: str
    conversation: str | None
    problem: str

    def __str__(self) -> str:
        where = (
            self.set_name if self.conversation is None else f"{self.set_name}/{self.conversation}"
        )
        return f"{where}: {self.problem}"


class LockMismatchError(RuntimeError):
    """A test set, or a vendored file, does not match the committed lock."""

    def __init__(self, mismatches: Sequence[Mismatch], hint: str = REWRITE_HINT) -> None:
        self.mismatches = list(mismatches)
        lines = "\n".join(f"  - {m}" for m in self.mismatches)
        super().__init__(
            f"the test set does not match data/{LOCK_FILE} "
            f"({len(self.mismatches)} difference(s)):\n{lines}\n{hint}"
        )


def check_conversation(set_name: str, c: Conversation, locked: ConversationLock) -> list[Mismatch]:
    """How ``c`` differs from its lock entry and from its own stored ``sha256``/``chars``."""
    out = []
    computed = text_hash(c.texts)
    if computed != locked.sha256:
        out.append(
            Mismatch(
                set_name,
                c.name,
                f"turn text changed: its hash is {computed}, the lock has {locked.sha256}",
            )
        )
    elif canonical_sha256(c) != locked.canonical_sha256:
        out.append(
            Mismatch(
                set_name,
                c.name,
                "changed outside the turn texts (tools, tool results, kinds or provenance): "
                f"canonical sha256 {canonical_sha256(c)[:16]}..., "
                f"the lock has {locked.canonical_sha256[:16]}...",
            )
        )
    if c.sha256 != computed:
        out.append(
            Mismatch(
                set_name, c.name, f"stored sha256 {c.sha256} does not match its turns ({computed})"
            )
        )
    chars = len(joined_text(c.texts))
    if c.chars != chars:
        out.append(
            Mismatch(set_name, c.name, f"stored chars {c.chars} does not match its turns ({chars})")
        )
    return out


def check_set(s: SetFile, lock: Lock) -> list[Mismatch]:
    """Every conversation of ``s`` that moved against the lock: changed, missing, added or out
    of order. Provenance and formatting are the file check's business (:func:`check_files`)."""
    if s.name not in lock.sets:
        return [Mismatch(s.name, None, f"the lock has no set {s.name!r}")]
    locked = lock.sets[s.name]
    by_name = {c.name: c for c in s.conversations}
    out: list[Mismatch] = []
    for entry in locked:
        if entry.name not in by_name:
            out.append(Mismatch(s.name, entry.name, "missing (the lock has it)"))
        else:
            out.extend(check_conversation(s.name, by_name[entry.name], entry))
    locked_names = [e.name for e in locked]
    for c in s.conversations:
        if c.name not in locked_names:
            out.append(Mismatch(s.name, c.name, "not in the lock (added)"))
    if len(by_name) != len(s.conversations):
        out.append(Mismatch(s.name, None, "two conversations share a name"))
    common = [n for n in (c.name for c in s.conversations) if n in locked_names]
    if common != [n for n in locked_names if n in by_name]:
        out.append(Mismatch(s.name, None, f"conversation order differs from the lock: {common}"))
    return out


_CONVERSATION_NAME = re.compile(r'\n   "name": "((?:[^"\\]|\\.)*)"')


def _conversation_near(text: str, pos: int) -> str | None:
    """The conversation whose entry holds character ``pos`` of a set file in the published
    layout (one-space indent: a conversation's ``name`` sits three spaces in)."""
    found = None
    for m in _CONVERSATION_NAME.finditer(text, 0, pos):
        found = m.group(1)
    return found


def check_set_bytes(set_name: str, data: bytes, lock: Lock) -> list[Mismatch]:
    """A set file's bytes checked conversation by conversation against the lock. A conversation
    that no longer parses is named (by its ``name``, else the lock's name at its place); broken
    JSON is named by the conversation around the error."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        return [Mismatch(set_name, None, f"not UTF-8 ({e})")]
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as e:
        where = f"not valid JSON at line {e.lineno} column {e.colno} ({e.msg})"
        return [Mismatch(set_name, _conversation_near(text, e.pos), where)]
    if not isinstance(raw, dict) or not isinstance(raw.get("conversations"), list):
        return [Mismatch(set_name, None, "not a set file: no list of conversations")]
    locked_names = [e.name for e in lock.sets.get(set_name, [])]
    parsed: list[Conversation] = []
    broken: list[Mismatch] = []
    for i, d in enumerate(raw["conversations"]):
        try:
            parsed.append(conversation_from_json(d, f"{set_name}.json conversation"))
        except (SetFormatError, TypeError, ValueError, AttributeError) as e:
            name = d.get("name") if isinstance(d, dict) else None
            if not isinstance(name, str):
                name = locked_names[i] if i < len(locked_names) else f"#{i + 1}"
            broken.append(Mismatch(set_name, name, f"not in the published format ({e})"))
    broken_names = {m.conversation for m in broken}
    out = broken + [
        m
        for m in check_set(SetFile(set_name, parsed), lock)
        if not (m.conversation in broken_names and m.problem.startswith("missing"))
    ]
    if raw.get("set") != set_name:
        out.append(Mismatch(set_name, None, f"its 'set' is {raw.get('set')!r}"))
    return out


def check_files(files: Mapping[str, bytes], lock: Lock) -> list[Mismatch]:
    """Vendored files against the lock. A set file whose bytes differ is checked conversation
    by conversation, so the report names what moved; the file itself is named only when no
    conversation did (its provenance or formatting changed)."""
    out: list[Mismatch] = []
    for path, expected in lock.files.items():
        if path not in files:
            out.append(Mismatch(path, None, "missing"))
            continue
        digest = sha256_bytes(files[path])
        if digest == expected:
            continue
        stem = Path(path).stem
        is_set = path.startswith(f"{VENDORED_SET_DIR}/") and stem in lock.sets
        moved = check_set_bytes(stem, files[path], lock) if is_set else []
        out.extend(moved)
        if not moved:
            outside = " outside its conversations (provenance or formatting)" if is_set else ""
            out.append(
                Mismatch(
                    path,
                    None,
                    f"bytes differ from the lock (sha256 {digest[:16]}..., the lock has "
                    f"{expected[:16]}...){outside}",
                )
            )
    for path in files:
        if path not in lock.files:
            out.append(Mismatch(path, None, "not in the lock"))
    return out


def read_vendored_files(data_dir: Path | None = None) -> dict[str, bytes]:
    """The bytes of every vendored file that exists, keyed by its path under ``data/``."""
    root = data_dir or paths.data_dir()
    return {rel: (root / rel).read_bytes() for rel in VENDORED_FILES if (root / rel).is_file()}


def vendored_sets(files: Mapping[str, bytes]) -> list[SetFile]:
    """The six set files of the vendored copy, in the published order."""
    out = []
    for name in SET_NAMES:
        rel = f"{VENDORED_SET_DIR}/{name}.json"
        if rel not in files:
            raise LockMismatchError([Mismatch(rel, None, "missing")], hint="restore it from git")
        out.append(loads_set(files[rel].decode("utf-8"), where=f"data/{rel}"))
    return out


@dataclass
class CheckReport:
    """What a check found; ``allowed`` records that the caller chose to run anyway."""

    mismatches: list[Mismatch] = field(default_factory=list)
    allowed: bool = False

    @property
    def ok(self) -> bool:
        return not self.mismatches

    def moved(self) -> list[str]:
        """``set/conversation`` of every conversation named by a mismatch, once each."""
        seen: dict[str, None] = {}
        for m in self.mismatches:
            if m.conversation is not None:
                seen[f"{m.set_name}/{m.conversation}"] = None
        return list(seen)


def enforce(mismatches: Sequence[Mismatch], *, allow_mismatch: bool = False) -> CheckReport:
    """Raise :class:`LockMismatchError` on any mismatch unless ``allow_mismatch``."""
    if mismatches and not allow_mismatch:
        raise LockMismatchError(mismatches)
    return CheckReport(list(mismatches), allowed=bool(mismatches) and allow_mismatch)


def check_vendored(
    data_dir: Path | None = None, lock: Lock | None = None, *, allow_mismatch: bool = False
) -> CheckReport:
    """Check the vendored copy under ``data/`` against the committed lock."""
    lock = lock or read_lock(lock_path(data_dir))
    return enforce(check_files(read_vendored_files(data_dir), lock), allow_mismatch=allow_mismatch)


def load_checked_sets(
    directory: Path, lock: Lock | None = None, *, allow_mismatch: bool = False
) -> list[SetFile]:
    """The six set files in ``directory`` (the stage's output, or ``data/testset``) after
    checking every conversation against the lock: what downstream stages call, so that nothing
    runs on a set that does not match its lock unless config says so."""
    lock = lock or read_lock()
    sets = []
    for name in SET_NAMES:
        path = directory / f"{name}.json"
        if not path.is_file():
            raise FileNotFoundError(
                f"{path} is missing: run the test-set stage "
                "(`python -m adaspark.stages.testset --out DIR`)"
            )
        sets.append(loads_set(path.read_text(encoding="utf-8"), where=str(path)))
    enforce([m for s in sets for m in check_set(s, lock)], allow_mismatch=allow_mismatch)
    return sets
