"""Every arm's round trace: one Parquet file per request, one row per round.

``adaspark run ... run.round_log=true`` has our server write, for every arm of our engine (any
width rule, with or without a log of its own), ``<arm dir>/trace/<seq>.parquet``: each round's
record (:class:`~adaspark.decoding.round.RoundOutcome`) as a :class:`TraceRow` (anchor position,
rows, accepted drafts, committed tokens and the times the rule was told), with the request's
prompt and reply tokens, cap and stop reason in the file's metadata. It is what a trace-driven
replay (:mod:`adaspark.replay`) reads: the prompts it labels, the rounds it must reproduce and,
under device model ``recorded``, the times it prices them at.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from adaspark.decoding.round import RoundOutcome
from adaspark.io import arrow_schema, write_parquet

TRACE_DIR = "trace"
_META_KEY = b"adaspark.trace"


@dataclass
class TraceRow:
    """One round of a trace file: what a replay reads of a round's record
    (:class:`~adaspark.decoding.round.RoundOutcome`; :meth:`of`)."""

    round_index: int
    anchor_pos: int
    anchor: int
    picks: list[int]
    rows: int
    accepted: int
    committed: int
    verify_s: float
    fixed_s: float
    draft_s: float
    commit_s: float
    round_s: float

    @classmethod
    def of(cls, o: RoundOutcome) -> TraceRow:
        return cls(round_index=o.round_index, anchor_pos=o.anchor_pos, anchor=o.anchor,
                   picks=list(o.picks), rows=o.rows, accepted=o.accepted,
                   committed=len(o.new_tokens), verify_s=o.verify_s, fixed_s=o.fixed_s,
                   draft_s=o.draft_s, commit_s=o.commit_s, round_s=o.round_s)


SCHEMA = arrow_schema(TraceRow)


@dataclass
class RequestTrace:
    """One request as a trace file holds it: ``seq`` is its order in the server's life (the
    order a learning rule saw it in), ``prompt`` and ``tokens`` the prompt's and the reply's token
    ids, ``max_tokens`` its cap, ``stop`` the loop's stop reason, ``rounds`` its rounds."""

    seq: int
    request_id: str | None
    prompt: list[int]
    tokens: list[int]
    max_tokens: int
    stop: str
    exact: bool
    rounds: list[TraceRow] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.seq:06d}"


def write_request(directory: Path, req: RequestTrace) -> Path:
    """Write one request's trace file atomically (``<directory>/<seq>.parquet``)."""
    table = pa.Table.from_pylist([asdict(r) for r in req.rounds], schema=SCHEMA)
    head = {k: v for k, v in asdict(req).items() if k != "rounds"}
    table = table.replace_schema_metadata({_META_KEY: json.dumps(head).encode()})
    return write_parquet(Path(directory) / f"{req.key}.parquet", table)


def read_request(path: Path) -> RequestTrace:
    table = pq.read_table(path)
    raw = (table.schema.metadata or {}).get(_META_KEY)
    if raw is None:
        raise ValueError(f"{path} is not a round-trace file (no {_META_KEY.decode()} metadata): "
                         "trace files are written by `adaspark run ... run.round_log=true`")
    head = json.loads(raw)
    rows = [TraceRow(**r) for r in table.to_pylist()]
    return RequestTrace(**head, rounds=rows)


def read_traces(directory: Path) -> list[RequestTrace]:
    """Every request of a trace directory, in the server's order."""
    files = sorted(Path(directory).glob("*.parquet"))
    return sorted((read_request(f) for f in files), key=lambda r: r.seq)
