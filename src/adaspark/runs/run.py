"""The conversation runner: one arm over a subset of the test set, over HTTP (§4.1, Appendix A).

The protocol (Appendix A): "multi-turn conversations over each engine's HTTP API, with each
engine's own replies carried as history". For each conversation of the subset, in the published
order, the turns go in order; each reply runs to its end or to the run's cap. A turn with a
recorded tool result (ToolACE) gives two timed replies when the model calls a tool: the call, and
the answer after the recorded result is returned; "when the model answers without calling, the
second reply does not run". When one reply makes several calls and the recorded result is a JSON
list with one entry per call, each call gets its entry; otherwise each call gets the whole
recorded result (our choice; the paper does not say).

Per reply one row (:class:`~adaspark.runs.rows.ReplyRow`), appended to ``replies.parquet`` in the
run's directory as soon as the reply ends, atomically (a new file replaces the old). A killed run
resumes at the first missing reply: replies already written are not sent again, and their stored
text and tool calls rebuild the history. ``run.json`` holds the run's fingerprint (engine binary,
model files, arm and run config); a run refuses to append to results with another fingerprint.

Run order (``run.order``, :mod:`adaspark.runs.order`): ``sequential`` runs the arms one after
another; ``interleaved`` keeps a group's servers up together and sends each reply to every arm of
the group in turn, each arm walking the protocol exactly as it would alone (:class:`ArmWalk`).
``run.json`` records the order and the group, and a resume refuses (or restarts) a run made in
another order. A killed interleaved run resumes like a sequential one: each arm skips the replies
it has stored.

Statuses (HARNESS "Caps and loops", "Client clock"): ``looped`` (reached the protocol cap of
8,192 tokens), ``single-delta`` (at most one token event), ``cut`` (reached the run's shorter
cap, or the context), ``finished``; the first that applies, in that order.

Resumes and text. A resumed run's new server has none of the conversation in its cache. Our engine's
KV does not depend on that (:class:`adaspark.decoding.engine.Target`, "Prefill and history"), so a
resumed reply is the one an uninterrupted run makes, in fast mode too. llama-server keeps its own
prompt cache, whose cells its verify batches wrote, and a fresh one has none: there a reply a
resumed run makes (mid-conversation, or the next conversation's first, whose system prompt the
uninterrupted server had cached) can differ from its uninterrupted twin at a near tie (fast
kernels). Rows a resumed run made carry ``after_resume = 1``; the check stage counts them.
"""

from __future__ import annotations

import sys
import time
import traceback
from collections.abc import Callable, Generator, Iterator
from contextlib import ExitStack
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from omegaconf import DictConfig

from adaspark.runs.conversation import (
    Planned,
    conversation_done,
    plan_subset,
    row_message,
    tool_result_messages,
)
from adaspark.runs.fingerprint import fingerprint
from adaspark.runs.launch import launch
from adaspark.runs.order import RunUnit, interleave, protocol_slots
from adaspark.runs.progress import ArmSummary, ProgressView, summarize
from adaspark.runs.rows import ReplyRow, make_row, reply_id, reply_seed
from adaspark.runs.settings import (
    ArmEntry,
    RunConfigError,
    RunError,
    RunMismatchError,
    RunSettings,
    arm_config,
    run_sampling,
)
from adaspark.runs.store import (
    CRASH_FILE,
    SUMMARY_FILE,
    ResultStore,
    RunLock,
    clear_run_dir,
    write_run_json,
)
from adaspark.schema import ArmConfig
from adaspark.serving.client import ChatClient, ServerReplyError
from adaspark.testset import SetFile, load_checked_sets

Key = tuple[str, str, int, int]


@dataclass
class Request:
    """One timed reply an arm is to send: its place in the protocol and the history."""

    planned: Planned
    turn: int
    reply: int
    messages: list[dict[str, Any]]
    message: dict[str, Any] | None = None  # the reply, once sent

    @property
    def key(self) -> Key:
        return (self.planned.set_name, self.planned.conversation.name, self.turn, self.reply)


