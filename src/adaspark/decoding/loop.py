"""The round loop of Algorithm 1, one for every world a round can run in.

A round asks the width rule whether to draft, takes a block from the world, lets the rule build
the verify tree (``plan``), has the world verify it and find the accepted path, commits the path
and the target's token after it (§2.2), and tells the rule what happened (``observe``). A width
of 1 (the anchor alone) is plain decode, so the autoregressive arm is the same loop with the
``ar`` rule. :func:`run_rounds` is that loop; what differs between the places a round runs sits
behind :class:`RoundWorld`:

- where the block comes from (:meth:`RoundWorld.draft`): the drafter on the engine
  (:class:`EngineWorld`), the labelled block at the anchor in replay
  (:class:`adaspark.replay.loop.LabelWorld`), a synthetic drafter in the simulator
  (:mod:`adaspark.rules.adaspark.simulator`);
- how the tree is verified and the accepted path found (:meth:`RoundWorld.verify`): one
  ``llama_decode`` and the argmax per row, the labels, the synthetic text;
- what the round's times are (:class:`Verified`): measured here around the calls (the engine),
  or priced by the world (a device model's price, a recorded trace, the simulator's cost law).

A :class:`RequestSession` owns one request: its tokens, counts and timings, its round records
(:class:`~adaspark.decoding.round.RoundOutcome`, from which a trace row and the rule's log are
derived) and the rule's ``begin_request``/``end_request``, which it always calls, also when a
round raises.

Two extensions fit without changing the loop. A sampling verifier is another
:meth:`RoundWorld.verify`: it draws the target's token at each accepted node from a random
stream keyed by the request's seed and the text position, and returns the path and tokens as the
greedy verifier does. Several requests served together are several sessions: a step opens each
one's round (:func:`open_round`), verifies every plan in one ``llama_decode`` and closes each
(:func:`close_round`), the two halves of :func:`step_round`, so every session keeps its own
counts and records (:mod:`adaspark.decoding.slots`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from adaspark.decoding.drafter.base import Block, Drafter
from adaspark.decoding.engine import Target, VerifyResult
from adaspark.decoding.round import (
    RoundCounts,
    RoundOutcome,
    RoundPlan,
    RoundState,
    WidthRule,
    room_left,
)
from adaspark.decoding.sampling import SamplingParams, keyed_draws
from adaspark.decoding.tree import Tree


@dataclass
class Verified:
    """What a world's verify gave: the accepted path's rows (row 0 the anchor), the committed
    tokens (the accepted drafts and the target's token after them) and the round's times
    (:class:`~adaspark.decoding.round.RoundOutcome` says what each is). A time left None is
    measured by the loop: ``fixed_s`` from the round's start to the end of ``plan``, ``draft_s``
    the block's own, ``round_s`` from the end of the previous round's ``observe``."""

    path: list[int]
    new: list[int]
    verify_s: float
    fixed_s: float | None = None
    draft_s: float | None = None
    commit_s: float = 0.0
    round_s: float | None = None
    build_s: float = 0.0
    decode_s: float = 0.0
    backlog_rows: int = 0
    gap: Any = None  # the top-2 logit gap of each row (the engine, when asked for gaps)


class RoundWorld(Protocol):
    """Where a round runs: the text so far (``committed``, the prompt and the committed tokens;
    ``committed[-1]`` is the anchor), the context and row limits, a block source and a verifier.
    ``measured``: the round times are the loop's clock (the reply's decode time is wall time);
    otherwise they are the world's prices and the decode time is their sum."""

    measured: bool

    @property
    def committed(self) -> Sequence[int]: ...

    @property
    def n_ctx(self) -> int: ...

    @property
    def max_rows(self) -> int: ...

    @property
    def drafts(self) -> bool:
        """Whether the world has a drafter to call."""
        ...

    def draft(self, positions: int) -> Block:
        """The block drafted after the anchor, ``positions`` deep."""
        ...

    def verify(self, plan: RoundPlan, block: Block | None, round_index: int) -> Verified:
        """Verify ``plan``'s tree, commit the accepted path and the token after it."""
        ...

    def is_eog(self, token: int) -> bool: ...


