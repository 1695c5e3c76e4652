"""The selection rule and the named format edits of Appendix A, as small pure functions.

Appendix A ("Selection"): items are taken in each dataset's own order, the first that pass one
length cap (4,000 characters of prompt; 12,000 for ConvFinQA, ToolACE and LongBench). The
benchmark sets take a category's items until the category holds at least two turns; the
single-category sets take their first eight conversations that pass the dataset's own filters.
The only edits to source text are the ones Table 13 names: WildChat cut to its first four user
turns, ConvFinQA's later turns reduced to their own question, ToolACE's Python-style parameter
types renamed to JSON Schema's, and a LongBench document over the cap cut from the middle.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")

#: Length cap in characters of prompt (Appendix A).
CAP_CHARS = 4_000
#: The cap for ConvFinQA, ToolACE and LongBench, whose items carry a report, tool schemas or a
#: document (Appendix A).
CAP_CHARS_LONG = 12_000
#: A benchmark set's category takes items until it holds at least this many turns.
TURNS_PER_CATEGORY = 2
#: A single-category set takes this many conversations.
SINGLE_CATEGORY_CONVERSATIONS = 8


@dataclass(frozen=True)
class Candidate:
    """A source item reduced to what the rule looks at: its category, row id and turn texts."""

    category: str
    source_id: str
    texts: tuple[str, ...]
    truncated: bool = False


def prompt_chars(texts: Iterable[str]) -> int:
    """Characters of prompt an item brings: the sum of its turn texts' lengths."""
    return sum(len(t) for t in texts)


def within_cap(texts: Iterable[str], cap: int) -> bool:
    return prompt_chars(texts) <= cap


@dataclass(frozen=True)
class CategoryFill:
    """Result of :func:`fill_categories`: the items taken in the order taken, and how many
    items were skipped for the cap while their category was still open."""

    taken: list[Candidate]
    skipped_over_cap: int


def fill_categories(
    items: Iterable[Candidate],
    *,
    cap: int,
    turns_per_category: int = TURNS_PER_CATEGORY,
    categories: Collection[str] | None = None,
) -> CategoryFill:
    """Benchmark sets (Appendix A): walk ``items`` in order; a category takes items until it
    holds at least ``turns_per_category`` turns, so a multi-turn item can take it past (three
    turns). An item over ``cap`` characters is skipped; items of a full category are ignored.
    When the ``categories`` are known in advance, reading stops once all of them are full."""
    held: dict[str, int] = {}
    taken: list[Candidate] = []
    skipped = 0
    for item in items:
        if categories is not None and all(held.get(c, 0) >= turns_per_category for c in categories):
            break
        if held.get(item.category, 0) >= turns_per_category:
            continue
        if not within_cap(item.texts, cap):
            skipped += 1
            continue
        taken.append(item)
        held[item.category] = held.get(item.category, 0) + len(item.texts)
    return CategoryFill(taken, skipped)


def numbered_names(prefix: str, categories: Iterable[str]) -> list[str]:
    """``{prefix}-{category}-{k}`` with k counting from 1 within each category, in order."""
    seen: dict[str, int] = {}
    names = []
    for cat in categories:
        seen[cat] = seen.get(cat, 0) + 1
        names.append(f"{prefix}-{cat}-{seen[cat]}")
    return names


def first_n(candidates: Iterable[T | None], n: int = SINGLE_CATEGORY_CONVERSATIONS) -> list[T]:
    """Single-category sets (Appendix A): the first ``n`` candidates that passed the source's
    filters (a source maps a failing row to None). Stops reading as soon as it has ``n``."""
    out: list[T] = []
    if n <= 0:
        return out
    for c in candidates:
        if c is None:
            continue
        out.append(c)
        if len(out) == n:
            break
    return out


# --- WildChat ------------------------------------------------------------------------------

#: WildChat conversations are cut to their first four user turns and need at least four.
WILDCHAT_USER_TURNS = 4


def wildchat_user_turns(
    messages: Iterable[Mapping[str, Any]], n: int = WILDCHAT_USER_TURNS
) -> list[str]:
    """The first ``n`` user messages of a WildChat conversation (Table 13: "user turns only";
    "cut to the first four user turns"). An empty or blank user message cannot be sent as a
    turn and is passed over."""
    users = [str(m.get("content") or "") for m in messages if m.get("role") == "user"]
    return [u for u in users if u.strip()][:n]


# --- ConvFinQA -----------------------------------------------------------------------------

QUESTION_MARK = "Question:"
ANSWER_MARK = "Answer:"


def followup_question(query: str) -> str | None:
    """A later ConvFinQA turn reduced to its own question (Table 13).

    The FLARE release repeats the report and the dialogue history in every query; the text
    after the query's last ``Question:`` marker, up to its last ``Answer:`` marker, stripped, is
    the turn's own question. None when there is no marker or nothing after it: such a dialogue is
    dropped, not guessed at.
    """
    if QUESTION_MARK not in query:
        return None
    tail = query.rsplit(QUESTION_MARK, 1)[1]
    if ANSWER_MARK in tail:
        tail = tail.rsplit(ANSWER_MARK, 1)[0]
    tail = tail.strip()
    return tail or None


# --- ToolACE -------------------------------------------------------------------------------