class ArmWalk:
    """One arm's way through the plan (Appendix A: its own replies carried as history): the
    key of the next reply it sends (:meth:`next_key`), the request (:meth:`request`), and
    moving on with the reply (:meth:`answer`). Stored replies are not sent again: their text
    and tool calls rebuild the history; stored conversations are skipped."""

    def __init__(self, plan: list[Planned], done: dict[Key, dict[str, Any]]) -> None:
        self._done = done
        self._requests = self._walk([p for p in plan if not conversation_done(p, done)])
        self._next: Request | None = next(self._requests, None)

    def next_key(self) -> Key | None:
        return None if self._next is None else self._next.key

    def request(self) -> Request:
        if self._next is None:
            raise RunError("the arm has no reply left to send")
        return self._next

    def answer(self, message: dict[str, Any]) -> None:
        self.request().message = message
        self._next = next(self._requests, None)

    def _walk(self, plan: list[Planned]) -> Iterator[Request]:
        for p in plan:
            messages: list[dict[str, Any]] = []
            for ti, turn in enumerate(p.conversation.turns[: p.n_turns]):
                messages.append({"role": "user", "content": turn.text})
                msg0 = yield from self._reply(p, ti, 0, messages)
                messages.append(msg0)
                if turn.result is None or not msg0.get("tool_calls"):
                    continue
                messages += tool_result_messages(msg0["tool_calls"], turn.result)
                msg1 = yield from self._reply(p, ti, 1, messages)
                messages.append(msg1)

    def _reply(self, p: Planned, ti: int, ri: int,
               messages: list[dict[str, Any]]) -> Generator[Request, None, dict[str, Any]]:
        stored = self._done.get((p.set_name, p.conversation.name, ti, ri))
        if stored is not None:
            return row_message(stored)
        req = Request(p, ti, ri, list(messages))
        yield req
        if req.message is None:
            raise RunError(f"reply {req.key} was passed without an answer")
        return req.message


@dataclass
class _ArmRun:
    """One arm of a run unit: its results directory and what is stored there."""

    entry: ArmEntry
    arm: ArmConfig
    out_dir: Path
    store: ResultStore
    digest: str
    done: dict[Key, dict[str, Any]]
    resumed_from: int
    n_expected: int
    pending: dict[tuple[str, str], Planned]
    walk: ArmWalk


def open_arm(cfg: Any, entry_text: str, out_dir: Path, settings: RunSettings,
              plan: list[Planned], unit: RunUnit, on_mismatch: str,
              prior: list[dict[str, Any]] | None = None,
              launcher: dict[str, Any] | None = None) -> _ArmRun:
    """Check (or create) the arm's ``run.json``; read what it has stored (and ``prior``: rows
    stored elsewhere, which a cluster node's run resumes from). ``launcher``: how the run is
    spread over machines (:mod:`adaspark.runs.cluster`), part of the fingerprint."""
    entry = ArmEntry.parse(entry_text)
    arm = arm_config(cfg, entry)
    store = ResultStore(out_dir)
    order = unit.record(entry_text)
    if launcher is not None:
        order = {**order, "launcher": launcher}
    fp = fingerprint(cfg, arm, settings, plan, order)
    try:
        digest = store.fingerprint_check(fp)
        store.check_rows(store.rows(), entry.entry, digest)  # rows another run made
    except RunMismatchError as e:
        if on_mismatch == "refuse":
            raise
        print(f"run {entry.entry}: starting over. {e}", file=sys.stderr)
        clear_run_dir(out_dir)  # its lock stays held
        digest = store.fingerprint_check(fp)
    done = {(r["set"], r["conversation"], r["turn"], r["reply"]): r
            for r in [*(prior or []), *store.rows()]}
    pending = {(p.set_name, p.conversation.name): p for p in plan
               if not conversation_done(p, done)}
    return _ArmRun(entry, arm, out_dir, store, digest, done, len(done),
                   sum(p.n_timed for p in plan), pending, ArmWalk(plan, done))


