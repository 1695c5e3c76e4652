"""The paper's protocol on a Ray cluster (issue 16): ``adaspark run ... launcher=ray`` and the
pipeline's run stage under ``-S launcher=ray`` spread a run unit (one arm, or an interleaved
group: :mod:`adaspark.runs.order`) over a cluster's nodes.

Why our own tasks and not Hydra's Ray launcher: that launcher runs one Hydra job per sweep
point (a multirun); a run of the protocol is one job whose *conversations* are split across
machines and whose replies must land, one at a time and resumably, in one set of run
directories. So the driver here is the run itself: it owns the run directories (the result
store's rules: ``run.json``'s fingerprint, one atomic append per reply), and each node runs a
share of the plan as a Ray streaming task that yields each reply row as it ends.

Sharding (``launcher.shard``):

* ``conversations``: the pending conversations, in the plan's order, dealt round-robin to the
  nodes; each node runs every arm of the unit on its shard, in the run's order (sequential or
  interleaved, as on one machine). Each shard's AdaSpark learns from its own conversations only,
  not from the whole subset in the paper's order: ``run.json`` records the sharding and the
  report labels such results.
* ``arms``: each node runs whole arms over the whole subset in the paper's order (a learner sees
  what it would on one machine), at the price of pairing replies of two arms across nodes
  (comparisons pair only within one hardware fingerprint: :mod:`adaspark.runs.hardware`).

One task per node at a time: each node offers the custom resource ``launcher.resource`` once and
every task asks for one, so two timed runs never share a machine. A node that dies loses only
its unfinished replies: the driver stored every reply it received, a rerun plans what is missing
and deals it to the nodes alive then, and a reply is never stored twice (a node's rows for
replies already stored are dropped, and counted). Each row carries the node's id and hardware
fingerprint (``node``, ``hardware``).

With ``launcher.address`` null the command starts a local cluster (a head with no task resource
and ``launcher.workers`` worker nodes, ``ray.cluster_utils.Cluster``: real raylets on loopback)
and stops it at the end. Every node needs this checkout at ``launcher.checkout`` (default: the
driver's path), set up by ``scripts/setup.sh`` at the same commit: a node whose decoding code,
build or model files differ makes a fingerprint the driver refuses.
"""

from __future__ import annotations

import os
import queue
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from adaspark.checks import check_group, spec
from adaspark.config import ConfigError
from adaspark.io import scratch_dir
from adaspark.runs.order import RunUnit
from adaspark.runs.progress import ArmSummary, summarize
from adaspark.runs.rows import ReplyRow
from adaspark.runs.settings import RunError, RunSettings

Key = tuple[str, str, int, int]


@dataclass(frozen=True)
class LauncherSettings:
    """``conf/launcher/<name>.yaml`` (``local`` or ``ray``). The Ray keys' defaults are written
    in ``conf/launcher/ray.yaml``; a local launcher leaves them unset."""

    name: Literal["local", "ray"] = "local"
    address: str | None = None
    workers: int | None = spec(min=1, default=None)
    node_cpus: int | None = spec(min=1, default=None)
    shard: Literal["conversations", "arms"] = "conversations"
    resource: str = "adaspark_node"
    checkout: str | None = None

    @classmethod
    def from_config(cls, cfg: Any) -> LauncherSettings:
        raw = cfg.get("launcher") if hasattr(cfg, "get") else None
        if raw is None:
            return cls()
        from adaspark.checks import plain

        return check_group(cls, plain(raw), "launcher", extra="refuse")  # type: ignore[no-any-return]

    def record(self) -> dict[str, Any]:
        """What a run's fingerprint holds of the launcher: how replies are sharded (not the
        number of nodes, which a resume may change)."""
        return {"launcher": self.name, "shard": self.shard}


# ---------------------------------------------------------------------------------------------
# Sharding (pure)


def deal(items: list[Any], n: int) -> list[list[Any]]:
    """``items`` dealt round-robin into ``n`` shards, each in the items' order (empty shards
    dropped)."""
    if n < 1:
        raise ValueError("at least one node is needed")
    shards = [items[i::n] for i in range(n)]
    return [s for s in shards if s]


