"""Servers for the serving tests, started once per session on loopback with the tiny model
(HARNESS: tests never mock the engine or llama-server).

* ``ours``: our server, arm ``chain3``, target SmolLM2-135M, drafter the 22-block cut (it
  rejects drafts), exact kernels (so its output can equal the in-process engine's, which runs in
  exact mode), a Qwen-style chat template with tools (the tiny model's own template has none).
* ``llama``: llama-server on the same target, arm ``llamacpp-chain`` with the tiny model drafting
  for itself (every draft accepted: the quickest speculative run), the same template file.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from adaspark.config import compose, to_dict
from adaspark.schema import check_arm
from adaspark.serving.llama_server import (
    ServerProcess,
    clean_env,
    llama_server_process,
    spec_from_config,
)
from adaspark.serving.main import free_port

HERE = Path(__file__).parent
TEMPLATE = HERE / "qwen_style_template.jinja"
N_CTX = 2048
TINY_ARGS = ["target=tiny", "drafter=tiny-truncated", f"target.n_ctx={N_CTX}",
             f"drafter.n_ctx={N_CTX}"]


@pytest.fixture(scope="session")
def tiny_cfg():
    """The composed config for the tiny pair with every arm the tests use under ``arms``."""
    return compose(TINY_ARGS)


def our_server(cfg, d: Path, arm: str, *extra: str) -> ServerProcess:
    """Our server for ``arm`` of ``cfg`` (tiny pair, exact kernels, the Qwen-style template)
    in directory ``d``, with ``extra`` server flags; enter it to start it."""
    import sys

    params = d / "params.yaml"
    OmegaConf.save(OmegaConf.create(to_dict(cfg)), params)
    port = free_port()
    argv = [sys.executable, "-m", "adaspark.serving.main", "--params", str(params), "--arm",
            arm, "--port", str(port), "--store", str(d / "store"), "--exact",
            "--chat-template", str(TEMPLATE), *extra]
    return ServerProcess(argv, port=port, log_path=d / "server.log", env=clean_env(exact=True),
                         startup_timeout_s=120)


@pytest.fixture(scope="session")
def start_ours():
    """:func:`our_server`, for a test module that starts a server of its own."""
    return our_server


@pytest.fixture(scope="session")
def ours(tiny_cfg, tmp_path_factory) -> Iterator[ServerProcess]:
    with our_server(tiny_cfg, tmp_path_factory.mktemp("ours"), "chain3") as proc:
        yield proc


@pytest.fixture(scope="session")
def llama(tmp_path_factory) -> Iterator[ServerProcess]:
    d = tmp_path_factory.mktemp("llama")
    args = ["drafter=tiny-self" if a.startswith("drafter=") else a for a in TINY_ARGS]
    cfg = compose(args)
    spec = spec_from_config(cfg, check_arm(cfg.arms["llamacpp-chain"], "arms.llamacpp-chain"),
                            port=free_port(),
                            chat_template_file=TEMPLATE)
    with llama_server_process(spec, d / "server.log", startup_timeout_s=120) as proc:
        yield proc
