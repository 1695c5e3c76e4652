"""llama.cpp's own server as the baseline (§4.1, Table 4: llama.cpp's DSpark at its defaults).

``llama-server`` is built from the llama.cpp source that the installed llama-cpp-python vendors
(``scripts/setup.sh``; its path is in the venv's ``adaspark-llama-build.json``). This module
starts it as a subprocess on loopback with the arm's flags, waits until ``/health`` answers, and
stops it; :class:`ServerProcess` does the same for our own server (``python -m
adaspark.serving.main``), so a run drives both engines the same way.

Flags (checked against this build's ``--help``; the arm file names the speculative ones so that a
different build cannot change them silently):

* both arms: ``--model``, ``--ctx-size`` (the target's ``n_ctx``), ``--parallel 1`` (one slot:
  one request at a time; the load benchmark sets N slots sharing that context, llama-server's
  continuous batching), ``--threads``/``--threads-batch`` (every core unless ``threads`` is
  set, as our engine), ``--temp 0 --top-k 1`` (greedy), ``--jinja`` (the model's chat template
  with tools), ``--host 127.0.0.1``, ``--port``, ``--no-webui``; prompt caching is llama-server's
  default (``--cache-prompt``).
* ``llamacpp-chain`` adds ``--spec-type draft-simple --spec-draft-model <drafter file>
  --spec-draft-n-max 3 --spec-draft-p-min 0`` (the vendored build's defaults for a draft model: a
  chain of at most three draft tokens, no probability cut); ``--spec-type draft-dspark`` when the
  drafter is a DSpark GGUF.

Kernels: llama-server runs llama.cpp's default CPU kernels (HARNESS "Kernels"), so the process
gets an environment without exact mode's ``GGML_CPU_TILED_MM=0``.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import httpx

from adaspark import paths
from adaspark.io import open_append
from adaspark.model_files import recorded_sha256
from adaspark.schema import ArmConfig, LlamaServerOptions

LOOPBACK = "127.0.0.1"


class ServerStartError(RuntimeError):
    """A server subprocess did not come up; the message carries the tail of its log."""


# ---------------------------------------------------------------------------------------------
# The binary


def binary_path() -> Path:
    """The llama-server of this venv's llama.cpp build (``adaspark-llama-build.json``)."""
    info = paths.build_info()
    server = info.get("llama_server")
    if not server or not Path(server).is_file():
        raise FileNotFoundError(
            f"llama-server is missing (build info {paths.build_info_file()} names {server!r}). "
            "Run `bash scripts/setup.sh`, which builds it from the vendored llama.cpp source."
        )
    return Path(server)




@cache
def binary_version(binary: str) -> str:
    """The first line of ``llama-server --version`` (e.g. ``version: 0.5.0-dev (build 1, commit
    0c1e570)``)."""
    p = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=60)
    lines = [ln.strip() for ln in (p.stdout + p.stderr).splitlines() if ln.strip()]
    version = [ln for ln in lines if ln.startswith("version:")]
    return version[0] if version else (lines[0] if lines else "unknown")


def binary_info(binary: Path | None = None) -> dict[str, str]:
    """Path, version line and sha256 of the llama-server binary (recorded in every run)."""
    b = str(binary or binary_path())
    return {"path": b, "version": binary_version(b), "sha256": recorded_sha256(b)}


# ---------------------------------------------------------------------------------------------
# Arm -> flags


@dataclass
class LlamaServerSpec:
    """Everything a llama-server arm is started with."""

    model: Path
    n_ctx: int
    threads: int
    port: int
    host: str = LOOPBACK
    drafter: Path | None = None
    #: the arm's ``server:`` options (speculative flags and extra arguments)
    server: LlamaServerOptions = field(default_factory=LlamaServerOptions)
    chat_template_file: Path | None = None
    binary: Path | None = None
    #: offload flags (``--n-gpu-layers``, ``--n-gpu-layers-draft``; none on a CPU build):
    #: :func:`adaspark.decoding.backend.server_gpu_flags`
    gpu_args: list[str] = field(default_factory=list)
    #: slots (``--parallel``): requests decoding together, in llama-server's continuous batching
    #: (1: one at a time, the paper's protocol; the load benchmark sets more)
    parallel: int = 1

    def args(self) -> list[str]:
        """The command line (binary first)."""
        b = str(self.binary or binary_path())
        argv = [
            b, "--model", str(self.model), "--ctx-size", str(self.n_ctx),
            "--parallel", str(self.parallel),
            "--threads", str(self.threads), "--threads-batch", str(self.threads),
            "--temp", "0", "--top-k", "1", "--jinja",
            "--host", self.host, "--port", str(self.port), "--no-webui",
        ]
        if self.chat_template_file is not None:
            argv += ["--chat-template-file", str(self.chat_template_file)]
        s = self.server
        if s.spec_type not in (None, "none"):
            if self.drafter is None:
                raise ValueError(f"--spec-type {s.spec_type} needs a drafter file")
            for key in ("spec_draft_n_max", "spec_draft_p_min"):
                if getattr(s, key) is None:
                    raise ValueError(f"server.{key} is not set: a speculative llama-server "
                                     "names it (conf/arm/llamacpp-chain.yaml names llama.cpp's "
                                     "defaults)")
            argv += ["--spec-type", str(s.spec_type), "--spec-draft-model", str(self.drafter),
                     "--spec-draft-n-max", str(s.spec_draft_n_max),
                     "--spec-draft-p-min", f"{s.spec_draft_p_min:g}"]
        return argv + list(self.gpu_args) + [str(x) for x in s.extra_args]


