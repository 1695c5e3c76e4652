"""Several requests decoding together in one target context: slots, and one ``llama_decode`` per
step for every active request's tree (issue 37; the paper's third open question, §7).

Layout. llama.cpp gives a context at most 256 sequence ids (``LLAMA_MAX_SEQ``) over one unified
KV cache. Slot ``k`` of ``n`` owns the ids ``[k m, (k+1) m)`` with ``m = 256 // n`` (exact mode:
``255 // n``, id 255 being its padding row): its committed prefix in the first, its trees'
leaves in the others. A tree
of ``r`` rows has at most ``r - 1`` leaves, so a slot's widest tree is ``m`` rows, and at most
:data:`~adaspark.decoding.tree.MAX_ROWS_FAST` in fast mode. In exact mode a step holds at most
:data:`~adaspark.decoding.tree.MAX_ROWS_EXACT` rows in all (the exact kernels' budget, HARNESS), so
each slot gets ``63 // n`` rows, its backlog included. The width rules read their slot's cap as
``max_rows`` (:class:`~adaspark.decoding.round.RoundState`): the chooser knows it.

A step (:meth:`SlotTarget.step`) stages every active slot's rows (:meth:`Target.stage`: the prefix
shared with each leaf sequence, the rows tagged with their leaves), decodes them in one batch,
reads each slot's output rows at its offset and lets each slot commit its path; the cells only a
slot's leaves held are freed (``llama_memory_seq_rm`` per leaf: ``llama_memory_seq_keep`` would
drop the other slots). A request's prefill runs alone, between steps, in its slot's first
sequence (its own decodes, in whole chunks, reusing that slot's previous prompt as a single
target does), so a step's time is the verify's.

Exactness. Each slot's cells are in position order among themselves, but the slots' cells
interleave in the cache and a freed cell of another slot's tree may take a later token of this
one, so flash attention may sum a row's cells in another order than the same request's decode
alone: a reply agrees with its plain greedy decode in argmax, and may differ at a near tie (a
top-2 gap under 0.5, HARNESS's rule), which the exactness test counts.

:class:`Batch` runs requests on the slots: admission (a prefill and the drafter's), a step
(:func:`~adaspark.decoding.loop.open_block` for each, the blocks drafted together, each
:func:`~adaspark.decoding.loop.plan_round`, one decode, each commit and
:func:`~adaspark.decoding.loop.close_round`), cancellation and the end of a request. Its two
engine parts, the blocks (:meth:`Batch._blocks`) and the verify with the commits
(:meth:`Batch._verify`), are what the batch replay replaces with labels and a device model's
prices (:mod:`adaspark.replay.batch`), so a replayed step is this step.

Drafting. In fast mode a draft model serves every slot from one context, a sequence per slot,
and drafts the step's blocks in one batched forward per position
(:meth:`~adaspark.decoding.drafter.draft_model.DraftModelDrafter.draft_together`). In exact mode
each slot has a draft-model context of its own and drafts alone, one row per decode, so a
block depends only on its request's committed text. A DSpark drafter reads the target's hidden
states through a hook on one target, so it does not serve several slots yet.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from adaspark.decoding.drafter.base import Block, Drafter
from adaspark.decoding.engine import EngineError, Target, VerifyResult
from adaspark.decoding.loop import (
    EngineWorld,
    RequestSession,
    Verified,
    close_round,
    open_block,
    plan_round,
)
from adaspark.decoding.tree import MAX_ROWS_EXACT, MAX_ROWS_FAST, Tree

#: Sequence ids of one llama.cpp context (``LLAMA_MAX_SEQ``).
SEQ_BUDGET = 256

#: What a slot shares with the context that holds it (the native handles and the vocabulary).
_SHARED = ("path", "exact", "n_batch", "model", "vocab", "n_vocab", "ctx", "n_ctx", "mem",
           "n_seq_max", "seq_cells", "context_params", "_batch", "add_bos", "_pieces",
           "on_committed_rows", "prefill_chunk", "pad_seq")


def seq_ids_per_slot(n_slots: int, *, exact: bool) -> int:
    """Sequence ids per slot: the context's 256, less exact mode's padding sequence."""
    return (SEQ_BUDGET - (1 if exact else 0)) // n_slots


def slot_rows(n_slots: int, *, exact: bool) -> int:
    """The widest verify (rows) of one of ``n_slots`` slots: its sequence ids' leaves, at most
    the engine's row cap, and in exact mode its share of the step's 63 rows."""
    if n_slots < 1:
        raise ValueError(f"a context needs at least one slot, not {n_slots}")
    per_slot = seq_ids_per_slot(n_slots, exact=exact)
    cap = MAX_ROWS_EXACT // n_slots if exact else MAX_ROWS_FAST
    rows = min(per_slot, cap)
    if rows < 2:
        raise ValueError(f"{n_slots} slots leave each fewer than 2 rows per step; use fewer")
    return rows


class Slot(Target):
    """One request's part of a :class:`SlotTarget`: a :class:`Target` over a range of the
    context's sequence ids (it frees nothing; the context does)."""

    def __init__(self, owner: SlotTarget, index: int, seq_ids: range, max_rows: int) -> None:
        # no Model.__init__: the native context is the owner's
        self.__dict__.update({k: owner.__dict__[k] for k in _SHARED})
        self.owner = owner
        self.index = index
        self.max_rows = max_rows
        self.committed: list[int] = []
        self.n_kv = 0
        self.n_canonical = 0
        self._pending = None
        self.seq0 = seq_ids[0]
        self.leaf_ids = seq_ids[1:]
        self.owns_context = False
        self._out0 = 0
        self.n_decodes = 0

    def close(self) -> None:
        """Nothing to free: the owner's context is shared."""

    def __del__(self) -> None:
        pass


