"""llama-server (built from the vendored llama.cpp) on the tiny model, read by the same client:
its stream gives the same client-clock fields, its speculative arm drafts, bad requests get
errors and it keeps serving (§4.1, Table 4's baseline; issue 5)."""

from __future__ import annotations

import httpx
import pytest

from adaspark.schema import LlamaServerOptions, check_arm
from adaspark.serving.client import ChatClient
from adaspark.serving.llama_server import LlamaServerSpec, binary_info

pytestmark = pytest.mark.server

MESSAGES = [{"role": "user", "content": "Write three short sentences about the moon."}]


def test_flags_name_the_speculative_defaults(tiny_cfg):
    from adaspark.serving.llama_server import spec_from_config

    def args_of(name: str) -> list[str]:
        return spec_from_config(tiny_cfg, check_arm(tiny_cfg.arms[name], f"arms.{name}"),
                                port=1).args()

    chain = args_of("llamacpp-chain")
    joined = " ".join(chain)
    for flag in ("--spec-type draft-simple", "--spec-draft-n-max 3", "--spec-draft-p-min 0",
                 "--parallel 1", "--jinja", "--temp 0", "--host 127.0.0.1",
                 f"--ctx-size {tiny_cfg.target.n_ctx}"):
        assert flag in joined
    ar = args_of("llamacpp-ar")
    assert "--spec-type" not in ar and "--spec-draft-model" not in ar
    info = binary_info()
    assert info["version"].startswith("version:") and len(info["sha256"]) == 64
    with pytest.raises(ValueError, match="needs a drafter"):
        LlamaServerSpec(model=chain[2], n_ctx=8, threads=1, port=1,
                        server=LlamaServerOptions(spec_type="draft-simple", spec_draft_n_max=3,
                                                  spec_draft_p_min=0.0)).args()
    with pytest.raises(ValueError, match="spec_draft_n_max is not set"):
        LlamaServerSpec(model=chain[2], n_ctx=8, threads=1, port=1, drafter=chain[2],
                        server=LlamaServerOptions(spec_type="draft-simple")).args()


def test_stream_is_read_the_same_way(llama, ours):
    with ChatClient(llama.url) as c:
        r = c.chat(MESSAGES, max_tokens=32)
        plain = c.chat(MESSAGES, max_tokens=32, stream=False)
    with ChatClient(ours.url) as c:
        mine = c.chat(MESSAGES, max_tokens=32)
    assert r.text and r.text == plain.text
    assert r.prompt_tokens == mine.prompt_tokens  # the same template, the same tokens
    assert r.t_request < r.t_first <= r.t_last <= r.t_done
    assert r.decode_tps == pytest.approx((r.completion_tokens - 1) / (r.t_last - r.t_first))
    eog = r.finish_reason == "stop"
    assert r.n_token_events == r.completion_tokens - (1 if eog else 0)
    assert r.timings["predicted_n"] == r.completion_tokens
    assert r.timings.get("draft_n", 0) > 0, "llamacpp-chain did not draft"
    assert r.timings["draft_n_accepted"] <= r.timings["draft_n"]


def test_bad_request_and_still_serving(llama):
    url = f"{llama.url}/v1/chat/completions"
    r = httpx.post(url, content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code >= 400  # this build answers malformed JSON with 500
    long = " ".join(["moon"] * 3000)
    r = httpx.post(url, json={"messages": [{"role": "user", "content": long}]})
    assert 400 <= r.status_code < 500
    with ChatClient(llama.url) as c:
        assert c.chat(MESSAGES, max_tokens=4).completion_tokens == 4
