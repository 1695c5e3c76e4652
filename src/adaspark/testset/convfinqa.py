"""ConvFinQA as released by FLARE: several questions about one earnings report (paper,
Table 13).

The FLARE rows (``{id, query, answer, turn, dialogue_id}``) are flattened: each turn's query
repeats the report and the dialogue history, because that release is scored one prompt at a
time. The harness carries the history itself, so the first turn keeps its query whole and each
later turn is reduced to its own question (:func:`adaspark.testset.rules.followup_question`), the
only change to the text. Rule (Appendix A): dialogues in the order they first appear in the
split, the first eight of at least two turns that total at most 12,000 characters; a dialogue with
a follow-up that has no question marker is dropped and counted.

Where the paper is silent: the cap counts the dialogue's turn texts after the reduction, as for
every other source (the authors' builder tested the first query alone; on the published dialogues,
ids 0 to 7 and at most 6,209 characters, the two agree), and a dialogue of one question is not a
conversation.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from adaspark.testset.model import SetFile, make_conversation
from adaspark.testset.readers import HubSource, hub_rows, mirror_rows
from adaspark.testset.rules import (
    CAP_CHARS_LONG,
    SINGLE_CATEGORY_CONVERSATIONS,
    Candidate,
    first_n,
    followup_question,
    within_cap,
)

NAME = "convfinqa"
KIND = "finance"
HUB = HubSource(
    repo="ChanceFocus/flare-convfinqa",
    config="default",
    split="test",
    revision="ad7aa0c6910a0814e22236423ddc4420abec5b79",
    mirror_patterns=("data/test-*.parquet", "data/test*.parquet", "test.jsonl", "test.json"),
)
#: A dialogue needs at least this many questions to be a conversation.
MIN_TURNS = 2


def dialogues(rows: Iterable[dict[str, Any]]) -> list[tuple[str, list[dict[str, Any]]]]:
    """Rows grouped by ``dialogue_id`` in order of first appearance, each dialogue's rows
    ordered by ``turn``."""
    grouped: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        grouped.setdefault(str(r["dialogue_id"]), []).append(r)
    return [(d, sorted(rs, key=lambda r: int(r["turn"]))) for d, rs in grouped.items()]


@dataclass
class _Dropped:
    unparsable: int = 0


def dialogue_texts(rows: list[dict[str, Any]]) -> list[str] | None:
    """The dialogue's turns: the first query whole, each later one its own question; None when
    a later query has no question to reduce to."""
    texts = [str(rows[0]["query"])]
    for r in rows[1:]:
        q = followup_question(str(r["query"]))
        if q is None:
            return None
        texts.append(q)
    return texts


def candidates(
    rows: Iterable[dict[str, Any]], *, cap: int, dropped: _Dropped
) -> Iterator[Candidate | None]:
    for dialogue_id, turns in dialogues(rows):
        if len(turns) < MIN_TURNS:
            yield None
            continue
        texts = dialogue_texts(turns)
        if texts is None:
            dropped.unparsable += 1
            yield None
            continue
        yield Candidate(KIND, dialogue_id, tuple(texts)) if within_cap(texts, cap) else None


def build(
    rows: Iterable[dict[str, Any]],
    *,
    cap: int = CAP_CHARS_LONG,
    n_conversations: int = SINGLE_CATEGORY_CONVERSATIONS,
) -> SetFile:
    """The ConvFinQA set: the first ``n_conversations`` dialogues passing the rule."""
    dropped = _Dropped()
    taken = first_n(candidates(rows, cap=cap, dropped=dropped), n_conversations)
    conversations = [
        make_conversation(f"cf-{i}", KIND, HUB.repo, c.source_id, c.texts)
        for i, c in enumerate(taken, start=1)
    ]
    provenance = HUB.provenance(__name__, {"single_category": n_conversations, "cap_chars": cap},
                                dropped_unparsable=dropped.unparsable)
    return SetFile(NAME, conversations, provenance)


def build_from_mirror(root: Path) -> SetFile:
    return build(mirror_rows(root, HUB))


def build_from_hub() -> SetFile:
    return build(hub_rows(HUB))
