"""The README is a contract with users: its three commands come first, it stays short, and every
command, config key, path and page it names exists."""

from __future__ import annotations

import re

import yaml
from helpers import REPO

README = REPO / "README.md"
#: Paths the pipeline or a command writes (not in a fresh checkout) and paths outside it.
GENERATED = ("paper/", "figures/", "runs/", ".venv/", "~", "$", "/your/", "OUT")
FILE_SUFFIXES = {"json", "yaml", "md", "parquet", "py", "sh", "gguf", "csv", "png", "pdf", "html",
                 "tex"}


def _code_spans(text: str) -> list[str]:
    return re.findall(r"`([^`\n]+)`", text)


def test_the_readme_starts_with_the_three_commands_and_stays_short() -> None:
    text = README.read_text(encoding="utf-8")
    lines = text.splitlines()
    assert len(lines) < 250, f"README.md has {len(lines)} lines: move reference text to docs/"
    first = text.index("## ")
    assert text[first:].startswith("## Three commands")
    block = text[first:].split("```")[1]
    commands = [ln.split("#")[0].strip() for ln in block.splitlines()[1:] if ln.strip()]
    assert commands == ["bash scripts/setup.sh", "source .venv/bin/activate && dvc repro",
                        ".venv/bin/python -m pytest -q"]
    assert (REPO / ".ci/run").read_text().rstrip().endswith(".venv/bin/python -m pytest -q")


def test_every_page_path_and_command_the_readme_names_exists() -> None:
    from adaspark.cli import COMMANDS

    text = README.read_text(encoding="utf-8")
    missing = [link for link in re.findall(r"\]\(([^)#]+)\)", text)
               if not (REPO / link).exists()]
    for span in _code_spans(text):
        for word in span.split():
            if "/" not in word or word.startswith(GENERATED) or "<" in word or "=" in word:
                continue
            path = word.rstrip(",.;:)").lstrip("(")
            if re.fullmatch(r"[\w.\-/]+", path) and not (REPO / path).exists():
                missing.append(path)
    assert not missing, f"README.md names paths that do not exist: {missing}"
    used = re.findall(r"(?:^|\s|`)(?:\.venv/bin/)?adaspark ([a-z][a-z-]*)", text, re.M)
    assert used and set(used) <= set(COMMANDS), sorted(set(used) - set(COMMANDS))


def test_every_config_key_the_readme_names_is_in_the_composed_config() -> None:
    params = yaml.safe_load((REPO / "params.yaml").read_text(encoding="utf-8"))
    text = README.read_text(encoding="utf-8")
    keys = {m for span in _code_spans(text) for word in span.replace("'", " ").split()
            for m in re.findall(r"^(?:-S )?([a-z_]+(?:\.[a-z_0-9]+)+)(?:=|$)", word)
            if m.split(".")[0] in params and m.rsplit(".", 1)[1] not in FILE_SUFFIXES}
    assert {"target.path", "replay.devices"} <= keys
    for key in sorted(keys):
        node = params
        for part in key.split("."):
            assert isinstance(node, dict) and part in node, f"README.md names {key}, not a key"
            node = node[part]
