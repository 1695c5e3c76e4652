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
