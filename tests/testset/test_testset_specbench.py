"""Spec-Bench: rebuilt from the vendored raw file, the set matches the published one."""

from __future__ import annotations

import json

from adaspark import paths
from adaspark.testset import specbench
from adaspark.testset.lock import check_set, read_lock
from adaspark.testset.model import conversation_to_json, text_hash


def published_specbench() -> dict:
    return json.loads((paths.data_dir() / "testset" / "specbench.json").read_text("utf-8"))


def test_rebuilt_from_question_jsonl_matches_published_conversation_for_conversation():
    built = specbench.build_from_mirror(specbench.vendored_dir())
    published = published_specbench()["conversations"]
    # the paper's Table 13: 18 conversations, 26 turns
    assert len(built.conversations) == 18
    assert sum(len(c.turns) for c in built.conversations) == 26
    assert [c.name for c in built.conversations] == [c["name"] for c in published]
    for mine, theirs in zip(built.conversations, published, strict=True):
        assert conversation_to_json(mine) == theirs, mine.name
        assert text_hash(mine.texts) == theirs["sha256"], mine.name
    assert check_set(built, read_lock()) == []
    assert built.provenance["revision"] == published_specbench()["provenance"]["revision"]


def test_category_fill_by_name_with_cap(tmp_path, write_json):
    rows = [
        {"question_id": 1, "category": "writing", "turns": ["w1"], "reference": []},
        {"question_id": 2, "category": "coding", "turns": ["x" * 4001], "reference": []},
        {"question_id": 3, "category": "writing", "turns": ["w2"], "reference": []},
        {"question_id": 4, "category": "coding", "turns": ["c1", "c1b"], "reference": []},
        {"question_id": 5, "category": "writing", "turns": ["w3"], "reference": []},
        {"question_id": 6, "category": "coding", "turns": ["c2"], "reference": []},
        {"question_id": 7, "category": "math", "turns": ["m" * 3000, "m" * 1000], "reference": []},
    ]
    write_json(tmp_path / "data" / "spec_bench" / "question.jsonl", rows, jsonl=True)
    s = specbench.build_from_mirror(tmp_path)  # the Spec-Bench repository's layout
    assert [(c.name, c.source_id) for c in s.conversations] == [
        ("sb-coding-1", "4"),  # 2 over the cap: skipped; 4 fills coding with two turns
        ("sb-math-1", "7"),  # exactly 4,000 characters: within the cap
        ("sb-writing-1", "1"),
        ("sb-writing-2", "3"),
    ]
    assert s.provenance["skipped_over_cap"] == 1
    assert s.conversations[0].texts == ["c1", "c1b"]
    assert [t.type for t in s.conversations[0].turns] == ["first", "continued"]


def test_mirror_may_be_the_vendored_layout_or_the_file(tmp_path, write_json):
    rows = [{"question_id": 9, "category": "qa", "turns": ["q?"], "reference": []}]
    f = write_json(tmp_path / "question.jsonl", rows, jsonl=True)
    assert specbench.build_from_mirror(tmp_path).conversations[0].source_id == "9"
    assert specbench.build_from_mirror(f).conversations[0].name == "sb-qa-1"
