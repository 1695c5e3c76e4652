"""Tool calls without a model: the template probe, the generic fallback's messages, and the reply
parser's deltas (streamed or whole, the same message)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from adaspark.serving import chat
from adaspark.serving.tool_calls import (
    MessageAssembler,
    ReplyParser,
    TemplateCaps,
    parse_generic_calls,
    prepare_messages,
    probe_template,
)

HERE = Path(__file__).parent
QWEN_STYLE = (HERE / "qwen_style_template.jinja").read_text()
PLAIN = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
         "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]


def _render(template: str):
    return lambda messages, tools=None: chat.render(template, messages, tools=tools)


def _assemble(fmt: str, pieces: list[str]) -> tuple[dict, list[dict]]:
    p = ReplyParser(fmt, id_prefix="t")
    asm = MessageAssembler()
    deltas = []
    for piece in pieces:
        for d in p.feed(piece):
            deltas.append(d)
            asm.add(d)
    for d in p.finish():
        deltas.append(d)
        asm.add(d)
    return asm.message(), deltas


def _chars(text: str) -> list[str]:
    return list(text)


def test_probe_finds_qwen_style_and_plain_templates():
    assert probe_template(_render(QWEN_STYLE)) == TemplateCaps(True, True, True)
    caps = probe_template(_render(PLAIN))
    assert not caps.tools and caps.format == "generic"


REPLY = ('Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", '
         '"note": "a \\"quoted\\" } brace"}}\n</tool_call>')


@pytest.mark.parametrize("split", ["whole", "chars", "tokens"])
def test_tagged_call_is_the_same_however_it_is_fed(split):
    pieces = {"whole": [REPLY], "chars": _chars(REPLY),
              "tokens": [REPLY[i:i + 3] for i in range(0, len(REPLY), 3)]}[split]
    msg, _ = _assemble("tagged", pieces)
    assert msg["content"] == "Let me check."
    (call,) = msg["tool_calls"]
    assert call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"]) == {"city": "Paris",
                                                        "note": 'a "quoted" } brace'}
    assert call["id"] == "call_t0"


def test_tagged_arguments_stream_as_they_are_generated():
    _, deltas = _assemble("tagged", _chars(REPLY))
    arg_deltas = [d for d in deltas if d.get("tool_calls")
                  and d["tool_calls"][0]["function"].get("arguments")]
    assert len(arg_deltas) > 10  # one per character of the arguments object
    assert deltas[0] == {"content": "L"}


def test_two_calls_and_text_that_only_looks_like_a_tag():
    text = ('a < b and <tool_call>{"name": "f", "arguments": {}}</tool_call>\n'
            '<tool_call>{"name": "g", "arguments": {"x": [1, {"y": 2}]}}</tool_call>')
    msg, _ = _assemble("tagged", _chars(text))
    assert msg["content"] == "a < b and"
    assert [c["function"]["name"] for c in msg["tool_calls"]] == ["f", "g"]
    assert json.loads(msg["tool_calls"][1]["function"]["arguments"]) == {"x": [1, {"y": 2}]}


def test_tagged_malformed_call_stays_text_and_plain_text_passes():
    bad = "<tool_call>not json</tool_call> after"
    msg, _ = _assemble("tagged", _chars(bad))
    assert msg["content"] == bad and "tool_calls" not in msg
    msg, _ = _assemble("tagged", _chars("no tools here\n"))
    assert msg["content"] == "no tools here\n"
    cut = '<tool_call>{"name": "f", "argu'
    msg, _ = _assemble("tagged", [cut])
    assert msg["content"] == cut  # a call cut by the cap stays text


def test_arguments_first_is_parsed_at_the_close():
    text = '<tool_call>{"arguments": {"a": 1}, "name": "f"}</tool_call>'
    msg, _ = _assemble("tagged", _chars(text))
    assert msg["tool_calls"][0]["function"] == {"name": "f", "arguments": '{"a": 1}'}


def test_generic_fallback_calls_and_answers():
    msg, _ = _assemble("generic", _chars('```json\n{"name": "get_weather", "arguments": '
                                         '{"city": "Oslo"}}\n```'))
    assert msg["tool_calls"][0]["function"]["name"] == "get_weather"
    msg, deltas = _assemble("generic", _chars("It is sunny."))
    assert msg == {"role": "assistant", "content": "It is sunny."}
    assert len(deltas) == len("It is sunny.")  # not held back: streamed as it comes
    msg, _ = _assemble("generic", _chars('{"not": "a call"}'))
    assert msg["content"] == '{"not": "a call"}'
    assert parse_generic_calls('{"tool_call": {"name": "f", "arguments": {}}}') == [("f", "{}")]


def test_none_format_is_all_content():
    msg, deltas = _assemble("none", ["<tool_call>", "{}", "</tool_call>"])
    assert msg["content"] == "<tool_call>{}</tool_call>" and len(deltas) == 3


def test_generic_messages_describe_tools_and_rewrite_history():
    caps = probe_template(_render(PLAIN))
    history = [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
    ]
    msgs, tools = prepare_messages(history, TOOLS, caps)
    assert tools is None
    assert msgs[0]["role"] == "system" and "get_weather" in msgs[0]["content"]
    assert json.loads(msgs[2]["content"]) == {"name": "get_weather",
                                              "arguments": {"city": "Oslo"}}
    assert msgs[3] == {"role": "user", "content": "Result of get_weather:\nsunny"}
    text = chat.render(PLAIN, msgs)
    assert "<|im_start|>tool" not in text


def test_native_messages_pass_arguments_as_objects():
    caps = probe_template(_render(QWEN_STYLE))
    history = [{"role": "user", "content": "weather?"},
               {"role": "assistant", "content": None, "tool_calls": [
                   {"id": "c1", "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}]},
               {"role": "tool", "tool_call_id": "c1", "content": "sunny"}]
    msgs, tools = prepare_messages(history, TOOLS, caps)
    assert tools == TOOLS
    text = chat.render(QWEN_STYLE, msgs, tools=tools)
    assert '{"name": "get_weather", "arguments": {"city": "Oslo"}}' in text
    assert "<tool_response>\nsunny\n</tool_response>" in text
