"""The sampling block of the report (the paper's second open question, §7: decoding at
temperature > 0): each arm of ``extra_runs.sampled`` at each temperature, beside the main runs'
greedy replies of the same arms when they served the same subset (temperature 0).

Per arm and temperature: decode tok/s (generated tokens over decode time, summed over replies,
§4.1), tokens per round, the acceptance of drafted rows (accepted over drafted, summed), the
acceptance per position after the anchor (:func:`acceptance_by_position`) and the mean rows per
verify (the width, from each reply's width histogram; our engine only: llama-server
does not report its rounds). Per drafter block and temperature: AdaSpark over the block's
llama.cpp baseline and over its own chain (geometric mean of per-reply ratios, bootstrap
interval over conversations, :func:`adaspark.analysis.stats.compare`). Replies are paired by
their key (set, conversation, turn, reply): every arm answers the same prompts with the same
seed (:func:`adaspark.runs.rows.reply_seed`), so our arms' texts agree seed by seed in exact
mode (lossless keyed sampling); llama-server draws from its own random stream, so its pair is
the same prompt and seed, not the same text.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd

from adaspark.analysis.records import (
    BLOCKS,
    EXTRA_DIR,
    Options,
    Records,
    concat_replies,
    read_replies,
    read_run_meta,
    request_summaries,
)
from adaspark.analysis.replay import read_summary
from adaspark.analysis.run_selection import (
    REPLAY_DIR,
    STAGE_SAMPLED,
    temperature_dir,
)
from adaspark.analysis.sections import Section, frame_cells
from adaspark.analysis.tables.common import compare_or_none, throughput_or_none
from adaspark.analysis.tables.render import ci_text
from adaspark.analysis.tables.table2 import table2_acceptance_prediction

TEMPERATURE = "temperature"
METHOD = ("Each arm of extra_runs.sampled at each temperature, beside the main runs' greedy "
          "replies of the same arms (temperature 0) when they served the same subset. Decode "
          "tok/s as the headline (§4.1); tokens per round and rows per verify from our engine's "
          "counts (llama-server does not report its rounds); acceptance is accepted over "
          "drafted rows. AdaSpark's ratios are geometric means of per-reply ratios with the "
          "bootstrap interval over conversations, replies paired by prompt and seed: our arms "
          "sample the same text for a seed (keyed draws), llama-server draws its own.")
ACCEPTANCE_COLUMNS = ("requests", "nodes", "head-based", "fitted", "change")
#: The last position the per-position table shows: a block's every position (the draft model
#: drafts 4, the paper's DSpark blocks B = 7 or 9, Figure 1); an n-gram chain may reach further,
#: where few rounds get.
MAX_POSITION = 9
#: Fewest rounds tested at a position for its acceptance to be shown (fewer: an empty cell; a
#: deep position's few n-gram rounds would read as a rate).
MIN_TESTED = 20
COLUMNS = ("arm", TEMPERATURE, "replies", "decode tok/s", "tokens per round", "acceptance",
           "rows per verify")


def _sampling_of(run_dir: Path) -> tuple[float, int | None]:
    """The temperature and run seed a run recorded (its fingerprint's ``sampling``; none:
    greedy, (0, None))."""
    sampling = read_run_meta(run_dir).get("fingerprint", {}).get("sampling")
    if not isinstance(sampling, dict):
        return 0.0, None
    return float(sampling["temperature"]), int(sampling["seed"])


def sampled_replies(records: Records) -> pd.DataFrame:
    """Every sampled run's rows with a ``temperature`` column, and the main runs' rows of the
    same arms at temperature 0 when they served the sampled runs' subset (else left out: another
    subset is no pair). An arm's runs with several run seeds are its repeats (``repeat`` 1, 2,
    ... in seed order), so the statistics average a reply's speed over its seeds
    (:func:`adaspark.analysis.stats.arm_speeds`). Empty when no sampled run exists."""
    parents = sorted(p for p in (records.root / EXTRA_DIR).glob(f"{STAGE_SAMPLED}-t*")
                     if p.is_dir())
    runs: list[tuple[float, int, Path]] = []
    subsets = set()
    for parent in parents:
        dirs = records.dirs(parent)
        for d in dirs:
            temperature, seed = _sampling_of(d)
            runs.append((temperature, seed or 0, d))
        if dirs:
            subsets.add(records.subset_of(parent))
    frames, arms = [], set()
    seeds = sorted({s for _, s, _ in runs})
    for temperature, seed, d in runs:
        f = concat_replies([d])
        if f.empty:
            continue
        f[TEMPERATURE] = temperature
        f["repeat"] = seeds.index(seed) + 1
        frames.append(f)
        arms.add(d.name)
    if not frames:
        return pd.DataFrame(columns=[*COLUMNS])
    if len(subsets) == 1 and records.main_dirs and records.main_subset in subsets:
        main = [d for d in records.main_dirs if d.name in arms and _sampling_of(d)[0] == 0.0]
        if main:
            f = concat_replies(main)
            f[TEMPERATURE] = 0.0
            frames.insert(0, f)
    return pd.concat(frames, ignore_index=True)


def _timings_field(timings: pd.Series, key: str) -> Iterator[dict[str, Any]]:
    """Each reply's ``timings[key]`` (a reply whose timings are not JSON, or lack it, gives
    nothing)."""
    for t in timings:
        try:
            value = json.loads(t).get(key) or {}
        except (TypeError, ValueError, AttributeError):
            continue
        yield value


def _width_mean(timings: pd.Series) -> float:
    """Mean rows per verify over replies' width histograms (``timings.widths``), or NaN."""
    rows = rounds = 0
    for widths in _timings_field(timings, "widths"):
        rows += sum(int(w) * int(n) for w, n in widths.items())
        rounds += sum(int(n) for n in widths.values())
    return rows / rounds if rounds else math.nan


