"""Replay for batches (issue 37, item 7): labelled replies decoding together, N at a time, under
a device model with a batch cost law, so the question of shared verify steps (the paper's third
open question, §7) has an answer for the devices the paper measured, not only this CPU.

**The batch law** (:class:`BatchLaw`; *synthetic*: the paper gives no batch numbers, so a law
built on its reconstructed device models is an extrapolation, and every output says so). A step
verifies ``R = sum_i r_i`` rows, request ``i``'s ``r_i`` rows at its context ``c_i``::

    T_step(R, c) = T(R, c)                      R <= W (the model's widest class)
                 = T(W, c) * R / W              R > W
    c = sum_i r_i c_i / R                       (the row-weighted mean context)

Why: a device model's T(n, c) (Eq. 3, §3.2) is the time of one verify of n rows, which on a dense
target is bound by reading the weights while n is inside a class and steps up between classes;
rows of several requests in one step read the weights once, so the step costs what one verify of
all its rows costs, the attention part at the rows' mean context. Past the widest class the
paper measured, every row is taken to cost the widest class's time per row (arithmetic bound:
linear). The drafter's D is paid once a step at the deepest block drafted (a draft model's
sequences draft together, one forward per position: :mod:`adaspark.decoding.slots`), the host
term once per request; the model's noise multiplies each priced time, drawn in step order.

**The replay** (:class:`LabelBatch`, :func:`replay_load`). The slots' step of
:class:`~adaspark.decoding.slots.Batch`, with each request's world its labels
(:class:`~adaspark.replay.loop.LabelWorld`: the labelled block, the path walked from the labels)
and each step priced by the law. Closed loop: ``clients`` requests in flight, the next one
admitted as one ends, the replies in the order given; a slot's widest tree is a fast-mode
server's (:func:`~adaspark.decoding.slots.slot_rows`). Each slot keeps its rule from request to
request (AdaSpark's store carried, as the server's slots keep theirs), and AdaSpark's rows are
divided by the batch rule (:class:`~adaspark.rules.adaspark.batch.BatchChooser`) learning the
law's prices online, as in a server.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from adaspark.decoding.drafter.base import Block
from adaspark.decoding.loop import RequestSession, Verified
from adaspark.decoding.round import WidthRule, offers_rows
from adaspark.decoding.slots import (
    Active,
    Batch,
    RowDivider,
    SlotTarget,
    StepRecord,
    StepTimes,
    slot_rows,
)
from adaspark.replay.device import DeviceModel, NoiseSource
from adaspark.replay.labels import PromptLabels
from adaspark.replay.loop import LabelWorld

#: How the batch law's outputs are labelled wherever they are shown (module docstring).
BATCH_LAW_LABEL = "synthetic batch law on {label} device model {name}"


@dataclass
class BatchLaw:
    """A step's prices under ``device`` for a drafter of ``drafter_kind`` (module docstring)."""

    device: DeviceModel
    drafter_kind: str | None = None
    noise: NoiseSource = field(init=False)

    def __post_init__(self) -> None:
        self.noise = self.device.noise_source()

    @property
    def label(self) -> str:
        return BATCH_LAW_LABEL.format(label=self.device.label, name=self.device.ident)

    def verify_s(self, rows: Sequence[int], contexts: Sequence[int]) -> float:
        """``T_step`` of the module docstring, noise-free."""
        total = int(sum(rows))
        if total < 1 or len(rows) != len(contexts):
            raise ValueError(f"a step needs a row count per request and at least one row, not "
                             f"rows {list(rows)} at contexts {list(contexts)}")
        c = round(sum(r * x for r, x in zip(rows, contexts, strict=True)) / total)
        widest = self.device.max_rows
        if total <= widest:
            return self.device.verify_s(total, c)
        return self.device.verify_s(widest, c) * total / widest

    def price(self, rows: Sequence[int], contexts: Sequence[int],
              positions: Sequence[int]) -> tuple[float, float, float]:
        """A step's verify, drafting and host seconds, with noise (``positions``: each
        drafting request's block positions)."""
        verify = self.verify_s(rows, contexts) * self.noise.factor()
        draft = (self.device.draft_s_of(self.drafter_kind, max(positions))
                 * self.noise.factor()) if positions else 0.0
        host = self.device.host_s * len(rows) * self.noise.factor()
        return verify, draft, host


