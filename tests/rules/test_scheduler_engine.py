"""With the real tiny model in exact mode, AdaSpark decodes exactly what plain greedy decoding
does, token for token (issue 3; §3.5: every emitted token is the target's argmax on its verify
row), drafting for itself and with the truncated drafter. Two positions per block keep the cold
start's widest verifies small on this CPU."""

from __future__ import annotations

import pytest

from adaspark.decoding.drafter.draft_model import DraftModelDrafter
from adaspark.decoding.loop import generate
from adaspark.rules.adaspark.rule import AdaSparkRule
from adaspark.rules.base import make_rule


@pytest.mark.parametrize("drafter_key,arm,n_tokens", [("self", {}, 16),
                                                     ("truncated", {"offer_width1": True}, 24)])
def test_adaspark_equals_greedy_on_the_tiny_model(tiny_target, tiny_path, tiny_cut_path,
                                                  drafter_key, arm, n_tokens):
    t = tiny_target
    d = DraftModelDrafter(tiny_path if drafter_key == "self" else tiny_cut_path, 2048,
                          exact=True, top_k=8)
    try:
        p = t.tokenize("def fibonacci(n):\n    ")
        greedy = generate(t, p, n_tokens, make_rule("ar"))
        rule = AdaSparkRule(**arm)
        spec = generate(t, p, n_tokens, rule, d, 2)
        assert spec.tokens == greedy.tokens
        assert spec.summary["rounds"] == spec.rounds
        assert spec.summary["cold_start_rounds"] > 0
        assert rule.table is not None and max(rule.table.widths()) <= t.max_rows == 63
    finally:
        d.close()
