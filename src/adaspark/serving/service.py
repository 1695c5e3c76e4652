"""One arm's engine as a service (§4.1): one request at a time on one engine thread, the previous
request's KV reused for the longest common token prefix, each round's tokens handed to the HTTP
side through a queue, and the per-request counts (rounds, drafted and accepted candidates, by
source) that the last streamed chunk reports in ``timings``.
"""

from __future__ import annotations

import asyncio
import codecs
import hashlib
import json
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from adaspark.decoding.loop import RequestSession, decode, generate
from adaspark.decoding.round import room_left
from adaspark.decoding.sampling import SamplingParams
from adaspark.rules.base import make_rule
from adaspark.schema import ArmConfig
from adaspark.serving import chat, tool_calls
from adaspark.serving.requests import TOOL_FALLBACKS, ChatRequest, RequestError

# ---------------------------------------------------------------------------------------------
# The engine side


class _Cancelled(Exception):
    """Raised from the round callback to stop a decode whose client went away."""


def merge_deltas(deltas: list[dict[str, Any]]) -> dict[str, Any]:
    """One token's deltas as one delta object (content joined, call fragments per index)."""
    out: dict[str, Any] = {}
    content = "".join(d.get("content") or "" for d in deltas)
    if content:
        out["content"] = content
    calls: dict[int, dict[str, Any]] = {}
    for d in deltas:
        for tc in d.get("tool_calls") or []:
            cur = calls.get(tc["index"])
            if cur is None:
                calls[tc["index"]] = json.loads(json.dumps(tc))
            else:
                fn = cur.setdefault("function", {})
                fn["arguments"] = fn.get("arguments", "") + (tc.get("function") or {}).get(
                    "arguments", "")
    if calls:
        out["tool_calls"] = [calls[i] for i in sorted(calls)]
    return out


@dataclass
class Job:
    """One request's decode, handed to the engine thread."""

    prompt: list[int]
    max_tokens: int
    tool_format: str
    request_id: str | None = None
    emit: Callable[[tuple[str, Any]], None] | None = None
    cancel: threading.Event = field(default_factory=threading.Event)
    sampling: SamplingParams | None = None  # None: greedy decoding
    #: the queued job's result (a server with several slots, :mod:`adaspark.serving.batching`)
    future: Future[JobResult] | None = None


@dataclass
class JobResult:
    message: dict[str, Any]
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    timings: dict[str, Any]
    error: str | None = None


class Reply:
    """One request's reply as its tokens come: text decoded incrementally, tool calls parsed, the
    per-token deltas handed to the client (``job.emit``), the message assembled."""

    def __init__(self, job: Job, target: Any) -> None:
        self.job = job
        self.target = target
        self.decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self.parser = tool_calls.ReplyParser(job.tool_format,
                                             id_prefix=uuid.uuid4().hex[:8] + "_")
        self.assembler = tool_calls.MessageAssembler()
        self.n_out = 0
        #: per token, the characters of decoded text before it (where a near tie stands)
        self.chars_before: list[int] = []
        self._chars = 0

    def feed(self, tokens: list[int]) -> None:
        """A round's committed tokens: one list of deltas per token, emitted together."""
        t = self.target
        per_token = []
        for tok in tokens:
            piece = b"" if t.is_eog(tok) else t.token_bytes(tok)
            text = self.decoder.decode(piece)
            self.chars_before.append(self._chars)
            self._chars += len(text)
            deltas = self.parser.feed(text)
            for d in deltas:
                self.assembler.add(d)
            per_token.append(deltas)
        self.n_out += len(tokens)
        if self.job.emit is not None:
            self.job.emit(("round", per_token))

    def close(self, stop: str) -> tuple[dict[str, Any], str]:
        """Flush the held-back text (emitted as the ``tail``); the message and finish reason."""
        tail = self.parser.feed(self.decoder.decode(b"", final=True)) + self.parser.finish()
        for d in tail:
            self.assembler.add(d)
        if self.job.emit is not None and tail:
            self.job.emit(("tail", tail))
        finish = ("tool_calls" if self.assembler.calls else
                  "stop" if stop == "eog" else "cancelled" if stop == "cancelled" else "length")
        return self.assembler.message(), finish


def _json_safe(v: Any) -> Any:
    return json.loads(json.dumps(v, default=str))


