"""What every run records about itself (STYLE habit 10): config, code, binaries, model files."""

from __future__ import annotations

import hashlib
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


#: Parts of the package that only read results (``analysis/``: reports, tables, figures,
#: statistics; other stages; the test-set builder, whose output a run hashes itself; replay,
#: which prices recorded labels; the commands of ``cli/``, the one-prompt command among them): a
#: change there does not change a reply. Everything else (``decoding/``, ``rules/``,
#: ``serving/``, ``runs/`` and the shared top-level modules) is decoding code, and a new module
#: counts as decoding code until it is listed here.
NOT_DECODING = ("analysis/", "stages/", "testset/", "replay/", "training/", "cli/")
#: ... except the stage that runs the arms.
DECODING_STAGES = ("stages/run.py",)


def decoding_sources(package: Path | None = None) -> list[Path]:
    """The package's decoding modules (see :data:`NOT_DECODING`), sorted."""
    root = package or Path(__file__).resolve().parent
    out = []
    for f in sorted(root.rglob("*.py")):
        rel = f.relative_to(root).as_posix()
        if rel in DECODING_STAGES or not any(rel.startswith(x) for x in NOT_DECODING):
            out.append(f)
    return out


def code_fingerprint(package: Path | None = None) -> str:
    """sha256 over the decoding modules' relative paths and bytes: what a run's fingerprint
    holds of the project's own code (a reply depends on it; the git commit also changes with
    the reports, so it is recorded beside the fingerprint, not in it)."""
    root = package or Path(__file__).resolve().parent
    h = hashlib.sha256()
    for f in decoding_sources(root):
        h.update(f.relative_to(root).as_posix().encode() + b"\0")
        h.update(hashlib.sha256(f.read_bytes()).digest())
    return h.hexdigest()


def llama_build() -> dict[str, Any]:
    """The llama.cpp build in use: commit, the patches applied to the vendored source
    (``scripts/llama-patches/``, name -> sha256), its backend (``cpu``, ``cuda``, ``metal``) and
    CUDA architectures, library and llama-server checksums."""
    info = dict(paths.build_info())
    import llama_cpp

    lib = Path(llama_cpp.__file__).parent / "lib" / "libllama.so"
    out: dict[str, Any] = {"llama_cpp_python": llama_cpp.__version__,
                           "llama_cpp_commit": info.get("llama_commit"),
                           "llama_patches": info.get("patches", {}),
                           # a build recorded before backends were is a CPU build
                           "backend": info.get("backend") or "cpu",
                           "cuda_architectures": info.get("cuda_architectures")}
    if lib.exists():
        out["libllama_sha256"] = recorded_sha256(str(lib.resolve()))
    server = info.get("llama_server")
    if server and Path(server).exists():
        out["llama_server"] = server
        out["llama_server_sha256"] = recorded_sha256(server)
    return out


def versions() -> dict[str, str]:
    pkgs = ["adaspark", "llama_cpp_python", "numpy", "hydra-core", "dvc", "pandas", "pyarrow",
            "starlette", "uvicorn", "uvloop", "httptools", "numba", "llvmlite"]
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
            "versions": versions(), "models": models, "host": platform.node(),
            "code": code_fingerprint(), "package": str(paths.REPO_ROOT),
            "checkout": str(paths.checkout_root())}