# ---------------------------------------------------------------------------------------------
# The cluster


_SESSION: list[str] = []  # the address of the cluster this process is connected to


@contextmanager
def ray_cluster(launcher: LauncherSettings, log: Callable[[str], None]) -> Iterator[str]:
    """Connect to ``launcher.address``, or start a local cluster and stop it after; yields the
    address. Inside another ``ray_cluster`` (``adaspark run``'s units share one cluster) it
    yields that one's address."""
    try:
        import ray  # noqa: F401 - only whether it is installed
    except ImportError:
        raise ConfigError("launcher=ray needs Ray: rerun setup with ADASPARK_EXTRAS=ray "
                          "(`ADASPARK_EXTRAS=ray bash scripts/setup.sh`)") from None
    if _SESSION:
        yield _SESSION[-1]
        return
    with _connected(launcher, log) as address:
        _SESSION.append(address)
        try:
            yield address
        finally:
            _SESSION.pop()


#: How long a cluster's address may take to accept a connection before the run gives up.
CONNECT_TIMEOUT_S = 10.0


def check_reachable(address: str, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """Refuse, within ``timeout_s``, a cluster address (``host:port`` or ``ray://host:port``)
    where nothing accepts a connection: Ray itself retries such an address without end."""
    import socket

    hostport = address.split("://", 1)[-1].rstrip("/")
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isdigit():
        if address in ("auto", "local"):
            return
        raise ConfigError(f"launcher.address={address!r} is not host:port or ray://host:port "
                          "(e.g. 10.0.0.5:6379 or ray://10.0.0.5:10001)")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            pass
    except OSError as e:
        raise RunError(f"nothing accepts connections at the Ray cluster address {address} "
                       f"({e}; tried for up to {timeout_s:.0f} s): start the cluster there "
                       f"(`ray start --head --port={port}` on {host or 'that machine'}, then "
                       "`ray start --address=...` on each node), or set launcher.address=null "
                       "to start a local cluster") from None


@contextmanager
def _connected(launcher: LauncherSettings, log: Callable[[str], None]) -> Iterator[str]:
    import ray

    if launcher.address:
        check_reachable(launcher.address)
        ray.init(address=launcher.address, log_to_driver=False)
        try:
            yield launcher.address
        finally:
            ray.shutdown()
        return
    from ray.cluster_utils import Cluster

    if launcher.workers is None or launcher.node_cpus is None:
        raise ConfigError("launcher.workers and launcher.node_cpus are not set: a local Ray "
                          "cluster needs both (compose launcher=ray, conf/launcher/ray.yaml)")
    log(f"ray: starting a local cluster of {launcher.workers} node(s)")
    cluster = Cluster(initialize_head=True,
                      head_node_args={"num_cpus": 0, "include_dashboard": False})
    try:
        for _ in range(launcher.workers):
            cluster.add_node(num_cpus=launcher.node_cpus, resources={launcher.resource: 1})
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, log_to_driver=False)
        yield cluster.address
    finally:
        ray.shutdown()
        cluster.shutdown()


def task_nodes(resource: str) -> list[str]:
    """Alive nodes offering ``resource``."""
    import ray

    return [n["NodeID"] for n in ray.nodes()
            if n.get("Alive") and n.get("Resources", {}).get(resource, 0) >= 1]


# ---------------------------------------------------------------------------------------------
# On a node


