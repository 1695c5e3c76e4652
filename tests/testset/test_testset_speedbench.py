"""SPEED-Bench: the category fill in the split's own order, read from a parquet mirror."""

from __future__ import annotations

import pytest

from adaspark.testset import speedbench
from adaspark.testset.model import PLACEHOLDER_MARK, is_placeholder
from adaspark.testset.readers import SourceUnavailable


def row(qid: str, category: str, turns: list[str]) -> dict:
    return {
        "question_id": qid,
        "category": category,
        "sub_category": "",
        "turns": turns,
        "source": "synthetic",
        "src_id": qid,
        "difficulty": "",
        "multiturn": len(turns) > 1,
    }


PLACEHOLDER = f"{PLACEHOLDER_MARK} FROM THE SOURCE USING SPECDEC_BENCH"

ROWS = [
    row("x1", "coding", ["write a loop"]),
    row("y1", "roleplay", ["be a pirate", "louder", "again"]),  # three turns: roleplay is full
    row("x2", "coding", ["c" * 4001]),  # over the cap, skipped and counted
    row("y2", "roleplay", ["never taken"]),
    row("z1", "math", [PLACEHOLDER]),
    row("x3", "coding", ["c" * 4000]),  # exactly at the cap: taken, coding is full
    row("x4", "coding", ["never taken"]),
    row("z2", "math", [PLACEHOLDER + "\n\n{template}"]),
    row("z3", "math", ["never taken"]),
]


def test_fill_in_source_order(tmp_path, write_parquet):
    write_parquet(tmp_path / "qualitative" / "test-00000-of-00001.parquet", ROWS)
    s = speedbench.build_from_mirror(tmp_path)
    assert [(c.name, c.source_id) for c in s.conversations] == [
        ("sp-coding-1", "x1"),
        ("sp-roleplay-1", "y1"),
        ("sp-math-1", "z1"),
        ("sp-coding-2", "x3"),
        ("sp-math-2", "z2"),
    ]
    assert s.provenance["skipped_over_cap"] == 1
    assert s.provenance["revision"] == speedbench.HUB.revision
    assert {c.source for c in s.conversations} == {"nvidia/SPEED-Bench:qualitative"}
    assert s.conversation("sp-roleplay-1").texts == ["be a pirate", "louder", "again"]
    assert [is_placeholder(c) for c in s.conversations] == [False, False, True, False, True]


def test_shards_are_read_in_name_order(tmp_path, write_parquet):
    write_parquet(tmp_path / "qualitative" / "test-00001-of-00002.parquet", ROWS[4:])
    write_parquet(tmp_path / "qualitative" / "test-00000-of-00002.parquet", ROWS[:4])
    names = [c.source_id for c in speedbench.build_from_mirror(tmp_path).conversations]
    assert names == ["x1", "y1", "z1", "x3", "z2"]


def test_published_placeholders_are_flagged(vendored):
    sp = next(s for s in vendored if s.name == "speedbench")
    flagged = [c.name for c in sp.conversations if is_placeholder(c)]
    assert len(sp.conversations) == 19 and len(flagged) == 9  # issue 4's published facts
    assert all(
        PLACEHOLDER_MARK not in t.text
        for c in sp.conversations
        if c.name not in flagged
        for t in c.turns
    )


def test_mirror_without_the_split_names_the_layout(tmp_path):
    (tmp_path / "qualitative").mkdir()
    with pytest.raises(SourceUnavailable, match=r"qualitative/test-\*\.parquet"):
        speedbench.build_from_mirror(tmp_path)
    with pytest.raises(SourceUnavailable, match="does not exist"):
        speedbench.build_from_mirror(tmp_path / "nowhere")


def test_hub_path_reads_the_pinned_revision_streamed(monkeypatch):
    """The hub path hands the same rows to the same rule; no network: `datasets` is faked."""
    import sys
    import types

    calls = []

    def load_dataset(repo, config, *, split, revision, streaming):
        calls.append((repo, config, split, revision, streaming))
        return iter(ROWS)

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    s = speedbench.build_from_hub()
    assert calls == [("nvidia/SPEED-Bench", "qualitative", "test", speedbench.HUB.revision, True)]
    assert [c.source_id for c in s.conversations] == ["x1", "y1", "z1", "x3", "z2"]
