"""GPU builds (issue 16): the backend choice of scripts/backend.sh, the build's cache key, and the
rules that follow from a backend (layers offloaded, llama-server's flags, exact mode refused on a
GPU), as pure functions with known answers; on this machine's CPU build, the recorded backend and
a refused offload setting."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from adaspark.decoding import backend as bk
from adaspark.replay.command import check_labelling_backend

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "backend.sh"


def choose(env: dict[str, str], path: str | None = None) -> subprocess.CompletedProcess[str]:
    e = {k: v for k, v in os.environ.items() if k != "ADASPARK_BACKEND"} | env
    if path is not None:
        e["PATH"] = path
    return subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, env=e,
                          timeout=60)


def stub(dir_: Path, name: str, out: str) -> None:
    p = dir_ / name
    p.write_text(f"#!/bin/sh\nprintf '%s\\n' '{out}'\n")
    p.chmod(0o755)


def gpu_listed() -> bool:
    if shutil.which("nvidia-smi") is None:
        return False
    q = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
    return q.returncode == 0 and q.stdout.startswith("GPU ")


def test_auto_picks_the_cpu_on_a_machine_without_a_gpu():
    if gpu_listed():
        pytest.skip("this machine lists a GPU: auto picks CUDA here")
    assert choose({}).stdout.strip() == "cpu"
    assert choose({"ADASPARK_BACKEND": "auto"}).stdout.strip() == "cpu"


def test_auto_needs_both_a_listed_gpu_and_nvcc(tmp_path):
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    base = f"{bin_}:/usr/bin:/bin"
    stub(bin_, "nvidia-smi", "GPU 0: NVIDIA H200 (UUID: GPU-0)")
    assert choose({}, base).stdout.strip() == "cpu"  # a GPU but no nvcc
    stub(bin_, "nvcc", "nvcc: release 12.8")
    assert choose({}, base).stdout.strip() == "cuda"
    stub(bin_, "nvidia-smi", "No devices were found")
    assert choose({}, base).stdout.strip() == "cpu"  # nvcc but no GPU: this machine, CI
    assert choose({"ADASPARK_BACKEND": "cuda"}, base).stdout.strip() == "cuda"


def test_a_backend_that_is_not_one_is_refused():
    p = choose({"ADASPARK_BACKEND": "rocm"})
    assert p.returncode == 2 and "one of cpu, cuda, metal, auto" in p.stderr


def test_the_backend_is_part_of_the_build_key():
    from adaspark import paths

    sdist = Path(paths.build_info()["sdist"])

    def root(**env: str) -> str:
        e = {k: v for k, v in os.environ.items() if k != "ADASPARK_BACKEND"}
        p = subprocess.run(["bash", str(REPO / "scripts" / "build_llama.sh"), str(sdist), "/x"],
                           capture_output=True, text=True, env=e | {"ADASPARK_PRINT_ROOT": "1",
                                                                    **env}, timeout=120)
        assert p.returncode == 0, p.stderr
        return p.stdout.strip()

    cpu = root(ADASPARK_BACKEND="cpu")
    built = Path(paths.build_info()["lib_dir"]).parent.parent
    assert Path(cpu).name == built.name  # this venv's CPU build is the key's
    if shutil.which("nvcc") is None:
        pytest.skip("no nvcc: a CUDA key cannot be asked for")
    cuda90 = root(ADASPARK_BACKEND="cuda", ADASPARK_CUDA_ARCHS="90")
    cuda80 = root(ADASPARK_BACKEND="cuda", ADASPARK_CUDA_ARCHS="80")
    assert len({cpu, cuda90, cuda80}) == 3


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="AMX is an x86-64 extension")
def test_the_cpu_build_has_no_amx_kernels():
    """ggml's AMX matrix kernels crashed on the first decode of every model on an AMX CPU
    (2026-12-05): the build turns them off, on every x86-64 machine, and says so."""
    from adaspark import paths

    lib_dir = Path(paths.build_info()["lib_dir"])
    info = json.loads((lib_dir.parent.parent / "BUILD_INFO.json").read_text())
    assert "-mno-amx-int8" in info.get("cflags", ""), info
    cpu = next(iter(sorted(lib_dir.glob("libggml-cpu.so*"))))
    assert b"ggml_backend_amx_mul_mat" not in cpu.read_bytes()


def test_layers_offloaded_follow_the_backend():
    assert bk.gpu_layers(None, "cpu", "target.n_gpu_layers") == 0
    assert bk.gpu_layers(0, "cpu", "target.n_gpu_layers") == 0
    assert bk.gpu_layers(None, "cuda", "target.n_gpu_layers") == bk.ALL_LAYERS
    assert bk.gpu_layers(20, "cuda", "target.n_gpu_layers") == 20
    with pytest.raises(bk.BackendError, match=r"drafter.n_gpu_layers=12.*no GPU backend"):
        bk.gpu_layers(12, "cpu", "drafter.n_gpu_layers")
    with pytest.raises(bk.BackendError, match=r"-1 for every layer"):
        bk.gpu_layers(-3, "cuda", "target.n_gpu_layers")


def test_llama_server_gets_offload_flags_on_a_gpu_build_only():
    assert bk.server_gpu_flags(0, 0, "cpu") == []
    assert bk.server_gpu_flags(-1, None, "cuda") == ["--n-gpu-layers", "all"]
    assert bk.server_gpu_flags(20, -1, "metal") == ["--n-gpu-layers", "20",
                                                    "--n-gpu-layers-draft", "all"]


def test_exact_mode_and_labelling_are_refused_on_a_gpu_build():
    bk.check_exact(True, "cpu")
    bk.check_exact(False, "cuda")
    with pytest.raises(bk.BackendError, match=r"exact=true needs a CPU build.*exact=false"):
        bk.check_exact(True, "cuda")
    assert bk.default_exact("cpu") is True and bk.default_exact("cuda") is False
    check_labelling_backend("cpu")
    with pytest.raises(bk.BackendError, match=r"labels are made in exact mode.*CPU build"):
        check_labelling_backend("metal")


def test_this_build_is_recorded_as_cpu_in_metadata_and_fingerprint():
    from adaspark import provenance

    assert bk.build_backend() == "cpu"
    assert provenance.llama_build()["backend"] == "cpu"


def test_an_offload_setting_on_a_cpu_build_is_a_clear_error(tmp_path):
    p = subprocess.run([sys.executable, "-m", "adaspark.cli", "generate", "target=tiny",
                        "drafter=tiny-truncated", "arm=chain3", "target.n_gpu_layers=4",
                        "prompt=hi", "max_tokens=2"], capture_output=True, text=True,
                       cwd=REPO, timeout=300)
    assert p.returncode == 2, p.stderr
    assert "target.n_gpu_layers=4" in p.stderr and "no GPU backend" in p.stderr
    assert "Traceback" not in p.stderr


def test_llama_server_argv_has_no_offload_flags_on_this_build():
    from adaspark.config import compose
    from adaspark.schema import check_arm
    from adaspark.serving.llama_server import spec_from_config

    cfg = compose(["target=tiny", "drafter=tiny-truncated"])
    spec = spec_from_config(cfg, check_arm(cfg.arms["llamacpp-chain"], "arms.llamacpp-chain"),
                            port=1)
    assert spec.gpu_args == [] and "--n-gpu-layers" not in spec.args()
