"""Tools in a chat: how a request's tools reach the prompt and how calls come back out (§4.1).

The paper serves ToolACE conversations over each engine's HTTP API, with tool calls rendered and
parsed as llama-server does under ``--jinja`` (Appendix A: "a tool turn gives two timed
replies"). Three parts, all pure (no model needed):

* :func:`probe_template` asks a chat template, by rendering a few probe conversations, whether it
  renders a ``tools`` list, whether it wants a call's ``arguments`` as an object or as a JSON
  string, and whether it uses Qwen2.5's ``<tool_call>`` tags.
* :func:`prepare_messages` turns OpenAI-style messages into what the template renders. A template
  with tool support gets the tools and the history as they are; a template without it gets the
  generic fallback: the tools described in the system message, earlier calls written as the JSON
  object the model is asked to produce, and tool results as user messages.
* :class:`ReplyParser` turns the generated text, fed piece by piece as it is decoded, into OpenAI
  ``delta`` objects: ``content`` text and ``tool_calls`` fragments. A streamed reply and a
  non-streamed one are assembled from the same deltas (:class:`MessageAssembler`), so the two can
  never disagree.

Formats: ``tagged`` (Qwen2.5 and other Hermes-style templates: ``<tool_call>{"name": ..,
"arguments": {..}}</tool_call>``, the arguments streamed as they are generated), ``generic`` (a
reply that is one JSON object ``{"name": .., "arguments": ..}``, decided when the reply ends) and
``none`` (no tools in the request: everything is content).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from adaspark.serving import chat

OPEN_TAG = "<tool_call>"
CLOSE_TAG = "</tool_call>"

#: Formats a reply parser knows.
FORMATS = ("none", "tagged", "generic")

_PROBE_NAME = "adaspark_probe_tool"
_PROBE_ARG = "adaspark_probe_arg"


class ToolRequestError(ValueError):
    """The request's tools or tool messages are malformed; the message names the field."""


# ---------------------------------------------------------------------------------------------
# What a template can do


@dataclass(frozen=True)
class TemplateCaps:
    """What :func:`probe_template` found out about a chat template.

    ``tools``: it renders the request's ``tools``. ``object_arguments``: it expects a call's
    ``arguments`` as a mapping (it serialises them itself, e.g. with ``tojson``). ``tagged``: its
    instructions ask for ``<tool_call>`` tags (Qwen2.5's family).
    """

    tools: bool
    object_arguments: bool
    tagged: bool

    @property
    def format(self) -> str:
        """The reply format to parse when a request carries tools."""
        if not self.tools:
            return "generic"
        return "tagged" if self.tagged else "generic"


def _probe_tool() -> dict[str, Any]:
    return {"type": "function", "function": {
        "name": _PROBE_NAME, "description": "probe",
        "parameters": {"type": "object", "properties": {_PROBE_ARG: {"type": "integer"}}}}}


def probe_template(render: Callable[..., str]) -> TemplateCaps:
    """Probe a template through ``render(messages, tools=...)`` (``chat.render`` with the template
    bound). Rendering errors count as "not supported"."""
    user = [{"role": "user", "content": "hi"}]
    try:
        with_tools = render(user, tools=[_probe_tool()])
    except chat.ChatTemplateError:
        with_tools = ""
    supports = _PROBE_NAME in with_tools
    tagged = supports and OPEN_TAG in with_tools
    object_args = True
    if supports:
        call = {"id": "call_0", "type": "function",
                "function": {"name": _PROBE_NAME, "arguments": {_PROBE_ARG: 7}}}
        history = [*user, {"role": "assistant", "content": None, "tool_calls": [call]},
                   {"role": "tool", "tool_call_id": "call_0", "content": "ok"}]
        try:
            out = render(history, tools=[_probe_tool()])
            object_args = f'"{_PROBE_ARG}": 7' in out or f'"{_PROBE_ARG}":7' in out
        except chat.ChatTemplateError:
            object_args = False
    return TemplateCaps(tools=supports, object_arguments=object_args, tagged=tagged)


# ---------------------------------------------------------------------------------------------
# Requests: validation and what the template renders


