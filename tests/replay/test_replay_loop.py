"""The replay loop on synthetic labels with known answers (issue 14): labels made from the
simulator's worlds, so a replay under the simulator's own costs must make the simulator's rounds;
AdaSpark in replay learns a step-shaped device; same labels, model and seed give the same records;
a tree past the labels asks for more instead of guessing."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from adaspark.decoding.tree import Tree, accepted_path
from adaspark.replay.device import device_from_mapping
from adaspark.replay.labels import LabelsTooShort, PromptLabels, read_labels, write_labels
from adaspark.replay.loop import accepted_rows, replay_reply
from adaspark.replay.prices import DevicePrices
from adaspark.rules.adaspark.rule import AdaSparkRule
from adaspark.rules.adaspark.simulator import (
    DrafterProcess,
    Environment,
    OneSidedNoise,
    Simulator,
    StepCost,
    TextProcess,
)
from adaspark.rules.base import make_rule

STEP = StepCost(tops=(12, 64), levels=(0.030, 0.048))
ENV = Environment(cost=STEP, drafter=DrafterProcess(B=8, K=8, alpha=1.5, depth_decay=0.05),
                  fixed=0.008, seed=4, text=TextProcess(copy_start=0.0),
                  noise=OneSidedNoise(p_clean=1.0))
#: The same step as a device model file (no host term: the simulator's D is all drafter).
STEP_DEVICE = {"name": "sim-step", "label": "synthetic",
               "verify": {"rows": [12, 64], "alpha_ms": [30.0, 48.0], "beta_ms_per_1k": [0, 0]},
               "draft_ms": 8.0, "host_ms": 0.0}
PROMPT, TOKENS = 500, 400


class LongerWorlds(Simulator):
    """The simulator with 16 more tokens of text than a request's cap: the last rounds' trees
    stay inside the text (the plain simulator clamps them at its end; labels never do)."""

    def world(self, request: int, prompt_len: int, max_tokens: int):  # type: ignore[override]
        return super().world(request, prompt_len, max_tokens + 16)


def sim_labels(sim: Simulator, request: int, prompt_len: int, tokens: int) -> PromptLabels:
    """The labels of one simulated request of ``tokens`` tokens (the simulator's own world for
    it): the text's next tokens and the simulator's full block at every anchor the text holds
    one for."""
    w = sim.world(request, prompt_len, tokens)
    B = sim.env.drafter.B
    n = len(w.text) - B - prompt_len + 1
    pos = range(prompt_len - 1, prompt_len - 1 + n)
    blocks = [sim.block(w, p + 1, B)[0] for p in pos]
    return PromptLabels(
        prompt=w.text[:prompt_len].tolist(),
        next=np.asarray([w.text[p + 1] for p in pos], dtype=np.int64),
        next_eog=np.zeros(n, dtype=bool),
        blocks=np.stack([b.tokens for b in blocks]), probs=np.stack([b.probs for b in blocks]),
        confidence=np.stack([b.confidence for b in blocks]))


def replay(rule, labels: list[PromptLabels], pricer, tokens: int = TOKENS):
    return [replay_reply(rule, lab, tokens, pricer, seq=i, request_id=None,
                         block_positions=ENV.drafter.B, max_rows=64, n_ctx=1 << 20)
            for i, lab in enumerate(labels)]


@pytest.fixture(scope="module")
def labels() -> list[PromptLabels]:
    sim = LongerWorlds(ENV)
    return [sim_labels(sim, r, PROMPT, TOKENS) for r in range(8)]


def test_a_replay_under_the_simulators_costs_makes_the_simulators_rounds(labels) -> None:
    """Same texts, same blocks, same prices: every round's width and committed tokens equal."""
    sim_reps = LongerWorlds(ENV).run(AdaSparkRule(ngram=False), range(8), [PROMPT], TOKENS,
                                  keep_rounds=True)
    reps = replay(AdaSparkRule(ngram=False), labels, DevicePrices(device_from_mapping(
        STEP_DEVICE)))
    for s, r in zip(sim_reps, reps, strict=True):
        assert [x.rows for x in r.rounds] == s.widths
        assert [x.committed for x in r.rounds] == s.round_tokens


def test_adaspark_in_replay_learns_the_step(labels) -> None:
    """Flat to 12 rows, then 1.6x: late rounds verify 11 or 12 rows, and beat pinned 8."""
    dev = device_from_mapping(STEP_DEVICE)
    reps = replay(AdaSparkRule(ngram=False), labels, DevicePrices(dev))
    late = Counter(x.rows for r in reps[4:] for x in r.rounds)
    top, count = late.most_common(1)[0]
    assert top in (11, 12) and count > 0.9 * sum(late.values()), late
    pinned = replay(AdaSparkRule(width=8, ngram=False), labels, DevicePrices(dev))

    def rate(rs):
        return sum(len(r.tokens) for r in rs) / sum(r.decode_s for r in rs)

    assert rate(reps[4:]) > 1.03 * rate(pinned[4:])


