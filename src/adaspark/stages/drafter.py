"""Stages ``drafter-data``, ``drafter-train`` and ``drafter-export`` (issue 15): a DSpark drafter
for the embedded target, trained on this machine. They live in their own pipeline,
``train/dvc.yaml`` (``dvc repro train/dvc.yaml``), never in the default or smoke pipelines::

    python -m adaspark.stages.drafter data   --params train/params.yaml --out runs/drafter/data
    python -m adaspark.stages.drafter train  --params train/params.yaml \\
        --data runs/drafter/data --out runs/drafter/train
    python -m adaspark.stages.drafter export --params train/params.yaml \\
        --train runs/drafter/train --out runs/drafter/export
    python -m adaspark.stages.drafter install --export runs/drafter/export

``KEY=VALUE`` arguments override ``train/params.yaml`` (``drafter_train.steps=20``).
``install`` copies the exported file into ``data/drafters/`` and records its sha256 and
provenance in ``data/models.json`` (the copy a fresh clone uses: DVC's outputs are not it).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from adaspark.stages import stage_main

SECTIONS = ("target", "drafter_data", "drafter_train", "drafter_export")


def read_train_params(path: Path, overrides: list[str]) -> dict[str, Any]:
    """``train/params.yaml`` with ``KEY=VALUE`` overrides; every section must be there."""
    from omegaconf import OmegaConf

    from adaspark.config import ConfigError

    if not path.is_file():
        raise ConfigError(f"{path} does not exist: the drafter pipeline reads its settings from "
                          "train/params.yaml (pass --params FILE)")
    cfg = OmegaConf.merge(OmegaConf.load(path), OmegaConf.from_dotlist(overrides))
    out = OmegaConf.to_container(cfg, resolve=True)
    assert isinstance(out, dict)
    missing = [s for s in SECTIONS if s not in out]
    if missing:
        raise ConfigError(f"{path} lacks the section(s) {missing}: see train/params.yaml in the "
                          "checkout for their keys")
    return out


def _typed(cls: type, section: str, raw: dict[str, Any]) -> Any:
    import dataclasses

    from adaspark.config import ConfigError

    names = {f.name for f in dataclasses.fields(cls)}
    got = raw.get(section) or {}
    unknown, missing = sorted(set(got) - names), sorted(names - set(got))
    if unknown or missing:
        raise ConfigError(f"{section}: unknown key(s) {unknown}, missing key(s) {missing}; "
                          f"the keys are {sorted(names)}")
    vals = {k: (tuple(v) if isinstance(v, list) else v) for k, v in got.items()}
    return cls(**vals)


def target_file(raw: dict[str, Any]) -> tuple[Path, str]:
    """The target GGUF (a manifest key or a path) and its sha256."""
    from adaspark.model_files import load_manifest, sha256_file, verified

    t = str(raw["target"])
    if t in load_manifest():
        return verified(t)
    p = Path(t)
    if not p.is_file():
        from adaspark.config import ConfigError

        raise ConfigError(f"target={t!r} is neither a model of data/models.json nor a file")
    return p, sha256_file(p)


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def cmd_data(raw: dict[str, Any], out: Path) -> int:
    from adaspark import paths
    from adaspark.decoding.engine import Model
    from adaspark.training.data import DataSettings, make_dataset

    s = _typed(DataSettings, "drafter_data", raw)
    path, sha = target_file(raw)
    # one stream per sequence (llama-server's --parallel slots): a row attends to its own
    # sequence's cells only, not to every sequence's
    par = max(1, s.parallel)
    model = Model(path, s.n_ctx * par, exact=False, n_seq_max=par, n_batch=512,
                  kv_unified=False)
    try:
        m = make_dataset(model, sha, s, out, paths.data_dir(), log=_log)
    finally:
        model.close()
    sec = m["seconds"]
    _log(f"\ndrafter-data: {len(m['docs'])} documents, {m['tokens']['total']:,} tokens "
         f"({m['tokens']['reply']:,} of greedy replies, {m['tokens']['stdlib']:,} of standard "
         f"library); overlap with the test set: {len(m['overlap']['dropped_inputs'])} inputs "
         f"and {len(m['overlap']['dropped_replies'])} replies dropped; replies "
         f"{sec['replies'] / 60:.1f} min, capture {sec['capture'] / 60:.1f} min -> {out}")
    return 0


def target_tensors(path: Path) -> tuple[Any, Any]:
    """The target's token embeddings and output head as float32 tensors (the output head is the
    embeddings when the target ties them, as Qwen2.5-1.5B does)."""
    import gguf
    import numpy as np
    import torch

    r = gguf.GGUFReader(str(path))
    byname = {t.name: t for t in r.tensors}

    def deq(name: str) -> torch.Tensor:
        t = byname[name]
        a = gguf.quants.dequantize(t.data, t.tensor_type)
        return torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32))

    emb = deq("token_embd.weight")
    out = deq("output.weight") if "output.weight" in byname else emb
    return emb, out


def cmd_train(raw: dict[str, Any], data: Path, out: Path, halt_after: int | None = None) -> int:
    from adaspark import paths
    from adaspark.decoding.drafter.dspark_file import DrafterShape, read_target
    from adaspark.training.data import load_captured
    from adaspark.training.train import TrainSettings, train

    s = _typed(TrainSettings, "drafter_train", raw)
    if not 1 <= s.anchor_span <= s.window:
        from adaspark.config import ConfigError

        raise ConfigError(f"drafter_train.anchor_span={s.anchor_span} must be between 1 and "
                          f"drafter_train.window={s.window}: a window holds its anchors")
    manifest = json.loads((data / "manifest.json").read_text(encoding="utf-8"))
    path, sha = target_file(raw)
    if manifest["target_sha256"] != sha:
        from adaspark.config import ConfigError

        raise ConfigError(f"{data} was captured from another target (sha256 "
                          f"{manifest['target_sha256'][:12]}, this one {sha[:12]}): rerun "
                          "drafter-data")
    t = read_target(path)
    docs = [load_captured(data / "docs" / f"{d['key']}.npz") for d in manifest["docs"]]
    emb, head = target_tensors(path)
    base = {"n_embd": t.n_embd, "n_head": t.n_head, "n_head_kv": t.n_head_kv,
            "rope_base": t.rope_freq_base, "rms_eps": t.rms_eps, "n_vocab": t.n_vocab,
            "n_feat": len(manifest["layers"])}
    mask = DrafterShape().mask_for(t)
    out.mkdir(parents=True, exist_ok=True)
    m = train(docs, manifest, emb, head, base, mask, s, paths.cache_dir(), out, log=_log,
              halt_after=halt_after)
    ho = m["heldout"]
    _log(f"\ndrafter-train: {s.steps} steps in {m['seconds'] / 60:.1f} min (resumed at "
         f"{m['resumed_at']}); held out: acceptance length {ho.get('accept_len', float('nan')):.3f}"
         f" in a chain of {s.block}, per position {ho.get('per_position')}; draft vocabulary "
         f"covers {m['draft_vocab_coverage']:.1%} -> {out}")
    return 0


def cmd_export(raw: dict[str, Any], train_dir: Path, out: Path) -> int:
    from adaspark.model_files import sha256_file
    from adaspark.training.export import export

    e = raw["drafter_export"]
    path, sha = target_file(raw)
    metrics = json.loads((train_dir / "metrics.json").read_text(encoding="utf-8"))
    data_manifest = train_dir.parent / "data" / "manifest.json"
    prov = {"target": str(raw["target"]), "target_sha256": sha,
            "data_manifest_sha256": sha256_file(data_manifest)
            if data_manifest.is_file() else None,
            "data": raw["drafter_data"], "train": raw["drafter_train"],
            "heldout": metrics.get("heldout"), "train_seconds": metrics.get("seconds"),
            "weights_sha256": sha256_file(train_dir / "weights.pt")}
    rec = export(train_dir / "weights.pt", path, out, name=str(e["name"]),
                 quant=str(e["quant"]), target_layers=tuple(raw["drafter_data"]["layers"]),
                 provenance=prov, quant_draft_vocab=e.get("quant_draft_vocab"))
    for f in rec["files"].values():
        _log(f"  {f['file']}: {f['bytes'] / 2**20:.1f} MiB ({f['type']}), sha256 "
             f"{f['sha256'][:16]}")
    return 0


def cmd_install(export_dir: Path, key: str) -> int:
    """Copy the exported quantized file into ``data/drafters/`` and record it in the manifest."""
    from adaspark import paths
    from adaspark.config import ConfigError
    from adaspark.io import json_text, write_bytes, write_text

    rec = json.loads((export_dir / "export.json").read_text(encoding="utf-8"))
    f = rec["files"]["quant"]
    if f["bytes"] > 24 * 10**6:
        raise ConfigError(f"{f['file']} has {f['bytes']:,} bytes, over the 24 MB a committed "
                          "drafter may have: export with a smaller drafter_export.quant")
    dest = paths.data_dir() / "drafters" / f["file"]
    dest.parent.mkdir(parents=True, exist_ok=True)
    write_bytes(dest, (export_dir / f["file"]).read_bytes())
    mpath = paths.data_dir() / "models.json"
    manifest = json.loads(mpath.read_text(encoding="utf-8"))
    manifest[key] = {
        "file": f["file"], "bytes": f["bytes"], "sha256": f["sha256"],
        "licence": "Apache-2.0 (this project's own drafter, trained by train/dvc.yaml)",
        "own_drafter": True,
        "for_target": rec["provenance"]["target"],
        "source": {"kind": "checkout", "path": f"data/drafters/{f['file']}"},
        "provenance": rec["provenance"],
    }
    write_text(mpath, json_text(manifest, indent=2))
    _log(f"installed {dest} as {key} in {mpath}")
    return 0


@stage_main("drafter")
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("command", choices=["data", "train", "export", "install"])
    ap.add_argument("--params", default="train/params.yaml", type=Path)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--data", default="runs/drafter/data", type=Path)
    ap.add_argument("--train", default="runs/drafter/train", type=Path)
    ap.add_argument("--export", default="runs/drafter/export", type=Path)
    ap.add_argument("--key", default="dspark-embedded")
    ap.add_argument("--halt-after", type=int, default=None,
                    help="(tests) end the training process abruptly after this step")
    ap.add_argument("overrides", nargs="*")
    a = ap.parse_intermixed_args(argv)
    if a.command == "install":
        return cmd_install(a.export, a.key)
    raw = read_train_params(a.params, a.overrides)
    if a.command == "data":
        return cmd_data(raw, a.out or Path("runs/drafter/data"))
    if a.command == "train":
        return cmd_train(raw, a.data, a.out or Path("runs/drafter/train"), a.halt_after)
    return cmd_export(raw, a.train, a.out or Path("runs/drafter/export"))


if __name__ == "__main__":
    sys.exit(main())
