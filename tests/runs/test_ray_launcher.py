"""The protocol on a real Ray cluster (issue 16): a local cluster of a head and two worker nodes
on loopback, the tiny model, the smoke subset and two arms in exact mode. The replies' texts and
token counts equal a single-machine run's, the replies came from two distinct nodes (the per-reply
node column), and a run whose node is killed mid-way resumes on a rerun with nothing lost or
stored twice. The kill test runs `ar` over the `short` subset (dealt three conversations to a
node) so that the killed node still has several replies, each seconds long, left when its first
one is stored: with the smoke subset it could finish before the kill landed."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from adaspark.runs.store import ResultStore

ray = pytest.importorskip("ray", reason="Ray is the optional group `ray` (ADASPARK_EXTRAS=ray)")
pytestmark = pytest.mark.server

REPO = Path(__file__).resolve().parents[2]
ARMS = ["ar", "chain3"]
COMMON = ["target=tiny", "drafter=tiny-truncated", "run.testset=data/testset",
          "run.warmup=false", "run.exact=true", "run.order=sequential", "threads=1"]
BASE = [*COMMON, "run.subset=smoke", "run.cap=8", f"run_arms=[{','.join(ARMS)}]"]
KILL_ARMS = ["ar"]
KILL = [*COMMON, "run.subset=short", "run.cap=16", f"run_arms=[{','.join(KILL_ARMS)}]"]


def adaspark_run(*args: str, base: list[str] = BASE,
                 timeout: int = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "adaspark.cli", "run", *base, *args],
                          capture_output=True, text=True, cwd=REPO, timeout=timeout)


def replies(out: Path, arm: str) -> dict[tuple, tuple]:
    return {(r["set"], r["conversation"], r["turn"], r["reply"]):
            (r["completion_tokens"], r["text"]) for r in ResultStore(out / arm).rows()}


def keys(out: Path, arm: str) -> list[tuple]:
    return [(r["set"], r["conversation"], r["turn"], r["reply"])
            for r in ResultStore(out / arm).rows()]


@pytest.fixture(scope="module")
def local_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("local")
    p = adaspark_run(f"out={out}")
    assert p.returncode == 0, p.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def local_kill_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("local-kill")
    p = adaspark_run(f"out={out}", base=KILL)
    assert p.returncode == 0, p.stderr[-3000:]
    return out


def test_a_ray_run_equals_the_local_run_and_spans_two_nodes(local_run, tmp_path):
    out = tmp_path / "ray"
    t0 = time.monotonic()
    p = adaspark_run("launcher=ray", "launcher.workers=2", f"out={out}")
    wall = time.monotonic() - t0
    assert p.returncode == 0, p.stderr[-3000:]
    nodes = set()
    for arm in ARMS:
        assert replies(out, arm) == replies(local_run, arm), f"{arm}: replies differ"
        rows = ResultStore(out / arm).rows()
        nodes |= {r["node"] for r in rows}
        assert all(r["hardware"] for r in rows)
        run = json.loads((out / arm / "run.json").read_text())
        assert run["fingerprint"]["run"]["order"]["launcher"] == {"launcher": "ray",
                                                                  "shard": "conversations"}
        assert len(run["launcher"]["nodes"]) == 2
    assert len(nodes) == 2 and not any(n.startswith("local-") for n in nodes)
    local_nodes = {r["node"] for a in ARMS for r in ResultStore(local_run / a).rows()}
    assert len(local_nodes) == 1 and next(iter(local_nodes)).startswith("local-")
    print(f"ray run: {wall:.0f} s wall")


def test_a_killed_node_loses_only_its_unfinished_replies(local_kill_run, tmp_path):
    from ray.cluster_utils import Cluster

    out = tmp_path / "killed"
    cluster = Cluster(initialize_head=True,
                      head_node_args={"num_cpus": 0, "include_dashboard": False})
    try:
        workers = [cluster.add_node(num_cpus=1, resources={"adaspark_node": 1})
                   for _ in range(2)]
        cluster.wait_for_nodes()
        driver = subprocess.Popen(
            [sys.executable, "-m", "adaspark.cli", "run", *KILL, "launcher=ray",
             f"launcher.address={cluster.address}", f"out={out}"],
            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        killed = None
        deadline = time.monotonic() + 600
        while killed is None and time.monotonic() < deadline and driver.poll() is None:
            rows = ResultStore(out / "ar").rows() if (out / "ar" / "replies.parquet").exists() \
                else []
            if rows:  # the first stored reply's node: kill it before its next arm's reply
                victim = rows[0]["node"]
                killed = next(w for w in workers if w.node_id == victim)
                cluster.remove_node(killed, allow_graceful=False)
            time.sleep(0.2)
        _, err = driver.communicate(timeout=600)
        assert killed is not None, f"no reply was stored before the run ended: {err[-2000:]}"
        assert driver.returncode != 0, "the run should fail when a node dies"
        assert "Rerun the same command" in err
        total = sum(len(keys(local_kill_run, a)) for a in KILL_ARMS)
        stored = sum(len(keys(out, a)) for a in KILL_ARMS)
        assert 1 <= stored < total
        print(f"node killed after its first reply: {stored} of {total} replies stored; rerunning")
        cluster.add_node(num_cpus=1, resources={"adaspark_node": 1})
        cluster.wait_for_nodes()
        again = adaspark_run("launcher=ray", f"launcher.address={cluster.address}",
                             f"out={out}", base=KILL)
        assert again.returncode == 0, again.stderr[-3000:]
    finally:
        cluster.shutdown()
    for arm in KILL_ARMS:
        ks = keys(out, arm)
        assert len(ks) == len(set(ks)), f"{arm}: a reply was stored twice"
        assert replies(out, arm) == replies(local_kill_run, arm), f"{arm}: replies differ"
