"""Several requests served at once (issue 37): a bounded queue in front of the slots, and an
engine thread that admits, steps and ends requests between steps (continuous batching).

- ``max_concurrent`` requests decode together, one round each per step, in one ``llama_decode``
  (:class:`~adaspark.decoding.slots.Batch`).
- A request that finds every slot taken waits in a queue of at most ``max_queue`` requests, for
  at most ``queue_wait_s`` seconds (the server's ``busy_wait_s``); past either it gets 503 with
  ``Retry-After``. A request waits too while its prompt, ``max_tokens`` and widest tree do not
  fit the KV cache beside the active ones.
- A prefill runs alone, between steps (its slot's first sequence), so a step's time is the
  verify's and the cost model learns verifies only.
- A client that leaves (its job's ``cancel`` set) is ended at the next step; a queued one is
  dropped.
- :meth:`BatchRunner.metrics` (``GET /health``): slots, active requests, queue length, steps, and
  over the last steps the rows and requests per step and the step's time split into llama.cpp's
  part (the target's ``llama_decode`` and the read-out of its logits: each row's argmax over the
  vocabulary), the drafters' blocks and the host's own part per request (rules, staging,
  commits, the rounds' bookkeeping), and every request's outcome counted since the start
  (``requests``: queued, refused with the queue full, dropped while queued for waiting too long
  or for its client leaving, and, of those started, finished, cancelled or failed): each queued
  request ends in exactly one of the other counts. The engine thread logs them every
  ``LOG_EVERY_S`` seconds.
"""

from __future__ import annotations

import sys
import threading
import time
import traceback
from collections import Counter, deque
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from adaspark.decoding.engine import NEAR_TIE_GAP
from adaspark.decoding.round import offers_rows
from adaspark.decoding.slots import Active, Batch
from adaspark.rules.adaspark.batch import BatchChooser
from adaspark.serving.requests import RequestError
from adaspark.serving.service import ArmService, Job, JobResult, Reply

#: Seconds between the engine thread's log lines while it serves.
LOG_EVERY_S = 30.0
#: A request's outcomes (:meth:`BatchRunner.metrics`' ``requests``): ``queued`` is the sum of
#: the others but ``refused``, once nothing waits or runs.
OUTCOMES = ("queued", "refused", "dropped_busy", "dropped_left", "finished", "cancelled",
            "failed")
#: Steps whose rows :meth:`BatchRunner.metrics` averages.
RECENT_STEPS = 64


@dataclass
class Waiting:
    job: Job
    future: Future[JobResult]
    since: float = field(default_factory=time.monotonic)


@dataclass
class Running:
    job: Job
    future: Future[JobResult]
    reply: Reply
    active: Active
    queued_s: float
    steps: int = 0
    step_rows: int = 0
    companions: int = 0


def start_runner(service: ArmService, *, max_queue: int, queue_wait_s: float) -> BatchRunner:
    """Start the engine thread of ``service`` (built with several slots). In exact mode each
    reply's ``timings.near_ties`` counts its tokens whose top-2 logit gap is under 0.5: where a
    reply may leave its one-at-a-time text (:mod:`adaspark.decoding.slots`)."""
    p = service.parts
    # a rule that offers its rows' expected tokens (AdaSpark's learned widths) has its steps
    # divided by the batch rule; pinned, chain and plain rules batch with their own widths
    batch = Batch(p.target, p.drafters, p.block_positions, want_gaps=service.exact,
                  divider=BatchChooser() if offers_rows(p.rule) else None)
    service.runner = BatchRunner(service, batch, max_queue=max_queue, queue_wait_s=queue_wait_s)
    return service.runner


