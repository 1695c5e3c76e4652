"""The model manifest: files are checked against size and sha256, with clear errors."""

from __future__ import annotations

import hashlib

import pytest

from adaspark import model_files
from adaspark.model_files import ModelEntry, ModelFileError, check_file


def _entry(data: bytes, **kw) -> ModelEntry:
    base = dict(key="demo", file="demo.gguf", bytes=len(data),
                sha256=hashlib.sha256(data).hexdigest(), source={"kind": "member"})
    base.update(kw)
    return ModelEntry(**base)


def test_matching_file_passes(tmp_path):
    f = tmp_path / "demo.gguf"
    f.write_bytes(b"GGUF" + bytes(100))
    assert check_file(_entry(f.read_bytes()), f) == hashlib.sha256(f.read_bytes()).hexdigest()


def test_hash_that_moved_is_named(tmp_path):
    f = tmp_path / "demo.gguf"
    f.write_bytes(b"GGUF" + bytes(100))
    entry = _entry(f.read_bytes())
    f.write_bytes(b"GGUF" + bytes(99) + b"\x01")
    with pytest.raises(ModelFileError, match="the hash moved"):
        check_file(entry, f)


def test_wrong_size_and_missing_file(tmp_path):
    f = tmp_path / "demo.gguf"
    f.write_bytes(b"GGUF")
    with pytest.raises(ModelFileError, match="has 4 bytes"):
        check_file(_entry(b"GGUF" + bytes(3)), f)
    with pytest.raises(ModelFileError, match="adaspark models"):
        check_file(_entry(b""), tmp_path / "absent.gguf")


def test_unknown_manifest_key():
    with pytest.raises(ModelFileError, match="unknown model"):
        model_files.model_path("no-such-model")


def test_embedded_files_match_manifest():
    """The setup command assembled every manifest file; each matches its committed hash."""
    checked = model_files.check_all()
    assert set(checked) == set(model_files.load_manifest())


def test_truncated_copy_keeps_first_blocks(tmp_path, tiny_path):
    import gguf

    out = tmp_path / "cut.gguf"
    model_files.truncate_gguf(tiny_path, out, 5)
    r = gguf.GGUFReader(out)
    assert r.get_field("llama.block_count").contents() == 5
    blocks = {int(t.name.split(".")[1]) for t in r.tensors if t.name.startswith("blk.")}
    assert blocks == set(range(5))
    with pytest.raises(ModelFileError, match="cannot keep 31"):
        model_files.truncate_gguf(tiny_path, tmp_path / "x.gguf", 31)


@pytest.fixture
def own_cache(tmp_path, monkeypatch, tiny_path):
    """A cache directory of this test's own holding a copy of the tiny model."""
    import shutil

    models = tmp_path / "cache" / "models"
    models.mkdir(parents=True)
    shutil.copyfile(tiny_path, models / tiny_path.name)
    monkeypatch.setenv("ADASPARK_CACHE", str(tmp_path / "cache"))
    return models


def _corrupt_keeping_mtime(path) -> None:
    import os

    st = path.stat()
    with path.open("r+b") as f:
        f.seek(st.st_size // 2)
        b = f.read(1)
        f.seek(st.st_size // 2)
        f.write(bytes([b[0] ^ 0xFF]))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_mtime_ns == st.st_mtime_ns and path.stat().st_size == st.st_size


def test_a_file_corrupted_with_its_mtime_kept_is_refused(own_cache):
    from helpers import TINY

    path, digest = model_files.verified(TINY)
    assert digest == model_files.sha256_file(path)  # the hash recorded is the one computed
    assert (path.parent / (path.name + ".verified")).is_file()
    _corrupt_keeping_mtime(path)
    model_files._HASHED.clear()  # as a new process would start
    with pytest.raises(ModelFileError) as e:
        model_files.verified(TINY)
    msg = str(e.value)
    assert str(path) in msg and "adaspark models" in msg
    assert model_files.sha256_file(path) in msg
    assert model_files.load_manifest()[TINY].sha256 in msg


def test_the_command_line_refuses_a_corrupted_model(own_cache):
    from helpers import TINY, run_cli

    path = model_files.verified_path(TINY)
    _corrupt_keeping_mtime(path)
    p = run_cli("generate", "arm=ar", "target=tiny", "prompt=Hi", "max_tokens=2")
    assert p.returncode != 0
    assert "the hash moved" in p.stderr and "adaspark models" in p.stderr
    assert "Traceback" not in p.stderr


def test_adaspark_models_restores_a_corrupted_derived_file(own_cache):
    from helpers import TINY_CUT

    path = model_files.assemble(TINY_CUT, log=lambda m: None)
    _corrupt_keeping_mtime(path)
    with pytest.raises(ModelFileError):
        model_files.verified(TINY_CUT)
    logged: list[str] = []
    model_files.assemble(TINY_CUT, log=logged.append)
    assert any("assembling" in m and "again" in m for m in logged)
    _, digest = model_files.verified(TINY_CUT)
    assert digest == model_files.load_manifest()[TINY_CUT].sha256


def test_the_projects_own_dspark_drafter_is_committed_and_recorded():
    """The drafter trained here (issue 15): a manifest entry marked as this project's own, a
    file name containing dspark, the committed copy in the checkout at most 24 MB with the
    recorded hash, the target it was trained for, and the run that made it."""
    import json

    from adaspark import paths

    raw = json.loads(model_files.manifest_path().read_text())
    own = {k: v for k, v in raw.items() if isinstance(v, dict) and v.get("own_drafter")}
    assert list(own) == ["dspark-embedded"]
    e = own["dspark-embedded"]
    assert "dspark" in e["file"] and e["source"]["kind"] == "checkout"
    committed = paths.checkout_root() / e["source"]["path"]
    assert committed.is_file() and committed.stat().st_size == e["bytes"] <= 24 * 10**6
    assert model_files.sha256_file(committed) == e["sha256"]
    assert e["for_target"] in raw and e["provenance"]["target_sha256"] == raw[
        e["for_target"]]["sha256"]
    assert {"data", "train", "heldout"} <= set(e["provenance"])


def test_adaspark_models_copies_the_committed_drafter_into_the_cache(own_cache):
    path = model_files.assemble("dspark-embedded", log=lambda *_: None)
    assert path.parent == own_cache and model_files.check_file(
        model_files.load_manifest()["dspark-embedded"], path)
