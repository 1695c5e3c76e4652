"""``adaspark generate`` and config errors, through the real command line (subprocesses: a
fast-mode run needs its own process)."""

from __future__ import annotations

import json

from helpers import run_cli

TINY = ["target=tiny", "drafter=tiny-truncated"]


def _last_json(stdout: str) -> dict:
    return json.loads(stdout.strip().splitlines()[-1])


def test_generate_json_matches_greedy_in_exact_mode():
    prompt = 'Say "hello, world" = twice;\nthen stop.'
    p = run_cli("generate", "arm=chain3", *TINY, f"prompt={prompt}", "max_tokens=24",
                "json=true", "check_greedy=true")
    assert p.returncode == 0, p.stderr
    out = _last_json(p.stdout)
    assert out["greedy_match"] is True and out["differences"] == []
    assert out["exact"] is True
    assert out["meta"]["config"]["prompt"] == prompt  # free text taken verbatim
    assert 0 < out["tokens"] <= 24
    assert out["rounds"] >= 1 and 0 <= out["accepted"] <= out["drafted"]
    assert out["tokens_per_s"] > 0
    assert out["meta"]["models"]["target"]["sha256"]
    assert out["meta"]["llama"]["llama_cpp_commit"]


def test_generate_fast_mode_reports_near_ties_only():
    p = run_cli("generate", "arm=chain3", *TINY, "prompt=Name the planets of the solar system.",
                "max_tokens=32", "json=true", "check_greedy=true", "exact=false")
    out = _last_json(p.stdout)
    assert out["exact"] is False
    # outside exact mode only near ties may differ; anything else exits 3
    assert p.returncode == (0 if out["greedy_match"] else 3), p.stderr
    for d in out["differences"]:
        assert d["allowed"] == (d["gap"] < 0.5)


def test_generate_prints_text():
    p = run_cli("generate", "arm=ar", "target=tiny", "prompt=What is 2+2?", "max_tokens=8")
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip()


def test_unknown_arm_is_a_clear_error():
    p = run_cli("generate", "arm=nosuch", *TINY, "max_tokens=4")
    assert p.returncode == 2
    assert "nosuch" in p.stderr and "Traceback" not in p.stderr


def test_unknown_key_is_a_clear_error():
    p = run_cli("generate", "arm=ar", "target=tiny", "max_tokns=4")
    assert p.returncode == 2
    assert "max_tokns" in p.stderr and "Traceback" not in p.stderr


def test_missing_user_model_file_is_a_clear_error(tmp_path):
    p = run_cli("generate", "arm=ar", "target=tiny", f"target.path={tmp_path}/none.gguf")
    assert p.returncode == 1
    assert "does not exist" in p.stderr and "Traceback" not in p.stderr
