"""Our engine behind an OpenAI-compatible HTTP API (§4.1: every arm is measured over its engine's
HTTP API, streamed, on the client's clock).

    adaspark serve arm=chain3 target=tiny drafter=tiny-truncated port=8080 [exact=false]
                   [store=DIR] [host=127.0.0.1] [chat_template=FILE] [busy_wait_s=0]
                   [tool_fallback=generic|none]
    python -m adaspark.server --params params.yaml --arm NAME --port N --store DIR [--exact]

Routes: ``POST /v1/chat/completions`` (``stream`` true or false), ``GET /health``,
``GET /v1/models`` (whose ``meta`` records the arm, model files, kernel mode and llama.cpp build).

* The arm is fixed at start; its learned store (AdaSpark's cost and acceptance models) lives in a
  directory given at start (default: a fresh directory per arm under ``runs/serve/``).
  An ``X-Request-Id`` header names the request in the rule's per-round log.
* One request at a time, as in the paper: a request that arrives while another decodes waits up
  to ``busy_wait_s`` seconds, then gets 503; it never touches the running one.
* The previous request's KV stays and the longest common token prefix is reused
  (``Target.prefill``), as llama-server's ``cache_prompt`` does.
* Streaming sends one server-sent event per generated token, the tokens of one round back to
  back (HARNESS "Client clock"): the client's clock then measures decode the same way for this
  server and llama-server. A token whose text is held back (an incomplete UTF-8 character, a
  possible ``<tool_call>`` tag) or that has none (the end-of-generation token) gets an event with
  an empty delta. The last chunk carries ``usage`` and ``timings``: rounds, drafted and accepted
  candidates in total (``draft_n``, ``draft_n_accepted``, llama-server's names) and per source,
  widths, and the width rule's own per-request summary.
* Tools are rendered by the model's chat template and calls parsed from the output
  (:mod:`adaspark.tool_calls`); a template without tool support gets the generic fallback
  (``tool_fallback=generic``, the default) or, as the vendored llama-server does, no tools at
  all (``tool_fallback=none``).
* The decode loop is synchronous; it runs on one engine thread and hands each round's tokens to
  the HTTP side through a queue. A client that disconnects mid-stream stops the decode after the
  current round (the committed state stays consistent) and the server keeps serving.
"""

from __future__ import annotations

import argparse
import asyncio
import codecs
import hashlib
import json
import os
import socket
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from adaspark import chat, paths, tool_calls
from adaspark.decode import Generation, generate
from adaspark.drafter.base import Block, DrafterStats
from adaspark.width_rules import RoundOutcome, RoundPlan, RoundState, WidthRule, make_rule

DEFAULT_PORT = 8080
DEFAULT_HOST = "127.0.0.1"
#: What a template without tool support does with a request's tools: ``generic`` describes them
#: in the system message and parses a JSON-object call (older llama.cpp's generic handler);
#: ``none`` leaves them out, as the vendored llama-server build does (it renders tools only
#: through the template).
TOOL_FALLBACKS = ("generic", "none")


class RequestError(Exception):
    """A request the server refuses; ``status`` is the HTTP status, the message says why and
    what to send instead."""

    def __init__(self, status: int, message: str, *, param: str | None = None,
                 kind: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.kind = kind

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param,
                          "code": self.status}}


# ---------------------------------------------------------------------------------------------
# Requests


@dataclass
class ChatRequest:
    """A validated ``/v1/chat/completions`` request (the fields this server acts on)."""

    messages: list[dict[str, Any]]
    stream: bool = False
    max_tokens: int | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str = "auto"


def _type_name(v: Any) -> str:
    return "null" if v is None else type(v).__name__


def _content_text(content: Any, where: str) -> str | None:
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for i, p in enumerate(content):
            if not (isinstance(p, dict) and p.get("type") == "text"
                    and isinstance(p.get("text"), str)):
                raise RequestError(400, f"{where}.content[{i}] must be a text part "
                                   "{\"type\": \"text\", \"text\": \"...\"} (this server "
                                   "reads text only)", param=f"{where}.content")
            parts.append(p["text"])
        return "".join(parts)
    raise RequestError(400, f"{where}.content must be a string, a list of text parts or null, "
                       f"not {_type_name(content)}", param=f"{where}.content")