def run_unit(cfg: Any, unit: RunUnit, dirs: dict[str, Path], settings: RunSettings, *,
             sets: list[SetFile] | None = None, view: ProgressView | None = None,
             on_reply: Callable[[ReplyRow], None] | None = None,
             on_mismatch: str = "refuse",
             only: set[tuple[str, str]] | None = None,
             prior: dict[str, list[dict[str, Any]]] | None = None) -> list[ArmSummary]:
    """Run the unit's arms (one arm, or an interleaved group: :mod:`adaspark.runs.order`) over
    the settings' subset, each into ``dirs[entry]`` (resuming what is there); their summaries
    in the unit's order.

    ``on_mismatch``: what to do when a directory holds results with another fingerprint:
    ``refuse`` (raise :class:`RunMismatchError`) or ``restart`` (delete them, saying what
    changed, and run from the start: what DVC does to a changed stage's outputs).
    ``summary.json`` is written for each arm that sent a reply or has none yet.

    A cluster node's share of a run (:mod:`adaspark.runs.cluster`): ``only`` keeps the plan's
    conversations ``(set, conversation)`` listed, and ``prior`` gives each entry's replies stored
    by the run's driver (the history of a conversation begun before a node died).
    """
    if on_mismatch not in ("refuse", "restart"):
        raise RunError(f"on_mismatch must be 'refuse' or 'restart', not {on_mismatch!r}")
    if len(unit.entries) > 1 and settings.port:
        raise RunConfigError(f"run.port={settings.port} with the interleaved group "
                             f"{unit.group!r}: its servers are up together and need a port "
                             "each; set run.port=0 (a free port per arm)")
    t_start = time.monotonic()
    dirs = {e: Path(dirs[e]) for e in unit.entries}
    for e, d in dirs.items():
        arm_config(cfg, ArmEntry.parse(e))  # every arm is refused before anything is written
        if d.exists() and not d.is_dir():
            raise RunError(f"the run directory {d} is a file: name a directory (created when "
                           "missing) for the arm's results")
    # Everything that can be refused is checked before run.json is written, so that a bad
    # subset or test set leaves no directory that a corrected rerun would have to clear.
    if sets is None:
        sets = load_checked_sets(settings.testset_dir())
    plan = plan_subset(sets, settings.subset)
    if only is not None:
        plan = [p for p in plan if (p.set_name, p.conversation.name) in only]
    with ExitStack() as held:  # one writer per run directory, for the run's life
        for d in dirs.values():
            held.enter_context(RunLock(d))
        arms = [open_arm(cfg, e, dirs[e], settings, plan, unit, on_mismatch,
                          prior=(prior or {}).get(e)) for e in unit.entries]
        active = [a for a in arms if a.pending]
        own_view = view is None
        view = view or ProgressView()
        for a in active:
            (a.out_dir / CRASH_FILE).unlink(missing_ok=True)
        try:
            with view if own_view else _nullcontext():
                for a in arms:
                    view.arm(a.entry.entry, a.n_expected, a.n_expected -
                             sum(p.n_timed for p in a.pending.values()))
                if active:
                    _serve(cfg, unit, active, plan, settings, view, on_reply)
        except BaseException as e:
            for a in active:
                write_run_json(a.out_dir / CRASH_FILE, {
                    "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc(),
                    "time": datetime.now(UTC).isoformat()})
            raise
        wall_s = time.monotonic() - t_start
        summaries = []
        for a in arms:
            s = summarize(a.entry, a.arm.engine, a.out_dir, a.store.rows(), a.n_expected,
                          a.resumed_from, wall_s)
            if a in active or not (a.out_dir / SUMMARY_FILE).exists():
                write_run_json(a.out_dir / SUMMARY_FILE, asdict(s))
            summaries.append(s)
        return summaries


