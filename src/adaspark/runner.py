"""The conversation runner: one arm over a subset of the test set, over HTTP (§4.1, Appendix A).

The protocol (Appendix A): "multi-turn conversations over each engine's HTTP API, with each
engine's own replies carried as history". For each conversation of the subset, in the published
order, the turns go in order; each reply runs to its end or to the run's cap. A turn with a
recorded tool result (ToolACE) gives two timed replies when the model calls a tool: the call, and
the answer after the recorded result is returned; "when the model answers without calling, the
second reply does not run". When one reply makes several calls and the recorded result is a JSON
list with one entry per call, each call gets its entry; otherwise each call gets the whole
recorded result (our choice; the paper does not say).

Per reply one row (:class:`ReplyRow`), appended to ``replies.parquet`` in the run's directory as
soon as the reply ends, atomically (a new file replaces the old). A killed run resumes at the
first missing reply: replies already written are not sent again, and their stored text and tool
calls rebuild the history. ``run.json`` holds the run's fingerprint (engine binary, model files,
arm and run config); a run refuses to append to results with another fingerprint.

Statuses (HARNESS "Caps and loops", "Client clock"): ``looped`` (reached the protocol cap of
8,192 tokens), ``single-delta`` (at most one token event), ``cut`` (reached the run's shorter
cap, or the context), ``finished``; the first that applies, in that order.

Resumes and text. A resumed run's new server has none of the conversation in its cache. Our
engine's KV does not depend on that (:class:`adaspark.engine.Target`, "Prefill and history"), so a
resumed reply is the one an uninterrupted run makes, in fast mode too. llama-server keeps its own
prompt cache, whose cells its verify batches wrote, and a fresh one has none: there a reply a
resumed run makes (mid-conversation, or the next conversation's first, whose system prompt the
uninterrupted server had cached) can differ from its uninterrupted twin at a near tie (fast
kernels). Rows a resumed run made carry ``after_resume = 1``; the check stage counts them.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import signal
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
from omegaconf import DictConfig, OmegaConf

from adaspark import paths
from adaspark.client import ChatClient, Reply, ServerReplyError
from adaspark.config import ConfigError
from adaspark.llama_server import ServerProcess
from adaspark.schema import check_group, spec
from adaspark.stats import CUT, FINISHED, LOOPED, SINGLE_DELTA
from adaspark.testset import Conversation, SetFile, load_checked_sets, make_subset
from adaspark.testset.subsets import SUBSETS

#: The protocol cap (§4.1): a reply that reaches it is a loop.
PROTOCOL_CAP = 8192
ROWS_FILE = "replies.parquet"
RUN_FILE = "run.json"
SUMMARY_FILE = "summary.json"
CRASH_FILE = "crash.json"


class RunError(RuntimeError):
    """A run cannot start or continue; the message says why and what to do."""


class RunConfigError(RunError, ConfigError):
    """A value of the ``run`` group (or ``run_arms``) of the wrong type or out of range."""


class RunMismatchError(RunError):
    """The run directory holds results made by another binary, model file, config, test set or
    decoding code."""


# ---------------------------------------------------------------------------------------------
# Settings and arm entries


@dataclass
class RunSettings:
    """The ``run`` config group (``conf/run/default.yaml``); see that file for each key. The
    fields' metadata are their ranges and choices (:mod:`adaspark.schema`)."""

    subset: str = spec(choices=tuple(SUBSETS), default="short")
    cap: int = spec(min=1, default=128)
    protocol_cap: int = spec(min=1, default=PROTOCOL_CAP)
    exact: bool = False
    host: str = "127.0.0.1"
    port: int = spec(min=0, max=65535, default=0)
    testset: str = "runs/testset"
    chat_template: str | None = None
    tool_fallback: str = spec(choices=("generic", "none"), default="generic")
    round_log: bool = False
    warmup: bool = True
    startup_timeout_s: float = spec(min=1, default=900.0)
    request_timeout_s: float = spec(min=1, default=7200.0)

    @classmethod
    def check(cls, section: Any) -> RunSettings:
        """The section checked against the fields' types, ranges and choices."""
        try:
            return check_group(cls, section, "run", extra="refuse")
        except RunConfigError:
            raise
        except ConfigError as e:
            raise RunConfigError(str(e)) from None

    @classmethod
    def from_config(cls, cfg: Any) -> RunSettings:
        """From a composed config's ``run`` section (a mapping or a DictConfig)."""
        section = cfg.get("run") if hasattr(cfg, "get") else None
        if section is None:
            raise RunError(
                "the config has no `run` section: add `- run: default` to the defaults list of "
                "conf/config.yaml (then regenerate params.yaml with `adaspark config "
                "format=yaml > params.yaml`), or pass +run=default")
        return cls.check(section)

    @property
    def max_tokens(self) -> int:
        return min(self.cap, self.protocol_cap)

    def testset_dir(self) -> Path:
        return paths.from_cwd_or_repo(self.testset)