def validate_tools(tools: Any) -> list[dict[str, Any]]:
    """Check an OpenAI ``tools`` list; return it unchanged. Raises :class:`ToolRequestError`."""
    if not isinstance(tools, list):
        raise ToolRequestError("`tools` must be a list of {\"type\": \"function\", "
                               "\"function\": {...}} objects")
    for i, t in enumerate(tools):
        if not isinstance(t, dict) or t.get("type", "function") != "function":
            raise ToolRequestError(f"tools[{i}] must be an object with \"type\": \"function\"")
        fn = t.get("function")
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
            raise ToolRequestError(f"tools[{i}].function must be an object with a non-empty "
                                   "string \"name\"")
        params = fn.get("parameters")
        if params is not None and not isinstance(params, dict):
            raise ToolRequestError(f"tools[{i}].function.parameters must be a JSON Schema object")
    return tools


def tool_names(tools: list[dict[str, Any]] | None) -> list[str]:
    return [t["function"]["name"] for t in tools or []]


def _arguments_object(args: Any) -> Any:
    """A call's arguments as a mapping when they are a JSON string holding one."""
    if isinstance(args, str):
        try:
            return json.loads(args)
        except json.JSONDecodeError:
            return args
    return args


def _arguments_text(args: Any) -> str:
    return args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)


def generic_system_text(tools: list[dict[str, Any]]) -> str:
    """The generic fallback's tool description, added to the system message (our wording)."""
    lines = [json.dumps(t["function"], ensure_ascii=False) for t in tools]
    return (
        "You can use the tools listed below. To use one, reply with nothing but a JSON object "
        "of the form {\"name\": \"<tool name>\", \"arguments\": {<arguments>}}. The tool's "
        "result will be sent to you in the next message. If no tool is needed, answer "
        "normally.\nTools:\n" + "\n".join(lines)
    )


def _call_as_text(call: dict[str, Any]) -> str:
    fn = call.get("function", call)
    return json.dumps({"name": fn.get("name"), "arguments": _arguments_object(fn.get("arguments"))},
                      ensure_ascii=False)


def prepare_messages(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, caps: TemplateCaps
) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """Messages and tools as the template should see them (see the module docstring)."""
    out: list[dict[str, Any]] = []
    names: dict[str, str] = {}
    native = caps.tools
    for m in messages:
        m = dict(m)
        if m.get("content") is None and m.get("role") != "assistant":
            m["content"] = ""
        calls = m.get("tool_calls")
        if calls:
            for c in calls:
                names[str(c.get("id"))] = c.get("function", {}).get("name", "")
            if native:
                fixed = []
                for c in calls:
                    fn = dict(c.get("function", {}))
                    fn["arguments"] = (_arguments_object(fn.get("arguments"))
                                       if caps.object_arguments
                                       else _arguments_text(fn.get("arguments")))
                    fixed.append({**c, "function": fn})
                m["tool_calls"] = fixed
            else:
                text = "\n".join(_call_as_text(c) for c in calls)
                m = {"role": "assistant",
                     "content": (m.get("content") or "") + ("\n" if m.get("content") else "")
                     + text}
        if m.get("role") == "assistant" and m.get("content") is None and not m.get("tool_calls"):
            m["content"] = ""
        if m.get("role") == "tool" and not native:
            name = names.get(str(m.get("tool_call_id")), m.get("name") or "the tool")
            m = {"role": "user", "content": f"Result of {name}:\n{m.get('content', '')}"}
        out.append(m)
    if not tools:
        return out, None
    if native:
        return out, tools
    text = generic_system_text(tools)
    if out and out[0].get("role") == "system":
        out[0] = {**out[0], "content": f"{out[0].get('content') or ''}\n\n{text}".lstrip()}
    else:
        out.insert(0, {"role": "system", "content": text})
    return out, None


# ---------------------------------------------------------------------------------------------
# Replies: from text pieces to OpenAI deltas


