"""The embedded pair (Qwen2.5-Coder 1.5B target, 0.5B drafter) in exact mode: speculative decoding
equals plain greedy decoding token for token (32 tokens, 5 prompts, to keep CI short)."""

from __future__ import annotations

import pytest
from helpers import DRAFTER, TARGET, model

from adaspark.decoding.drafter.draft_model import DraftModelDrafter
from adaspark.decoding.engine import Target
from adaspark.decoding.loop import generate
from adaspark.rules.base import make_rule
from adaspark.serving import chat

PROMPTS = [
    "Write a Python function that returns the n-th Fibonacci number.",
    "Explain in two sentences what a hash map is.",
    "Translate to French: The weather is nice today.",
    "def quicksort(xs):",
    "List the first five prime numbers, separated by commas.",
]


@pytest.mark.embedded
def test_embedded_pair_equals_greedy():
    t = Target(model(TARGET), 2048, exact=True)
    d = DraftModelDrafter(model(DRAFTER), 2048, exact=True, target_vocab=t.token_texts())
    try:
        template = t.chat_template()
        assert template is not None
        accepted = 0
        for text in PROMPTS:
            rendered = chat.render(template, [{"role": "user", "content": text}])
            p = t.tokenize(rendered, add_special=t.add_bos, parse_special=True)
            greedy = generate(t, p, 32, make_rule("ar"))
            spec = generate(t, p, 32, make_rule("pinned", width=8), d, 4)
            assert spec.tokens == greedy.tokens, text
            accepted += spec.accepted
        assert accepted > 0
    finally:
        d.close()
        t.close()