def node_share(params: dict[str, Any], entries: list[str], group: str | None,
               only: list[tuple[str, str]] | None, prior: dict[str, list[dict[str, Any]]],
               checkout: str) -> Iterator[dict[str, Any]]:
    """A node's share of a run (a Ray streaming task's body): ``entries`` over the conversations
    ``only`` (all, when None), resuming from ``prior``; yields each reply row (a dict with its
    ``entry``) as it ends. The node's own run directories are scratch, removed at the end."""
    import ray
    from omegaconf import OmegaConf

    from adaspark.runs.hardware import NODE_ENV
    from adaspark.runs.run import run_unit

    os.environ[NODE_ENV] = ray.get_runtime_context().get_node_id()
    os.chdir(checkout)
    cfg = OmegaConf.create(params)
    settings = RunSettings.from_config(cfg)
    rows: queue.Queue[Any] = queue.Queue()
    failure: list[BaseException] = []
    with scratch_dir() as scratch:  # the node's own run directories: the rows go to the driver
        dirs = {e: scratch / e for e in entries}

        def work() -> None:
            try:
                run_unit(cfg, RunUnit(tuple(entries), group), dirs, settings,
                         on_reply=lambda r: rows.put(asdict(r)),
                         only=None if only is None else {(s, c) for s, c in only},
                         prior=prior)
            except BaseException as e:  # re-raised in the task, after the rows sent so far
                failure.append(e)
            finally:
                rows.put(None)

        t = threading.Thread(target=work, daemon=True)
        t.start()
        while (row := rows.get()) is not None:
            yield row
        t.join()
    if failure:
        raise RunError(f"node {os.environ[NODE_ENV][:12]}: {failure[0]}") from failure[0]


# ---------------------------------------------------------------------------------------------
# The driver


def run_unit_ray(cfg: Any, unit: RunUnit, dirs: dict[str, Path], settings: RunSettings,
                 launcher: LauncherSettings, *, on_mismatch: str = "refuse",
                 log: Callable[[str], None] | None = None,
                 on_reply: Callable[[ReplyRow], None] | None = None) -> list[ArmSummary]:
    """:func:`adaspark.runs.run.run_unit` over a Ray cluster (see the module docstring); the
    driver holds each run directory's lock (:class:`~adaspark.runs.store.RunLock`) throughout."""
    from contextlib import ExitStack

    from adaspark.runs.store import RunLock

    with ExitStack() as held:
        for d in dirs.values():
            held.enter_context(RunLock(Path(d)))
        return _run_unit_ray_held(cfg, unit, dirs, settings, launcher, on_mismatch=on_mismatch,
                                  log=log, on_reply=on_reply)


