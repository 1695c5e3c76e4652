"""WildChat: real user conversations, user turns only (paper, Table 13).

Rule (Appendix A): rows in the split's own order; the first eight that pass the dataset's own
filters: English, not flagged toxic, not redacted, at least four user turns; each is cut to its
first four user turns (the only change to its text) and must total at most 4,000 characters.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from adaspark.testset.model import SetFile, make_conversation
from adaspark.testset.readers import HubSource, hub_rows, mirror_rows
from adaspark.testset.rules import (
    CAP_CHARS,
    SINGLE_CATEGORY_CONVERSATIONS,
    WILDCHAT_USER_TURNS,
    Candidate,
    first_n,
    wildchat_user_turns,
    within_cap,
)

NAME = "wildchat"
KIND = "wildchat"
HUB = HubSource(
    repo="allenai/WildChat",
    config="default",
    split="train",
    revision="f66566ceaaeb619dd98ffb0f3bf3ce1f86775ac4",
    mirror_patterns=("data/train-*.parquet", "data/train*.parquet"),
)


def candidate(row: dict[str, Any], *, cap: int = CAP_CHARS) -> Candidate | None:
    """The row's first four user turns, or None when a filter rejects it."""
    if int(row.get("turn") or 0) < WILDCHAT_USER_TURNS:
        return None
    if row.get("language") != "English" or row.get("toxic") or row.get("redacted"):
        return None
    users = wildchat_user_turns(row.get("conversation") or [])
    if len(users) < WILDCHAT_USER_TURNS or not within_cap(users, cap):
        return None
    return Candidate(KIND, str(row["conversation_id"]), tuple(users))


@dataclass
class _Counter:
    n: int = 0

    def count(self, rows: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        for r in rows:
            self.n += 1
            yield r


def build(
    rows: Iterable[dict[str, Any]],
    *,
    cap: int = CAP_CHARS,
    n_conversations: int = SINGLE_CATEGORY_CONVERSATIONS,
) -> SetFile:
    """The WildChat set: the first ``n_conversations`` rows passing the filters."""
    scanned = _Counter()
    taken = first_n((candidate(r, cap=cap) for r in scanned.count(rows)), n_conversations)
    conversations = [
        make_conversation(f"wc-{i}", KIND, HUB.repo, c.source_id, c.texts)
        for i, c in enumerate(taken, start=1)
    ]
    provenance = HUB.provenance(__name__, {"single_category": n_conversations, "cap_chars": cap},
                                scanned=scanned.n)
    return SetFile(NAME, conversations, provenance)


def build_from_mirror(root: Path) -> SetFile:
    return build(mirror_rows(root, HUB))


def build_from_hub() -> SetFile:
    return build(hub_rows(HUB))
