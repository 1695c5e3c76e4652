"""Device cost profiles (issue 16): shape files, random-weight tensors that decode to finite
values, the synthetic verify tree, the Eq. (3) fit against the replay's own, the source tarball,
and scripts/device_profile.sh's dry run on this machine's CPU (its build reused: a tarball of
`adaspark device-source` keys like the sdist it came from)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from adaspark.replay.device import device_from_survey, load_device
from adaspark.replay.profile import PRUNED_DIRS, gguf_shape, pack_source

REPO = Path(__file__).resolve().parents[2]
SHAPES = REPO / "data" / "devices" / "shapes"
TINY_SHAPE = SHAPES / "smollm2-135m-instruct-q4_1.json"


def script():
    spec = importlib.util.spec_from_file_location("device_profile",
                                                  REPO / "scripts" / "device_profile.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def tarball(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("src") / "llama-src.tar.gz"
    pack_source(out)
    return out


def test_shape_file_matches_its_gguf_and_leaves_the_tokenizer_out():
    import gguf

    from adaspark import model_files

    path = model_files.verified_path("smollm2-135m-instruct-q4_1")
    shape = gguf_shape(path, "tiny")
    reader = gguf.GGUFReader(str(path))
    assert shape["arch"] == "llama" and shape["n_vocab"] == 49152
    assert [t["name"] for t in shape["tensors"]] == [t.name for t in reader.tensors]
    assert not [m for m in shape["metadata"] if m["key"].startswith("tokenizer.")]
    committed = json.loads(TINY_SHAPE.read_text())
    assert committed["tensors"] == shape["tensors"]  # the committed file is this model's
    assert committed["source"]["sha256"] == model_files.recorded_sha256(str(path))


@pytest.mark.parametrize("qtype", ["Q4_0", "Q4_1", "Q5_0", "Q8_0", "Q2_K", "Q3_K", "Q4_K",
                                   "Q5_K", "Q6_K", "F16", "BF16"])
def test_random_tensors_decode_to_finite_small_values(qtype):
    import gguf

    dp = script()
    data, t = dp.random_tensor(gguf, "w", [256, 3], qtype, np.random.default_rng(0))
    x = gguf.quants.dequantize(data, t) if qtype not in ("F16",) else data.astype(np.float32)
    assert x.shape == (3, 256)
    assert np.isfinite(x).all() and 0 < float(np.abs(x).max()) <= 0.2


def test_index_tensors_hold_valid_ids():
    import gguf

    data, _ = script().random_tensor(gguf, "d2t", [300], "I64", np.random.default_rng(0), 100)
    assert data.dtype == np.int64 and data.min() == 0 and data.max() == 99


def test_unknown_tensor_types_are_refused():
    import gguf

    dp = script()
    with pytest.raises(dp.ProfileError, match=r"IQ2_XXS.*no block layout"):
        dp.random_tensor(gguf, "w", [256, 1], "IQ2_XXS", np.random.default_rng(0))


@pytest.mark.parametrize("width", [1, 2, 9, 17, 33, 64])
def test_the_verify_tree_is_a_best_first_tree_of_the_width(width):
    parents = script().block_tree(width, 8, 8)
    assert len(parents) == width and parents[0] == -1
    assert all(0 <= p < r for r, p in enumerate(parents) if r)
    depth = [0] * width
    for r in range(1, width):
        depth[r] = depth[parents[r]] + 1
    assert max(depth) <= 8


def test_the_fit_is_eq3_and_the_file_is_a_device_model(tmp_path):
    dp = script()
    rows = [{"context": c, "context_paper": c, "prompt": f"p{c}", "pass_index": p, "width": w,
             "round": r, "kept": r > 0, "verify_ms": 2.0 * w + 3.0 * c / 1000}
            for c in (500, 1500, 4000) for p in (0, 1) for w in (1, 4, 16) for r in range(3)]
    widths, alphas, betas, clamped = dp.fit_widths(rows)
    assert widths == [1, 4, 16] and not clamped
    assert np.allclose(alphas, [2, 8, 32], atol=1e-3) and np.allclose(betas, [3, 3, 3], atol=1e-3)
    path = tmp_path / "device.yaml"
    dp.write_device_yaml(path, "t", rows, 5.0, "test", {"summary": "here"}, "test rows")
    got = load_device(str(path))
    ref = device_from_survey(pd.DataFrame(rows), name="t", source="rows", draft_ms=5.0,
                             host_ms=0.0, timing_source="test")
    assert got.label == "measured" and got.verify.rows == ref.verify.rows
    # the profile writes Eq. (3)'s line per width, the survey stage its points: on a law that
    # is a line in context they price every surveyed width alike, inside and beyond the range
    for w in (1, 4, 16):
        for c in (100, 500, 1000, 4000, 6000):
            assert got.verify_s(w, c) == pytest.approx(ref.verify_s(w, c), rel=1e-4)
    assert got.draft_ms == 5.0


def test_the_source_tarball_is_small_patched_and_keyed_as_its_sdist(tarball):
    from adaspark import paths

    assert tarball.stat().st_size < 16 * 2**20
    with tarfile.open(tarball) as tar:
        names = tar.getnames()
        info = json.loads(tar.extractfile("adaspark-llama-src/SOURCE.json").read())
        qwen2 = tar.extractfile("adaspark-llama-src/llama.cpp/src/models/qwen2.cpp").read()
    top = {n.split("/")[2] for n in names if n.count("/") >= 2 and
           n.startswith("adaspark-llama-src/llama.cpp/")}
    assert "CMakeLists.txt" in top and "ggml" in top and not top & set(PRUNED_DIRS)
    assert any("/ggml/src/ggml-cuda/" in n for n in names)
    assert not any("/ggml/src/ggml-vulkan/" in n for n in names)
    assert "adaspark-llama-src/bindings/llama_cpp/llama_cpp.py" in names
    assert b"t_layer_inp" in qwen2 or b"layer_inp" in qwen2  # the patch is applied
    built = Path(paths.build_info()["lib_dir"]).parent.parent
    root = subprocess.run(["bash", str(REPO / "scripts" / "build_llama.sh"), str(tarball),
                           str(built.parent)], capture_output=True, text=True, timeout=120,
                          env=os.environ | {"ADASPARK_PRINT_ROOT": "1",
                                            "ADASPARK_BACKEND": "cpu"})
    assert root.stdout.strip() == str(built), root.stderr
    assert info["patches"].strip() == (built / "PATCHES").read_text().strip()


def run_profile(tarball: Path, target: Path, out: Path, drafters: list[Path],
                args: str) -> subprocess.CompletedProcess[str]:
    from adaspark import paths

    cache = Path(paths.build_info()["lib_dir"]).parents[3]
    env = os.environ | {"ADASPARK_BACKEND": "cpu", "ADASPARK_CACHE": str(cache),
                        "PROFILE_ARGS": args, "PATH": f"{Path(sys.executable).parent}:"
                                                      f"{os.environ['PATH']}"}
    return subprocess.run(["bash", str(REPO / "scripts" / "device_profile.sh"), str(tarball),
                           str(target), str(out), *map(str, drafters)],
                          capture_output=True, text=True, timeout=900, env=env)


def test_the_profile_script_dry_run_on_this_cpu(tarball, tmp_path):
    out = tmp_path / "profile"
    p = run_profile(tarball, TINY_SHAPE, out, [TINY_SHAPE],
                    "--widths 1,2,4 --contexts 64,160 --rounds 2 --dropped 1 --passes 2 "
                    "--name dry-run")
    assert p.returncode == 0, p.stderr[-3000:]
    assert json.loads((out / "build.json").read_text())["backend"] == "cpu"
    rows = [json.loads(x) for x in (out / "survey.jsonl").read_text().splitlines()]
    assert len(rows) == 2 * 2 * 3 * 2  # contexts x passes x widths x rounds
    assert [r["width"] for r in rows if r["context"] == 64 and r["round"] == 0] == [1, 2, 4, 4,
                                                                                   2, 1]
    dev = load_device(str(out / "device.yaml"))
    assert dev.name == "dry-run" and dev.label == "measured" and dev.verify.rows == [1, 2, 4]
    assert dev.draft_ms > 0 and "random" in (dev.description or "")
    meta = json.loads((out / "profile.json").read_text())
    assert meta["build"]["backend"] == "cpu" and meta["machine"]["cpus"] == os.cpu_count()
    assert meta["weights"].startswith("random")
    assert not list((out / "models").glob("*.gguf"))  # the random files are deleted


def test_the_dspark_drafter_is_timed_beside_the_embedded_target(tarball, tmp_path):
    out = tmp_path / "profile"
    target = SHAPES / "qwen2.5-coder-1.5b-instruct-q4_k_m.json"
    p = run_profile(tarball, target, out, [SHAPES / "dspark-embedded.json"],
                    "--widths 1,4 --contexts 48 --rounds 2 --dropped 1 --passes 1")
    assert p.returncode == 0, p.stderr[-3000:]
    drafted = [json.loads(x) for x in (out / "drafters.jsonl").read_text().splitlines()]
    assert {r["kind"] for r in drafted} == {"dspark"} and len(drafted) == 2
    assert all(r["positions"] == 4 and r["draft_ms"] > 0 for r in drafted)
    assert load_device(str(out / "device.yaml")).draft_ms > 0
