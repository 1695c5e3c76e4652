"""The width claims' numbers per device model in replay (issue 33, item 2): AdaSpark over each
pinned width and the best, the cold start, the cost error, what AdaSpark did after its first
request, and AdaSpark over the best pinned width against the rounds it has served."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from adaspark.analysis.claim_measures import (
    NotMeasured,
    adaspark_rounds,
    compare_arms,
    comparison_value,
    cost_error,
    first_cold_start,
    over_best_pinned,
    pinned_arms,
)
from adaspark.analysis.claim_rule import REPLAY, Regime, value_of, value_record

# -- AdaSpark over the best pinned width against rounds served (issue 33, item 2) -------------


def rounds_curve(replies: pd.DataFrame, block: str = "dspark") -> pd.DataFrame:
    """AdaSpark over the best pinned width (the pinned arm fastest over all replies, summed
    tokens over summed time) as the replies are served: after each of AdaSpark's replies in
    serving order, both arms' cumulative tokens over cumulative decode time on the replies
    served so far, against AdaSpark's cumulative rounds. Empty when AdaSpark or every pinned
    width is missing."""
    from adaspark.runs.rows import KEY_COLUMNS

    ada_arm, pinned = pinned_arms(block)
    rounds_col = "server_rounds" if "server_rounds" in replies.columns else "rounds"
    cols = ["rounds", "ratio", "best_width", "replies"]
    if replies.empty or "arm" not in replies.columns:
        return pd.DataFrame(columns=cols)
    arms = replies["arm"].astype(str)
    ada = replies[arms == ada_arm].sort_values("order")
    speed = {w: (g["completion_tokens"].sum() / g["decode_s"].sum())
             for w, a in pinned.items() if not (g := replies[arms == a]).empty
             and g["decode_s"].sum() > 0}
    if ada.empty or not speed:
        return pd.DataFrame(columns=cols)
    best = max(speed, key=lambda w: speed[w])
    pinned = replies[arms == pinned[best]].set_index(list(KEY_COLUMNS))
    rows, n_rounds, ta, sa, tb, sb = [], 0, 0.0, 0.0, 0.0, 0.0
    for i, r in enumerate(ada.itertuples(index=False), 1):
        key = tuple(getattr(r, k) for k in KEY_COLUMNS)
        if key not in pinned.index:
            continue
        p = pinned.loc[key]
        n_rounds += int(getattr(r, rounds_col) or 0)
        ta, sa = ta + float(r.completion_tokens), sa + float(r.decode_s)
        tb, sb = tb + float(p["completion_tokens"]), sb + float(p["decode_s"])
        if sa > 0 and sb > 0 and tb > 0:
            rows.append({"rounds": n_rounds, "ratio": (ta / sa) / (tb / sb),
                         "best_width": best, "replies": i})
    return pd.DataFrame(rows, columns=cols)


def rounds_figure(curves: Mapping[str, pd.DataFrame]) -> Any:
    """One line per device model: AdaSpark over the best pinned width against rounds served
    (replay), the paper's 0.997 marked."""
    from adaspark.analysis.figures.style import panels, style

    with style():
        fig, (ax,) = panels(1)
        fig.set_size_inches(7.5, 3.2)
        for dev, c in curves.items():
            if not c.empty:
                ax.plot(c["rounds"], c["ratio"], marker="o", ms=3, lw=1.2,
                        label=f"{dev} (best {int(c['best_width'].iloc[0])} rows)")
        ax.axhline(0.997, color="grey", ls="--", lw=0.8, label="paper: ≥ 0.997")
        ax.axhline(1.0, color="grey", lw=0.5)
        ax.set_xlabel("AdaSpark rounds served (replay)")
        ax.set_ylabel("AdaSpark / best pinned")
        ax.set_title("AdaSpark over the best pinned width as rounds are served (REPLAY)")
        ax.legend(frameon=False, fontsize=7)
    return fig


# -- the width claims' numbers per device model (issue 33, item 2) ----------------------------