class LabelSlot:
    """A slot of a replayed batch: its index and its widest tree (nothing to free)."""

    def __init__(self, index: int, max_rows: int) -> None:
        self.index, self.max_rows = index, max_rows

    def discard(self) -> None:
        pass


@dataclass
class LabelSlots:
    """What :class:`~adaspark.decoding.slots.Batch` reads of its target: the slots and the
    context (a replay's is as long as its labels)."""

    slots: list[LabelSlot]
    n_ctx: int


class LabelBatch(Batch):
    """:class:`~adaspark.decoding.slots.Batch`'s step over labelled replies, priced by a
    :class:`BatchLaw` (module docstring). ``rules[k]`` is slot ``k``'s rule for every request it
    serves."""

    def __init__(self, law: BatchLaw, rules: Sequence[WidthRule], max_rows: int,
                 block_positions: int, *, divider: RowDivider | None = None,
                 n_ctx: int = 1 << 20) -> None:
        slots = LabelSlots([LabelSlot(k, max_rows) for k in range(len(rules))], n_ctx)
        super().__init__(cast(SlotTarget, slots), [None] * len(rules), block_positions,
                         divider=divider)
        self.law = law
        self.rules = list(rules)
        self.clock = 0.0  # the priced seconds of every step so far

    def admit_labels(self, labels: PromptLabels, max_tokens: int, request_id: str | None
                     ) -> Active:
        """Start the reply ``labels`` in a free slot, with that slot's rule."""
        free = self.free_slots()
        if not free:
            raise ValueError("every slot is busy")
        k = free[0]
        slot = self.target.slots[k]
        world = LabelWorld(labels, cast(Any, None), slot.max_rows, self.target.n_ctx)
        session = RequestSession(self.rules[k], list(labels.prompt), request_id,
                                 keep_records=True)
        session.__enter__()
        a = Active(cast(Any, slot), cast(Any, world), session, max_tokens, self.clock,
                   self.clock)
        self.active[k] = a
        return a

    def _blocks(self, asks: list[tuple[Active, int]]) -> list[Block]:
        return [a.world.draft(n) for a, n in asks]

    def _verify(self, order: list[Active], opened: list) -> tuple[list[Verified], StepTimes]:
        rows = [o.plan.tree.n_rows for o in opened]
        contexts = [o.anchor_pos + 1 for o in opened]
        positions = [o.block.B for o in opened if o.block is not None]
        verify, draft, host = self.law.price(rows, contexts, positions)
        step = verify + draft + host
        self.clock += step
        out = []
        for a, o in zip(order, opened, strict=True):
            world = cast(LabelWorld, a.world)
            path, new = world.walk(o.plan.tree)
            if o.block is not None:
                o.block.draft_s = draft
            out.append(Verified(path, new, verify, fixed_s=draft + host, draft_s=draft,
                                round_s=step))
        return out, StepTimes(verify, step_s=step, draft_s=draft)


