"""The store round-trips: a restarted scheduler makes the same choices as one that never
stopped (§3.2, "Cold start": the table is stored, so a restart begins from what was learned)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from adaspark.rules.adaspark.rule import AdaSparkRule
from adaspark.rules.adaspark.simulator import (
    DrafterProcess,
    Environment,
    RisingCost,
    Simulator,
    TextProcess,
)

ENV = Environment(cost=RisingCost(base=0.012, per_row=0.0016, slope=0.01),
                  drafter=DrafterProcess(B=8, K=8, alpha=1.0), fixed=0.008, seed=21,
                  text=TextProcess(copy_start=0.02))


@pytest.mark.parametrize("arm", [{}, {"offer_width1": True}, {"width": "classes"}])
def test_a_restarted_scheduler_makes_the_same_choices(tmp_path: Path, arm: dict) -> None:
    store = tmp_path / "store.json"
    sim = Simulator(ENV)
    kept = AdaSparkRule(store=str(store), **arm)
    sim.run(kept, range(4), [400, 2500], 200)
    assert store.is_file()
    restarted = AdaSparkRule(store=str(store), **arm)
    a = sim.run_request(kept, 4, 1500, 250, keep_rounds=True)
    b = sim.run_request(restarted, 4, 1500, 250, keep_rounds=True)
    assert a.widths == b.widths and a.round_why == b.round_why
    assert a.round_seconds == b.round_seconds
    sa = {k: v for k, v in a.summary.items() if k != "request_id"}
    sb = {k: v for k, v in b.summary.items() if k != "request_id"}
    assert sa == sb
    assert kept.state() == restarted.state()


def test_a_fresh_scheduler_differs_so_the_store_matters(tmp_path: Path) -> None:
    store = tmp_path / "store.json"
    sim = Simulator(ENV)
    kept = AdaSparkRule(store=str(store))
    sim.run(kept, range(4), [400, 2500], 200)
    a = sim.run_request(kept, 4, 1500, 250, keep_rounds=True)
    fresh = sim.run_request(AdaSparkRule(), 4, 1500, 250, keep_rounds=True)
    assert a.round_why.count("cold-start") < 10 <= fresh.round_why.count("cold-start")


def test_the_store_is_json_and_refuses_another_arm(tmp_path: Path) -> None:
    store = tmp_path / "store.json"
    Simulator(ENV).run(AdaSparkRule(store=str(store)), range(1), [400], 100)
    state = json.loads(store.read_text())
    assert state["version"] == 1 and state["max_rows"] == 64
    assert len(state["table"]["classes"]) >= 6 and state["model"] is not None
    other = AdaSparkRule(store=str(store), width="classes")
    with pytest.raises(ValueError, match="store was written"):
        Simulator(ENV).run(other, range(1), [400], 50)