def test_same_labels_model_and_seed_give_identical_records(labels) -> None:
    noisy = device_from_mapping(STEP_DEVICE | {"noise": {"cv": 0.2, "seed": 7}})
    a = replay(AdaSparkRule(), labels[:3], DevicePrices(noisy), 120)
    b = replay(AdaSparkRule(), labels[:3], DevicePrices(noisy), 120)
    assert [r.rounds for r in a] == [r.rounds for r in b]
    other = device_from_mapping(STEP_DEVICE | {"noise": {"cv": 0.2, "seed": 8}})
    c = replay(AdaSparkRule(), labels[:3], DevicePrices(other), 120)
    assert [x.verify_s for x in c[0].rounds] != [x.verify_s for x in a[0].rounds]


def test_a_pinned_widths_accepted_path_does_not_depend_on_the_device(labels) -> None:
    """The accepted lengths of a pinned width come from the labels alone."""
    flat = device_from_mapping(STEP_DEVICE | {"verify": {"rows": [64], "alpha_ms": [10.0],
                                                          "beta_ms_per_1k": [1.0]}})
    a = replay(make_rule("pinned", width=16), labels[:2], DevicePrices(flat), 100)
    b = replay(make_rule("pinned", width=16), labels[:2], DevicePrices(
        device_from_mapping(STEP_DEVICE)), 100)
    assert [[x.accepted for x in r.rounds] for r in a] == [[x.accepted for x in r.rounds]
                                                            for r in b]
    assert sum(x.accepted for r in a for x in r.rounds) > 0


def test_the_accepted_path_is_the_engines_walk_with_the_labels_as_argmax() -> None:
    # anchor 5 at position 9; rows: 1=a(7) 2=b(8) under the anchor, 3=c(9) under 1, 4=d(3) under 3
    tree = Tree(tokens=(5, 7, 8, 9, 3), parents=(-1, 0, 0, 1, 3))
    lab = PromptLabels(prompt=list(range(10)), next=np.asarray([7, 9, 4, 1]),
                       next_eog=np.zeros(4, dtype=bool), blocks=np.zeros((4, 0, 0), np.int64),
                       probs=np.zeros((4, 0, 0)), confidence=np.zeros((4, 0)))
    assert accepted_rows(tree, lab, 9) == [0, 1, 3]
    argmax = [7, 9, 0, 4, 0]  # what the engine would read: the label at each text row
    assert accepted_rows(tree, lab, 9) == accepted_path(tree, argmax)
    lab.next[1] = 2  # one label altered: the walk stops one row earlier
    assert accepted_rows(tree, lab, 9) == [0, 1]


def test_a_tree_past_the_labels_asks_for_more_labels(labels) -> None:
    short = labels[0]
    cut = PromptLabels(short.prompt, short.next[:20], short.next_eog[:20], short.blocks[:20],
                       short.probs[:20], short.confidence[:20])
    with pytest.raises(LabelsTooShort) as e:
        replay(AdaSparkRule(ngram=False), [cut], DevicePrices(device_from_mapping(STEP_DEVICE)),
               40)
    assert e.value.key == cut.key and e.value.position >= cut.end


def test_labels_survive_their_parquet_file(tmp_path, labels) -> None:
    lab = labels[1]
    back = read_labels(write_labels(tmp_path / "x.parquet", lab))
    assert back.prompt == lab.prompt and back.key == lab.key
    for f in ("next", "next_eog", "blocks", "probs", "confidence"):
        assert np.array_equal(getattr(back, f), getattr(lab, f)), f


def test_replay_refuses_what_it_cannot_replay_with_the_fix(tmp_path) -> None:
    from adaspark.config import ConfigError
    from adaspark.replay.command import run_replay

    base = ["target=tiny", "drafter=tiny-truncated", f"run_dir={tmp_path}"]
    with pytest.raises(ConfigError, match="replies_of"):
        run_replay(["arm=adaspark", *base, "device=recorded", "replies_of=ar"])
    with pytest.raises(ConfigError, match=r"run\.round_log=true"):
        run_replay(["arm=adaspark", *base, "device=step-at-8"])
    with pytest.raises(ConfigError, match=r"llama\.cpp's own loop"):
        run_replay(["arm=llamacpp-chain", *base])
    with pytest.raises(ConfigError, match="run_dir"):
        run_replay(["arm=adaspark", "target=tiny"])