@dataclass
class RequestSession:
    """One request's decode: the generated ``tokens`` (an end-of-generation token included when
    the model emitted one), the rounds' summed ``counts`` (rows and accepted rows by source, the
    one count of drafted rows), the drafter's blocks and time, the width histogram, the decode
    time (rounds only, prefill excluded), the stop reason (``length``, ``eog``, ``context``), the
    round records when ``keep_records``, and the rule's summary from ``end_request``.

    Use it as a context manager: entering calls the rule's ``begin_request``, leaving always
    calls ``end_request`` (a round that raised included; an error of ``end_request`` itself does
    not hide the round's)."""

    rule: WidthRule
    prompt: list[int]
    request_id: str | None = None
    keep_records: bool = False
    #: the request's sampling (None or temperature 0: greedy decoding)
    sampling: SamplingParams | None = None
    tokens: list[int] = field(default_factory=list)
    counts: RoundCounts = field(default_factory=RoundCounts)
    records: list[RoundOutcome] = field(default_factory=list)
    width_hist: dict[int, int] = field(default_factory=dict)
    n_blocks: int = 0
    draft_s: float = 0.0
    verify_s: float = 0.0
    decode_s: float = 0.0
    prefill_s: float = 0.0
    reused: int = 0  # prompt tokens the prefill took from the cache (llama-server's cache_n)
    drafter_prefill_s: float = 0.0
    stop: str = "length"
    token_times: list[float] = field(default_factory=list)
    gaps: list[float] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)

    def __enter__(self) -> RequestSession:
        self.rule.begin_request(self.prompt, self.request_id)
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        try:
            self.summary = self.rule.end_request()
        except Exception:
            if exc_type is None:
                raise  # a failing end_request is an error of its own only when no round failed

    @property
    def prompt_tokens(self) -> int:
        return len(self.prompt)

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

    def add(self, outcome: RoundOutcome, emitted: list[int], at: float) -> None:
        """Count one round: its outcome and the tokens the reply got from it."""
        self.counts.add(outcome.counts)
        self.tokens.extend(emitted)
        self.token_times.extend([at] * len(emitted))
        self.verify_s += outcome.verify_s
        self.width_hist[outcome.rows] = self.width_hist.get(outcome.rows, 0) + 1
        if outcome.drafted:
            self.n_blocks += 1
            self.draft_s += outcome.draft_s
        if self.keep_records:
            self.records.append(outcome)


def emitted_tokens(new: list[int], room: int, is_eog: Callable[[int], bool]
                   ) -> tuple[list[int], bool]:
    """The part of a round's committed tokens the reply gets: at most ``room`` of them, up to
    and including the first end-of-generation token (and whether there was one)."""
    emitted = new[:room]
    for k, tok in enumerate(emitted):
        if is_eog(tok):
            return emitted[: k + 1], True
    return emitted, False


@dataclass
class OpenRound:
    """A round up to its verify (:func:`open_round`): the state it plans in, the block, the plan
    (None until :func:`plan_round`), where its clock started, the planning time (``fixed_s``) and
    the anchor's position and token (read before the verify: the world's ``committed`` grows
    when it commits)."""

    state: RoundState
    block: Block | None
    t_round: float
    anchor_pos: int
    anchor: int
    plan: RoundPlan | None = None
    fixed_s: float = 0.0

    @property
    def index(self) -> int:
        return self.state.round_index


def open_block(world: RoundWorld, session: RequestSession, block_positions: int
               ) -> tuple[OpenRound, int]:
    """Algorithm 1, line 5, for ``session`` in ``world``: the round opened, and how many
    positions its block drafts (0: no block)."""
    rule = session.rule
    committed = world.committed
    state = RoundState(committed=committed, round_index=session.rounds,
                       max_rows=world.max_rows, block_positions=block_positions)
    opened = OpenRound(state, None, time.perf_counter(), len(committed) - 1, int(committed[-1]))
    if world.drafts and rule.uses_drafter and rule.wants_block(state):
        room = room_left(world.n_ctx, len(committed))
        return opened, max(1, min(rule.block_positions(block_positions), room))
    return opened, 0


def draft_round(world: RoundWorld, session: RequestSession, block_positions: int) -> OpenRound:
    """Algorithm 1, lines 5-6, for ``session`` in ``world``: whether to draft, and the block (a
    shared step drafts its requests' blocks together instead: :mod:`adaspark.decoding.slots`)."""
    opened, positions = open_block(world, session, block_positions)
    if positions:
        opened.block = world.draft(positions)
    return opened


