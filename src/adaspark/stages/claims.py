"""Stage ``claims``: every claim of the paper's ledger (``data/claims.yaml``) measured in every
regime that can test it and judged by one rule (:mod:`adaspark.analysis.claims`).

    python -m adaspark.stages.claims --params params.yaml --runs runs --replay runs/replay \\
        --ledger data/claims.yaml --out paper

Writes ``paper/claims.json`` (``claims``: id, paper, verdict, why, regimes; ``replay_vs_real``;
``rule``), ``paper/claims.md`` (the report's first section), ``paper/metrics.json`` (the
headline numbers ``dvc metrics show`` prints) and the data of the plots ``dvc plots`` draws
(``paper/plots/``). Its own stage, so changing the ledger or the rule reruns only it.

Regimes: ``cpu``, the run directories the params name (as the tables stage reads them), and
``replay:<device>`` for each device model of the replay stage's ``summary.json``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import pandas as pd

from adaspark import io
from adaspark.stages import load_params, stage_main


def cpu_regime(runs: Path, params: dict[str, Any], options: Any) -> Any:
    """This machine's real runs, read as the tables stage reads them."""
    from adaspark.analysis.claims import CPU, Regime
    from adaspark.analysis.records import MissingInputError, Records
    from adaspark.analysis.run_selection import selection_from_params
    from adaspark.analysis.tables.table2 import build as table2

    records = Records(runs, selection=selection_from_params(params))

    def replies() -> pd.DataFrame:
        try:
            return records.replies("the claims")
        except MissingInputError:
            return pd.DataFrame()

    def rounds(arm: str) -> pd.DataFrame:
        try:
            r = records.rounds("the claims")
        except MissingInputError:
            return pd.DataFrame()
        return r[r["arm"].astype(str) == arm]

    def survey() -> pd.DataFrame:
        p = runs / "survey" / "survey.parquet"
        return pd.read_parquet(p) if p.is_file() else pd.DataFrame()

    def fig5() -> pd.DataFrame:
        from adaspark.analysis.figures.fig5 import marginal_points

        p = runs / "fig5" / "fig5.parquet"
        return marginal_points(pd.read_parquet(p)) if p.is_file() else pd.DataFrame()

    def t2() -> pd.DataFrame:
        try:
            return table2(records, options)
        except MissingInputError:
            return pd.DataFrame()

    return Regime(CPU, CPU, "measured", None, replies, rounds, survey, fig5, t2)


def replay_regimes(replay_dir: Path, summary: dict[str, Any] | None) -> list[Any]:
    """One regime per device model the replay stage replayed under."""
    from adaspark.analysis.claims import REPLAY, Regime
    from adaspark.analysis.figures.fig5 import marginal_points
    from adaspark.analysis.records import read_rounds
    from adaspark.analysis.replay import device_replies, fig5_points

    out = []
    for dev, info in ((summary or {}).get("devices") or {}).items():
        base = replay_dir / dev

        def rounds(arm: str, base: Path = base) -> pd.DataFrame:
            return read_rounds(base / arm) if (base / arm).is_dir() else pd.DataFrame()

        def fig5(dev: str = dev, base: Path = base) -> pd.DataFrame:
            p = base / "fig5" / "prompts.parquet"
            if p.is_file():
                return marginal_points(pd.read_parquet(p))
            return fig5_points(replay_dir, dev)

        out.append(Regime(f"{REPLAY}:{dev}", REPLAY, str(info.get("label") or "synthetic"),
                          info.get("paper_target"),
                          lambda dev=dev: device_replies(replay_dir, dev), rounds,
                          fig5=fig5))
    return out


def plot_data(out: Path, runs: Path, decode: dict[str, float],
              claims: list[dict[str, Any]]) -> list[Path]:
    """The data behind ``dvc plots``: each arm's decode tok/s, this machine's verify time
    against width (Figure 3), and each claim's deciding estimate against the paper's bound."""
    from adaspark.replay.survey import survey_medians

    files = [io.write_text(out / "decode_tok_s.csv", pd.DataFrame(
        {"arm": list(decode), "decode_tok_s": [round(v, 3) for v in decode.values()]}
    ).to_csv(index=False))]
    p = runs / "survey" / "survey.parquet"
    if p.is_file():
        med = survey_medians(pd.read_parquet(p))
        files.append(io.write_text(out / "verify_ms.csv", med[["context", "width", "verify_ms"]]
                                   .to_csv(index=False)))
    rows = []
    for c in claims:
        for r in c["regimes"]:
            for v in r["values"]:
                rows.append({"claim": c["id"], "regime": r["regime"], "group": v["group"] or "",
                             "estimate": v["estimate"], "lo": v["lo"], "hi": v["hi"],
                             "verdict": r["verdict"]})
    files.append(io.write_text(out / "claims.csv", pd.DataFrame(
        rows, columns=["claim", "regime", "group", "estimate", "lo", "hi", "verdict"]
    ).to_csv(index=False)))
    return files


