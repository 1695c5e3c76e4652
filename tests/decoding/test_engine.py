"""The engine on the real tiny model in exact mode (§2.2, §3.5; HARNESS facts)."""

from __future__ import annotations

from itertools import pairwise

import numpy as np
import pytest

from adaspark.decoding.candidates import from_block
from adaspark.decoding.drafter.draft_model import DraftModelDrafter, check_same_vocab
from adaspark.decoding.engine import EngineError, Model, Target
from adaspark.decoding.loop import generate
from adaspark.decoding.round import RoundOutcome, RoundPlan, RoundState, WidthRule
from adaspark.decoding.tree import (
    TreeError,
    best_first_order,
    chain_tree,
    make_tree,
    path_to,
    prefix_tree,
)
from adaspark.rules.base import make_rule

PROMPTS = [
    "The history of the printing press begins",
    "def fibonacci(n):\n    ",
    "List three facts about the moon:\n1.",
]


def _prompt(t: Target, text: str) -> list[int]:
    return t.tokenize(text)


def _random_tree(rng: np.random.Generator, n: int, n_branches: int) -> tuple[list[int], list[int]]:
    """A tree of ``n`` rows made of a few long branches (few leaves: few chain verifies)."""
    parents = [-1]
    tips = [0]
    for i in range(1, n):
        if len(tips) < n_branches and rng.random() < 0.3:
            parent = int(rng.integers(0, i))
            tips.append(i)
        else:
            k = int(rng.integers(0, len(tips)))
            parent = tips[k]
            tips[k] = i
        parents.append(parent)
    tokens = [int(x) for x in rng.integers(200, 20000, size=n)]
    return tokens, parents


def _assert_rows_equal_chains(t: Target, tokens: list[int], parents: list[int]) -> None:
    tree = make_tree([t.committed[-1], *tokens[1:]], parents, max_rows=t.max_rows)
    res = t.verify(tree, want_logits=True)
    t.discard()
    done: set[int] = set()
    for leaf in tree.leaves():
        rows = path_to(tree.parents, leaf)
        chain = chain_tree(tree.tokens[0], [tree.tokens[r] for r in rows[1:]])
        cres = t.verify(chain, want_logits=True)
        t.discard()
        for k, r in enumerate(rows):
            if r not in done:
                assert np.array_equal(res.logits[r], cres.logits[k]), (
                    f"row {r} of a {tree.n_rows}-row tree differs from its chain row"
                )
                done.add(r)
    assert done == set(range(tree.n_rows))


def test_tree_rows_equal_chain_rows_bit_for_bit(tiny_target):
    t = tiny_target
    t.reset()
    t.prefill(_prompt(t, PROMPTS[0]))
    rng = np.random.default_rng(0)
    for n in range(2, 64):
        tokens, parents = _random_tree(rng, n, n_branches=3)
        _assert_rows_equal_chains(t, tokens, parents)


def test_drafter_shaped_trees_equal_chains(tiny_target, tiny_cut_path):
    """Wide trees of real drafter candidates (many leaves, up to 62 sequences)."""
    t = tiny_target
    t.reset()
    prompt = _prompt(t, PROMPTS[1])
    t.prefill(prompt)
    d = DraftModelDrafter(tiny_cut_path, 2048, exact=True, top_k=8)
    try:
        block = d.draft(t.committed, 8)
    finally:
        d.close()
    cands = from_block(block)
    order, _ = best_first_order(cands.parent, cands.head_q)
    for n in (9, 33, 63):
        tree, _ = prefix_tree(t.committed[-1], cands.tokens, cands.parent, order, n)
        _assert_rows_equal_chains(t, list(tree.tokens), list(tree.parents))


@pytest.mark.parametrize("arm_rule", [("chain", {"positions": 3}), ("pinned", {"width": 8}),
                                      ("pinned", {"width": 16}), ("chain", {})])
