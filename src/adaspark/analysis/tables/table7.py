"""Table 7 (§4.3): what n-gram fill contributes, from the instrumented AdaSpark run.

Paper: "Rows are the verified nodes past each round's anchor; accepted tokens are the draft
tokens committed. A round is widened when its n-gram candidates move the chooser to a wider class
than it takes with them priced at zero."

Read from AdaSpark's per-round log (:class:`adaspark.rules.adaspark.records.RoundRecord`: rows and
accepted nodes by source, drafter-only, agreed and n-gram-only), rounds of looped replies left
out. The last row reads ``ngram_widened``: the scheduler, when it logs rounds, also runs Eq. (7)
with the round's n-gram-only candidates priced at zero (``q = 0``) and records whether the width
it chose is wider than that one. Its share is over the rounds with n-gram candidates whose width
Eq. (7) chose (cold-start rounds measure a width and are left out). A log written before the
column existed gives a dash.
"""

from __future__ import annotations

import math

import pandas as pd

from adaspark.analysis.records import ADASPARK, STAGE_INSTRUMENTED, Options, Records, without_looped
from adaspark.analysis.tables.common import finish

FILLED_BY = "every preset (the instrumented stage)"
QUANTITIES: tuple[str, ...] = (
    "verified rows held by n-gram-only nodes",
    "accepted draft tokens from n-gram-only nodes",
    "accepted draft tokens from nodes both sources proposed",
    "acceptance rate, drafter-only nodes",
    "acceptance rate, nodes both proposed",
    "acceptance rate, n-gram-only nodes",
    "rounds with n-gram candidates",
    "of those, rounds the n-gram widened the verify",
)
#: Column a round log may carry: True when the n-gram candidates widened the verify.
WIDENED_COLUMN = "ngram_widened"


def _share(num: float, den: float) -> float:
    return num / den if den > 0 else math.nan


def table7_ngram(rounds: pd.DataFrame, target: str) -> pd.DataFrame:
    """Table 7 from AdaSpark's per-round log (one column: this target)."""
    r = without_looped(rounds)
    tree = r[r["width"] > 1] if "width" in r.columns else r
    rows_d, rows_a, rows_n = (float(tree[c].sum()) for c in
                              ("rows_drafter", "rows_agreed", "rows_ngram"))
    acc_d, acc_a, acc_n = (float(tree[c].sum()) for c in
                           ("accepted_drafter", "accepted_agreed", "accepted_ngram"))
    rows_all, acc_all = rows_d + rows_a + rows_n, acc_d + acc_a + acc_n
    with_ng = tree[tree["n_ngram_candidates"] > 0]
    widened = math.nan
    known = (with_ng[WIDENED_COLUMN].dropna() if WIDENED_COLUMN in with_ng.columns
             else pd.Series([], dtype=bool))
    if len(known):
        widened = float(known.astype(bool).mean())
    values = [
        _share(rows_n, rows_all), _share(acc_n, acc_all), _share(acc_a, acc_all),
        _share(acc_d, rows_d), _share(acc_a, rows_a), _share(acc_n, rows_n),
        float(len(with_ng)), widened,
    ]
    frame = pd.DataFrame({"quantity": list(QUANTITIES), target: values})
    frame[target] = frame[target].astype(object)
    pct = ["{:.1%}", "{:.1%}", "{:.1%}", "{:.0%}", "{:.0%}", "{:.0%}", "{:,.0f}", "{:.1%}"]
    n_req = r["request_id"].nunique() if "request_id" in r.columns else 0
    caption = (
        f"What n-gram fill contributes on {target}, from the instrumented AdaSpark run "
        f"({len(tree):,} tree rounds of {n_req} requests). Rows are the verified nodes past each "
        "round's anchor; accepted tokens are the draft tokens committed. A round is widened "
        "when its n-gram candidates move the chooser to a wider class than it takes with them "
        "priced at zero."
    )
    notes = []
    if len(known):
        notes.append(f"Widened: {int(known.astype(bool).sum()):,} of the {len(known):,} rounds "
                     "with n-gram candidates whose width Eq. (7) chose (cold-start rounds left "
                     "out).")
    if math.isnan(widened):
        notes.append("The last row is a dash: the round log does not record the width the "
                     "chooser would have taken with the n-gram candidates priced at zero.")
    return finish(frame, label="Table 7", title="What n-gram fill contributes", caption=caption,
                  notes=notes, filled_by=FILLED_BY, row_formats=dict(enumerate(pct)))


def build(records: Records, options: Options) -> pd.DataFrame:
    rounds = records.rounds("Table 7")
    ada = rounds[rounds["arm"].astype(str) == ADASPARK]
    return table7_ngram(ada, options.target)


STAGES = (STAGE_INSTRUMENTED,)
