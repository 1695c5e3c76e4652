"""Request validation and the runner's bookkeeping, without a model."""

from __future__ import annotations

import json
import math

import pytest
from helpers import run_defaults
from omegaconf import OmegaConf

from adaspark.decoding.sampling import SamplingParams
from adaspark.runs.conversation import row_message, tool_result_messages
from adaspark.runs.rows import ReplyRow, make_row, reply_status
from adaspark.runs.settings import ArmEntry, RunError, RunMismatchError, RunSettings
from adaspark.runs.store import ResultStore
from adaspark.serving.client import Reply
from adaspark.serving.requests import RequestError, parse_request
from adaspark.serving.service import merge_deltas
from adaspark.testset import Conversation, Turn

MSG = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize("body,field", [
    ([], None),
    ({"messages": []}, "messages"),
    ({"messages": "hi"}, "messages"),
    ({"messages": [{"role": "bot", "content": "x"}]}, "messages[0].role"),
    ({"messages": [{"role": "user", "content": 3}]}, "messages[0].content"),
    ({"messages": MSG, "stream": "yes"}, "stream"),
    ({"messages": MSG, "max_tokens": 0}, "max_tokens"),
    ({"messages": MSG, "max_tokens": "8"}, "max_tokens"),
    ({"messages": MSG, "temperature": "0"}, "temperature"),
    ({"messages": MSG, "temperature": 0.7, "top_p": 0}, "top_p"),
    ({"messages": MSG, "temperature": 0.7, "top_p": 1.5}, "top_p"),
    ({"messages": MSG, "temperature": 0.7, "top_k": -1}, "top_k"),
    ({"messages": MSG, "temperature": 0.7, "top_k": 2.5}, "top_k"),
    ({"messages": MSG, "temperature": 0.7, "min_p": 2}, "min_p"),
    ({"messages": MSG, "temperature": 0.7, "seed": -3}, "seed"),
    ({"messages": MSG, "temperature": 0.7, "seed": "7"}, "seed"),
    ({"messages": MSG, "temperature": 0.7, "seed": True}, "seed"),
    ({"messages": MSG, "presence_penalty": 0.5}, "presence_penalty"),
    ({"messages": MSG, "frequency_penalty": 1}, "frequency_penalty"),
    ({"messages": MSG, "logit_bias": {"5": 2}}, "logit_bias"),
    ({"messages": MSG, "n": 2}, "n"),
    ({"messages": MSG, "logprobs": True}, "logprobs"),
    ({"messages": MSG, "tools": {"name": "f"}}, "tools"),
    ({"messages": MSG, "tools": [{"type": "function", "function": {}}]}, "tools"),
    ({"messages": MSG, "tool_choice": "required"}, "tool_choice"),
    ({"messages": MSG, "stop": ["\n"]}, "stop"),
    ({"messages": MSG, "max_completion_tokens": 0}, "max_completion_tokens"),
    ({"messages": MSG, "max_tokens": 3, "max_completion_tokens": "8"}, "max_completion_tokens"),
    ({"messages": MSG, "temperature": float("nan")}, "temperature"),
    ({"messages": MSG, "temperature": -1}, "temperature"),
    ({"messages": MSG, "temperature": float("-inf")}, "temperature"),
])
def test_bad_requests_name_the_field(body, field):
    with pytest.raises(RequestError) as e:
        parse_request(body, SamplingParams(0.0, 40, 0.95, 0.05, 0))
    assert e.value.status == 400 and e.value.param == field
    assert e.value.body()["error"]["message"]


def test_sampling_fields_take_the_servers_defaults_and_zero_is_greedy():
    from adaspark.config import compose
    from adaspark.config_check import validate

    d = validate(compose(["target=tiny", "drafter=tiny-truncated"]), command="serve").sampling
    assert (d.top_k, d.top_p, d.min_p) == (40, 0.95, 0.05)  # llama-server's, conf/config.yaml
    assert parse_request({"messages": MSG}, d).sampling is None
    assert parse_request({"messages": MSG, "temperature": 0, "top_k": 5}, d).sampling is None
    r = parse_request({"messages": MSG, "temperature": 0.7, "seed": 11}, d)
    assert r.sampling == SamplingParams(0.7, d.top_k, d.top_p, d.min_p, 11)
    r = parse_request({"messages": MSG, "temperature": 1, "top_k": 0, "top_p": 0.9,
                       "min_p": 0.1, "seed": 0, "presence_penalty": 0, "logit_bias": {}}, d)
    assert r.sampling == SamplingParams(1.0, 0, 0.9, 0.1, 0)
    unseeded = {parse_request({"messages": MSG, "temperature": 1}, d).sampling.seed
                for _ in range(5)}
    assert len(unseeded) > 1  # a request without a seed gets a random one, as llama-server's
    with pytest.raises(RequestError, match=r"send temperature 0"):
        parse_request({"messages": MSG, "temperature": 1})  # a server without defaults


