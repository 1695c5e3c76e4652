"""A request id names its reply (``adaspark.runs.rows.reply_id``) and is read back to its set,
conversation and turn (``reply_turn``): the replay keeps another run's conversations by it."""

from __future__ import annotations

from adaspark.runs.rows import reply_id, reply_turn


def test_a_request_id_reads_back_to_its_set_conversation_and_turn() -> None:
    assert reply_turn(reply_id("longbench", "lb-gov_report-1", 0, 0)) == (
        "longbench", "lb-gov_report-1", 0)
    assert reply_turn(reply_id("a.b", "c", 3, 1)) == ("a.b", "c", 3)  # a dotted set name
    assert reply_turn(None) is None
    assert reply_turn("not-a-run-id") is None
    assert reply_turn("s.c.x.0") is None  # a turn that is not a number
