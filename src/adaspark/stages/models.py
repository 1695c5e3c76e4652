"""Stage ``models``: re-check, at the head of the pipeline, every model file the composed config
uses against the committed manifest (``data/models.json``), and record the checksums.

    python -m adaspark.stages.models [--params params.yaml] [--out runs/models.json]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from adaspark import model_files
from adaspark.io import write_json
from adaspark.stages import load_params, stage_main


def check_models(params: dict, out: Path) -> dict[str, dict]:
    """Check the target's and the drafter's files (manifest models by full sha256; a user's own
    file by existence, its hash recorded)."""
    record: dict[str, dict] = {}
    for role in ("target", "drafter"):
        cfg = params[role]
        if cfg.get("path"):
            p = Path(cfg["path"]).expanduser()
            if not p.is_file():
                raise model_files.ModelFileError(f"{role}.path {p} does not exist")
            record[role] = {"path": str(p), "bytes": p.stat().st_size,
                            "sha256": model_files.sha256_file(p), "manifest": None}
        else:
            key = cfg["model"]
            entry = model_files.load_manifest()[key]
            path = model_files.model_path(key)
            digest = model_files.check_file(entry, path)
            record[role] = {"path": str(path), "bytes": path.stat().st_size, "sha256": digest,
                            "manifest": key}
    write_json(out, record, indent=2, ensure_ascii=True)
    return record


@stage_main("models")
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--out", default="runs/models.json")
    a = ap.parse_args(argv)
    try:
        rec = check_models(load_params(a.params), Path(a.out))
    except (model_files.ModelFileError, KeyError, FileNotFoundError, ValueError) as e:
        print(f"models: {e}", file=sys.stderr)
        return 1
    for role, r in rec.items():
        print(f"models: {role} {Path(r['path']).name} sha256 {r['sha256'][:16]}... ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
