"""Replay of a sampled run (issue "sampling", item 3): a real exact-mode run at temperature 0.8
with round traces, labels drawn with each reply's own seed, and the real rules replayed under the
recorded times reproduce every round and every committed token, as for a greedy run; the labels
are the sampled text, not the greedy one, and a label file of another seed is refused."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from adaspark.decoding.round_trace import read_traces
from adaspark.replay.labels import LabelsError, LabelStore, read_labels
from adaspark.serving.llama_server import clean_env

pytestmark = pytest.mark.server

REPO = Path(__file__).resolve().parents[2]
PAIR = ["target=tiny", "drafter=tiny-truncated"]
SAMPLING = ["sampling.temperature=0.8", "sampling.seed=11"]
ARMS = ("chain3", "adaspark")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("sampled") / "run"
    p = subprocess.run(
        [sys.executable, "-m", "adaspark.cli", "run", *PAIR, *SAMPLING,
         "run.testset=data/testset", "run.subset=smoke", "run.cap=24",
         f"run_arms=[{','.join(ARMS)}]", "run.exact=true", "run.round_log=true", f"out={out}"],
        cwd=REPO, env=clean_env(exact=True), capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    return out


def replay_cli(run_dir: Path, arm: str) -> dict:
    p = subprocess.run(
        [sys.executable, "-m", "adaspark.cli", "replay", f"arm={arm}", *PAIR,
         f"run_dir={run_dir}", "device=recorded", "json=true"],
        cwd=REPO, env=clean_env(exact=True), capture_output=True, text=True, timeout=600)
    assert p.returncode in (0, 3), p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("arm", ARMS)
def test_a_sampled_run_replays_exactly(run_dir, arm) -> None:
    recorded = read_traces(run_dir / arm / "trace")
    assert recorded and all(t.meta["sampling"]["temperature"] == 0.8 for t in recorded)
    assert len({t.meta["sampling"]["seed"] for t in recorded}) == len(recorded)  # per reply
    out = replay_cli(run_dir, arm)
    assert out["rounds"] == out["recorded_rounds"] > 0
    assert out["rounds_identical"] == out["rounds"], out["first_mismatches"]
    assert out["committed_identical"] is True and out["text_cuts"] == 0 and out["exact"]


def test_the_labels_are_the_sampled_text_and_keyed_by_seed(run_dir) -> None:
    replay_cli(run_dir, "chain3")
    traces = {tuple(t.prompt): t for t in read_traces(run_dir / "chain3" / "trace")}
    files = sorted((run_dir / "labels").glob("*-t0.8-*/*.parquet"))
    assert files, "the replay made its labels in a store of the run's sampling"
    for f in files:
        lab = read_labels(f)
        t = traces[tuple(lab.prompt)]
        assert lab.seed == t.meta["sampling"]["seed"] and f.stem.endswith(f"-s{lab.seed}")
        n = len(t.tokens)
        assert [int(x) for x in lab.next[:n]] == t.tokens  # the sampled reply, token for token
    store = LabelStore(files[0].parent, json.loads((files[0].parent / "meta.json").read_text()))
    lab = read_labels(files[0])
    store.seeds = {lab.key: lab.seed + 1}  # another reply's seed: another file, not this one
    assert store.get(lab.prompt) is None
    lab.seed = lab.seed + 2
    with pytest.raises(LabelsError, match="seed"):
        store.put(lab)


def test_the_sampled_replay_stage_replays_each_arm_over_the_sampled_replies(run_dir, tmp_path
                                                                           ) -> None:
    """The sampled-replay stage (:mod:`adaspark.stages.sampled_replay`) over this run placed as
    the sampled stage places it: labels drawn with each reply's seed, every arm replayed under a
    reconstructed device model, each replay committing the run's sampled replies."""
    import pandas as pd

    from adaspark.analysis.run_selection import sampled_parent

    runs = tmp_path / "runs"
    parent = runs / sampled_parent(0.8, 11)
    parent.parent.mkdir(parents=True)
    parent.symlink_to(run_dir, target_is_directory=True)
    params = tmp_path / "params.yaml"
    cfg = subprocess.run(
        [sys.executable, "-m", "adaspark.cli", "config", *PAIR, "format=yaml",
         f"extra_runs.sampled.arms=[llamacpp-chain,{','.join(ARMS)}]",
         "extra_runs.sampled.temperatures=[0.8]", "extra_runs.sampled.seeds=[11]",
         "replay.devices=[cpu-measured,qwen3-4b-paper]", "replay.replies_of=adaspark",
         "replay.labelled_arms=[adaspark]"],
        cwd=REPO, capture_output=True, text=True, timeout=120)
    assert cfg.returncode == 0, cfg.stderr[-2000:]
    params.write_text(cfg.stdout)
    out = tmp_path / "replay-sampled"
    p = subprocess.run(
        [sys.executable, "-m", "adaspark.stages.sampled_replay", "--params", str(params),
         "--runs", str(runs), "--out", str(out)],
        cwd=REPO, env=clean_env(exact=True), capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["replies_of"] == "adaspark" and summary["arms"] == list(ARMS)
    assert list(summary["devices"]) == ["qwen3-4b-paper"]  # not cpu-measured, not llama-server
    assert summary["devices"]["qwen3-4b-paper"]["label"] == "reconstructed"
    assert [(r["arm"], r["device"], r["temperature"]) for r in summary["replays"]] == [
        (a, "qwen3-4b-paper", 0.8) for a in ARMS]
    run = pd.read_parquet(run_dir / "adaspark" / "replies.parquet").set_index("conversation")
    for r in summary["replays"]:
        assert r["rounds"] > 0 and r["tokens_per_s"] > 0
        replayed = pd.read_parquet(out / "t0.8" / "qwen3-4b-paper" / r["arm"] / "replies.parquet")
        replayed = replayed.set_index("conversation")
        # each arm replays the sampled replies: as many tokens as the run committed
        assert (replayed["completion_tokens"] == run.loc[replayed.index, "completion_tokens"]
                ).all()