def sampling_table(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per arm and temperature (:data:`COLUMNS`), from :func:`sampled_replies`."""
    rows: list[dict[str, Any]] = []
    for (arm, temp), g in frame.groupby(["arm", TEMPERATURE], sort=False):
        t = throughput_or_none(g, str(arm))
        rounds = pd.to_numeric(g.get("server_rounds"), errors="coerce").sum(min_count=1)
        drafted = pd.to_numeric(g.get("server_drafted"), errors="coerce").sum()
        accepted = pd.to_numeric(g.get("server_accepted"), errors="coerce").sum()
        rows.append({
            "arm": str(arm), TEMPERATURE: float(temp),
            "replies": None if t is None else t.n_replies,
            "decode tok/s": None if t is None else t.tokens_per_s,
            "tokens per round": (g["completion_tokens"].sum() / rounds
                                 if rounds and not math.isnan(rounds) else None),
            "acceptance": accepted / drafted if drafted else None,
            "rows per verify": (_width_mean(g["timings"]) if "timings" in g
                                and g["engine"].eq("ours").all() else None),
        })
    out = pd.DataFrame(rows, columns=list(COLUMNS)).sort_values(
        ["arm", TEMPERATURE], kind="stable", ignore_index=True)
    out.attrs["formats"] = {TEMPERATURE: "{:g}", "decode tok/s": "{:.1f}",
                            "tokens per round": "{:.2f}", "acceptance": "{:.2f}",
                            "rows per verify": "{:.2f}", "replies": "{:,.0f}"}
    return out


def _position_counts(timings: pd.Series) -> dict[int, tuple[int, int]]:
    """Per text position after the anchor, the rounds that tested a candidate there and the
    rounds that accepted one, summed over replies' ``timings.positions`` (our engine's
    :meth:`adaspark.decoding.round.RoundCounts.positions`; a reply without it adds nothing)."""
    out: dict[int, tuple[int, int]] = {}
    for positions in _timings_field(timings, "positions"):
        for k, c in positions.items():
            tested, accepted = out.get(int(k), (0, 0))
            out[int(k)] = (tested + int(c["tested"]), accepted + int(c["accepted"]))
    return out


def acceptance_by_position(frame: pd.DataFrame, max_position: int = MAX_POSITION,
                           min_tested: int = MIN_TESTED) -> pd.DataFrame:
    """Acceptance per position, per arm of our engine and temperature: at text position k
    after the anchor, the share of rounds that tested a candidate there (their accepted path
    reached k - 1 and a node of the tree waited at k) that accepted one, summed over replies
    (:func:`_position_counts`): the chance that a round which reached position k went past it.
    Positions 1 to ``max_position``, a column each; a cell with fewer than ``min_tested``
    rounds tested is empty, and a column empty for every arm is dropped. llama-server's arms
    report only their totals (``acceptance`` in :func:`sampling_table`) and are left out."""
    rows: list[dict[str, Any]] = []
    for (arm, temp), g in frame.groupby(["arm", TEMPERATURE], sort=False):
        if "timings" not in g:
            continue
        counts = _position_counts(g["timings"])
        if not counts:
            continue
        row: dict[str, Any] = {"arm": str(arm), TEMPERATURE: float(temp)}
        for k in range(1, max_position + 1):
            tested, accepted = counts.get(k, (0, 0))
            row[str(k)] = accepted / tested if tested >= max(1, min_tested) else None
        rows.append(row)
    columns = ["arm", TEMPERATURE, *(str(k) for k in range(1, max_position + 1))]
    out = pd.DataFrame(rows, columns=columns)
    if not out.empty:
        out = out.sort_values(["arm", TEMPERATURE], kind="stable", ignore_index=True)
        out = out[[c for c in columns if c in ("arm", TEMPERATURE) or out[c].notna().any()]]
    out.attrs["formats"] = {TEMPERATURE: "{:g}",
                            **{str(k): "{:.2f}" for k in range(1, max_position + 1)}}
    return out


def sampling_ratios(frame: pd.DataFrame, options: Options) -> pd.DataFrame:
    """Per drafter block and temperature: AdaSpark over the block's llama.cpp baseline and over
    its own chain, paired by reply key (geometric mean, bootstrap over conversations)."""
    rows = []
    for temp, g in frame.groupby(TEMPERATURE, sort=True):
        for b in BLOCKS:
            over_llama = compare_or_none(g, b.adaspark, b.llamacpp, options)
            over_chain = compare_or_none(g, b.adaspark, b.chain, options)
            if over_llama is None and over_chain is None:
                continue
            rows.append({
                "drafter": b.kind, TEMPERATURE: float(temp),
                "AdaSpark / llama.cpp": None if over_llama is None
                else ci_text(over_llama.ratio, over_llama.lo, over_llama.hi),
                "AdaSpark / own chain": None if over_chain is None
                else ci_text(over_chain.ratio, over_chain.lo, over_chain.hi),
            })
    out = pd.DataFrame(rows, columns=["drafter", TEMPERATURE, "AdaSpark / llama.cpp",
                                      "AdaSpark / own chain"])
    out.attrs["formats"] = {TEMPERATURE: "{:g}"}
    return out


def acceptance_prediction(frame: pd.DataFrame, target: str) -> pd.DataFrame:
    """Table 2's comparison (§3.3) per AdaSpark arm and temperature: the fitted acceptance model
    against the head-based estimate, log loss per labelled node, scored before either learned
    (:func:`adaspark.analysis.tables.table2.table2_acceptance_prediction`, over the first run
    seed's requests). Under sampling a node's label is the verify's outcome (accepted when its
    token is the one drawn at its parent's row), so the same model and scores apply; its
    features stay those known before the verify (the target's probability of a candidate is
    known only after it)."""
    rows = []
    for b in BLOCKS:
        for temp, g in frame[frame["arm"] == b.adaspark].groupby(TEMPERATURE, sort=True):
            summaries = request_summaries(g[g["repeat"] == g["repeat"].min()])
            if summaries.empty:
                continue
            t2 = table2_acceptance_prediction(summaries, target).iloc[0]
            rows.append({"arm": b.adaspark, TEMPERATURE: float(temp),
                         **{c: t2[c] for c in ACCEPTANCE_COLUMNS}})
    out = pd.DataFrame(rows, columns=["arm", TEMPERATURE, *ACCEPTANCE_COLUMNS])
    out.attrs["formats"] = {TEMPERATURE: "{:g}", "requests": "{:,.0f}", "nodes": "{:,.0f}",
                            "head-based": "{:.4f}", "fitted": "{:.4f}", "change": "{:+.1%}"}
    return out


def read_replay(root: Path) -> tuple[dict[str, Any] | None, pd.DataFrame]:
    """The sampled replay's summary (None when the stage has not run) and its replayed replies
    (a run's columns, plus ``temperature``, ``device`` and ``device_label``)."""
    summary = read_summary(root / REPLAY_DIR)
    if summary is None:
        return None, pd.DataFrame()
    frames = []
    for r in summary.get("replays") or ():
        d = root / REPLAY_DIR / temperature_dir(r["temperature"]) / r["device"] / r["arm"]
        f = read_replies(d)
        if f.empty:
            continue
        frames.append(f.assign(**{TEMPERATURE: float(r["temperature"]), "device": r["device"],
                                  "device_label": summary["devices"][r["device"]]["label"]}))
    return summary, pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def replay_table(summary: dict[str, Any]) -> pd.DataFrame:
    """One row per device model, temperature and arm of the sampled replay: its label, tok/s
    (tokens over the device's priced seconds, summed over replies), tokens per round and the
    acceptance of drafted rows."""
    rows = [{"device": r["device"], "label": summary["devices"][r["device"]]["label"],
             TEMPERATURE: float(r["temperature"]), "arm": r["arm"],
             "decode tok/s": r["tokens_per_s"], "tokens per round": r["tokens_per_round"],
             "acceptance": r["accepted"] / r["drafted"] if r["drafted"] else None}
            for r in summary.get("replays") or ()]
    out = pd.DataFrame(rows, columns=["device", "label", TEMPERATURE, "arm", "decode tok/s",
                                      "tokens per round", "acceptance"])
    out.attrs["formats"] = {TEMPERATURE: "{:g}", "decode tok/s": "{:.1f}",
                            "tokens per round": "{:.2f}", "acceptance": "{:.2f}"}
    return out


def replay_ratios(replies: pd.DataFrame, options: Options) -> pd.DataFrame:
    """Per device model, temperature and drafter block: AdaSpark over its own chain in replay
    (geometric mean of per-reply ratios, bootstrap over conversations; every arm replays the
    same sampled replies, so each pair is the same text)."""
    rows = []
    if replies.empty:
        return pd.DataFrame(columns=["device", TEMPERATURE, "drafter", "AdaSpark / own chain"])
    for (dev, temp), g in replies.groupby(["device", TEMPERATURE], sort=True):
        for b in BLOCKS:
            c = compare_or_none(g, b.adaspark, b.chain, options)
            if c is not None:
                rows.append({"device": dev, TEMPERATURE: float(temp), "drafter": b.kind,
                             "AdaSpark / own chain": ci_text(c.ratio, c.lo, c.hi)})
    out = pd.DataFrame(rows, columns=["device", TEMPERATURE, "drafter", "AdaSpark / own chain"])
    out.attrs["formats"] = {TEMPERATURE: "{:g}"}
    return out


def replay_part(records: Records, options: Options, sec: Section) -> None:
    """The sampled replay's tables in ``sec`` (a line when the stage did not replay)."""
    summary, replies = read_replay(records.root)
    if summary is None or not summary.get("replays"):
        sec.p("In replay: not run in this preset (the sampled-replay stage replays the sampled "
              "arms of our engine under the device models when extra_runs.sampled names them: "
              "preset=sampling).")
        return
    labels = sorted({v["label"] for v in summary["devices"].values()})
    sec.p(f"In replay (REPLAYED, not run; device models labelled {', '.join(labels)}): each "
          f"sampled arm of our engine replayed over {summary['replies_of']}'s sampled replies "
          f"(run seed {summary['seed']}, each reply with its own seed), labelled with the "
          "target's keyed draws on this machine's engine; acceptance is this machine's, only "
          "the costs are the device's.")
    sec.tables(("Sampled arms in replay, by device model and temperature",
                *frame_cells(replay_table(summary))))
    opts = replace(options, target=f"{options.target} (replay)")
    ratios = replay_ratios(replies, opts)
    if not ratios.empty:
        sec.tables(("AdaSpark over its own chain in replay, by device model and temperature",
                    *frame_cells(ratios)))


def sampling_section(records: Records, options: Options) -> Section:
    """The report's sampling block (empty runs: a line naming the preset that fills it)."""
    sec = Section("Sampling at temperature > 0 (not a table of the paper)")
    frame = sampled_replies(records)
    if frame.empty:
        return sec.p("No sampled run in this preset: `dvc exp run -S preset=sampling` runs "
                     "the draft-model and DSpark blocks' arms at temperatures 0.7 and 1.0 "
                     "(extra_runs.sampled).")
    sec.p(METHOD)
    sec.tables(("Arms by temperature", *frame_cells(sampling_table(frame))))
    positions = acceptance_by_position(frame)
    if not positions.empty:
        sec.tables((f"Acceptance per position after the anchor (our engine; llama-server "
                    f"reports only its totals; empty: fewer than {MIN_TESTED} rounds reached "
                    "it)", *frame_cells(positions)))
    ratios = sampling_ratios(frame, options)
    if not ratios.empty:
        sec.tables(("AdaSpark by temperature", *frame_cells(ratios)))
    prediction = acceptance_prediction(frame, options.target)
    if not prediction.empty:
        sec.tables(("Acceptance prediction by temperature (Table 2's comparison)",
                    *frame_cells(prediction)))
    replay_part(records, options, sec)
    return sec