def test_self_drafting_equals_greedy(tiny_target, tiny_path, arm_rule):
    t = tiny_target
    d = DraftModelDrafter(tiny_path, 2048, exact=True, top_k=8)
    try:
        for text in PROMPTS:
            p = _prompt(t, text)
            greedy = generate(t, p, 48, make_rule("ar"))
            spec = generate(t, p, 48, make_rule(arm_rule[0], **arm_rule[1]), d, 4)
            assert spec.tokens == greedy.tokens
            # drafting for itself, every pick is the target's own argmax
            if arm_rule[0] == "chain" and spec.stop == "length":
                assert spec.accepted >= spec.rounds * 2
    finally:
        d.close()


def test_truncated_drafter_equals_greedy(tiny_target, tiny_cut_path):
    t = tiny_target
    d = DraftModelDrafter(tiny_cut_path, 2048, exact=True, top_k=8)
    try:
        rejected = 0
        for text in PROMPTS:
            p = _prompt(t, text)
            greedy = generate(t, p, 64, make_rule("ar"))
            for rule in (make_rule("chain", positions=3), make_rule("pinned", width=12)):
                spec = generate(t, p, 64, rule, d, 4)
                assert spec.tokens == greedy.tokens
                rejected += spec.drafted - spec.accepted
        assert rejected > 50, "the weak drafter should be rejected often"
    finally:
        d.close()


def test_state_after_500_mixed_rounds(tiny_path, tiny_cut_path):
    """Sequence 0 spans exactly the committed positions, no other sequence holds cells, and the
    next-token logits equal those of a fresh prefill of the committed tokens."""
    t = Target(tiny_path, 4096, exact=True)
    d = DraftModelDrafter(tiny_cut_path, 4096, exact=True, top_k=8)
    try:
        t.prefill(_prompt(t, PROMPTS[2]))
        rules = [make_rule("pinned", width=w) for w in (1, 2, 5, 8, 17)]
        n_acc = n_rej = 0
        for i in range(500):
            rule = rules[i % len(rules)]
            state = RoundState(t.committed, i, t.max_rows, 4)
            block = d.draft(t.committed, 4)
            plan = rule.plan(state, block)
            res = t.verify(plan.tree)
            path = t.commit(res).path
            n_acc += len(path) - 1
            n_rej += plan.tree.n_rows - len(path)
        assert n_acc > 100 and n_rej > 100
        t.flush()
        L = len(t.committed)
        assert t.seq_pos_range(0) == (0, L - 2)
        for s in range(1, 64):
            assert t.seq_pos_range(s)[1] == -1, f"sequence {s} still holds cells"
        res = t.verify(chain_tree(t.committed[-1], []), want_logits=True)
        t.discard()
        fresh = Target(tiny_path, 4096, exact=True)
        try:
            fresh.prefill(list(t.committed))
            ref = fresh.verify(chain_tree(t.committed[-1], []), want_logits=True)
            fresh.discard()
        finally:
            fresh.close()
        assert np.array_equal(res.logits, ref.logits)
    finally:
        d.close()
        t.close()


def test_prefill_returns_the_whole_chunks_it_kept(tiny_target, tiny_path):
    """A second prompt sharing a prefix with the first reuses exactly the whole prefill chunks
    of the shared part that the first prefill wrote; a fresh or reset Target reuses nothing; the
    kept cells are the right ones (the anchor's logits equal a fresh prefill's)."""
    t = tiny_target
    c = t.prefill_chunk  # 63 in exact mode
    base = t.tokenize(" ".join(PROMPTS * 30))
    assert len(base) > 4 * c
    first = base[: 3 * c + 10]  # the prefill writes 3c + 9 cells: three whole chunks
    t.reset()
    p = t.prefill(first)
    assert (p.reused, p.decoded) == (0, len(first) - 1)
    # the same prompt and more: the common prefix (3c + 9) stops at the third chunk's end
    longer = first + t.tokenize(" and more", add_special=False)
    p = t.prefill(longer)
    assert (p.reused, p.decoded) == (3 * c, len(longer) - 1 - 3 * c)
    # a prompt that leaves the first after 2c + 5 tokens keeps two whole chunks
    tail = t.tokenize(" Something else entirely, about whales.", add_special=False)
    second = first[: 2 * c + 5] + tail
    assert tail[0] != first[2 * c + 5]
    p = t.prefill(second)
    assert (p.reused, p.decoded) == (2 * c, len(second) - 1 - 2 * c)
    assert t.seq_pos_range(0) == (0, len(second) - 2)
    res = t.verify(chain_tree(second[-1], []), want_logits=True)
    t.discard()
    fresh = Target(tiny_path, 2048, exact=True)
    try:
        p = fresh.prefill(second)
        assert (p.reused, p.decoded) == (0, len(second) - 1)
        ref = fresh.verify(chain_tree(second[-1], []), want_logits=True)
        fresh.discard()
    finally:
        fresh.close()
    assert np.array_equal(res.logits, ref.logits)
    t.reset()
    assert t.prefill(second).reused == 0


