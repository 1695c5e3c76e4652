"""ConvFinQA (FLARE): dialogues in order, later turns reduced to their own question."""

from __future__ import annotations

import pytest

from adaspark.testset import convfinqa
from adaspark.testset.rules import followup_question

REPORT = "Context: revenue was 10 in 2007 and 12 in 2008 <table>...</table>"


def rows_for(dialogue_id: int, questions: list[str], report: str = REPORT) -> list[dict]:
    """FLARE's flattened rows: every query repeats the report and the history."""
    out = []
    history = ""
    for turn, q in enumerate(questions):
        query = f"{report}\nConversations: \n{history}Question: {q}\nAnswer:"
        out.append(
            {
                "id": f"convfinqa{dialogue_id}_{turn}",
                "query": query,
                "answer": "1",
                "turn": turn,
                "dialogue_id": dialogue_id,
            }
        )
        history += f"Question: {q}\nAnswer: 1\n"
    return out


def test_followup_question():
    assert followup_question("r\nQuestion: a?\nAnswer: 1\nQuestion:  and b? \nAnswer:") == "and b?"
    assert followup_question("Question: only the question") == "only the question"
    assert followup_question("no marker at all\nAnswer:") is None
    assert followup_question("r Question: \nAnswer:") is None


def test_dialogues_rule(tmp_path, write_parquet):
    d0 = rows_for(0, ["what was revenue in 2008?", "and in 2007?", "what was the change?"])
    bad = rows_for(2, ["q0?", "q1?"])
    bad[1]["query"] = f"{REPORT}\nwhat about it?"  # no question marker: dropped, not guessed
    long_report = "R" * (12_000 - len("\nConversations: \nQuestion: q?\nAnswer:") - len("and?"))
    at_cap = rows_for(4, ["q?", "and?"], report=long_report)
    over_cap = rows_for(3, ["q?", "and?"], report=long_report + "R")
    rows = [
        d0[0],
        d0[2],
        d0[1],  # turns out of order in the file: ordered by `turn`
        *rows_for(1, ["a single question?"]),  # one turn: not a conversation
        *bad,
        *over_cap,
        *at_cap,
        *(r for k in range(5, 12) for r in rows_for(k, [f"q{k}?", f"and q{k}?"])),
    ]
    write_parquet(tmp_path / "data" / "test-00000-of-00001.parquet", rows)
    s = convfinqa.build_from_mirror(tmp_path)
    assert [c.source_id for c in s.conversations] == ["0", "4", "5", "6", "7", "8", "9", "10"]
    assert [c.name for c in s.conversations] == [f"cf-{i}" for i in range(1, 9)]
    first = s.conversations[0]
    assert first.texts[0] == d0[0]["query"]  # the first turn whole, report included
    assert first.texts[1:] == ["and in 2007?", "what was the change?"]
    assert sum(len(t) for t in s.conversation("cf-2").texts) == 12_000  # exactly at the cap
    assert s.provenance["dropped_unparsable"] == 1
    assert {c.kind for c in s.conversations} == {"finance"}


@pytest.mark.parametrize("dialogue_id", [7, "7"])
def test_dialogue_ids_as_int_or_str(tmp_path, write_parquet, dialogue_id):
    rows = rows_for(0, ["a?", "b?"])
    for r in rows:
        r["dialogue_id"] = dialogue_id
    write_parquet(tmp_path / "data" / "test-00000-of-00001.parquet", rows)
    assert convfinqa.build_from_mirror(tmp_path).conversations[0].source_id == "7"
