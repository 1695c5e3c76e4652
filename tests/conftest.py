"""Shared fixtures. The test process runs llama.cpp in exact mode (HARNESS "Kernels"): the kernel
switch is per process, so fast-mode checks run the CLI in a subprocess."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ["GGML_CPU_TILED_MM"] = "0"  # before any test touches llama.cpp

from helpers import TINY, TINY_CUT, model


@pytest.fixture(scope="session")
def tiny_path() -> Path:
    return model(TINY)


@pytest.fixture(scope="session")
def tiny_cut_path() -> Path:
    return model(TINY_CUT)


@pytest.fixture(scope="session")
def tiny_target(tiny_path):
    from adaspark.decoding.engine import Target

    t = Target(tiny_path, 2048, exact=True)
    yield t
    t.close()
