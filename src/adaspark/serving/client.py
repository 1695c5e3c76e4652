"""One streaming client for both servers, timed on the client's clock (§4.1, HARNESS "Client
clock").

The paper's speed of a reply is "generated tokens over the time from the first to the last
streamed token", measured by the client. Both servers stream one event per generated token (a
round's events back to back), so one formula serves both:

    decode tokens/s = (completion tokens - 1) / (time of last token event - time of first)

A *token event* is a streamed chunk whose delta carries text (``content`` or
``reasoning_content``) or a tool-call fragment; a role-only chunk, an empty delta and the final
usage chunk are not. A reply with at most one token event has no decode interval: it is
"single-delta" (a bare tool call that a server sends whole, for instance) and its speed is
``None``. ``completion tokens`` is the server's ``usage.completion_tokens`` (both servers count
the end-of-generation token). Time to first token is from sending the request to the first token
event.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import httpx

from adaspark.decoding.sampling import SamplingParams
from adaspark.serving.tool_calls import MessageAssembler


class ServerReplyError(RuntimeError):
    """The server answered with an error (HTTP status or an error event)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.message = message


def decode_tps(completion_tokens: int, t_first_s: float, t_last_s: float) -> float | None:
    """Client-clock decode speed of one reply, tokens/s (HARNESS "Client clock", §4.1).

    ``(completion_tokens - 1) / (t_last_s - t_first_s)``, the times being those of the first and
    the last streamed token event. A reply with one token event (``t_last_s == t_first_s``) or at
    most one token is "single-delta": it has no decode interval, and the result is ``None``.
    """
    try:
        n_tokens = int(completion_tokens)
        t_first = float(t_first_s)
        t_last = float(t_last_s)
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"decode_tps needs a token count and two times in seconds, got "
            f"{completion_tokens!r}, {t_first_s!r}, {t_last_s!r}"
        ) from exc
    if n_tokens != completion_tokens:
        raise ValueError(f"completion_tokens must be a whole number, got {completion_tokens}")
    if n_tokens < 0:
        raise ValueError(f"completion_tokens must be >= 0, got {n_tokens}")
    if not (math.isfinite(t_first) and math.isfinite(t_last)):
        raise ValueError(f"token event times must be finite, got {t_first}, {t_last}")
    if t_last < t_first:
        raise ValueError(f"last token event ({t_last} s) is before the first ({t_first} s)")
    if n_tokens <= 1 or t_last == t_first:
        return None
    return (n_tokens - 1) / (t_last - t_first)


@dataclass
class Reply:
    """One reply as the client saw it. Times are seconds on ``time.perf_counter``; the ``*_s``
    offsets are from sending the request."""

    text: str
    tool_calls: list[dict[str, Any]]
    finish_reason: str | None
    prompt_tokens: int
    completion_tokens: int
    t_request: float
    t_first: float | None
    t_last: float | None
    t_done: float
    n_token_events: int
    n_chunks: int
    timings: dict[str, Any] = field(default_factory=dict)
    streamed: bool = True
    reasoning: str = ""

    @property
    def ttft_s(self) -> float | None:
        """Time to first token: request sent to first token event."""
        return None if self.t_first is None else self.t_first - self.t_request

    @property
    def decode_s(self) -> float | None:
        """First to last token event."""
        if self.t_first is None or self.t_last is None:
            return None
        return self.t_last - self.t_first

    @property
    def single_delta(self) -> bool:
        return self.decode_tps is None

    @property
    def decode_tps(self) -> float | None:
        """Client-clock decode speed (HARNESS formula); ``None`` when single-delta."""
        if not self.streamed or self.n_token_events <= 1 or self.t_first is None:
            return None
        assert self.t_last is not None
        return decode_tps(self.completion_tokens, self.t_first, self.t_last)

    def message(self) -> dict[str, Any]:
        """The reply as an assistant message, to carry as history."""
        msg: dict[str, Any] = {"role": "assistant", "content": self.text}
        if self.tool_calls:
            msg["tool_calls"] = self.tool_calls
            if not self.text:
                msg["content"] = None
        return msg


def _is_token_event(delta: dict[str, Any]) -> bool:
    return bool(delta.get("content") or delta.get("reasoning_content") or delta.get("tool_calls"))


