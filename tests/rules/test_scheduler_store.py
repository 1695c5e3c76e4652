"""The store round-trips (§3.2, "Cold start": the table is stored, so a restart begins from
what was learned). With ``store.persist_fast_state: true`` a restarted scheduler makes the same
choices as one that never stopped; with the paper's ``false`` ("the level is not stored") the
levels and the chooser's incumbent start again and everything learned slowly is kept."""

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


FAST = {"store": {"persist_fast_state": True}}


@pytest.mark.parametrize("arm", [{}, {"offer_width1": True}, {"width": "classes"}])
def test_a_restarted_scheduler_makes_the_same_choices(tmp_path: Path, arm: dict) -> None:
    store = tmp_path / "store.json"
    sim = Simulator(ENV)
    arm = {**arm, "constants": FAST}
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


def test_without_the_fast_state_a_restart_keeps_the_laws_and_drops_the_levels(
        tmp_path: Path) -> None:
    """``persist_fast_state: false`` (the default): the stored table has no levels (every
    class's level reads 1 again, the paper's "the level is not stored") and the store has no
    chooser state; the laws, banks, measurement counts, rho and the acceptance model are kept,
    so the restarted scheduler measures nothing again."""
    store = tmp_path / "store.json"
    sim = Simulator(ENV)
    kept = AdaSparkRule(store=str(store))
    assert kept.cfg.store.persist_fast_state is False
    sim.run(kept, range(4), [400, 2500], 200)
    state = json.loads(store.read_text())
    assert "chooser" not in state and "held" not in state["table"]
    assert all(k["level"]["ratios"] == [] and k["level"]["value"] == 1.0
               for k in state["table"]["classes"])
    assert kept.table is not None and any(k.level.value != 1.0 for k in kept.table.classes)
    restarted = AdaSparkRule(store=str(store))
    b = sim.run_request(restarted, 4, 1500, 250, keep_rounds=True)
    assert "cold-start" not in b.round_why
    assert restarted.table is not None
    assert [k.law.to_state() for k in restarted.table.classes] \
        == [k.law.to_state() for k in kept.table.classes] or restarted.table.splits > 0
    assert restarted.rate.to_state().keys() >= kept.rate.to_state().keys()


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


@pytest.mark.parametrize("text", ['{"version": 1, "table": "unterminated', "[1, 2]", "\udcff"])
def test_a_damaged_store_is_refused_naming_the_file(tmp_path: Path, text: str) -> None:
    """Issue 34, item 13: a corrupt store was a bare ``JSONDecodeError`` naming no file."""
    from adaspark.rules.adaspark.store import load_store

    p = tmp_path / "store.json"
    p.write_bytes(text.encode("utf-8", "surrogateescape"))
    with pytest.raises(ValueError, match=f"store {p} .*move it aside") as e:
        load_store(p)
    assert not isinstance(e.value, json.JSONDecodeError)
