"""What a device cost profile needs from this checkout (issue 16, "Device cost profiles"):
shape files of the models, and a pruned, patched llama.cpp source to build on the device.

``scripts/device_profile.sh`` runs on a machine that has no model files, no network and no
package index, with only what travels beside the working tree (64 MiB in all). It writes
random-weight GGUFs from *shape files*, which this module makes from real GGUFs: the
architecture, every metadata key but the tokenizer's, and each tensor's name, shape and ggml type
(a verify's time depends on these, not on the weights' values). ``data/devices/shapes/`` holds
the embedded target's, the draft model's and the DSpark drafter's.

The *source tarball* is the llama.cpp that ``scripts/setup.sh`` built here: the vendored source
of the llama-cpp-python sdist with ``scripts/llama-patches/`` applied, without what a library
build does not read (models' vocabularies, docs, tools, tests, examples, other GPU backends), plus
llama-cpp-python's own ctypes module (``llama_cpp.py``, matched to that ``llama.h``), which the
standalone script binds with. ``SOURCE.json`` inside it records the sdist's hash and the patches,
so ``scripts/build_llama.sh`` gives a build from it the same cache key as one from the sdist.

Commands: ``adaspark device-shape model=FILE|KEY out=FILE.json`` and ``adaspark device-source
out=FILE.tar.gz``.
"""

from __future__ import annotations

import json
import tarfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from adaspark import io
from adaspark.config import ConfigError

SHAPE_FORMAT = "adaspark-gguf-shape/1"
#: metadata arrays longer than this are left out of a shape file (only the tokenizer's are, for
#: the models we have; a longer array under another key is refused rather than dropped)
MAX_ARRAY = 4096
#: top-level directories of the vendored llama.cpp a library build does not read
PRUNED_DIRS = ("models", "docs", "media", "tests", "benches", "examples", "tools", "conversion",
               ".github", ".devops", "licenses", "grammars", "prompts", "pocs",
               "requirements")
#: ggml backends kept (the others' sources are left out: a build never enables them here)
KEPT_BACKENDS = ("ggml-cpu", "ggml-cuda", "ggml-metal", "ggml-blas")
#: llama-cpp-python's ctypes modules the standalone script imports
BINDINGS = ("llama_cpp.py", "_ctypes_extensions.py", "_ggml.py")


class ProfileInputError(ConfigError):
    """A model or build this module cannot describe; the message names the fix."""


def _value(field: Any, gguf: Any) -> tuple[str, Any, str | None]:
    """(value type, value, array element type) of a reader field, as names of GGUFValueType."""
    vt = gguf.GGUFValueType(field.types[0])
    sub = gguf.GGUFValueType(field.types[1]).name if vt == gguf.GGUFValueType.ARRAY else None
    value = field.contents()
    if hasattr(value, "tolist"):
        value = value.tolist()
    return vt.name, value, sub


def gguf_shape(path: Path, name: str | None = None) -> dict[str, Any]:
    """The shape file of the GGUF at ``path`` (see the module docstring)."""
    import gguf

    from adaspark.model_files import sha256_file

    try:
        reader = gguf.GGUFReader(str(path))
    except (OSError, ValueError) as e:
        raise ProfileInputError(f"{path} is not a GGUF file gguf can read: {e}") from None
    arch = str(reader.get_field(gguf.Keys.General.ARCHITECTURE).contents())
    meta = []
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key.startswith("tokenizer."):
            continue
        vtype, value, sub = _value(field, gguf)
        if sub is not None and len(value) > MAX_ARRAY:
            raise ProfileInputError(f"{path}: metadata {key} is an array of {len(value)} values, "
                                    f"over the {MAX_ARRAY} a shape file keeps outside the "
                                    "tokenizer; raise adaspark.replay.profile.MAX_ARRAY")
        meta.append({"key": key, "type": vtype, "value": value,
                     **({"sub_type": sub} if sub else {})})
    tensors = [{"name": t.name, "shape": [int(x) for x in t.shape],
                "type": gguf.GGMLQuantizationType(t.tensor_type).name} for t in reader.tensors]
    tokens = reader.get_field("tokenizer.ggml.tokens")
    n_vocab = len(tokens.data) if tokens is not None else None
    if n_vocab is None:
        emb = [t for t in tensors if t["name"] == "token_embd.weight"]
        n_vocab = emb[0]["shape"][1] if emb else None
    if n_vocab is None:
        raise ProfileInputError(f"{path} has neither tokenizer.ggml.tokens nor token_embd: its "
                                "vocabulary size is unknown")
    return {"format": SHAPE_FORMAT, "name": name or path.stem, "arch": arch,
            "n_vocab": int(n_vocab),
            "source": {"file": path.name, "sha256": sha256_file(path),
                       "bytes": path.stat().st_size},
            "metadata": meta, "tensors": tensors}


def write_shape(path: Path, out: Path, name: str | None = None) -> dict[str, Any]:
    shape = gguf_shape(path, name)
    io.write_json(out, shape)
    return shape


# ---------------------------------------------------------------------------------------------
# The source tarball


def build_root() -> Path:
    """The finished llama.cpp build this venv uses (``scripts/build_llama.sh``'s directory)."""
    from adaspark import paths

    info = paths.build_info()
    root = Path(info["lib_dir"]).parent.parent
    if not (root / "BUILD_OK").is_file():
        raise ProfileInputError(f"{root} is not a finished llama.cpp build: run "
                                "`bash scripts/setup.sh`")
    return root


