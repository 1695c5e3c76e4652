"""A run's fingerprint (``run.json``): engine binary, model files, arm and run config, the test
set's conversations and the decoding code. A run refuses to append to results with another one.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from adaspark.runs.conversation import Planned, conversation_sha256
from adaspark.runs.settings import RunSettings, run_sampling
from adaspark.schema import ArmConfig, arm_view


def fingerprint(cfg: Any, arm: ArmConfig, settings: RunSettings, plan: list[Planned],
                order: dict[str, Any]) -> dict[str, Any]:
    """What must not change between a run's replies: the engine binary and its backend, the model
    files, the arm's and the run's config, the run order (``order``: sequential, or interleaved
    with its group, :meth:`adaspark.runs.order.RunUnit.record`; and the launcher's sharding,
    :mod:`adaspark.runs.cluster`), the exact conversations the replies are
    made from (a hash per conversation, :func:`conversation_sha256`) and the project's decoding
    code (:func:`adaspark.provenance.code_fingerprint`)."""
    from adaspark import model_files, provenance

    cfg = arm_view(cfg, arm)  # the arm's own drafter, when its file names one
    engine = arm.engine
    arm_fp = json.loads(json.dumps(arm.as_mapping(), default=str))
    for k in ("store", "log_dir"):  # where the run keeps them, not what it runs
        arm_fp.pop(k, None)
    tpath, tsha = model_files.resolve(cfg.target)
    models: dict[str, Any] = {"target": {"file": tpath.name, "sha256": tsha or
                                         model_files.recorded_sha256(tpath),
                                         "n_ctx": int(cfg.target.n_ctx)}}
    if arm.speculative:
        dpath, dsha = model_files.resolve(cfg.drafter)
        dcfg = OmegaConf.to_container(cfg.drafter, resolve=True) \
            if isinstance(cfg.drafter, DictConfig) else dict(cfg.drafter)
        assert isinstance(dcfg, dict)
        models["drafter"] = {"file": dpath.name,
                             "sha256": dsha or model_files.recorded_sha256(dpath),
                             **{k: dcfg.get(k) for k in ("kind", "block_positions",
                                                         "candidates_per_position", "n_ctx")}}
    if engine == "llama-server":
        from adaspark.serving import llama_server

        info = llama_server.binary_info()
        binary = {"llama_server_sha256": info["sha256"], "version": info["version"]}
    else:
        b = provenance.llama_build()
        binary = {"libllama_sha256": b.get("libllama_sha256"),
                  "llama_cpp_python": b.get("llama_cpp_python")}
    from adaspark.decoding.backend import build_backend

    binary["backend"] = build_backend()  # a CUDA build's replies never mix with a CPU build's
    template = None
    if settings.chat_template:
        template = hashlib.sha256(Path(settings.chat_template).read_bytes()).hexdigest()
    preset = cfg.get("preset")
    run = {"subset": settings.subset, "cap": settings.cap, "protocol_cap": settings.protocol_cap,
           "chat_template_sha256": template, "order": order,
           "preset": preset.get("name") if hasattr(preset, "get") else preset}
    if engine == "ours":
        run["exact"] = settings.exact
        run["tool_fallback"] = settings.tool_fallback
    out = {"engine": engine, "binary": binary, "models": models, "arm": arm_fp, "run": run,
           "threads": cfg.get("threads"),
           "conversations": {f"{q.set_name}/{q.conversation.name}": conversation_sha256(q)
                             for q in plan},
           "code": provenance.code_fingerprint()}
    sampling = run_sampling(cfg)
    if sampling is not None:  # a sampled run never mixes with a greedy one, nor with another
        out["sampling"] = asdict(sampling)
    rule_source = _outside_rule_source(arm)
    if rule_source is not None:  # a rule outside the package: its own code, beside ours
        out["rule_code"] = rule_source
    if arm.needs_scheduler and cfg.get("scheduler") is not None:
        sch = cfg.get("scheduler")
        out["scheduler"] = OmegaConf.to_container(sch, resolve=True) \
            if isinstance(sch, DictConfig) else sch
    return out


def _outside_rule_source(arm: ArmConfig) -> dict[str, str] | None:
    """The module file and sha256 of an arm's width rule named as ``module:Class`` outside the
    package (None for a rule of the package's registry, whose code the code fingerprint holds)."""
    import inspect

    from adaspark.registry import is_object_path
    from adaspark.rules.base import rule_class

    if arm.engine != "ours" or not is_object_path(arm.width_rule):
        return None
    cls = rule_class(str(arm.width_rule))
    if cls.__module__.split(".")[0] == "adaspark":
        return None
    src = Path(inspect.getfile(cls))
    return {"module": cls.__module__, "sha256": hashlib.sha256(src.read_bytes()).hexdigest()}