def _check_messages(raw: Any) -> list[dict[str, Any]]:
    if not isinstance(raw, list) or not raw:
        raise RequestError(400, "`messages` must be a non-empty list of {\"role\", \"content\"} "
                           "objects", param="messages")
    out = []
    for i, m in enumerate(raw):
        where = f"messages[{i}]"
        if not isinstance(m, dict):
            raise RequestError(400, f"{where} must be an object, not {_type_name(m)}",
                               param=where)
        role = m.get("role")
        if role not in ("system", "user", "assistant", "tool"):
            raise RequestError(400, f"{where}.role must be one of system, user, assistant, tool "
                               f"(got {role!r})", param=f"{where}.role")
        msg = dict(m)
        msg["content"] = _content_text(m.get("content"), where)
        calls = m.get("tool_calls")
        if calls is not None:
            if role != "assistant" or not isinstance(calls, list):
                raise RequestError(400, f"{where}.tool_calls must be a list on an assistant "
                                   "message", param=f"{where}.tool_calls")
            for k, c in enumerate(calls):
                fn = c.get("function") if isinstance(c, dict) else None
                if not (isinstance(fn, dict) and isinstance(fn.get("name"), str)
                        and isinstance(fn.get("arguments", ""), str | dict)):
                    raise RequestError(400, f"{where}.tool_calls[{k}] must hold "
                                       "{\"function\": {\"name\": str, \"arguments\": str}}",
                                       param=f"{where}.tool_calls")
        if role in ("system", "user", "tool") and msg["content"] is None:
            raise RequestError(400, f"{where} ({role}) needs a string content",
                               param=f"{where}.content")
        if role == "assistant" and msg["content"] is None and not calls:
            msg["content"] = ""
        out.append(msg)
    return out


def lone_surrogate(obj: Any, where: str = "") -> str | None:
    """Where a string of a decoded JSON body holds a lone UTF-16 surrogate (JSON allows the
    escape ``"\\ud800"``; the text is no Unicode a tokenizer can encode), or None."""
    if isinstance(obj, str):
        try:
            obj.encode("utf-8")
        except UnicodeEncodeError:
            return where or "the body"
        return None
    if isinstance(obj, dict):
        for k, v in obj.items():
            name = f"{where}.{k}" if where else str(k)
            found = lone_surrogate(k, f"a key in {where or 'the body'}") or \
                lone_surrogate(v, name)
            if found:
                return found
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            found = lone_surrogate(v, f"{where}[{i}]")
            if found:
                return found
    return None


