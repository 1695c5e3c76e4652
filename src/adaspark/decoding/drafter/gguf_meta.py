"""A fast reader of a GGUF's metadata and tensor table (the GGUF v2/v3 layout of llama.cpp's
``ggml/include/gguf.h`` and the ``gguf`` package's constants).

The ``gguf`` package's reader builds a numpy view per array element, so a tokenizer's hundred
thousand strings take seconds on this CPU; a drafter file is checked against its target at every
load (§2.1's drafter reads the target's hidden states, so the two must fit), so this reader walks
the header with ``struct`` over a memory map instead and reads arrays of numbers in one call.
Values come back with their GGUF types, so a writer can copy them (``GGUFWriter.add_key_value``).
"""

from __future__ import annotations

import functools
import mmap
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

MAGIC = b"GGUF"
STRING, ARRAY = 8, 9
#: Scalar GGUF value types: struct format and numpy dtype.
SCALARS: dict[int, tuple[str, str]] = {
    0: ("B", "u1"), 1: ("b", "i1"), 2: ("H", "<u2"), 3: ("h", "<i2"), 4: ("I", "<u4"),
    5: ("i", "<i4"), 6: ("f", "<f4"), 7: ("?", "?"), 10: ("Q", "<u8"), 11: ("q", "<i8"),
    12: ("d", "<f8"),
}


class GGUFFormatError(ValueError):
    """Not a GGUF file this reader understands."""


@dataclass(frozen=True)
class Field:
    value: Any  # a Python scalar, str, or list (arrays)
    vtype: int  # the GGUF value type
    sub_type: int | None = None  # the element type of an array


@dataclass(frozen=True)
class TensorInfo:
    name: str
    ne: tuple[int, ...]  # ggml's dimensions (fastest first)
    ggml_type: int
    offset: int  # absolute offset of the data in the file


@dataclass(frozen=True)
class GGUFMeta:
    path: Path
    fields: dict[str, Field]
    tensors: dict[str, TensorInfo]

    def get(self, key: str, default: Any = None) -> Any:
        f = self.fields.get(key)
        return default if f is None else f.value

    def tensor(self, name: str) -> np.ndarray:
        """A tensor as float32 (or int64 for I64), numpy shape = ``ne`` reversed; quantized
        types are dequantized with the ``gguf`` package."""
        import gguf

        t = self.tensors[name]
        qt = gguf.GGMLQuantizationType(t.ggml_type)
        block, size = gguf.GGML_QUANT_SIZES[qt]
        n = int(np.prod(t.ne))
        with open(self.path, "rb") as fh:
            fh.seek(t.offset)
            raw = np.frombuffer(fh.read(n // block * size), dtype=np.uint8)
        shape = tuple(reversed(t.ne))
        if qt == gguf.GGMLQuantizationType.I64:
            return raw.view("<i8").reshape(shape)
        return np.asarray(gguf.quants.dequantize(raw, qt), dtype=np.float32).reshape(shape)


class _Cursor:
    def __init__(self, buf: Any) -> None:
        self.buf, self.pos = buf, 0

    def unpack(self, fmt: str) -> Any:
        v = struct.unpack_from("<" + fmt, self.buf, self.pos)[0]
        self.pos += struct.calcsize("<" + fmt)
        return v

    def string(self) -> str:
        n = self.unpack("Q")
        s = bytes(self.buf[self.pos:self.pos + n]).decode("utf-8", errors="surrogateescape")
        self.pos += n
        return s

    def value(self, vtype: int) -> Any:
        if vtype == STRING:
            return self.string()
        if vtype in SCALARS:
            return self.unpack(SCALARS[vtype][0])
        raise GGUFFormatError(f"unknown GGUF value type {vtype}")

    def array(self) -> tuple[list[Any], int]:
        sub, n = self.unpack("I"), self.unpack("Q")
        if sub == STRING:
            return [self.string() for _ in range(n)], sub
        if sub in SCALARS:
            dt = np.dtype(SCALARS[sub][1])
            a = np.frombuffer(self.buf, dtype=dt, count=n, offset=self.pos)
            self.pos += n * dt.itemsize
            return a.tolist(), sub
        if sub == ARRAY:
            return [self.array()[0] for _ in range(n)], sub
        raise GGUFFormatError(f"unknown GGUF array element type {sub}")


def _read(path: Path) -> GGUFMeta:
    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        c = _Cursor(memoryview(mm))
        try:
            if bytes(c.buf[:4]) != MAGIC:
                raise GGUFFormatError(f"{path} is not a GGUF file (no GGUF magic)")
            c.pos = 4
            version = c.unpack("I")
            if version < 2:
                raise GGUFFormatError(f"{path}: GGUF version {version} is not supported")
            n_tensors, n_kv = c.unpack("Q"), c.unpack("Q")
            fields: dict[str, Field] = {}
            for _ in range(n_kv):
                key, vtype = c.string(), c.unpack("I")
                if vtype == ARRAY:
                    value, sub = c.array()
                    fields[key] = Field(value, vtype, sub)
                else:
                    fields[key] = Field(c.value(vtype), vtype)
            infos = []
            for _ in range(n_tensors):
                name, nd = c.string(), c.unpack("I")
                ne = tuple(c.unpack("Q") for _ in range(nd))
                infos.append((name, ne, c.unpack("I"), c.unpack("Q")))
            align = int(fields["general.alignment"].value) if "general.alignment" in fields \
                else 32
            start = (c.pos + align - 1) // align * align
        except (struct.error, IndexError, UnicodeDecodeError) as e:
            raise GGUFFormatError(f"{path} is truncated or not a GGUF file ({e})") from e
        finally:
            c.buf.release()
    tensors = {n: TensorInfo(n, ne, t, start + off) for n, ne, t, off in infos}
    return GGUFMeta(path, fields, tensors)


@functools.lru_cache(maxsize=16)
def _cached(path: str, identity: tuple[int, int, int]) -> GGUFMeta:
    return _read(Path(path))


def read_meta(path: str | Path) -> GGUFMeta:
    """The metadata and tensor table of ``path`` (kept per version of the file: inode, size,
    mtime)."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{p} does not exist: point at a GGUF file")
    st = p.stat()
    return _cached(str(p.resolve()), (st.st_ino, st.st_size, st.st_mtime_ns))
