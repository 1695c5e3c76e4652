"""Table 5 (§4.1): AdaSpark over llama.cpp DSpark on the main subset, the held-out
conversations and the whole test set.

Paper: "geometric mean of per-reply decode ratios with the 95% bootstrap interval over
conversations, and the replies it rests on. Looped and single-delta replies are left out as in
Table 4; the last column counts the held-out replies that reached the cap."

The held-out runs are the heldout stage's (``runs/extra/heldout``, preset=paper); the whole test
set is the main subset and the held-out conversations together.
"""

from __future__ import annotations

import pandas as pd

from adaspark.analysis import stats
from adaspark.analysis.bootstrap import DEFAULT_CONFIDENCE
from adaspark.analysis.records import (
    ADASPARK,
    LLAMACPP_CHAIN,
    STAGE_HELDOUT,
    STAGE_RUN,
    Options,
    Records,
    has_arm,
)
from adaspark.analysis.tables.common import compare_or_none, finish, not_run_note
from adaspark.analysis.tables.render import ci_text

FILLED_BY = "preset=paper (the heldout stage)"
COLUMNS = ("target", "evaluation ratio", "evaluation replies", "held-out ratio",
           "held-out replies", "whole-set ratio", "whole-set replies", "looped, held out")


def _cell(replies: pd.DataFrame | None, options: Options) -> tuple[str | None, int | None]:
    c = compare_or_none(replies, ADASPARK, LLAMACPP_CHAIN, options)
    return (None, None) if c is None else (ci_text(c.ratio, c.lo, c.hi), c.n_replies)


def table5_heldout(replies: pd.DataFrame, heldout: pd.DataFrame | None, target: str,
                   options: Options, subset: str | None = None) -> pd.DataFrame:
    """Table 5 from the main runs' rows and the held-out runs' rows (empty: dashes)."""
    ev, n_ev = _cell(replies, options)
    ran_heldout = (heldout is not None and has_arm(heldout, ADASPARK)
                   and has_arm(heldout, LLAMACPP_CHAIN))
    ho, n_ho = _cell(heldout, options) if ran_heldout else (None, None)
    whole, n_whole, looped = None, None, None
    if ran_heldout:
        assert heldout is not None
        both = pd.concat([replies, heldout], ignore_index=True)
        whole, n_whole = _cell(both, options)
        looped = stats.count_looped(heldout, [ADASPARK, LLAMACPP_CHAIN])
    frame = pd.DataFrame([{
        "target": target, "evaluation ratio": ev, "evaluation replies": n_ev,
        "held-out ratio": ho, "held-out replies": n_ho, "whole-set ratio": whole,
        "whole-set replies": n_whole, "looped, held out": looped,
    }], columns=list(COLUMNS))
    caption = (
        f"AdaSpark over llama.cpp DSpark on {target}, on the {subset or 'main'} subset (the "
        f"'evaluation' columns), on the held-out conversations and on both together: geometric "
        f"mean of per-reply decode ratios with the {DEFAULT_CONFIDENCE:.0%} bootstrap "
        f"interval over conversations, and the replies it rests on; the last column counts the "
        f"held-out replies that reached the cap."
    )
    formats = {c: "{:,.0f}" for c in COLUMNS if "replies" in c or c.startswith("looped")}
    notes = [] if ran_heldout else not_run_note(["the held-out conversations"], FILLED_BY)
    return finish(frame, label="Table 5", title="Held-out conversations", caption=caption,
                  formats=formats, notes=notes, filled_by=FILLED_BY)


def build(records: Records, options: Options) -> pd.DataFrame:
    return table5_heldout(records.replies("Table 5"), records.heldout, options.target, options,
                          records.main_subset)


STAGES = (STAGE_RUN, STAGE_HELDOUT)
