"""The scheduler's decisions on fixed simulated rounds match the recording made before the
host-time work (issue 12, "Scheduler host time"): every round's tree (tokens, parent rows, the
candidate of each row), why, Eq. (7)'s pick, the offered widths and prices, the exploration row,
the q's, and the learned state after each request. Floats are compared to a relative 1e-9 (the
recording keeps 11 digits; a change of summation order may move a last digit, not a decision).

The recording is ``tests/fixtures/scheduler_replay.json.gz``, made by
``tests/fixtures/make_scheduler_replay.py`` (which this test runs again, under the scheduler
constants the recording holds)."""

from __future__ import annotations

import gzip
import importlib.util
import json
import math
from pathlib import Path
from typing import Any

import pytest

MAKER = Path(__file__).resolve().parents[1] / "fixtures" / "make_scheduler_replay.py"
_spec = importlib.util.spec_from_file_location("make_scheduler_replay", MAKER)
assert _spec is not None and _spec.loader is not None
replay = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(replay)
_FILE: dict[str, Any] = json.loads(gzip.decompress(replay.FIXTURE.read_bytes()))
RECORDED: dict[str, Any] = _FILE["scenarios"]
#: the constants the recording was made with (the file's defaults may have moved since)
CONFIG = replay.scheduler_of(_FILE)
REL = 1e-9


def differences(want: Any, got: Any, where: str = "") -> list[str]:
    """Where ``got`` departs from ``want``: exact for everything but floats (relative ``REL``)."""
    if isinstance(want, dict) and isinstance(got, dict):
        if want.keys() != got.keys():
            return [f"{where}: keys {sorted(want.keys() ^ got.keys())} differ"]
        return [d for k in want for d in differences(want[k], got[k], f"{where}.{k}")]
    if isinstance(want, list) and isinstance(got, list):
        if len(want) != len(got):
            return [f"{where}: {len(got)} items, recorded {len(want)}"]
        return [d for i, (a, b) in enumerate(zip(want, got, strict=True))
                for d in differences(a, b, f"{where}[{i}]")]
    if isinstance(want, float) or isinstance(got, float):
        if (isinstance(want, bool) or isinstance(got, bool) or want is None or got is None
                or not math.isclose(want, got, rel_tol=REL, abs_tol=1e-300)):
            return [f"{where}: {got!r}, recorded {want!r}"]
        return []
    return [] if want == got else [f"{where}: {got!r}, recorded {want!r}"]


def test_the_comparison_can_fail():
    assert differences({"q": [0.5, 0.25]}, {"q": [0.5, 0.25 * (1 + 1e-12)]}) == []
    assert differences({"q": [0.5, 0.25]}, {"q": [0.5, 0.2500001]}) != []
    assert differences({"rows": 8}, {"rows": 9}) != []
    assert differences({"a": [1, 2]}, {"a": [1, 2, 3]}) != []


def test_the_recording_covers_every_kind_of_decision():
    whys = {r["why"] for v in RECORDED.values() for r in v["rounds"]}
    assert {"choice", "cold-start", "width1-cold-start", "pinned"} <= whys
    assert any(r["explored"] for v in RECORDED.values() for r in v["rounds"])
    assert max(len(r["offered"]) for r in RECORDED["learned-24"]["rounds"]) >= 20


@pytest.mark.parametrize("name", sorted(replay.SCENARIOS))
def test_every_decision_matches_the_recording(name: str):
    got = replay.record(name, CONFIG)
    want = RECORDED[name]
    assert len(got["rounds"]) == len(want["rounds"]), "a different number of rounds"
    for i, (w, g) in enumerate(zip(want["rounds"], got["rounds"], strict=True)):
        diff = differences(w, g, f"round {i}")
        assert not diff, diff[:5]
    diff = differences(want["states"], got["states"], "state")
    assert not diff, diff[:5]
