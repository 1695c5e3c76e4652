"""Sampling on the engine (tiny model, exact mode): with draws keyed by (seed, position), every
arm emits plain sampling's text for the same seed, whatever tree it verified, also after
AdaSpark's store has learned; a seeded request repeats exactly; the draws follow the sampled
distribution (not the argmax)."""

from __future__ import annotations

import json

import pytest

from adaspark.decoding.drafter.draft_model import DraftModelDrafter
from adaspark.decoding.loop import generate
from adaspark.decoding.sampling import SamplingParams
from adaspark.rules.adaspark.rule import AdaSparkRule
from adaspark.rules.base import make_rule

PROMPTS = ["Once upon a time", "The best way to learn a language is", "def add(a, b):"]
#: Seeds per drafter (the self-drafter's picks are mostly accepted, so fewer seeds show it).
N_SEEDS = {"truncated": 120, "itself": 30}
N_TOKENS = 10


@pytest.fixture(scope="module")
def drafters(tiny_path, tiny_cut_path):
    own = DraftModelDrafter(tiny_path, 2048, exact=True, top_k=8)
    cut = DraftModelDrafter(tiny_cut_path, 2048, exact=True, top_k=8)
    yield {"itself": own, "truncated": cut}
    own.close()
    cut.close()


@pytest.mark.parametrize("drafter", ["truncated", "itself"])
def test_every_arm_emits_plain_samplings_text_for_the_same_seed(tiny_target, drafters,
                                                                drafter) -> None:
    t, d = tiny_target, drafters[drafter]
    ada = AdaSparkRule()  # one store learning across every request, as a server's
    chain3 = make_rule("chain", positions=3)
    differs_from_greedy = accepted = 0
    for i in range(N_SEEDS[drafter]):
        prompt = t.tokenize(PROMPTS[i % len(PROMPTS)])
        s = SamplingParams(temperature=0.9, top_k=40, top_p=0.95, min_p=0.05, seed=i)
        plain = generate(t, prompt, N_TOKENS, make_rule("ar"), sampling=s).tokens
        for rule in (chain3, ada):
            got = generate(t, prompt, N_TOKENS, rule, d, 4, sampling=s)
            assert got.tokens == plain, (i, rule.name)
            accepted += got.accepted
        if i < 20:
            greedy = generate(t, prompt, N_TOKENS, make_rule("ar")).tokens
            differs_from_greedy += plain != greedy
    assert differs_from_greedy > 10  # sampling, not the argmax
    assert accepted > 0


def test_a_seeded_request_repeats_and_another_seed_differs(tiny_target) -> None:
    t = tiny_target
    prompt = t.tokenize(PROMPTS[0])
    s = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=3)
    one = generate(t, prompt, 24, make_rule("ar"), sampling=s).tokens
    assert generate(t, prompt, 24, make_rule("ar"), sampling=s).tokens == one
    others = {tuple(generate(t, prompt, 24, make_rule("ar"),
                             sampling=SamplingParams(temperature=1.0, top_k=0, top_p=1.0,
                                                     min_p=0.0, seed=k)).tokens)
              for k in range(4, 8)}
    assert tuple(one) not in others or len(others) > 1


def test_generate_samples_with_the_sampling_group_and_checks_against_plain_sampling() -> None:
    from helpers import run_cli

    args = ["generate", "arm=chain3", "target=tiny", "drafter=tiny-truncated", "exact=true",
            "max_tokens=24", "check_greedy=true", "json=true", "sampling.temperature=0.8",
            "sampling.seed=5"]
    runs = [run_cli(*args) for _ in range(2)]
    for done in runs:
        assert done.returncode == 0, done.stderr[-2000:]
    one, two = (json.loads(d.stdout.strip().splitlines()[-1]) for d in runs)
    assert one["greedy_match"] is True and one["sampling"]["seed"] == 5
    assert one["text"] == two["text"]
    bad = run_cli("generate", "arm=ar", "target=tiny", "sampling.top_p=0")
    assert bad.returncode == 2 and "sampling.top_p" in bad.stderr
