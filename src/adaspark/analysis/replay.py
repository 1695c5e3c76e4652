"""The report's replay section (issue 14, "Outputs"): Tables 3, 6, 8 and 9 and Figures 5 and 8 in
replay form, one block per device model, from the replay stage's records (``runs/replay``,
:mod:`adaspark.stages.replay`), beside the paper's values where the model reconstructs one of
the paper's targets; then the replay of ``cpu-measured`` beside the real runs it replays, and
the exactness check.

Every replayed reply is this machine's text and acceptance (labels of exact-mode replies), priced
by a device model: the tables say so in their titles. Table 6's first row, llama.cpp's tok/s,
cannot be replayed (llama-server's loop is not a rule): our ``chain3`` in replay stands in for
it, and the table says so.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections import Counter
from pathlib import Path
from typing import Any

import pandas as pd

from adaspark.analysis.records import (
    ADASPARK,
    PINNED,
    Options,
    read_replies,
    read_rounds,
)

SUMMARY = "summary.json"
STAND_IN = ("llama.cpp's tok/s cannot be replayed (llama-server's own loop is not a width "
            "rule): a block's first row is its chain in replay (chain3, chain3-dspark), standing "
            "in for it, so every ratio is over that chain")


def read_summary(replay_dir: Path) -> dict[str, Any] | None:
    p = Path(replay_dir) / SUMMARY
    return json.loads(p.read_text(encoding="utf-8")) if p.is_file() else None


def device_replies(replay_dir: Path, device: str) -> pd.DataFrame:
    """Every replayed arm's per-reply rows under ``device`` (a run's columns, plus ``replay``,
    ``device`` and ``device_label``)."""
    dirs = sorted(p for p in (Path(replay_dir) / device).iterdir()
                  if (p / "replies.parquet").is_file())
    if not dirs:
        return pd.DataFrame()
    return pd.concat([read_replies(d) for d in dirs], ignore_index=True)


def with_stand_in(replies: pd.DataFrame) -> pd.DataFrame:
    """``replies`` plus each block's chain again as its llama.cpp baseline (Table 6's first
    row of a block): ``chain3`` as ``llamacpp-chain``, ``chain3-dspark`` as
    ``llamacpp-dspark``."""
    from adaspark.analysis.records import BLOCKS

    out = [replies]
    for block in BLOCKS:
        chain = replies[replies["arm"].astype(str) == block.chain]
        if not chain.empty:
            out.append(chain.assign(arm=block.llamacpp, entry=block.llamacpp))
    return pd.concat(out, ignore_index=True) if len(out) > 1 else replies


FIGURES_DIR = "figures"


def write_figures(replay_dir: Path, device: str) -> dict[str, str]:
    """Figures 5 and 8 in replay form as the figures stage draws them (PNG and PDF under
    ``<replay_dir>/<device>/figures/``, titled with the device model and marked replay):
    Figure 5 from the replay over Figure 5's prompts, Figure 8 from AdaSpark's replayed rounds.
    Returns each written figure's caption by name."""
    from adaspark.analysis.figures.fig5 import figure5_marginal_rows
    from adaspark.analysis.figures.fig8 import figure8_widths
    from adaspark.analysis.figures.style import save

    base = Path(replay_dir) / device
    label = f"{device} (replay)"
    made: dict[str, Any] = {}
    prompts = base / "fig5" / "prompts.parquet"
    if prompts.is_file():
        made["fig5"] = figure5_marginal_rows(pd.read_parquet(prompts), label)
    if (base / ADASPARK / "rounds").is_dir():
        rounds = read_rounds(base / ADASPARK)
        made["fig8"] = figure8_widths(rounds, label)
    captions = {}
    for name, fig in made.items():
        captions[name] = str(fig.adaspark["caption"])  # type: ignore[attr-defined]
        save(fig, base / FIGURES_DIR, name)
    return captions


def relabel_stand_in(table6: pd.DataFrame) -> pd.DataFrame:
    """Table 6 in replay: its first row named for what it is, chain3 standing in."""
    from adaspark.analysis.records import BLOCKS
    from adaspark.analysis.tables.table6 import base_row

    out = table6.copy()
    out.attrs = dict(table6.attrs)
    if "arm" in out.columns:
        names = {base_row(b): f"{b.chain} in replay, standing in for llama.cpp (tok/s)"
                 for b in BLOCKS}
        out["arm"] = out["arm"].map(lambda a: names.get(a, a))
    return out