def width_report(regimes: list[Regime], options: Any,
                 block: str = "dspark") -> list[dict[str, Any]]:
    """Per replay regime, on ``block``'s arms: AdaSpark's rounds; AdaSpark over each pinned
    width and over the best, over all replies, per context band and after the first request
    (each with its interval); the cold start (rounds, seconds, share of the first request's
    time); the cost estimate's median error over the second half of the run."""
    ada, pinned = pinned_arms(block)
    out = []
    for reg in regimes:
        if reg.kind != REPLAY:
            continue
        row: dict[str, Any] = {"regime": reg.name, "label": reg.label,
                               "paper_target": reg.paper_target, "block": block}
        try:
            rounds = adaspark_rounds(reg, ada)
            row["rounds"] = len(rounds)
            cold = first_cold_start(rounds)
            row["cold_start_rounds"] = cold.rounds
            row["cold_start_s"] = cold.seconds
            row["first_request_s"] = cold.first_request_s
            row["cold_start_later_rounds"] = cold.later  # > 0: the first reply ended inside it
            row["cost_error_second_half"] = cost_error(reg, options, arm=ada).estimate
            row |= after_first_diagnosis(rounds)
        except NotMeasured as e:
            row["rounds_why"] = str(e)
        replies = reg.replies()
        from adaspark.analysis.records import has_arm

        row["over_pinned"] = {
            f"{w} rows": value_record(comparison_value(compare_arms(replies, ada, arm, options)))
            for w, arm in pinned.items() if has_arm(replies, arm) and has_arm(replies, ada)}
        for key, after in (("over_best", False), ("over_best_after_first", True)):
            try:
                row[key] = [value_record(v) for v in over_best_pinned(
                    reg, options, block=block, bands=True, after_first=after)]
            except NotMeasured as e:
                row[key] = str(e)
        out.append(row)
    return out


def after_first_diagnosis(rounds: pd.DataFrame) -> dict[str, Any]:
    """What AdaSpark did after its first request (item 5 of issue 33): the widths it chose most
    (cold-start rounds left out), its cost model's estimate over the verify time it was charged
    (median per round), and the draft tokens accepted over those its acceptance model expected
    (pooled over the rounds the chooser set from S)."""
    from adaspark.analysis.figures.fig8 import width_shares

    later = rounds[rounds["request_id"] != rounds["request_id"].iloc[0]]
    out: dict[str, Any] = {"rounds_after_first": len(later)}
    if later.empty:
        return out
    shares = width_shares(later).sort_values(ascending=False)
    out["widths_after_first"] = {int(w): round(float(v), 3) for w, v in shares.head(3).items()}
    pred = later[later["predicted_verify_s"].notna() & (later["measured_verify_s"] > 0)]
    if not pred.empty:
        out["estimate_over_charged"] = float(
            (pred["predicted_verify_s"].astype(float) / pred["measured_verify_s"]).median())
    chosen = later[later["why"] == "choice"]
    accepted = (chosen["accepted_drafter"] + chosen["accepted_agreed"]
                + chosen["accepted_ngram"]).sum()
    if float(chosen["s"].sum()) > 0:
        out["accepted_over_expected"] = float(accepted / chosen["s"].sum())
    return out


def width_markdown(rows: list[dict[str, Any]]) -> str:
    """``paper/claims.md``'s section of the width claims' numbers per device model."""
    if not rows:
        return ""
    lines = ["## The width claims in replay, per device model", "",
             f"The {rows[0]['block']} block: AdaSpark over each pinned width and over the best "
             "(geometric mean of per-reply ratios, 95% interval over conversations), over all "
             "replies, per context band and after the first request (which holds the cold "
             "start); the cold start itself; the cost estimate's median absolute error over the "
             "second half of the run. All REPLAY: this machine's acceptance, the device model's "
             "prices.", "",
             "| device model | label | rounds | over best (all; bands) | after the first request"
             " | over each pinned width | cold start: rounds, s of first request | cost error |"
             " widths after the first request | estimate / charged | accepted / expected |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]

    def vals(x: Any) -> str:
        if isinstance(x, str):
            return x
        return "; ".join(f"{v['group']}: {value_of(v).text()}" for v in x)

    for r in rows:
        pinned = "; ".join(f"{k}: {value_of(v).text()}" for k, v in r["over_pinned"].items())
        cold = (f"{r['cold_start_rounds']}, {r['cold_start_s']:.2f} of "
                f"{r['first_request_s']:.2f} s"
                + (f" (+{r['cold_start_later_rounds']} in later requests: the first reply "
                   "ended inside it)" if r.get("cold_start_later_rounds") else "")
                if "cold_start_rounds" in r else
                r.get("rounds_why", ""))
        err = f"{r['cost_error_second_half']:.2%}" if "cost_error_second_half" in r else "-"
        widths = ", ".join(f"{w} ({v:.0%})" for w, v in r.get("widths_after_first", {}).items())
        est = (f"{r['estimate_over_charged']:.3f}" if "estimate_over_charged" in r else "-")
        acc = (f"{r['accepted_over_expected']:.3f}" if "accepted_over_expected" in r else "-")
        lines.append(f"| {r['regime']} | {r['label']} | {r.get('rounds', '-')} | "
                     f"{vals(r['over_best'])} | {vals(r['over_best_after_first'])} | {pinned} | "
                     f"{cold} | {err} | {widths or '-'} | {est} | {acc} |")
    return "\n".join(lines) + "\n"