@dataclass(frozen=True)
class ArmEntry:
    """An entry of ``run_arms``: an arm name, optionally ``@repeat`` (``adaspark@2``)."""

    entry: str
    name: str
    repeat: int

    @classmethod
    def parse(cls, entry: str) -> ArmEntry:
        name, at, rep = entry.partition("@")
        if at and not rep.isdigit():
            raise RunError(f"arm entry {entry!r}: the repeat after @ must be a number")
        return cls(entry, name, int(rep) if at else 1)


def arm_config(cfg: Any, entry: ArmEntry) -> dict[str, Any]:
    """The arm's config from ``arms.<entry>`` or ``arms.<name>``."""
    arms = cfg.get("arms") or {}
    for key in (entry.entry, entry.name):
        if key in arms:
            a = arms[key]
            d = OmegaConf.to_container(a, resolve=True) if isinstance(a, DictConfig) else dict(a)
            assert isinstance(d, dict)
            return d
    raise RunError(f"no arm {entry.entry!r} under `arms:` in the config; it has {sorted(arms)}. "
                   f"Add `- arm@arms.{entry.name}: {entry.name}` to conf/config.yaml's defaults")


def rule_options(arm: dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments the arm gives its width rule (flat keys or a ``rule:`` mapping)."""
    from adaspark.arms import rule_kwargs

    return rule_kwargs(OmegaConf.create(arm))


def is_speculative(arm: dict[str, Any]) -> bool:
    """Whether the arm drafts (llama-server: a ``spec_type``; ours: its rule uses a drafter)."""
    if arm.get("engine") == "llama-server":
        return (arm.get("server") or {}).get("spec_type") not in (None, "none")
    from adaspark.arms import make_arm_rule

    opts = rule_options(arm)
    extra = {k: None for k in ("store", "log_dir") if k in opts}
    return bool(make_arm_rule(OmegaConf.create(arm), None, **extra).uses_drafter)


def uses_scheduler_constants(arm: dict[str, Any]) -> bool:
    """Whether the arm's rule takes the ``scheduler`` group (as ``arms.build`` decides)."""
    import inspect

    from adaspark.arms import _register_scheduler
    from adaspark.width_rules import WIDTH_RULES

    if arm.get("engine", "ours") != "ours":
        return False
    _register_scheduler()
    rule = WIDTH_RULES.get(str(arm.get("width_rule")))
    return rule is not None and "scheduler" in inspect.signature(rule).parameters


# ---------------------------------------------------------------------------------------------
# Rows


@dataclass
class ReplyRow:
    """One timed reply (stats columns first; see :mod:`adaspark.stats`)."""

    arm: str
    repeat: int
    set: str
    conversation: str
    turn: int                 # 0-based index of the user turn in the conversation
    reply: int                # 0, or 1 for the answer after a tool result
    status: str               # finished | cut | looped | single-delta
    decode_tps: float         # client clock; NaN when single-delta
    completion_tokens: int
    prompt_tokens: int
    entry: str                # the run_arms entry (adaspark@2)
    engine: str               # ours | llama-server
    kind: str                 # the turn's category
    reply_kind: str           # reply | tool-call | after-tool-result
    ttft_s: float
    decode_s: float
    n_token_events: int
    n_chunks: int
    finish_reason: str
    max_tokens: int
    text: str
    text_sha256: str
    tool_calls: str           # JSON list of calls (OpenAI form)
    n_tool_calls: int
    server_rounds: float      # NaN when the server does not say (llama-server)
    server_drafted: int
    server_accepted: int
    server_width1_rounds: float
    server_cache_n: float
    server_decode_ms: float
    timings: str              # the server's timings object, JSON
    after_resume: int         # 1: made by the server of a resumed run (replies were stored
                              # before it started; see the module docstring)
    fingerprint: str
    wall_time: str

    @property
    def key(self) -> tuple[str, str, int, int]:
        return (self.set, self.conversation, self.turn, self.reply)


_ARROW = {int: pa.int64(), float: pa.float64(), str: pa.string(),
          "int": pa.int64(), "float": pa.float64(), "str": pa.string()}
ROW_SCHEMA = pa.schema([(f.name, _ARROW[f.type]) for f in fields(ReplyRow)])


def _nan(v: Any) -> float:
    return float("nan") if v is None else float(v)


def reply_status(reply: Reply, max_tokens: int, protocol_cap: int) -> str:
    """See the module docstring for the order."""
    hit = reply.finish_reason == "length" or reply.completion_tokens >= max_tokens
    if hit and reply.completion_tokens >= protocol_cap:
        return LOOPED
    if reply.single_delta:
        return SINGLE_DELTA
    if hit:
        return CUT
    return FINISHED


def make_row(reply: Reply, *, entry: ArmEntry, engine: str, set_name: str, conv: Conversation,
             turn: int, reply_index: int, max_tokens: int, protocol_cap: int,
             fingerprint: str, after_resume: bool = False) -> ReplyRow:
    t = reply.timings or {}
    status = reply_status(reply, max_tokens, protocol_cap)
    tps = reply.decode_tps
    kind = ("after-tool-result" if reply_index == 1
            else "tool-call" if reply.tool_calls else "reply")
    return ReplyRow(
        arm=entry.name, repeat=entry.repeat, set=set_name, conversation=conv.name, turn=turn,
        reply=reply_index, status=status,
        decode_tps=float("nan") if tps is None or status == SINGLE_DELTA else float(tps),
        completion_tokens=reply.completion_tokens, prompt_tokens=reply.prompt_tokens,
        entry=entry.entry, engine=engine, kind=conv.turns[turn].kind, reply_kind=kind,
        ttft_s=_nan(reply.ttft_s), decode_s=_nan(reply.decode_s),
        n_token_events=reply.n_token_events, n_chunks=reply.n_chunks,
        finish_reason=str(reply.finish_reason), max_tokens=max_tokens, text=reply.text,
        text_sha256=hashlib.sha256(reply.text.encode("utf-8")).hexdigest(),
        tool_calls=json.dumps(reply.tool_calls, ensure_ascii=False),
        n_tool_calls=len(reply.tool_calls),
        server_rounds=_nan(t.get("rounds")), server_drafted=int(t.get("draft_n") or 0),
        server_accepted=int(t.get("draft_n_accepted") or 0),
        server_width1_rounds=_nan(t.get("width1_rounds")), server_cache_n=_nan(t.get("cache_n")),
        server_decode_ms=_nan(t.get("predicted_ms")),
        timings=json.dumps(t, ensure_ascii=False, default=str),
        after_resume=int(after_resume), fingerprint=fingerprint,
        wall_time=datetime.now(UTC).isoformat(timespec="seconds"),
    )


def row_message(row: dict[str, Any]) -> dict[str, Any]:
    """A stored reply as the assistant message it was carried as."""
    calls = json.loads(row["tool_calls"]) if row.get("tool_calls") else []
    msg: dict[str, Any] = {"role": "assistant", "content": row["text"]}
    if calls:
        msg["tool_calls"] = calls
        if not row["text"]:
            msg["content"] = None
    return msg


def tool_result_messages(calls: list[dict[str, Any]], result: str) -> list[dict[str, Any]]:
    """The recorded result returned for the reply's calls (see the module docstring)."""
    parts: list[str] = [result] * len(calls)
    if len(calls) > 1:
        try:
            items = json.loads(result)
        except json.JSONDecodeError:
            items = None
        if isinstance(items, list) and len(items) == len(calls):
            parts = [json.dumps(x, ensure_ascii=False) for x in items]
    return [{"role": "tool", "tool_call_id": c.get("id") or f"call_{i}",
             "name": (c.get("function") or {}).get("name", ""), "content": p}
            for i, (c, p) in enumerate(zip(calls, parts, strict=True))]


# ---------------------------------------------------------------------------------------------
# The results directory


def _flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(d, dict):
        out: dict[str, Any] = {}
        for k, v in d.items():
            out.update(_flatten(v, f"{prefix}{k}."))
        return out
    return {prefix.rstrip("."): d}


def corrupt_file_message(path: Path, error: Any) -> str:
    """What to say about a run directory's file that cannot be read."""
    return (f"{path} cannot be read ({error}): it is damaged or not a file a run wrote. Delete "
            f"it (or the whole directory {path.parent}) to run again from the start, or use "
            "another output directory")


class ResultStore:
    """``replies.parquet`` and ``run.json`` of one run directory."""

    def __init__(self, out_dir: Path) -> None:
        self.dir = Path(out_dir)
        self.rows_path = self.dir / ROWS_FILE
        self.run_path = self.dir / RUN_FILE

    def fingerprint_check(self, fingerprint: dict[str, Any]) -> str:
        """Create ``run.json`` or check it; return the fingerprint's hash."""
        digest = hashlib.sha256(json.dumps(fingerprint, sort_keys=True, default=str)
                                .encode()).hexdigest()[:16]
        self.dir.mkdir(parents=True, exist_ok=True)
        if self.run_path.exists():
            old = self.run_meta()
            if old.get("fingerprint_sha256") != digest:
                a, b = _flatten(old.get("fingerprint", {})), _flatten(fingerprint)
                diffs = [f"{k}: {a.get(k)!r} -> {b.get(k)!r}" for k in sorted(set(a) | set(b))
                         if a.get(k) != b.get(k)]
                raise RunMismatchError(
                    f"{self.dir} holds results made with another binary, model file, config, "
                    "test set or decoding code; a run does not append to them. What changed:"
                    "\n  " + "\n  ".join(diffs)
                    + f"\nUse another output directory, or delete {self.dir} to start over.")
        elif self.rows_path.exists():
            raise RunMismatchError(f"{self.rows_path} exists without {self.run_path}: its origin "
                                   "is unknown. Delete it, or use another output directory.")
        else:
            from adaspark.provenance import git_state

            self._write_json(self.run_path, {"fingerprint": fingerprint,
                                             "fingerprint_sha256": digest,
                                             "created": datetime.now(UTC).isoformat(),
                                             "git": git_state()})
        return digest

    def note(self, **extra: Any) -> None:
        """Add keys to ``run.json`` (server metadata, resumes)."""
        d = self.run_meta()
        d.update(extra)
        self._write_json(self.run_path, d)

    @staticmethod
    def _write_json(path: Path, obj: Any) -> None:
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(obj, indent=1, ensure_ascii=False, default=str) + "\n")
        os.replace(tmp, path)

    def run_meta(self) -> dict[str, Any]:
        """``run.json``; a :class:`RunError` naming the file when it is not a JSON object."""
        try:
            d = json.loads(self.run_path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise RunError(corrupt_file_message(self.run_path, e)) from None
        if not isinstance(d, dict):
            raise RunError(corrupt_file_message(self.run_path, "not a JSON object"))
        return d

    def table(self) -> pa.Table:
        if not self.rows_path.exists():
            return ROW_SCHEMA.empty_table()
        try:
            return pq.read_table(self.rows_path)
        except (pa.ArrowException, OSError) as e:
            raise RunError(corrupt_file_message(self.rows_path, e)) from None

    def rows(self) -> list[dict[str, Any]]:
        return self.table().to_pylist()

    def append(self, row: ReplyRow) -> None:
        """Append one row: the old rows and the new one go to a temporary file that then
        replaces ``replies.parquet`` (a reader sees the old or the new file, never half)."""
        new = pa.Table.from_pylist([asdict(row)], schema=ROW_SCHEMA)
        old = self.table()
        table = pa.concat_tables([old.cast(ROW_SCHEMA), new]) if old.num_rows else new
        tmp = self.rows_path.with_name(ROWS_FILE + ".tmp")
        pq.write_table(table, tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, self.rows_path)


# ---------------------------------------------------------------------------------------------
# What a run covers


@dataclass
class Planned:
    """One conversation of the subset: its set, the conversation, how many turns."""

    set_name: str
    conversation: Conversation
    n_turns: int
    n_timed: int


def plan_subset(sets: list[SetFile], subset: str) -> list[Planned]:
    from adaspark.testset.subsets import SUBSETS

    if subset not in SUBSETS:
        raise RunError(f"run.subset={subset!r} names no subset; the subsets are "
                       f"{sorted(SUBSETS)} (adaspark.testset.subsets)")
    by_name = {s.name: s for s in sets}
    sub = make_subset(subset, sets)
    return [Planned(i.set_name, by_name[i.set_name].conversation(i.conversation), i.n_turns,
                    i.n_timed) for i in sub.items]


def conversation_sha256(p: Planned) -> str:
    """What a conversation's replies are made from, exactly: the text, kind and recorded tool
    result of each planned turn, and the tools offered (not the stored hash of the set file)."""
    turns = [{"kind": t.kind, "text": t.text, "result": t.result}
             for t in p.conversation.turns[: p.n_turns]]
    doc = {"turns": turns, "tools": p.conversation.tools}
    return hashlib.sha256(json.dumps(doc, sort_keys=True, ensure_ascii=False)
                          .encode("utf-8")).hexdigest()


def conversation_done(p: Planned, done: dict[tuple[str, str, int, int], dict[str, Any]]) -> bool:
    """Every reply of the conversation is stored (a tool turn's second reply only when the
    stored first reply called a tool)."""
    for ti, turn in enumerate(p.conversation.turns[: p.n_turns]):
        r0 = done.get((p.set_name, p.conversation.name, ti, 0))
        if r0 is None:
            return False
        if turn.result is not None and r0.get("n_tool_calls", 0) > 0 and \
                (p.set_name, p.conversation.name, ti, 1) not in done:
            return False
    return True


# ---------------------------------------------------------------------------------------------
# Progress


class ProgressView:
    """A progress display per arm and conversation (rich on a terminal, one line per reply
    otherwise), and the summary table at the end."""

    def __init__(self, stream: Any = None) -> None:
        from rich.console import Console

        self.console = Console(file=stream or sys.stderr)
        self.live = self.console.is_terminal
        if not self.live:  # a log file: wide enough for the summary table
            self.console = Console(file=stream or sys.stderr, width=150)
        self._progress: Any = None
        self._arm_task: Any = None
        self._conv_task: Any = None

    def __enter__(self) -> ProgressView:
        if self.live:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
            )

            self._progress = Progress(TextColumn("{task.description}"), BarColumn(),
                                      MofNCompleteColumn(), TimeElapsedColumn(),
                                      console=self.console, transient=False)
            self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()

    def arm(self, entry: str, total: int, done: int) -> None:
        if self._progress is not None:
            self._arm_task = self._progress.add_task(f"[bold]{entry}", total=total,
                                                     completed=done)
        else:
            self.console.print(f"run {entry}: {done} of {total} timed replies stored")

    def conversation(self, entry: str, name: str, total: int) -> None:
        if self._progress is not None:
            if self._conv_task is not None:
                self._progress.remove_task(self._conv_task)
            self._conv_task = self._progress.add_task(f"  {name}", total=total)

    def reply(self, entry: str, row: ReplyRow | None, advance: int = 1) -> None:
        if self._progress is not None:
            self._progress.advance(self._arm_task, advance)
            if self._conv_task is not None:
                self._progress.advance(self._conv_task, advance)
        elif row is not None:
            tps = "-" if math.isnan(row.decode_tps) else f"{row.decode_tps:.1f} tok/s"
            self.console.print(f"  {entry} {row.set}/{row.conversation} turn {row.turn} "
                               f"reply {row.reply}: {row.completion_tokens} tokens, {tps}, "
                               f"{row.status}", highlight=False)

    def log(self, text: str) -> None:
        self.console.print(text, highlight=False)


