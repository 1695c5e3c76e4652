"""The reply-row schema: one row per timed reply (:class:`ReplyRow`), its Arrow schema, and the
reply statuses (HARNESS "Caps and loops", "Client clock"): ``looped`` (reached the protocol cap of
8,192 tokens), ``single-delta`` (at most one token event), ``cut`` (reached the run's shorter cap,
or the context), ``finished``; the first that applies, in that order.

Time columns (seconds, the client's clock unless named ``server_``): ``ttft_s`` from sending the
request to the first token event, ``decode_s`` from the first to the last (so the reply's end to
end time, request to last token, is ``ttft_s + decode_s``); both NaN when the reply had no token
event. ``drafter_prefill_s`` is the drafter's prompt prefill before the first round as the server
reports it (our server's ``timings.drafter_prefill_ms``): 0.0 for our arms without a drafter;
NaN (null) for llama-server's arms, whose ``timings`` do not report it apart (only ``prompt_ms``,
the target's, and ``predicted_ms``), for a reply whose decode failed, and in replies files
written before the column existed (readers take a missing column as all NaN).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Hashable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from adaspark.io import arrow_schema
from adaspark.runs.settings import ArmEntry

if TYPE_CHECKING:  # annotations only: the schema stays importable without the runner's parts
    import pandas as pd

    from adaspark.serving.client import Reply
    from adaspark.testset import Conversation

#: Columns identifying one timed reply across arms and runs.
KEY_COLUMNS: tuple[str, ...] = ("set", "conversation", "turn", "reply")
#: Columns identifying one conversation, the unit the bootstrap resamples (§4.1).
CONVERSATION_COLUMNS: tuple[str, ...] = ("set", "conversation")
#: Columns the statistics read (:mod:`adaspark.analysis.stats`).
REQUIRED_COLUMNS: tuple[str, ...] = (
    "arm",
    "repeat",
    *KEY_COLUMNS,
    "status",
    "decode_tps",
    "completion_tokens",
    "prompt_tokens",
)
FINISHED, CUT, LOOPED, SINGLE_DELTA = "finished", "cut", "looped", "single-delta"
STATUSES: tuple[str, ...] = (FINISHED, CUT, LOOPED, SINGLE_DELTA)

# ---------------------------------------------------------------------------------------------
# Rows


@dataclass
class ReplyRow:
    """One timed reply (stats columns first; see :mod:`adaspark.analysis.stats`)."""

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
    drafter_prefill_s: float  # NaN when the server does not say (see the module docstring)
    timings: str              # the server's timings object, JSON
    after_resume: int         # 1: made by the server of a resumed run (replies were stored
                              # before it started; see the module docstring)
    fingerprint: str
    wall_time: str
    #: the machine that made the reply (:mod:`adaspark.runs.hardware`): the Ray node's id, or
    #: ``local-<host>``; and its hardware fingerprint. Empty in files written before them.
    node: str = ""
    hardware: str = ""
    seed: int = -1            # the reply's sampling seed (-1: greedy decoding)

    @property
    def key(self) -> tuple[str, str, int, int]:
        return (self.set, self.conversation, self.turn, self.reply)


ROW_SCHEMA = arrow_schema(ReplyRow)


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
             fingerprint: str, after_resume: bool = False, seed: int = -1) -> ReplyRow:
    from adaspark.runs.hardware import hardware_fingerprint, node_id

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
        drafter_prefill_s=_nan(t.get("drafter_prefill_ms")) / 1e3,
        timings=json.dumps(t, ensure_ascii=False, default=str),
        after_resume=int(after_resume), fingerprint=fingerprint,
        wall_time=datetime.now(UTC).isoformat(timespec="seconds"),
        node=node_id(), hardware=hardware_fingerprint(), seed=seed,
    )


# ---------------------------------------------------------------------------------------------
# Running


def reply_seed(run_seed: int, request_id: str) -> int:
    """A reply's sampling seed, from the run's (``sampling.seed``) and the reply's key: the same
    reply gets the same seed in every arm and every rerun, and no two replies share one."""
    digest = hashlib.sha256(f"{run_seed}/{request_id}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def reply_id(set_name: str, conversation: str, turn: int, reply: int) -> str:
    """The request id a reply is sent with (names its per-round log part and its summary)."""
    return f"{set_name}.{conversation}.{turn}.{reply}"


def reply_turn(request_id: str | None) -> tuple[str, str, int] | None:
    """``(set, conversation, turn)`` of a request id :func:`reply_id` made, or None for a
    request a run did not name."""
    parts = (request_id or "").split(".")
    if len(parts) < 4 or not parts[-2].isdigit():
        return None
    return ".".join(parts[:-3]), parts[-3], int(parts[-2])


# ---------------------------------------------------------------------------------------------
# An arm's decode speed over its replies


@dataclass(frozen=True)
class ArmThroughput:
    """An arm's aggregate decode speed (Table 4, left): decode tokens over decode time, summed.

    ``tokens_per_s`` is ``decode_tokens / decode_s``; NaN when no reply is left (a dash).
    Only the arm's own looped replies and its single-delta replies are left out; cut replies
    stay in.
    """

    arm: str
    tokens_per_s: float
    decode_tokens: float
    decode_s: float
    n_replies: int
    n_looped_excluded: int
    n_single_delta_excluded: int
    n_cut: int
    group: Hashable | None = None

    def as_dict(self) -> dict[str, Any]:
        """Plain mapping, for a record or a table row."""
        return asdict(self)


def pooled_throughput(speeds: pd.DataFrame, arm: str, group: Hashable | None) -> ArmThroughput:
    """An arm's decode tok/s from one row per reply (``status``, ``completion_tokens`` and the
    reply's ``decode_tps``): decode tokens over decode time, summed (§4.1; the statistics'
    :func:`adaspark.analysis.throughput.arm_throughput` and a run's closing summary)."""
    looped = speeds["status"] == LOOPED
    single = speeds["status"] == SINGLE_DELTA
    kept = speeds[~looped & ~single]
    decode_tokens = (kept["completion_tokens"] - 1.0).clip(lower=0.0)
    decode_s = float((decode_tokens / kept["decode_tps"]).sum())
    tokens = float(decode_tokens.sum())
    return ArmThroughput(
        arm=arm,
        tokens_per_s=tokens / decode_s if decode_s > 0 else float("nan"),
        decode_tokens=tokens,
        decode_s=decode_s,
        n_replies=len(kept),
        n_looped_excluded=int(looped.sum()),
        n_single_delta_excluded=int(single.sum()),
        n_cut=int((kept["status"] == CUT).sum()),
        group=group,
    )
