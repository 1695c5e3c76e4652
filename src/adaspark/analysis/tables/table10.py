"""Table 10 (§4.7): replies whose text is byte-identical between AdaSpark and the 3-pick chain.

Paper: "Replies of the evaluation subset whose text, reasoning included, is byte-identical
between AdaSpark's first run and imparo's three-pick DSpark. Later turns carry each arm's own
earlier replies, so one early difference makes every later turn of that conversation differ;
first turns share their history and isolate the verify."

Compared on the per-reply rows' ``text_sha256`` (``text`` when the hash is absent), AdaSpark's
first run against ``chain3``, over the replies both served; first turns are ``turn == 0``,
``reply == 0``. These are the draft-model block's arms
(:data:`adaspark.analysis.records.DRAFT_MODEL_BLOCK`), named for what they are.
"""

from __future__ import annotations

import hashlib

import pandas as pd

from adaspark.analysis.records import DRAFT_MODEL_BLOCK, STAGE_RUN, Options, Records, arm_rows
from adaspark.analysis.tables.common import finish, not_run_note, stand_in_note
from adaspark.analysis.tables.render import fraction_text
from adaspark.runs.rows import KEY_COLUMNS

FILLED_BY = "every preset (the run stage)"


def reply_hashes(rows: pd.DataFrame) -> pd.Series:
    if "text_sha256" in rows.columns:
        h = rows["text_sha256"].astype(str)
    else:
        h = rows["text"].astype(str).map(lambda t: hashlib.sha256(t.encode()).hexdigest())
    return pd.Series(h.to_numpy(), index=pd.MultiIndex.from_frame(rows[list(KEY_COLUMNS)]))


def table10_identical_text(replies: pd.DataFrame, target: str,
                           subset: str | None = None) -> pd.DataFrame:
    """Table 10 from the main runs' per-reply rows (one row: this target)."""
    block = DRAFT_MODEL_BLOCK
    first = arm_rows(replies, f"{block.adaspark}@1")
    if first.empty:
        first = arm_rows(replies, block.adaspark)
    chain = arm_rows(replies, block.chain)
    row: dict[str, object] = {"target": target, "all replies": None, "first turns": None}
    if not first.empty and not chain.empty:
        a, b = reply_hashes(first), reply_hashes(chain)
        both = a.index.intersection(b.index)
        same = a.loc[both] == b.loc[both]
        firsts = [(k[2] == 0 and k[3] == 0) for k in both]
        row["all replies"] = fraction_text(int(same.sum()), len(both))
        row["first turns"] = fraction_text(int(same[firsts].sum()), int(sum(firsts)))
    frame = pd.DataFrame([row])
    caption = (
        f"Replies of the {subset or 'main'} subset whose text is byte-identical between the "
        f"first run of {block.adaspark_label} ({block.adaspark}) and {block.chain_label} "
        f"({block.chain}, our engine's three-pick chain), on {target}. Later turns "
        "carry each arm's own earlier replies, so one early difference makes every later turn "
        "of that conversation differ; first turns share their history and isolate the verify."
    )
    not_run = [a for a, r in ((block.adaspark, first), (block.chain, chain)) if r.empty]
    return finish(frame, label="Table 10", title="Identical text", caption=caption,
                  notes=[*not_run_note(not_run, "every preset"), stand_in_note(block)],
                  filled_by=FILLED_BY)


def build(records: Records, options: Options) -> pd.DataFrame:
    return table10_identical_text(records.replies("Table 10"), options.target,
                                  records.main_subset)


STAGES = (STAGE_RUN,)