@dataclass
class ArmSummary:
    """What one arm's run produced (``summary.json``)."""

    entry: str
    engine: str
    out_dir: str
    n_replies: int
    n_expected: int
    statuses: dict[str, int] = field(default_factory=dict)
    completion_tokens: int = 0
    tokens_per_s: float = float("nan")
    median_ttft_s: float = float("nan")
    drafted: int = 0
    accepted: int = 0
    resumed_from: int = 0
    wall_s: float = 0.0


def summarize(entry: ArmEntry, engine: str, out_dir: Path, rows: list[dict[str, Any]],
              n_expected: int, resumed_from: int, wall_s: float) -> ArmSummary:
    import numpy as np
    import pandas as pd

    from adaspark import stats

    s = ArmSummary(entry.entry, engine, str(out_dir), len(rows), n_expected,
                   resumed_from=resumed_from, wall_s=wall_s)
    if not rows:
        return s
    df = pd.DataFrame(rows)
    s.statuses = {k: int(v) for k, v in df["status"].value_counts().items()}
    s.completion_tokens = int(df["completion_tokens"].sum())
    s.drafted = int(df["server_drafted"].sum())
    s.accepted = int(df["server_accepted"].sum())
    s.median_ttft_s = float(np.nanmedian(df["ttft_s"])) if df["ttft_s"].notna().any() \
        else float("nan")
    try:
        s.tokens_per_s = stats.arm_throughput(df, entry.name).tokens_per_s
    except stats.StatsInputError:
        pass
    return s


