"""ToolACE: tool use with the source's own schemas and recorded tool results (paper, Table 13).

A row is ``{system, conversations[{from: user|assistant|tool, value}]}``; the tool list is the
JSON array after "you can invoke:" in ``system``. Each user message is a turn; a tool message
that answered the assistant's call on it is the turn's ``result``; the conversation carries the
functions as OpenAI tool schemas with Python-style parameter types renamed to JSON Schema's
through nested schemas (the only change, Table 13). Rule (Appendix A): rows in order, the first
eight with a parsable tool list, at least two user turns (the first four are kept) and at least
one recorded tool result, whose turns and results total at most 12,000 characters. The row's
index in the split is its ``source_id``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from adaspark.testset.model import Conversation, SetFile, make_conversation
from adaspark.testset.readers import HubSource, hub_rows, mirror_rows
from adaspark.testset.rules import (
    CAP_CHARS_LONG,
    SINGLE_CATEGORY_CONVERSATIONS,
    TOOLACE_MAX_TURNS,
    first_n,
    openai_tools,
    parse_tool_list,
    prompt_chars,
    tool_turns,
)

NAME = "toolace"
KIND = "tools"
HUB = HubSource(
    repo="Team-ACE/ToolACE",
    config="default",
    split="train",
    revision="6bda777c88d21e5a204703c1ee45597a8fa4f734",
    mirror_patterns=("data.json", "data/train-*.parquet", "data/train*.jsonl"),
)
#: A ToolACE item needs at least this many user turns to be a conversation.
MIN_TURNS = 2


@dataclass(frozen=True)
class ToolDialogue:
    source_id: str
    texts: tuple[str, ...]
    results: tuple[str | None, ...]
    tools: list[dict[str, Any]]


@dataclass
class _Counts:
    no_schema: int = 0


def dialogue(index: int, row: dict[str, Any], *, cap: int, counts: _Counts) -> ToolDialogue | None:
    """Row ``index`` as a tool dialogue, or None when the rule rejects it."""
    funcs = parse_tool_list(str(row.get("system") or ""))
    if not funcs:
        counts.no_schema += 1
        return None
    messages = row.get("conversations") or []
    if isinstance(messages, str):
        messages = json.loads(messages)
    texts, results = tool_turns(messages)
    texts, results = texts[:TOOLACE_MAX_TURNS], results[:TOOLACE_MAX_TURNS]
    if len(texts) < MIN_TURNS or not any(r is not None for r in results):
        return None
    if prompt_chars(texts) + prompt_chars(r for r in results if r is not None) > cap:
        return None
    return ToolDialogue(str(index), tuple(texts), tuple(results), openai_tools(funcs))


def dialogues(
    rows: Iterable[dict[str, Any]], *, cap: int, counts: _Counts
) -> Iterator[ToolDialogue | None]:
    for index, row in enumerate(rows):
        yield dialogue(index, row, cap=cap, counts=counts)


def to_conversation(name: str, d: ToolDialogue) -> Conversation:
    return make_conversation(
        name, KIND, HUB.repo, d.source_id, d.texts, results=d.results, tools=d.tools
    )


def build(
    rows: Iterable[dict[str, Any]],
    *,
    cap: int = CAP_CHARS_LONG,
    n_conversations: int = SINGLE_CATEGORY_CONVERSATIONS,
) -> SetFile:
    """The ToolACE set: the first ``n_conversations`` rows passing the rule."""
    counts = _Counts()
    taken = first_n(dialogues(rows, cap=cap, counts=counts), n_conversations)
    conversations = [to_conversation(f"ta-{i}", d) for i, d in enumerate(taken, start=1)]
    provenance = HUB.provenance(__name__, {"single_category": n_conversations, "cap_chars": cap},
                                no_schema=counts.no_schema)
    return SetFile(NAME, conversations, provenance)


def build_from_mirror(root: Path) -> SetFile:
    return build(mirror_rows(root, HUB))


def build_from_hub() -> SetFile:
    return build(hub_rows(HUB))
