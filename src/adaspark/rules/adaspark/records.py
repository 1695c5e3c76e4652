"""The scheduler's records: one schema per row, as dataclasses and as pyarrow schemas.

- :class:`RequestSummary`, always (cheap): one per reply. Table 2 and Figure 4 read the log
  losses; §4.6 the cold-start rounds and time. Its rows and accepted rows by source are the
  loop's one count (:class:`~adaspark.decoding.round.RoundCounts`), added by :func:`add_counts`.
- :class:`RoundRecord`, only with logging on: one per round (Figures 7-10, Table 7, the
  notebook), built by :func:`round_record` from what the round planned and what it did.
  :class:`RoundLogWriter` keeps a request's rows in memory and writes them as one
  Parquet file per request into a directory (a dataset: ``pandas.read_parquet(directory)``),
  atomically (:func:`adaspark.io.write_parquet`). With logging off no row object is ever built.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from adaspark.decoding.candidates import NGRAM
from adaspark.decoding.round import RoundCounts, RoundOutcome, RoundPlan
from adaspark.io import arrow_schema, write_parquet
from adaspark.rules.adaspark.chooser import Gains
from adaspark.rules.adaspark.context import RoundContext


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
    verify_build_s: float            # measured_verify_s's batch build (seq_cp, batch filling)
    verify_forward_s: float          # measured_verify_s's forward (llama_decode)
    backlog_rows: int                # rows exact mode decodes again in the batch (0 in fast)
    round_s: float                   # the whole round rho is priced over (RoundOutcome.round_s)
    learn_s: float                   # this round's observe (learning, logging; in the next
                                     #   round's round_s)
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


def request_id(n: int, prompt: list[int]) -> str:
    """A reply's id when the caller gives none: its number and a hash of its prompt."""
    h = hashlib.blake2b(np.asarray(prompt, dtype=np.int64).tobytes(), digest_size=4).hexdigest()
    return f"{n:05d}-{h}"


def add_counts(summary: RequestSummary, counts: RoundCounts) -> None:
    """Add rounds, their rows and accepted rows by source (the loop's count) to ``summary``."""
    d, a = counts.drafted, counts.accepted
    summary.rounds += counts.rounds
    summary.rows_drafter += d.get("drafter", 0)
    summary.rows_agreed += d.get("agreed", 0)
    summary.rows_ngram += d.get("ngram", 0)
    summary.accepted_drafter += a.get("drafter", 0)
    summary.accepted_agreed += a.get("agreed", 0)
    summary.accepted_ngram += a.get("ngram", 0)


def add_losses(summary: RequestSummary, n_labelled: int, loss_fitted: float, loss_head: float,
               fitted: bool) -> tuple[int, float | None, float | None]:
    """Add a round's labelled candidates and summed log losses (the fitted model's only when it
    priced candidates, ``fitted``) to ``summary``; return the round's per-node losses as its
    record holds them (``None`` where nothing was labelled or there is no fitted model)."""
    summary.labelled_nodes += n_labelled
    summary._loss_head += loss_head
    if fitted:
        summary._loss_fitted += loss_fitted
        summary._nodes_fitted += n_labelled
    if not n_labelled:
        return 0, None, None
    return n_labelled, (loss_fitted / n_labelled if fitted else None), loss_head / n_labelled


def round_record(request_id: str, round_index: int, rc: RoundContext, plan: RoundPlan,
                 outcome: RoundOutcome, width_without_ngram: int | None) -> RoundRecord:
    """The record of one round: what ``plan`` decided (its context ``rc``) and what the verify
    did (``outcome``, its rows by source included). Losses are filled in after learning."""
    g = rc.gains or Gains()
    cands = rc.cands
    rows_src, acc_src = outcome.counts.drafted, outcome.counts.accepted
    drafted = rc.drafted
    return RoundRecord(
        request_id=request_id, round_index=round_index,
        context=rc.context, width=plan.tree.n_rows, why=rc.why, explored=rc.explored,
        offered_widths=[w for w, _ in rc.offered],
        offered_prices_s=[p for _, p in rc.offered], reference_width=rc.n0,
        n_candidates=len(cands) if cands is not None else 0,
        n_ngram_candidates=(sum(1 for k in cands.kind if k == NGRAM)
                            if cands is not None else 0),
        s=rc.s_chosen[0], s_d=rc.s_chosen[1], s_ng=rc.s_chosen[2],
        g_d=g.d, g_n=g.n, g_d_below=g.d_below, g_n_below=g.n_below, rho=rc.rho,
        predicted_verify_s=rc.predicted_verify, measured_verify_s=outcome.verify_s,
        predicted_fixed_s=rc.predicted_fixed if drafted else 0.0,
        fixed_s=outcome.fixed_s if drafted else 0.0,
        draft_s=outcome.draft_s if drafted else 0.0,
        tree_build_s=max(outcome.fixed_s - outcome.draft_s, 0.0) if drafted else 0.0,
        commit_s=outcome.commit_s, verify_build_s=outcome.build_s,
        verify_forward_s=outcome.decode_s, backlog_rows=outcome.backlog_rows,
        round_s=outcome.round_s, learn_s=0.0,
        committed=len(outcome.new_tokens), accepted_path=list(outcome.path),
        rows_drafter=rows_src.get("drafter", 0), rows_agreed=rows_src.get("agreed", 0),
        rows_ngram=rows_src.get("ngram", 0), accepted_drafter=acc_src.get("drafter", 0),
        accepted_agreed=acc_src.get("agreed", 0), accepted_ngram=acc_src.get("ngram", 0),
        n_labelled=0, logloss_fitted=None, logloss_head=None,
        guard="fitted" if rc.priced_fitted else "head",
        width_without_ngram=width_without_ngram,
        ngram_widened=(None if width_without_ngram is None
                       else width_without_ngram < rc.width_chosen))


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
