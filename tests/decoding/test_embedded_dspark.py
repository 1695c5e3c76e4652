"""DSpark capture on the embedded target (issue 13): with the patched build the ``qwen2`` graph
records its layer inputs, so a random-weight DSpark drafter of the embedded target's shape drafts
from captured features and ``generate`` stays equal to plain greedy decoding (exact mode).
Without the patch the capture aborts inside llama.cpp (``t_layer_inp[il] != nullptr``)."""

from __future__ import annotations

import json

import pytest
from helpers import TARGET, model, run_cli

from adaspark.decoding.drafter import dspark_file as dsf
from adaspark.schema import LlamaServerOptions


@pytest.mark.embedded
def test_a_random_dspark_drafter_on_the_embedded_target_is_lossless(tmp_path):
    path = dsf.write_random(model(TARGET), tmp_path / "random-embedded.gguf", seed=3)
    r = run_cli("generate", "target=embedded", "drafter=dspark", f"drafter.path={path}",
                "arm=chain3", "prompt=def quicksort(xs):", "max_tokens=16", "json=true",
                "check_greedy=true", timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["greedy_match"] is True, out["differences"]
    assert out["tokens"] == 16
    assert out["drafted"] > 0  # every round drafted from the captured features


OWN_PROMPT = "Write a Python function that returns the n-th Fibonacci number."


@pytest.mark.embedded
def test_the_committed_dspark_drafter_drafts_losslessly_and_gets_accepted():
    """This project's trained drafter (data/models.json `dspark-embedded`) through our engine:
    equal to plain greedy decoding, and some of its drafts accepted (random weights get none)."""
    r = run_cli("generate", "target=embedded", "drafter=dspark-embedded", "arm=chain3",
                f"prompt={OWN_PROMPT}", "max_tokens=48", "json=true", "check_greedy=true",
                timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["greedy_match"] is True, out["differences"]
    assert out["drafted"] > 0 and out["accepted"] > 0, out


@pytest.mark.embedded
@pytest.mark.server
def test_llama_server_runs_the_committed_drafter_with_draft_dspark(tmp_path):
    """The same file in `llama-server --spec-type draft-dspark`: it loads, drafts, and its own
    counters show accepted drafts."""
    import os

    import httpx

    from adaspark.serving.llama_server import LlamaServerSpec, llama_server_process
    from adaspark.serving.main import free_port

    spec = LlamaServerSpec(model=model(TARGET), n_ctx=2048, threads=os.cpu_count() or 1,
                           port=free_port(), drafter=model("dspark-embedded"),
                           server=LlamaServerOptions(spec_type="draft-dspark", spec_draft_n_max=3,
                                                     spec_draft_p_min=0.0))
    with llama_server_process(spec, tmp_path / "server.log", startup_timeout_s=180) as proc:
        r = httpx.post(f"{proc.url}/v1/chat/completions", timeout=600, json={
            "messages": [{"role": "user", "content": OWN_PROMPT}], "max_tokens": 48,
            "temperature": 0})
        r.raise_for_status()
        t = r.json()["timings"]
    assert t["draft_n"] > 0 and 0 < t["draft_n_accepted"] <= t["draft_n"], t
