"""Table 1 (§3.2): verify time at three contexts for three row counts, and the context law.

Paper: "Verify time (ms) at three contexts for three row counts on each target, and the fit T(c) = α
+ β·c of Eq. (3)". Ours: the survey stage's medians (per-run medians over the rounds kept, then the
median over runs, :func:`adaspark.replay.survey.survey_medians`) for 8, 16 and 32 rows, with the
least-squares line over the surveyed contexts.
"""

from __future__ import annotations

import pandas as pd

from adaspark.analysis.records import STAGE_SURVEY, Options, Records
from adaspark.analysis.tables.common import finish, not_run_note
from adaspark.replay.survey import fit_context_law, survey_medians

ROWS: tuple[int, ...] = (8, 16, 32)
FILLED_BY = "every preset (the survey stage)"


def _ctx_column(context: int) -> str:
    return f"T({context:,})"


def table1_context_law(survey: pd.DataFrame, target: str) -> pd.DataFrame:
    """Table 1 from survey rows (:mod:`adaspark.replay.survey` columns): one row per row count."""
    med = survey_medians(survey)
    contexts = sorted(int(c) for c in med["context"].unique())
    rows = []
    for n in ROWS:
        at = med[med["width"] == n].set_index("context")["verify_ms"]
        times = [float(at.get(c, float("nan"))) for c in contexts]
        alpha, beta, resid = fit_context_law(
            pd.Series(contexts, dtype=float).to_numpy(), pd.Series(times).to_numpy())
        rows.append({"target": target, "rows": n,
                     **{_ctx_column(c): t for c, t in zip(contexts, times, strict=True)},
                     "α (ms)": alpha, "β (ms per 1k tokens)": beta, "max residual": resid})
    frame = pd.DataFrame(rows)
    formats = {_ctx_column(c): "{:.1f}" for c in contexts}
    formats |= {"rows": "{:d}", "α (ms)": "{:.1f}", "β (ms per 1k tokens)": "{:.2f}",
                "max residual": "{:.1%}"}
    missing = [f"{n} rows" for n in ROWS if not (med["width"] == n).any()]
    paper_ctx = sorted(int(c) for c in med["context_paper"].unique())
    scaled = contexts != paper_ctx
    ctx_text = ", ".join(f"{c:,}" for c in contexts)
    caption = (
        f"Verify time (ms) at {len(contexts)} contexts ({ctx_text} tokens) for "
        f"{len(ROWS)} row counts on {target}, and the fit T(c) = α + β·c of Eq. (3) "
        f"(median over {int(med['n_runs'].max()) if len(med) else 0} runs of the per-run median "
        f"verify time)."
    )
    if scaled:
        caption += (" The paper's contexts (" + ", ".join(f"{c:,}" for c in paper_ctx)
                    + ") are scaled down to fit the model's window.")
    return finish(frame, label="Table 1", title="Verify time and the context law", caption=caption,
                  formats=formats, notes=not_run_note(missing, "preset=paper"),
                  filled_by=FILLED_BY)


def build(records: Records, options: Options) -> pd.DataFrame:
    return table1_context_law(records.survey("Table 1"), options.target)


STAGES = (STAGE_SURVEY,)
