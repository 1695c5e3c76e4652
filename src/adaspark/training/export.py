"""The ``drafter-export`` stage's work (issue 15): trained weights to a ``dflash`` GGUF that
llama.cpp loads (our engine and ``llama-server --spec-type draft-dspark``), with the tensor names
and layouts of the vendored ``src/models/dflash.cpp`` (see :mod:`adaspark.training.model`).

Two files: ``<name>-f16.gguf`` (every matrix F16: the reference) and ``<name>.gguf`` (matrices
in ``quant``, norms and the confidence head F32): the one committed, at most 24 MB. The export
records the provenance (data manifest digest, training settings and metrics, the target's
sha256) in the file's own ``adaspark.dspark.*`` keys and in ``export.json``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from adaspark.decoding.drafter.dspark_file import (
    KEY_KIND,
    DrafterShape,
    read_target,
    write_dflash_gguf,
)
from adaspark.io import write_json
from adaspark.model_files import sha256_file

KIND = "trained"
KEY_PROVENANCE = "adaspark.dspark.provenance"


def gguf_tensors(state: dict[str, Any], n_layers: int, d2t: np.ndarray) -> dict[str, np.ndarray]:
    """The GGUF tensors (numpy shapes: ggml's ``ne`` reversed) of a trained state dict."""
    def a(k: str) -> np.ndarray:
        return state[k].detach().cpu().numpy().astype(np.float32)

    out = {"fc.weight": a("fc.weight"), "enc.output_norm.weight": a("enc_norm"),
           "output_norm.weight": a("out_norm"), "output.weight": a("output.weight"),
           "d2t": np.asarray(d2t, dtype=np.int64)}
    for i in range(n_layers):
        p, b = f"layers.{i}.", f"blk.{i}."
        names = {"attn_norm.weight": "attn_norm", "attn_q.weight": "wq.weight",
                 "attn_k.weight": "wk.weight", "attn_v.weight": "wv.weight",
                 "attn_output.weight": "wo.weight", "attn_q_norm.weight": "q_norm",
                 "attn_k_norm.weight": "k_norm", "ffn_norm.weight": "ffn_norm",
                 "ffn_gate.weight": "gate.weight", "ffn_up.weight": "up.weight",
                 "ffn_down.weight": "down.weight"}
        out |= {b + g: a(p + t) for g, t in names.items()}
    out |= {"markov_w1.weight": a("markov_w1.weight"), "markov_w2.weight": a("markov_w2.weight"),
            "conf_proj.weight": a("conf.weight"), "conf_proj.bias": a("conf.bias")}
    return out


def keep_draft_rows(tensors: dict[str, np.ndarray], n: int) -> dict[str, np.ndarray]:
    """The drafter with only its ``n`` most frequent draft-vocabulary rows (``d2t`` is in
    frequency order): the output head, the Markov ``w2`` and ``d2t`` cut to ``n`` rows."""
    out = dict(tensors)
    for k in ("output.weight", "markov_w2.weight", "d2t"):
        out[k] = tensors[k][:n]
    return out


def tensor_types(tensors: dict[str, np.ndarray], quant: str) -> dict[str, str]:
    """``quant`` for every matrix whose rows split into 32-value blocks (the Markov ``w2`` and
    the confidence head stay F32: tiny, and the head's sigmoid is read as a probability)."""
    keep = {"markov_w2.weight", "conf_proj.weight", "conf_proj.bias", "d2t"}
    return {n: quant for n, t in tensors.items()
            if n not in keep and t.ndim == 2 and t.shape[1] % 32 == 0}


def export(weights: Path, target_path: Path, out_dir: Path, *, name: str, quant: str,
           target_layers: tuple[int, ...], provenance: dict[str, Any],
           quant_draft_vocab: int | None = None) -> dict[str, Any]:
    """Write ``out_dir/<name>-f16.gguf`` (every draft row) and ``out_dir/<name>.gguf`` (in
    ``quant``, its draft vocabulary cut to ``quant_draft_vocab`` rows when set, so that the
    committed file fits 24 MB) and ``export.json``."""
    import torch

    w = torch.load(weights, weights_only=False)
    dims = w["dims"]
    target = read_target(target_path)
    shape = DrafterShape(block_size=int(dims["block"]), target_layers=tuple(target_layers),
                         n_layers=int(dims["n_layers"]), markov_rank=int(dims["markov_rank"]),
                         confidence_head=True, mask_token_id=int(w["mask_token"]),
                         n_ff=int(dims["n_ff"]))
    tensors = gguf_tensors(w["model"], int(dims["n_layers"]), w["d2t"])
    prov = json.dumps(provenance, sort_keys=True)
    extra = {KEY_KIND: KIND, KEY_PROVENANCE: prov}
    files = {}
    for label, q in (("f16", "F16"), ("quant", quant)):
        path = out_dir / (f"{name}-f16.gguf" if label == "f16" else f"{name}.gguf")
        ts = tensors if label == "f16" or not quant_draft_vocab else \
            keep_draft_rows(tensors, quant_draft_vocab)
        write_dflash_gguf(path, target, shape, ts, name=f"adaspark trained DSpark for "
                          f"{target.path.stem}", extra=extra, types=tensor_types(ts, q))
        files[label] = {"file": path.name, "bytes": path.stat().st_size,
                        "sha256": sha256_file(path), "type": q,
                        "draft_vocab": int(ts["d2t"].shape[0])}
    record = {"name": name, "files": files, "dims": dims, "target_layers": list(target_layers),
              "provenance": provenance}
    write_json(out_dir / "export.json", record)
    return record
