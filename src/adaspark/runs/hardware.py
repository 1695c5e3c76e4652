"""Which machine made a reply (issue 16, "The paper's protocol on a Ray cluster"): the node's id
and its hardware fingerprint, one of each per reply row (``node``, ``hardware``).

Timings are comparable only between replies made on the same hardware, so comparisons pair
replies within one fingerprint (:func:`adaspark.analysis.stats.compare` refuses a pair across
two unless told). The fingerprint hashes what sets a verify's speed: the CPU model and its
logical cores, the memory, the GPUs (``nvidia-smi``'s names and memory) and the llama.cpp
build's backend. The node id is the Ray node's in a cluster run (the runner on the node sets
``ADASPARK_NODE_ID``), and ``local-<host>`` for a run on one machine.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

NODE_ENV = "ADASPARK_NODE_ID"


def node_id() -> str:
    """The Ray node id on a cluster node, else ``local-<hostname>``."""
    return os.environ.get(NODE_ENV) or f"local-{platform.node()}"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_gib() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 2**20)
    except (OSError, ValueError, IndexError):
        pass
    return None


def _gpus() -> list[str]:
    try:
        q = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total",
                            "--format=csv,noheader"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return []
    return [ln.strip() for ln in q.stdout.splitlines() if ln.strip()] if q.returncode == 0 else []


@cache
def hardware() -> dict[str, Any]:
    """What the fingerprint hashes (recorded in a run's metadata beside it)."""
    from adaspark.decoding.backend import build_backend

    return {"cpu": _cpu_model(), "logical_cpus": os.cpu_count(), "memory_gib": _memory_gib(),
            "gpus": _gpus(), "machine": platform.machine(), "backend": build_backend()}


def hardware_fingerprint(info: dict[str, Any] | None = None) -> str:
    """16 hex digits of sha256 over :func:`hardware` (or ``info``)."""
    blob = json.dumps(info if info is not None else hardware(), sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]