def parse_request(body: Any) -> ChatRequest:
    """Validate a decoded JSON body; raise :class:`RequestError` naming the bad field."""
    if not isinstance(body, dict):
        raise RequestError(400, f"the request body must be a JSON object, not {_type_name(body)}")
    bad = lone_surrogate(body)
    if bad is not None:
        raise RequestError(400, f"{bad} holds a lone UTF-16 surrogate escape (such as "
                           "\\ud800): that is not Unicode text; send each character as UTF-8 "
                           "or as a surrogate pair", param=bad)
    messages = _check_messages(body.get("messages"))
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise RequestError(400, f"`stream` must be true or false, not {_type_name(stream)}",
                           param="stream")
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int)
                                   or max_tokens < 1):
        raise RequestError(400, f"`max_tokens` must be a positive integer, not {max_tokens!r}",
                           param="max_tokens")
    temp = body.get("temperature")
    if temp is not None:
        if isinstance(temp, bool) or not isinstance(temp, int | float):
            raise RequestError(400, f"`temperature` must be a number, not {_type_name(temp)}",
                               param="temperature")
        if temp > 0:
            raise RequestError(400, "this server decodes greedily only (the verify's guarantee, "
                               "§3.5): send temperature 0 or leave it out", param="temperature")
    n = body.get("n", 1)
    if n != 1:
        raise RequestError(400, "`n` must be 1 (one choice per request)", param="n")
    if body.get("stop") not in (None, [], ""):
        raise RequestError(400, "`stop` sequences are not supported by this server; leave "
                           "`stop` out (replies end at the model's end-of-generation token or "
                           "max_tokens)", param="stop")
    if body.get("logprobs"):
        raise RequestError(400, "`logprobs` is not supported by this server", param="logprobs")
    so = body.get("stream_options")
    if so is not None and not isinstance(so, dict):
        raise RequestError(400, "`stream_options` must be an object", param="stream_options")
    tools = body.get("tools")
    if tools is not None:
        try:
            tools = tool_calls.validate_tools(tools) or None
        except tool_calls.ToolRequestError as e:
            raise RequestError(400, str(e), param="tools") from None
    choice = body.get("tool_choice", "auto")
    if choice is None:
        choice = "auto"
    if choice not in ("auto", "none"):
        raise RequestError(400, "`tool_choice` must be \"auto\" or \"none\" (this server has no "
                           "constrained decoding to force a call)", param="tool_choice")
    return ChatRequest(messages=messages, stream=stream, max_tokens=max_tokens,
                       tools=tools, tool_choice=choice)


# ---------------------------------------------------------------------------------------------
# Round statistics


@dataclass
class RoundCounts:
    """Per-request counters of the rounds a rule ran: per source (:func:`row_source`), verified
    candidate rows and accepted ones."""

    rounds: int = 0
    drafted: dict[str, int] = field(default_factory=dict)
    accepted: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, dict[str, int]]:
        srcs = sorted(set(self.drafted) | set(self.accepted))
        return {s: {"drafted": self.drafted.get(s, 0), "accepted": self.accepted.get(s, 0)}
                for s in srcs}


def row_source(plan: RoundPlan) -> Callable[[int], str]:
    """Each verify row's source as Table 7 counts them: ``drafter`` (drafter only), ``agreed``
    (drafter candidates an n-gram chain also proposed) or ``ngram`` (n-gram only).

    Reads the plan's :class:`~adaspark.candidates.CandidateSet`, or the candidate tree the
    AdaSpark scheduler keeps in its plan's round context (which classifies itself)."""
    cands = plan.candidates
    tree = getattr(getattr(plan, "round", None), "cands", None)

    def source(row: int) -> str:
        if row - 1 >= len(plan.cand_of_row):
            return "drafter"
        j = plan.cand_of_row[row - 1]
        if cands is not None:
            if cands.source[j] == "ngram":
                return "ngram"
            return "agreed" if cands.agreed[j] else "drafter"
        if tree is not None and callable(getattr(tree, "source", None)):
            return str(tree.source(j))
        return "drafter"

    return source


class CountingRule(WidthRule):
    """Wraps the arm's width rule and counts each round's rows and accepted rows by source.
    Behaviour is the inner rule's; only counters are added (composition, STYLE habit 1)."""

    def __init__(self, inner: WidthRule) -> None:
        self.inner = inner
        self.name = inner.name
        self.uses_drafter = inner.uses_drafter
        self.counts = RoundCounts()

    def begin_request(self, prompt: list[int], request_id: str | None = None) -> None:
        self.counts = RoundCounts()
        self.inner.begin_request(prompt, request_id)

    def wants_block(self, state: RoundState) -> bool:
        return self.inner.wants_block(state)

    def block_positions(self, default: int) -> int:
        return self.inner.block_positions(default)

    def plan(self, state: RoundState, block: Block | None) -> RoundPlan:
        return self.inner.plan(state, block)

    def observe(self, plan: RoundPlan, outcome: RoundOutcome) -> None:
        c = self.counts
        c.rounds += 1
        source = row_source(plan)
        for row in range(1, plan.tree.n_rows):
            s = source(row)
            c.drafted[s] = c.drafted.get(s, 0) + 1
        for row in outcome.path[1:]:
            s = source(row)
            c.accepted[s] = c.accepted.get(s, 0) + 1
        self.inner.observe(plan, outcome)

    def end_request(self) -> dict[str, Any]:
        return self.inner.end_request()


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


