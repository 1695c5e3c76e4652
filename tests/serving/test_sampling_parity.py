"""Our ``ar`` samples what llama-server's ``llamacpp-ar`` samples: over 500 seeds each, the
distribution of the first two tokens of one reply agrees by a two-sample chi-square test, on a
prompt whose next-token distribution is far from a point mass (its entropy is printed). The texts
differ seed by seed (llama.cpp has its own random stream); only the distributions are compared.
A deliberately different sampler (another temperature) fails the same test."""

from __future__ import annotations

import math
import sys
from collections import Counter
from collections.abc import Iterator

import httpx
import pytest
from omegaconf import OmegaConf
from scipy import stats

from adaspark.config import compose, to_dict
from adaspark.schema import check_arm
from adaspark.serving.llama_server import (
    ServerProcess,
    clean_env,
    llama_server_process,
    spec_from_config,
)
from adaspark.serving.main import free_port

ARGS = ["target=tiny", "drafter=tiny-truncated", "target.n_ctx=512", "drafter.n_ctx=512"]
MESSAGES = [{"role": "user", "content": "Say one word."}]
#: Seeds per server: 1,000 each passed here too; 500 keep the suite's time (CI).
N_SEEDS = 500
SAMPLING = {"temperature": 1.0, "top_k": 40, "top_p": 0.95, "min_p": 0.05}
ALPHA = 1e-3


@pytest.fixture(scope="module")
def servers(tmp_path_factory) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    d = tmp_path_factory.mktemp("parity")
    cfg = compose(ARGS)
    spec = spec_from_config(cfg, check_arm(cfg.arms["llamacpp-ar"], "arms.llamacpp-ar"),
                            port=free_port())
    params = d / "params.yaml"
    OmegaConf.save(OmegaConf.create(to_dict(cfg)), params)
    port = free_port()
    argv = [sys.executable, "-m", "adaspark.serving.main", "--params", str(params), "--arm",
            "ar", "--port", str(port), "--store", str(d / "store"), "--fast"]
    ours = ServerProcess(argv, port=port, log_path=d / "ours.log", env=clean_env(exact=False),
                         startup_timeout_s=120)
    with llama_server_process(spec, d / "llama.log", startup_timeout_s=120) as llama, ours:
        yield llama, ours


def first_two(server: ServerProcess, seeds: range, **fields: float) -> Counter:
    out: Counter = Counter()
    with httpx.Client(base_url=server.url, timeout=60) as c:
        for s in seeds:
            r = c.post("/v1/chat/completions", json={
                "messages": MESSAGES, "max_tokens": 2, "seed": s, **(SAMPLING | fields)})
            assert r.status_code == 200, r.text
            out[r.json()["choices"][0]["message"]["content"]] += 1
    return out


def two_sample_p(a: Counter, b: Counter) -> float:
    """Chi-square test of homogeneity; replies seen fewer than 10 times in both pooled."""
    keys = [k for k in set(a) | set(b) if a[k] + b[k] >= 10]
    rows = [[a[k] for k in keys] + [sum(a.values()) - sum(a[k] for k in keys)],
            [b[k] for k in keys] + [sum(b.values()) - sum(b[k] for k in keys)]]
    if rows[0][-1] + rows[1][-1] == 0:
        rows = [r[:-1] for r in rows]
    return float(stats.chi2_contingency(rows).pvalue)


def test_our_ar_samples_llama_servers_distribution(servers) -> None:
    llama, ours = servers
    theirs_counts = first_two(llama, range(N_SEEDS))
    ours_counts = first_two(ours, range(N_SEEDS, 2 * N_SEEDS))
    n = sum(ours_counts.values())
    entropy = -sum(c / n * math.log(c / n) for c in ours_counts.values())
    print(f"first two tokens: {len(ours_counts)} distinct replies, entropy {entropy:.2f} nats")
    assert entropy > 1.0, ours_counts.most_common(5)  # far from a point mass
    assert two_sample_p(ours_counts, theirs_counts) > ALPHA
    colder = first_two(ours, range(2 * N_SEEDS, 2 * N_SEEDS + 400), temperature=0.5)
    assert two_sample_p(colder, theirs_counts) < ALPHA  # the test tells samplers apart
