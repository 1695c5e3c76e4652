"""A run directory has one writer and a resume reads only its own rows (issue 34, items 1, 2 and
14): a second run into a directory another process writes is refused naming the holder, the lock
goes with its holder's death (a killed run still resumes), and a ``replies.parquet`` made by
another arm, another fingerprint or with a foreign schema is refused, naming the file, before any
server starts. The run is the real one on the tiny model (two smoke replies)."""

from __future__ import annotations

import socket
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers import run_settings

from adaspark.runs.run import compose_for_run, run_arm
from adaspark.runs.settings import RunError, RunMismatchError
from adaspark.runs.store import LOCK_FILE, ResultStore, RunLock

REPO = Path(__file__).resolve().parents[2]
HOLD = ("import sys, time; from pathlib import Path; from adaspark.runs.store import RunLock; "
        "RunLock(Path(sys.argv[1])).acquire(); print('held', flush=True); time.sleep(120)")


def _holder(d: Path) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, "-c", HOLD, str(d)], stdout=subprocess.PIPE,
                         text=True, cwd=REPO)
    assert p.stdout is not None and p.stdout.readline().strip() == "held"
    return p


def test_the_lock_names_its_holder_and_dies_with_it(tmp_path):
    d = tmp_path / "ar"
    p = _holder(d)
    try:
        with pytest.raises(RunError) as e:
            RunLock(d).acquire()
        msg = str(e.value)
        assert f"pid {p.pid} on host {socket.gethostname()}, started " in msg
        assert str(d) in msg and "another output directory" in msg
    finally:
        p.kill()  # SIGKILL: the OS releases the flock
        p.wait()
    with RunLock(d):  # free again: a killed run resumes
        with pytest.raises(RunError, match=f"pid {__import__('os').getpid()} "):
            RunLock(d).acquire()  # the same process, a second writer: refused too
    RunLock(d).acquire().release()


def test_the_same_rows_are_refused_to_another_arm_entry_or_fingerprint(tmp_path):
    store = ResultStore(tmp_path)
    rows = [{"entry": "ar", "fingerprint": "abc"}]
    store.check_rows(rows, "ar", "abc")
    for entry, digest in (("chain3", "abc"), ("ar", "def")):
        with pytest.raises(RunMismatchError, match=r"replies\.parquet holds a reply of arm entry"):
            store.check_rows(rows, entry, digest)


@pytest.mark.server
def test_a_run_refuses_a_held_directory_and_rows_it_did_not_make(tmp_path):
    cfg = compose_for_run(["target=tiny", "drafter=tiny-truncated", "run_arms=[ar]"])
    good = run_settings(subset="smoke", cap=2, testset="data/testset")
    out = tmp_path / "ar"

    # item 1: a directory another run writes is refused before anything is written
    p = _holder(out)
    try:
        with pytest.raises(RunError, match=f"pid {p.pid} on host"):
            run_arm(cfg, "ar", out, good)
        assert sorted(f.name for f in out.iterdir()) == [LOCK_FILE]
    finally:
        p.kill()
        p.wait()
    assert run_arm(cfg, "ar", out, good).n_replies == 2
    rows_file = out / "replies.parquet"
    own = pq.read_table(rows_file)

    # item 2: rows of another arm entry (chain3's file copied over ar's) are refused
    (out / "server.log").unlink()
    foreign = own.set_column(own.schema.get_field_index("entry"), "entry",
                             pa.array(["chain3"] * own.num_rows))
    pq.write_table(foreign, rows_file)
    with pytest.raises(RunMismatchError, match=f"{rows_file} holds a reply of arm entry "
                                               r"'chain3'"):
        run_arm(cfg, "ar", out, good)
    # ... and so are rows of another fingerprint
    other = own.set_column(own.schema.get_field_index("fingerprint"), "fingerprint",
                           pa.array(["0" * 16] * own.num_rows))
    pq.write_table(other, rows_file)
    with pytest.raises(RunMismatchError, match="with fingerprint '0000000000000000'"):
        run_arm(cfg, "ar", out, replace(good, cap=2))

    # item 14: a foreign schema (turn as text) is refused naming the file
    bad = own.set_column(own.schema.get_field_index("turn"), "turn",
                         pa.array(["first"] * own.num_rows))
    pq.write_table(bad, rows_file)
    with pytest.raises(RunError, match=f"{rows_file} cannot be read"):
        run_arm(cfg, "ar", out, good)
    assert not (out / "server.log").exists()  # nothing was started

    # the run's own rows: the run resumes with nothing to send
    pq.write_table(own, rows_file)
    assert run_arm(cfg, "ar", out, good).n_replies == 2
