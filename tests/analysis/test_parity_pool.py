"""``benchmarks/plain_parity.py --pool`` (issue 12): several runs' replies in one report, each
run's repetitions kept apart, with a known answer; runs of another target, a pooled output or a
file named twice are refused with a message, not mixed."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("plain_parity",
                                                  REPO / "benchmarks" / "plain_parity.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["plain_parity"] = mod  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def run_file(path: Path, ratio: float, target: str = "embedded") -> Path:
    """A benchmark output: two prompts (100 and 3,000 tokens), two repetitions, our speed
    ``ratio`` times llama-server's on every pair."""
    replies = []
    for prompt, n in (("short-0", 100), ("doc", 3000)):
        for rep in range(2):
            for arm, tps in (("ar", 20.0 * ratio), ("llamacpp-ar", 20.0)):
                replies.append({"arm": arm, "prompt": prompt, "group": "g", "rep": rep,
                                "position": 0, "prompt_tokens": n, "completion_tokens": 96,
                                "decode_tps": tps, "server_tps": tps, "ttft_s": 0.1,
                                "text_sha": "x", "extra": {}})
    path.write_text(json.dumps({"settings": {"target": target, "max_tokens": 96,
                                             "threads": None}, "replies": replies}))
    return path


def test_two_runs_pool_into_one_report_per_band(bench, tmp_path) -> None:
    a = run_file(tmp_path / "a.json", 0.9)
    b = run_file(tmp_path / "b.json", 1.0)
    out = tmp_path / "pooled.json"
    assert bench.pool([a, b], out, [512, 2048], 1) == 0
    rep = json.loads(out.read_text())
    bands = {r["label"]: r for r in rep["ratio"]["per_band"]}
    # four pairs per run, two per band per run; half at 0.9, half at 1.0: the geometric mean
    assert rep["ratio"]["overall"]["n_pairs"] == 8
    assert {k: v["n_pairs"] for k, v in bands.items()} == {"under 512": 4, "2,048 and over": 4}
    assert rep["ratio"]["overall"]["ratio"] == pytest.approx(0.9 ** 0.5)
    assert rep["settings"]["pooled_from"] == [str(a), str(b)]


@pytest.mark.parametrize("case", ["target", "pooled", "twice"])
def test_runs_that_do_not_pool_are_refused(bench, tmp_path, capsys, case) -> None:
    a = run_file(tmp_path / "a.json", 0.9)
    if case == "target":
        files, why = [a, run_file(tmp_path / "b.json", 1.0, target="tiny")], "another target"
    elif case == "pooled":
        assert bench.pool([a], tmp_path / "p.json", [512], 1) == 0
        files, why = [a, tmp_path / "p.json"], "a pooled output"
    else:
        files, why = [a, a], "named twice"
    assert bench.pool(files, tmp_path / "out.json", [512], 1) == 2
    assert why in capsys.readouterr().err
    assert not (tmp_path / "out.json").exists()
