"""ctypes bindings for the C++ calls of llama.cpp's ``src/llama-ext.h`` that a DSpark drafter needs
(§2.1: the drafter reads hidden states captured from selected layers of the target) and that
llama-cpp-python 0.3.36 does not bind.

``llama-ext.h`` declares its calls outside ``extern "C"``, so ``libllama.so`` exports them under
C++-mangled names, whose spelling depends on the compiler's ABI. They are found at load time: the
library that ``llama_cpp`` loaded (the project's own build) is read as an ELF file, its dynamic
symbol table (``.dynsym``) listed, and each defined symbol's *source name* read back from its
mangling (Itanium ``_Z<len><name>...``, MSVC ``?name@@...``, or a plain C name); a call is the
symbol whose source name is the one asked for. Nothing here hard-codes one compiler's spelling.

The calls (facts of ``src/llama-ext.h`` and ``src/llama-context.cpp``):

* ``llama_set_embeddings_layer_inp(ctx, lid, on)``: capture the input of the target's block
  ``lid`` on every later decode (the ``llama`` graph records inputs for ``0 <= lid < n_layer``);
  ``llama_get_embeddings_layer_inp(ctx, lid)`` gives ``n_embd`` floats per *batch row* of the
  last decode, in batch order.
* ``llama_set_embeddings_nextn(ctx, on, masked)`` and ``llama_get_embeddings_nextn(ctx)``: the
  dflash graph's per-row extra output (a DSpark file's confidence head, broadcast over
  ``n_embd`` floats per output row).
* ``llama_get_ctx_other(ctx)``: the context a drafter borrows embeddings and output head from.
"""

from __future__ import annotations

import ctypes
import re
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

SETUP_HINT = ("rebuild the project's llama.cpp with scripts/setup.sh (it builds the vendored "
              "source, which exports the calls of src/llama-ext.h)")


class LlamaExtError(RuntimeError):
    """A call of ``llama-ext.h`` is missing from the loaded ``libllama``; the message names it and
    the fix."""


# ---------------------------------------------------------------------------------------------
# The library's dynamic symbol table


