"""A draft model serving several requests from one context, in fast mode (the kernel mode is
per process).

    python tests/decoding/draft_together_probe.py TARGET.gguf DRAFTER.gguf

Run by ``tests/decoding/test_draft_together.py`` in a fast-mode subprocess. Prints one JSON
object: each block drafted together beside the same block drafted alone (picks and their top-2
probabilities), a shared step's replies beside their plain decodes (with the plain decode's
top-2 gaps), the shared steps' drafting times, and whether the context outlived its users.
"""

from __future__ import annotations

import json
import sys

from adaspark.decoding.drafter.draft_model import DraftModelDrafter
from adaspark.decoding.engine import Target
from adaspark.decoding.loop import RequestSession, generate
from adaspark.decoding.slots import Batch, SlotTarget
from adaspark.rules.base import make_rule

PROMPTS = ["Once upon a time", "def add(a, b):", "The capital of France is Paris. The capital"]
#: positions drafted per request in one call: requests in one step ask for different depths
POSITIONS = [4, 1, 3]
GENERATED = 6
REPLY = 24


def block_json(b) -> dict:
    return {"picks": [int(t) for t in b.tokens[:, 0]],
            "top2": [[float(p) for p in row[:2]] for row in b.probs], "draft_s": b.draft_s}


def alone(path: str, committed: list[int], prompt_len: int, n: int) -> dict:
    d = DraftModelDrafter(path, 1024, exact=False, top_k=8)
    try:
        d.begin(committed[:prompt_len])
        return block_json(d.draft(committed, n))
    finally:
        d.close()


def pairs(tpath: str, dpath: str, plain: Target) -> tuple[list[dict], dict]:
    """Blocks drafted together and alone, over three rounds: every request (its catch-up on
    the tokens committed since its prompt), two of them (one moved on, one rewound past its
    drafted rows), then the one left out, alone."""
    prompts = [plain.tokenize(p) for p in PROMPTS]
    texts = [p + generate(plain, p, GENERATED, make_rule("ar")).tokens for p in prompts]
    plens = [len(p) for p in prompts]
    shared = DraftModelDrafter(dpath, 2048, exact=False, top_k=8, n_seqs=3)
    seqs = shared.sequences()
    out = []
    for d, t, n in zip(seqs, texts, plens, strict=True):
        d.begin(t[:n])
    rounds = [[(0, texts[0][: plens[0] + 3], POSITIONS[0]),
               (1, texts[1][: plens[1] + 3], POSITIONS[1]),
               (2, texts[2][: plens[2] + 3], POSITIONS[2])],
              [(0, texts[0], 4), (2, texts[2][: plens[2] + 1], 2)],
              [(1, texts[1][: plens[1] + 3], 1)]]
    for r, asks in enumerate(rounds):
        before = shared.model.n_decodes
        got = DraftModelDrafter.draft_together([(seqs[k], c, n) for k, c, n in asks])
        decodes = shared.model.n_decodes - before
        for (k, c, n), b in zip(asks, got, strict=True):
            out.append({"round": r, "seq": k, "decodes": decodes, "together": block_json(b),
                        "alone": alone(dpath, c, plens[k], n),
                        "cached_ok": seqs[k].cached[: len(c)] == c})
    context = {"same_model": all(d.model is shared.model for d in seqs),
               "seq_ids": [d.seq for d in seqs]}
    for d in seqs[:2]:
        d.close()
    context["open_after_two"] = shared.model.ctx is not None
    seqs[2].close()
    context["open_after_all"] = shared.model.ctx is not None
    return out, context


def shared_step(tpath: str, dpath: str, plain: Target) -> dict:
    """Three chain3 requests on fast-mode slots with one shared draft-model context."""
    target = SlotTarget(tpath, 4096, exact=False, n_slots=3)
    drafter = DraftModelDrafter(dpath, 4096, exact=False, top_k=8, n_seqs=3)
    seqs = drafter.sequences()
    try:
        prompts = [target.tokenize(p) for p in PROMPTS]
        want = [generate(plain, p, REPLY, make_rule("ar"), want_gaps=True) for p in prompts]
        batch = Batch(target, seqs, 4)
        sessions = [RequestSession(make_rule("chain", positions=3), p, f"r{i}")
                    for i, p in enumerate(prompts)]
        for s in sessions:
            batch.admit(s, REPLY)
        errors = []
        while batch.active:
            errors += [a.error for a in batch.step() if a.error is not None]
        return {"errors": errors,
                "replies": [s.tokens for s in sessions],
                "plain": [w.tokens for w in want], "plain_gaps": [w.gaps for w in want],
                "accepted": sum(s.accepted for s in sessions),
                "shared_draft_s": [s.draft_s for s in batch.steps if len(s.slots) == 3]}
    finally:
        for d in seqs:
            d.close()
        target.close()


def main() -> None:
    tpath, dpath = sys.argv[1], sys.argv[2]
    plain = Target(tpath, 2048, exact=False)
    blocks, context = pairs(tpath, dpath, plain)
    print(json.dumps({"blocks": blocks, "context": context,
                      "step": shared_step(tpath, dpath, plain)}))


if __name__ == "__main__":
    main()
