"""Tool calls through both servers with a Qwen-style chat template (§4.1's ToolACE turns): the
tiny model, shown three earlier calls in its history, calls the tool again; our server parses the
``<tool_call>`` block into OpenAI ``tool_calls``, streamed and whole alike, and llama-server
parses the same template's calls for the same client."""

from __future__ import annotations

import json

import pytest

from adaspark.serving.client import ChatClient

pytestmark = pytest.mark.server

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}]


def _history() -> list[dict]:
    """Three earlier questions, each answered by a call: the tiny model follows the pattern."""
    msgs: list[dict] = []
    for k, city in enumerate(["Paris", "Rome", "Madrid"]):
        msgs += [
            {"role": "user", "content": f"What is the weather in {city}?"},
            {"role": "assistant", "content": None, "tool_calls": [{
                "id": f"call_{k}", "type": "function",
                "function": {"name": "get_weather", "arguments": json.dumps({"city": city})}}]},
        ]
    return [*msgs, {"role": "user", "content": "What is the weather in Berlin?"}]


def _check_call(reply) -> dict:
    assert reply.tool_calls, f"no tool call parsed from {reply.text!r}"
    fn = reply.tool_calls[0]["function"]
    assert fn["name"] == "get_weather"
    args = json.loads(fn["arguments"])
    assert isinstance(args, dict) and "city" in args
    return args


def test_our_server_parses_calls_streamed_and_whole(ours):
    with ChatClient(ours.url) as c:
        streamed = c.chat(_history(), max_tokens=40, tools=TOOLS)
        whole = c.chat(_history(), max_tokens=40, tools=TOOLS, stream=False)
        args = _check_call(streamed)
        assert whole.tool_calls[0]["function"] == streamed.tool_calls[0]["function"]
        assert streamed.finish_reason == whole.finish_reason == "tool_calls"
        assert streamed.n_token_events > 1  # the arguments stream as they are generated
        # the call carried as history with the recorded result: the model answers
        follow = [*_history(), streamed.message(),
                  {"role": "tool", "tool_call_id": streamed.tool_calls[0]["id"],
                   "content": "rainy, 12 C"}]
        answer = c.chat(follow, max_tokens=24, tools=TOOLS)
    assert args["city"] == "Berlin"
    assert answer.text and answer.completion_tokens > 0


def test_llama_server_parses_the_same_template(llama):
    with ChatClient(llama.url) as c:
        r = c.chat(_history(), max_tokens=40, tools=TOOLS)
    _check_call(r)
    assert r.finish_reason == "tool_calls"
