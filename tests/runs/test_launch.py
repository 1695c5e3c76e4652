"""The run stage starts our engine with a command built from ``ServeOptions`` (issue 11): the
command parses back to the options, arm, params file and kernel mode it was given."""

from __future__ import annotations

import sys
from pathlib import Path

from helpers import run_settings

from adaspark.config import compose
from adaspark.runs.launch import launch
from adaspark.runs.settings import ArmEntry, RunSettings, arm_config
from adaspark.serving.main import MainArgs, ServeOptions, parse_main_args

TINY = ["target=tiny", "drafter=tiny-truncated"]


def _command(tmp_path: Path, settings: RunSettings, entry: str = "chain3") -> list[str]:
    cfg = compose(TINY)
    e = ArmEntry.parse(entry)
    proc = launch(cfg, e, arm_config(cfg, e), tmp_path, settings)  # made, not started
    assert proc.argv[:3] == [sys.executable, "-m", "adaspark.serving.main"]
    return proc.argv[3:]


def test_launch_command_parses_back_to_its_options(tmp_path):
    template = tmp_path / "t.jinja"
    settings = run_settings(exact=True, host="127.0.0.1", port=4321, chat_template=str(template),
                           round_log=True, warmup=False, tool_fallback="none")
    got = parse_main_args(_command(tmp_path, settings))
    out = tmp_path.resolve()
    assert got == MainArgs(
        params=out / "server-params.yaml", arm="chain3", exact=True,
        options=ServeOptions(host="127.0.0.1", port=4321, store=out / "store",
                             chat_template=template.resolve(), warmup=False,
                             round_log=out / "rounds", trace_log=out / "trace",
                             tool_fallback="none"))
    assert got.params.is_file()


def test_launch_command_with_the_run_defaults(tmp_path):
    settings = run_settings(port=4322)
    got = parse_main_args(_command(tmp_path, settings, "adaspark@2"))
    out = tmp_path.resolve()
    assert got == MainArgs(params=out / "server-params.yaml", arm="adaspark@2", exact=False,
                           options=ServeOptions(port=4322, store=out / "store"))