def width_shares(rounds: pd.DataFrame) -> pd.Series:
    """Figure 8: the share of AdaSpark's rounds at each width, cold-start rounds left out."""
    from adaspark.analysis.figures.fig8 import width_shares as shares

    return shares(rounds) if not rounds.empty else pd.Series(dtype=float)


def best_pinned(summaries: dict[str, dict[str, Any]]) -> tuple[int, float] | None:
    """The pinned width with the highest replayed tok/s (summed tokens over summed time)."""
    have = [(w, summaries[a]["tokens_per_s"]) for w, a in PINNED.items()
            if a in summaries and summaries[a].get("tokens_per_s")]
    return max(have, key=lambda x: x[1]) if have else None


def top_widths(widths: dict[str, int], n: int = 3) -> str:
    total = sum(widths.values())
    if not total:
        return "none"
    common = Counter({int(k): v for k, v in widths.items()}).most_common(n)
    return ", ".join(f"{w} ({v / total:.0%})" for w, v in common)


def screen_summary(summary: dict[str, Any]) -> str:
    """The replay stage's one-screen summary."""
    lines = [f"replay of {summary['replies_of']}'s replies ({summary['subset']}, cap "
             f"{summary['cap']}) in {summary['stage_s']:.0f} s"]
    for arm, r in summary["check"].items():
        lines.append(f"  exactness {arm}: {r['rounds_identical']}/{r['rounds_compared']} rounds, "
                     f"committed identical {r['committed_identical']} -> "
                     f"{'EXACT' if r['exact'] else 'NOT EXACT'}")
    lines.append(f"  {'device model':<22} {'label':<13} {'AdaSpark':>9} {'best pinned':>15} "
                 f"{'ratio':>6}  widths AdaSpark chose most")
    for dev, arms in summary["replays"].items():
        a = arms.get(ADASPARK)
        best = best_pinned(arms)
        label = summary["devices"][dev]["label"]
        if a is None:
            lines.append(f"  {dev:<22} {label:<13} AdaSpark not replayed")
            continue
        tps = a["tokens_per_s"]
        b = f"w{best[0]} {best[1]:.1f}" if best else "-"
        ratio = f"{tps / best[1]:.3f}" if best else "-"
        lines.append(f"  {dev:<22} {label:<13} {tps:>9.1f} {b:>15} {ratio:>6}  "
                     f"{top_widths(a['widths'])}")
    if summary.get("skipped_arms"):
        lines.append(f"  not replayed (no drafter file): {', '.join(summary['skipped_arms'])}")
    return "\n".join(lines)


def run_tok_per_s(run_dir: Path) -> float:
    """A run's decode tok/s: its timed replies' tokens over their decode time, summed."""
    if not (Path(run_dir) / "replies.parquet").is_file():
        return math.nan
    r = read_replies(run_dir)
    r = r[r["decode_tps"] > 0]
    secs = (r["completion_tokens"] / r["decode_tps"]).sum()
    return float(r["completion_tokens"].sum() / secs) if secs > 0 else math.nan


def reality_rows(summary: dict[str, Any], runs: Path) -> list[list[str]]:
    """Each labelled arm: its labelled run's decode tok/s (exact mode, client clock), the same
    run's rounds summed (the recorded replay), its replay under ``cpu-measured`` and the arm's
    fast-mode run of the run stage where there is one (``runs/arms/<arm>``, its own cap)."""
    from adaspark.analysis.tables.render import cell_text
    from adaspark.replay.settings import CPU_MEASURED

    rows = []
    measured = summary["replays"].get(CPU_MEASURED, {})
    for arm, chk in summary["check"].items():
        real_tps = run_tok_per_s(Path(runs) / "labelled" / arm)
        fast_tps = run_tok_per_s(Path(runs) / "arms" / arm)
        m = measured.get(arm)
        model_tps = m.get("tokens_per_s") if m else None
        rows.append([arm, cell_text(real_tps, "{:.2f}"),
                     cell_text(chk.get("tokens_per_s"), "{:.2f}"),
                     cell_text(model_tps, "{:.2f}"), cell_text(fast_tps, "{:.2f}"),
                     cell_text(model_tps / fast_tps if model_tps and fast_tps > 0 else math.nan,
                               "{:.3f}"),
                     cell_text(m["tokens_per_round"] if m else math.nan, "{:.2f}"),
                     cell_text(chk.get("tokens_per_round"), "{:.2f}")])
    return rows


