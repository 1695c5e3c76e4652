"""The subset's plan (conversations in the published order) and each reply's history: the
engine's own replies carried as history, and a recorded tool result returned to each call
(Appendix A).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from adaspark.runs.settings import RunError
from adaspark.testset import Conversation, SetFile, make_subset


def row_message(row: dict[str, Any]) -> dict[str, Any]:
    """A stored reply as the assistant message it was carried as."""
    calls = json.loads(row["tool_calls"]) if row.get("tool_calls") else []
    msg: dict[str, Any] = {"role": "assistant", "content": row["text"]}
    if calls:
        msg["tool_calls"] = calls
        if not row["text"]:
            msg["content"] = None
    return msg


def tool_result_messages(calls: list[dict[str, Any]], result: str) -> list[dict[str, Any]]:
    """The recorded result returned for the reply's calls (see the module docstring)."""
    parts: list[str] = [result] * len(calls)
    if len(calls) > 1:
        try:
            items = json.loads(result)
        except json.JSONDecodeError:
            items = None
        if isinstance(items, list) and len(items) == len(calls):
            parts = [json.dumps(x, ensure_ascii=False) for x in items]
    return [{"role": "tool", "tool_call_id": c.get("id") or f"call_{i}",
             "name": (c.get("function") or {}).get("name", ""), "content": p}
            for i, (c, p) in enumerate(zip(calls, parts, strict=True))]


# ---------------------------------------------------------------------------------------------
# What a run covers


@dataclass
class Planned:
    """One conversation of the subset: its set, the conversation, how many turns."""

    set_name: str
    conversation: Conversation
    n_turns: int
    n_timed: int


def plan_subset(sets: list[SetFile], subset: str) -> list[Planned]:
    from adaspark.testset.subsets import SUBSETS

    if subset not in SUBSETS:
        raise RunError(f"run.subset={subset!r} names no subset; the subsets are "
                       f"{sorted(SUBSETS)} (adaspark.testset.subsets)")
    by_name = {s.name: s for s in sets}
    sub = make_subset(subset, sets)
    return [Planned(i.set_name, by_name[i.set_name].conversation(i.conversation), i.n_turns,
                    i.n_timed) for i in sub.items]


def conversation_sha256(p: Planned) -> str:
    """What a conversation's replies are made from, exactly: the text, kind and recorded tool
    result of each planned turn, and the tools offered (not the stored hash of the set file)."""
    turns = [{"kind": t.kind, "text": t.text, "result": t.result}
             for t in p.conversation.turns[: p.n_turns]]
    doc = {"turns": turns, "tools": p.conversation.tools}
    return hashlib.sha256(json.dumps(doc, sort_keys=True, ensure_ascii=False)
                          .encode("utf-8")).hexdigest()


def conversation_done(p: Planned, done: dict[tuple[str, str, int, int], dict[str, Any]]) -> bool:
    """Every reply of the conversation is stored (a tool turn's second reply only when the
    stored first reply called a tool)."""
    for ti, turn in enumerate(p.conversation.turns[: p.n_turns]):
        r0 = done.get((p.set_name, p.conversation.name, ti, 0))
        if r0 is None:
            return False
        if turn.result is not None and r0.get("n_tool_calls", 0) > 0 and \
                (p.set_name, p.conversation.name, ti, 1) not in done:
            return False
    return True