def summary_table(summaries: list[ArmSummary]) -> Any:
    """One screen: a row per arm."""
    from rich.table import Table

    t = Table(title="runs", show_lines=False)
    for col in ("arm", "engine", "replies", "finished", "cut", "looped", "single-delta",
                "tokens", "decode tok/s", "median TTFT s", "accepted/drafted"):
        t.add_column(col, justify="left" if col in ("arm", "engine") else "right")
    for s in summaries:
        acc = f"{s.accepted}/{s.drafted}" if s.drafted else "-"
        t.add_row(s.entry, s.engine, f"{s.n_replies}/{s.n_expected}",
                  *(str(s.statuses.get(k, 0)) for k in (FINISHED, CUT, LOOPED, SINGLE_DELTA)),
                  str(s.completion_tokens),
                  "-" if math.isnan(s.tokens_per_s) else f"{s.tokens_per_s:.1f}",
                  "-" if math.isnan(s.median_ttft_s) else f"{s.median_ttft_s:.2f}", acc)
    return t


# ---------------------------------------------------------------------------------------------
# Launching the arm's server


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    """Linux: the server gets SIGTERM if the run process dies (even by SIGKILL)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def engine_of(arm: dict[str, Any]) -> str:
    engine = arm.get("engine", "ours")
    if engine not in ("ours", "llama-server"):
        raise RunError(f"arm {arm.get('name')}: engine must be `ours` or `llama-server`, not "
                       f"{engine!r}")
    return str(engine)


def fingerprint(cfg: Any, arm: dict[str, Any], settings: RunSettings,
                plan: list[Planned]) -> dict[str, Any]:
    """What must not change between a run's replies: the engine binary, the model files, the
    arm's and the run's config, the exact conversations the replies are made from (a hash per
    conversation, :func:`conversation_sha256`) and the project's decoding code
    (:func:`adaspark.provenance.code_fingerprint`)."""
    from adaspark import model_files, provenance

    engine = engine_of(arm)
    arm_fp = json.loads(json.dumps(arm, default=str))
    for k in ("store", "log_dir"):  # where the run keeps them, not what it runs
        arm_fp.pop(k, None)
        (arm_fp.get("rule") or {}).pop(k, None)
    tpath, tsha = model_files.resolve(cfg.target)
    models: dict[str, Any] = {"target": {"file": tpath.name, "sha256": tsha or
                                         model_files.recorded_sha256(tpath),
                                         "n_ctx": int(cfg.target.n_ctx)}}
    if is_speculative(arm):
        dpath, dsha = model_files.resolve(cfg.drafter)
        dcfg = OmegaConf.to_container(cfg.drafter, resolve=True) \
            if isinstance(cfg.drafter, DictConfig) else dict(cfg.drafter)
        assert isinstance(dcfg, dict)
        models["drafter"] = {"file": dpath.name,
                             "sha256": dsha or model_files.recorded_sha256(dpath),
                             **{k: dcfg.get(k) for k in ("kind", "block_positions", "top_k",
                                                         "n_ctx")}}
    if engine == "llama-server":
        from adaspark import llama_server

        info = llama_server.binary_info()
        binary = {"llama_server_sha256": info["sha256"], "version": info["version"]}
    else:
        b = provenance.llama_build()
        binary = {"libllama_sha256": b.get("libllama_sha256"),
                  "llama_cpp_python": b.get("llama_cpp_python")}
    template = None
    if settings.chat_template:
        template = hashlib.sha256(Path(settings.chat_template).read_bytes()).hexdigest()
    preset = cfg.get("preset")
    run = {"subset": settings.subset, "cap": settings.cap, "protocol_cap": settings.protocol_cap,
           "chat_template_sha256": template,
           "preset": preset.get("name") if hasattr(preset, "get") else preset}
    if engine == "ours":
        run["exact"] = settings.exact
        run["tool_fallback"] = settings.tool_fallback
    out = {"engine": engine, "binary": binary, "models": models, "arm": arm_fp, "run": run,
           "threads": cfg.get("threads"),
           "conversations": {f"{q.set_name}/{q.conversation.name}": conversation_sha256(q)
                             for q in plan},
           "code": provenance.code_fingerprint()}
    if uses_scheduler_constants(arm) and cfg.get("scheduler") is not None:
        sch = cfg.get("scheduler")
        out["scheduler"] = OmegaConf.to_container(sch, resolve=True) \
            if isinstance(sch, DictConfig) else sch
    return out


def launch(cfg: Any, entry: ArmEntry, arm: dict[str, Any], out_dir: Path,
           settings: RunSettings) -> ServerProcess:
    """A :class:`~adaspark.llama_server.ServerProcess` (not started) serving the arm."""
    from adaspark import llama_server
    from adaspark.server import free_port

    port = settings.port or free_port(settings.host)
    # The server runs from the checkout (paths.checkout_root); hand it absolute paths.
    out_dir = out_dir.resolve()
    template = Path(settings.chat_template).resolve() if settings.chat_template else None
    if engine_of(arm) == "llama-server":
        spec = llama_server.spec_from_config(cfg, OmegaConf.create(arm), port=port,
                                             host=settings.host, chat_template_file=template)
        proc = llama_server.llama_server_process(
            spec, out_dir / "server.log", startup_timeout_s=settings.startup_timeout_s,
            preexec=_die_with_parent)
    else:
        snapshot = {k: cfg.get(k) for k in ("target", "drafter", "threads", "scheduler")}
        snapshot = {k: (OmegaConf.to_container(v, resolve=True) if isinstance(v, DictConfig)
                        else v) for k, v in snapshot.items()}
        snapshot["arms"] = {entry.entry: arm}
        snapshot["exact"] = settings.exact
        params = out_dir / "server-params.yaml"
        OmegaConf.save(OmegaConf.create(snapshot), params)
        argv = [sys.executable, "-m", "adaspark.server", "--params", str(params),
                "--arm", entry.entry, "--host", settings.host, "--port", str(port),
                "--store", str(out_dir / "store"), "--exact" if settings.exact else "--fast"]
        if template is not None:
            argv += ["--chat-template", str(template)]
        if settings.round_log:
            argv += ["--round-log", str(out_dir / "rounds")]
        if not settings.warmup:
            argv.append("--no-warmup")
        argv += ["--tool-fallback", settings.tool_fallback]
        proc = llama_server.ServerProcess(
            argv, port=port, host=settings.host, log_path=out_dir / "server.log",
            env=llama_server.clean_env(exact=settings.exact),
            startup_timeout_s=settings.startup_timeout_s, cwd=paths.checkout_root(),
            preexec=_die_with_parent)
    return proc


# ---------------------------------------------------------------------------------------------
# Running


def reply_id(set_name: str, conversation: str, turn: int, reply: int) -> str:
    """The request id a reply is sent with (names its per-round log part and its summary)."""
    return f"{set_name}.{conversation}.{turn}.{reply}"


def _timed_replies(client: ChatClient, p: Planned, done: dict[tuple[str, str, int, int],
                   dict[str, Any]], *, max_tokens: int) -> Iterator[tuple[int, int, Reply | None,
                                                                           dict[str, Any]]]:
    """Walk one conversation: yield ``(turn, reply, Reply or None when stored, message)``."""
    conv = p.conversation
    messages: list[dict[str, Any]] = []

    def reply(ti: int, ri: int) -> tuple[Reply | None, dict[str, Any]]:
        """Reply ``ri`` of turn ``ti``: the stored row's message, or a timed request now."""
        stored = done.get((p.set_name, conv.name, ti, ri))
        if stored is not None:
            return None, row_message(stored)
        r = client.chat(messages, max_tokens=max_tokens, tools=conv.tools,
                        request_id=reply_id(p.set_name, conv.name, ti, ri))
        return r, r.message()

    for ti, turn in enumerate(conv.turns[: p.n_turns]):
        messages.append({"role": "user", "content": turn.text})
        r0, msg0 = reply(ti, 0)
        yield ti, 0, r0, msg0
        messages.append(msg0)
        if turn.result is None or not msg0.get("tool_calls"):
            continue
        messages += tool_result_messages(msg0["tool_calls"], turn.result)
        r1, msg1 = reply(ti, 1)
        yield ti, 1, r1, msg1
        messages.append(msg1)