def fig5_points(replay_dir: Path, device: str) -> pd.DataFrame:
    """Figure 5 in replay: per reply, the 16-row tree's extra time per round (drafter included)
    and extra tokens per round over the 8-row tree's, both relative (n-gram candidates off), with
    the context the reply was decoded at (prompt plus half the reply)."""
    base = Path(replay_dir) / device / "fig5"
    if not ((base / "w8" / "replies.parquet").is_file()
            and (base / "w16" / "replies.parquet").is_file()):
        return pd.DataFrame()
    keys = ["set", "conversation", "turn", "reply"]
    a, b = (read_replies(base / w).set_index(keys) for w in ("w8", "w16"))
    per = {}
    for name, f in (("8", a), ("16", b)):
        per[name] = pd.DataFrame({"tok": f["completion_tokens"] / f["rounds"],
                                  "time": f["decode_s"] / f["rounds"],
                                  "context": f["prompt_tokens"] + f["completion_tokens"] / 2})
    j = per["8"].join(per["16"], lsuffix="_8", rsuffix="_16", how="inner")
    return pd.DataFrame({"context": j["context_8"],
                         "extra_tokens": j["tok_16"] / j["tok_8"] - 1.0,
                         "extra_time": j["time_16"] / j["time_8"] - 1.0}).reset_index()


FIG5_CELLS = ("extra tokens per round", "extra time per round", "16 rows faster")


def _fig5_rows(points: pd.DataFrame, lead: Any) -> list[list[str]]:
    """Figure 5's points as table rows (``lead(row)`` gives the leading cells), and the
    medians."""
    rows = [[*lead(r), f"{r.extra_tokens:+.1%}", f"{r.extra_time:+.1%}",
             "yes" if r.extra_tokens > r.extra_time else "no"] for r in points.itertuples()]
    n_lead = len(rows[0]) - 3 if rows else 2
    rows.append(["median", *[""] * (n_lead - 1), f"{points['extra_tokens'].median():+.1%}",
                 f"{points['extra_time'].median():+.1%}", ""])
    return rows


def _left_out(prompts: Path) -> str:
    """The report's words for Figure 5's contexts the labels stage left out
    (``replay.fig5_contexts``), read beside the replay's ``prompts.parquet``."""
    meta = prompts.with_suffix(".json")
    gone = json.loads(meta.read_text(encoding="utf-8")).get("contexts_left_out", []) \
        if meta.is_file() else []
    if not gone:
        return ""
    return (f" Not labelled in this preset: the {', '.join(f'{c:,}' for c in gone)}-token "
            "context (replay.fig5_contexts; exact-mode labels there take most of the labels "
            "stage on this CPU); the fig5 stage measured it on the engine.")


def _paper_fig5(paper: str | None) -> str:
    """What the paper's text says of Figure 5 for ``paper`` (its target), or nothing."""
    from adaspark.analysis import paper_values

    text = paper_values.paper_figure("fig5")["text"]
    said = [f"{k.replace('_', ' ')}: {v[paper]:+.1%}" for k, v in text.items() if paper in v]
    return f" The paper, {paper}: " + "; ".join(said) + "." if said else ""


def _paper_rows(name: str, target: str | None) -> tuple[list[str], list[list[str]]] | None:
    from adaspark.analysis import paper_values

    if target is None:
        return None
    try:
        t = paper_values.paper_table(name)
    except KeyError:
        return None
    col = "target" if "target" in t.columns else None
    if col is None:  # Table 8: one column per target
        if target not in t.columns:
            return None
        t = t[[t.columns[0], target]]
        return [str(c) for c in t.columns], [[str(v) for v in r] for r in t.to_numpy()]
    keep, on = [], False
    for r in t.to_numpy().tolist():
        if str(r[0]):
            on = str(r[0]) == target
        if on:
            keep.append([str(v) for v in r])
    return ([str(c) for c in t.columns], keep) if keep else None


