"""Our server on the tiny model: streamed text equals the non-streamed text and the engine's own
output; client-clock fields are consistent; bad requests get clear errors; one request at a time;
a client that leaves mid-stream does not stop the server (§4.1; issue 5)."""

from __future__ import annotations

import itertools
import json
import time
from pathlib import Path

import httpx
import pytest

from adaspark import arms
from adaspark.decoding.loop import generate
from adaspark.decoding.sampling import SamplingParams
from adaspark.schema import check_arm
from adaspark.serving import chat
from adaspark.serving.client import ChatClient, ServerReplyError

pytestmark = pytest.mark.server

TEMPLATE = Path(__file__).parent / "qwen_style_template.jinja"
MESSAGES = [{"role": "user", "content": "Write three short sentences about the moon."}]
MAX_TOKENS = 32


@pytest.fixture(scope="module")
def replies(ours):
    with ChatClient(ours.url) as c:
        plain = c.chat(MESSAGES, max_tokens=MAX_TOKENS, stream=False)
        streamed = c.chat(MESSAGES, max_tokens=MAX_TOKENS)
        again = c.chat(MESSAGES, max_tokens=MAX_TOKENS)
    return plain, streamed, again


def test_stream_equals_plain_equals_engine(replies, tiny_cfg):
    plain, streamed, again = replies
    assert streamed.text == plain.text == again.text and plain.text
    assert streamed.completion_tokens == plain.completion_tokens
    parts = arms.build(tiny_cfg, check_arm(tiny_cfg.arms.chain3, "arms.chain3"), exact=True)
    try:
        t = parts.target
        text = chat.render(TEMPLATE.read_text(), MESSAGES)
        prompt = t.tokenize(text, add_special=t.add_bos, parse_special=True)
        gen = generate(t, prompt, MAX_TOKENS, parts.rule, parts.drafter, parts.block_positions)
        direct = t.detokenize([x for x in gen.tokens if not t.is_eog(x)])
    finally:
        parts.close()
    assert direct == streamed.text
    assert len(gen.tokens) == streamed.completion_tokens
    assert gen.drafter_prefill_s > 0  # the draft model prefilled the prompt before round 1
    assert len(prompt) == streamed.prompt_tokens


def test_client_timing_fields_are_consistent(replies):
    _, r, again = replies
    assert r.t_request < r.t_first <= r.t_last <= r.t_done
    assert r.ttft_s > 0 and r.decode_s > 0
    assert r.decode_tps == pytest.approx((r.completion_tokens - 1) / (r.t_last - r.t_first))
    # one event per generated token: every token but the end-of-generation one shows text
    eog = r.finish_reason == "stop"
    assert r.n_token_events == r.completion_tokens - (1 if eog else 0)
    tm = r.timings
    assert tm["predicted_n"] == r.completion_tokens
    assert 1 <= tm["rounds"] <= r.completion_tokens
    assert 0 <= tm["draft_n_accepted"] <= tm["draft_n"] and tm["draft_n"] > 0
    assert tm["by_source"]["drafter"]["drafted"] == tm["draft_n"]
    # per position: every accepted draft passed one position, no round tested a position twice,
    # and a round that passed position k tested it (so tested never grows with k)
    pos = [tm["positions"][str(k)] for k in range(1, len(tm["positions"]) + 1)]
    assert sum(p["accepted"] for p in pos) == tm["draft_n_accepted"]
    assert all(p["accepted"] <= p["tested"] <= tm["rounds"] for p in pos)
    assert all(a["tested"] >= b["tested"] for a, b in itertools.pairwise(pos))
    # the drafter's prompt prefill is reported per reply; it happens before the first token
    assert 0 < tm["drafter_prefill_ms"] / 1e3 < r.ttft_s
    # the client's decode interval lies inside the server's decode time (plus transport)
    assert r.decode_s <= tm["predicted_ms"] / 1e3 + 0.25
    # the repeated request reuses the prompt's cache in whole prefill chunks (63 rows in exact
    # mode: adaspark.decoding.engine.Target, "Prefill and history")
    from adaspark.decoding.tree import MAX_ROWS_EXACT

    assert again.timings["cache_n"] == (again.prompt_tokens - 1) // MAX_ROWS_EXACT * MAX_ROWS_EXACT


def test_health_and_models(ours):
    h = httpx.get(f"{ours.url}/health").json()
    assert h["status"] == "ok" and h["busy"] is False
    m = httpx.get(f"{ours.url}/v1/models").json()["data"][0]
    assert m["meta"]["arm"]["name"] == "chain3" and m["meta"]["exact"] is True
    assert m["meta"]["models"]["target"]["sha256"]
    assert m["meta"]["chat_template"]["format"] == "tagged"
    ctx = m["meta"]["context_params"]  # a tree arm's target: 64 sequences in one cache
    assert (ctx["n_seq_max"], ctx["kv_unified"], ctx["flash_attn"]) == (64, True, "on")