def spec_from_config(cfg: Any, arm: ArmConfig, *, port: int, host: str = LOOPBACK,
                     chat_template_file: Path | None = None,
                     parallel: int | None = None) -> LlamaServerSpec:
    """A :class:`LlamaServerSpec` from a composed config (``target``, ``drafter``, ``threads``)
    and a checked llama-server arm (``engine: llama-server``; ``server:`` holds its flags)."""
    from adaspark import model_files

    if arm.engine != "llama-server":
        raise ValueError(f"arm {arm.name} is not a llama-server arm (engine: {arm.engine})")
    from adaspark.schema import arm_view

    cfg = arm_view(cfg, arm)  # the arm's own drafter
    server = arm.server or LlamaServerOptions()
    tpath, _ = model_files.resolve(cfg.target)
    drafter = None
    if server.spec_type not in (None, "none"):
        drafter, _ = model_files.resolve(cfg.drafter)
    threads = int(cfg.get("threads") or os.cpu_count() or 1)
    from adaspark.decoding.backend import build_backend, configured_gpu_layers, server_gpu_flags

    backend = build_backend()
    gpu_args = server_gpu_flags(
        configured_gpu_layers(cfg.target, "target", backend),
        configured_gpu_layers(cfg.drafter, "drafter", backend) if drafter is not None else None,
        backend)
    return LlamaServerSpec(
        model=tpath, n_ctx=int(cfg.target.n_ctx), threads=threads, port=port, host=host,
        drafter=drafter, server=server, chat_template_file=chat_template_file,
        gpu_args=gpu_args, **({} if parallel is None else {"parallel": parallel}),
    )


# ---------------------------------------------------------------------------------------------
# A server subprocess


def clean_env(*, exact: bool = False) -> dict[str, str]:
    """The environment for a server process: exact mode's kernel switch only when asked."""
    env = {k: v for k, v in os.environ.items() if k != "GGML_CPU_TILED_MM"}
    if exact:
        env["GGML_CPU_TILED_MM"] = "0"
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


class ServerProcess:
    """An HTTP server subprocess on loopback: start, wait until ``GET /health`` is 200, stop.

    Its output goes to ``log_path``. ``preexec`` runs in the child before the program starts
    (the runner uses it so that a server dies with the run that started it). Used as a context
    manager.
    """

    def __init__(self, argv: Sequence[str], *, port: int, log_path: Path,
                 host: str = LOOPBACK, env: dict[str, str] | None = None,
                 startup_timeout_s: float = 600.0, cwd: Path | None = None,
                 preexec: Callable[[], None] | None = None) -> None:
        self.argv = list(argv)
        self.port = port
        self.host = host
        self.log_path = log_path
        self.env = env
        self.startup_timeout_s = startup_timeout_s
        self.cwd = cwd
        self.preexec = preexec
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: Any = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def log_tail(self, n: int = 30) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(lines[-n:])

    def start(self) -> ServerProcess:
        self._log = open_append(self.log_path)
        self._log.write(f"\n$ {' '.join(self.argv)}\n".encode())
        self._log.flush()
        self.proc = subprocess.Popen(self.argv, stdout=self._log, stderr=subprocess.STDOUT,
                                     env=self.env, cwd=self.cwd, preexec_fn=self.preexec)
        self.wait_ready()
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout_s
        with httpx.Client(timeout=5.0) as http:
            while time.monotonic() < deadline:
                if not self.alive():
                    code = self.proc.returncode if self.proc else None
                    raise ServerStartError(
                        f"the server exited with code {code} while starting "
                        f"({' '.join(self.argv[:3])} ...). Its log ({self.log_path}) ends:\n"
                        f"{self.log_tail()}")
                try:
                    r = http.get(f"{self.url}/health")
                    if r.status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                time.sleep(0.2)
        self.stop()
        raise ServerStartError(
            f"the server did not answer /health within {self.startup_timeout_s:.0f} s. Its log "
            f"({self.log_path}) ends:\n{self.log_tail()}")

    def stop(self, timeout_s: float = 20.0) -> int | None:
        """Terminate the process (SIGTERM, then SIGKILL after ``timeout_s``)."""
        code = None
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.terminate()
                try:
                    self.proc.wait(timeout=timeout_s)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(timeout=timeout_s)
            code = self.proc.returncode
        if self._log is not None:
            self._log.close()
            self._log = None
        return code

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def llama_server_process(spec: LlamaServerSpec, log_path: Path, *,
                         startup_timeout_s: float = 600.0,
                         preexec: Callable[[], None] | None = None) -> ServerProcess:
    """A :class:`ServerProcess` for llama-server (default kernels)."""
    return ServerProcess(spec.args(), port=spec.port, host=spec.host, log_path=log_path,
                         env=clean_env(exact=False), startup_timeout_s=startup_timeout_s,
                         preexec=preexec)
