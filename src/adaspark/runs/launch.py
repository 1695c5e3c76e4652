"""Starting an arm's server (our engine or ``llama-server``) for a run, with the options of
:class:`~adaspark.serving.main.ServeOptions`, and stopping it with its parent.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from adaspark import io, paths
from adaspark.runs.settings import ArmEntry, RunSettings
from adaspark.schema import ArmConfig, arm_view
from adaspark.serving.llama_server import ServerProcess

# ---------------------------------------------------------------------------------------------
# Launching the arm's server


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    """Linux: the server gets SIGTERM if the run process dies (even by SIGKILL)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def launch(cfg: Any, entry: ArmEntry, arm: ArmConfig, out_dir: Path,
           settings: RunSettings) -> ServerProcess:
    """A :class:`~adaspark.serving.llama_server.ServerProcess` (not started) serving the arm."""
    from adaspark.serving import llama_server
    from adaspark.serving.main import MainArgs, ServeOptions, free_port, main_argv

    cfg = arm_view(cfg, arm)  # the arm's own drafter, when its file names one
    port = settings.port or free_port(settings.host)
    # The server runs from the checkout (paths.checkout_root); hand it absolute paths.
    out_dir = out_dir.resolve()
    template = Path(settings.chat_template).resolve() if settings.chat_template else None
    if arm.engine == "llama-server":
        spec = llama_server.spec_from_config(cfg, arm, port=port, host=settings.host,
                                             chat_template_file=template)
        proc = llama_server.llama_server_process(
            spec, out_dir / "server.log", startup_timeout_s=settings.startup_timeout_s,
            preexec=_die_with_parent)
    else:
        snapshot = {k: cfg.get(k) for k in ("target", "drafter", "drafters", "threads",
                                            "scheduler", "sampling")}
        snapshot = {k: (OmegaConf.to_container(v, resolve=True) if isinstance(v, DictConfig)
                        else v) for k, v in snapshot.items()}
        snapshot["arms"] = {entry.entry: arm.as_mapping()}
        snapshot["exact"] = settings.exact
        params = out_dir / "server-params.yaml"
        io.write_text(params, OmegaConf.to_yaml(OmegaConf.create(snapshot)))
        opts = ServeOptions(host=settings.host, port=port, store=out_dir / "store",
                            chat_template=template, warmup=settings.warmup,
                            round_log=out_dir / "rounds" if settings.round_log else None,
                            trace_log=out_dir / "trace" if settings.round_log else None,
                            tool_fallback=settings.tool_fallback)
        argv = [sys.executable, "-m", "adaspark.serving.main",
                *main_argv(MainArgs(params, entry.entry, settings.exact, opts))]
        proc = llama_server.ServerProcess(
            argv, port=port, host=settings.host, log_path=out_dir / "server.log",
            env=llama_server.clean_env(exact=settings.exact),
            startup_timeout_s=settings.startup_timeout_s, cwd=paths.checkout_root(),
            preexec=_die_with_parent)
    return proc
