"""A second turn in fast mode, decoded by a process that made the first turn and by a fresh one.

    python tests/decoding/fast_resume_probe.py TARGET.gguf DRAFTER.gguf N_TOKENS

Run by ``tests/decoding/test_fast_resume.py`` in a fast-mode subprocess (the kernel mode is per
process). The continuing engine keeps whatever its prefill may reuse of the first turn, whose reply
cells verify batches wrote; the fresh engine (a new context, as a resumed run's new server has)
prefills the whole second-turn prompt. Prints one JSON object: whether the anchor's logits after the
second prefill, the drafter's first block and the second reply's tokens are identical.
"""

from __future__ import annotations

import json
import sys

import numpy as np

from adaspark.decoding.drafter.draft_model import DraftModelDrafter
from adaspark.decoding.engine import Target
from adaspark.decoding.loop import generate
from adaspark.decoding.tree import Tree
from adaspark.rules.base import make_rule
from adaspark.serving import chat

#: A system message long enough that the first turn's prompt spans whole prefill chunks, so the
#: continuing engine has cells of turn one it may keep.
SYSTEM = ("You are a careful Python programmer. Answer with code first and a short explanation "
          "after it. Use type hints, docstrings and descriptive names; prefer the standard "
          "library; never use global state; handle edge cases such as negative numbers, zero "
          "and one explicitly; keep functions small; mention the time complexity of what you "
          "write; do not repeat the question; and keep every answer under two hundred words. "
          "When you change earlier code, show the whole new version, say what changed and why "
          "in one sentence, and keep the names the user chose unless they are misleading. If a "
          "request is ambiguous, state the reading you chose before the code. Tests, when you "
          "write them, use pytest and plain asserts, one behaviour per test, with the expected "
          "values computed by hand in a comment beside each assertion.")
TURNS = ("Write a Python function that checks whether a number is prime, with a docstring.",
         "Now make it faster for large inputs and explain why in one sentence.")


def tokens(t: Target, messages: list[dict[str, str]]) -> list[int]:
    template = t.chat_template()
    assert template is not None
    return t.tokenize(chat.render(template, messages, add_generation_prompt=True),
                      add_special=t.add_bos, parse_special=True)


def second_turn(t: Target, d: DraftModelDrafter, prompt: list[int], n: int) -> dict:
    reused = t.prefill(prompt).reused
    res = t.verify(Tree((prompt[-1],), (-1,)), want_logits=True)
    t.discard()
    d.begin(prompt)
    block = d.draft(prompt, 4)
    gen = generate(t, prompt, n, make_rule("chain", positions=3), d, 4)
    return {"logits": res.logits, "block": block.probs.copy(), "tokens": gen.tokens,
            "reused": reused}


def main() -> None:
    tpath, dpath, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    t1 = Target(tpath, 4096, exact=False)
    d1 = DraftModelDrafter(dpath, 4096, exact=False, target_vocab=t1.token_texts())
    first = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": TURNS[0]}]
    p1 = tokens(t1, first)
    g1 = generate(t1, p1, n, make_rule("chain", positions=3), d1, 4)
    reply = t1.detokenize([x for x in g1.tokens if not t1.is_eog(x)])
    p2 = tokens(t1, [*first, {"role": "assistant", "content": reply},
                     {"role": "user", "content": TURNS[1]}])
    going_on = second_turn(t1, d1, p2, n)
    t2 = Target(tpath, 4096, exact=False)
    d2 = DraftModelDrafter(dpath, 4096, exact=False, target_vocab=t2.token_texts())
    fresh = second_turn(t2, d2, p2, n)
    print(json.dumps({
        "first_prompt_tokens": len(p1),
        "prompt_tokens": len(p2),
        "reused": going_on["reused"],
        "fresh_reused": fresh["reused"],
        "logits_identical": bool(np.array_equal(going_on["logits"], fresh["logits"])),
        "logits_max_abs_diff": float(np.abs(going_on["logits"] - fresh["logits"]).max()),
        "block_identical": bool(np.array_equal(going_on["block"], fresh["block"])),
        "tokens_identical": going_on["tokens"] == fresh["tokens"],
        "first_difference": next((i for i, (a, b) in enumerate(
            zip(going_on["tokens"], fresh["tokens"], strict=False)) if a != b), None),
    }))


if __name__ == "__main__":
    main()