#: Python-style type names ToolACE uses, and the JSON Schema type each names (Table 13).
JSON_SCHEMA_TYPES: dict[str, str] = {
    "dict": "object",
    "float": "number",
    "int": "integer",
    "str": "string",
    "bool": "boolean",
    "list": "array",
    "tuple": "array",
}

#: The marker in ToolACE's system prompt after which the tool list (a JSON array) follows.
TOOL_LIST_MARK = "you can invoke:"

#: ToolACE conversations keep their first four user turns. Table 13 does not list this cut; the
#: published set holds at most four user turns per ToolACE conversation and the authors' builder
#: cuts there (a fact read from their repository, as HARNESS allows).
TOOLACE_MAX_TURNS = 4


def rename_schema_types(schema: Any) -> Any:
    """``schema`` with every Python-style ``type`` renamed to its JSON Schema name, through
    nested ``properties``, ``items`` and any other sub-schema (Table 13). Only the value of a
    ``type`` key that is a string is touched; a property that is itself called ``type`` is a
    schema (a mapping) and is walked, not renamed. Returns a new structure."""
    if isinstance(schema, Mapping):
        out = {k: rename_schema_types(v) for k, v in schema.items()}
        t = out.get("type")
        if isinstance(t, str):
            out["type"] = JSON_SCHEMA_TYPES.get(t, t)
        return out
    if isinstance(schema, list):
        return [rename_schema_types(v) for v in schema]
    return schema


def parse_tool_list(system: str) -> list[dict[str, Any]] | None:
    """ToolACE's function list: the JSON array after ``you can invoke:`` in the system prompt.
    None when the marker is missing or what follows is not a JSON array."""
    at = system.find(TOOL_LIST_MARK)
    if at < 0:
        return None
    body = system[at + len(TOOL_LIST_MARK) :].lstrip()
    try:
        funcs, _ = json.JSONDecoder().raw_decode(body)
    except json.JSONDecodeError:
        return None
    if not isinstance(funcs, list) or not all(isinstance(f, dict) for f in funcs):
        return None
    return funcs


def openai_tools(funcs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """ToolACE's functions as OpenAI tool schemas (name, description, parameters), with
    parameter types renamed by :func:`rename_schema_types`; that rename is the only change."""
    out = []
    for f in funcs:
        params = f.get("parameters") or {"type": "object", "properties": {}}
        out.append(
            {
                "type": "function",
                "function": {
                    "name": f.get("name", ""),
                    "description": f.get("description", ""),
                    "parameters": rename_schema_types(params),
                },
            }
        )
    return out


def tool_turns(messages: Sequence[Mapping[str, Any]]) -> tuple[list[str], list[str | None]]:
    """A ToolACE dialogue as user turns and their recorded tool results.

    Each ``user`` message is a turn; when the assistant answered it with a call and a ``tool``
    message came back (``user, assistant, tool``), that message's text is the turn's result,
    fed back when the model under test calls a tool on that turn. An empty tool message records
    nothing and gives no result.
    """
    turns: list[str] = []
    results: list[str | None] = []
    for i, m in enumerate(messages):
        if m.get("from") != "user":
            continue
        turns.append(str(m.get("value", "")))
        nxt = messages[i + 1 : i + 3]
        called = len(nxt) == 2 and nxt[0].get("from") == "assistant"
        value = str(nxt[1].get("value") or "") if called and nxt[1].get("from") == "tool" else ""
        results.append(value or None)
    return turns, results


# --- LongBench -----------------------------------------------------------------------------

#: A document cut from the middle keeps at least this many characters; an item whose template
#: and question leave less room is skipped. The paper does not give this floor; the authors'
#: builder uses it (a fact read from their repository, as HARNESS allows).
LONGBENCH_MIN_CONTEXT = 2_000


def cut_middle(text: str, keep: int) -> str:
    """``text`` cut from the middle to ``keep`` characters: the head's ``keep // 2`` and the
    tail's rest are kept (LongBench's own rule for inputs longer than a window)."""
    if keep >= len(text):
        return text
    if keep <= 0:
        return ""
    head = keep // 2
    tail = keep - head
    return text[:head] + text[len(text) - tail :]


@dataclass(frozen=True)
class LongPrompt:
    text: str
    truncated: bool


def fill_template(template: str, context: str, question: str) -> str:
    """LongBench's task template with the document and the question put in."""
    return template.format(context=context, input=question)


def longbench_prompt(
    template: str,
    context: str,
    question: str,
    *,
    cap: int = CAP_CHARS_LONG,
    min_context: int = LONGBENCH_MIN_CONTEXT,
) -> LongPrompt | None:
    """One LongBench prompt within ``cap`` characters (Appendix A: "a LongBench document over
    its cap is cut from the middle rather than skipped"): the document is cut from the middle by
    exactly the overflow, so the prompt is ``cap`` long. None when less than ``min_context``
    characters of the document would remain."""
    text = fill_template(template, context, question)
    if len(text) <= cap:
        return LongPrompt(text, truncated=False)
    keep = len(context) - (len(text) - cap)
    if keep < min_context:
        return None
    return LongPrompt(fill_template(template, cut_middle(context, keep), question), True)


def stable_by_category(items: Iterable[Candidate]) -> Iterator[Candidate]:
    """Items grouped by category name, each category's items in source order (Spec-Bench's
    published order, HARNESS "Subsets")."""
    return iter(sorted(items, key=lambda c: c.category))