def plan_round(session: RequestSession, opened: OpenRound, max_rows: int | None = None
               ) -> OpenRound:
    """Algorithm 1, lines 7-8: the rule's plan of the verify tree, within ``max_rows`` rows
    when a shared step gave this request a share (:mod:`adaspark.decoding.slots`)."""
    if max_rows is not None:
        opened.state = replace(opened.state, max_rows=max_rows)
    opened.plan = session.rule.plan(opened.state, opened.block)
    opened.fixed_s = time.perf_counter() - opened.t_round
    return opened


def open_round(world: RoundWorld, session: RequestSession, block_positions: int) -> OpenRound:
    """Algorithm 1, lines 5-8: :func:`draft_round` then :func:`plan_round`."""
    return plan_round(session, draft_round(world, session, block_positions))


def close_round(world: RoundWorld, session: RequestSession, opened: OpenRound, v: Verified,
                max_tokens: int, since: float) -> list[int]:
    """Algorithm 1, lines 10-12, after the verify ``v`` of ``opened``'s plan: the reply's tokens,
    the round's record and the rule's ``observe``. ``since`` is where the round's measured time
    starts (the end of the previous round). Returns the tokens the reply got and sets
    ``session.stop`` when the reply ends here."""
    plan, block, state = opened.plan, opened.block, opened.state
    assert plan is not None, "close_round after plan_round"
    emitted, eog = emitted_tokens(v.new, max_tokens - len(session.tokens), world.is_eog)
    if eog:
        session.stop = "eog"
    at = time.perf_counter()
    if v.gap is not None:
        session.gaps.extend(float(v.gap[r]) for r in v.path[: len(emitted)])
    outcome = RoundOutcome.of(
        plan, v.path, v.new, v.verify_s, opened.fixed_s if v.fixed_s is None else v.fixed_s,
        draft_s=(block.draft_s if block is not None else 0.0) if v.draft_s is None else v.draft_s,
        commit_s=v.commit_s,
        round_s=time.perf_counter() - since if v.round_s is None else v.round_s,
        build_s=v.build_s, decode_s=v.decode_s, backlog_rows=v.backlog_rows,
        round_index=state.round_index, anchor_pos=opened.anchor_pos, anchor=opened.anchor,
        drafted=block is not None,
        picks=tuple(block.picks) if block is not None else ())
    session.add(outcome, emitted, at)
    if not world.measured:
        session.decode_s += outcome.round_s
    session.rule.observe(plan, outcome)
    if session.stop != "eog" and room_left(world.n_ctx, len(world.committed)) <= 0:
        session.stop = "context"
    return emitted


def step_round(world: RoundWorld, session: RequestSession, max_tokens: int,
               block_positions: int, since: float) -> list[int]:
    """One round of Algorithm 1 (lines 5-12) for ``session`` in ``world``: :func:`open_round`, the
    world's verify, :func:`close_round`. Several requests served together open their rounds,
    verify every plan in one step and close each (:mod:`adaspark.decoding.slots`)."""
    opened = open_round(world, session, block_positions)
    assert opened.plan is not None
    v = world.verify(opened.plan, opened.block, opened.index)
    return close_round(world, session, opened, v, max_tokens, since)


def run_rounds(world: RoundWorld, session: RequestSession, max_tokens: int,
               block_positions: int, *,
               on_tokens: Callable[[list[int]], None] | None = None) -> RequestSession:
    """Rounds until ``max_tokens`` tokens, an end-of-generation token or a full context.
    ``on_tokens`` is called with each round's tokens as they are committed (the server streams
    them). The session must be open (``with session:``)."""
    t_start = time.perf_counter()
    since = t_start  # the end of the previous round's observe: where a round's time starts
    while len(session.tokens) < max_tokens:
        emitted = step_round(world, session, max_tokens, block_positions, since)
        if on_tokens is not None and emitted:
            on_tokens(emitted)
        since = time.perf_counter()
        if session.stop in ("eog", "context"):
            break
    if world.measured:
        session.decode_s = time.perf_counter() - t_start
    return session