@dataclass
class JobResult:
    message: dict[str, Any]
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    timings: dict[str, Any]
    error: str | None = None


def _json_safe(v: Any) -> Any:
    return json.loads(json.dumps(v, default=str))


class ArmService:
    """The one engine interface the routes call: render and tokenize a request, decode it.

    Built from a composed config (``target``, ``drafter``, ``threads``) and one arm's config.
    """

    def __init__(self, cfg: DictConfig, arm: DictConfig, *, exact: bool, store_dir: Path,
                 chat_template: Path | None = None, round_log: Path | None = None,
                 warmup: bool = True, tool_fallback: str = "generic") -> None:
        from adaspark import arms

        if tool_fallback not in TOOL_FALLBACKS:
            raise ValueError(f"tool_fallback must be one of {TOOL_FALLBACKS}, not "
                             f"{tool_fallback!r}")
        self.tool_fallback = tool_fallback
        arm_d = OmegaConf.to_container(arm, resolve=True)
        assert isinstance(arm_d, dict)
        if arm_d.get("engine", "ours") != "ours":
            raise ValueError(f"arm {arm_d.get('name')} runs on {arm_d.get('engine')}; start it "
                             "with adaspark.llama_server, not `adaspark serve`")
        keys = arms.rule_kwargs(arm)
        store_dir.mkdir(parents=True, exist_ok=True)
        extra: dict[str, Any] = {}
        if "store" in keys:  # rules with a learned store keep it in the store directory
            extra["store"] = str(store_dir / "store.json")
        if "log_dir" in keys and round_log is not None:
            extra["log_dir"] = str(round_log)
        self.arm = arm_d | {"rule_extra": extra}
        self.exact = exact
        self.store_dir = store_dir
        self.parts = arms.build(cfg, arm, exact=exact, **extra)
        self.counting = CountingRule(self.parts.rule)
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
        self.model_id = f"{cfg.target.name}:{arm_d.get('name')}"
        self.n_ctx = t.n_ctx
        self.busy = threading.Lock()
        self.current: Job | None = None
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="engine")
        self.n_requests = 0
        self.meta = self._meta(cfg)
        if warmup:
            self.executor.submit(self._warmup).result()

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
        if self.parts.drafter is not None:
            self.parts.drafter.begin(prompt)
            self.parts.drafter.draft(prompt, 1)
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
        if len(ids) + 1 >= self.n_ctx:
            raise RequestError(400, f"the prompt has {len(ids)} tokens and does not fit the "
                               f"context of {self.n_ctx} tokens (with room for one generated "
                               "token); shorten the conversation or serve with a larger "
                               "target.n_ctx", param="messages",
                               kind="exceed_context_size_error")
        fmt = self.caps.format if tools else "none"
        return ids, fmt

    def run_job(self, job: Job) -> JobResult:
        """Decode one request on the engine thread; releases the busy lock when done."""
        try:
            return self._run(job)
        finally:
            self.current = None
            self.busy.release()

    def _run(self, job: Job) -> JobResult:
        t = self.parts.target
        self.n_requests += 1
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        parser = tool_calls.ReplyParser(job.tool_format, id_prefix=uuid.uuid4().hex[:8] + "_")
        assembler = tool_calls.MessageAssembler()
        n_out = [0]

        def on_tokens(tokens: list[int]) -> None:
            per_token = []
            for tok in tokens:
                piece = b"" if t.is_eog(tok) else t.token_bytes(tok)
                deltas = parser.feed(decoder.decode(piece))
                for d in deltas:
                    assembler.add(d)
                per_token.append(deltas)
            n_out[0] += len(tokens)
            if job.emit is not None:
                job.emit(("round", per_token))
            if job.cancel.is_set():
                raise _Cancelled

        stats = DrafterStats()
        error = None
        gen: Generation | None = None
        try:
            gen = generate(t, job.prompt, job.max_tokens, self.counting, self.parts.drafter,
                           self.parts.block_positions, on_tokens=on_tokens, stats=stats,
                           request_id=job.request_id)
            stop = gen.stop
        except _Cancelled:
            stop = "cancelled"
            try:
                self.counting.end_request()
            except Exception:  # the rule's bookkeeping must not take the server down
                pass
        except Exception as e:  # reported to the client; the server keeps serving
            stop = "error"
            error = f"{type(e).__name__}: {e}"
            t.reset()  # the cache may no longer match the committed tokens: start clean
        tail = parser.feed(decoder.decode(b"", final=True)) + parser.finish()
        for d in tail:
            assembler.add(d)
        if job.emit is not None and tail:
            job.emit(("tail", tail))
        finish = ("tool_calls" if assembler.calls else
                  "stop" if stop == "eog" else "cancelled" if stop == "cancelled" else "length")
        n_gen = len(gen.tokens) if gen is not None else n_out[0]
        keep = t.reused if gen is not None else 0  # prompt tokens the prefill took from cache
        timings = self._timings(gen, stats, keep, len(job.prompt), stop)
        return JobResult(message=assembler.message(), finish_reason=finish,
                         prompt_tokens=len(job.prompt), completion_tokens=n_gen,
                         timings=timings, error=error)

    def _timings(self, gen: Generation | None, stats: DrafterStats, cache_n: int,
                 n_prompt: int, stop: str) -> dict[str, Any]:
        c = self.counting.counts
        if gen is None:
            return {"stop": stop, "cache_n": cache_n, "rounds": c.rounds,
                    "by_source": c.as_dict()}
        widths = {str(k): v for k, v in sorted(gen.width_hist.items())}
        n = len(gen.tokens)
        return _json_safe({
            "cache_n": cache_n,
            "prompt_n": n_prompt - cache_n,
            "prompt_ms": gen.prefill_s * 1e3,
            "predicted_n": n,
            "predicted_ms": gen.decode_s * 1e3,
            "predicted_per_second": n / gen.decode_s if gen.decode_s > 0 else None,
            "rounds": gen.rounds,
            "draft_n": gen.drafted,
            "draft_n_accepted": gen.accepted,
            "verify_ms": gen.verify_s * 1e3,
            "draft_ms": stats.draft_s * 1e3,
            "draft_blocks": stats.n_blocks,
            "widths": widths,
            "width1_rounds": gen.width_hist.get(1, 0),
            "by_source": c.as_dict(),
            "stop": stop,
            "rule": self.counting.name,
            "rule_summary": gen.summary,
        })

    def close(self) -> None:
        self.executor.shutdown(wait=True, cancel_futures=True)
        self.parts.close()


