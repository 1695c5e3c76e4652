"""Spec-Bench: MT-Bench's two-turn items plus translation, summarisation, QA, math reasoning
and RAG (paper, Table 13), from ``question.jsonl`` at a pinned commit.

Rule (Appendix A): categories by name; within a category the items in file order, each whose
turns total at most 4,000 characters, until the category holds at least two turns. Text is taken
unchanged. The raw file is vendored (``data/sources/spec-bench/question.jsonl``, hash-locked), so
this set is always rebuilt from its source, never taken on trust.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from adaspark import paths
from adaspark.testset.model import SetFile, make_conversation
from adaspark.testset.readers import SourceUnavailable
from adaspark.testset.rules import (
    CAP_CHARS,
    TURNS_PER_CATEGORY,
    Candidate,
    fill_categories,
    numbered_names,
    stable_by_category,
)

NAME = "specbench"
SOURCE = "hemingkx/Spec-Bench"
REVISION = "fd2c1cd7d2201ef71db4c5f4e455008f017967bf"
#: Where the file sits in the Spec-Bench repository.
REPO_PATH = "data/spec_bench/question.jsonl"
URL = f"https://raw.githubusercontent.com/{SOURCE}/{REVISION}/{REPO_PATH}"


def vendored_dir() -> Path:
    return paths.data_dir() / "sources" / "spec-bench"


def question_file(root: Path) -> Path:
    """``question.jsonl`` in ``root``: a Spec-Bench checkout (``data/spec_bench/``), a directory
    holding the file itself (the vendored layout), or the file."""
    for candidate in (root, root / REPO_PATH, root / "question.jsonl"):
        if candidate.is_file():
            return candidate
    raise SourceUnavailable(
        f"no Spec-Bench question.jsonl under {root}: expected {root / REPO_PATH} (a checkout of "
        f"{SOURCE} at {REVISION[:12]}) or {root / 'question.jsonl'}"
    )


def rows_from_mirror(root: Path) -> Iterator[dict[str, Any]]:
    with question_file(root).open(encoding="utf-8") as f:
        for line in f:
            if line.strip():
                yield json.loads(line)


def candidates(rows: Iterable[dict[str, Any]]) -> Iterator[Candidate]:
    for r in rows:
        yield Candidate(str(r["category"]), str(r["question_id"]), tuple(map(str, r["turns"])))


def build(
    rows: Iterable[dict[str, Any]],
    *,
    cap: int = CAP_CHARS,
    turns_per_category: int = TURNS_PER_CATEGORY,
) -> SetFile:
    """The Spec-Bench set from ``question.jsonl``'s rows (Appendix A), categories by name."""
    fill = fill_categories(
        stable_by_category(candidates(rows)), cap=cap, turns_per_category=turns_per_category
    )
    names = numbered_names("sb", (c.category for c in fill.taken))
    conversations = [
        make_conversation(name, c.category, SOURCE, c.source_id, c.texts)
        for name, c in zip(names, fill.taken, strict=True)
    ]
    provenance = {
        "source": SOURCE,
        "revision": REVISION,
        "url": URL,
        "skipped_over_cap": fill.skipped_over_cap,
        "builder": __name__,
        "params": {"turns_per_category": turns_per_category, "cap_chars": cap},
    }
    return SetFile(NAME, conversations, provenance)


def build_from_mirror(root: Path) -> SetFile:
    return build(rows_from_mirror(root))
