"""The fast GGUF metadata reader (drafter files are checked against their target at every load)
reads what the ``gguf`` package's own reader reads, on the real tiny model, and refuses files
that are not GGUF."""

from __future__ import annotations

import numpy as np
import pytest

from adaspark.decoding.drafter.gguf_meta import GGUFFormatError, read_meta


def test_same_fields_and_tensors_as_the_gguf_package(tiny_path):
    import gguf

    meta = read_meta(tiny_path)
    ref = gguf.GGUFReader(tiny_path)
    names = [f.name for f in ref.fields.values() if not f.name.startswith("GGUF.")]
    assert list(meta.fields) == names
    for f in ref.fields.values():
        if f.name.startswith("GGUF."):
            continue
        mine = meta.fields[f.name]
        assert mine.vtype == f.types[0], f.name
        want = f.contents()
        if isinstance(want, float):
            assert mine.value == pytest.approx(want), f.name
        else:
            assert mine.value == want, f.name
    assert len(meta.get("tokenizer.ggml.tokens")) == 49152
    assert list(meta.tensors) == [t.name for t in ref.tensors]
    for t in ref.tensors:
        info = meta.tensors[t.name]
        assert info.ne == tuple(int(x) for x in t.shape) and info.offset == t.data_offset
        assert info.ggml_type == int(t.tensor_type)
    for t in ref.tensors[:12]:  # Q8_0, F32 and Q4_1 tensors
        want = gguf.quants.dequantize(t.data, t.tensor_type)
        assert np.array_equal(meta.tensor(t.name), want.reshape(meta.tensor(t.name).shape))


def test_refuses_what_is_not_gguf(tmp_path, tiny_path):
    p = tmp_path / "x.gguf"
    p.write_bytes(b"not a gguf file at all")
    with pytest.raises(GGUFFormatError, match="no GGUF magic"):
        read_meta(p)
    head = tmp_path / "head.gguf"
    with open(tiny_path, "rb") as f:
        head.write_bytes(f.read(4096))  # cut inside the tokenizer's strings
    with pytest.raises(GGUFFormatError, match="truncated"):
        read_meta(head)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        read_meta(tmp_path / "missing.gguf")
