"""The test set's records, their JSON form and their hashes (paper, Appendix A).

A set file keeps the keys of the published set: ``set``, ``source_max_tokens``, ``provenance``
and ``conversations``; each conversation ``name``, ``kind``, ``source``, ``source_id``, ``chars``,
``sha256`` and ``turns`` (each ``kind``, ``type``, ``text`` and, for ToolACE, ``result``), plus
``tools`` (ToolACE) and ``truncated`` (a LongBench document cut in the middle).

Two hashes per conversation:

- the published one (:func:`text_hash`): sha256 of the turns' texts joined with a newline, UTF-8,
  first 16 hex digits. Appendix A: "a conversation's hash covers its turns". It does not see
  ToolACE's ``tools`` and ``result``, the kinds or the provenance;
- the full one (:func:`canonical_sha256`): sha256 of the conversation's whole canonical JSON
  (sorted keys, no whitespace, UTF-8), which sees every field. The lock holds both.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from adaspark.io import write_bytes

#: Text the SPEED-Bench ``qualitative`` config publishes in place of some items.
PLACEHOLDER_MARK = "FULL BENCHMARK DATA SHOULD BE FETCHED"

#: Spec-Bench's own generation cap, recorded in every set file (``source_max_tokens``).
SOURCE_MAX_TOKENS = 1024

#: The six set files in the published order (Table 13; HARNESS "Subsets").
SET_NAMES: tuple[str, ...] = (
    "specbench",
    "speedbench",
    "wildchat",
    "convfinqa",
    "toolace",
    "longbench",
)


class SetFormatError(ValueError):
    """A set file does not have the published set's shape."""


@dataclass(frozen=True)
class Turn:
    """One user turn. ``result`` is the tool output the source recorded for it (ToolACE)."""

    kind: str
    type: str  # "first" or "continued": the turn's position only
    text: str
    result: str | None = None


@dataclass(frozen=True)
class Conversation:
    """One conversation as stored; ``chars`` and ``sha256`` are the stored values.

    Use :func:`make_conversation` to build one (it computes both); a conversation read from a
    file keeps what the file says, so a check can compare it with :func:`text_hash`.
    """

    name: str
    kind: str
    source: str
    source_id: str
    chars: int
    sha256: str
    turns: tuple[Turn, ...]
    tools: list[dict[str, Any]] | None = None
    truncated: str | None = None

    @property
    def texts(self) -> list[str]:
        return [t.text for t in self.turns]


@dataclass
class SetFile:
    """One source's set file: its conversations and the provenance of the text."""

    name: str
    conversations: list[Conversation]
    provenance: dict[str, Any] = field(default_factory=dict)
    source_max_tokens: int = SOURCE_MAX_TOKENS

    def conversation(self, name: str) -> Conversation:
        for c in self.conversations:
            if c.name == name:
                return c
        raise KeyError(f"{self.name}.json has no conversation {name!r}")


def joined_text(texts: Iterable[str]) -> str:
    """The turns' texts joined with a newline: what the published hash and ``chars`` cover."""
    return "\n".join(texts)


def text_hash(texts: Iterable[str]) -> str:
    """The published conversation hash: sha256 of :func:`joined_text`, first 16 hex digits."""
    return hashlib.sha256(joined_text(texts).encode("utf-8")).hexdigest()[:16]


def make_conversation(
    name: str,
    kind: str,
    source: str,
    source_id: str | int,
    texts: Sequence[str],
    *,
    results: Sequence[str | None] | None = None,
    tools: list[dict[str, Any]] | None = None,
    truncated: str | None = None,
) -> Conversation:
    """A conversation with ``chars`` and ``sha256`` computed from its texts (Appendix A)."""
    if not texts:
        raise ValueError(f"conversation {name!r} has no turns")
    results = list(results) if results is not None else [None] * len(texts)
    if len(results) != len(texts):
        raise ValueError(f"conversation {name!r}: {len(results)} results for {len(texts)} turns")
    turns = tuple(
        Turn(kind, "first" if i == 0 else "continued", text, result or None)
        for i, (text, result) in enumerate(zip(texts, results, strict=True))
    )
    return Conversation(
        name=name,
        kind=kind,
        source=source,
        source_id=str(source_id),
        chars=len(joined_text(texts)),
        sha256=text_hash(texts),
        turns=turns,
        tools=tools,
        truncated=truncated,
    )