def test_bad_requests_get_errors_and_the_server_stays_up(ours):
    url = f"{ours.url}/v1/chat/completions"
    r = httpx.post(url, content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 400 and "not valid JSON" in r.json()["error"]["message"]
    r = httpx.post(url, json={"messages": [{"role": "user", "content": 5}]})
    assert r.status_code == 400 and r.json()["error"]["param"] == "messages[0].content"
    r = httpx.post(url, json={"messages": MESSAGES, "max_tokens": -1})
    assert r.status_code == 400 and r.json()["error"]["param"] == "max_tokens"
    long = " ".join(["moon"] * 3000)
    r = httpx.post(url, json={"messages": [{"role": "user", "content": long}]})
    assert r.status_code == 400 and "does not fit the context" in r.json()["error"]["message"]
    assert httpx.get(f"{ours.url}/nowhere").status_code == 404
    assert httpx.get(url).status_code == 405
    r = httpx.post(url, json={"messages": MESSAGES, "temperature": 1, "top_p": 2})
    assert r.status_code == 400 and r.json()["error"]["param"] == "top_p"
    with ChatClient(ours.url) as c:
        with pytest.raises(ServerReplyError, match="400"):
            c.chat([{"role": "robot", "content": "x"}])
        ok = c.chat(MESSAGES, max_tokens=4)
    assert ok.completion_tokens == 4 and ok.finish_reason == "length"


def test_one_request_at_a_time_and_a_client_that_leaves(ours):
    url = f"{ours.url}/v1/chat/completions"
    body = {"messages": [{"role": "user", "content": "Write a long story about a dragon."}],
            "max_tokens": 600, "stream": True}
    with httpx.Client(timeout=60) as http, http.stream("POST", url, json=body) as s:
        assert s.status_code == 200
        lines = s.iter_lines()  # read a few events and keep the stream open
        n = 0
        while n < 5:
            n += next(lines).startswith("data:")
        busy = httpx.post(url, json={"messages": MESSAGES, "max_tokens": 2})
        assert busy.status_code == 503 and "one request at a time" in busy.json()["error"][
            "message"]
    # the stream is closed mid-reply: the decode stops after its round, the server goes on
    t0 = time.monotonic()
    while httpx.get(f"{ours.url}/health").json()["busy"]:
        assert time.monotonic() - t0 < 10, "the abandoned decode did not stop"
        time.sleep(0.05)
    with ChatClient(ours.url) as c:
        r = c.chat(MESSAGES, max_tokens=MAX_TOKENS)
    assert r.completion_tokens > 0 and json.dumps(r.timings)


def test_a_lone_surrogate_is_a_400_and_the_server_stays_up(ours):
    url = f"{ours.url}/v1/chat/completions"
    body = b'{"messages": [{"role": "user", "content": "hi \\ud800"}], "max_tokens": 4}'
    for stream in (b"false", b"true"):
        r = httpx.post(url, content=body[:-1] + b', "stream": ' + stream + b"}",
                       headers={"content-type": "application/json"})
        assert r.status_code == 400, r.text
        assert r.json()["error"]["param"] == "messages[0].content"
    with ChatClient(ours.url) as c:
        assert c.chat(MESSAGES, max_tokens=2).completion_tokens == 2


def test_a_prompt_over_an_unpadded_n_ctx_is_a_400_not_an_abort(tmp_path):
    """llama.cpp pads the context to a multiple of 256 but caps its batch at the n_ctx asked
    for: a prompt between the two passed the server's check and aborted the server natively
    (GGML_ASSERT n_tokens_all <= n_batch) in fast mode."""
    import sys

    from adaspark.serving.llama_server import ServerProcess, clean_env
    from adaspark.serving.main import free_port

    port = free_port()
    argv = [sys.executable, "-m", "adaspark.cli", "serve", "arm=ar", "target=tiny",
            "drafter=tiny-truncated", "target.n_ctx=200", "exact=false", f"port={port}",
            "warmup=false", f"store={tmp_path / 'store'}"]
    with ServerProcess(argv, port=port, log_path=tmp_path / "server.log", env=clean_env(),
                       startup_timeout_s=120) as proc:
        r = httpx.post(f"{proc.url}/v1/chat/completions", timeout=60, json={
            "messages": [{"role": "user", "content": "word " * 200}], "max_tokens": 4})
        assert r.status_code == 400, r.text
        assert "does not fit the context of 200 tokens" in r.json()["error"]["message"]
        assert proc.alive()
        with ChatClient(proc.url) as c:
            assert c.chat(MESSAGES, max_tokens=2).completion_tokens == 2


# -- issue 34: items 5, 10, 11 and 12 ---------------------------------------------------------


def test_a_json_body_nested_too_deep_is_a_400(ours):
    """Item 12: 100,000 nested arrays were a plain-text 500 (a RecursionError)."""
    url = f"{ours.url}/v1/chat/completions"
    for raw in (b"[" * 100_000 + b"]" * 100_000,
                b'{"messages": ' + b"[" * 200 + b"]" * 200 + b"}"):
        r = httpx.post(url, content=raw, headers={"content-type": "application/json"})
        assert r.status_code == 400, r.text
        assert "levels deep" in r.json()["error"]["message"]
    with ChatClient(ours.url) as c:
        assert c.chat(MESSAGES, max_tokens=2).completion_tokens == 2


def test_a_null_max_completion_tokens_leaves_max_tokens(ours):
    """Item 5: ``"max_completion_tokens": null`` cancelled ``"max_tokens": 3``."""
    r = httpx.post(f"{ours.url}/v1/chat/completions", timeout=60, json={
        "messages": MESSAGES, "max_tokens": 3, "max_completion_tokens": None})
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 3


def test_a_non_streamed_client_that_leaves_stops_the_decode(ours):
    """Item 10: the decode went on to its cap, every other request answered 503 meanwhile."""
    url = f"{ours.url}/v1/chat/completions"
    body = {"messages": [{"role": "user", "content": "Write a long story about a dragon."}],
            "max_tokens": 4000}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(url, json=body, timeout=httpx.Timeout(60, read=1.0))
    t0 = time.monotonic()
    while httpx.get(f"{ours.url}/health").json()["busy"]:
        assert time.monotonic() - t0 < 10, "the abandoned decode did not stop"
        time.sleep(0.05)
    with ChatClient(ours.url) as c:
        assert c.chat(MESSAGES, max_tokens=2).completion_tokens == 2


def test_a_prompt_over_the_drafters_context_is_a_400(tmp_path):
    """Item 11: a prompt that fits the target but not the drafter was a 500 ("no KV slot")."""
    import sys

    from adaspark.serving.llama_server import ServerProcess, clean_env
    from adaspark.serving.main import free_port

    port = free_port()
    argv = [sys.executable, "-m", "adaspark.cli", "serve", "arm=chain3", "target=tiny",
            "drafter=tiny-truncated", "target.n_ctx=1024", "drafter.n_ctx=256", "exact=false",
            f"port={port}", "warmup=false", f"store={tmp_path / 'store'}"]
    with ServerProcess(argv, port=port, log_path=tmp_path / "server.log", env=clean_env(),
                       startup_timeout_s=120) as proc:
        r = httpx.post(f"{proc.url}/v1/chat/completions", timeout=60, json={
            "messages": [{"role": "user", "content": "word " * 300}], "max_tokens": 4})
        assert r.status_code == 400, r.text
        msg = r.json()["error"]["message"]
        assert "does not fit the drafter's context of 256 tokens" in msg and "drafter.n_ctx" in msg
        assert proc.alive()


def test_sampling_fields_give_a_normal_completion_and_a_seed_repeats(ours):
    """temperature, top_p, top_k, min_p, seed and max_tokens together on a speculative arm
    (``chain3``): a normal completion, the same text for the same seed (streamed or not), and
    the sampling the reply was made with in its timings."""
    url = f"{ours.url}/v1/chat/completions"
    body = {"messages": MESSAGES, "temperature": 0.9, "top_p": 0.95, "top_k": 40,
            "min_p": 0.05, "seed": 17, "max_tokens": 12}
    one = httpx.post(url, json=body, timeout=120)
    assert one.status_code == 200, one.text
    got = one.json()
    text = got["choices"][0]["message"]["content"]
    assert got["usage"]["completion_tokens"] > 0 and text
    assert got["timings"]["sampling"]["seed"] == 17
    again = httpx.post(url, json=body, timeout=120).json()["choices"][0]["message"]["content"]
    assert again == text
    with ChatClient(ours.url) as c:
        streamed = c.chat(MESSAGES, max_tokens=12, sampling=SamplingParams(
            temperature=0.9, top_k=40, top_p=0.95, min_p=0.05, seed=17))
    assert streamed.text == text
    texts = {httpx.post(url, json=body | {"seed": s}, timeout=120).json()["choices"][0][
        "message"]["content"] for s in range(18, 22)}
    assert len(texts | {text}) > 1  # other seeds, other samples
