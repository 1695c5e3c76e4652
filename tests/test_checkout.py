"""A second clone that shares the first clone's virtual environment reads its own ``conf/`` and
``data/`` (issue 10, item 9): configs come from the working directory's checkout."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from adaspark import paths

REPO = Path(__file__).resolve().parents[1]


def _clone(tmp_path: Path) -> Path:
    """A checkout beside this one: its own conf/, data/models.json and pyproject.toml."""
    other = tmp_path / "other-clone"
    shutil.copytree(REPO / "conf", other / "conf")
    (other / "data").mkdir(parents=True)
    shutil.copyfile(REPO / "data" / "models.json", other / "data" / "models.json")
    shutil.copyfile(REPO / "pyproject.toml", other / "pyproject.toml")
    return other


def test_checkout_root_is_found_from_a_subfolder(tmp_path):
    other = _clone(tmp_path)
    (other / "runs" / "deep").mkdir(parents=True)
    assert paths.checkout_root(other / "runs" / "deep") == other.resolve()
    assert paths.checkout_root(tmp_path) == paths.REPO_ROOT  # outside any checkout
    assert paths.is_checkout(REPO)


def test_a_clone_sharing_the_venv_reads_its_own_conf_and_manifest(tmp_path):
    other = _clone(tmp_path)
    cfg = other / "conf" / "config.yaml"
    cfg.write_text(cfg.read_text().replace("max_tokens: 64", "max_tokens: 77"))
    manifest = json.loads((other / "data" / "models.json").read_text())
    manifest["only-in-the-other-clone"] = {"file": "x.gguf", "source": {"kind": "member"}}
    (other / "data" / "models.json").write_text(json.dumps(manifest))
    code = ("import json; from adaspark.config import compose; from adaspark import "
            "model_files; c = compose([]); print(json.dumps({'max_tokens': c.max_tokens, "
            "'models': sorted(model_files.load_manifest())}))")
    p = subprocess.run([sys.executable, "-c", code], cwd=other, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["max_tokens"] == 77
    assert "only-in-the-other-clone" in out["models"]
