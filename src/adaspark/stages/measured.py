"""What the two measurement stages (survey: Table 1, Figure 3; fig5: Figure 5) share: the model
pair in llama.cpp's default (fast) kernels, the microbenchmark prompts grouped by context, and
their outputs (a Parquet table written atomically and a JSON file of settings, machine and
provenance)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import pandas as pd
from omegaconf import DictConfig

from adaspark.config import ConfigError
from adaspark.io import atomic_path, write_json


def section_values(cls: type, section: dict[str, Any] | None, name: str) -> dict[str, Any]:
    """The params section ``name`` as keyword arguments of the settings dataclass ``cls``:
    an unknown key is refused, ``contexts`` and ``widths`` become tuples of ints."""
    d = dict(section or {})
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(d) - known)
    if unknown:
        raise ValueError(f"unknown key(s) {unknown} in `{name}`; known: {sorted(known)}")
    for k in ("contexts", "widths"):
        if k in d:
            d[k] = tuple(int(x) for x in d[k])
    return d


@dataclass
class ModelPair:
    """The target and drafter of a measurement stage, and the files they were loaded from."""

    target: Any
    drafter: Any
    files: dict[str, dict[str, Any]]
    started: float = field(default_factory=time.perf_counter)

    @property
    def block_positions(self) -> int:
        """B: the drafter's own block unless ``drafter.block_positions`` sets it."""
        return int(self.drafter.block_positions)


@contextmanager
def model_pair(cfg: DictConfig) -> Iterator[ModelPair]:
    """Load ``cfg.target`` and ``cfg.drafter`` (fast kernels, ``cfg.threads``); close both."""
    from adaspark import model_files
    from adaspark.decoding.backend import configured_gpu_layers
    from adaspark.decoding.drafter.base import make_drafter
    from adaspark.decoding.engine import Target

    started = time.perf_counter()
    tpath, tsha = model_files.resolve(cfg.target)
    dpath, dsha = model_files.resolve(cfg.drafter)
    target = Target(tpath, int(cfg.target.n_ctx), exact=False, threads=cfg.get("threads"),
                    n_gpu_layers=configured_gpu_layers(cfg.target, "target"))
    try:
        drafter = make_drafter(str(cfg.drafter.kind), path=dpath, n_ctx=int(cfg.drafter.n_ctx),
                               exact=False, top_k=int(cfg.drafter.candidates_per_position),
                               threads=cfg.get("threads"), target=target,
                               n_gpu_layers=configured_gpu_layers(cfg.drafter, "drafter"))
    except BaseException:
        target.close()
        raise
    if cfg.drafter.get("block_positions") is not None:
        drafter.block_positions = int(cfg.drafter.block_positions)
    elif getattr(drafter, "block_positions", None) is None:
        drafter.close()
        target.close()
        raise ConfigError(f"drafter {cfg.drafter.name} (kind {cfg.drafter.kind}) has no "
                          "block_positions: set drafter.block_positions=B")
    files = {"target": {"path": str(tpath), "sha256": tsha},
             "drafter": {"path": str(dpath), "sha256": dsha}}
    try:
        yield ModelPair(target, drafter, files, started)
    finally:
        drafter.close()
        target.close()


def prompts_by_context(pair: ModelPair, cfg: DictConfig, testset: str, contexts: list[int],
                       **kwargs: Any) -> tuple[dict[int, list[Any]], dict[int, int]]:
    """The microbenchmark prompts (:mod:`adaspark.testset.microbench`) grouped by their context
    on this target's window, and the paper's context each one stands for."""
    from adaspark import paths
    from adaspark.testset import load_checked_sets
    from adaspark.testset.microbench import microbench_prompts

    sets = load_checked_sets(paths.from_cwd_or_repo(testset))
    window = min(int(cfg.target.n_ctx), int(cfg.drafter.n_ctx))
    made = microbench_prompts(sets, lambda s: pair.target.tokenize(s, add_special=False),
                              contexts, n_ctx=window, **kwargs)
    by_ctx: dict[int, list[Any]] = {}
    for p in made:
        by_ctx.setdefault(p.n_tokens, []).append(p)
    paper_of = dict(zip(sorted(by_ctx), sorted(contexts), strict=True))
    return by_ctx, paper_of


def write_outputs(out: Path, name: str, frame: pd.DataFrame, meta: dict[str, Any],
                  pair: ModelPair, params: dict[str, Any]) -> Path:
    """``<out>/<name>.parquet`` (atomically) and ``<out>/<name>.json``: ``meta`` plus the wall
    time, the machine and the run's provenance (versions, build, model checksums)."""
    from adaspark import provenance
    from adaspark.analysis.report import machine_info

    with atomic_path(out / f"{name}.parquet") as tmp:
        frame.to_parquet(tmp, index=False)
    meta = {**meta, "kernels": "fast", "wall_s": time.perf_counter() - pair.started,
            "machine": machine_info(),
            "provenance": provenance.run_metadata(
                {k: params.get(k) for k in ("target", "drafter", "threads")}, pair.files)}
    write_json(out / f"{name}.json", meta, ensure_ascii=True, default=str)
    return out / f"{name}.parquet"
