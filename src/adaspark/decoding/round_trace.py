"""Every arm's round trace: one Parquet file per request, one row per round.

``adaspark run ... run.round_log=true`` has our server write, for every arm of our engine (any
width rule, with or without a log of its own), ``<arm dir>/trace/<seq>.parquet``: each round's
:class:`~adaspark.decoding.loop.RoundTrace` (anchor position, rows, accepted drafts, committed
tokens and the times the rule was told), with the request's prompt and reply tokens, cap and stop
reason in the file's metadata. It is what a trace-driven replay (:mod:`adaspark.replay`) reads:
the prompts it labels, the rounds it must reproduce and, under device model ``recorded``, the
times it prices them at.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from adaspark.decoding.loop import RoundTrace
from adaspark.io import arrow_schema, write_parquet

TRACE_DIR = "trace"
_META_KEY = b"adaspark.trace"


@dataclass
class TraceRow:
    """One round of a trace file (:class:`RoundTrace` with its picks as a list)."""

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


def rows_of(trace: list[RoundTrace]) -> list[TraceRow]:
    return [TraceRow(round_index=i, **(asdict(r) | {"picks": list(r.picks)}))
            for i, r in enumerate(trace)]


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