def _serve(cfg: Any, unit: RunUnit, active: list[_ArmRun], plan: list[Planned],
           settings: RunSettings, view: ProgressView,
           on_reply: Callable[[ReplyRow], None] | None) -> None:
    """Start the active arms' servers together and send every missing reply, in the order
    :func:`adaspark.runs.order.interleave` gives (one arm: the protocol's order)."""
    label = unit.group if len(active) > 1 and unit.group else active[0].entry.entry
    sampling = run_sampling(cfg)
    with ExitStack() as stack:
        procs, clients = [], []
        for a in active:
            proc = stack.enter_context(launch(cfg, a.entry, a.arm, a.out_dir, settings))
            procs.append(proc)
            clients.append(stack.enter_context(
                ChatClient(proc.url, timeout_s=settings.request_timeout_s)))
        for a, proc, client in zip(active, procs, clients, strict=True):
            a.store.note(server={"url": proc.url, "argv": proc.argv, "models": client.models(),
                                 "pid": proc.proc.pid if proc.proc else None},
                         resumes=_resumes(a.store, a.resumed_from,
                                          [b.entry.entry for b in active if b is not a]))
        sent = [0] * len(active)
        conv_now: tuple[str, str] | None = None

        def close(conv: tuple[str, str]) -> None:
            """The conversation's stored and skipped replies count as done."""
            for i, a in enumerate(active):
                if conv in a.pending:
                    view.reply(a.entry.entry, None, a.pending[conv].n_timed - sent[i])
                sent[i] = 0

        for i, key in interleave(protocol_slots(plan), [a.walk for a in active]):
            if key[:2] != conv_now:
                if conv_now is not None:
                    close(conv_now)
                conv_now = (key[0], key[1])
                view.conversation(label, f"{key[0]}/{key[1]}", sum(
                    a.pending[conv_now].n_timed for a in active if conv_now in a.pending))
            a, proc, client = active[i], procs[i], clients[i]
            req = a.walk.request()
            rid = reply_id(*key)
            sampled = (None if sampling is None  # run_sampling: None when greedy
                       else replace(sampling, seed=reply_seed(sampling.seed, rid)))
            try:
                reply = client.chat(req.messages, max_tokens=settings.max_tokens,
                                    tools=req.planned.conversation.tools,
                                    request_id=rid, sampling=sampled)
            except (httpx.HTTPError, ServerReplyError) as e:
                raise RunError(
                    f"{a.entry.entry}: a request to {proc.url} failed ({e}); the server log "
                    f"{proc.log_path} ends:\n{proc.log_tail()}") from e
            a.walk.answer(reply.message())
            row = make_row(reply, entry=a.entry, engine=a.arm.engine,
                           set_name=req.planned.set_name, conv=req.planned.conversation,
                           turn=req.turn, reply_index=req.reply, max_tokens=settings.max_tokens,
                           protocol_cap=settings.protocol_cap, fingerprint=a.digest,
                           after_resume=a.resumed_from > 0,
                           seed=-1 if sampled is None else sampled.seed)
            a.store.append(row)
            a.done[row.key] = asdict(row)
            sent[i] += 1
            view.reply(a.entry.entry, row)
            if on_reply is not None:
                on_reply(row)
        if conv_now is not None:
            close(conv_now)


def run_arm(cfg: Any, entry_text: str, out_dir: Path, settings: RunSettings, *,
            sets: list[SetFile] | None = None, view: ProgressView | None = None,
            on_reply: Callable[[ReplyRow], None] | None = None,
            on_mismatch: str = "refuse") -> ArmSummary:
    """Run one arm alone over the settings' subset into ``out_dir`` (:func:`run_unit`)."""
    return run_unit(cfg, RunUnit((entry_text,)), {entry_text: Path(out_dir)}, settings,
                    sets=sets, view=view, on_reply=on_reply, on_mismatch=on_mismatch)[0]


def _resumes(store: ResultStore, resumed_from: int,
             interleaved_with: list[str]) -> list[dict[str, Any]]:
    """``run.json``'s list of sessions, with this one: the replies stored before it and the
    arms whose replies it interleaved with this arm's (those of the group with replies left)."""
    d = store.run_meta()
    resumes = list(d.get("resumes", []))
    from adaspark.provenance import git_state

    resumes.append({"time": datetime.now(UTC).isoformat(), "stored_replies": resumed_from,
                    "interleaved_with": interleaved_with, "git": git_state()})
    return resumes


class _nullcontext:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def compose_for_run(args: list[str]) -> DictConfig:
    """Compose ``conf/`` for a standalone run (``adaspark run``, the benchmark): adds the ``run``
    group when the defaults list lacks it, and every arm named in ``run_arms`` that is not
    composed under ``arms.`` yet (``+arm@arms.<name>=<name>``)."""
    from adaspark.config import compose

    base = compose([a for a in args if a.startswith("run_arms=")])
    extra = [] if "run" in base else ["+run=default"]
    cfg = compose(extra + args)
    missing = [ArmEntry.parse(str(e)).name for e in cfg.get("run_arms") or []]
    missing = [m for m in dict.fromkeys(missing) if m not in (cfg.get("arms") or {})]
    if missing:
        cfg = compose(extra + [f"+arm@arms.{m}={m}" for m in missing] + args)
    return cfg
