"""Table 2 (§3.3): acceptance prediction, the fitted model against the head-based estimate.

Paper: "log loss per labelled node of the head-based estimate (the drafter's confidence head with
its per-request offset) and of the fitted model, both scored on each round's labels before
either learned from them, over every request after the first that did not reach the token cap.
priced is the share of rounds whose tree the fitted model priced; the last column gives rounds
priced over tree rounds for the first request, which starts from an empty store."

Ours reads the per-request summaries (:class:`adaspark.rules.adaspark.records.RequestSummary`) that
every AdaSpark reply carries, from AdaSpark's first run on the main subset, or, when the preset
ran none, from the instrumented AdaSpark run.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from adaspark.analysis.records import (
    ADASPARK,
    ARMS_DIR,
    STAGE_INSTRUMENTED,
    STAGE_RUN,
    MissingInputError,
    Options,
    Records,
    arm_rows,
    has_arm,
    request_summaries,
)
from adaspark.analysis.tables.common import finish
from adaspark.runs.rows import LOOPED
from adaspark.runs.store import ROWS_FILE

FILLED_BY = "every preset that runs AdaSpark (the run or the instrumented stage)"
COLUMNS = ("target", "requests", "nodes", "head-based", "fitted", "change", "requests won",
           "priced", "first request")


def table2_acceptance_prediction(summaries: pd.DataFrame, target: str,
                                 subset: str | None = None) -> pd.DataFrame:
    """Table 2 from one run's request summaries in serving order (``order``), as
    :func:`adaspark.analysis.records.request_summaries` returns them."""
    s = summaries.sort_values("order", kind="stable").reset_index(drop=True)
    need = {"labelled_nodes", "logloss_fitted", "logloss_head", "tree_rounds",
            "rounds_priced_fitted"}
    row: dict[str, object] = dict.fromkeys(COLUMNS)
    row["target"] = target
    if s.empty or not need <= set(s.columns):
        frame = pd.DataFrame([row], columns=list(COLUMNS))
        return _finish(frame, 0, subset)
    first = s.iloc[0]
    row["first request"] = (f"{int(first['rounds_priced_fitted'])}/{int(first['tree_rounds'])}"
                            if first["tree_rounds"] else None)
    later = s.iloc[1:]
    later = later[later["status"].astype(str) != LOOPED]
    ok = later["logloss_fitted"].notna() & later["logloss_head"].notna()
    later = later[ok & (later["labelled_nodes"] > 0)]
    if not later.empty:
        w = later["labelled_nodes"].astype(float)
        head = float(np.average(later["logloss_head"].astype(float), weights=w))
        fitted = float(np.average(later["logloss_fitted"].astype(float), weights=w))
        won = int((later["logloss_fitted"] < later["logloss_head"]).sum())
        tree_rounds = float(later["tree_rounds"].sum())
        row.update({
            "requests": len(later), "nodes": int(w.sum()), "head-based": head,
            "fitted": fitted, "change": fitted / head - 1.0 if head > 0 else np.nan,
            "requests won": f"{won}/{len(later)}",
            "priced": float(later["rounds_priced_fitted"].sum()) / tree_rounds
            if tree_rounds else np.nan,
        })
    frame = pd.DataFrame([row], columns=list(COLUMNS))
    return _finish(frame, len(later), subset)


def _finish(frame: pd.DataFrame, n_requests: int, subset: str | None) -> pd.DataFrame:
    where = f"the {subset} subset" if subset else "the run"
    caption = (
        f"Acceptance prediction on {frame.at[0, 'target']}, {where}: log loss per labelled node of"
        f" the head-based estimate and of the fitted model, both scored on each round's labels "
        f"before either learned from them, over the {n_requests} requests after the first that did"
        f" not reach the token cap. priced is the share of rounds whose tree the fitted model "
        f"priced; the last column gives rounds priced over tree rounds for the first request, "
        f"which starts from an empty store."
    )
    formats = {"requests": "{:,.0f}", "nodes": "{:,.0f}", "head-based": "{:.4f}",
               "fitted": "{:.4f}", "change": "{:+.1%}", "priced": "{:.0%}"}
    return finish(frame, label="Table 2", title="Acceptance prediction", caption=caption,
                  formats=formats, filled_by=FILLED_BY)


def adaspark_summaries(records: Records) -> tuple[pd.DataFrame, str | None]:
    """AdaSpark's first run on the main subset, else its instrumented run: summaries and subset."""
    try:
        replies = records.replies("Table 2")
    except FileNotFoundError:
        replies = None
    if replies is not None and has_arm(replies, ADASPARK):
        first = arm_rows(replies, f"{ADASPARK}@1")
        rows = first if not first.empty else arm_rows(replies, ADASPARK)
        summ = request_summaries(rows)
        if not summ.empty:
            return summ, records.main_subset
    try:
        inst = records.instrumented_replies("Table 2")
    except MissingInputError as e:
        raise MissingInputError(
            "Table 2", records.root / ARMS_DIR / ADASPARK / ROWS_FILE, STAGE_RUN,
            also=f" (or, without an AdaSpark run there, the `{STAGE_INSTRUMENTED}` stage)",
        ) from e
    summ = request_summaries(arm_rows(inst, ADASPARK))
    return summ, records.subset_of(records.root / "extra" / "instrumented")


def build(records: Records, options: Options) -> pd.DataFrame:
    summ, subset = adaspark_summaries(records)
    return table2_acceptance_prediction(summ, options.target, subset)


STAGES = (STAGE_RUN, STAGE_INSTRUMENTED)
