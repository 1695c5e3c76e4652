"""The exactness check on the tiny model (issue 14): real runs in exact mode with round traces,
real labels, and the real rules replayed under each round's recorded time reproduce every round
and every committed token; a pinned width's accepted lengths are the run's under any device
model; one altered label changes the replay."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from adaspark.decoding.round_trace import read_traces
from adaspark.replay.command import run_replay
from adaspark.replay.labels import read_labels, write_labels
from adaspark.serving.llama_server import clean_env

pytestmark = pytest.mark.server

REPO = Path(__file__).resolve().parents[2]
PAIR = ["target=tiny", "drafter=tiny-truncated"]
ARMS = ("chain3", "tree16", "adaspark")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("replay") / "run"
    p = subprocess.run(
        [sys.executable, "-m", "adaspark.cli", "run", *PAIR, "run.testset=data/testset",
         "run.subset=smoke", "run.cap=16", f"run_arms=[{','.join(ARMS)}]", "run.exact=true",
         "run.round_log=true", f"out={out}"],
        cwd=REPO, env=clean_env(exact=True), capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    return out


def replay_cli(run_dir: Path, arm: str, device: str = "recorded") -> dict:
    p = subprocess.run(
        [sys.executable, "-m", "adaspark.cli", "replay", f"arm={arm}", *PAIR,
         f"run_dir={run_dir}", f"device={device}", "json=true"],
        cwd=REPO, env=clean_env(exact=True), capture_output=True, text=True, timeout=600)
    assert p.returncode in (0, 3), p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("arm", ARMS)
def test_replay_with_recorded_times_reproduces_the_run(run_dir, arm) -> None:
    out = replay_cli(run_dir, arm)
    recorded = read_traces(run_dir / arm / "trace")
    assert out["replies"] == len(recorded) > 0
    assert out["rounds"] == out["recorded_rounds"] == sum(len(t.rounds) for t in recorded)
    assert out["rounds_identical"] == out["rounds"], out["first_mismatches"]
    assert out["committed_identical"] is True and out["text_cuts"] == 0 and out["exact"]
    assert out["replay"] is True and out["device"] == "recorded"


def test_a_pinned_widths_accepted_lengths_are_the_runs_under_another_device(run_dir) -> None:
    out = replay_cli(run_dir, "tree16", device="step-at-8")
    assert out["device_label"] == "synthetic" and "exact" not in out
    real = [[r.accepted for r in t.rounds] for t in read_traces(run_dir / "tree16" / "trace")]
    replayed = [[r.accepted for r in t.rounds] for t in read_traces(Path(out["out"]) / "trace")]
    assert replayed == real and sum(map(sum, real)) > 0


def test_one_altered_label_changes_the_replay(run_dir, tmp_path) -> None:
    """Labels are what the replay reads: change the label at an anchor whose round accepted a
    draft, and the check reports the replay is no longer the run."""
    import shutil

    work = tmp_path / "run"
    shutil.copytree(run_dir, work, ignore=shutil.ignore_patterns("replay"))
    recorded = read_traces(work / "tree16" / "trace")
    t, r = next((t, r) for t in recorded for r in t.rounds if r.accepted > 0)
    files = [f for f in (work / "labels").glob("*/*.parquet")
             if read_labels(f).prompt == t.prompt]
    assert files, "the replays above cached this run's labels"
    for f in files:
        lab = read_labels(f)
        i = r.anchor_pos - lab.start
        lab.next[i] = (int(lab.next[i]) + 1) % 100
        write_labels(f, lab)
    out = run_replay(["arm=tree16", *PAIR, f"run_dir={work}", "device=recorded"],
                     log=lambda _m: None)
    assert out["exact"] is False and out["committed_identical"] is False
    assert out["rounds_identical"] < out["rounds_compared"]
    assert np.isfinite(out["tokens_per_round"])


@pytest.fixture(scope="module")
def dspark_run(tmp_path_factory) -> tuple[Path, list[str]]:
    """An exact-mode run of the DSpark drafter's arms on an oracle DSpark file for the tiny
    model (the paper's drafter kind)."""
    d = tmp_path_factory.mktemp("dspark")
    f = d / "oracle.gguf"
    env = clean_env(exact=True)
    made = subprocess.run([sys.executable, "-m", "adaspark.cli", "dspark-file", "kind=oracle",
                           "target=tiny", f"out={f}", "max_tokens=32"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)
    assert made.returncode == 0, made.stderr[-3000:]
    pair = ["target=tiny", f"drafters.dspark.path={f}"]
    out = d / "run"
    p = subprocess.run(
        [sys.executable, "-m", "adaspark.cli", "run", *pair, "run.testset=data/testset",
         "run.subset=smoke", "run.cap=16", "run_arms=[chain3-dspark,adaspark-dspark]",
         "run.exact=true", "run.round_log=true", f"out={out}"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    return out, pair


@pytest.mark.parametrize("arm", ["chain3-dspark", "adaspark-dspark"])
def test_dspark_arms_replay_exactly(dspark_run, arm) -> None:
    run_dir, pair = dspark_run
    out = run_replay([f"arm={arm}", *pair, f"run_dir={run_dir}", "device=recorded"],
                     log=lambda _m: None)
    assert out["rounds"] == out["recorded_rounds"] > 0
    assert out["rounds_identical"] == out["rounds"], out["first_mismatches"]
    assert out["committed_identical"] is True and out["exact"] is True
    assert out["accepted"] > 0  # the oracle's drafts are accepted: the labels' blocks are read


def test_the_batch_replay_serves_the_labelled_replies_n_at_a_time(run_dir) -> None:
    """The closed-loop batch replay over the run's own labels (issue 37, item 7): each reply's
    text whatever shares its steps, the steps shared, labelled synthetic; plain decode of three
    requests in one step costs one 3-row verify (flat to 8 rows), so tokens per second grow
    with the requests per step."""
    from adaspark.config import compose
    from adaspark.replay.batch import replay_arm_load
    from adaspark.runs.settings import ArmEntry, arm_config

    if not any((run_dir / "labels").glob("*/*.parquet")):  # the replays above made them
        replay_cli(run_dir, "adaspark")
    cfg = compose(PAIR)
    arm = lambda name: arm_config(cfg, ArmEntry.parse(name))  # noqa: E731
    # the labels stage's depth past each reply, labelled on the engine where short
    kw = {"device": "step-at-8", "replies_of": "adaspark", "labels": run_dir / "labels",
          "engine": True}
    ada = replay_arm_load(cfg, arm("adaspark"), run_dir, clients=[1, 3], **kw)
    ar = replay_arm_load(cfg, arm("ar"), run_dir, clients=[1, 3], labels_arm=arm("adaspark"),
                         **kw)
    for points in (ada, ar):
        one, three = points
        assert one["replies"] == three["replies"] == len(read_traces(run_dir / "adaspark" /
                                                                     "trace"))
        assert one["tokens"] == three["tokens"] > 0  # the same texts
        assert one["requests_per_step"] == 1 and three["requests_per_step"] > 1.5
        assert "synthetic batch law" in three["label"] and three["device"] == "step-at-8"
    # a step of plain decode costs one verify's 20 ms (and the host's 0.15 ms a request):
    # tokens per second grow with the requests a step holds
    assert ar[1]["aggregate_tps"] / ar[0]["aggregate_tps"] == pytest.approx(
        ar[1]["requests_per_step"], rel=0.05)
    assert ar[0]["rows_per_request_step"] == 1
