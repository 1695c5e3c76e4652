"""The HTTP side of our server: ``POST /v1/chat/completions`` (streamed or not), ``GET /health``
and ``GET /v1/models``, over an :class:`~adaspark.serving.service.ArmService`. Streaming sends
one server-sent event per generated token (HARNESS "Client clock").
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from adaspark.serving.requests import RequestError, decode_body, parse_request
from adaspark.serving.service import ArmService, Job, JobResult, merge_deltas

# ---------------------------------------------------------------------------------------------
# HTTP

#: How often a non-streamed request's decode looks whether its client has left (seconds).
DISCONNECT_POLL_S = 0.25


def _safe_id(raw: str | None) -> str | None:
    """A request id usable in a file name (the rule's per-round log names its parts by it)."""
    if not raw:
        return None
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in raw)[:200] or None


def _sse(obj: Any) -> bytes:
    return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n".encode()


class DeltaEvents:
    """The per-token events of one streamed reply, rendered from a fixed envelope.

    Every token's event is the same chunk object but for its delta, so the envelope is
    rendered once and each event only serialises its delta: the bytes are those of
    ``_sse(chunk(delta))`` (tested), at a fraction of the event loop's time per token (which,
    on 2 cores, is taken from the decode: issue 12, plain-decode parity)."""

    def __init__(self, envelope: dict[str, Any]) -> None:
        marker = "\u0000delta\u0000"
        text = json.dumps({**envelope, "choices": [
            {"index": 0, "delta": marker, "finish_reason": None}]}, ensure_ascii=False)
        head, tail = text.split(json.dumps(marker))
        self.head = ("data: " + head).encode()
        self.tail = (tail + "\n\n").encode()

    def event(self, delta: dict[str, Any]) -> bytes:
        return self.head + json.dumps(delta, ensure_ascii=False).encode() + self.tail


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

    async def admit(job: Job) -> None:
        """Wait up to ``busy_wait_s`` (longer while a cancelled decode finishes its round) for
        the service to take ``job``."""
        if service.batched:
            if not service.try_admit(job):
                raise RequestError(503, "busy: every slot is taken and the queue is full; "
                                   "retry later", kind="server_busy")
            await admitted(job)
            return
        deadline = time.monotonic() + busy_wait_s
        while not service.try_admit(job):
            cur = service.current
            finishing = cur is not None and cur.cancel.is_set()
            if time.monotonic() >= deadline and not finishing:
                raise RequestError(503, "busy: this server decodes one request at a time (the "
                                   "paper's protocol) and another request is decoding; retry "
                                   "when it ends", kind="server_busy")
            await asyncio.sleep(0.005)

    async def admitted(job: Job) -> None:
        """A queued ``job`` (several slots): wait until the engine starts it; a 503 when it
        waited too long, raised here so the reply is a plain error, not a stream."""
        fut = job.future
        assert fut is not None
        while not fut.running() and not fut.done():
            await asyncio.sleep(0.005)
        if fut.done() and isinstance(fut.exception(), RequestError):
            raise fut.exception()  # type: ignore[misc]

    async def until_done_or_gone(request: Request, fut: asyncio.Future[JobResult],
                                 job: Job) -> JobResult:
        """``fut``'s result; a client that leaves meanwhile stops the decode after its round
        (as the streaming path does), so the engine is free for the next request."""
        while not fut.done():
            await asyncio.wait({fut}, timeout=DISCONNECT_POLL_S)
            if not fut.done() and await request.is_disconnected():
                job.cancel.set()
                break
        return await fut

    async def health(_: Request) -> Response:
        if service.runner is not None:
            m = service.runner.metrics()
            return JSONResponse({"status": "ok", "busy": m["active"] > 0,
                                 "model": service.model_id, **m})
        return JSONResponse({"status": "ok", "busy": service.busy.locked(),
                             "model": service.model_id})

    async def models(_: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{
            "id": service.model_id, "object": "model", "created": int(time.time()),
            "owned_by": "adaspark", "meta": service.meta}]})

    async def completions(request: Request) -> Response:
        raw = await request.body()
        try:
            req = parse_request(decode_body(raw), service.sampling_defaults)
            prompt, fmt = service.prompt_tokens(req)
        except RequestError as e:
            return error(e)
        room = service.room_for(len(prompt))
        if room < 1:
            return error(RequestError(400, f"the prompt has {len(prompt)} tokens and leaves no "
                                      "room for a reply beside a verify in this server's "
                                      f"context of {service.n_ctx} tokens; shorten it",
                                      param="messages", kind="exceed_context_size_error"))
        max_tokens = room if req.max_tokens is None else min(req.max_tokens, room)
        rid = _safe_id(request.headers.get("x-request-id"))
        job = Job(prompt=prompt, max_tokens=max(1, max_tokens), tool_format=fmt, request_id=rid,
                  sampling=req.sampling)
        loop = asyncio.get_running_loop()
        cid = f"chatcmpl-{uuid.uuid4().hex[:24]}"
        created = int(time.time())
        queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        if req.stream:
            job.emit = lambda item: loop.call_soon_threadsafe(queue.put_nowait, item)
        try:
            await admit(job)
            fut = service.start(job, loop)
        except RequestError as e:
            return error(e)
        fut.add_done_callback(lambda f: queue.put_nowait(("done", f)))

        def chunk(delta: dict[str, Any] | None, finish: str | None = None,
                  **extra: Any) -> dict[str, Any]:
            choices = [] if delta is None else [
                {"index": 0, "delta": delta, "finish_reason": finish}]
            return {"id": cid, "object": "chat.completion.chunk", "created": created,
                    "model": service.model_id, "choices": choices, **extra}

        if not req.stream:
            try:
                res: JobResult = await until_done_or_gone(request, fut, job)
            except RequestError as e:
                return error(e)
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

        deltas_of = DeltaEvents(chunk(None))

        async def events() -> AsyncIterator[bytes]:
            first = True
            try:
                while True:
                    kind, payload = await queue.get()
                    if kind == "round":
                        # A round's tokens are committed at once: one write carries their
                        # events (one event per token, as the client clock counts them).
                        out = [deltas_of.event({"role": "assistant", "content": None})
                               ] if first and payload else []
                        first = first and not payload
                        out.extend(deltas_of.event(merge_deltas(d)) for d in payload)
                        if out:
                            yield b"".join(out)
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