# ---------------------------------------------------------------------------------------------
# The engine


@dataclass
class EngineWorld:
    """The engine: the drafter's blocks, one ``llama_decode`` per verify and the target's token
    at each row (its argmax, or with ``sampling`` its keyed draw), times measured (with
    ``want_gaps``, each row's top-2 logit gap is kept: the near-tie analysis of HARNESS)."""

    target: Target
    drafter: Drafter | None = None
    want_gaps: bool = False
    sampling: SamplingParams | None = None
    measured: bool = True

    @property
    def committed(self) -> list[int]:
        return self.target.committed

    @property
    def n_ctx(self) -> int:
        return self.target.n_ctx

    @property
    def max_rows(self) -> int:
        return self.target.max_rows

    @property
    def drafts(self) -> bool:
        return self.drafter is not None

    def draft(self, positions: int) -> Block:
        assert self.drafter is not None
        return self.drafter.draft(self.target.committed, positions)

    def verify(self, plan: RoundPlan, block: Block | None, round_index: int) -> Verified:
        return self.commit(plan, self.target.verify(plan.tree, want_gaps=self.want_gaps))

    def commit(self, plan: RoundPlan, res: VerifyResult) -> Verified:
        """Commit the verified ``plan`` (the engine's ``res``: alone, or this request's part of a
        shared step) and say what the round committed."""
        t_commit = time.perf_counter()
        done = self.target.commit(res, self._sampled(plan.tree))
        commit_s = time.perf_counter() - t_commit
        return Verified(list(done.path), list(done.tokens), res.verify_s, commit_s=commit_s,
                        build_s=res.build_s, decode_s=res.decode_s,
                        backlog_rows=res.backlog_rows,
                        gap=res.gap if self.want_gaps else None)

    def is_eog(self, token: int) -> bool:
        return self.target.is_eog(token)

    def _sampled(self, tree: Tree) -> Callable[[int], int] | None:
        """The target's token at each row under sampling (None: greedy, its argmax): the draw of
        the row's text position from its logits (:func:`adaspark.decoding.sampling.sample_token`;
        :func:`adaspark.decoding.sampling.verify_sampled` states why this is lossless)."""
        s = self.sampling
        if s is None or s.greedy:
            return None
        return keyed_draws(self.target.logits(tree.n_rows),  # valid until the next decode
                           s, len(self.target.committed), tree.depths())


def decode(target: Target, session: RequestSession, max_tokens: int,
           drafter: Drafter | None = None, block_positions: int = 4, *,
           want_gaps: bool = False,
           on_tokens: Callable[[list[int]], None] | None = None) -> RequestSession:
    """Decode ``session``'s request on the engine: prefill the prompt (and the drafter's), then
    :func:`run_rounds`. The caller keeps the session, so its counts are there to read when a
    round's callback raised."""
    if session.rule.uses_drafter and drafter is None:
        raise ValueError(f"width rule {session.rule.name!r} needs a drafter; the arm gives none")
    prefilled = target.prefill(session.prompt)
    session.prefill_s = prefilled.seconds
    session.reused = prefilled.reused
    with session:
        if drafter is not None:
            t_begin = time.perf_counter()
            drafter.begin(session.prompt)
            session.drafter_prefill_s = time.perf_counter() - t_begin
        run_rounds(EngineWorld(target, drafter, want_gaps, session.sampling), session,
                   max_tokens, block_positions, on_tokens=on_tokens)
    return session


def generate(target: Target, prompt: list[int], max_tokens: int, rule: WidthRule,
             drafter: Drafter | None = None, block_positions: int = 4, *,
             want_gaps: bool = False, want_trace: bool = False,
             on_tokens: Callable[[list[int]], None] | None = None,
             request_id: str | None = None,
             sampling: SamplingParams | None = None) -> RequestSession:
    """Decode up to ``max_tokens`` after ``prompt`` with ``rule`` choosing each verify, greedily
    or with ``sampling`` (:func:`decode` on a new session; ``want_trace`` keeps each round's
    record)."""
    session = RequestSession(rule, list(prompt), request_id, keep_records=want_trace,
                             sampling=sampling)
    return decode(target, session, max_tokens, drafter, block_positions,
                  want_gaps=want_gaps, on_tokens=on_tokens)