class BatchRunner:
    """The engine thread of a server with several slots (see the module docstring)."""

    def __init__(self, service: ArmService, batch: Batch, *, max_queue: int,
                 queue_wait_s: float) -> None:
        self.service = service
        self.batch = batch
        self.max_queue = max_queue
        self.queue_wait_s = queue_wait_s
        self.queue: deque[Waiting] = deque()
        self.running: dict[int, Running] = {}
        self.lock = threading.Lock()
        self.wake = threading.Event()
        self.stopping = False
        self.n_steps = 0
        self.last_log = time.monotonic()
        self.recent_rows: deque[int] = deque(maxlen=RECENT_STEPS)
        self.recent_active: deque[int] = deque(maxlen=RECENT_STEPS)
        #: (step, target decode, read-out, drafting, host) seconds of the recent steps
        self.recent_times: deque[tuple[float, ...]] = deque(maxlen=RECENT_STEPS)
        self.recent_errors: deque[float] = deque(maxlen=RECENT_STEPS)
        #: every request's outcome since the start (module docstring); under ``lock``
        self.outcomes: Counter[str] = Counter({k: 0 for k in OUTCOMES})
        self.thread = threading.Thread(target=self._loop, name="engine-batch", daemon=True)
        self.thread.start()

    # -- the HTTP side ------------------------------------------------------------------------

    def submit(self, job: Job) -> Future[JobResult] | None:
        """Queue ``job``; None when the queue is full (the caller answers 503)."""
        with self.lock:
            if self.stopping or len(self.queue) >= self.max_queue + self._free_now():
                self.outcomes["refused"] += 1
                return None
            w = Waiting(job, Future())
            self.queue.append(w)
            self.outcomes["queued"] += 1
        self.wake.set()
        return w.future

    def _free_now(self) -> int:
        return len(self.batch.target.slots) - len(self.running)

    def metrics(self) -> dict[str, Any]:
        with self.lock:
            rows = list(self.recent_rows)
            act = list(self.recent_active)
            times = list(self.recent_times)
            errors = list(self.recent_errors)
            outcomes = Counter(self.outcomes)
        mean = (lambda xs: sum(xs) / len(xs) if xs else None)  # noqa: E731
        host = [t[4] / a for t, a in zip(times, act, strict=True)]
        return {"slots": len(self.batch.target.slots), "active": len(self.running),
                "queued": len(self.queue), "max_queue": self.max_queue,
                "steps": self.n_steps, "rows_per_step": mean(rows),
                "active_per_step": mean(act),
                "step_ms": mean([t[0] * 1e3 for t in times]),
                "decode_ms_per_step": mean([t[1] * 1e3 for t in times]),
                "readout_ms_per_step": mean([t[2] * 1e3 for t in times]),
                "draft_ms_per_step": mean([t[3] * 1e3 for t in times]),
                "host_us_per_request_step": mean([h * 1e6 for h in host]),
                # the batch rule's cost law: its median relative error on the recent steps
                "step_cost_median_error": (sorted(errors)[len(errors) // 2] if errors
                                           else None),
                "requests": dict(outcomes)}

    def stop(self) -> None:
        with self.lock:
            self.stopping = True
        self.wake.set()
        self.thread.join(timeout=60)

    # -- the engine thread ----------------------------------------------------------------------

    def _loop(self) -> None:
        while True:
            try:
                if not self._turn():
                    return
            except Exception:  # a bug of ours: fail what is in flight, keep serving
                traceback.print_exc()
                self._fail_all("the server's engine thread failed; see its log")

    def _turn(self) -> bool:
        """One turn of the engine thread; False when it stops."""
        with self.lock:
            stopping = self.stopping
        if stopping:
            self._drain()
            return False
        self._drop_waiting()
        self._admit()
        self._end_cancelled()
        if not self.running:
            self.wake.wait(0.05)
            self.wake.clear()
            return True
        self._step()
        if time.monotonic() - self.last_log >= LOG_EVERY_S:
            self.last_log = time.monotonic()
            m = self.metrics()
            print(f"adaspark serve: {m['active']}/{m['slots']} slots, {m['queued']} "
                  f"queued, {m['steps']} steps, rows/step {m['rows_per_step']}",
                  file=sys.stderr, flush=True)
        return True

    def _fail_all(self, why: str) -> None:
        for k, r in list(self.running.items()):
            self.batch.finish(r.active)
            r.active.slot.reset()
            self._done(k, finished=False, stop="error", error=why)
        with self.lock:
            queue, self.queue = self.queue, deque()
            self.outcomes["failed"] += len(queue)
        for w in queue:
            if not w.future.done():
                w.future.set_exception(RequestError(500, why, kind="server_error"))

    def _drop_waiting(self) -> None:
        """Queued requests whose client left, or that waited past ``queue_wait_s``."""
        now = time.monotonic()
        with self.lock:
            gone = [w for w in self.queue
                    if w.job.cancel.is_set() or now - w.since > self.queue_wait_s]
            for w in gone:
                self.queue.remove(w)
                self.outcomes["dropped_left" if w.job.cancel.is_set() else "dropped_busy"] += 1
        for w in gone:
            if w.future.done():  # cancelled by its caller (asyncio.wrap_future) meanwhile
                continue
            if w.job.cancel.is_set():
                w.future.set_exception(RequestError(499, "the client left while queued",
                                                    kind="cancelled"))
            else:
                w.future.set_exception(RequestError(
                    503, f"busy: every one of the {len(self.batch.target.slots)} slots "
                    f"stayed taken for {self.queue_wait_s:g} s (busy_wait_s); retry later",
                    kind="server_busy"))

    def _admit(self) -> None:
        """Start queued requests, in arrival order, while a slot is free and the head fits."""
        while True:
            with self.lock:
                if not self.queue or not self.batch.free_slots():
                    return
                w = self.queue[0]
                if not self.batch.fits(len(w.job.prompt), w.job.max_tokens):
                    return  # the head waits for room (first come, first served)
                self.queue.popleft()
            if not w.future.set_running_or_notify_cancel():
                with self.lock:
                    self.outcomes["dropped_left"] += 1
                continue
            job = w.job
            self.service.n_requests += 1
            reply = Reply(job, self.service.parts.target)
            slot = self.batch.free_slots()[0]
            session = self.service.session_of(job, self.service.parts.rules[slot])
            try:
                active = self.batch.admit(session, job.max_tokens, reply.feed)
            except Exception as e:
                res = self.service.finish(job, reply, session, False, "error",
                                          f"{type(e).__name__}: {e}")
                with self.lock:
                    self.outcomes["failed"] += 1
                w.future.set_result(res)
                continue
            self.running[active.slot.index] = Running(job, w.future, reply, active,
                                                      time.monotonic() - w.since)

    def _end_cancelled(self) -> None:
        for k, r in list(self.running.items()):
            if r.job.cancel.is_set():
                self.batch.finish(r.active)
                self._done(k, finished=False, stop="cancelled")

    def _step(self) -> None:
        try:
            ended = self.batch.step()
        except Exception as e:  # every request of the step fails; the server keeps serving
            traceback.print_exc()
            err = f"{type(e).__name__}: {e}"
            for k, r in list(self.running.items()):
                self.batch.finish(r.active, e)
                r.active.slot.reset()
                self._done(k, finished=False, stop="error", error=err)
            return
        for a in [a for a in ended if a.error is not None]:
            self._done(a.slot.index, finished=False, stop="error", error=a.error)
        ended = [a for a in ended if a.error is None]
        if not self.batch.steps:  # every request of the step failed before its verify
            return
        rec = self.batch.steps[-1]
        self.batch.steps.clear()  # the server keeps counts, not every step
        with self.lock:
            self.n_steps += 1
            self.recent_rows.append(rec.total_rows)
            self.recent_active.append(len(rec.slots))
            self.recent_times.append((rec.step_s, rec.decode_s, rec.readout_s, rec.draft_s,
                                      rec.host_s))
            if rec.predicted_s is not None and rec.verify_s > 0:
                self.recent_errors.append(abs(rec.predicted_s / rec.verify_s - 1.0))
        for k in rec.slots:
            r = self.running.get(k)
            if r is not None:
                r.steps += 1
                r.step_rows += rec.total_rows
                r.companions += len(rec.slots) - 1
        for a in ended:
            self._done(a.slot.index, finished=True, stop=a.session.stop)

    def _done(self, k: int, *, finished: bool, stop: str, error: str | None = None) -> None:
        r = self.running.pop(k)
        n = max(r.steps, 1)
        extra: dict[str, Any] = {
            "queue_ms": r.queued_s * 1e3, "steps": r.steps, "rows_per_step": r.step_rows / n,
            "companions_per_step": r.companions / n, "slot": k}
        if self.batch.want_gaps:
            ties = [i for i, g in enumerate(r.active.session.gaps) if g < NEAR_TIE_GAP]
            extra["near_ties"] = len(ties)
            # where each stands in the text: a reply that leaves its one-at-a-time text must
            # have one at or before the first character that differs
            before = r.reply.chars_before
            extra["near_tie_chars"] = [before[i] for i in ties if i < len(before)]
        res = self.service.finish(r.job, r.reply, r.active.session, finished, stop, error,
                                  extra)
        with self.lock:
            self.outcomes["finished" if finished else
                          "cancelled" if stop == "cancelled" else "failed"] += 1
        r.future.set_result(res)

    def _drain(self) -> None:
        """Shutting down: end every request (cancelled) and answer the queue 503."""
        for k, r in list(self.running.items()):
            self.batch.finish(r.active)
            self._done(k, finished=False, stop="cancelled")
        with self.lock:
            queue, self.queue = self.queue, deque()
            self.outcomes["dropped_busy"] += len(queue)
        for w in queue:
            w.future.set_exception(RequestError(503, "the server is shutting down",
                                                kind="server_busy"))
