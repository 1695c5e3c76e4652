"""The stage: fallback to the vendored copy, one line when the hub is unreachable, mirrors, and
failure naming every conversation that moved."""

from __future__ import annotations

import json
import subprocess
import sys

from adaspark.stages import testset as stage
from adaspark.testset.model import SET_NAMES

FALLBACK = ["speedbench", "wildchat", "convfinqa", "toolace", "longbench"]


def no_hub(calls: list | None = None):
    def probe(repo: str, revision: str) -> str:
        if calls is not None:
            calls.append((repo, revision))
        return "ConnectError: Name or service not known"

    return probe


def test_unreachable_hub_falls_back_in_one_line(tmp_path, data_copy, capsys):
    calls: list = []
    out = tmp_path / "out"
    assert stage.main(["--out", str(out), "--data", str(data_copy)], probe=no_hub(calls)) == 0
    assert len(calls) == 1  # probed once, not once per source
    said = [line for line in capsys.readouterr().out.splitlines() if "dataset hub" in line]
    assert said == [
        "testset: no dataset hub reachable (ConnectError: Name or service not known); using the "
        f"vendored copy of {', '.join(FALLBACK)}, checked against data/testset.lock.json"
    ]
    for name in FALLBACK:
        assert (out / f"{name}.json").read_bytes() == (
            data_copy / "testset" / f"{name}.json"
        ).read_bytes()
    rebuilt = json.loads((out / "specbench.json").read_text(encoding="utf-8"))
    published = json.loads((data_copy / "testset" / "specbench.json").read_text(encoding="utf-8"))
    assert rebuilt["conversations"] == published["conversations"]
    subsets = json.loads((out / "subsets.json").read_text(encoding="utf-8"))
    ev = subsets["subsets"]["evaluation"]
    assert (ev["conversations"], ev["turns"], ev["timed_replies"]) == (42, 87, 95)
    assert subsets["paper_count_differences"] == []
    report = json.loads((out / "lock-check.json").read_text(encoding="utf-8"))
    assert report["ok"] and report["sets"]["specbench"]["rebuilt"]


def test_tampered_copy_fails_and_names_the_conversation(tmp_path, data_copy, capsys):
    f = data_copy / "testset" / "toolace.json"
    raw = json.loads(f.read_text(encoding="utf-8"))
    raw["conversations"][6]["turns"][0]["result"] += " "
    f.write_text(json.dumps(raw, ensure_ascii=False, indent=1), encoding="utf-8")
    out = tmp_path / "out"
    assert stage.main(["--out", str(out), "--data", str(data_copy), "--offline"]) == 1
    captured = capsys.readouterr()
    assert "MISMATCH vendored toolace/ta-7" in captured.out
    assert "FAILED" in captured.err
    assert sorted(p.name for p in out.iterdir()) == ["lock-check.json"]  # nothing to run on

    allowed = tmp_path / "allowed"
    argv = ["--out", str(allowed), "--data", str(data_copy), "--offline", "--allow-mismatch"]
    assert stage.main(argv) == 0
    assert {f"{n}.json" for n in SET_NAMES} <= {p.name for p in allowed.iterdir()}
    report = json.loads((allowed / "lock-check.json").read_text(encoding="utf-8"))
    assert not report["ok"] and report["allowed_mismatch"]
    assert [m["conversation"] for m in report["vendored"]["mismatches"]] == ["ta-7"]


def test_mirror_rebuild_that_matches_the_lock(tmp_path, data_copy, mirror_from_published, capsys):
    out = tmp_path / "out"
    argv = [
        "--out",
        str(out),
        "--data",
        str(data_copy),
        "--offline",
        "--mirror",
        f"wildchat={mirror_from_published('wildchat')}",
    ]
    assert stage.main(argv) == 0
    report = json.loads((out / "lock-check.json").read_text(encoding="utf-8"))
    assert report["sets"]["wildchat"]["rebuilt"]
    assert report["sets"]["wildchat"]["origin"].startswith("rebuilt from mirror")
    fallback_line = next(
        line for line in capsys.readouterr().out.splitlines() if "vendored copy of" in line
    )
    assert "wildchat" not in fallback_line


def test_mirror_rebuild_that_differs_names_every_moved_conversation(
    tmp_path, data_copy, write_json, capsys
):
    rows = [
        {
            "system": 'that you can invoke:\n[{"name": "f", "parameters": {"type": "dict"}}]',
            "conversations": [
                {"from": "user", "value": f"q{k}"},
                {"from": "assistant", "value": "[f()]"},
                {"from": "tool", "value": "r"},
                {"from": "user", "value": "thanks"},
            ],
        }
        for k in range(8)
    ]
    mirror = tmp_path / "toolace-mirror"
    write_json(mirror / "data.json", rows)
    out = tmp_path / "out"
    argv = [
        "--out",
        str(out),
        "--data",
        str(data_copy),
        "--offline",
        "--mirror",
        f"toolace={mirror}",
    ]
    assert stage.main(argv) == 1
    text = capsys.readouterr().out
    for k in range(1, 9):
        assert f"MISMATCH toolace/ta-{k}: turn text changed" in text


def test_runs_as_a_module(tmp_path, data_copy):
    out = tmp_path / "out"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "adaspark.stages.testset",
            "--out",
            str(out),
            "--data",
            str(data_copy),
            "--offline",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "hub not tried (offline)" in proc.stdout
    assert (out / "subsets.json").is_file()


def test_bad_mirror_argument_is_refused(capsys):
    import pytest

    with pytest.raises(SystemExit):
        stage.main(["--out", "x", "--mirror", "nosuch=/tmp"])
    assert "NAME=DIR" in capsys.readouterr().err


def test_a_failed_check_removes_an_earlier_runs_outputs(tmp_path, data_copy):
    out = tmp_path / "out"
    assert stage.main(["--out", str(out), "--data", str(data_copy), "--offline"]) == 0
    assert (out / "subsets.json").is_file()
    f = data_copy / "testset" / "longbench.json"
    f.write_text(f.read_text(encoding="utf-8").replace("Summary:", "Summary;", 1), encoding="utf-8")
    assert stage.main(["--out", str(out), "--data", str(data_copy), "--offline"]) == 1
    assert sorted(p.name for p in out.iterdir()) == ["lock-check.json"]


def test_a_missing_mirror_is_a_clear_error(tmp_path, data_copy, capsys):
    argv = [
        "--out",
        str(tmp_path / "out"),
        "--data",
        str(data_copy),
        "--offline",
        "--mirror",
        f"speedbench={tmp_path / 'nowhere'}",
    ]
    assert stage.main(argv) == 2
    err = capsys.readouterr().err
    assert "does not exist" in err and "huggingface-cli download" in err