class ArmService:
    """The one engine interface the routes call: render and tokenize a request, decode it.

    Built from a composed config (``target``, ``drafter``, ``threads``) and one arm's typed
    config.
    """

    def __init__(self, cfg: DictConfig, arm: ArmConfig, *, exact: bool, store_dir: Path,
                 chat_template: Path | None = None, round_log: Path | None = None,
                 trace_log: Path | None = None,
                 warmup: bool = True, tool_fallback: str = "generic",
                 sampling_defaults: SamplingParams | None = None,
                 max_concurrent: int) -> None:
        from adaspark import arms
        from adaspark.schema import arm_view

        cfg = arm_view(cfg, arm)  # the arm's own drafter, when its file names one
        if tool_fallback not in TOOL_FALLBACKS:
            raise ValueError(f"tool_fallback must be one of {TOOL_FALLBACKS}, not "
                             f"{tool_fallback!r}")
        self.tool_fallback = tool_fallback
        #: the sampling fields a request leaves out (None: this server decodes greedily only)
        self.sampling_defaults = sampling_defaults
        if arm.engine != "ours":
            raise ValueError(f"arm {arm.name} runs on {arm.engine}; start it "
                             "with adaspark.serving.llama_server, not `adaspark serve`")
        store_dir.mkdir(parents=True, exist_ok=True)
        extra: dict[str, Any] = {}
        if hasattr(arm.rule, "store"):  # rules with a learned store keep it in the store dir
            extra["store"] = str(store_dir / "store.json")
        if hasattr(arm.rule, "log_dir") and round_log is not None:
            extra["log_dir"] = str(round_log)
        self.arm = arm.as_mapping() | {"rule_extra": extra}
        self.exact = exact
        self.store_dir = store_dir
        #: several slots: requests decode together (:mod:`adaspark.serving.batching`)
        self.batched = max_concurrent > 1
        self.parts: Any
        if self.batched:
            from adaspark.decoding.slots import slot_rows
            from adaspark.decoding.tree import MAX_ROWS_EXACT, MAX_ROWS_FAST

            rows = slot_rows(max_concurrent, exact=exact)
            alone = MAX_ROWS_EXACT if exact else MAX_ROWS_FAST
            self.parts = arms.build_slots(cfg, arm, exact=exact, n_slots=max_concurrent,
                                          rule_extra=[self._slot_extra(extra, k, rows, alone)
                                                      for k in range(max_concurrent)])
        else:
            self.parts = arms.build(cfg, arm, exact=exact, **extra)
        t = self.parts.target
        if chat_template is not None:
            self.template = Path(chat_template).read_text(encoding="utf-8")
            self.template_source = str(chat_template)
        else:
            tpl = t.chat_template()
            if tpl is None:
                raise ValueError(f"{t.path.name} has no chat template; pass chat_template=FILE")
            self.template = tpl
            self.template_source = "model"
        ll_bos, ll_eos = self._special_texts()
        self.bos_text, self.eos_text = ll_bos, ll_eos
        self.caps = tool_calls.probe_template(self._render)
        self.model_id = f"{cfg.target.name}:{arm.name}"
        self.n_ctx = t.n_ctx
        #: the drafter's context (it prefills the prompt too), or None without a drafter
        self.drafter_n_ctx = (int(cfg.drafter.n_ctx) if self.parts.rule.uses_drafter
                              else None)
        self.busy = threading.Lock()
        self.current: Job | None = None
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="engine")
        self.n_requests = 0
        self.trace_log = trace_log  # every round's trace, per request (runs.round_trace)
        self.meta = self._meta(cfg)
        if warmup:
            self.executor.submit(self._warmup).result()
        #: the engine thread of a server with several slots (set by
        #: :func:`adaspark.serving.batching.start_runner`)
        self.runner: Any = None

    @staticmethod
    def _slot_extra(extra: dict[str, Any], k: int, rows: int, one_slot_rows: int
                    ) -> dict[str, Any]:
        """Slot ``k``'s rule keywords: its own store file, named by its widest verify (a store
        is written for one; each slot's rule learns alone). Slot 0's is the one-slot server's
        where their widest verifies agree, so a store carries over from ``max_concurrent=1``."""
        if "store" not in extra or (k == 0 and rows == one_slot_rows):
            return extra
        name = f"store-slot{k}-rows{rows}.json"
        return extra | {"store": str(Path(extra["store"]).with_name(name))}

    def _special_texts(self) -> tuple[str, str]:
        import llama_cpp as ll

        t = self.parts.target
        out = []
        for fn in (ll.llama_vocab_bos, ll.llama_vocab_eos):
            tok = int(fn(t.vocab))
            out.append(t.token_bytes(tok, special=True).decode("utf-8", "replace")
                       if tok >= 0 else "")
        return out[0], out[1]

    def _render(self, messages: list[dict[str, Any]], tools: Any = None) -> str:
        return chat.render(self.template, messages, tools=tools, bos_token=self.bos_text,
                           eos_token=self.eos_text)

    def _meta(self, cfg: DictConfig) -> dict[str, Any]:
        from adaspark import provenance

        return _json_safe({
            "arm": self.arm, "engine": "ours", "exact": self.exact,
            "n_ctx": self.n_ctx, "models": self.parts.models,
            "target": OmegaConf.to_container(cfg.target, resolve=True),
            "drafter": OmegaConf.to_container(cfg.drafter, resolve=True),
            "threads": cfg.get("threads"),
            "context_params": self.parts.target.context_params,
            "chat_template": {"source": self.template_source,
                              "sha256": hashlib.sha256(self.template.encode()).hexdigest(),
                              "tools": self.caps.tools, "format": self.caps.format,
                              "tool_fallback": self.tool_fallback},
            "store_dir": str(self.store_dir),
            "llama": provenance.llama_build(),
            "versions": provenance.versions(),
        })

    def _warmup(self) -> None:
        """One short plain decode (and one draft) before serving, as llama-server warms up, so
        the first request does not pay for lazy initialisation."""
        t = self.parts.target
        prompt = t.tokenize("Hello", add_special=True, parse_special=False) or [0]
        generate(t, prompt, 2, make_rule("ar"))
        for d in self.parts.drafters:
            if d is not None:
                d.begin(prompt)
                d.draft(prompt, 1)
        t.reset()

    # -- requests -------------------------------------------------------------------------

    def prompt_tokens(self, req: ChatRequest) -> tuple[list[int], str]:
        """Render and tokenize a request; return the tokens and the reply's tool format."""
        tools = req.tools if req.tool_choice != "none" else None
        if not self.caps.tools and self.tool_fallback == "none":
            tools = None  # as the vendored llama-server: the template decides, and ignores them
        try:
            messages, tpl_tools = tool_calls.prepare_messages(req.messages, tools, self.caps)
            text = self._render(messages, tpl_tools)
        except chat.ChatTemplateError as e:
            raise RequestError(400, f"the chat template could not render these messages: {e}",
                               param="messages") from None
        t = self.parts.target
        ids = t.tokenize(text, add_special=t.add_bos, parse_special=True)
        if room_left(self.n_ctx, len(ids)) < 1:
            raise RequestError(400, f"the prompt has {len(ids)} tokens and does not fit the "
                               f"context of {self.n_ctx} tokens (with room for one generated "
                               "token); shorten the conversation or serve with a larger "
                               "target.n_ctx", param="messages",
                               kind="exceed_context_size_error")
        if self.drafter_n_ctx is not None and room_left(self.drafter_n_ctx, len(ids)) < 1:
            raise RequestError(400, f"the prompt has {len(ids)} tokens and does not fit the "
                               f"drafter's context of {self.drafter_n_ctx} tokens "
                               "(drafter.n_ctx; the target's is "
                               f"{self.n_ctx}): shorten the conversation or serve with a "
                               "larger drafter.n_ctx", param="messages",
                               kind="exceed_context_size_error")
        fmt = self.caps.format if tools else "none"
        return ids, fmt

    # -- admission: the busy lock is taken and released here only ------------------------------

    def room_for(self, prompt_tokens: int) -> int:
        """Tokens a request of ``prompt_tokens`` may generate: the context's room after it (and,
        with several slots, after its slot's widest tree)."""
        room = room_left(self.n_ctx, prompt_tokens)
        return room - self.parts.target.slots[0].max_rows if self.batched else room

    def try_admit(self, job: Job) -> bool:
        """Take the engine for ``job`` if it is free (it becomes :attr:`current`); False when
        another request decodes. With several slots: queue it (False when the queue is
        full)."""
        if self.runner is not None:
            job.future = self.runner.submit(job)
            return job.future is not None
        if not self.busy.acquire(blocking=False):
            return False
        self.current = job
        return True

    def start(self, job: Job, loop: asyncio.AbstractEventLoop) -> asyncio.Future[JobResult]:
        """Decode the admitted ``job`` on the engine thread; the engine is freed when it ends
        (:meth:`run_job`), or at once with a 503 when the executor is shut down."""
        if job.future is not None:
            return asyncio.wrap_future(job.future, loop=loop)
        try:
            return loop.run_in_executor(self.executor, self.run_job, job)
        except RuntimeError:
            self._free()
            raise RequestError(503, "the server is shutting down", kind="server_busy") from None

    def _free(self) -> None:
        self.current = None
        self.busy.release()

    def run_job(self, job: Job) -> JobResult:
        """Decode one admitted request on the engine thread, then free the engine."""
        try:
            return self._run(job)
        finally:
            self._free()

    def _run(self, job: Job) -> JobResult:
        t = self.parts.target
        self.n_requests += 1
        reply = Reply(job, t)

        def on_tokens(tokens: list[int]) -> None:
            reply.feed(tokens)
            if job.cancel.is_set():
                raise _Cancelled

        session = self.session_of(job, self.parts.rule)
        error = None
        finished = False
        try:
            decode(t, session, job.max_tokens, self.parts.drafter, self.parts.block_positions,
                   on_tokens=on_tokens)
            finished = True
            stop = session.stop
        except _Cancelled:
            stop = "cancelled"
        except Exception as e:  # reported to the client; the server keeps serving
            stop = "error"
            error = f"{type(e).__name__}: {e}"
            t.reset()  # the cache may no longer match the committed tokens: start clean
        return self.finish(job, reply, session, finished, stop, error)

    def session_of(self, job: Job, rule: Any) -> RequestSession:
        """A new session for ``job`` under ``rule`` (the arm's, or its slot's)."""
        return RequestSession(rule, list(job.prompt), job.request_id,
                              keep_records=self.trace_log is not None, sampling=job.sampling)

    def finish(self, job: Job, reply: Reply, session: RequestSession, finished: bool,
               stop: str, error: str | None, extra: dict[str, Any] | None = None) -> JobResult:
        """The reply's tail (text held back), the trace of a finished decode and its result;
        ``extra``: more ``timings`` keys (a batched request's queue and step counts)."""
        if finished and self.trace_log is not None:
            self._write_trace(job, session)
        message, finish_reason = reply.close(stop)
        n_gen = len(session.tokens) if finished else reply.n_out
        timings = self._timings(session, finished, len(job.prompt), stop) | (extra or {})
        return JobResult(message=message, finish_reason=finish_reason,
                         prompt_tokens=len(job.prompt), completion_tokens=n_gen,
                         timings=timings, error=error)

    def _write_trace(self, job: Job, gen: RequestSession) -> None:
        from adaspark.decoding import round_trace

        assert self.trace_log is not None
        round_trace.write_request(self.trace_log, round_trace.RequestTrace(
            seq=self.n_requests, request_id=job.request_id, prompt=list(job.prompt),
            tokens=list(gen.tokens), max_tokens=job.max_tokens, stop=gen.stop,
            exact=self.exact, rounds=[round_trace.TraceRow.of(o) for o in gen.records],
            meta={"arm": self.arm["name"], "models": self.parts.models,
                  "block_positions": self.parts.block_positions,
                  "max_rows": self.parts.target.max_rows, "n_ctx": self.n_ctx,
                  # the request's own sampling (its seed): what a replay draws its labels with
                  "sampling": None if gen.sampling is None else asdict(gen.sampling)}))

    def _timings(self, gen: RequestSession, finished: bool, n_prompt: int,
                 stop: str) -> dict[str, Any]:
        """The last chunk's ``timings``: a decode that did not finish (cancelled, failed) says
        its stop and the rounds it counted. Beside llama-server's keys: ``drafter_prefill_ms``,
        the drafter's prompt prefill before the first round (0 for an arm without a drafter)."""
        c = gen.counts
        if not finished:
            return {"stop": stop, "cache_n": 0, "rounds": c.rounds, "by_source": c.as_dict()}
        cache_n = gen.reused
        widths = {str(k): v for k, v in sorted(gen.width_hist.items())}
        n = len(gen.tokens)
        return _json_safe({
            "cache_n": cache_n,
            "prompt_n": n_prompt - cache_n,
            "prompt_ms": gen.prefill_s * 1e3,
            "drafter_prefill_ms": gen.drafter_prefill_s * 1e3,
            "predicted_n": n,
            "predicted_ms": gen.decode_s * 1e3,
            "predicted_per_second": n / gen.decode_s if gen.decode_s > 0 else None,
            "rounds": gen.rounds,
            "draft_n": gen.drafted,
            "draft_n_accepted": gen.accepted,
            "verify_ms": gen.verify_s * 1e3,
            "draft_ms": gen.draft_s * 1e3,
            "draft_blocks": gen.n_blocks,
            "widths": widths,
            "width1_rounds": gen.width_hist.get(1, 0),
            "by_source": c.as_dict(),
            "positions": c.positions(),
            "stop": stop,
            "rule": gen.rule.name,
            "rule_summary": gen.summary,
            "sampling": None if gen.sampling is None else asdict(gen.sampling),
        })

    def close(self) -> None:
        if self.runner is not None:
            self.runner.stop()
        self.executor.shutdown(wait=True, cancel_futures=True)
        self.parts.close()
