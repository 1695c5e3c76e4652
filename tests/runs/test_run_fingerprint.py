"""A run's fingerprint covers the exact prompts and the decoding code, so a resume never mixes
replies made from two test sets or two versions of the code (issue 10, item 2); a bad subset is
refused before anything is written (item 7)."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest

from adaspark import provenance
from adaspark.runs.conversation import conversation_sha256, plan_subset
from adaspark.runs.run import compose_for_run, run_arm
from adaspark.runs.settings import RunError, RunMismatchError, RunSettings
from adaspark.testset import load_checked_sets

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "src" / "adaspark"


def _cfg(*overrides: str):
    return compose_for_run(["target=tiny", "drafter=tiny-truncated", "run.testset=data/testset",
                            "run.subset=smoke", "run.cap=4", "run_arms=[ar]", *overrides])


def _with_turn_text(sets, set_name: str, text: str):
    """The sets with the first turn of ``set_name``'s first conversation replaced."""
    out = []
    for s in sets:
        if s.name == set_name:
            c = s.conversations[0]
            turns = (dataclasses.replace(c.turns[0], text=text), *c.turns[1:])
            s = dataclasses.replace(s, conversations=[dataclasses.replace(c, turns=turns),
                                                      *s.conversations[1:]])
        out.append(s)
    return out


def test_conversation_hash_follows_the_text_sent():
    sets = load_checked_sets(REPO / "data" / "testset")
    before = {p.conversation.name: conversation_sha256(p) for p in plan_subset(sets, "smoke")}
    changed = _with_turn_text(sets, "specbench", "Another question entirely.")
    after = {p.conversation.name: conversation_sha256(p) for p in plan_subset(changed, "smoke")}
    differ = [k for k in before if before[k] != after[k]]
    assert len(differ) == 1
    assert differ[0] == sets[0].conversations[0].name


def test_code_fingerprint_covers_decoding_code_only(tmp_path):
    pkg = tmp_path / "adaspark"
    shutil.copytree(PACKAGE, pkg, ignore=shutil.ignore_patterns("__pycache__"))
    base = provenance.code_fingerprint(pkg)
    assert base == provenance.code_fingerprint(pkg)
    names = {f.relative_to(pkg).as_posix() for f in provenance.decoding_sources(pkg)}
    assert {"decoding/engine.py", "stages/run.py"} <= names
    assert not any(n.startswith("analysis/") for n in names)
    report = pkg / "analysis" / "report.py"
    report.write_text(report.read_text() + "\n# a comment\n")
    assert provenance.code_fingerprint(pkg) == base  # reports do not change a reply
    engine = pkg / "decoding" / "engine.py"
    engine.write_text(engine.read_text() + "\n# a comment\n")
    assert provenance.code_fingerprint(pkg) != base


@pytest.mark.server
def test_a_changed_turn_is_not_resumed_over(tmp_path):
    cfg = _cfg()
    settings = RunSettings.from_config(cfg)
    sets = load_checked_sets(REPO / "data" / "testset")
    out = tmp_path / "ar"
    first = run_arm(cfg, "ar", out, settings, sets=sets)
    assert first.n_replies >= 2  # ToolACE's second reply runs only when the model calls a tool
    # the same sets: everything is stored, nothing is sent again
    again = run_arm(cfg, "ar", out, settings, sets=sets)
    assert again.resumed_from == first.n_replies
    changed = _with_turn_text(sets, "specbench", "Write one word.")
    name = sets[0].conversations[0].name
    with pytest.raises(RunMismatchError) as e:
        run_arm(cfg, "ar", out, settings, sets=changed)
    assert f"conversations.specbench/{name}" in str(e.value)
    # the pipeline's choice: start over, and the reply is made from the new text
    redo = run_arm(cfg, "ar", out, settings, sets=changed, on_mismatch="restart")
    assert redo.resumed_from == 0 and redo.n_replies >= 2


def test_a_bad_subset_writes_nothing(tmp_path):
    cfg = _cfg("run.subset=shrot")
    out = tmp_path / "ar"
    with pytest.raises(RunError, match="shrot"):
        run_arm(cfg, "ar", out, RunSettings.from_config(cfg))
    assert not out.exists() or not any(out.iterdir())