# ---------------------------------------------------------------------------------------------
# HTTP


def _safe_id(raw: str | None) -> str | None:
    """A request id usable in a file name (the rule's per-round log names its parts by it)."""
    if not raw:
        return None
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in raw)[:200] or None


def _sse(obj: Any) -> bytes:
    return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n".encode()


def make_app(service: ArmService, *, busy_wait_s: float = 0.0):  # -> Starlette
    """The Starlette application around one :class:`ArmService`."""
    from starlette.applications import Starlette
    from starlette.exceptions import HTTPException
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response, StreamingResponse
    from starlette.routing import Route

    def error(e: RequestError) -> JSONResponse:
        headers = {"Retry-After": "1"} if e.status == 503 else None
        return JSONResponse(e.body(), status_code=e.status, headers=headers)

    async def acquire() -> None:
        """Take the engine, waiting up to ``busy_wait_s`` (longer while a cancelled decode
        finishes its round)."""
        deadline = time.monotonic() + busy_wait_s
        while not service.busy.acquire(blocking=False):
            cur = service.current
            finishing = cur is not None and cur.cancel.is_set()
            if time.monotonic() >= deadline and not finishing:
                raise RequestError(503, "busy: this server decodes one request at a time (the "
                                   "paper's protocol) and another request is decoding; retry "
                                   "when it ends", kind="server_busy")
            await asyncio.sleep(0.005)

    async def health(_: Request) -> Response:
        return JSONResponse({"status": "ok", "busy": service.busy.locked(),
                             "model": service.model_id})

    async def models(_: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{
            "id": service.model_id, "object": "model", "created": int(time.time()),
            "owned_by": "adaspark", "meta": service.meta}]})

    async def completions(request: Request) -> Response:
        raw = await request.body()
        try:
            body = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            return error(RequestError(400, f"the request body is not valid JSON ({e}); send a "
                                      "JSON object with `messages`"))
        try:
            req = parse_request(body)
            prompt, fmt = service.prompt_tokens(req)
            await acquire()
        except RequestError as e:
            return error(e)
        room = service.n_ctx - len(prompt) - 1
        max_tokens = room if req.max_tokens is None else min(req.max_tokens, room)
        rid = _safe_id(request.headers.get("x-request-id"))
        job = Job(prompt=prompt, max_tokens=max(1, max_tokens), tool_format=fmt, request_id=rid)
        loop = asyncio.get_running_loop()
        cid = f"chatcmpl-{uuid.uuid4().hex[:24]}"
        created = int(time.time())
        queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        if req.stream:
            job.emit = lambda item: loop.call_soon_threadsafe(queue.put_nowait, item)
        service.current = job
        try:
            fut = loop.run_in_executor(service.executor, service.run_job, job)
        except RuntimeError:
            service.current = None
            service.busy.release()
            return error(RequestError(503, "the server is shutting down", kind="server_busy"))
        fut.add_done_callback(lambda f: queue.put_nowait(("done", f)))

        def chunk(delta: dict[str, Any] | None, finish: str | None = None,
                  **extra: Any) -> dict[str, Any]:
            choices = [] if delta is None else [
                {"index": 0, "delta": delta, "finish_reason": finish}]
            return {"id": cid, "object": "chat.completion.chunk", "created": created,
                    "model": service.model_id, "choices": choices, **extra}

        if not req.stream:
            try:
                res: JobResult = await fut
            except Exception as e:
                return error(RequestError(500, f"decode failed: {e}", kind="server_error"))
            if res.error:
                return error(RequestError(500, f"decode failed: {res.error}",
                                          kind="server_error"))
            return JSONResponse({
                "id": cid, "object": "chat.completion", "created": created,
                "model": service.model_id,
                "choices": [{"index": 0, "message": res.message,
                             "finish_reason": res.finish_reason}],
                "usage": {"prompt_tokens": res.prompt_tokens,
                          "completion_tokens": res.completion_tokens,
                          "total_tokens": res.prompt_tokens + res.completion_tokens},
                "timings": res.timings})

        async def events() -> AsyncIterator[bytes]:
            first = True
            try:
                while True:
                    kind, payload = await queue.get()
                    if kind == "round":
                        for deltas in payload:
                            if first:
                                yield _sse(chunk({"role": "assistant", "content": None}))
                                first = False
                            yield _sse(chunk(merge_deltas(deltas)))
                    elif kind == "tail":
                        yield _sse(chunk(merge_deltas(payload)))
                    elif kind == "done":
                        try:
                            res = payload.result()
                        except Exception as e:  # pragma: no cover - run_job catches errors
                            res = None
                            msg = str(e)
                        if res is None or res.error:
                            err = res.error if res is not None else msg
                            yield _sse({"error": {"message": f"decode failed: {err}",
                                                  "type": "server_error", "code": 500}})
                            return
                        yield _sse(chunk({}, res.finish_reason))
                        usage = {"prompt_tokens": res.prompt_tokens,
                                 "completion_tokens": res.completion_tokens,
                                 "total_tokens": res.prompt_tokens + res.completion_tokens}
                        yield _sse(chunk(None, usage=usage, timings=res.timings))
                        yield b"data: [DONE]\n\n"
                        return
            finally:
                job.cancel.set()  # a client that left stops the decode after this round

        return StreamingResponse(events(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache"})

    async def http_error(_: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        hint = {404: "routes: POST /v1/chat/completions, GET /health, GET /v1/models",
                405: "use POST for /v1/chat/completions and GET for /health and /v1/models"}
        msg = f"{exc.detail}" + (f" ({hint[exc.status_code]})" if exc.status_code in hint else "")
        return error(RequestError(exc.status_code, msg))

    routes = [
        Route("/v1/chat/completions", completions, methods=["POST"]),
        Route("/chat/completions", completions, methods=["POST"]),
        Route("/health", health, methods=["GET"]),
        Route("/v1/models", models, methods=["GET"]),
    ]
    return Starlette(routes=routes, exception_handlers={HTTPException: http_error})


# ---------------------------------------------------------------------------------------------
# Entry points


@dataclass
class ServeOptions:
    """Where and how to serve; everything about the engine comes from the config."""

    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    store: Path | None = None
    chat_template: Path | None = None
    busy_wait_s: float = 0.0
    warmup: bool = True
    round_log: Path | None = None
    tool_fallback: str = "generic"


def free_port(host: str = DEFAULT_HOST) -> int:
    """A port free on ``host`` right now (for port=0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class ServeError(RuntimeError):
    """The server cannot start; the message says why and what to do."""


def bind_socket(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` (0 = a free port), as uvicorn binds it; a clear
    :class:`ServeError` when the address is taken or not this machine's."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise ServeError(f"cannot listen on {host}:{port} ({e.strerror or e}): pick another "
                         "port= (port=0 takes a free one), stop what holds this one, or check "
                         "that host= is an address of this machine") from None
    sock.set_inheritable(True)
    return sock


def fresh_store_dir(arm: str) -> Path:
    """A new directory per arm under ``runs/serve/`` (an empty store: a cold arm)."""
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    base = paths.checkout_root() / "runs" / "serve" / arm
    d = base / stamp
    k = 1
    while d.exists():
        k += 1
        d = base / f"{stamp}-{k}"
    return d


def serve(cfg: DictConfig, arm: DictConfig, opts: ServeOptions, *, exact: bool) -> int:
    """Load the arm and serve until interrupted."""
    import uvicorn

    sock = bind_socket(opts.host, opts.port)  # first: a taken port fails before the model loads
    try:
        store = opts.store or fresh_store_dir(str(arm.name))
        service = ArmService(cfg, arm, exact=exact, store_dir=Path(store),
                             chat_template=opts.chat_template, round_log=opts.round_log,
                             warmup=opts.warmup, tool_fallback=opts.tool_fallback)
    except BaseException:
        sock.close()
        raise
    port = int(sock.getsockname()[1])
    app = make_app(service, busy_wait_s=opts.busy_wait_s)
    config = uvicorn.Config(app, host=opts.host, port=port, log_level="warning",
                            access_log=False, lifespan="off", timeout_keep_alive=600,
                            timeout_graceful_shutdown=5)
    print(f"adaspark serve: arm {arm.name} on {cfg.target.name}, "
          f"{'exact' if exact else 'fast'} kernels, store {store}, tools "
          f"{service.caps.format}; listening on http://{opts.host}:{port}",
          file=sys.stderr, flush=True)
    try:
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        cur = service.current
        if cur is not None:
            cur.cancel.set()
        service.close()
    return 0


#: ``adaspark serve`` keys that are not part of the composed config.
SERVE_KEYS = ("host", "port", "store", "chat_template", "busy_wait_s", "warmup", "round_log",
              "tool_fallback")


def serve_command(args: list[str]) -> int:
    """``adaspark serve key=value ...``: compose ``conf/`` with the overrides, serve ``arm``."""
    from adaspark.config import compose
    from adaspark.schema import validate

    raw: dict[str, Any] = {}
    rest = []
    for a in args:
        key, eq, value = a.partition("=")
        if not eq or key not in SERVE_KEYS:
            rest.append(a)
            continue
        raw[key] = value
    opts = serve_options(raw)
    cfg = compose(rest)
    validate(cfg, command="serve")
    exact = False if cfg.get("exact") is None else bool(cfg.exact)
    return serve(cfg, cfg.arm, opts, exact=exact)


def serve_options(raw: dict[str, str]) -> ServeOptions:
    """:class:`ServeOptions` from ``adaspark serve``'s own ``key=value`` arguments (text), each
    checked: a bad one is a ConfigError naming the key, the value and what is allowed."""
    from adaspark.config import ConfigError
    from adaspark.schema import check_value

    opts = ServeOptions()
    for key, value in raw.items():
        if key == "port":
            try:
                port = int(value)
            except ValueError:
                raise ConfigError(f"port={value!r} is not allowed: port must be an integer "
                                  "from 0 to 65535 (0 = a free port)") from None
            opts.port = check_value("port", port, int, {"min": 0, "max": 65535})
        elif key == "busy_wait_s":
            try:
                wait = float(value)
            except ValueError:
                raise ConfigError(f"busy_wait_s={value!r} is not allowed: busy_wait_s must be "
                                  "a number >= 0 (seconds)") from None
            opts.busy_wait_s = check_value("busy_wait_s", wait, float, {"min": 0})
        elif key in ("warmup",):
            flags = {"true": True, "false": False}
            if value.lower() not in flags:
                raise ConfigError(f"{key}={value!r} is not allowed: {key} must be true or false")
            opts.warmup = flags[value.lower()]
        elif key == "tool_fallback":
            if value not in TOOL_FALLBACKS:
                raise ConfigError(f"tool_fallback={value!r} is not allowed: tool_fallback must "
                                  f"be one of {', '.join(TOOL_FALLBACKS)}")
            opts.tool_fallback = value
        elif key == "host":
            if not value:
                raise ConfigError("host= is empty: name the address to listen on, e.g. "
                                  "host=127.0.0.1")
            opts.host = value
        else:
            setattr(opts, key, Path(value) if value else None)
    return opts


def main(argv: list[str] | None = None) -> int:
    """``python -m adaspark.server --params FILE --arm NAME ...``: serve one arm of a composed
    ``params.yaml`` (how the run stage starts our engine)."""
    ap = argparse.ArgumentParser(description="serve one arm of a composed params file")
    ap.add_argument("--params", required=True, help="composed config (params.yaml)")
    ap.add_argument("--arm", required=True, help="key under `arms:` in the params file")
    ap.add_argument("--host", default=DEFAULT_HOST)
    ap.add_argument("--port", type=int, default=DEFAULT_PORT)
    ap.add_argument("--store", type=Path, default=None)
    ap.add_argument("--chat-template", type=Path, default=None)
    ap.add_argument("--round-log", type=Path, default=None)
    ap.add_argument("--busy-wait-s", type=float, default=0.0)
    ap.add_argument("--no-warmup", action="store_true")
    ap.add_argument("--tool-fallback", choices=TOOL_FALLBACKS, default="generic")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--exact", action="store_true", help="exact kernels (correctness checks)")
    mode.add_argument("--fast", action="store_true", help="llama.cpp's default kernels")
    a = ap.parse_args(argv)
    cfg = OmegaConf.load(a.params)
    assert isinstance(cfg, DictConfig)
    arms_cfg = cfg.get("arms") or {}
    if a.arm not in arms_cfg:
        print(f"adaspark.server: {a.params} has no arm {a.arm!r} under `arms:`; it has "
              f"{sorted(arms_cfg)}", file=sys.stderr)
        return 2
    exact = bool(a.exact) if (a.exact or a.fast) else bool(cfg.get("exact") or False)
    opts = ServeOptions(host=a.host, port=a.port, store=a.store, chat_template=a.chat_template,
                        busy_wait_s=a.busy_wait_s, warmup=not a.no_warmup,
                        round_log=a.round_log, tool_fallback=a.tool_fallback)
    return serve(cfg, arms_cfg[a.arm], opts, exact=exact)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