class SlotTarget(Target):
    """The target context shared by ``n_slots`` requests (see the module docstring)."""

    def __init__(self, path: str | Path, n_ctx: int, *, exact: bool, n_slots: int,
                 threads: int | None = None, n_gpu_layers: int = 0) -> None:
        rows = slot_rows(n_slots, exact=exact)
        super().__init__(path, n_ctx, exact=exact, threads=threads, n_gpu_layers=n_gpu_layers,
                         n_seq_max=SEQ_BUDGET)
        self.pad_seq = SEQ_BUDGET - 1  # exact mode's only (a fast-mode slot may own it)
        per = seq_ids_per_slot(n_slots, exact=exact)
        self.slots = [Slot(self, k, range(k * per, (k + 1) * per), rows)
                      for k in range(n_slots)]

    def step(self, staged: Sequence[tuple[Slot, Tree]], *,
             want_gaps: bool = False) -> list[VerifyResult]:
        """Verify every ``(slot, tree)`` in one ``llama_decode``; each slot's verify is pending
        until it commits. Every result carries the whole step's times (what each request
        waited)."""
        t0 = time.perf_counter()
        tokens: list[int] = []
        pos: list[int] = []
        seqs: list[list[int]] = []
        want: list[bool] = []
        first: list[int] = []  # each slot's first output row (rows with logits before it)
        outputs = 0
        try:
            for slot, tree in staged:
                if slot.owner is not self:
                    raise EngineError(f"slot {slot.index} belongs to another context")
                t, p, s, w = slot.stage(tree)
                first.append(outputs)
                outputs += sum(w)
                tokens += t
                pos += p
                seqs += s
                want += w
            if len(tokens) > self.n_batch:
                raise EngineError(f"a step of {len(tokens)} rows exceeds the batch of "
                                  f"{self.n_batch}")
            self._fill(tokens, pos, seqs, want)
            build_s = time.perf_counter() - t0
            decode_s = self._decode()
        except EngineError:
            for slot, _ in staged:
                slot.discard()
            raise
        out = []
        for (slot, tree), off in zip(staged, first, strict=True):
            slot._out0 = off
            out.append(slot.result(tree.n_rows, want_gaps=want_gaps))
        spent = time.perf_counter() - t0
        for r in out:
            r.build_s, r.decode_s, r.verify_s = build_s, decode_s, spent
        return out