class _Recording(WidthRule):
    """A real width rule that keeps what the loop tells it after each round."""

    name = "recording"

    def __init__(self, inner: WidthRule) -> None:
        self.inner = inner
        self.outcomes: list[RoundOutcome] = []

    def plan(self, state: RoundState, block) -> RoundPlan:
        return self.inner.plan(state, block)

    def observe(self, plan: RoundPlan, outcome: RoundOutcome) -> None:
        self.outcomes.append(outcome)


def test_commit_returns_the_path_and_tokens_the_loop_emits(tiny_target, tiny_cut_path):
    t = tiny_target
    d = DraftModelDrafter(tiny_cut_path, 2048, exact=True, top_k=8)
    try:
        prompt = _prompt(t, PROMPTS[1])
        t.prefill(prompt)
        d.begin(prompt)
        rule = make_rule("pinned", width=8)
        commits = []
        for i in range(12):
            plan = rule.plan(RoundState(t.committed, i, t.max_rows, 4), d.draft(t.committed, 4))
            tree = plan.tree
            res = t.verify(tree)
            before = list(t.committed)
            done = t.commit(res)
            path = done.path
            assert path[0] == 0
            # each accepted row is a child of the one before whose token is that row's argmax
            for prev, row in pairwise(path):
                assert tree.parents[row] == prev and tree.tokens[row] == res.argmax[prev]
            # and the path stops where no child holds the last row's argmax
            assert not any(tree.parents[r] == path[-1] and tree.tokens[r] == res.argmax[path[-1]]
                           for r in range(tree.n_rows))
            assert list(done.tokens) == [tree.tokens[r] for r in path[1:]] + [
                int(res.argmax[path[-1]])]
            assert t.committed == before + list(done.tokens)
            commits.append(done)
        assert any(len(c.path) > 1 for c in commits) and any(len(c.path) == 1 for c in commits)
        rounds: list[list[int]] = []
        rec = _Recording(make_rule("pinned", width=8))
        n = sum(len(c.tokens) for c in commits)
        gen = generate(t, prompt, n, rec, d, 4, on_tokens=rounds.append)
        assert gen.stop == "length"
        assert rounds == [list(c.tokens) for c in commits]
        assert [o.path for o in rec.outcomes] == [list(c.path) for c in commits]
        assert [o.new_tokens for o in rec.outcomes] == rounds
        assert gen.accepted == sum(len(c.path) - 1 for c in commits)
    finally:
        d.close()


def test_engine_refuses_bad_calls(tiny_target):
    t = tiny_target
    t.reset()
    with pytest.raises(EngineError, match="prefill a prompt first"):
        t.verify(chain_tree(1, []))
    t.prefill(_prompt(t, PROMPTS[0]))
    with pytest.raises(EngineError, match="not the last committed token"):
        t.verify(chain_tree(t.committed[-1] + 1, [5]))
    res = t.verify(chain_tree(t.committed[-1], [5, 6]))
    with pytest.raises(EngineError, match="pending"):
        t.verify(chain_tree(t.committed[-1], [5]))
    t.commit(res)
    with pytest.raises(EngineError, match="nothing to commit"):
        t.commit(res)
    with pytest.raises(TreeError, match="wider"):
        make_tree(list(range(64)), [-1, *range(63)], max_rows=t.max_rows)
    with pytest.raises(EngineError, match="empty prompt"):
        t.prefill([])


