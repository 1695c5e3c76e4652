"""The package's shape (issue 11): one folder per part, no module over 700 lines, nothing at the
top level that belongs to a part, and no test fixture inside the package."""

from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "adaspark"
MAX_LINES = 700
PARTS = ("decoding", "rules", "serving", "runs", "analysis", "testset", "stages", "replay",
         "training", "cli")
#: The shared modules every part may use.
TOP_LEVEL = {"__init__.py", "arms.py", "checks.py", "config.py", "config_check.py", "io.py",
             "jit.py", "model_files.py", "paths.py", "provenance.py", "registry.py", "schema.py",
             "overrides.py"}


def test_no_module_is_over_the_limit():
    long = {str(p.relative_to(PACKAGE)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines (split them by job): {long}"


def test_the_top_level_holds_only_shared_modules_and_the_parts():
    files = {p.name for p in PACKAGE.glob("*.py")}
    dirs = {p.name for p in PACKAGE.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert files <= TOP_LEVEL, f"move {sorted(files - TOP_LEVEL)} into its part {PARTS}"
    assert dirs == set(PARTS), sorted(dirs ^ set(PARTS))


def test_every_part_is_a_package_with_a_docstring():
    for d in [p for p in PACKAGE.rglob("*") if p.is_dir() and p.name != "__pycache__"]:
        init = d / "__init__.py"
        assert init.is_file(), f"{d.relative_to(PACKAGE)} has no __init__.py"
        assert init.read_text(encoding="utf-8").lstrip().startswith('"""'), init


def test_no_test_fixture_ships_in_the_package():
    names = [p.relative_to(PACKAGE) for p in PACKAGE.rglob("*.py")
             if p.stem in ("synthetic", "fixtures", "conftest") or p.stem.startswith("test_")]
    assert not names, names
