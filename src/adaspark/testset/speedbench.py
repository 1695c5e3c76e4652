"""SPEED-Bench, config ``qualitative``, split ``test`` (paper, Table 13).

Rule (Appendix A): rows in the split's own order; a category takes items of at most 4,000
characters until it holds at least two turns; the conversations keep the order their rows were
taken in (HARNESS "Subsets"). Text is taken unchanged, the upstream placeholder items included:
at revision 454f8845, 9 of the 19 conversations hold "FULL BENCHMARK DATA SHOULD BE FETCHED ..."
and :func:`adaspark.testset.model.is_placeholder` flags them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from adaspark.testset.model import SetFile, make_conversation
from adaspark.testset.readers import HubSource, hub_rows, mirror_rows
from adaspark.testset.rules import (
    CAP_CHARS,
    TURNS_PER_CATEGORY,
    Candidate,
    fill_categories,
    numbered_names,
)

NAME = "speedbench"
HUB = HubSource(
    repo="nvidia/SPEED-Bench",
    config="qualitative",
    split="test",
    revision="454f88454792dfa3ccfd7ef15fff248efde44cd1",
    mirror_patterns=("qualitative/test-*.parquet", "qualitative/test*.parquet"),
)
SOURCE = f"{HUB.repo}:{HUB.config}"


def candidates(rows: Iterable[dict[str, Any]]) -> Iterator[Candidate]:
    for r in rows:
        yield Candidate(str(r["category"]), str(r["question_id"]), tuple(map(str, r["turns"])))


def build(
    rows: Iterable[dict[str, Any]],
    *,
    cap: int = CAP_CHARS,
    turns_per_category: int = TURNS_PER_CATEGORY,
) -> SetFile:
    """The SPEED-Bench set from the split's rows in order (Appendix A)."""
    fill = fill_categories(candidates(rows), cap=cap, turns_per_category=turns_per_category)
    names = numbered_names("sp", (c.category for c in fill.taken))
    conversations = [
        make_conversation(name, c.category, SOURCE, c.source_id, c.texts)
        for name, c in zip(names, fill.taken, strict=True)
    ]
    params = {"turns_per_category": turns_per_category, "cap_chars": cap}
    provenance = HUB.provenance(__name__, params, skipped_over_cap=fill.skipped_over_cap)
    return SetFile(NAME, conversations, provenance)


def build_from_mirror(root: Path) -> SetFile:
    return build(mirror_rows(root, HUB))


def build_from_hub() -> SetFile:
    return build(hub_rows(HUB))