def run_arm(cfg: Any, entry_text: str, out_dir: Path, settings: RunSettings, *,
            sets: list[SetFile] | None = None, view: ProgressView | None = None,
            on_reply: Callable[[ReplyRow], None] | None = None,
            on_mismatch: str = "refuse") -> ArmSummary:
    """Run one arm over the settings' subset into ``out_dir`` (resuming what is there).

    ``on_mismatch``: what to do when ``out_dir`` holds results with another fingerprint:
    ``refuse`` (raise :class:`RunMismatchError`) or ``restart`` (delete them, saying what
    changed, and run from the start: what DVC does to a changed stage's outputs).
    """
    if on_mismatch not in ("refuse", "restart"):
        raise RunError(f"on_mismatch must be 'refuse' or 'restart', not {on_mismatch!r}")
    t_start = time.monotonic()
    entry = ArmEntry.parse(entry_text)
    arm = arm_config(cfg, entry)
    engine = engine_of(arm)
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise RunError(f"the run directory {out_dir} is a file: name a directory (created when "
                       "missing) for the arm's results")
    # Everything that can be refused is checked before run.json is written, so that a bad
    # subset or test set leaves no directory that a corrected rerun would have to clear.
    if sets is None:
        sets = load_checked_sets(settings.testset_dir())
    plan = plan_subset(sets, settings.subset)
    store = ResultStore(out_dir)
    fp = fingerprint(cfg, arm, settings, plan)
    try:
        digest = store.fingerprint_check(fp)
    except RunMismatchError as e:
        if on_mismatch == "refuse":
            raise
        print(f"run {entry.entry}: starting over. {e}", file=sys.stderr)
        shutil.rmtree(out_dir)
        digest = store.fingerprint_check(fp)
    n_expected = sum(p.n_timed for p in plan)
    rows = store.rows()
    done = {(r["set"], r["conversation"], r["turn"], r["reply"]): r for r in rows}
    resumed_from = len(done)
    own_view = view is None
    view = view or ProgressView()
    pending = [p for p in plan if not conversation_done(p, done)]
    (out_dir / CRASH_FILE).unlink(missing_ok=True)
    try:
        with view if own_view else _nullcontext():
            view.arm(entry.entry, n_expected,
                     sum(p.n_timed for p in plan if not any(p is q for q in pending)))
            if pending:
                proc = launch(cfg, entry, arm, out_dir, settings)
                with proc, ChatClient(proc.url,
                                                timeout_s=settings.request_timeout_s) as client:
                    meta = client.models()
                    store.note(server={"url": proc.url, "argv": proc.argv, "models": meta,
                                       "pid": proc.proc.pid if proc.proc else None},
                               resumes=_resumes(store, resumed_from))
                    for p in pending:
                        view.conversation(entry.entry, f"{p.set_name}/{p.conversation.name}",
                                          p.n_timed)
                        n_conv = 0
                        walk = _timed_replies(client, p, done, max_tokens=settings.max_tokens)
                        while True:
                            try:
                                ti, ri, reply, _msg = next(walk)
                            except StopIteration:
                                break
                            except (httpx.HTTPError, ServerReplyError) as e:
                                raise RunError(
                                    f"{entry.entry}: a request to {proc.url} failed ({e}); the "
                                    f"server log {proc.log_path} ends:\n{proc.log_tail()}"
                                ) from e
                            n_conv += 1
                            if reply is None:
                                view.reply(entry.entry, None)
                                continue
                            row = make_row(reply, entry=entry, engine=engine,
                                           set_name=p.set_name, conv=p.conversation, turn=ti,
                                           reply_index=ri, max_tokens=settings.max_tokens,
                                           protocol_cap=settings.protocol_cap,
                                           fingerprint=digest, after_resume=resumed_from > 0)
                            store.append(row)
                            done[row.key] = asdict(row)
                            view.reply(entry.entry, row)
                            if on_reply is not None:
                                on_reply(row)
                        if n_conv < p.n_timed:  # a tool turn answered without a call
                            view.reply(entry.entry, None, p.n_timed - n_conv)
    except BaseException as e:
        store._write_json(out_dir / CRASH_FILE, {
            "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc(),
            "time": datetime.now(UTC).isoformat()})
        raise
    summary = summarize(entry, engine, out_dir, store.rows(), n_expected, resumed_from,
                        time.monotonic() - t_start)
    store._write_json(out_dir / SUMMARY_FILE, asdict(summary))
    return summary