class ChatClient:
    """``POST /v1/chat/completions`` against one server, greedy, usage requested."""

    def __init__(self, base_url: str, *, timeout_s: float = 3600.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.http = httpx.Client(base_url=self.base_url,
                                 timeout=httpx.Timeout(timeout_s, connect=10.0))

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> ChatClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def health(self) -> dict[str, Any]:
        r = self.http.get("/health")
        return r.json() if r.headers.get("content-type", "").startswith("application/json") \
            else {"status": r.text}

    def models(self) -> dict[str, Any]:
        r = self.http.get("/v1/models")
        r.raise_for_status()
        return r.json()

    @staticmethod
    def body(messages: list[dict[str, Any]], *, max_tokens: int | None,
             tools: list[dict[str, Any]] | None = None, stream: bool = True,
             sampling: SamplingParams | None = None) -> dict[str, Any]:
        """A request body: greedy (temperature 0), or ``sampling``'s fields (both servers read
        the same OpenAI/llama-server names)."""
        b: dict[str, Any] = {"messages": messages, "stream": stream, "temperature": 0}
        if sampling is not None and not sampling.greedy:
            b |= asdict(sampling)
        if max_tokens is not None:
            b["max_tokens"] = max_tokens
        if tools:
            b["tools"] = tools
        if stream:
            b["stream_options"] = {"include_usage": True}
        return b

    def chat(self, messages: list[dict[str, Any]], *, max_tokens: int | None = None,
             tools: list[dict[str, Any]] | None = None, stream: bool = True,
             request_id: str | None = None, sampling: SamplingParams | None = None) -> Reply:
        """One reply; streamed (timed per token event) unless ``stream=False``.
        ``request_id`` goes in an ``X-Request-Id`` header (our server names the request's
        per-round log with it; llama-server ignores it)."""
        body = self.body(messages, max_tokens=max_tokens, tools=tools, stream=stream,
                         sampling=sampling)
        headers = {"X-Request-Id": request_id} if request_id else None
        if not stream:
            return self._plain(body, headers)
        return self._streamed(body, headers)

    def _plain(self, body: dict[str, Any], headers: dict[str, str] | None = None) -> Reply:
        t0 = time.perf_counter()
        r = self.http.post("/v1/chat/completions", json=body, headers=headers)
        t1 = time.perf_counter()
        if r.status_code != 200:
            raise ServerReplyError(r.status_code, _error_message(r.text))
        d = r.json()
        msg = d["choices"][0]["message"]
        usage = d.get("usage") or {}
        return Reply(text=msg.get("content") or "", tool_calls=list(msg.get("tool_calls") or []),
                     finish_reason=d["choices"][0].get("finish_reason"),
                     prompt_tokens=int(usage.get("prompt_tokens", 0)),
                     completion_tokens=int(usage.get("completion_tokens", 0)),
                     t_request=t0, t_first=None, t_last=None, t_done=t1, n_token_events=0,
                     n_chunks=1, timings=d.get("timings") or {}, streamed=False)

    def _streamed(self, body: dict[str, Any], headers: dict[str, str] | None = None) -> Reply:
        asm = MessageAssembler()
        reasoning: list[str] = []
        t_first = t_last = None
        n_events = n_chunks = 0
        finish = None
        usage: dict[str, Any] = {}
        timings: dict[str, Any] = {}
        t0 = time.perf_counter()
        with self.http.stream("POST", "/v1/chat/completions", json=body, headers=headers) as r:
            if r.status_code != 200:
                raise ServerReplyError(r.status_code, _error_message(r.read().decode()))
            for line in r.iter_lines():
                now = time.perf_counter()
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                obj = json.loads(data)
                n_chunks += 1
                if "error" in obj:
                    err = obj["error"]
                    raise ServerReplyError(int(err.get("code", 500)) if isinstance(err, dict)
                                           else 500, _error_message(json.dumps(obj)))
                for ch in obj.get("choices") or []:
                    delta = ch.get("delta") or {}
                    if _is_token_event(delta):
                        n_events += 1
                        if t_first is None:
                            t_first = now
                        t_last = now
                    asm.add(delta)
                    if delta.get("reasoning_content"):
                        reasoning.append(delta["reasoning_content"])
                    if ch.get("finish_reason"):
                        finish = ch["finish_reason"]
                if obj.get("usage"):
                    usage = obj["usage"]
                if obj.get("timings"):
                    timings = obj["timings"]
        t_done = time.perf_counter()
        return Reply(text=asm.text, tool_calls=asm.tool_calls, finish_reason=finish,
                     prompt_tokens=int(usage.get("prompt_tokens", 0)),
                     completion_tokens=int(usage.get("completion_tokens", 0)),
                     t_request=t0, t_first=t_first, t_last=t_last, t_done=t_done,
                     n_token_events=n_events, n_chunks=n_chunks, timings=timings,
                     reasoning="".join(reasoning))


def _error_message(text: str) -> str:
    try:
        d = json.loads(text)
        err = d.get("error", d)
        return str(err.get("message", err)) if isinstance(err, dict) else str(err)
    except (json.JSONDecodeError, AttributeError):
        return text.strip()[:500]


def wait_healthy(base_url: str, timeout_s: float = 60.0) -> None:
    """Poll ``GET /health`` until it answers 200."""
    deadline = time.monotonic() + timeout_s
    with httpx.Client(timeout=5.0) as http:
        while True:
            try:
                if http.get(f"{base_url.rstrip('/')}/health").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"{base_url} did not answer /health within {timeout_s} s")
            time.sleep(0.2)