def test_good_request_and_text_parts():
    r = parse_request({"messages": [{"role": "user", "content": [{"type": "text", "text": "a"},
                                                                 {"type": "text", "text": "b"}]}],
                       "stream": True, "max_tokens": 5, "temperature": 0, "model": "x"})
    assert r.messages[0]["content"] == "ab" and r.stream and r.max_tokens == 5


@pytest.mark.parametrize("caps,expected", [
    ({"max_tokens": 3, "max_completion_tokens": None}, 3),
    ({"max_tokens": None, "max_completion_tokens": 4}, 4),
    ({"max_tokens": 3, "max_completion_tokens": 9}, 3),
    ({"max_tokens": 9, "max_completion_tokens": 3}, 3),
    ({"max_tokens": None, "max_completion_tokens": None}, None),
    ({}, None),
])
def test_a_null_cap_is_not_given_and_the_smaller_cap_applies(caps, expected):
    """Issue 34 item 5: ``"max_completion_tokens": null`` does not cancel ``"max_tokens": 3``."""
    assert parse_request({"messages": MSG, **caps}).max_tokens == expected


def test_merge_deltas_joins_one_tokens_fragments():
    d = merge_deltas([{"content": "a"}, {"content": "b"},
                      {"tool_calls": [{"index": 0, "id": "c", "function": {"name": "f",
                                                                        "arguments": ""}}]},
                      {"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}])
    assert d == {"content": "ab", "tool_calls": [{"index": 0, "id": "c",
                                                  "function": {"name": "f", "arguments": "{}"}}]}
    assert merge_deltas([]) == {}


def _reply(n_tokens: int, n_events: int, finish: str = "stop", calls=None) -> Reply:
    return Reply(text="x" * n_events, tool_calls=calls or [], finish_reason=finish,
                 prompt_tokens=10, completion_tokens=n_tokens, t_request=0.0,
                 t_first=0.5 if n_events else None, t_last=0.5 + 0.1 * max(n_events - 1, 0)
                 if n_events else None, t_done=2.0, n_token_events=n_events, n_chunks=n_events)


def test_statuses_follow_the_order():
    assert reply_status(_reply(40, 39), 128, 8192) == "finished"
    assert reply_status(_reply(128, 128, "length"), 128, 8192) == "cut"
    assert reply_status(_reply(8192, 8192, "length"), 8192, 8192) == "looped"
    assert reply_status(_reply(30, 1, "tool_calls"), 128, 8192) == "single-delta"
    r = _reply(11, 11)
    assert r.decode_tps == pytest.approx(10 / 1.0) and r.ttft_s == 0.5


CONV = Conversation("ta-1", "tools", "src", "0", 1, "h",
                    (Turn("tools", "first", "weather?", result='[{"a": 1}, {"b": 2}]'),))


def test_rows_append_resume_and_refuse_other_fingerprints(tmp_path):
    store = ResultStore(tmp_path / "arm")
    fp = {"binary": {"sha256": "aa"}, "models": {"target": {"sha256": "bb"}}, "run": {"cap": 8}}
    digest = store.fingerprint_check(fp)
    calls = [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
    row = make_row(_reply(5, 1, "tool_calls", calls), entry=ArmEntry.parse("adaspark@2"),
                   engine="ours", set_name="toolace", conv=CONV, turn=0, reply_index=0,
                   max_tokens=8, protocol_cap=8192, fingerprint=digest)
    assert isinstance(row, ReplyRow) and row.arm == "adaspark" and row.repeat == 2
    assert row.status == "single-delta" and math.isnan(row.decode_tps)
    store.append(row)
    store.append(make_row(_reply(8, 8, "length"), entry=ArmEntry.parse("adaspark@2"),
                          engine="ours", set_name="toolace", conv=CONV, turn=0, reply_index=1,
                          max_tokens=8, protocol_cap=8192, fingerprint=digest))
    rows = ResultStore(tmp_path / "arm").rows()
    assert [(r["turn"], r["reply"], r["status"]) for r in rows] == [(0, 0, "single-delta"),
                                                                    (0, 1, "cut")]
    assert row_message(rows[0]) == {"role": "assistant", "content": "x", "tool_calls": calls}
    assert store.fingerprint_check(fp) == digest  # same fingerprint: resumes
    other = json.loads(json.dumps(fp))
    other["models"]["target"]["sha256"] = "cc"
    with pytest.raises(RunMismatchError, match=r"models.target.sha256: 'bb' -> 'cc'"):
        store.fingerprint_check(other)


def test_the_drafter_prefill_is_the_servers_in_seconds_or_null():
    def prefill(timings):
        r = _reply(8, 8)
        r.timings = timings
        return make_row(r, entry=ArmEntry.parse("chain3"), engine="ours", set_name="toolace",
                        conv=CONV, turn=0, reply_index=0, max_tokens=8, protocol_cap=8192,
                        fingerprint="f").drafter_prefill_s

    assert prefill({"drafter_prefill_ms": 1250.0}) == pytest.approx(1.25)
    assert prefill({"drafter_prefill_ms": 0.0}) == 0.0  # our arm without a drafter
    assert math.isnan(prefill({"prompt_ms": 80.0, "draft_n": 12}))  # llama-server says nothing


def test_tool_results_split_per_call_or_repeat():
    calls = [{"id": "a", "function": {"name": "f"}}, {"id": "b", "function": {"name": "g"}}]
    split = tool_result_messages(calls, '[{"a": 1}, {"b": 2}]')
    assert [m["content"] for m in split] == ['{"a": 1}', '{"b": 2}']
    whole = tool_result_messages(calls[:1], '[{"a": 1}, {"b": 2}]')
    assert whole[0]["content"] == '[{"a": 1}, {"b": 2}]' and whole[0]["tool_call_id"] == "a"


def test_run_settings_and_entries():
    s = RunSettings.from_config(OmegaConf.create({"run": run_defaults(subset="smoke", cap=16)}))
    assert (s.subset, s.cap, s.max_tokens) == ("smoke", 16, 16)
    with pytest.raises(RunError, match="no `run` section"):
        RunSettings.from_config(OmegaConf.create({}))
    with pytest.raises(RunError, match="unknown key"):
        RunSettings.from_config(OmegaConf.create({"run": run_defaults(caps=3)}))
    with pytest.raises(RunError, match=r"run\.cap is missing"):  # its default: conf/run/
        RunSettings.from_config(OmegaConf.create({"run": {"subset": "smoke"}}))
    assert ArmEntry.parse("ar") == ArmEntry("ar", "ar", 1)
    with pytest.raises(RunError):
        ArmEntry.parse("adaspark@x")


def test_run_stage_set_changes_the_params_it_reads():
    from adaspark.stages.run import apply_sets

    cfg = OmegaConf.create({"run": run_defaults(subset="short", round_log=False)})
    apply_sets(cfg, ["run.subset=heldout", "run.round_log=true", "run.cap=64"])
    s = RunSettings.from_config(cfg)
    assert (s.subset, s.round_log, s.cap) == ("heldout", True, 64)
    with pytest.raises(ValueError, match="KEY=VALUE"):
        apply_sets(cfg, ["run.subset"])


def test_a_lone_surrogate_is_a_400_naming_the_field():
    body = json.loads('{"messages": [{"role": "user", "content": "hi \\ud800"}]}')
    with pytest.raises(RequestError) as e:
        parse_request(body)
    assert e.value.status == 400 and e.value.param == "messages[0].content"
    assert "lone UTF-16 surrogate" in e.value.message
    ok = json.loads('{"messages": [{"role": "user", "content": "\\ud83d\\ude00"}]}')  # a pair
    assert parse_request(ok).messages[0]["content"] == "\U0001F600"


@pytest.mark.parametrize("name,data", [("run.json", b"{not json"), ("run.json", b"[1, 2]"),
                                       ("replies.parquet", b"PAR1 not a parquet file")])
def test_a_damaged_run_file_is_named(tmp_path, name, data):
    store = ResultStore(tmp_path / "arm")
    store.fingerprint_check({"run": {"cap": 8}})
    (tmp_path / "arm" / name).write_bytes(data)
    with pytest.raises(RunError) as e:
        store.fingerprint_check({"run": {"cap": 8}})
        store.rows()
    assert str(tmp_path / "arm" / name) in str(e.value) and "Delete" in str(e.value)


def test_json_depth_and_a_body_nested_too_deep():
    """Issue 34, item 12: the depth is measured without recursion; a body too deep is a 400."""
    from adaspark.serving.requests import MAX_JSON_DEPTH, decode_body, json_depth

    assert json_depth(3) == 0 and json_depth([]) == 1 and json_depth({"a": [[1]]}) == 3
    assert json_depth(json.loads("[" * 500 + "]" * 500)) > MAX_JSON_DEPTH
    for raw in (b"[" * 100_000 + b"]" * 100_000, b"[" * (MAX_JSON_DEPTH + 1) + b"]" *
                (MAX_JSON_DEPTH + 1)):
        with pytest.raises(RequestError, match="levels deep") as e:
            decode_body(raw)
        assert e.value.status == 400
    assert decode_body(b'{"messages": []}') == {"messages": []}


@pytest.mark.parametrize("template,expected", [
    # a template that inserts its own system prompt when the conversation has none (SmolLM2's)
    ("{% for m in messages %}{% if loop.first and m.role != 'system' %}<s>system\nBe kind.</s>"
     "{% endif %}<s>{{ m.role }}\n{{ m.content }}</s>{% endfor %}", "Be kind."),
    # one that renders none
    ("{% for m in messages %}<s>{{ m.role }}\n{{ m.content }}</s>{% endfor %}", None),
    # one that drops system messages altogether
    ("{% for m in messages if m.role != 'system' %}[{{ m.content }}]{% endfor %}", None),
])
def test_the_default_system_prompt_of_a_template(template, expected):
    """Issue 34, item 16: ``generate system=`` said "" while the template's default was used."""
    from adaspark.serving.chat import default_system_prompt

    assert default_system_prompt(template) == expected
