"""The compiled kernels' cache (``adaspark.jit``) lives in the per-machine cache, not beside the
source: a stage that compiles a kernel must not change the ``src/`` the pipeline's stages depend
on (a compiled cache beside the rules made ``dvc repro`` rerun a stage that had just run)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

MODULE = '''
from adaspark.jit import kernel

@kernel
def twice(x):
    return 2 * x
'''


def _compile_in_a_fresh_process(src: Path, cache: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    env["ADASPARK_CACHE"] = str(cache)
    env["PYTHONPATH"] = os.pathsep.join([str(src), env.get("PYTHONPATH", ""), *sys.path])
    code = "import kernels_here; assert kernels_here.twice(21) == 42"
    return subprocess.run([sys.executable, "-B", "-c", code], env=env, capture_output=True,
                          text=True, timeout=300)


def test_a_compiled_kernel_is_cached_under_the_machine_cache_not_beside_its_module(tmp_path):
    src, cache = tmp_path / "src", tmp_path / "cache"
    src.mkdir()
    (src / "kernels_here.py").write_text(MODULE)
    done = _compile_in_a_fresh_process(src, cache)
    assert done.returncode == 0, done.stderr
    beside = sorted(p.name for p in src.rglob("*") if p.suffix in (".nbi", ".nbc"))
    assert not beside, f"numba cached beside the source: {beside}"
    cached = sorted(p.name for p in (cache / "numba").rglob("*") if p.suffix in (".nbi", ".nbc"))
    assert any(name.startswith("kernels_here.twice") for name in cached), cached
