"""Fixtures of the reporting tests: small synthetic run directories (synthetic_runs),
one as preset=paper runs everything and one as the default preset, and the tables, figures and
report the stages make from each (built once per session)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from reporting_helpers import FAST, Built, build, write_params

from adaspark.analysis.records import Options


@pytest.fixture(scope="session")
def built_paper(tmp_path_factory: pytest.TempPathFactory) -> Built:
    return build(tmp_path_factory.mktemp("paper"), "paper")


@pytest.fixture(scope="session")
def built_default(tmp_path_factory: pytest.TempPathFactory) -> Built:
    return build(tmp_path_factory.mktemp("default"), "default")


@pytest.fixture(scope="session")
def paper_runs(built_paper: Built) -> Path:
    return built_paper.runs


@pytest.fixture(scope="session")
def default_runs(built_default: Built) -> Path:
    return built_default.runs


@pytest.fixture(params=["paper", "default"])
def built(request: pytest.FixtureRequest) -> Built:
    return request.getfixturevalue(f"built_{request.param}")


@pytest.fixture()
def fast() -> Options:
    return FAST


@pytest.fixture()
def make_params() -> Callable[..., Path]:
    """Write a params file (see :func:`write_params`)."""
    return write_params
