"""The scheduler's records: one schema per row, as dataclasses and as pyarrow schemas.

- :class:`RequestSummary`, always (cheap): one per reply. Table 2 and Figure 4 read the log
  losses; §4.6 the cold-start rounds and time.
- :class:`RoundRecord`, only with logging on: one per round (Figures 7-10, Table 7, the
  notebook). :class:`RoundLogWriter` keeps a request's rows in memory and writes them as one
  Parquet file per request into a directory (a dataset: ``pandas.read_parquet(directory)``),
  atomically (:func:`adaspark.io.write_parquet`). With logging off no row object is ever built.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from adaspark.io import arrow_schema, write_parquet


@dataclass
class RoundRecord:
    """One round. Times in seconds; ``s``, ``s_d``, ``s_ng`` are the expected accepted candidates
    of the chosen tree (all, drafter-only, n-gram and agreed) under the round's q."""

    request_id: str
    round_index: int
    context: int
    width: int                       # rows verified (anchor included)
    why: str                         # cold-start | choice | pinned | width1-cold-start | width1
    explored: bool                   # the exploration row replaced the last row
    offered_widths: list[int]
    offered_prices_s: list[float]
    reference_width: int             # n0 of Eq. (7)
    n_candidates: int
    n_ngram_candidates: int
    s: float
    s_d: float
    s_ng: float
    g_d: float
    g_n: float
    g_d_below: float
    g_n_below: float
    rho: float | None                # tokens per second; None: the per-round ratio priced time
    predicted_verify_s: float | None
    measured_verify_s: float
    predicted_fixed_s: float | None
    fixed_s: float                   # D: drafter forward plus tree build (0 for width 1)
    draft_s: float                   # the drafter's forward, part of D (Figure 7)
    tree_build_s: float              # the rest of D: candidates, n-gram fill, order, layout
    commit_s: float                  # the target's commit after the verify (Figure 7)
    committed: int                   # tokens committed (accepted path plus the bonus)
    accepted_path: list[int]         # rows of the accepted path, from the anchor
    rows_drafter: int                # verified rows by source: drafter only, agreed, n-gram only
    rows_agreed: int
    rows_ngram: int
    accepted_drafter: int
    accepted_agreed: int
    accepted_ngram: int
    n_labelled: int                  # candidates labelled (every candidate of accepted parents)
    logloss_fitted: float | None     # per labelled node, scored before learning
    logloss_head: float | None
    guard: str                       # which estimate priced the tree: fitted | head
    width_without_ngram: int | None  # Table 7: the chooser's width with the n-gram-only
                                     #   candidates priced at zero (None: no such candidate,
                                     #   or the width was not chosen by Eq. (7) this round)
    ngram_widened: bool | None       # the chosen width is wider than width_without_ngram


@dataclass
class RequestSummary:
    """One reply. Log losses are per labelled node, scored before either estimate learned."""

    request_id: str
    rounds: int = 0
    tree_rounds: int = 0
    width1_rounds: int = 0
    committed: int = 0
    scheduler_time_s: float = 0.0    # D plus verify, summed over the rounds
    rows_drafter: int = 0
    rows_agreed: int = 0
    rows_ngram: int = 0
    accepted_drafter: int = 0
    accepted_agreed: int = 0
    accepted_ngram: int = 0
    labelled_nodes: int = 0
    logloss_fitted: float | None = None
    logloss_head: float | None = None
    rounds_priced_fitted: int = 0
    cold_start_rounds: int = 0
    cold_start_s: float = 0.0
    refits_adopted: int = 0
    widths_learned: list[int] = field(default_factory=list)
    # running sums (not part of the table)
    _loss_fitted: float = 0.0
    _nodes_fitted: int = 0
    _loss_head: float = 0.0

    def finish(self) -> dict[str, Any]:
        n, nf = self.labelled_nodes, self._nodes_fitted
        self.logloss_fitted = self._loss_fitted / nf if nf else None
        self.logloss_head = self._loss_head / n if n else None
        return {k: v for k, v in asdict(self).items() if not k.startswith("_")}


ROUND_SCHEMA = arrow_schema(RoundRecord)
SUMMARY_SCHEMA = arrow_schema(RequestSummary)


class RoundLogWriter:
    """Per-round Parquet log: rows of a request are buffered and written as one part file
    (``rounds-<request_id>.parquet``) when the request ends."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self.rows: list[RoundRecord] = []

    def add(self, row: RoundRecord) -> None:
        self.rows.append(row)

    def flush(self, request_id: str) -> Path | None:
        if not self.rows:
            return None
        table = pa.Table.from_pylist([asdict(r) for r in self.rows], schema=ROUND_SCHEMA)
        path = self.directory / f"rounds-{request_id}.parquet"
        write_parquet(path, table)
        self.rows = []
        return path


def summaries_table(summaries: list[dict[str, Any]]) -> pa.Table:
    """Request summaries (``RequestSummary.finish()`` dicts) as one Arrow table."""
    return pa.Table.from_pylist(summaries, schema=SUMMARY_SCHEMA)
