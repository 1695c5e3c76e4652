"""LongBench: the task template, the middle cut, the task order, zip or unpacked layout."""

from __future__ import annotations

import pytest

from adaspark.testset import longbench
from adaspark.testset.readers import SourceUnavailable
from adaspark.testset.rules import cut_middle, fill_template

TEMPLATES = longbench.load_templates()  # the vendored dataset2prompt.json


def doc(task: str, n: int, tag: str) -> str:
    """A document of ``n`` characters whose head, middle and tail can be told apart."""
    head, tail = f"<{task}:{tag}:head>", f"<{tag}:tail>"
    body = n - len(head) - len(tail)
    third = body // 3
    return head + "h" * third + "m" * third + "t" * (body - 2 * third) + tail


def row(task: str, k: int, context: str, question: str = "What is it?") -> dict:
    return {
        "input": question,
        "context": context,
        "answers": ["x"],
        "length": len(context.split()),
        "dataset": task,
        "language": "en",
        "all_classes": None,
        "_id": f"{task}-{k:02d}",
    }


def synthetic() -> dict[str, list[dict]]:
    out = {}
    for task in longbench.TASKS:
        out[task] = [
            row(task, 0, doc(task, 3_000, "short")),  # fits whole
            row(task, 1, doc(task, 30_000, "long")),  # cut from the middle
            row(task, 2, doc(task, 500, "unused")),  # the task already holds two turns
        ]
    # qasper: a question so long that under 2,000 characters of the document would remain
    out["qasper"].insert(0, row("qasper", 9, doc("qasper", 20_000, "x"), "Q" * 10_500))
    return out


def test_template_cut_and_order(tmp_path, write_longbench):
    s = longbench.build_from_mirror(write_longbench(tmp_path, synthetic()))
    assert [c.name for c in s.conversations] == [
        f"lb-{t}-{k}" for t in longbench.TASKS for k in (1, 2)
    ]
    assert [c.source_id for c in s.conversations[:4]] == [
        "gov_report-00",
        "gov_report-01",
        "qasper-00",
        "qasper-01",  # qasper-09 skipped
    ]
    assert s.provenance["skipped_over_cap"] == 1
    assert s.provenance["truncated_middle"] == 6
    assert s.provenance["tasks"] == list(longbench.TASKS)
    for task in longbench.TASKS:
        whole, cut = s.conversation(f"lb-{task}-1"), s.conversation(f"lb-{task}-2")
        context = synthetic()[task][-2]["context"]
        assert whole.truncated is None
        assert whole.texts == [
            fill_template(TEMPLATES[task], synthetic()[task][-3]["context"], "What is it?")
        ]
        assert cut.truncated == "middle"
        (text,) = cut.texts
        assert len(text) == 12_000
        keep = len(context) - (len(fill_template(TEMPLATES[task], context, "What is it?")) - 12_000)
        assert text == fill_template(TEMPLATES[task], cut_middle(context, keep), "What is it?")
        assert f"<{task}:long:head>" in text and "<long:tail>" in text  # head and tail kept
        assert "m" * 50 in context and "m" * 50 not in text  # the middle went


def test_unpacked_layout_reads_the_same(tmp_path, write_longbench):
    zipped = longbench.build_from_mirror(write_longbench(tmp_path / "z", synthetic()))
    unpacked = longbench.build_from_mirror(
        write_longbench(tmp_path / "u", synthetic(), zipped=False)
    )
    assert zipped.conversations == unpacked.conversations


def test_cut_middle():
    assert cut_middle("abcdefghij", 4) == "abij"
    assert cut_middle("abcdefghij", 5) == "abhij"
    assert cut_middle("abc", 10) == "abc"


def test_missing_task_names_the_layout(tmp_path, write_longbench):
    rows = synthetic()
    del rows["vcsum"]
    with pytest.raises(SourceUnavailable, match=r"data/vcsum\.jsonl"):
        longbench.build_from_mirror(write_longbench(tmp_path, rows))


def test_published_prompts_wrap_the_vendored_templates(vendored):
    """Each published LongBench conversation begins and ends with its task's template, and 9 of
    the 12 were cut to exactly the 12,000-character cap (issue 4's published facts)."""
    lb = next(s for s in vendored if s.name == "longbench")
    assert [c.kind for c in lb.conversations] == [t for t in longbench.TASKS for _ in (1, 2)]
    for c in lb.conversations:
        head, rest = TEMPLATES[c.kind].split("{context}")
        tail = rest.split("{input}")[-1]
        assert c.texts[0].startswith(head) and c.texts[0].endswith(tail), c.name
    cut = [c for c in lb.conversations if c.truncated == "middle"]
    assert len(cut) == 9 and all(c.chars == 12_000 for c in cut)
    assert all(c.chars < 12_000 for c in lb.conversations if c.truncated is None)