@dataclass
class LoadReplay:
    """A closed-loop replay's outcome: each reply's session (its tokens, rounds and priced
    decode time), the steps, and the priced seconds in all."""

    clients: int
    replies: list[RequestSession]
    steps: list[StepRecord]
    seconds: float
    label: str

    @property
    def tokens(self) -> int:
        return sum(len(s.tokens) for s in self.replies)

    @property
    def aggregate_tps(self) -> float:
        """Every reply's tokens over the priced seconds of the whole load."""
        return self.tokens / self.seconds if self.seconds > 0 else float("nan")

    @property
    def rows_per_request_step(self) -> float:
        """Verify rows per request and step (anchors included), over every step."""
        n = sum(len(s.rows) for s in self.steps)
        return sum(s.total_rows for s in self.steps) / n if n else float("nan")

    def summary(self) -> dict[str, Any]:
        per = sorted(len(s.tokens) / s.decode_s for s in self.replies if s.decode_s > 0)
        return {"clients": self.clients, "replies": len(self.replies), "tokens": self.tokens,
                "seconds": self.seconds, "aggregate_tps": self.aggregate_tps,
                "decode_tps_p50": per[len(per) // 2] if per else None,
                "rows_per_request_step": self.rows_per_request_step,
                "requests_per_step": (sum(len(s.rows) for s in self.steps) / len(self.steps)
                                      if self.steps else None),
                "steps": len(self.steps), "label": self.label}


def replay_load(make_rule: Callable[[], WidthRule], labels: Sequence[PromptLabels], *,
                clients: int, max_tokens: int | Sequence[int], law: BatchLaw, max_rows: int,
                block_positions: int, divider: RowDivider | None = None) -> LoadReplay:
    """Every reply of ``labels`` (up to ``max_tokens`` tokens each, or its own cap from a list),
    ``clients`` at a time, under ``law`` (module docstring); a rule per slot from
    ``make_rule``."""
    if clients < 1:
        raise ValueError(f"clients must be at least 1, not {clients}")
    caps = [max_tokens] * len(labels) if isinstance(max_tokens, int) else list(max_tokens)
    if len(caps) != len(labels):
        raise ValueError(f"{len(labels)} replies need as many caps, not {len(caps)}")
    batch = LabelBatch(law, [make_rule() for _ in range(clients)], max_rows, block_positions,
                       divider=divider)
    queue = deque(enumerate(labels))
    done: dict[int, RequestSession] = {}
    ids: dict[int, int] = {}
    while queue or batch.active:
        while queue and batch.free_slots():
            i, lab = queue.popleft()
            a = batch.admit_labels(lab, caps[i], f"r{i}")
            ids[id(a.session)] = i
        for a in batch.step():
            if a.error is not None:
                raise RuntimeError(f"reply {ids[id(a.session)]} failed in a replayed step: "
                                   f"{a.error}")
            done[ids[id(a.session)]] = a.session
    return LoadReplay(clients, [done[i] for i in sorted(done)], batch.steps, batch.clock,
                      law.label)


def replay_arm_load(cfg: Any, arm: Any, run_dir: Path, *, device: str, clients: Sequence[int],
                    replies_of: str, labels: Path, replies: int = 0,
                    labels_arm: Any = None, engine: bool = False) -> list[dict[str, Any]]:
    """``arm``'s closed-loop batch replay at each number of ``clients`` over ``run_dir``'s
    replies of ``replies_of`` (its first ``replies``; 0: all), under ``device`` (a name of
    ``conf/device/`` or a file) with the batch law, from the labels stage's store under
    ``labels`` (``labels_arm``'s, for an arm without a drafter: any drafter's labels hold the
    text). AdaSpark's arms divide each step's rows with the batch rule. The labels reach as far
    past each reply as the labels stage labels (the n-gram chains' depth limit, plus two), made
    on the engine where the store has fewer only when ``engine``. One summary per point
    (:meth:`LoadReplay.summary`), with the arm, the device and its label."""
    from adaspark.arms import make_arm_rule
    from adaspark.decoding.round_trace import read_traces
    from adaspark.replay.command import Labeller, arm_trace_dir, traces_sampling
    from adaspark.replay.device import load_device
    from adaspark.replay.labels import label_depth, prompt_key
    from adaspark.rules.adaspark.batch import BatchChooser
    from adaspark.schema import scheduler_mapping

    traces = read_traces(arm_trace_dir(run_dir, replies_of))
    if replies:
        traces = traces[:replies]
    sampling, seeds = traces_sampling(traces)
    model = load_device(device)
    scheduler = scheduler_mapping(cfg)  # an arm's view changes its drafter only
    rule = make_arm_rule(arm, scheduler)
    labelled = arm if rule.uses_drafter or labels_arm is None else labels_arm
    labeller = Labeller(cfg, labelled, labels, engine=engine, sampling=sampling)
    depth = label_depth(scheduler)
    try:
        got = labeller.labels([(t.prompt, labeller.positions(t, depth)) for t in traces],
                              {prompt_key(t.prompt): t.tokens for t in traces}, seeds)
        kind = labeller.identity.get("drafter_kind") if labeller.drafted else None
    finally:
        labeller.close()
    meta0 = traces[0].meta
    max_rows = min(model.max_rows, int(meta0["max_rows"]))
    out = []
    for n in clients:
        law = BatchLaw(model, kind if rule.uses_drafter else None)
        r = replay_load(lambda: make_arm_rule(arm, scheduler),
                        [got[prompt_key(t.prompt)] for t in traces], clients=n,
                        max_tokens=[int(t.max_tokens) for t in traces], law=law,
                        max_rows=min(max_rows, slot_rows(n, exact=False)),
                        block_positions=int(meta0["block_positions"]),
                        divider=BatchChooser() if offers_rows(rule) else None)
        out.append({"arm": str(arm.name), "device": model.name, "device_label": model.label,
                    "device_sha256": model.sha256, **r.summary()})
    return out
