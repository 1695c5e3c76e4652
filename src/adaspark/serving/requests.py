"""A chat-completions request, checked before it reaches the engine: every message, content part,
tool and option is validated, and a bad one gets a 400 that names the field and what is allowed.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, replace
from typing import Any

from adaspark.decoding.sampling import SamplingParams
from adaspark.serving import tool_calls

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
    #: None: greedy decoding (temperature 0 or absent)
    sampling: SamplingParams | None = None


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


#: The deepest nesting of arrays and objects a request body may have (a chat request needs 6:
#: messages, a message, its content parts, a tool's JSON-schema parameters a few more).
MAX_JSON_DEPTH = 64


def json_depth(obj: Any) -> int:
    """How deeply ``obj``'s arrays and objects nest (0 for a scalar), without recursion."""
    deepest, stack = 0, [(obj, 1)]
    while stack:
        o, d = stack.pop()
        if isinstance(o, dict | list):
            deepest = max(deepest, d)
            if d > MAX_JSON_DEPTH:
                return d
            stack.extend((v, d + 1) for v in (o.values() if isinstance(o, dict) else o))
    return deepest


def decode_body(raw: bytes) -> Any:
    """A request body as JSON, refused (400) when it is not JSON or nests deeper than
    :data:`MAX_JSON_DEPTH` levels."""
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise RequestError(400, f"the request body is not valid JSON ({e}); send a JSON object "
                           "with `messages`") from None
    except RecursionError:
        body = None
        depth = MAX_JSON_DEPTH + 1
    else:
        depth = json_depth(body)
    if depth > MAX_JSON_DEPTH:
        raise RequestError(400, f"the request body nests arrays and objects more than "
                           f"{MAX_JSON_DEPTH} levels deep; a chat request needs far fewer: send "
                           "a flatter JSON object with `messages`")
    return body


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


def reply_cap(body: dict[str, Any]) -> int | None:
    """The request's cap on generated tokens: the smaller of ``max_tokens`` and
    ``max_completion_tokens`` among those given (a null is "not given"), or None."""
    caps = []
    for key in ("max_tokens", "max_completion_tokens"):
        v = body.get(key)
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise RequestError(400, f"`{key}` must be a positive integer or null, not {v!r}",
                               param=key)
        caps.append(v)
    return min(caps) if caps else None


def parse_request(body: Any, sampling_defaults: SamplingParams | None = None) -> ChatRequest:
    """Validate a decoded JSON body; raise :class:`RequestError` naming the bad field.
    ``sampling_defaults``: the server's values for the sampling fields a request leaves out (its
    config's ``sampling`` group); None refuses sampling."""
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
    max_tokens = reply_cap(body)
    sampling = sampling_params(body, sampling_defaults)
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
                       tools=tools, tool_choice=choice, sampling=sampling)


#: Fields that would change the distribution and that this server does not implement, with the
#: value that leaves it unchanged (llama-server's default): any other value is refused.
UNSUPPORTED_SAMPLING: dict[str, Any] = {
    "presence_penalty": 0, "frequency_penalty": 0, "repeat_penalty": 1, "logit_bias": None,
    "typical_p": 1, "mirostat": 0, "dynatemp_range": 0, "xtc_probability": 0,
    "dry_multiplier": 0, "top_n_sigma": -1, "top_logprobs": None,
}


def _number(body: dict[str, Any], key: str, ok: Any, allowed: str, *,
            integer: bool = False) -> Any:
    v = body[key]
    kind = int if integer else int | float
    if isinstance(v, bool) or not isinstance(v, kind) or (
            not integer and not math.isfinite(v)) or not ok(v):
        raise RequestError(400, f"`{key}` must be {allowed}, not {v!r}", param=key)
    return v


def sampling_params(body: dict[str, Any], defaults: SamplingParams | None
                    ) -> SamplingParams | None:
    """The request's sampling (:class:`~adaspark.decoding.sampling.SamplingParams`): None when
    ``temperature`` is 0 or absent (greedy decoding); the fields a request leaves out take
    ``defaults`` (the server's ``sampling`` group: llama-server's values), and a missing ``seed``
    a random one (as llama-server's). A bad value, or a field that would change the distribution
    and is not implemented here, is a 400 naming it."""
    for key, neutral in UNSUPPORTED_SAMPLING.items():
        v = body.get(key)
        if v is not None and v != neutral and v not in ({}, []):
            raise RequestError(400, f"`{key}` is not supported by this server (it samples with "
                               "temperature, top_k, top_p, min_p and seed); leave it out",
                               param=key)
    got: dict[str, Any] = {}
    if body.get("temperature") is not None:
        got["temperature"] = float(_number(body, "temperature", lambda v: v >= 0,
                                           "a finite number >= 0 (0 or absent: greedy)"))
    if body.get("top_k") is not None:
        got["top_k"] = _number(body, "top_k", lambda v: v >= 0, "an integer >= 0 (0: off)",
                               integer=True)
    if body.get("top_p") is not None:
        got["top_p"] = float(_number(body, "top_p", lambda v: 0 < v <= 1,
                                     "a number in (0, 1] (1: off)"))
    if body.get("min_p") is not None:
        got["min_p"] = float(_number(body, "min_p", lambda v: 0 <= v <= 1,
                                     "a number in [0, 1] (0: off)"))
    if body.get("seed") is not None:
        got["seed"] = _number(body, "seed", lambda v: 0 <= v < 2**63,
                              "a non-negative integer", integer=True)
    if got.get("temperature", 0.0) == 0.0:
        return None
    if defaults is None:
        raise RequestError(400, "this server has no sampling defaults (it was started without "
                           "a `sampling` config group): send temperature 0", param="temperature")
    seed = got.pop("seed", None)
    if seed is None:
        seed = int.from_bytes(os.urandom(7), "little")
    return replace(defaults, **got, seed=seed)
