"""ToolACE: tool list from the system prompt, results attached, Python types renamed."""

from __future__ import annotations

import json

from adaspark.testset import toolace
from adaspark.testset.model import canonical_sha256, text_hash
from adaspark.testset.rules import parse_tool_list, rename_schema_types

FUNCS = [
    {
        "name": "Search Items",
        "description": "Find items.",
        "parameters": {
            "type": "dict",
            "properties": {
                "limit": {"type": "int", "description": "how many", "default": 5},
                "filters": {
                    "type": "array",
                    "items": {
                        "type": "dict",
                        "properties": {
                            "price": {"type": "float"},
                            "type": {"type": "str", "description": "a property named type"},
                            "tags": {"type": "list", "items": {"type": "str"}},
                        },
                    },
                },
                "mode": {"type": "string", "enum": ["int", "dict"]},
                "exact": {"type": "bool"},
            },
            "required": ["limit"],
        },
        "required": None,
    },
    {"name": "No Params", "description": "Takes nothing."},
]


def system(funcs=FUNCS) -> str:
    return (
        "You are an expert in composing functions. Here is a list of functions in JSON format "
        f"that you can invoke:\n{json.dumps(funcs)}. Should you decide to return the function "
        "call(s), put them in the format of [func1(params_name=params_value)]."
    )


def m(frm: str, value: str) -> dict:
    return {"from": frm, "value": value}


def dialogue(tag: str, *, result: str = '[{"name": "Search Items", "results": []}]') -> list[dict]:
    return [
        m("user", f"{tag}: find me items"),
        m("assistant", "[Search Items(limit=3)]"),
        m("tool", result),
        m("assistant", "Here they are."),
        m("user", f"{tag}: thanks, and what is a widget?"),
        m("assistant", "A widget is ..."),
    ]


def rows() -> list[dict]:
    long_result = "r" * (12_000 - len("x: find me items") - len("x: thanks, and what is a widget?"))
    five_turns = [
        *dialogue("five"),
        m("user", "five: third"),
        m("assistant", "[Search Items(limit=1)]"),
        m("tool", "third result"),
        m("assistant", "ok"),
        m("user", "five: fourth"),
        m("assistant", "ok"),
        m("user", "five: fifth, cut"),
        m("assistant", "[Search Items(limit=9)]"),
        m("tool", "never kept"),
    ]
    return [
        {"system": system(), "conversations": five_turns},  # 0: cut to four turns
        {"system": "You are a helpful assistant.", "conversations": dialogue("noschema")},  # 1
        {
            "system": system(),
            "conversations": [
                m("user", "hi"),
                m("assistant", "hello"),
                m("user", "bye"),
                m("assistant", "bye"),
            ],
        },  # 2
        {"system": system(), "conversations": dialogue("single")[:4]},  # 3: one user turn
        {"system": system(), "conversations": dialogue("x", result=long_result + "r")},  # 4: over
        {"system": system(), "conversations": dialogue("x", result=long_result)},  # 5: at the cap
        {"system": system(), "conversations": json.dumps(dialogue("as-string"))},  # 6
        *({"system": system(), "conversations": dialogue(f"ok{k}")} for k in range(7, 13)),
    ]


def test_rename_through_nested_schemas():
    renamed = rename_schema_types(FUNCS[0]["parameters"])
    assert renamed["type"] == "object"
    props = renamed["properties"]
    assert props["limit"] == {"type": "integer", "description": "how many", "default": 5}
    inner = props["filters"]["items"]
    assert inner["type"] == "object"
    assert inner["properties"]["price"]["type"] == "number"
    assert inner["properties"]["type"] == {"type": "string", "description": "a property named type"}
    assert inner["properties"]["tags"] == {"type": "array", "items": {"type": "string"}}
    assert props["mode"]["enum"] == ["int", "dict"]  # values that are not types are untouched
    assert props["exact"]["type"] == "boolean"
    assert FUNCS[0]["parameters"]["type"] == "dict"  # the input is not modified


def test_tool_list_is_the_json_array_after_the_marker():
    assert parse_tool_list(system()) == FUNCS
    assert parse_tool_list("no list here") is None
    assert parse_tool_list("you can invoke:\n[{broken") is None


def test_rule_on_a_mirror(tmp_path, write_json):
    write_json(tmp_path / "data.json", rows())
    s = toolace.build_from_mirror(tmp_path)
    # 1 has no tool list, 2 no tool result, 3 one user turn, 4 over the cap by its result
    assert [c.source_id for c in s.conversations] == ["0", "5", "6", "7", "8", "9", "10", "11"]
    assert [c.name for c in s.conversations] == [f"ta-{i}" for i in range(1, 9)]
    assert s.provenance["no_schema"] == 1

    first = s.conversations[0]
    assert first.texts == [
        "five: find me items",
        "five: thanks, and what is a widget?",
        "five: third",
        "five: fourth",
    ]
    assert [t.result for t in first.turns] == [
        '[{"name": "Search Items", "results": []}]',
        None,
        "third result",
        None,
    ]
    tool = first.tools[0]
    assert tool["type"] == "function"
    assert tool["function"]["name"] == "Search Items"
    assert tool["function"]["parameters"] == rename_schema_types(FUNCS[0]["parameters"])
    assert "required" not in tool["function"]  # only name, description and parameters
    assert first.tools[1]["function"]["parameters"] == {"type": "object", "properties": {}}
    assert s.conversation("ta-3").texts[0] == "as-string: find me items"


def test_text_hash_ignores_tools_and_results_the_full_hash_does_not(tmp_path, write_json):
    write_json(tmp_path / "data.json", rows())
    c = toolace.build_from_mirror(tmp_path).conversations[1]
    other = toolace.to_conversation(
        c.name,
        toolace.ToolDialogue(c.source_id, tuple(c.texts), (None,) * len(c.texts), []),
    )
    assert text_hash(other.texts) == c.sha256 == other.sha256
    assert canonical_sha256(other) != canonical_sha256(c)
