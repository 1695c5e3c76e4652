"""A turn's KV does not depend on the process's history (issue 10, item 5): in fast mode, a second
turn decoded by the process that made the first and by a fresh process (a resumed run's new
server) gives identical logits, drafts and text."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import DRAFTER, TARGET, TINY, TINY_CUT, model

from adaspark.decoding.engine import PREFILL_CHUNK_FAST, prefill_chunks, reusable_prefix

HERE = Path(__file__).parent


def test_prefill_chunks_start_at_multiples():
    assert prefill_chunks(0, 150, 64) == [(0, 64), (64, 128), (128, 150)]
    assert prefill_chunks(128, 130, 64) == [(128, 130)]
    assert prefill_chunks(64, 64, 64) == []
    with pytest.raises(ValueError, match="chunk boundary"):
        prefill_chunks(10, 100, 64)


def test_reuse_stops_at_the_last_whole_chunk_an_earlier_prefill_wrote():
    # common prefix 300, earlier prefill wrote 4 whole chunks (256 cells): keep 256
    assert reusable_prefix(300, 256, 64) == 256
    # the common prefix ends inside a chunk: keep the whole chunks before it
    assert reusable_prefix(200, 256, 64) == 192
    # nothing canonical yet (a fresh engine, or after a reset)
    assert reusable_prefix(500, 0, 64) == 0


def _probe(target: Path, drafter: Path, n: int) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "GGML_CPU_TILED_MM"}  # fast kernels
    p = subprocess.run([sys.executable, str(HERE / "fast_resume_probe.py"), str(target),
                        str(drafter), str(n)], capture_output=True, text=True, env=env,
                       timeout=900)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_second_turn_is_the_same_in_a_fresh_process_tiny():
    out = _probe(model(TINY), model(TINY_CUT), 48)
    # the continuing engine kept whole chunks of turn one; the fresh one had nothing to keep
    assert out["reused"] >= PREFILL_CHUNK_FAST and out["fresh_reused"] == 0, out
    assert out["logits_identical"], out
    assert out["block_identical"], out
    assert out["tokens_identical"], out


@pytest.mark.embedded
def test_second_turn_is_the_same_in_a_fresh_process_embedded():
    out = _probe(model(TARGET), model(DRAFTER), 48)
    assert out["reused"] >= PREFILL_CHUNK_FAST and out["fresh_reused"] == 0, out
    assert out["logits_identical"], out
    assert out["block_identical"], out
    assert out["tokens_identical"], out


class _Stop(Exception):
    pass


def _stop_after(n: int):
    seen = [0]

    def on_reply(row) -> None:
        seen[0] += 1
        if seen[0] >= n:
            raise _Stop

    return on_reply


@pytest.mark.embedded
@pytest.mark.server
def test_a_resumed_run_gives_the_same_text_in_fast_mode_embedded(tmp_path):
    """Through the runner and our server: the first conversation of `short` (two turns), run
    straight through, and run with the process stopped after the first reply and resumed."""
    from adaspark.runs.run import compose_for_run, run_arm
    from adaspark.runs.settings import RunSettings
    from adaspark.runs.store import ResultStore
    from adaspark.testset import load_checked_sets

    cfg = compose_for_run(["run.testset=data/testset", "run.subset=short", "run.cap=64",
                           "run.exact=false", "run_arms=[chain3]"])
    settings = RunSettings.from_config(cfg)
    sets = load_checked_sets(HERE.parents[1] / "data" / "testset")
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    with pytest.raises(_Stop):
        run_arm(cfg, "chain3", straight, settings, sets=sets, on_reply=_stop_after(2))
    with pytest.raises(_Stop):
        run_arm(cfg, "chain3", resumed, settings, sets=sets, on_reply=_stop_after(1))
    with pytest.raises(_Stop):
        run_arm(cfg, "chain3", resumed, settings, sets=sets, on_reply=_stop_after(1))
    a, b = ResultStore(straight).rows()[:2], ResultStore(resumed).rows()[:2]
    assert [r["turn"] for r in a] == [r["turn"] for r in b] == [0, 1]
    assert json.loads((resumed / "run.json").read_text())["resumes"][-1]["stored_replies"] == 1
    assert (a[1]["after_resume"], b[1]["after_resume"]) == (0, 1)
    assert a[1]["text"] == b[1]["text"]
    assert a[1]["completion_tokens"] == b[1]["completion_tokens"]