def _run_unit_ray_held(cfg: Any, unit: RunUnit, dirs: dict[str, Path], settings: RunSettings,
                       launcher: LauncherSettings, *, on_mismatch: str,
                       log: Callable[[str], None] | None,
                       on_reply: Callable[[ReplyRow], None] | None) -> list[ArmSummary]:
    from omegaconf import OmegaConf

    from adaspark.runs.conversation import plan_subset
    from adaspark.runs.run import open_arm
    from adaspark.runs.store import CRASH_FILE, write_run_json
    from adaspark.testset import load_checked_sets

    say = log or (lambda m: print(m, file=sys.stderr, flush=True))
    if settings.port:
        raise RunError(f"run.port={settings.port} with launcher=ray: nodes on one machine need a "
                       "free port each; set run.port=0")
    t_start = time.monotonic()
    sets = load_checked_sets(settings.testset_dir())
    plan = plan_subset(sets, settings.subset)
    record = launcher.record()
    arms = {e: open_arm(cfg, e, Path(dirs[e]), settings, plan, unit, on_mismatch,
                         launcher=record) for e in unit.entries}
    params = OmegaConf.to_container(cfg, resolve=True)
    checkout = launcher.checkout or os.getcwd()
    conv_keys = [(p.set_name, p.conversation.name) for p in plan]
    pending = [c for c in conv_keys if any(c in a.pending for a in arms.values())]
    if not pending:
        say(f"ray: {', '.join(unit.entries)}: every reply is stored")
        return _summaries(arms, t_start, write=False)
    for a in arms.values():
        (a.out_dir / CRASH_FILE).unlink(missing_ok=True)
    stored_before = {e: len(a.done) for e, a in arms.items()}
    dropped = 0
    failures: list[str] = []
    with ray_cluster(launcher, say) as address:
        import ray

        nodes = task_nodes(launcher.resource)
        if not nodes:
            raise RunError(f"the Ray cluster at {address} has no alive node offering the "
                           f"resource {launcher.resource!r}: start each worker with `ray start "
                           f"--address=... --resources='{{\"{launcher.resource}\": 1}}'`")
        if launcher.shard == "conversations":
            jobs = [(list(unit.entries), s) for s in deal(pending, len(nodes))]
        else:
            jobs = [([e], None) for e in unit.entries if arms[e].pending]
        say(f"ray: {len(nodes)} node(s) at {address}; {len(jobs)} task(s), sharded by "
            f"{launcher.shard}; {len(pending)} conversation(s) to run")
        for a in arms.values():
            a.store.note(launcher={**record, "address": address, "nodes": nodes,
                                   "tasks": [{"entries": e, "conversations": s}
                                             for e, s in jobs]})
        task = ray.remote(node_share).options(
            num_returns="streaming", num_cpus=0, resources={launcher.resource: 1},
            max_retries=0)
        gens = []
        for entries, shard in jobs:
            prior = {e: [r for r in arms[e].done.values()
                         if shard is None or (r["set"], r["conversation"]) in set(shard)]
                     for e in entries}
            gens.append((entries, task.remote(params, entries, unit.group, shard, prior,
                                              checkout)))
        inbox: queue.Queue[Any] = queue.Queue()

        def drain(entries: list[str], gen: Any) -> None:
            try:
                for ref in gen:
                    inbox.put(("row", ray.get(ref)))
            except Exception as e:  # a node died, or its run failed
                inbox.put(("error", f"{', '.join(entries)}: {type(e).__name__}: "
                                    f"{str(e).splitlines()[0] if str(e) else ''}"))
            finally:
                inbox.put(("end", None))

        threads = [threading.Thread(target=drain, args=g, daemon=True) for g in gens]
        for t in threads:
            t.start()
        open_tasks = len(threads)
        while open_tasks:
            kind, item = inbox.get()
            if kind == "end":
                open_tasks -= 1
            elif kind == "error":
                failures.append(item)
                say(f"ray: a task failed: {item}")
            else:
                a = arms[item["entry"]]
                key = (item["set"], item["conversation"], item["turn"], item["reply"])
                if key in a.done:
                    dropped += 1
                    continue
                row = ReplyRow(**{**item, "fingerprint": a.digest})
                a.store.append(row)
                a.done[key] = asdict(row)
                if on_reply is not None:
                    on_reply(row)
                say(f"ray: {row.entry} {'/'.join(map(str, key))} from node {row.node[:12]}: "
                    f"{row.completion_tokens} tokens, {row.decode_tps:.1f} tok/s")
    summaries = _summaries(arms, t_start, write=True)
    if dropped:
        say(f"ray: {dropped} row(s) for replies already stored were dropped")
    if failures:
        missing = {e: s.n_expected - s.n_replies for e, s in zip(unit.entries, summaries,
                                                                   strict=True)}
        msg = (f"{len(failures)} task(s) failed ({'; '.join(failures)}); stored "
               f"{sum(len(a.done) - stored_before[e] for e, a in arms.items())} new replies; "
               f"missing: {missing}. Rerun the same command: it resumes them on the nodes alive")
        for a in arms.values():
            write_run_json(a.out_dir / CRASH_FILE, {"error": msg, "time": time.time()})
        raise RunError(msg)
    return summaries


def _summaries(arms: dict[str, Any], t_start: float, *, write: bool) -> list[ArmSummary]:
    from adaspark.runs.store import SUMMARY_FILE, write_run_json

    out = []
    for a in arms.values():
        s = summarize(a.entry, a.arm.engine, a.out_dir, a.store.rows(), a.n_expected,
                      a.resumed_from, time.monotonic() - t_start)
        if write or not (a.out_dir / SUMMARY_FILE).exists():
            write_run_json(a.out_dir / SUMMARY_FILE, asdict(s))
        out.append(s)
    return out
