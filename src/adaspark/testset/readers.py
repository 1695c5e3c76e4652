"""Where a source's rows come from: the dataset hub at a pinned revision, or a local mirror.

Both paths give the same thing, an iterator of row dicts in the dataset's own order, and every
source module hands those rows to one ``build`` function: the rule never knows which path read
them. The hub path goes through the ``datasets`` library (streamed, so a large split such as
WildChat's is read only as far as the rule needs) at the revision the published set records. A
mirror is a directory holding the dataset repository's files in their real layout (what
``huggingface-cli download --repo-type dataset REPO --revision REV --local-dir DIR`` writes).
"""

from __future__ import annotations

import json
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class SourceUnavailable(RuntimeError):
    """A source could not be read (hub unreachable, mirror missing or incomplete)."""


@dataclass(frozen=True)
class HubSource:
    """A Hugging Face dataset at a pinned revision, and its files' layout in a mirror."""

    repo: str
    config: str | None
    split: str
    revision: str
    #: glob patterns, relative to the mirror root, of the split's files in the repository
    mirror_patterns: tuple[str, ...]

    def provenance(self, builder: str, params: dict[str, Any], **counts: Any) -> dict[str, Any]:
        """A built set file's provenance: this source at its revision, what the build counted
        (``counts``), the building module and the rule's parameters."""
        return {"source": self.repo, "config": self.config, "split": self.split,
                "revision": self.revision, **counts, "builder": builder, "params": params}

    def download_hint(self, root: Path) -> str:
        return (
            f"huggingface-cli download --repo-type dataset {self.repo} "
            f"--revision {self.revision} --local-dir {root}"
        )


def mirror_files(root: Path, src: HubSource) -> list[Path]:
    """The split's files under ``root``, sorted by name (shards in order)."""
    if not root.is_dir():
        raise SourceUnavailable(
            f"mirror directory {root} for {src.repo} does not exist; create it with "
            f"`{src.download_hint(root)}` or drop the mirror option to use the hub"
        )
    for pattern in src.mirror_patterns:
        found = sorted(p for p in root.glob(pattern) if p.is_file())
        if found:
            return found
    raise SourceUnavailable(
        f"mirror {root} holds no file matching {list(src.mirror_patterns)} for {src.repo} "
        f"split {src.split!r}; it must have the repository's layout: "
        f"`{src.download_hint(root)}`"
    )


def read_parquet_rows(paths: Sequence[Path]) -> Iterator[dict[str, Any]]:
    import pyarrow.parquet as pq

    for path in paths:
        pf = pq.ParquetFile(path)
        for batch in pf.iter_batches():
            yield from batch.to_pylist()


def read_json_rows(paths: Sequence[Path]) -> Iterator[dict[str, Any]]:
    """Rows of ``.json`` files holding one array, or ``.jsonl`` files with one row a line."""
    for path in paths:
        text = path.read_text(encoding="utf-8")
        if path.suffix == ".jsonl":
            for line in text.splitlines():
                if line.strip():
                    yield json.loads(line)
            continue
        data = json.loads(text)
        if not isinstance(data, list):
            raise SourceUnavailable(f"{path} does not hold a JSON array of rows")
        yield from data


def read_rows(paths: Sequence[Path]) -> Iterator[dict[str, Any]]:
    """Rows of the mirror files, by their suffix (parquet, json or jsonl)."""
    for path in paths:
        if path.suffix == ".parquet":
            yield from read_parquet_rows([path])
        elif path.suffix in (".json", ".jsonl"):
            yield from read_json_rows([path])
        else:
            raise SourceUnavailable(f"{path}: unknown row file type {path.suffix!r}")


def mirror_rows(root: Path, src: HubSource) -> Iterator[dict[str, Any]]:
    return read_rows(mirror_files(root, src))


def hub_rows(src: HubSource) -> Iterator[dict[str, Any]]:
    """The split's rows from the hub at ``src.revision``, streamed through ``datasets``."""
    try:
        import datasets
    except ImportError as e:  # pragma: no cover - a dependency of the project
        raise SourceUnavailable(f"the `datasets` library is not installed ({e})") from e
    try:
        ds = datasets.load_dataset(
            src.repo, src.config, split=src.split, revision=src.revision, streaming=True
        )
    except Exception as e:
        raise SourceUnavailable(
            f"{src.repo}@{src.revision[:12]} could not be loaded from the hub "
            f"({type(e).__name__}: {str(e)[:200]})"
        ) from e
    return iter(ds)


def hub_reachable(repo: str, revision: str, timeout_s: float = 10.0) -> str | None:
    """None when the hub answers for ``repo`` at ``revision``; otherwise why not, in one line.

    Honours ``HF_HUB_OFFLINE`` and ``HF_ENDPOINT`` through ``huggingface_hub``.
    """
    try:
        from huggingface_hub import HfApi
        from huggingface_hub import constants as hf_constants
    except ImportError as e:  # pragma: no cover - a dependency of `datasets`
        return f"huggingface_hub is not installed ({e})"
    if getattr(hf_constants, "HF_HUB_OFFLINE", False):
        return "HF_HUB_OFFLINE is set"
    try:
        HfApi().dataset_info(repo, revision=revision, timeout=timeout_s)
    except Exception as e:
        first = (str(e).strip().splitlines() or [""])[0][:160]
        return f"{type(e).__name__}: {first}"
    return None


def zip_or_dir_member(root: Path, member: str) -> str | None:
    """Text of ``member`` from ``root/member`` or, failing that, from ``root/data.zip``."""
    path = root / member
    if path.is_file():
        return path.read_text(encoding="utf-8")
    archive = root / "data.zip"
    if archive.is_file():
        with zipfile.ZipFile(archive) as z:
            if member in z.namelist():
                return z.read(member).decode("utf-8")
    return None
