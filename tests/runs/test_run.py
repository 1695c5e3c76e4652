"""The run and check stages with real servers on the tiny model: a run killed mid-way resumes at
the first missing reply without losing or repeating one; a run refuses results made with another
config; the check stage passes complete runs and fails incomplete ones (issue 5)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from helpers import run_settings
from omegaconf import OmegaConf

from adaspark.config import to_dict
from adaspark.runs.conversation import plan_subset
from adaspark.runs.run import compose_for_run
from adaspark.runs.store import ResultStore
from adaspark.serving.llama_server import clean_env
from adaspark.stages import check as check_stage
from adaspark.testset import load_checked_sets

pytestmark = pytest.mark.server

REPO = Path(__file__).resolve().parents[2]


def _params(tmp_path, *overrides: str):
    """A composed params file for the tiny pair (the vendored, lock-checked test set)."""
    cfg = compose_for_run(["target=tiny", "drafter=tiny-truncated", "run.testset=data/testset",
                           *overrides])
    path = tmp_path / "params.yaml"
    OmegaConf.save(OmegaConf.create(to_dict(cfg)), path)
    return path


def _run_stage(arm: str, params, out, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "adaspark.stages.run", "--arm", arm,
                             "--params", str(params), "--out", str(out)], cwd=REPO,
                            env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, **kw)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split()[2] == "Z")  # a zombie has exited


def _n_rows(out) -> int:
    f = out / "replies.parquet"
    return pq.read_metadata(f).num_rows if f.exists() else 0


def test_killed_run_resumes_without_losing_or_repeating(tmp_path):
    params = _params(tmp_path, "run.subset=short", "run.cap=6", "run_arms=[ar]")
    out = tmp_path / "arms" / "ar"
    p = _run_stage("ar", params, out)
    t0 = time.monotonic()
    while _n_rows(out) < 3:
        assert p.poll() is None, p.communicate()
        assert time.monotonic() - t0 < 180, "the run stored no reply in time"
        time.sleep(0.05)
    server_pid = json.loads((out / "run.json").read_text())["server"]["pid"]
    p.kill()  # SIGKILL: no cleanup in the run process
    p.communicate()
    t0 = time.monotonic()
    while _alive(server_pid):
        assert time.monotonic() - t0 < 15, "the server outlived the run that started it"
        time.sleep(0.1)
    before = ResultStore(out).rows()
    assert 3 <= len(before)

    p = _run_stage("ar", params, out)
    _, err = p.communicate(timeout=600)
    assert p.returncode == 0, err
    after = ResultStore(out).rows()
    keys = [(r["set"], r["conversation"], r["turn"], r["reply"]) for r in after]
    assert len(keys) == len(set(keys)), "a reply was stored twice"
    assert after[: len(before)] == before, "stored replies changed on resume"
    sets = load_checked_sets(REPO / "data" / "testset")
    stored = dict(zip(keys, after, strict=True))
    expected, missing = check_stage.expected_keys(plan_subset(sets, "short"), stored)
    assert not missing and sorted(expected) == sorted(keys)
    run = json.loads((out / "run.json").read_text())
    assert [r["stored_replies"] for r in run["resumes"]][-1] == len(before)
    assert all(r["status"] in ("finished", "cut", "single-delta") for r in after)
    assert all(r["drafter_prefill_s"] == 0.0 for r in after)  # ar: no drafter to prefill

    report = tmp_path / "check.json"
    argv = ["--params", str(params), "--runs", str(tmp_path / "arms"), "--out", str(report)]
    assert check_stage.main(argv) == 0
    assert json.loads(report.read_text())["arms"]["ar"]["replies"] == len(after)

    # a missing reply fails the check, naming it
    table = pq.read_table(out / "replies.parquet")
    pq.write_table(table.slice(0, table.num_rows - 1), out / "replies.parquet")
    assert check_stage.main(argv) == 1
    assert "no reply for" in json.dumps(json.loads(report.read_text()))

    # another cap: the run refuses to append
    params2 = _params(tmp_path, "run.subset=short", "run.cap=7", "run_arms=[ar]")
    p = _run_stage("ar", params2, out)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 1 and "run.cap: 6 -> 7" in err


def test_llama_server_arm_runs_and_its_drafts_pass_the_check(tmp_path):
    """The run stage drives llama-server as it drives ours; the check reads its draft totals."""
    params = _params(tmp_path, "drafter=tiny-self", "run.subset=smoke", "run.cap=34",
                     "run_arms=[llamacpp-chain]")
    out = tmp_path / "arms" / "llamacpp-chain"
    p = _run_stage("llamacpp-chain", params, out)
    _, err = p.communicate(timeout=600)
    assert p.returncode == 0, err
    report = tmp_path / "check.json"
    assert check_stage.main(["--params", str(params), "--runs", str(tmp_path / "arms"),
                             "--out", str(report)]) == 0
    rows = ResultStore(out).rows()
    assert rows and all(r["engine"] == "llama-server" for r in rows)
    assert all(r["server_drafted"] > 0 for r in rows if r["completion_tokens"] >= 32)
    assert all(math.isnan(r["drafter_prefill_s"]) for r in rows)  # llama-server does not say
    run = json.loads((out / "run.json").read_text())
    assert run["fingerprint"]["binary"]["version"].startswith("version:")
    assert "--spec-type" in run["server"]["argv"]


def test_a_bad_subset_or_test_set_writes_nothing(tmp_path):
    """Everything that can be refused is refused before run.json is written, so the corrected
    rerun into the same directory is not refused as "another config" (issue 10, item 7)."""
    from dataclasses import replace

    from adaspark.runs.run import run_arm
    from adaspark.runs.settings import RunError

    cfg = compose_for_run(["target=tiny", "drafter=tiny-truncated", "run_arms=[ar]"])
    good = run_settings(subset="smoke", cap=2, testset="data/testset")
    out = tmp_path / "ar"
    with pytest.raises(RunError, match="bogus"):
        run_arm(cfg, "ar", out, replace(good, subset="bogus"))  # past the schema's check
    with pytest.raises(FileNotFoundError, match="missing"):
        run_arm(cfg, "ar", out, replace(good, testset=str(tmp_path / "no-testset")))
    assert not out.exists()
    assert run_arm(cfg, "ar", out, good).n_replies == 2