def test_missing_model_file_is_a_clear_error(tmp_path):
    with pytest.raises(EngineError, match="does not exist"):
        Model(tmp_path / "nope.gguf", 512, exact=True)


def test_vocabulary_mismatch_names_first_differing_id(tiny_target):
    vocab = tiny_target.token_texts()
    check_same_vocab(vocab, list(vocab), "same")
    other = list(vocab)
    other[1234] = b"something else"
    with pytest.raises(EngineError, match="token 1234"):
        check_same_vocab(vocab, other, "changed")
    with pytest.raises(EngineError, match="first differing id is 100"):
        check_same_vocab(vocab[:100], vocab, "longer")


def test_past_512_cells_a_one_row_verify_equals_a_row_of_a_wider_batch(tiny_target):
    """Exact mode pads a one-row batch (Target._decode): past 512 KV cells llama.cpp's attention
    takes another path for one row, which gave other logits (and near-tie flips that broke the
    replay's exactness, issue 14). With the padding a one-row verify's logits are row 0 of a
    two-row chain bit for bit, and cells committed by one-row rounds give the same later logits
    as cells committed by wider ones."""
    t = tiny_target
    base = _prompt(t, PROMPTS[0])
    prompt = (base * (600 // len(base) + 1))[:600]
    assert len(prompt) > 520
    t.reset()
    t.prefill(prompt)
    one = t.verify(chain_tree(t.committed[-1], []), want_logits=True)
    t.discard()
    two = t.verify(chain_tree(t.committed[-1], [int(one.argmax[0]) ^ 1]), want_logits=True)
    t.discard()
    assert np.array_equal(one.logits[0], two.logits[0])

    def after(width: int, n: int = 4) -> np.ndarray:
        t.reset()
        t.prefill(prompt)
        for _ in range(n):  # each round commits exactly one token (the draft is rejected)
            probe = t.verify(chain_tree(t.committed[-1], []))
            t.discard()
            wrong = [int(probe.argmax[0]) ^ 1] * (width - 1)
            t.commit(t.verify(chain_tree(t.committed[-1], wrong)))
        return t.verify(chain_tree(t.committed[-1], []), want_logits=True).logits[0].copy()

    try:
        assert np.array_equal(after(1), after(3))
    finally:
        t.discard()


def test_a_backlog_and_tree_past_63_rows_flush_first_and_keep_logits_exact(tiny_target):
    """Exact mode decodes the previous round's accepted path again at the head of the next
    verify's batch; when that backlog and the tree would make a batch of more than 63 rows, the
    backlog is flushed in a forward of its own, so every batch stays on the exact path. Chains of
    the greedy text committed in rounds of [62, 10, 3] and [20, 50, 2] rows (whose backlog and
    tree make 72 and 70 rows) give the logits of one-row rounds bit for bit, past 512 cells. The
    old test of the flush (backlog cells + rows against the anchor's position plus 63) never fired
    and gave logits up to 1.3 apart."""
    t = tiny_target
    base = _prompt(t, PROMPTS[0])
    prompt = (base * (600 // len(base) + 1))[:600]
    t.reset()
    t.prefill(prompt)
    ref = []
    for _ in range(75):
        res = t.verify(chain_tree(t.committed[-1], []), want_logits=True)
        ref.append(res.logits[0].copy())
        t.commit(res)
    greedy = t.committed[len(prompt):]
    try:
        for sizes in ([62, 10, 3], [20, 50, 2]):
            t.reset()
            t.prefill(prompt)
            at = 0
            for n in sizes:
                res = t.verify(chain_tree(t.committed[-1], greedy[at : at + n - 1]),
                               want_logits=True)
                for k in range(n):
                    assert np.array_equal(res.logits[k], ref[at + k]), (
                        f"rounds {sizes}: row {k} of the {n}-row round differs from one-row "
                        "rounds")
                assert len(t.commit(res).path) == n
                at += n
    finally:
        t.discard()