def _partial_tag_suffix(text: str, tag: str) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of ``tag``."""
    for k in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:k]):
            return k
    return 0


_HEADER = re.compile(r'\s*\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*"arguments"\s*:\s*')


@dataclass
class _Call:
    """One ``<tool_call>`` block being read."""

    index: int
    raw: str = ""
    header_sent: bool = False
    args_start: int = -1       # offset of the arguments value in ``raw``
    args_sent: int = 0         # characters of the value already sent
    args_streaming: bool = False
    args_done: bool = False
    depth: int = 0
    in_string: bool = False
    escape: bool = False


@dataclass
class ReplyParser:
    """Generated text in, OpenAI ``delta`` objects out (see the module docstring).

    ``feed(text)`` returns the deltas that text releases; ``finish()`` those left when the reply
    ends. ``call_id(index)`` names each call (``call_<prefix><index>``).
    """

    format: str = "none"
    id_prefix: str = ""
    _buf: str = ""
    _call: _Call | None = None
    _n_calls: int = 0
    _ws: str = ""  # whitespace-only content held until more content follows (tagged format)
    _held: str = ""  # generic format: the whole reply, held while it may be a JSON call
    _generic_mode: str = "undecided"  # undecided | hold | content

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise ValueError(f"unknown tool-call format {self.format!r}; known: {FORMATS}")

    def call_id(self, index: int) -> str:
        return f"call_{self.id_prefix}{index}"

    # -- content ------------------------------------------------------------------------------

    def _content(self, text: str) -> list[dict[str, Any]]:
        if not text:
            return []
        if self.format == "tagged":
            # trailing whitespace waits: before a call it is dropped, however the text was split
            body = text.rstrip()
            if not body:
                self._ws += text
                return []
            text, self._ws = self._ws + body, text[len(body):]
        return [{"content": text}]

    # -- entry points -------------------------------------------------------------------------

    def feed(self, text: str) -> list[dict[str, Any]]:
        if self.format == "none":
            return [{"content": text}] if text else []
        if self.format == "generic":
            return self._feed_generic(text)
        return self._feed_tagged(text)

    def finish(self) -> list[dict[str, Any]]:
        if self.format == "none":
            return []
        if self.format == "generic":
            return self._finish_generic()
        out: list[dict[str, Any]] = []
        if self._call is not None:
            call, self._call = self._call, None
            out += self._close_call(call, terminated=False)
        if self._buf:
            out += self._content(self._buf)
            self._buf = ""
        if self._ws and self._n_calls == 0:
            out.append({"content": self._ws})
        self._ws = ""
        return out

    # -- tagged format --------------------------------------------------------------------------

    def _feed_tagged(self, text: str) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        self._buf += text
        while self._buf:
            if self._call is None:
                at = self._buf.find(OPEN_TAG)
                if at < 0:
                    keep = _partial_tag_suffix(self._buf, OPEN_TAG)
                    out += self._content(self._buf[: len(self._buf) - keep])
                    self._buf = self._buf[len(self._buf) - keep:]
                    break
                out += self._content(self._buf[:at])
                self._buf = self._buf[at + len(OPEN_TAG):]
                self._call = _Call(index=self._n_calls)
                continue
            call = self._call
            at = self._buf.find(CLOSE_TAG)
            if at < 0:
                keep = _partial_tag_suffix(self._buf, CLOSE_TAG)
                call.raw += self._buf[: len(self._buf) - keep]
                self._buf = self._buf[len(self._buf) - keep:]
                out += self._advance(call)
                break
            call.raw += self._buf[:at]
            self._buf = self._buf[at + len(CLOSE_TAG):]
            out += self._advance(call)
            self._call = None
            out += self._close_call(call, terminated=True)
        return out

    def _advance(self, call: _Call) -> list[dict[str, Any]]:
        """Send what the call's text so far allows: its name once known, then the arguments
        object character by character as it is generated."""
        out: list[dict[str, Any]] = []
        if not call.header_sent:
            m = _HEADER.match(call.raw)
            if m is None or m.end() >= len(call.raw):
                return out
            first = call.raw[m.end()]
            if first not in "{[":
                return out  # a string or scalar value: sent whole when the call closes
            try:
                name = json.loads(f'"{m.group(1)}"')
            except json.JSONDecodeError:
                return out
            call.header_sent = True
            call.args_start = m.end()
            call.args_streaming = True
            self._n_calls += 1
            out.append({"tool_calls": [{"index": call.index, "id": self.call_id(call.index),
                                        "type": "function",
                                        "function": {"name": name, "arguments": ""}}]})
        if call.args_streaming and not call.args_done:
            start = call.args_start + call.args_sent
            value = call.raw[start:]
            end = self._scan(call, value)
            piece = value if end is None else value[:end]
            call.args_sent += len(piece)
            if piece:
                out.append({"tool_calls": [{"index": call.index,
                                            "function": {"arguments": piece}}]})
        return out

    @staticmethod
    def _scan(call: _Call, text: str) -> int | None:
        """Advance the JSON scanner over ``text``; the end offset when the value closes."""
        for i, ch in enumerate(text):
            if call.in_string:
                if call.escape:
                    call.escape = False
                elif ch == "\\":
                    call.escape = True
                elif ch == '"':
                    call.in_string = False
                continue
            if ch == '"':
                call.in_string = True
            elif ch in "{[":
                call.depth += 1
            elif ch in "}]":
                call.depth -= 1
                if call.depth == 0:
                    call.args_done = True
                    return i + 1
        return None

    def _close_call(self, call: _Call, *, terminated: bool) -> list[dict[str, Any]]:
        if call.header_sent:
            return []  # already sent; whatever follows the arguments value is syntax
        try:
            obj = json.loads(call.raw)
        except json.JSONDecodeError:
            obj = None
        if isinstance(obj, dict) and isinstance(obj.get("name"), str) and "arguments" in obj:
            index = self._n_calls
            self._n_calls += 1
            fn = {"name": obj["name"], "arguments": _arguments_text(obj["arguments"])}
            return [{"tool_calls": [{"index": index, "id": self.call_id(index),
                                     "type": "function", "function": fn}]}]
        raw = OPEN_TAG + call.raw + (CLOSE_TAG if terminated else "")
        self._ws, ws = "", self._ws
        return [{"content": ws + raw}]

    # -- generic format -------------------------------------------------------------------------

    def _feed_generic(self, text: str) -> list[dict[str, Any]]:
        if self._generic_mode == "content":
            return [{"content": text}] if text else []
        self._held += text
        if self._generic_mode == "undecided":
            stripped = self._held.lstrip()
            if not stripped:
                return []
            if stripped[0] in "{`":
                self._generic_mode = "hold"
                return []
            self._generic_mode = "content"
            held, self._held = self._held, ""
            return [{"content": held}]
        return []

    def _finish_generic(self) -> list[dict[str, Any]]:
        held, self._held = self._held, ""
        if not held:
            return []
        calls = parse_generic_calls(held)
        if not calls:
            return [{"content": held}]
        out = []
        for name, args in calls:
            index = self._n_calls
            self._n_calls += 1
            out.append({"tool_calls": [{"index": index, "id": self.call_id(index),
                                        "type": "function",
                                        "function": {"name": name, "arguments": args}}]})
        return out


_FENCE = re.compile(r"^```[a-zA-Z]*\s*\n?(.*?)\n?```$", re.DOTALL)


def parse_generic_calls(text: str) -> list[tuple[str, str]]:
    """Calls in a generic-fallback reply: one JSON object ``{"name", "arguments"}`` (or
    ``{"tool_call": {...}}``, ``{"tool_calls": [...]}``), optionally in a code fence. Empty when
    the reply is not such an object."""
    s = text.strip()
    m = _FENCE.match(s)
    if m:
        s = m.group(1).strip()
    try:
        obj = json.loads(s)
    except json.JSONDecodeError:
        return []
    if not isinstance(obj, dict):
        return []
    items: list[Any]
    if "tool_calls" in obj and isinstance(obj["tool_calls"], list):
        items = obj["tool_calls"]
    elif "tool_call" in obj:
        items = [obj["tool_call"]]
    else:
        items = [obj]
    out = []
    for it in items:
        if not (isinstance(it, dict) and isinstance(it.get("name"), str) and "arguments" in it):
            return []
        out.append((it["name"], _arguments_text(it["arguments"])))
    return out


# ---------------------------------------------------------------------------------------------
# Deltas back into a message


@dataclass
class MessageAssembler:
    """Builds the final assistant message from the deltas a reply streamed (or would have)."""

    content: list[str] = field(default_factory=list)
    calls: dict[int, dict[str, Any]] = field(default_factory=dict)

    def add(self, delta: dict[str, Any]) -> None:
        if delta.get("content"):
            self.content.append(delta["content"])
        for tc in delta.get("tool_calls") or []:
            i = int(tc.get("index", 0))
            call = self.calls.setdefault(
                i, {"id": None, "type": "function", "function": {"name": "", "arguments": ""}})
            if tc.get("id"):
                call["id"] = tc["id"]
            fn = tc.get("function") or {}
            call["function"]["name"] += fn.get("name") or ""
            call["function"]["arguments"] += fn.get("arguments") or ""

    @property
    def text(self) -> str:
        return "".join(self.content)

    @property
    def tool_calls(self) -> list[dict[str, Any]]:
        return [self.calls[i] for i in sorted(self.calls)]

    def message(self) -> dict[str, Any]:
        msg: dict[str, Any] = {"role": "assistant", "content": self.text}
        if self.calls:
            msg["tool_calls"] = self.tool_calls
            if not self.text:
                msg["content"] = None
        return msg
