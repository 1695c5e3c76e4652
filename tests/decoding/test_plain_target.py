"""The plain-decode target (issue 12, plain-decode parity): one sequence, as llama-server's
``--parallel 1`` context, and the same greedy tokens as the tree target."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import TINY, model

from adaspark.decoding.engine import EngineError, Target

HERE = Path(__file__).parent


def _probe(target: Path, n: int) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "GGML_CPU_TILED_MM"}  # fast kernels
    p = subprocess.run([sys.executable, str(HERE / "plain_probe.py"), str(target), str(n)],
                       capture_output=True, text=True, env=env, timeout=900)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_the_plain_target_decodes_the_tree_targets_tokens_on_llama_servers_context():
    out = _probe(model(TINY), 32)
    assert out["plain"]["tokens"] == out["tree"]["tokens"]
    assert all(len(t) == 32 for t in out["plain"]["tokens"])
    plain, tree = out["plain"]["context"], out["tree"]["context"]
    assert (plain["n_seq_max"], plain["kv_unified"]) == (1, False)  # llama-server --parallel 1
    assert (tree["n_seq_max"], tree["kv_unified"]) == (64, True)
    same = {k: v for k, v in plain.items() if k not in ("n_seq_max", "kv_unified")}
    assert same == {k: tree[k] for k in same}
    assert (plain["flash_attn"], plain["cache_type_k"], plain["ubatch_size"]) == ("auto", "f16",
                                                                                 512)
    assert (out["plain"]["max_rows"], out["refused_two_rows"]) == (1, True)


def test_exact_mode_has_no_plain_target(tiny_path):
    with pytest.raises(EngineError, match="fast-mode"):
        Target(tiny_path, 2048, exact=True, plain=True)
