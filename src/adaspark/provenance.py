"""What every run records about itself (STYLE habit 10): config, code, binaries, model files."""

from __future__ import annotations

import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

from adaspark import paths
from adaspark.model_files import recorded_sha256


def git_state() -> dict[str, Any]:
    def run(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], cwd=paths.REPO_ROOT, capture_output=True,
                                  text=True, timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    return {"commit": run("rev-parse", "HEAD") or None,
            "dirty": bool(run("status", "--porcelain", "--untracked-files=no"))}


def llama_build() -> dict[str, Any]:
    """The llama.cpp build in use: commit, library and llama-server checksums."""
    info = dict(paths.build_info())
    import llama_cpp

    lib = Path(llama_cpp.__file__).parent / "lib" / "libllama.so"
    out: dict[str, Any] = {"llama_cpp_python": llama_cpp.__version__,
                           "llama_cpp_commit": info.get("llama_commit")}
    if lib.exists():
        out["libllama_sha256"] = recorded_sha256(str(lib.resolve()))
    server = info.get("llama_server")
    if server and Path(server).exists():
        out["llama_server"] = server
        out["llama_server_sha256"] = recorded_sha256(server)
    return out


def versions() -> dict[str, str]:
    pkgs = ["adaspark", "llama_cpp_python", "numpy", "hydra-core", "dvc", "pandas", "pyarrow"]
    out = {"python": platform.python_version(), "machine": platform.machine()}
    for p in pkgs:
        try:
            out[p] = metadata.version(p)
        except metadata.PackageNotFoundError:
            pass
    return out


def run_metadata(config: dict[str, Any], models: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """``models``: role -> {path, sha256 (manifest or None)}; the file hash is recomputed
    only when the manifest gives none."""
    for m in models.values():
        if m.get("sha256") is None and m.get("path"):
            m["sha256"] = recorded_sha256(str(m["path"]))
    return {"config": config, "git": git_state(), "llama": llama_build(),
            "versions": versions(), "models": models, "host": platform.node()}
