"""The llama.cpp build in use carries exactly the patches in ``scripts/llama-patches/`` (issue 13:
the qwen2 graph records its layer inputs), and each of them is applied in the vendored source it
was built from."""

from __future__ import annotations

import hashlib
from pathlib import Path

from adaspark import paths, provenance

PATCHES = Path(__file__).resolve().parents[1] / "scripts" / "llama-patches"


def _patch_sums() -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(PATCHES.glob("*.patch"))}


def _added_lines(patch: Path) -> list[str]:
    return [line[1:] for line in patch.read_text().splitlines()
            if line.startswith("+") and not line.startswith("+++") and line[1:].strip()]


def test_the_build_records_the_patches_of_this_checkout():
    assert _patch_sums(), "scripts/llama-patches/ holds no patch"
    recorded = provenance.llama_build()["llama_patches"]
    assert recorded == _patch_sums(), (
        "the llama.cpp build in use was made with other patches than scripts/llama-patches/ "
        "holds: rerun `bash scripts/setup.sh` (the patches are part of the build's cache key)")


def test_every_patch_is_in_the_vendored_source_of_the_build():
    info = paths.build_info()
    src = Path(info["lib_dir"]).parents[1] / Path(info["sdist"]).name.removesuffix(".tar.gz")
    src = src / "vendor" / "llama.cpp"
    for patch in sorted(PATCHES.glob("*.patch")):
        target = next(line[len("+++ b/"):].split("\t")[0] for line in patch.read_text().splitlines()
                      if line.startswith("+++ b/"))
        text = (src / target).read_text()
        for added in _added_lines(patch):
            assert added in text, f"{patch.name}: {target} lacks {added.strip()!r}"
