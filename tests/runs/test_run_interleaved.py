"""An interleaved run on the tiny model with real servers (issue 12): two of our arms, ar and
chain3, with their servers up together, give each reply the tokens their sequential runs give
(greedy); the replies go out in the rotation's order; a run killed mid-way resumes without
losing or repeating a reply; run.json records the order, and a sequential run refuses results
made interleaved."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from adaspark.runs.launcher import run_arms
from adaspark.runs.order import RunUnit, plan_units
from adaspark.runs.run import compose_for_run, run_arm, run_unit
from adaspark.runs.settings import RunMismatchError, RunSettings
from adaspark.runs.store import ResultStore
from adaspark.testset import load_checked_sets

pytestmark = pytest.mark.server

REPO = Path(__file__).resolve().parents[2]
ARMS = ["ar", "chain3"]
BASE = ["target=tiny", "drafter=tiny-truncated", "run.testset=data/testset", "run.subset=smoke",
        "run.cap=8", "run.warmup=false", f"run_arms=[{','.join(ARMS)}]",
        f"run.groups.default=[{','.join(ARMS)}]"]


class _Stop(Exception):
    pass


def _tokens(out: Path) -> dict[tuple, tuple]:
    return {(r["set"], r["conversation"], r["turn"], r["reply"]):
            (r["completion_tokens"], r["text"], r["tool_calls"]) for r in ResultStore(out).rows()}


def test_interleaved_matches_sequential_resumes_and_is_recorded(tmp_path):
    sets = load_checked_sets(REPO / "data" / "testset")
    seq_cfg = compose_for_run([*BASE, "run.order=sequential"])  # the preset's is interleaved
    seq_settings = RunSettings.from_config(seq_cfg)
    assert seq_settings.order == "sequential"
    run_arms(seq_cfg, ARMS, tmp_path / "seq", seq_settings)

    cfg = compose_for_run([*BASE, "run.order=interleaved"])
    settings = RunSettings.from_config(cfg)
    [unit] = plan_units(ARMS, settings.order, settings.groups)
    assert unit == RunUnit(("ar", "chain3"), "default")
    dirs = {e: tmp_path / "int" / e for e in ARMS}
    served: list[tuple[str, tuple]] = []

    def on_reply(row) -> None:
        served.append((row.entry, row.key))
        if len(served) == 3:
            raise _Stop  # killed after the third reply: slot 1's first arm has it

    with pytest.raises(_Stop):
        run_unit(cfg, unit, dirs, settings, sets=sets, on_reply=on_reply)
    specbench = ("specbench", "sb-coding-1", 0, 0)
    toolace = ("toolace", "ta-1", 0, 0)
    # slot 0 starts at arm 0, slot 1 at arm 1
    assert served == [("ar", specbench), ("chain3", specbench), ("chain3", toolace)]
    before = {e: ResultStore(d).rows() for e, d in dirs.items()}
    assert [len(before[e]) for e in ARMS] == [1, 2]

    summaries = run_unit(cfg, unit, dirs, settings, sets=sets, on_reply=on_reply)
    assert [s.resumed_from for s in summaries] == [1, 2]
    assert [s.n_replies for s in summaries] == [2, 2]
    assert served[3] == ("ar", toolace)  # the resume skips what chain3 has
    assert not any(e == "chain3" and k == toolace for e, k in served[3:])
    for e in ARMS:
        after = ResultStore(dirs[e]).rows()
        keys = [(r["set"], r["conversation"], r["turn"], r["reply"]) for r in after]
        assert len(keys) == len(set(keys)), f"{e}: a reply was stored twice"
        assert after[: len(before[e])] == before[e]
        assert _tokens(dirs[e]) == _tokens(tmp_path / "seq" / e), f"{e}: replies differ"
        run = json.loads((dirs[e] / "run.json").read_text())
        assert run["fingerprint"]["run"]["order"] == {
            "order": "interleaved", "group": "default", "arms": ARMS,
            "position": ARMS.index(e), "rotation": unit.record(e)["rotation"]}
        # a session is recorded for each arm with replies left: chain3 had none after the kill
        # (ToolACE's second reply runs only after a tool call, which it did not make)
        sessions = [(r["stored_replies"], r["interleaved_with"]) for r in run["resumes"]]
        other = [x for x in ARMS if x != e]
        assert sessions == ([(0, other), (1, [])] if e == "ar" else [(0, other)])
        seq_run = json.loads((tmp_path / "seq" / e / "run.json").read_text())
        assert seq_run["fingerprint"]["run"]["order"] == {"order": "sequential"}
    assert _tokens(dirs["ar"]) == _tokens(dirs["chain3"])  # greedy: the same text

    # a sequential run does not append to interleaved results
    with pytest.raises(RunMismatchError, match=r"run\.order\.order: 'interleaved' -> 'sequential'"):
        run_arm(seq_cfg, "ar", dirs["ar"], seq_settings, sets=sets)