class RowDivider(Protocol):
    """Divides a shared step's rows between its requests (AdaSpark's batch rule,
    :class:`adaspark.rules.adaspark.batch.BatchChooser`) and learns the step's cost."""

    def divide(self, gains: Sequence[Sequence[float]], caps: Sequence[int],
               contexts: Sequence[int], keys: Sequence[int] | None = None
               ) -> Sequence[int] | None:
        """Rows per request (anchor included), or None to let each rule choose alone;
        ``keys``: the requests' slots."""
        ...

    def drafts(self, key: int) -> bool:
        """Whether the request in slot ``key`` drafts a block for the next step."""
        ...

    def predict(self, rows: Sequence[int], contexts: Sequence[int]) -> float | None: ...

    def observe(self, rows: Sequence[int], contexts: Sequence[int], seconds: float,
                tokens: int) -> None: ...


@dataclass
class Active:
    """A request decoding in a slot: its world (the slot, its drafter, its sampling), session,
    token budget, the end of its last round (where its next round's time starts), its start and
    the callback that gets each round's tokens."""

    slot: Slot
    world: EngineWorld
    session: RequestSession
    max_tokens: int
    started: float
    since: float
    on_tokens: Callable[[list[int]], None] | None = None
    done: bool = False
    error: str | None = None  # its rule or drafter failed (the request ended, the step went on)


@dataclass
class StepTimes:
    """A step's verify (``verify_s``), the target's ``llama_decode`` in it, the read-out of
    its logits, and where the world prices them (a replay), the whole step and its drafting
    (None: the step's own clock)."""

    verify_s: float
    decode_s: float = 0.0
    readout_s: float = 0.0
    step_s: float | None = None
    draft_s: float | None = None


@dataclass
class StepRecord:
    """One step: the requests in it (slot and rows each), its rows in all, and its times: the
    verify (``verify_s``: staging, the decode, the read-out), the target's ``llama_decode`` in it
    (``decode_s``), the read-out of every slot's argmax over the vocabulary (``readout_s``), the
    drafters' blocks (``draft_s``) and the whole step (``step_s``). llama.cpp's part is the decode
    and the read-out; the host's own part is :attr:`host_s`."""

    slots: list[int]
    rows: list[int]
    verify_s: float
    decode_s: float
    step_s: float
    draft_s: float = 0.0
    readout_s: float = 0.0
    contexts: list[int] = field(default_factory=list)
    #: the rows the divider gave each request (None: each rule chose alone) and the step's
    #: verify time its cost law predicted for the rows verified
    shares: list[int] | None = None
    predicted_s: float | None = None

    @property
    def total_rows(self) -> int:
        return sum(self.rows)

    @property
    def host_s(self) -> float:
        """The host's own part: rules, staging, commits, the rounds' bookkeeping."""
        return self.step_s - self.decode_s - self.readout_s - self.draft_s


