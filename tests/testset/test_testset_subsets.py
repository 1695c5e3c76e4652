"""The subsets derived by Appendix A's rule have the paper's counts."""

from __future__ import annotations

import pytest

from adaspark.testset.model import SET_NAMES, SetFile, make_conversation
from adaspark.testset.subsets import (
    PAPER_COUNTS,
    all_subsets,
    evaluation,
    heldout,
    make_subset,
    paper_count_differences,
    short,
    smoke,
    subsets_to_json,
)

#: Table 13's "subset turns" per source, in the published order.
TABLE_13_SUBSET_TURNS = {
    "specbench": 21,
    "speedbench": 15,
    "wildchat": 16,
    "convfinqa": 16,
    "toolace": 13,
    "longbench": 6,
}


def test_paper_counts(vendored):
    subs = all_subsets(vendored)
    assert paper_count_differences(subs) == []
    ev, held = subs["evaluation"], subs["heldout"]
    assert (
        (ev.n_conversations, ev.n_turns, ev.n_timed) == PAPER_COUNTS["evaluation"] == (42, 87, 95)
    )
    assert (held.n_conversations, held.n_turns) == (31, 61)
    assert subs["short"].n_timed == 11
    assert (subs["all"].n_conversations, subs["all"].n_turns) == (73, 148)
    for name, turns in TABLE_13_SUBSET_TURNS.items():
        assert sum(i.n_turns for i in ev.items if i.set_name == name) == turns, name


def test_evaluation_rule_per_source(vendored):
    ev = evaluation(vendored)
    by_set = {n: [i.conversation for i in ev.items if i.set_name == n] for n in SET_NAMES}
    assert len(by_set["specbench"]) == 13 and len(by_set["speedbench"]) == 11  # categories
    assert all(
        name.endswith("-1") for n in ("specbench", "speedbench", "longbench") for name in by_set[n]
    )
    assert by_set["wildchat"] == ["wc-1", "wc-2", "wc-3", "wc-4"]
    assert by_set["longbench"] == [
        f"lb-{t}-1" for t in ("gov_report", "qasper", "lcc", "repobench-p", "vcsum", "multi_news")
    ]


def test_heldout_is_the_complement_in_order(vendored):
    ev = {(i.set_name, i.conversation) for i in evaluation(vendored).items}
    held = [(i.set_name, i.conversation) for i in heldout(vendored).items]
    everything = [(s.name, c.name) for s in vendored for c in s.conversations]
    assert not ev & set(held)
    assert held == [k for k in everything if k not in ev]


def test_evaluation_keeps_the_published_order(vendored):
    items = [(i.set_name, i.conversation) for i in evaluation(vendored).items]
    everything = [(s.name, c.name) for s in vendored for c in s.conversations]
    assert items == [k for k in everything if k in set(items)]
    sources = [name for name, _ in items]
    assert sorted(set(sources), key=sources.index) == list(SET_NAMES)  # Table 13's order


def test_short_and_smoke(vendored):
    sh = short(vendored)
    assert [i.set_name for i in sh.items] == list(SET_NAMES)
    assert [i.conversation for i in sh.items] == [s.conversations[0].name for s in vendored]
    assert all(
        i.n_turns == min(2, len(s.conversations[0].turns))
        for i, s in zip(sh.items, vendored, strict=True)
    )
    sm = smoke(vendored)
    assert [(i.set_name, i.conversation, i.n_turns) for i in sm.items] == [
        ("specbench", "sb-coding-1", 1),
        ("toolace", "ta-1", 1),
    ]
    assert sm.n_timed == 1 + (2 if vendored[4].conversations[0].turns[0].result else 1)


def test_placeholders_shown_with_and_without(vendored):
    js = subsets_to_json(vendored)
    assert len(js["placeholders"]) == 9  # issue 4: 9 of the 19 SPEED-Bench conversations
    ev = js["subsets"]["evaluation"]
    flagged = [i for i in ev["items"] if i["placeholder"]]
    assert ev["without_placeholders"]["conversations"] == ev["conversations"] - len(flagged)
    assert ev["without_placeholders"]["turns"] == ev["turns"] - sum(i["turns"] for i in flagged)
    assert {i["set"] for i in flagged} == {"speedbench"}


def conv(name: str, kind: str, n_turns: int = 1, results: int = 0):
    texts = [f"{name} turn {k}" for k in range(n_turns)]
    res = ["r"] * results + [None] * (n_turns - results)
    return make_conversation(name, kind, "synthetic", name, texts, results=res)


def test_rule_on_synthetic_sets():
    multi = SetFile(
        "multi", [conv("a1", "a", 2), conv("b1", "b"), conv("a2", "a"), conv("b2", "b")]
    )
    single = SetFile(
        "single", [conv(f"s{k}", "s", 2, results=k % 2) for k in range(1, 8)]
    )  # 7: odd
    ev = evaluation([multi, single])
    assert [i.conversation for i in ev.items] == [
        "a1",
        "b1",
        "s1",
        "s2",
        "s3",
    ]  # half, rounded down
    assert ev.n_turns == 2 + 1 + 6
    assert ev.n_timed == ev.n_turns + 2  # s1 and s3 carry a tool result on their first turn
    assert [i.conversation for i in heldout([multi, single]).items] == [
        "a2",
        "b2",
        "s4",
        "s5",
        "s6",
        "s7",
    ]


def test_unknown_subset_lists_the_known_ones(vendored):
    with pytest.raises(KeyError, match="evaluation"):
        make_subset("evaluaton", vendored)
