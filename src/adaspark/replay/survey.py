"""The verify-cost survey's records and their reduction (§3.2, Table 1, Figure 3).

The survey stage (:mod:`adaspark.stages.survey`) writes one row per verify:

=================  =============================================================================
``context``        tokens of context the verify ran at (the prompt's length)
``context_paper``  the paper's context this one stands for (443, 1,596 or 8,444; scaled contexts
                   of a small-window model keep the paper's label here)
``prompt``         the prompt's name (``1596A``)
``pass_index``     0 or 1: the two passes, in opposite width order
``width``          rows verified (anchor included)
``round``          the verify's index within its (pass, width) run
``kept``           False for the first rounds of a run (dropped)
``verify_ms``      the forward's time in milliseconds
=================  =============================================================================

:func:`survey_medians` reduces them as the paper does: per run (prompt, pass, width) the median
over the kept rounds, then the median over runs.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

#: Columns of one survey row.
SURVEY_COLUMNS: tuple[str, ...] = (
    "context", "context_paper", "prompt", "pass_index", "width", "round", "kept", "verify_ms",
)


def check_survey(survey: pd.DataFrame) -> pd.DataFrame:
    """The survey rows, or ValueError naming the missing columns."""
    missing = [c for c in SURVEY_COLUMNS if c not in survey.columns]
    if missing:
        raise ValueError(f"survey rows lack column(s) {missing}; expected {list(SURVEY_COLUMNS)}")
    return survey


def survey_medians(survey: pd.DataFrame) -> pd.DataFrame:
    """Median verify time per (context, width), §3.2: per-run medians over the kept rounds,
    then the median over runs (prompts and the two passes).

    Returns columns ``context``, ``context_paper``, ``width``, ``verify_ms``, ``n_runs``,
    sorted by context and width.
    """
    rows = check_survey(survey)
    rows = rows[rows["kept"].astype(bool)]
    if rows.empty:
        return pd.DataFrame(columns=["context", "context_paper", "width", "verify_ms", "n_runs"])
    per_run = (rows.groupby(["context", "context_paper", "prompt", "pass_index", "width"])
               ["verify_ms"].median().reset_index())
    out = (per_run.groupby(["context", "context_paper", "width"])["verify_ms"]
           .agg(verify_ms="median", n_runs="size").reset_index())
    return out.sort_values(["context", "width"]).reset_index(drop=True)


def median_table(survey: pd.DataFrame) -> pd.DataFrame:
    """Median verify ms as a grid: index width, one column per context."""
    med = survey_medians(survey)
    return med.pivot(index="width", columns="context", values="verify_ms").sort_index()


def fit_context_law(contexts: np.ndarray, times_ms: np.ndarray) -> tuple[float, float, float]:
    """Least-squares ``T(c) = alpha + beta c`` over the contexts (Eq. 3, Table 1).

    Returns ``(alpha_ms, beta_ms_per_1k_tokens, max_relative_residual)``; NaN when fewer than
    two contexts have a time.
    """
    c = np.asarray(contexts, dtype=float)
    y = np.asarray(times_ms, dtype=float)
    ok = np.isfinite(c) & np.isfinite(y)
    c, y = c[ok], y[ok]
    if len(np.unique(c)) < 2:
        return float("nan"), float("nan"), float("nan")
    beta, alpha = np.polyfit(c, y, 1)
    resid = np.abs(y - (alpha + beta * c)) / y
    return float(alpha), float(beta * 1000.0), float(resid.max())


def per_row_increment(survey: pd.DataFrame, context: int | None = None) -> dict[str, float]:
    """What one more verified row costs on this machine, from the survey: the least-squares
    slope of T(n) over the surveyed widths at ``context`` (default: the middle context), in ms
    per row and in units of a plain decode T(1) when width 1 was surveyed ("why it differs").
    """
    med = survey_medians(survey)
    if med.empty:
        return {}
    contexts = sorted(med["context"].unique())
    ctx = contexts[len(contexts) // 2] if context is None else context
    at = med[med["context"] == ctx].sort_values("width")
    out: dict[str, float] = {"context": float(ctx)}
    if len(at) >= 2:
        slope, _ = np.polyfit(at["width"].astype(float), at["verify_ms"].astype(float), 1)
        out["ms_per_row"] = float(slope)
        t1 = at.loc[at["width"] == 1, "verify_ms"]
        if len(t1):
            out["t1_ms"] = float(t1.iloc[0])
            out["per_row_in_plain_decodes"] = float(slope / t1.iloc[0])
    return out
