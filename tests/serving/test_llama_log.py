"""The llama-server debug-log reader (``adaspark.serving.llama_log``) on a synthetic excerpt in the
vendored build's line formats, with a known answer (no server needed)."""

from __future__ import annotations

import pytest

from adaspark.serving.llama_log import Candidate, LlamaLogError, parse_draft_rounds


def cand(seq: int, k: int, pos: int, tok: int, p: float, piece: str = "x") -> str:
    return f"0.00.691.103 D  - seq_id {seq}, draft candidate {k:3d}, pos {pos:3d}: {tok:6d} " \
           f"({p:8.3f}) '{piece}'"


def slot(task: int, msg: str, sid: int = 0) -> str:
    return f"0.00.691.228 D slot handle_last_: id {sid:2d} | task {task} | {msg}"


def block(seq: int, rows: list[list[tuple[int, float]]], piece: str = "x") -> list[str]:
    return [cand(seq, k, i, t, p, piece) for i, row in enumerate(rows)
            for k, (t, p) in enumerate(row)]


ROW = [(11, 0.5), (12, 0.25), (13, 0.125)]
LOG = [
    "0.00.000.001 I main: loading model",
    slot(0, "slot decode token, id=5, n_ctx = 1024, n_tokens = 6, truncated = 0"),  # plain
    # round 1: anchor 351 at 7, three drafts, none accepted; a piece holds a newline
    *block(0, [ROW, [(14423, 0.95), (22004, 0.025), (198, 0.014)], ROW], piece="\n"),
    "0.00.691.165 D spec common_specu: called impl draft-dspark, hist size = 7",
    slot(0, "generate_draft: id=351, #tokens=7, #draft=3, pos_next=7"),
    slot(0, "add accepted tokens: sampled=260, ids.size=1, n_draft=3"),
    slot(0, "accepted 0/3 draft tokens, new n_tokens = 8"),
    # round 2: anchor 260 at 8, cut to 2 drafts, both accepted
    *block(0, [[(21, 0.4), (22, 0.3)], [(23, 0.6)], [(24, 0.9)]]),
    "0.00.989.292 D spec common_specu: truncating draft to 2 tokens",
    slot(0, "generate_draft: id=260, #tokens=8, #draft=2, pos_next=8"),
    slot(0, "accepted 2/2 draft tokens, new n_tokens = 11"),
    # round 3: the draft came back empty (n_min): a plain decode at 11
    *block(0, [[(31, 0.2)]]),
    slot(0, "slot decode token, id=99, n_ctx = 1024, n_tokens = 11, truncated = 0"),
    # another request (task 4): round 4 with a partial accept replayed from a checkpoint
    *block(0, [ROW, ROW, ROW]),
    slot(4, "generate_draft: id=7, #tokens=5, #draft=3, pos_next=5"),
    "0.01.000.000 I slot operator(): id  0 | task 4 | accepted  1/ 3 draft tokens (restore "
    "checkpoint)",
    slot(4, "generate_draft: id=7, #tokens=5, #draft=2, pos_next=5"),  # the replay: no new round
    slot(4, "accepted 1/2 draft tokens, new n_tokens = 8"),
]


def test_rounds_of_a_synthetic_log():
    rounds = parse_draft_rounds("\n".join(LOG))
    got = [(r.task, r.anchor_pos, r.anchor, r.picks, r.kept, r.drafts, r.accepted)
           for r in rounds]
    assert got == [
        (0, 7, 351, (11, 14423, 11), 3, (11, 14423, 11), 0),
        (0, 8, 260, (21, 23, 24), 2, (21, 23), 2),
        (0, 11, 99, (31,), 0, (), None),
        (4, 5, 7, (11, 11, 11), 3, (11, 11, 11), 1),
    ]
    assert rounds[0].candidates[1] == (Candidate(14423, 0.95), Candidate(22004, 0.025),
                                       Candidate(198, 0.014))
    assert [len(r) for r in rounds[1].candidates] == [2, 1, 1]


def test_out_of_order_or_unclosed_drafts_are_refused():
    with pytest.raises(LlamaLogError, match="candidate 1 of position 1"):
        parse_draft_rounds("\n".join([cand(0, 0, 0, 1, 0.5), cand(0, 1, 1, 2, 0.5)]))
    with pytest.raises(LlamaLogError, match="no generate_draft line closes"):
        parse_draft_rounds("\n".join(block(0, [ROW])))
    with pytest.raises(LlamaLogError, match="3 drafts kept of 1 logged positions"):
        parse_draft_rounds("\n".join([*block(0, [ROW]),
                                      slot(0, "generate_draft: id=1, #tokens=2, #draft=3, "
                                              "pos_next=2")]))
    with pytest.raises(LlamaLogError, match="does not fit the round at position 2"):
        parse_draft_rounds("\n".join([*block(0, [ROW]),
                                      slot(0, "generate_draft: id=1, #tokens=2, #draft=1, "
                                              "pos_next=2"),
                                      slot(0, "accepted 1/1 draft tokens, new n_tokens = 3")]))