def sdist_sha16(root: Path) -> str:
    """The first 16 hex digits of the sdist's sha256 that ``build_llama.sh`` keyed ``root`` by
    (its ``SDIST_SHA16`` file; for a build made before it wrote one, the venv's sdist)."""
    from adaspark import paths
    from adaspark.model_files import sha256_file

    f = root / "SDIST_SHA16"
    if f.is_file():
        return f.read_text().strip()
    sdist = Path(paths.build_info()["sdist"])
    if not sdist.is_file():
        raise ProfileInputError(f"the sdist {sdist} that built {root} is gone: rerun "
                                "`bash scripts/setup.sh`")
    return sha256_file(sdist)[:16]


def kept(rel: Path) -> bool:
    """Whether a path of the vendored llama.cpp goes into the source tarball."""
    parts = rel.parts
    if not parts or parts[0] in PRUNED_DIRS or parts[0].startswith(".git"):
        return False
    if len(parts) >= 3 and parts[:2] == ("ggml", "src") and parts[2].startswith("ggml-") \
            and (root := parts[2]) and "." not in root and root not in KEPT_BACKENDS:
        return False
    return True


def _members(src: Path) -> Iterable[Path]:
    for p in sorted(src.rglob("*")):
        if p.is_file() and kept(p.relative_to(src)):
            yield p


def pack_source(out: Path, root: Path | None = None) -> dict[str, Any]:
    """Write the source tarball of the build at ``root`` (this venv's by default) to ``out``;
    return its ``SOURCE.json``."""
    root = root or build_root()
    sdists = sorted(p for p in root.iterdir() if p.is_dir() and p.name.startswith("llama_cpp"))
    if len(sdists) != 1:
        raise ProfileInputError(f"{root} should hold one extracted sdist, not {len(sdists)}")
    sdist_dir = sdists[0]
    src = sdist_dir / "vendor" / "llama.cpp"
    info = {"format": "adaspark-llama-source/1", "sdist": sdist_dir.name,
            "cache_key": root.name.rsplit("-", 1)[-1], "sdist_sha16": sdist_sha16(root),
            "patches": (root / "PATCHES").read_text(),
            "llama_commit": (root / "LLAMA_COMMIT").read_text().strip()
            if (root / "LLAMA_COMMIT").is_file() else None,
            "pruned": list(PRUNED_DIRS), "backends_kept": list(KEPT_BACKENDS)}
    top = "adaspark-llama-src"
    with io.atomic_path(out) as tmp, tarfile.open(tmp, "w:gz", compresslevel=6) as tar:
        blob = json.dumps(info, indent=1).encode()
        _add_bytes(tar, f"{top}/SOURCE.json", blob)
        _add_bytes(tar, f"{top}/bindings/llama_cpp/__init__.py",
                   b"# llama-cpp-python's ctypes modules only (adaspark device-source)\n")
        for name in BINDINGS:
            tar.add(sdist_dir / "llama_cpp" / name, f"{top}/bindings/llama_cpp/{name}")
        for p in _members(src):
            tar.add(p, f"{top}/llama.cpp/{p.relative_to(src).as_posix()}")
    return info


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    import io as _io

    ti = tarfile.TarInfo(name)
    ti.size = len(data)
    ti.mode = 0o644
    tar.addfile(ti, _io.BytesIO(data))


# ---------------------------------------------------------------------------------------------
# Commands


def _kv(args: list[str], allowed: tuple[str, ...], command: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for a in args:
        k, eq, v = a.partition("=")
        if not eq or k not in allowed:
            raise ConfigError(f"{command} takes {', '.join(k + '=' for k in allowed)}; got {a!r}")
        out[k] = v
    return out


def model_path(model: str) -> Path:
    """A manifest key of ``data/models.json`` (checked) or a GGUF file's path."""
    from adaspark import model_files

    p = Path(model).expanduser()
    if p.is_file():
        return p
    entries = model_files.load_manifest()
    if model not in entries:
        raise ProfileInputError(f"model={model}: neither a file nor a manifest key "
                                f"({', '.join(sorted(entries))})")
    return model_files.verified_path(model)


def cli_shape(args: list[str]) -> int:
    """``adaspark device-shape model=KEY|FILE out=FILE.json [name=NAME]``."""
    kv = _kv(args, ("model", "out", "name"), "device-shape")
    if "model" not in kv or "out" not in kv:
        raise ConfigError("device-shape needs model=KEY|FILE (a manifest key or a GGUF) and "
                          "out=FILE.json")
    path = model_path(kv["model"])
    name = kv.get("name") or (path.stem if Path(kv["model"]).expanduser().is_file()
                              else kv["model"])
    shape = write_shape(path, Path(kv["out"]), name)
    print(f"device-shape: {shape['arch']}, {len(shape['tensors'])} tensors, vocabulary "
          f"{shape['n_vocab']:,} -> {kv['out']}")
    return 0


def cli_source(args: list[str]) -> int:
    """``adaspark device-source out=FILE.tar.gz``."""
    kv = _kv(args, ("out",), "device-source")
    if "out" not in kv:
        raise ConfigError("device-source needs out=FILE.tar.gz")
    out = Path(kv["out"])
    info = pack_source(out)
    print(f"device-source: {info['sdist']} (patches: "
          f"{len(info['patches'].strip().splitlines())}) -> {out} "
          f"({out.stat().st_size / 2**20:.1f} MiB)")
    return 0
