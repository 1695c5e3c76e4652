"""The ctypes bindings of llama.cpp's ``llama-ext.h`` calls (issue 13): found by source name in the
loaded ``libllama``'s dynamic symbol table, whatever the mangling, and refused with the fix when a
library lacks them."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import pytest

from adaspark.decoding import llama_ext


def test_source_names_of_each_mangling():
    assert llama_ext.source_name("_Z30llama_get_embeddings_layer_inpP13llama_contextj") == \
        "llama_get_embeddings_layer_inp"
    assert llama_ext.source_name("?llama_get_ctx_other@@YAPEAUllama_context@@PEAU1@@Z") == \
        "llama_get_ctx_other"
    assert llama_ext.source_name("llama_decode") == "llama_decode"
    assert llama_ext.source_name("_ZN5llama3fooEv") == ""  # nested: not a free function


def test_the_loaded_library_exports_every_call():
    import llama_cpp

    lib = Path(llama_cpp.llama_cpp._lib._name)
    syms = llama_ext.elf_dynamic_symbols(lib)
    assert "llama_decode" in syms  # a C symbol, read from .dynsym
    e = llama_ext.ext()
    assert set(e.symbols) == set(llama_ext._SIGNATURES)
    assert all(llama_ext.source_name(s) == n for n, s in e.symbols.items())
    nm = shutil.which("nm")
    if nm:  # the reader agrees with binutils
        out = subprocess.run([nm, "-D", "--defined-only", str(lib)], capture_output=True,
                             text=True, check=True).stdout
        listed = {line.split()[-1] for line in out.splitlines() if line.strip()}
        assert listed >= set(e.symbols.values())


def test_a_library_without_the_calls_is_refused_with_the_fix():
    import llama_cpp

    base = Path(llama_cpp.llama_cpp._lib._name).with_name("libggml-base.so")
    with pytest.raises(llama_ext.LlamaExtError, match=r"llama_get_embeddings_layer_inp.*"
                                                       r"scripts/setup\.sh"):
        llama_ext.bind(base, ctypes.CDLL(str(base)))


def test_a_file_that_is_not_elf_is_refused(tmp_path):
    f = tmp_path / "x.so"
    f.write_bytes(b"not a library")
    with pytest.raises(llama_ext.LlamaExtError, match="not an ELF"):
        llama_ext.elf_dynamic_symbols(f)