class Batch:
    """Requests decoding together on a :class:`SlotTarget`, one round each per step, each slot
    with its own drafter (or none) and the session's own rule."""

    def __init__(self, target: SlotTarget, drafters: Sequence[Drafter | None],
                 block_positions: int, *, want_gaps: bool = False,
                 divider: RowDivider | None = None) -> None:
        if len(drafters) != len(target.slots):
            raise ValueError(f"{len(target.slots)} slots need as many drafters (or None), "
                             f"not {len(drafters)}")
        self.target = target
        self.drafters = list(drafters)
        self.block_positions = block_positions
        self.want_gaps = want_gaps
        self.divider = divider
        self.active: dict[int, Active] = {}
        self.steps: list[StepRecord] = []
        self._failed: list[Active] = []

    def free_slots(self) -> list[int]:
        return [k for k in range(len(self.target.slots)) if k not in self.active]

    def room(self) -> int:
        """KV cells not promised to an active request (its prompt, its tokens, its widest
        tree): what a new request may take."""
        promised = sum(len(a.session.prompt) + a.max_tokens + a.slot.max_rows
                       for a in self.active.values())
        return self.target.n_ctx - promised

    def fits(self, prompt_tokens: int, max_tokens: int) -> bool:
        return prompt_tokens + max_tokens + self.target.slots[0].max_rows <= self.room()

    def admit(self, session: RequestSession, max_tokens: int,
              on_tokens: Callable[[list[int]], None] | None = None) -> Active:
        """Start ``session`` in a free slot: its prefill (alone) and its drafter's, then the
        rule's ``begin_request``. The caller checked :meth:`fits`."""
        free = self.free_slots()
        if not free:
            raise EngineError("every slot is busy")
        k = free[0]
        slot, drafter = self.target.slots[k], self.drafters[k]
        if session.rule.uses_drafter and drafter is None:
            raise ValueError(f"width rule {session.rule.name!r} needs a drafter; the arm gives "
                             "none")
        done = slot.prefill(session.prompt)
        session.prefill_s, session.reused = done.seconds, done.reused
        if drafter is not None:
            t0 = time.perf_counter()
            drafter.begin(session.prompt)
            session.drafter_prefill_s = time.perf_counter() - t0
        session.__enter__()
        now = time.perf_counter()
        a = Active(slot, EngineWorld(slot, drafter, self.want_gaps, session.sampling), session,
                   max_tokens, now, now, on_tokens)
        self.active[k] = a
        return a

    def finish(self, a: Active, error: BaseException | None = None) -> None:
        """End ``a``'s request (its rule's ``end_request``) and free its slot."""
        if a.done:
            return
        a.done = True
        self.active.pop(a.slot.index, None)
        a.slot.discard()
        if a.world.measured:  # else the priced rounds' sum (a replay: close_round keeps it)
            a.session.decode_s = time.perf_counter() - a.started
        if error is None:
            a.session.__exit__(None, None, None)
        else:
            a.session.__exit__(type(error), error, error.__traceback__)

    def step(self) -> list[Active]:
        """One round for every active request in one ``llama_decode``; returns the requests that
        ended in it (their slots are free), those whose own rule or drafter raised with
        ``error`` set (the others' step goes on). A request's ``on_tokens`` must not raise: a client
        that leaves is ended by :meth:`finish` between steps."""
        if not self.active:
            return []
        t0 = time.perf_counter()
        order, opened, draft_s = self._draft(sorted(self.active.values(),
                                                    key=lambda a: a.slot.index))
        shares = self._shares(order, opened)
        order, opened = self._plan(order, opened, shares)
        if not order:
            return self.failed_now()
        verified, times = self._verify(order, opened)
        ended = []
        committed = 0
        for a, o, v in zip(order, opened, verified, strict=True):
            committed += len(v.new)
            emitted = close_round(a.world, a.session, o, v, a.max_tokens, a.since)
            a.since = time.perf_counter()
            if a.on_tokens is not None and emitted:
                a.on_tokens(emitted)
            s = a.session
            if s.stop in ("eog", "context") or len(s.tokens) >= a.max_tokens:
                ended.append(a)
        rows = [o.plan.tree.n_rows for o in opened if o.plan is not None]
        contexts = [o.anchor_pos + 1 for o in opened]
        predicted = None
        if self.divider is not None:
            predicted = self.divider.predict(rows, contexts)
            self.divider.observe(rows, contexts, times.verify_s, committed)
        self.steps.append(StepRecord(
            slots=[a.slot.index for a in order], rows=rows, verify_s=times.verify_s,
            decode_s=times.decode_s,
            step_s=time.perf_counter() - t0 if times.step_s is None else times.step_s,
            draft_s=draft_s if times.draft_s is None else times.draft_s,
            readout_s=times.readout_s, contexts=contexts,
            shares=None if shares is None or len(shares) != len(rows) else list(shares),
            predicted_s=predicted))
        for a in ended:
            self.finish(a)
        return self.failed_now() + ended

    def _verify(self, order: list[Active], opened: list) -> tuple[list[Verified], StepTimes]:
        """Every planned tree in one ``llama_decode`` and each request's commit; the step's
        times (its own clock: ``step_s`` None)."""
        results = self.target.step([(a.slot, o.plan.tree) for a, o in zip(order, opened,
                                                                          strict=True)],
                                   want_gaps=self.want_gaps)
        verified = [a.world.commit(o.plan, r) for a, o, r in zip(order, opened, results,
                                                                 strict=True)]
        return verified, StepTimes(results[0].verify_s, results[0].decode_s,
                                   sum(r.readout_s for r in results))

    def _blocks(self, asks: list[tuple[Active, int]]) -> list[Block]:
        """The blocks of the requests that draft this step (``(request, positions)``), drafted
        together (:meth:`~adaspark.decoding.drafter.base.Drafter.draft_together`)."""
        drafters = [a.world.drafter for a, _ in asks]
        return type(drafters[0]).draft_together(
            [(d, a.world.committed, n) for d, (a, n) in zip(drafters, asks, strict=True)])

    def failed_now(self) -> list[Active]:
        """The requests whose own rule or drafter failed in this step (ended, ``error`` set)."""
        out, self._failed = self._failed, []
        return out

    def _fail(self, a: Active, e: Exception) -> None:
        """End one request whose rule or drafter raised; the others keep their step."""
        a.error = f"{type(e).__name__}: {e}"
        self.finish(a, e)
        self._failed.append(a)

    def _draft(self, order: list[Active]) -> tuple[list[Active], list, float]:
        """Open every request's round and draft the blocks they ask for together
        (:meth:`~adaspark.decoding.drafter.base.Drafter.draft_together`: a draft model's
        sequences in one batched forward per position), and the drafting's seconds. A request
        whose rule raises is ended alone; a failed drafting ends the requests that asked for a
        block."""
        kept, opened, asks = [], [], []
        for a in order:
            try:
                o, positions = open_block(a.world, a.session, self.block_positions)
            except Exception as e:
                self._fail(a, e)
                continue
            if positions and self.divider is not None and not self.divider.drafts(a.slot.index):
                positions = 0  # its rows would not pay: its anchor alone (the divider's call)
            kept.append(a)
            opened.append(o)
            if positions:
                asks.append((len(opened) - 1, positions))
        if not asks:
            return kept, opened, 0.0
        t0 = time.perf_counter()
        try:
            blocks = self._blocks([(kept[i], n) for i, n in asks])
        except Exception as e:
            failed = {i for i, _ in asks}
            for i in sorted(failed):
                self._fail(kept[i], e)
            return ([a for i, a in enumerate(kept) if i not in failed],
                    [o for i, o in enumerate(opened) if i not in failed],
                    time.perf_counter() - t0)
        for (i, _), b in zip(asks, blocks, strict=True):
            opened[i].block = b
        return kept, opened, time.perf_counter() - t0

    def _plan(self, order: list[Active], opened: list, shares: Sequence[int] | None
              ) -> tuple[list[Active], list]:
        kept, planned = [], []
        for k, (a, o) in enumerate(zip(order, opened, strict=True)):
            try:
                planned.append(plan_round(a.session, o, None if shares is None else shares[k]))
                kept.append(a)
            except Exception as e:
                self._fail(a, e)
        return kept, planned

    def _shares(self, order: list[Active], opened: list) -> Sequence[int] | None:
        """The divider's rows per request from each rule's offer (None: each rule chooses
        alone, as when a rule offers nothing or the divider has no cost law yet)."""
        if self.divider is None:
            return None
        # a round without a block verifies its anchor alone: it offers no further row
        offers = [[] if o.block is None else a.session.rule.offer(o.state, o.block)
                  for a, o in zip(order, opened, strict=True)]
        if any(g is None for g in offers):
            return None
        return self.divider.divide([list(g) for g in offers if g is not None],
                                   [a.slot.max_rows for a in order],
                                   [o.anchor_pos + 1 for o in opened],
                                   [a.slot.index for a in order])

