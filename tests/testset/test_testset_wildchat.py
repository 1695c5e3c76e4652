"""WildChat: the dataset's own filters, user turns only, cut to the first four."""

from __future__ import annotations

from adaspark.testset import wildchat


def row(cid: str, users: list[str], *, language="English", toxic=False, redacted=False, turn=None):
    conversation = []
    for u in users:
        conversation.append({"role": "user", "content": u, "language": language})
        conversation.append(
            {"role": "assistant", "content": f"reply to {u[:10]}", "language": language}
        )
    return {
        "conversation_id": cid,
        "model": "gpt-3.5-turbo",
        "conversation": conversation,
        "turn": len(users) if turn is None else turn,
        "language": language,
        "toxic": toxic,
        "redacted": redacted,
    }


def four(tag: str) -> list[str]:
    return [f"{tag} question {i}" for i in range(1, 5)]


ROWS = [
    row("ok-cut", [*four("a"), "fifth user turn"]),  # five user turns: cut to four
    row("chinese", four("b"), language="Chinese"),
    row("toxic", four("c"), toxic=True),
    row("redacted", four("d"), redacted=True),
    row("three", four("e")[:3]),
    row("blank", [*four("f")[:3], "   "]),  # a blank user message is not a turn: only three
    row("over-cap", ["u" * 1001, "u" * 1000, "u" * 1000, "u" * 1000]),  # 4,001 characters
    row("at-cap", ["v" * 1000] * 4),  # exactly 4,000: within the cap
    *(row(f"ok-{k}", four(f"g{k}")) for k in range(1, 8)),  # ok-7 is the ninth passing row
]


def test_filters_cut_and_first_eight(tmp_path, write_parquet):
    write_parquet(tmp_path / "data" / "train-00000-of-00001.parquet", ROWS)
    s = wildchat.build_from_mirror(tmp_path)
    assert [c.source_id for c in s.conversations] == [
        "ok-cut",
        "at-cap",
        *(f"ok-{k}" for k in range(1, 7)),
    ]
    assert [c.name for c in s.conversations] == [f"wc-{i}" for i in range(1, 9)]
    first = s.conversations[0]
    assert first.texts == four("a")  # user turns only, the fifth cut
    assert all(len(c.turns) == 4 and c.kind == "wildchat" for c in s.conversations)
    assert s.provenance["scanned"] == len(ROWS) - 1  # stops at the eighth; ok-7 is never read


def test_fewer_than_eight_passing_rows_gives_what_passed(tmp_path, write_parquet):
    write_parquet(tmp_path / "data" / "train-00000-of-00002.parquet", ROWS[:4])
    write_parquet(tmp_path / "data" / "train-00001-of-00002.parquet", ROWS[4:8])
    s = wildchat.build_from_mirror(tmp_path)
    assert [c.source_id for c in s.conversations] == ["ok-cut", "at-cap"]
