"""Known answers for the plain-decode parity analysis (adaspark.analysis.parity)."""

from __future__ import annotations

import math

import pytest

from adaspark.analysis.bootstrap import StatsInputError
from adaspark.analysis.parity import (
    PairedReply,
    band_label,
    parity_report,
    ratio_of,
    rotation,
)


def pair(prompt: str, rep: int, a: float | None, b: float | None, *, tokens: int = 100,
         group: str = "g", completion: int = 20) -> PairedReply:
    return PairedReply(prompt=prompt, group=group, rep=rep, prompt_tokens=tokens,
                       completion_tokens=completion, speed_a=a, speed_b=b)


def test_rotation_puts_each_arm_first_once_per_round():
    arms = ["ar", "llamacpp-ar", "x"]
    firsts = [rotation(arms, i)[0] for i in range(6)]
    assert firsts == ["ar", "llamacpp-ar", "x", "ar", "llamacpp-ar", "x"]
    assert rotation(arms, 1) == ["llamacpp-ar", "x", "ar"]
    with pytest.raises(StatsInputError):
        rotation([], 0)


def test_a_constant_ratio_is_the_estimate_and_the_whole_interval():
    pairs = [pair("p", r, 27.0, 30.0) for r in range(4)]
    r = ratio_of(pairs, "p")
    assert r.ratio == pytest.approx(0.9)
    assert (r.lo, r.hi) == pytest.approx((0.9, 0.9))
    assert (r.n_pairs, r.n_prompts, r.n_dropped) == (4, 1, 0)


def test_single_delta_pairs_are_dropped_and_counted():
    pairs = [pair("p", 0, 20.0, 10.0), pair("p", 1, None, 10.0), pair("p", 2, 20.0, None)]
    r = ratio_of(pairs, "p")
    assert r.ratio == pytest.approx(2.0)
    assert (r.n_pairs, r.n_dropped) == (1, 2)
    with pytest.raises(StatsInputError, match="no pair"):
        ratio_of(pairs[1:], "p")


def test_the_overall_ratio_pools_pairs_and_the_interval_spans_the_prompts():
    # prompt q is twice as slow on A as p is fast: geometric mean of 2 and 1/2 over pairs is 1
    pairs = [pair("p", r, 20.0, 10.0) for r in range(2)] + [
        pair("q", r, 5.0, 10.0, tokens=3000) for r in range(2)]
    rep = parity_report(pairs)
    assert rep["overall"]["ratio"] == pytest.approx(1.0)
    assert rep["overall"]["lo"] == pytest.approx(0.5)
    assert rep["overall"]["hi"] == pytest.approx(2.0)
    assert [r["label"] for r in rep["per_prompt"]] == ["p", "q"]  # ordered by context
    assert rep["worst_prompt"]["label"] == "q"
    bands = {r["label"]: r["ratio"] for r in rep["per_band"]}
    assert bands == pytest.approx({"under 512": 2.0, "2,048 and over": 0.5})


def test_band_labels_and_the_context_of_a_reply():
    assert pair("p", 0, 1.0, 1.0, tokens=500, completion=30).context == 515
    assert band_label(511, (512, 2048)) == "under 512"
    assert band_label(512, (512, 2048)) == "512-2,047"
    assert band_label(2048, (512, 2048)) == "2,048 and over"
    with pytest.raises(StatsInputError, match="ascending"):
        band_label(10, (2048, 512))


def test_the_log_ratio_is_of_a_over_b():
    assert pair("p", 0, 30.0, 20.0).log_ratio == pytest.approx(math.log(1.5))
    assert pair("p", 0, 0.0, 20.0).log_ratio is None