def write_rounds_curves(out: Path, replay_dir: Path, summary: dict[str, Any] | None) -> None:
    """AdaSpark over the best pinned width against rounds served, per device model (replay):
    ``plots/width_vs_rounds.csv`` (for ``dvc plots``) and ``claims-width-vs-rounds.png|pdf``."""
    from adaspark.analysis.claims import rounds_curve, rounds_figure
    from adaspark.analysis.figures.style import save
    from adaspark.analysis.replay import device_replies

    curves = {dev: rounds_curve(device_replies(replay_dir, dev))
              for dev in ((summary or {}).get("devices") or {})}
    frame = pd.concat([c.assign(device=d) for d, c in curves.items() if not c.empty]
                      or [pd.DataFrame(columns=["rounds", "ratio", "best_width", "replies",
                                                "device"])], ignore_index=True)
    io.write_text(out / "plots" / "width_vs_rounds.csv", frame.to_csv(index=False))
    save(rounds_figure(curves), out, "claims-width-vs-rounds")


def tokens_per_round(run_dir: Path) -> float | None:
    """A run's committed tokens per round as its server counted them (our engine's arms; None
    for llama-server's, which report none)."""
    from adaspark.analysis.records import read_replies

    if not (run_dir / "replies.parquet").is_file():
        return None
    r = read_replies(run_dir)
    if "server_rounds" not in r.columns:
        return None
    rounds = pd.to_numeric(r["server_rounds"], errors="coerce").fillna(0).sum()
    return float(r["completion_tokens"].sum() / rounds) if rounds > 0 else None


def screen(claims: list[dict[str, Any]], reality: list[dict[str, Any]]) -> str:
    """The stage's one-screen summary."""
    from collections import Counter

    n = Counter(c["verdict"] for c in claims)
    lines = [f"claims: {len(claims)} claims: " + ", ".join(f"{k} {v}" for k, v in n.items())]
    for c in claims:
        lines.append(f"  {c['verdict']:<13} {c['id']}")
    for r in reality:
        lines.append(f"  replay/real {r['arm']:<18} {r['replay_over_real']:.3f}"
                     + ("" if r["within_5pct"] else "  (outside 5%)")
                     + (f"; relative to {r['reference']} {r['relative_to_reference']:.3f}"
                        if "reference" in r else ""))
    return "\n".join(lines)


@stage_main("claims")
def main(argv: list[str] | None = None) -> int:
    from adaspark.analysis.claims import (
        RULE,
        claims_markdown,
        evaluate,
        metrics,
        read_ledger,
        replay_vs_real,
        width_markdown,
        width_report,
    )
    from adaspark.analysis.replay import read_summary, run_tok_per_s
    from adaspark.replay.settings import CPU_MEASURED
    from adaspark.stages.tables import options_from_params

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--runs", default="runs", type=Path)
    ap.add_argument("--replay", default="runs/replay", type=Path)
    ap.add_argument("--ledger", default="data/claims.yaml", type=Path)
    ap.add_argument("--out", default="paper", type=Path)
    a = ap.parse_args(argv)
    params = load_params(a.params)
    options = options_from_params(params)
    ledger = read_ledger(a.ledger)
    summary = read_summary(a.replay)
    regimes = [cpu_regime(a.runs, params, options), *replay_regimes(a.replay, summary)]
    claims = evaluate(ledger, regimes, options)
    widths = width_report(regimes, options)
    decode = {arm: tps for arm in params.get("run_arms") or []
              if (tps := run_tok_per_s(a.runs / "arms" / arm)) == tps}  # NaN: not run
    reality = replay_vs_real(summary, decode, CPU_MEASURED,
                             (params.get("run") or {}).get("cap"),
                             {arm: tpr for arm in decode
                              if (tpr := tokens_per_round(a.runs / "arms" / arm))},
                             (params.get("run") or {}).get("groups"))
    checks = ((summary or {}).get("devices") or {}).get(CPU_MEASURED, {}).get("price_check")
    io.write_json(a.out / "claims.json", {"rule": RULE, "preset": options.preset,
                                          "target": options.target, "claims": claims,
                                          "replay_vs_real": reality,
                                          "price_check": checks or {}, "width_replay": widths})
    io.write_text(a.out / "claims.md", claims_markdown(claims, reality, regimes, checks)
                  + "\n" + width_markdown(widths))
    io.write_json(a.out / "metrics.json", metrics(claims, reality, decode))
    plot_data(a.out / "plots", a.runs, decode, claims)
    write_rounds_curves(a.out, a.replay, summary)
    print(screen(claims, reality))
    return 0


if __name__ == "__main__":
    sys.exit(main())