def _resumes(store: ResultStore, resumed_from: int) -> list[dict[str, Any]]:
    d = store.run_meta()
    resumes = list(d.get("resumes", []))
    from adaspark.provenance import git_state

    resumes.append({"time": datetime.now(UTC).isoformat(), "stored_replies": resumed_from,
                    "git": git_state()})
    return resumes


class _nullcontext:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def run_arms(cfg: Any, entries: list[str], out_root: Path, settings: RunSettings, *,
             stream: Any = None) -> list[ArmSummary]:
    """Several arms one after the other (``adaspark run``, the benchmark), one table at the
    end."""
    sets = load_checked_sets(settings.testset_dir())
    summaries = []
    with ProgressView(stream) as view:
        for e in entries:
            summaries.append(run_arm(cfg, e, out_root / e, settings, sets=sets, view=view))
        view.console.print(summary_table(summaries))
    return summaries


def compose_for_run(args: list[str]) -> DictConfig:
    """Compose ``conf/`` for a standalone run (``adaspark run``, the benchmark): adds the ``run``
    group when the defaults list lacks it, and every arm named in ``run_arms`` that is not
    composed under ``arms.`` yet (``+arm@arms.<name>=<name>``)."""
    from adaspark.config import compose

    base = compose([a for a in args if a.startswith("run_arms=")])
    extra = [] if "run" in base else ["+run=default"]
    cfg = compose(extra + args)
    missing = [ArmEntry.parse(str(e)).name for e in cfg.get("run_arms") or []]
    missing = [m for m in dict.fromkeys(missing) if m not in (cfg.get("arms") or {})]
    if missing:
        cfg = compose(extra + [f"+arm@arms.{m}={m}" for m in missing] + args)
    return cfg
