"""Records: the per-request summary always; the per-round Parquet log only with logging on."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq

from adaspark.rules.adaspark import records
from adaspark.rules.adaspark.rule import AdaSparkRule
from adaspark.rules.adaspark.simulator import (
    DrafterProcess,
    Environment,
    Simulator,
    StepCost,
    TextProcess,
)

ENV = Environment(cost=StepCost(tops=(8, 16, 64), levels=(0.02, 0.03, 0.06)),
                  drafter=DrafterProcess(B=4, K=8), fixed=0.008, seed=3,
                  text=TextProcess(copy_start=0.03))


def test_round_log_is_one_parquet_file_per_request_with_the_schema(tmp_path: Path) -> None:
    rule = AdaSparkRule(log_dir=str(tmp_path / "rounds"))
    reps = Simulator(ENV).run(rule, range(3), [300, 1200], 200)
    files = sorted((tmp_path / "rounds").glob("rounds-*.parquet"))
    assert len(files) == 3
    assert pq.read_schema(files[0]).equals(records.ROUND_SCHEMA)
    df = pd.read_parquet(tmp_path / "rounds")
    assert len(df) == sum(r.rounds for r in reps)
    first = df[df.request_id == reps[0].summary["request_id"]]
    assert first.round_index.tolist() == list(range(len(first)))
    assert set(df.why) <= {"cold-start", "choice"} and "cold-start" in set(df.why)
    chosen = df[df.why == "choice"]
    assert chosen.rho.notna().any() and (chosen.predicted_verify_s > 0).all()
    assert (df.accepted_path.map(len) == df.committed).all()
    assert (df.accepted_drafter + df.accepted_agreed + df.accepted_ngram
            == df.committed - 1).all()
    assert (df.rows_drafter + df.rows_agreed + df.rows_ngram == df.width - 1).all()
    assert set(df.guard) <= {"fitted", "head"}
    assert not list(tmp_path.rglob("*.tmp"))    # written atomically


def test_the_summary_is_always_there_and_logging_off_builds_no_rows(tmp_path: Path) -> None:
    rule = AdaSparkRule()
    assert rule.log is None
    rep = Simulator(ENV).run_request(rule, 0, 300, 200)
    s = rep.summary
    for key in ("rounds", "rows_drafter", "accepted_ngram", "logloss_fitted", "logloss_head",
                "rounds_priced_fitted", "cold_start_rounds", "cold_start_s", "widths_learned"):
        assert key in s
    assert s["rounds"] == rep.rounds and s["cold_start_rounds"] >= 15
    assert 0 < s["cold_start_s"] < rep.seconds
    assert s["accepted_drafter"] + s["accepted_agreed"] + s["accepted_ngram"] \
        == rep.tokens - rep.rounds
    table = records.summaries_table([s])
    assert table.schema.equals(records.SUMMARY_SCHEMA) and table.num_rows == 1
    assert not list(tmp_path.iterdir())


def test_first_round_of_a_request_is_not_learned_by_the_cost_model() -> None:
    rule = AdaSparkRule()
    sim = Simulator(ENV)
    sim.run_request(rule, 0, 300, 200)
    assert rule.table is not None
    before = [k.measured for k in rule.table.classes]
    w = sim.world(1, 300, 10)
    from adaspark.decoding.round import RoundOutcome, RoundState
    committed = w.text[:300].tolist()
    rule.begin_request(committed)
    state = RoundState(committed, 0, 64, 4)
    assert rule.wants_block(state)
    plan = rule.plan(state, sim.block(w, 300, 4)[0])
    path, new = sim.verify(w, 300, plan.tree)
    rule.observe(plan, RoundOutcome.of(plan, path, new, 0.02, 0.01))
    assert [k.measured for k in rule.table.classes] == before
