"""The stress run's checks (:mod:`adaspark.runs.stress`) on synthetic outcomes with known
verdicts: each rule passes on consistent counts and fails on the one fault it is for."""

from __future__ import annotations

import copy

from adaspark.runs.stress import StressSettings, memory_growth, plan, verdicts

ALONE = {0: "the moon is round", 1: "two rivers"}


def _rows() -> list[dict]:
    return [
        {"prompt": 0, "outcome": "reply", "refused": 0, "text": "the moon is round",
         "near_tie_chars": [8]},
        {"prompt": 1, "outcome": "reply", "refused": 2, "text": "two lakes",
         "near_tie_chars": [3, 7]},  # differs from character 4 on: the tie at 3 explains it
        {"prompt": 1, "outcome": "cancelled", "refused": 1},
    ]


def _server() -> dict[str, int]:
    # four requests queued: three started (one cancel seen only after its last token: finished
    # there), one dropped after waiting too long (a 503, as the two refused with a full queue)
    return {"queued": 4, "refused": 2, "dropped_busy": 1, "dropped_left": 0, "finished": 3,
            "cancelled": 0, "failed": 0}


def _check(rows=None, server=None, rss=None, exact=True, up=True) -> dict:
    return verdicts(_rows() if rows is None else rows, _server() if server is None else server,
                    ALONE, [100.0] * 40 if rss is None else rss, exact=exact, up=up)


def test_consistent_counts_pass_every_check() -> None:
    got = _check()
    assert {k: c["pass"] for k, c in got.items()} == dict.fromkeys(got, True)
    assert got["replies_exact"]["differ_at_near_ties"] == 1


def test_a_lost_or_doubled_request_fails() -> None:
    doubled = _server() | {"finished": 4, "queued": 5}
    assert _check(server=doubled)["no_request_lost"]["pass"] is False
    lost = _server() | {"finished": 2}  # queued 3, but only 2 ended
    assert _check(server=lost)["no_request_lost"]["pass"] is False
    failed = _server() | {"finished": 2, "failed": 1}
    assert _check(server=failed)["no_request_lost"]["pass"] is False
    rows = [*_rows(), {"prompt": 0, "outcome": "http 500", "refused": 0}]
    assert _check(rows=rows)["no_request_lost"]["pass"] is False
    wrong_503 = _server() | {"refused": 1}
    assert _check(server=wrong_503)["no_request_lost"]["pass"] is False


def test_a_reply_off_its_text_without_a_near_tie_fails() -> None:
    rows = copy.deepcopy(_rows())
    rows[1]["near_tie_chars"] = [7]  # a tie only after the text left its one-at-a-time text
    got = _check(rows=rows)["replies_exact"]
    assert got["pass"] is False and got["differ_unexplained"] == 1
    rows[1]["near_tie_chars"] = []
    assert _check(rows=rows)["replies_exact"]["pass"] is False
    rows[1]["text"] = "two rivers and a lake"  # runs on past the shorter text: it differs there
    rows[1]["near_tie_chars"] = [10]
    assert _check(rows=rows)["replies_exact"]["pass"] is True
    assert _check(rows=rows, exact=False)["replies_exact"]["pass"] is None


def test_growing_memory_fails_and_noise_passes() -> None:
    growing = [100.0 + 2 * i for i in range(40)]
    assert _check(rss=growing)["memory_flat"]["pass"] is False
    noisy = [100.0 + (i % 3) for i in range(40)]
    assert _check(rss=noisy)["memory_flat"]["pass"] is True
    assert memory_growth([1.0] * 4) is None
    assert _check(rss=[1.0] * 4)["memory_flat"]["pass"] is None


def test_no_503_or_a_503_without_retry_after_fails() -> None:
    rows = [r | {"refused": 0} for r in _rows()]
    server = _server() | {"queued": 3, "refused": 0, "dropped_busy": 0}
    got = _check(rows=rows, server=server)
    assert got["no_request_lost"]["pass"] is True and got["busy_answered_503"]["pass"] is False
    rows = copy.deepcopy(_rows())
    rows[1]["retry_after_missing"] = 1
    assert _check(rows=rows)["busy_answered_503"]["pass"] is False
    assert _check(up=False)["server_up"]["pass"] is False


def test_the_plan_is_seeded_and_cancels_about_its_share() -> None:
    s = StressSettings(clients=8, requests=50, cancel_share=0.1, pool=16, seed=3)
    a, b = plan(s), plan(s)
    assert a == b and len(a) == 8 and all(len(m) == 50 for m in a)
    left = [p for m in a for p in m if p.leave_after is not None]
    assert 20 <= len(left) <= 60 and all(p.stream and 1 <= p.leave_after <= 4 for p in left)
    assert {p.prompt for m in a for p in m} <= set(range(16))
    assert plan(StressSettings(seed=4)) != a
