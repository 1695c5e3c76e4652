"""A sampled run (``sampling.temperature`` > 0): each reply gets its own seed, derived from the
run's and the reply's key and recorded in ``replies.parquet``; the run's fingerprint holds its
sampling, so a greedy run into the same directory is refused; with exact kernels our ``ar`` and
``chain3`` sample the same texts reply by reply (the keyed draws)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from adaspark.runs.launcher import run_arms
from adaspark.runs.rows import reply_seed
from adaspark.runs.run import compose_for_run
from adaspark.runs.settings import RunError, RunSettings
from adaspark.runs.store import ResultStore

pytestmark = pytest.mark.server

ARMS = ["ar", "chain3"]
BASE = ["target=tiny", "drafter=tiny-truncated", "run.testset=data/testset", "run.subset=smoke",
        "run.cap=12", "run.warmup=false", "run.exact=true", f"run_arms=[{','.join(ARMS)}]",
        "run.order=sequential"]
SAMPLED = ["sampling.temperature=0.9", "sampling.seed=4"]


def _run(args: list[str], out: Path) -> None:
    cfg = compose_for_run(args)
    run_arms(cfg, ARMS, out, RunSettings.from_config(cfg))


def test_a_sampled_run_records_its_seeds_and_never_mixes_with_a_greedy_one(tmp_path):
    out = tmp_path / "runs"
    _run([*BASE, *SAMPLED], out)
    rows = {a: ResultStore(out / a).rows() for a in ARMS}
    for r in rows["ar"]:
        key = f"{r['set']}.{r['conversation']}.{r['turn']}.{r['reply']}"
        assert r["seed"] == reply_seed(4, key) >= 0
    texts = {a: {(r["conversation"], r["turn"], r["reply"]): r["text"] for r in rows[a]}
             for a in ARMS}
    assert texts["ar"] == texts["chain3"]  # exact kernels: the keyed draws, whatever the tree
    meta = json.loads((out / "ar" / "run.json").read_text())
    assert meta["fingerprint"]["sampling"]["temperature"] == 0.9
    with pytest.raises(RunError, match="sampling"):
        _run(BASE, out)  # greedy into the sampled run's directory