def replay_sections(replay_dir: Path, runs_dir: Path, options: Options) -> list[Any]:
    """The report's replay sections (an explanation when the replay stage has not run);
    ``runs_dir`` holds ``labelled/`` and ``arms/``."""
    from adaspark.analysis.sections import Section, frame_cells
    from adaspark.analysis.tables.table3 import table3_pinned_widths
    from adaspark.analysis.tables.table6 import table6_ablation
    from adaspark.analysis.tables.table8 import table8_by_workload
    from adaspark.analysis.tables.table9 import table9_width_classes

    summary = read_summary(replay_dir)
    head = Section("Trace-driven replay: this machine's acceptance, other devices' "
                   "costs")
    if summary is None:
        return [head.p(f"Not run: {Path(replay_dir) / SUMMARY} does not exist (the replay "
                       "stage writes it).")]
    n_check = sum(r["rounds_compared"] for r in summary["check"].values())
    exact = all(r["exact"] for r in summary["check"].values())
    head.p(
        f"Every arm below is REPLAYED, not run: its real width rule is run over the labels of "
        f"{summary['replies_of']}'s exact-mode replies on the {summary['subset']} subset (cap "
        f"{summary['cap']} tokens), made once on this machine's engine (the target's greedy "
        "token at every position and the drafter's full block), and each round is priced by a "
        "device model. Acceptance is this machine's target and drafter (the embedded pair, a "
        "stand-in for the paper's DSpark drafters); only the costs are the device's. A model "
        "labelled reconstructed is read from the paper's published figures (each number's "
        "source line is in its file under conf/device/), not measured; cpu-measured is fitted "
        "from this machine's survey and a run's round trace (its section names which). "
        "Exactness check: "
        f"{len(summary['check'])} arm(s) replayed under their own recorded times, "
        f"{n_check} rounds compared, {'exact' if exact else 'NOT EXACT'}.")
    if summary.get("skipped_arms"):
        head.p("Not replayed (no drafter file for the target): "
               + ", ".join(summary["skipped_arms"]) + ".")
    sections = [head]
    for dev, arms in summary["replays"].items():
        info = summary["devices"][dev]
        paper = info.get("paper_target")
        title = f"{dev} ({info['label']}{', the paper’s ' + paper if paper else ''})"
        sec = Section(f"Replay under {title}", level=3)
        linear = info["verify"].get("shape") == "linear"
        timing = (info.get("sources") or {}).get("draft_ms")
        sec.p(f"Device model {dev}: {info.get('description') or ''} ({info['label']}; file "
              f"{info['file']}). "
              + ("Verify time interpolated between the widths " if linear else
                 "Verify classes (top widths) ") + f"{info['verify']['rows']}, drafter "
              f"D {info['draft_ms']} ms, host {info['host_ms']} ms per round"
              + (f" (D and host: {timing})" if info["label"] == "measured" and timing else "")
              + f"; widths above {info['max_rows']} rows are not priced, so arms are held to "
              "it.")
        replies = device_replies(replay_dir, dev)
        if replies.empty:
            sections.append(sec.p("No replayed reply."))
            continue
        opts = dataclasses.replace(options, target=f"{dev} (replay)")
        ada = arms.get(ADASPARK)
        best = best_pinned(arms)
        if ada and best:
            ratio = ada["tokens_per_s"] / best[1]
            sec.p(f"AdaSpark {ada['tokens_per_s']:.1f} tok/s in replay, the best pinned width "
                  f"{best[0]} rows {best[1]:.1f} (AdaSpark / best {ratio:.3f}, summed tokens "
                  "over summed time); widths AdaSpark chose most: "
                  f"{top_widths(ada['widths'])}.")
        for name, build, frame in (
                ("table3", table3_pinned_widths, replies),
                ("table6", table6_ablation, with_stand_in(replies)),
                ("table8", table8_by_workload, replies),
                ("table9", table9_width_classes, replies)):
            try:
                t = build(frame, opts.target, opts)
            except (KeyError, ValueError) as e:  # one table's gap must not hide the others
                sec.p(f"{name}: not generated ({type(e).__name__}: {e}).")
                continue
            note = ""
            if name == "table6":
                note = f" {STAND_IN}."
                t = relabel_stand_in(t)
            pair = [(f"{t.attrs['label']} in replay under {dev}: {t.attrs['title']}",
                     *frame_cells(t))]
            pr = _paper_rows(name, paper)
            if pr is not None:
                pair.append((f"Paper, {paper}", *pr))
            sec.p(f"{t.attrs['label']} (replay, {dev}). {t.attrs['caption']}{note}")
            sec.tables(*pair)
        for name, png in (("Figure 5", "fig5"), ("Figure 8", "fig8")):
            path = Path(replay_dir) / dev / FIGURES_DIR / f"{png}.png"
            if path.is_file():
                sec.figure(path, f"{name} in replay under {dev} (a device model's prices over "
                                 "this machine's labels).")
        prompts = Path(replay_dir) / dev / "fig5" / "prompts.parquet"
        if prompts.is_file():
            from adaspark.analysis.figures.fig5 import marginal_points

            mp = marginal_points(pd.read_parquet(prompts))
            sec.p("Figure 5 (replay over Figure 5's own prompts): per context and prompt, the "
                  "16-row tree's extra time and extra tokens per round over the 8-row tree's, "
                  "both pinned with n-gram candidates off, each run from empty, as the fig5 "
                  "stage runs them. Above the diagonal (more tokens than time) the wider tree "
                  "decodes faster." + _paper_fig5(paper) + _left_out(prompts))
            sec.tables((f"Figure 5 in replay under {dev} (its prompts)",
                        ["context", "prompt", *FIG5_CELLS],
                        _fig5_rows(mp, lambda r: [f"{r.context:,}", str(r.prompt)])))
        pts = fig5_points(replay_dir, dev)
        if not pts.empty:
            sec.p("Figure 5 (replay): what the second eight rows cost and buy, per labelled "
                  "reply (the paper: per target, context and prompt, 256-token runs): the "
                  "16-row tree's extra time and extra tokens per round over the 8-row tree's, "
                  "both pinned with n-gram candidates off, as the fig5 stage runs them. Above "
                  "the diagonal (more tokens than time) the wider tree decodes faster."
                  + _paper_fig5(paper))
            sec.tables((f"Figure 5 in replay under {dev}", ["reply", "context", *FIG5_CELLS],
                        _fig5_rows(pts, lambda r: [f"{r.set}/{r.conversation}/{r.turn}",
                                                   f"{r.context:,.0f}"])))
        # Figure 8 as numbers: the share of AdaSpark's rounds at each width
        ada_dir = Path(replay_dir) / dev / ADASPARK
        if ada_dir.is_dir():
            shares = width_shares(read_rounds(ada_dir))
            rows = [[str(int(w)), f"{s:.1%}"] for w, s in shares.items() if s >= 0.005]
            pair = [(f"Figure 8 in replay under {dev}: share of AdaSpark's rounds per width",
                     ["rows", "share"], rows)]
            if paper:
                from adaspark.analysis import paper_values

                pf = paper_values.paper_figure("fig8")["caption"]["shares"].get(paper, {})
                pair.append((f"Paper, {paper} (Figure 8 caption)", ["rows", "share"],
                             [[k, f"{v:.0%}"] for k, v in pf.items()]))
            sec.p("Figure 8 (replay): the share of AdaSpark's replayed rounds at each verified "
                  "width, cold-start rounds left out (widths under 0.5% omitted).")
            sec.tables(*pair)
        sections.append(sec)
    from adaspark.replay.settings import CPU_MEASURED

    real = Section("Replay against reality on this machine", level=3)
    real.p("Each labelled arm: its labelled run (exact mode, decode tok/s on the client's clock, "
           "first to last token), the same run's rounds summed (its replay under its own recorded "
           "times), its replay under cpu-measured (the fast-mode survey's verify law, the fast-"
           "mode instrumented run's median D and host time) and the arm's fast-mode run of the run"
           " stage where it ran (runs/arms, its own reply cap, so longer replies). Exact mode "
           "costs more per round than fast mode (its verifies also decode again the tokens the "
           "last round accepted), so cpu-measured, a fast-mode law, is set against the fast-mode "
           "run: how far apart those two are is how far a survey's device model is from a real run"
           " here."
           + ("" if CPU_MEASURED in summary["replays"] else
              " cpu-measured is not among replay.devices: its columns are dashes."))
    real.tables(("Replay against reality", ["arm", "labelled run tok/s (exact)",
                                            "recorded rounds tok/s", "cpu-measured tok/s",
                                            "fast-mode run tok/s", "cpu-measured / fast run",
                                            "tokens per round (cpu-measured)",
                                            "tokens per round (recorded)"],
                 reality_rows(summary, runs_dir)))
    sections.append(real)
    return sections

