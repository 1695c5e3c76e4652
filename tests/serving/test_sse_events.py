"""The streamed token events rendered from a fixed envelope are the bytes the plain rendering
gives (issue 12: the event loop's cost per token)."""

from __future__ import annotations

import json

import pytest

from adaspark.serving.http import DeltaEvents, _sse

ENVELOPE = {"id": "chatcmpl-abc", "object": "chat.completion.chunk", "created": 1700000000,
            "model": "qwen \"coder\" 1.5b – ü", "choices": []}


@pytest.mark.parametrize("delta", [
    {"role": "assistant", "content": None},
    {"content": "def f(x):\n    return \"ü\" + '\\u0000'"},
    {"content": "日本語 </tool_call>"},
    {"tool_calls": [{"index": 0, "id": "c_1", "type": "function",
                     "function": {"name": "get", "arguments": "{\"a\": 1}"}}]},
    {},
])
def test_an_event_is_the_chunk_rendered_whole(delta):
    whole = {**ENVELOPE, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
    got = DeltaEvents(ENVELOPE).event(delta)
    assert got == _sse(whole)
    assert json.loads(got.decode()[len("data: "):]) == whole