def elf_dynamic_symbols(path: str | Path) -> list[str]:
    """Names of the symbols an ELF shared library defines in its ``.dynsym`` (a small reader of
    the ELF format: 32/64-bit, either byte order)."""
    data = Path(path).read_bytes()
    if data[:4] != b"\x7fELF":
        raise LlamaExtError(f"{path} is not an ELF shared library: {SETUP_HINT}")
    is64, end = data[4] == 2, "<" if data[5] == 1 else ">"
    if is64:
        shoff, = struct.unpack_from(end + "Q", data, 0x28)
        shentsize, shnum = struct.unpack_from(end + "HH", data, 0x3A)
    else:
        shoff, = struct.unpack_from(end + "I", data, 0x20)
        shentsize, shnum = struct.unpack_from(end + "HH", data, 0x2E)
    sections = []
    for i in range(shnum):
        o = shoff + i * shentsize
        if is64:
            _, sh_type, _, _, off, size, link, _, _, entsize = struct.unpack_from(
                end + "IIQQQQIIQQ", data, o)
        else:
            _, sh_type, _, _, off, size, link, _, _, entsize = struct.unpack_from(
                end + "IIIIIIIIII", data, o)
        sections.append((sh_type, off, size, link, entsize))
    names: list[str] = []
    for sh_type, off, size, link, entsize in sections:
        if sh_type != 11:  # SHT_DYNSYM
            continue
        _, str_off, str_size, _, _ = sections[link]
        strtab = data[str_off:str_off + str_size]
        fmt = end + ("IBBHQQ" if is64 else "IIIBBH")
        for k in range(size // entsize):
            fields = struct.unpack_from(fmt, data, off + k * entsize)
            st_name, shndx = (fields[0], fields[3]) if is64 else (fields[0], fields[5])
            if shndx == 0 or st_name == 0:  # undefined (imported) or unnamed
                continue
            stop = strtab.index(b"\0", st_name)
            names.append(strtab[st_name:stop].decode("ascii", "replace"))
    return names


_ITANIUM = re.compile(r"_Z(\d+)")


def source_name(symbol: str) -> str:
    """The function name a symbol was mangled from: ``_Z30llama_get_embeddings_layer_inpP...``
    (Itanium) and ``?llama_get_embeddings_layer_inp@@YA...`` (MSVC) both give
    ``llama_get_embeddings_layer_inp``; a C symbol is its own name; a nested (``_ZN``) name or
    an unreadable one gives ``""``."""
    m = _ITANIUM.match(symbol)
    if m:
        n = int(m.group(1))
        return symbol[m.end():m.end() + n]
    if symbol.startswith("?"):
        return symbol[1:].split("@", 1)[0]
    return "" if symbol.startswith("_Z") else symbol


def find_symbols(symbols: Iterable[str], wanted: Iterable[str]) -> dict[str, str]:
    """For each wanted function name, the exported symbol mangled from it (first found)."""
    want = set(wanted)
    out: dict[str, str] = {}
    for s in symbols:
        name = source_name(s)
        if name in want and name not in out:
            out[name] = s
    return out


# ---------------------------------------------------------------------------------------------
# The bound calls

#: name -> (argtypes, restype), as declared in ``src/llama-ext.h``.
_SIGNATURES: dict[str, tuple[list[Any], Any]] = {
    "llama_set_embeddings_layer_inp": ([ctypes.c_void_p, ctypes.c_uint32, ctypes.c_bool], None),
    "llama_get_embeddings_layer_inp": ([ctypes.c_void_p, ctypes.c_uint32],
                                       ctypes.POINTER(ctypes.c_float)),
    "llama_set_embeddings_nextn": ([ctypes.c_void_p, ctypes.c_bool, ctypes.c_bool], None),
    "llama_get_embeddings_nextn": ([ctypes.c_void_p], ctypes.POINTER(ctypes.c_float)),
    "llama_get_ctx_other": ([ctypes.c_void_p], ctypes.c_void_p),
}


@dataclass(frozen=True)
class LlamaExt:
    """The bound calls of :data:`_SIGNATURES`, by name, and the library they came from."""

    library: Path
    symbols: dict[str, str]
    calls: dict[str, Any]

    def set_embeddings_layer_inp(self, ctx: Any, lid: int, on: bool) -> None:
        self.calls["llama_set_embeddings_layer_inp"](ctx, lid, on)

    def get_embeddings_layer_inp(self, ctx: Any, lid: int) -> Any:
        ptr = self.calls["llama_get_embeddings_layer_inp"](ctx, lid)
        if not ptr:
            raise LlamaExtError(f"llama.cpp captured no input of target layer {lid}: turn its "
                                "capture on before the decode")
        return ptr

    def set_embeddings_nextn(self, ctx: Any, on: bool, masked: bool) -> None:
        self.calls["llama_set_embeddings_nextn"](ctx, on, masked)

    def get_embeddings_nextn(self, ctx: Any) -> Any:
        return self.calls["llama_get_embeddings_nextn"](ctx)

    def get_ctx_other(self, ctx: Any) -> int | None:
        return self.calls["llama_get_ctx_other"](ctx)


def bind(library: str | Path, handle: Any) -> LlamaExt:
    """Bind the calls of :data:`_SIGNATURES` from ``library`` (loaded as ``handle``); refuse,
    naming every missing call and the fix, a library that lacks one."""
    library = Path(library)
    found = find_symbols(elf_dynamic_symbols(library), _SIGNATURES)
    missing = sorted(set(_SIGNATURES) - set(found))
    if missing:
        raise LlamaExtError(
            f"{library} does not export {', '.join(missing)} (declared in llama.cpp's "
            f"src/llama-ext.h): a DSpark drafter needs them; {SETUP_HINT}")
    calls = {}
    for name, sym in found.items():
        fn = getattr(handle, sym)
        fn.argtypes, fn.restype = _SIGNATURES[name]
        calls[name] = fn
    return LlamaExt(library, found, calls)


@cache
def ext() -> LlamaExt:
    """The calls, bound once per process against the ``libllama`` that ``llama_cpp`` loaded."""
    import llama_cpp

    lib = llama_cpp.llama_cpp._lib
    return bind(lib._name, lib)