def is_placeholder(conversation: Conversation) -> bool:
    """True when a turn holds SPEED-Bench's placeholder instead of a prompt (issue 4).

    Nine of the 19 published SPEED-Bench conversations are such; reports show results with and
    without them.
    """
    return any(PLACEHOLDER_MARK in t.text for t in conversation.turns)


def n_timed_replies(turns: Iterable[Turn]) -> int:
    """Timed replies of these turns: two for a turn with a recorded tool result (the call and
    the answer after the result), one otherwise (Appendix A, "a tool turn gives two")."""
    return sum(2 if t.result is not None else 1 for t in turns)


# --- JSON form ---------------------------------------------------------------------------


def turn_to_json(turn: Turn) -> dict[str, Any]:
    out: dict[str, Any] = {"kind": turn.kind, "type": turn.type, "text": turn.text}
    if turn.result is not None:
        out["result"] = turn.result
    return out


def conversation_to_json(c: Conversation) -> dict[str, Any]:
    """The published key order: name, kind, source, source_id, chars, sha256, turns, then
    tools and truncated where present."""
    out: dict[str, Any] = {
        "name": c.name,
        "kind": c.kind,
        "source": c.source,
        "source_id": c.source_id,
        "chars": c.chars,
        "sha256": c.sha256,
        "turns": [turn_to_json(t) for t in c.turns],
    }
    if c.tools is not None:
        out["tools"] = c.tools
    if c.truncated is not None:
        out["truncated"] = c.truncated
    return out


def _required(d: Mapping[str, Any], key: str, where: str) -> Any:
    if key not in d:
        raise SetFormatError(
            f"{where} has no {key!r}: this is not a set file in the published format "
            "(see data/PROVENANCE.md)"
        )
    return d[key]


def conversation_from_json(d: Mapping[str, Any], where: str = "conversation") -> Conversation:
    name = str(_required(d, "name", where))
    where = f"{where} {name!r}"
    turns = tuple(
        Turn(
            kind=str(_required(t, "kind", f"{where} turn {i}")),
            type=str(_required(t, "type", f"{where} turn {i}")),
            text=str(_required(t, "text", f"{where} turn {i}")),
            result=t.get("result"),
        )
        for i, t in enumerate(_required(d, "turns", where))
    )
    return Conversation(
        name=name,
        kind=str(_required(d, "kind", where)),
        source=str(_required(d, "source", where)),
        source_id=str(_required(d, "source_id", where)),
        chars=int(_required(d, "chars", where)),
        sha256=str(_required(d, "sha256", where)),
        turns=turns,
        tools=d.get("tools"),
        truncated=d.get("truncated"),
    )


def canonical_json(c: Conversation) -> str:
    """Sorted keys, no whitespace, non-ASCII kept: one text per conversation content."""
    return json.dumps(
        conversation_to_json(c), sort_keys=True, ensure_ascii=False, separators=(",", ":")
    )


def canonical_sha256(c: Conversation) -> str:
    """Full sha256 of :func:`canonical_json`: covers tools, results, kinds and provenance."""
    return hashlib.sha256(canonical_json(c).encode("utf-8")).hexdigest()


def set_to_json(s: SetFile) -> dict[str, Any]:
    return {
        "set": s.name,
        "source_max_tokens": s.source_max_tokens,
        "provenance": s.provenance,
        "conversations": [conversation_to_json(c) for c in s.conversations],
    }


def dumps_set(s: SetFile) -> str:
    """The published file format: UTF-8 text, one-space indent, no trailing newline."""
    return json.dumps(set_to_json(s), ensure_ascii=False, indent=1)


def loads_set(text: str, where: str = "set file") -> SetFile:
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as e:
        raise SetFormatError(f"{where} is not valid JSON ({e})") from e
    if not isinstance(raw, dict):
        raise SetFormatError(f"{where} does not hold a JSON object")
    name = str(_required(raw, "set", where))
    return SetFile(
        name=name,
        conversations=[
            conversation_from_json(c, f"{name}.json conversation")
            for c in _required(raw, "conversations", where)
        ],
        provenance=dict(raw.get("provenance") or {}),
        source_max_tokens=int(raw.get("source_max_tokens", SOURCE_MAX_TOKENS)),
    )


def read_set(path: Path) -> SetFile:
    return loads_set(path.read_text(encoding="utf-8"), where=str(path))


def write_set(s: SetFile, path: Path) -> bytes:
    """Write ``s`` in the published format and return the bytes written."""
    data = dumps_set(s).encode("utf-8")
    write_bytes(path, data)
    return data
