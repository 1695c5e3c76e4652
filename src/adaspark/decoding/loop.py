"""The round loop (Algorithm 1): plain autoregressive decode and speculative decode.

One loop serves every arm: a round asks the width rule whether to draft, drafts, lets the rule
build the verify tree, verifies it in one forward, commits the greedy path and the target's argmax
after it (§2.2), and tells the rule what happened. A width of 1 (the anchor alone) is plain
decode, so the autoregressive arm is the same loop with the ``ar`` rule.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from adaspark.decoding.drafter.base import Drafter, DrafterStats
from adaspark.decoding.engine import Target
from adaspark.decoding.round import RoundCounts, RoundOutcome, RoundState, WidthRule


@dataclass(frozen=True)
class RoundTrace:
    """One round as ``generate(..., want_trace=True)`` keeps it: the anchor's position (the
    index of ``committed[-1]``) and token, the drafted block's picks (empty when the round drafted
    none), the verify's rows, how many of the committed tokens were accepted drafts, how many
    tokens the round committed (accepted drafts and the target's token after them, before the
    reply's cap cut them) and the times the width rule was told (:class:`RoundOutcome`): what a
    replay with device model ``recorded`` prices the round at (``adaspark.replay``)."""

    anchor_pos: int
    anchor: int
    picks: tuple[int, ...]
    rows: int
    accepted: int
    committed: int = 0
    verify_s: float = 0.0
    fixed_s: float = 0.0
    draft_s: float = 0.0
    commit_s: float = 0.0
    round_s: float = 0.0


@dataclass
class Generation:
    """One reply. ``tokens`` are the generated ids (an end-of-generation token included when the
    model emitted one); ``decode_s`` is the time of the rounds (prefill excluded);
    ``drafter_prefill_s`` is the drafter's ``begin(prompt)`` (its prompt prefill, before the
    first round; 0 without a drafter). ``counts``
    sums the rounds' :class:`~adaspark.decoding.round.RoundCounts` (rows and accepted rows by
    source), the one count of drafted rows."""

    tokens: list[int]
    prompt_tokens: int
    counts: RoundCounts = field(default_factory=RoundCounts)
    prefill_s: float = 0.0
    reused: int = 0  # prompt tokens the prefill took from the cache (llama-server's cache_n)
    drafter_prefill_s: float = 0.0
    decode_s: float = 0.0
    verify_s: float = 0.0
    stop: str = "length"  # "eog" or "length"
    token_times: list[float] = field(default_factory=list)
    width_hist: dict[int, int] = field(default_factory=dict)
    gaps: list[float] = field(default_factory=list)
    trace: list[RoundTrace] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)

    @property
    def rounds(self) -> int:
        return self.counts.rounds

    @property
    def drafted(self) -> int:
        """Candidate rows verified (the anchor rows excluded)."""
        return self.counts.n_drafted

    @property
    def accepted(self) -> int:
        return self.counts.n_accepted

    @property
    def tokens_per_s(self) -> float:
        return len(self.tokens) / self.decode_s if self.decode_s > 0 else float("nan")


def emitted_tokens(new: list[int], room: int, is_eog: Callable[[int], bool]
                   ) -> tuple[list[int], bool]:
    """The part of a round's committed tokens the reply gets: at most ``room`` of them, up to
    and including the first end-of-generation token (and whether there was one)."""
    emitted = new[:room]
    for k, tok in enumerate(emitted):
        if is_eog(tok):
            return emitted[: k + 1], True
    return emitted, False


def generate(
    target: Target,
    prompt: list[int],
    max_tokens: int,
    rule: WidthRule,
    drafter: Drafter | None = None,
    block_positions: int = 4,
    *,
    want_gaps: bool = False,
    want_trace: bool = False,
    on_tokens: Callable[[list[int]], None] | None = None,
    stats: DrafterStats | None = None,
    request_id: str | None = None,
    counts: RoundCounts | None = None,
) -> Generation:
    """Decode up to ``max_tokens`` greedily after ``prompt`` with ``rule`` choosing each verify.

    ``on_tokens`` is called with each round's committed tokens as they are committed (the
    server streams them). With ``want_gaps`` the top-2 logit gap of the row that produced each
    generated token is kept (near-tie analysis, HARNESS); with ``want_trace`` each round's
    :class:`RoundTrace`. ``counts``, when given, is the
    accumulator the result's ``counts`` is (so a caller still reads the rounds' counts when a
    round's callback raised).
    """
    if rule.uses_drafter and drafter is None:
        raise ValueError(f"width rule {rule.name!r} needs a drafter; the arm gives none")
    gen = Generation(tokens=[], prompt_tokens=len(prompt),
                     counts=counts if counts is not None else RoundCounts())
    prefilled = target.prefill(prompt)
    gen.prefill_s = prefilled.seconds
    gen.reused = prefilled.reused
    rule.begin_request(prompt, request_id)
    if drafter is not None:
        t_begin = time.perf_counter()
        drafter.begin(prompt)
        gen.drafter_prefill_s = time.perf_counter() - t_begin
    t_start = time.perf_counter()
    t_since = t_start  # the end of the previous round's observe: where this round's time starts
    while len(gen.tokens) < max_tokens:
        state = RoundState(committed=target.committed, round_index=gen.rounds,
                           max_rows=target.max_rows, block_positions=block_positions)
        t_round = time.perf_counter()
        anchor_pos, anchor = len(target.committed) - 1, int(target.committed[-1])
        block = None
        if drafter is not None and rule.wants_block(state):
            room = target.n_ctx - len(target.committed) - 1
            want = rule.block_positions(block_positions)
            block = drafter.draft(target.committed, max(1, min(want, room)))
            if stats is not None:
                stats.n_blocks += 1
                stats.draft_s += block.draft_s
        plan = rule.plan(state, block)
        fixed_s = time.perf_counter() - t_round
        res = target.verify(plan.tree, want_gaps=want_gaps)
        t_commit = time.perf_counter()
        done = target.commit(res)
        commit_s = time.perf_counter() - t_commit
        path, new = list(done.path), list(done.tokens)
        emitted, eog = emitted_tokens(new, max_tokens - len(gen.tokens), target.is_eog)
        if eog:
            gen.stop = "eog"
        now = time.perf_counter()
        gen.tokens.extend(emitted)
        gen.token_times.extend([now] * len(emitted))
        if want_gaps and res.gap is not None:
            gen.gaps.extend(float(res.gap[r]) for r in path[: len(emitted)])
        outcome = RoundOutcome.of(plan, path, new, res.verify_s, fixed_s,
                                  draft_s=block.draft_s if block is not None else 0.0,
                                  commit_s=commit_s, round_s=time.perf_counter() - t_since,
                                  build_s=res.build_s, decode_s=res.decode_s,
                                  backlog_rows=res.backlog_rows)
        gen.counts.add(outcome.counts)
        gen.verify_s += res.verify_s
        gen.width_hist[plan.tree.n_rows] = gen.width_hist.get(plan.tree.n_rows, 0) + 1
        rule.observe(plan, outcome)
        if want_trace:
            gen.trace.append(RoundTrace(
                anchor_pos=anchor_pos, anchor=anchor,
                picks=tuple(block.picks) if block is not None else (),
                rows=plan.tree.n_rows, accepted=len(path) - 1, committed=len(new),
                verify_s=outcome.verify_s, fixed_s=outcome.fixed_s, draft_s=outcome.draft_s,
                commit_s=outcome.commit_s, round_s=outcome.round_s))
        if on_tokens is not None and emitted:
            on_tokens(emitted)
        t_since = time.perf_counter()
        if gen.stop == "eog":
            break
        if len(target.committed) + 1 >= target.n_ctx:
            gen.stop = "context"
            break
    gen.decode_s = time.perf_counter() - t_start
    gen.summary = rule.end_request()
    return gen
