"""DSpark capture on the embedded target (issue 13): with the patched build the ``qwen2`` graph
records its layer inputs, so a random-weight DSpark drafter of the embedded target's shape drafts
from captured features and ``generate`` stays equal to plain greedy decoding (exact mode).
Without the patch the capture aborts inside llama.cpp (``t_layer_inp[il] != nullptr``)."""

from __future__ import annotations

import json

import pytest
from helpers import TARGET, model, run_cli

from adaspark.decoding.drafter import dspark_file as dsf


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
