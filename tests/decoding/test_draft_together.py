"""A draft model serving several requests from one context (issue 37): a sequence per request,
the step's blocks drafted in one batched forward per position, on the tiny pair in fast mode (a
subprocess: the kernel mode is per process). Each request's block is the one its own drafter
gives alone (a batched row may move a logit a little on the CPU kernels, so a pick may differ
only where the lone drafter's top two are close), the sequences do not disturb each other, the
shared context is freed with its last user, and a shared step drafts once for its requests,
whose replies keep their plain decodes' text (near ties aside)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import TINY, TINY_CUT, model

from adaspark.decoding.drafter.base import Drafter
from adaspark.decoding.drafter.draft_model import DraftModelDrafter
from adaspark.decoding.engine import EngineError

HERE = Path(__file__).parent
#: a pick may differ from the lone drafter's only where the lone drafter's top two
#: probabilities are closer than this; a pick's probability agrees within PROB_TOL
CLOSE = 0.1
PROB_TOL = 0.05
NEAR_TIE = 0.5  # HARNESS's near-tie rule on the target's top-2 logit gap


@pytest.fixture(scope="module")
def probe() -> dict:
    env = {k: v for k, v in os.environ.items() if k != "GGML_CPU_TILED_MM"}  # fast kernels
    p = subprocess.run([sys.executable, str(HERE / "draft_together_probe.py"),
                        str(model(TINY)), str(model(TINY_CUT))],
                       capture_output=True, text=True, env=env, timeout=900)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


def _same_block(got: dict, want: dict) -> None:
    assert len(got["picks"]) == len(want["picks"])
    for i, (a, b) in enumerate(zip(got["picks"], want["picks"], strict=True)):
        if a != b:
            p1, p2 = want["top2"][i]
            assert p1 - p2 < CLOSE, (i, want["top2"][i])
            return  # the rows after a different pick follow another text
        assert abs(got["top2"][i][0] - want["top2"][i][0]) < PROB_TOL


def test_blocks_drafted_together_are_each_drafted_alone(probe) -> None:
    blocks = probe["blocks"]
    assert [b["round"] for b in blocks] == [0, 0, 0, 1, 1, 2]
    assert [len(b["together"]["picks"]) for b in blocks[:3]] == [4, 1, 3]
    for b in blocks:
        assert b["cached_ok"], b
        _same_block(b["together"], b["alone"])
    # one decode for every request's catch-up, then one a position past the first: the first
    # call drafts 4, 1 and 3 positions in 4 decodes (alone: 3 catch-ups and 5 steps)
    assert [b["decodes"] for b in blocks] == [4, 4, 4, 4, 4, 1]
    # each request of a call waited for its group's drafting
    assert len({b["together"]["draft_s"] for b in blocks[:3]}) == 1


def test_the_sequences_share_one_context_freed_with_its_last_user(probe) -> None:
    c = probe["context"]
    assert c["same_model"] and c["seq_ids"] == [0, 1, 2]
    assert c["open_after_two"] and not c["open_after_all"]


def test_a_shared_step_drafts_together_and_keeps_the_plain_text(probe) -> None:
    s = probe["step"]
    assert s["errors"] == []
    assert s["shared_draft_s"] and all(t > 0 for t in s["shared_draft_s"])
    assert s["accepted"] > 0
    for got, want, gaps in zip(s["replies"], s["plain"], s["plain_gaps"], strict=True):
        if got != want:
            k = next(j for j, (a, b) in enumerate(zip(got, want, strict=False)) if a != b)
            assert gaps[k] < NEAR_TIE, (k, gaps[k])


class _NotADraftModel(Drafter):
    def begin(self, prompt):
        pass

    def draft(self, committed, n_positions):
        raise AssertionError("not called")


def test_a_full_drafter_context_and_a_foreign_drafter_are_refused(tiny_cut_path) -> None:
    d = DraftModelDrafter(tiny_cut_path, 64, exact=True, top_k=4, n_seqs=2)
    seqs = d.sequences()
    try:
        with pytest.raises(EngineError, match="drafter context of 64 tokens is full"):
            DraftModelDrafter.draft_together([(seqs[0], [1, 2, 3], 2),
                                              (seqs[1], list(range(1, 70)), 4)])
        with pytest.raises(TypeError, match="draft-model drafters"):
            DraftModelDrafter.draft_together([(_NotADraftModel(), [1, 2], 1)])
    finally:
        for s in seqs:
            s.close()
