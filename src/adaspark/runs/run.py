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

import shutil
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import asdict
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
from adaspark.runs.progress import ArmSummary, ProgressView, summarize, summary_table
from adaspark.runs.rows import ReplyRow, make_row, reply_id
from adaspark.runs.settings import (
    ArmEntry,
    RunError,
    RunMismatchError,
    RunSettings,
    arm_config,
)
from adaspark.runs.store import CRASH_FILE, SUMMARY_FILE, ResultStore, write_run_json
from adaspark.serving.client import ChatClient, Reply, ServerReplyError
from adaspark.testset import SetFile, load_checked_sets


def _timed_replies(client: ChatClient, p: Planned, done: dict[tuple[str, str, int, int],
                   dict[str, Any]], *, max_tokens: int) -> Iterator[tuple[int, int, Reply | None,
                                                                           dict[str, Any]]]:
    """Walk one conversation: yield ``(turn, reply, Reply or None when stored, message)``."""
    conv = p.conversation
    messages: list[dict[str, Any]] = []

    def reply(ti: int, ri: int) -> tuple[Reply | None, dict[str, Any]]:
        """Reply ``ri`` of turn ``ti``: the stored row's message, or a timed request now."""
        stored = done.get((p.set_name, conv.name, ti, ri))
        if stored is not None:
            return None, row_message(stored)
        r = client.chat(messages, max_tokens=max_tokens, tools=conv.tools,
                        request_id=reply_id(p.set_name, conv.name, ti, ri))
        return r, r.message()

    for ti, turn in enumerate(conv.turns[: p.n_turns]):
        messages.append({"role": "user", "content": turn.text})
        r0, msg0 = reply(ti, 0)
        yield ti, 0, r0, msg0
        messages.append(msg0)
        if turn.result is None or not msg0.get("tool_calls"):
            continue
        messages += tool_result_messages(msg0["tool_calls"], turn.result)
        r1, msg1 = reply(ti, 1)
        yield ti, 1, r1, msg1
        messages.append(msg1)


def run_arm(cfg: Any, entry_text: str, out_dir: Path, settings: RunSettings, *,
            sets: list[SetFile] | None = None, view: ProgressView | None = None,
            on_reply: Callable[[ReplyRow], None] | None = None,
            on_mismatch: str = "refuse") -> ArmSummary:
    """Run one arm over the settings' subset into ``out_dir`` (resuming what is there).

    ``on_mismatch``: what to do when ``out_dir`` holds results with another fingerprint:
    ``refuse`` (raise :class:`RunMismatchError`) or ``restart`` (delete them, saying what
    changed, and run from the start: what DVC does to a changed stage's outputs).
    """
    if on_mismatch not in ("refuse", "restart"):
        raise RunError(f"on_mismatch must be 'refuse' or 'restart', not {on_mismatch!r}")
    t_start = time.monotonic()
    entry = ArmEntry.parse(entry_text)
    arm = arm_config(cfg, entry)
    engine = arm.engine
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise RunError(f"the run directory {out_dir} is a file: name a directory (created when "
                       "missing) for the arm's results")
    # Everything that can be refused is checked before run.json is written, so that a bad
    # subset or test set leaves no directory that a corrected rerun would have to clear.
    if sets is None:
        sets = load_checked_sets(settings.testset_dir())
    plan = plan_subset(sets, settings.subset)
    store = ResultStore(out_dir)
    fp = fingerprint(cfg, arm, settings, plan)
    try:
        digest = store.fingerprint_check(fp)
    except RunMismatchError as e:
        if on_mismatch == "refuse":
            raise
        print(f"run {entry.entry}: starting over. {e}", file=sys.stderr)
        shutil.rmtree(out_dir)
        digest = store.fingerprint_check(fp)
    n_expected = sum(p.n_timed for p in plan)
    rows = store.rows()
    done = {(r["set"], r["conversation"], r["turn"], r["reply"]): r for r in rows}
    resumed_from = len(done)
    own_view = view is None
    view = view or ProgressView()
    pending = [p for p in plan if not conversation_done(p, done)]
    (out_dir / CRASH_FILE).unlink(missing_ok=True)
    try:
        with view if own_view else _nullcontext():
            view.arm(entry.entry, n_expected,
                     sum(p.n_timed for p in plan if not any(p is q for q in pending)))
            if pending:
                proc = launch(cfg, entry, arm, out_dir, settings)
                with proc, ChatClient(proc.url,
                                                timeout_s=settings.request_timeout_s) as client:
                    meta = client.models()
                    store.note(server={"url": proc.url, "argv": proc.argv, "models": meta,
                                       "pid": proc.proc.pid if proc.proc else None},
                               resumes=_resumes(store, resumed_from))
                    for p in pending:
                        view.conversation(entry.entry, f"{p.set_name}/{p.conversation.name}",
                                          p.n_timed)
                        n_conv = 0
                        walk = _timed_replies(client, p, done, max_tokens=settings.max_tokens)
                        while True:
                            try:
                                ti, ri, reply, _msg = next(walk)
                            except StopIteration:
                                break
                            except (httpx.HTTPError, ServerReplyError) as e:
                                raise RunError(
                                    f"{entry.entry}: a request to {proc.url} failed ({e}); the "
                                    f"server log {proc.log_path} ends:\n{proc.log_tail()}"
                                ) from e
                            n_conv += 1
                            if reply is None:
                                view.reply(entry.entry, None)
                                continue
                            row = make_row(reply, entry=entry, engine=engine,
                                           set_name=p.set_name, conv=p.conversation, turn=ti,
                                           reply_index=ri, max_tokens=settings.max_tokens,
                                           protocol_cap=settings.protocol_cap,
                                           fingerprint=digest, after_resume=resumed_from > 0)
                            store.append(row)
                            done[row.key] = asdict(row)
                            view.reply(entry.entry, row)
                            if on_reply is not None:
                                on_reply(row)
                        if n_conv < p.n_timed:  # a tool turn answered without a call
                            view.reply(entry.entry, None, p.n_timed - n_conv)
    except BaseException as e:
        write_run_json(out_dir / CRASH_FILE, {
            "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc(),
            "time": datetime.now(UTC).isoformat()})
        raise
    summary = summarize(entry, engine, out_dir, store.rows(), n_expected, resumed_from,
                        time.monotonic() - t_start)
    write_run_json(out_dir / SUMMARY_FILE, asdict(summary))
    return summary


def _resumes(store: ResultStore, resumed_from: int) -> list[dict[str, Any]]:
    d = store.run_meta()
    resumes = list(d.get("resumes", []))
    from adaspark.provenance import git_state

    resumes.append({"time": datetime.now(UTC).isoformat(), "stored_replies": resumed_from,
                    "git": git_state()})
    return resumes


class _nullcontext:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def run_arms(cfg: Any, entries: list[str], out_root: Path, settings: RunSettings, *,
             stream: Any = None) -> list[ArmSummary]:
    """Several arms one after the other (``adaspark run``, the benchmark), one table at the
    end."""
    sets = load_checked_sets(settings.testset_dir())
    summaries = []
    with ProgressView(stream) as view:
        for e in entries:
            summaries.append(run_arm(cfg, e, out_root / e, settings, sets=sets, view=view))
        view.console.print(summary_table(summaries))
    return summaries


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
