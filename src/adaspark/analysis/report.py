"""The generated report (issue 6): every regenerated table beside the paper's values for the same
cells, every figure with the numbers the paper's caption states, the run's machine, models,
build, versions and checksums, and why this machine's numbers differ from the paper's.

Inputs are files the pipeline wrote, never logs: the tables stage's index
(``paper/tables/tables.json``: each table's formatted cells, caption and notes), the figures stage's
index (``figures/figures.json``) and images, the run directory's metadata (``runs/models.json``,
each arm's ``run.json``, ``runs/survey/survey.json``, ``runs/fig5/fig5.json``) and the survey's
rows, and the paper's values (:mod:`adaspark.analysis.paper_values`). Outputs: ``report.md``,
``report.html`` (figures embedded) and, where a LaTeX engine is installed, ``report.pdf``.
"""

from __future__ import annotations

import base64
import html
import json
import os
import platform
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd

from adaspark.analysis import paper_values
from adaspark.analysis.bootstrap import DEFAULT_CONFIDENCE
from adaspark.analysis.records import AR, BLOCKS, Options, Records
from adaspark.analysis.run_selection import selection_from_params
from adaspark.analysis.sections import Section, Table, frame_cells
from adaspark.analysis.tables.common import (
    block_of,
    compare_or_none,
    end_to_end_or_none,
    shown_blocks,
    stand_in_note,
    throughput_or_none,
)
from adaspark.analysis.tables.render import DASH, ci_text, latex_escape, to_markdown
from adaspark.io import scratch_dir, write_bytes, write_text

TABLES_INDEX = "tables.json"
FIGURES_INDEX = "figures.json"
LATEX_ENGINES = ("tectonic", "xelatex", "lualatex", "pdflatex")


# ---------------------------------------------------------------------------------------------
# The machine


def machine_info() -> dict[str, Any]:
    """This machine: CPU model and cores, memory, OS, Python (recorded by the stages that
    measure, and by the report)."""
    info: dict[str, Any] = {
        "host": platform.node(), "system": platform.platform(), "machine": platform.machine(),
        "python": platform.python_version(), "cpu_count": os.cpu_count(),
    }
    try:
        text = Path("/proc/cpuinfo").read_text()
        for line in text.splitlines():
            if line.lower().startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
    except OSError:
        info["cpu"] = platform.processor() or None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                info["memory_gib"] = round(int(line.split()[1]) / 2**20, 1)
                break
    except (OSError, ValueError, IndexError):
        pass
    return info


# ---------------------------------------------------------------------------------------------
# Extension table: every arm the preset ran

DECODE_TPS = "decode tok/s (headline, §4.1)"
MEDIAN_TTFT = "end to end: median TTFT s"
E2E_TPS = "end to end: tok/s"
DRAFTER_PREFILL = "drafter prefill s (median)"
BASELINE = "llama.cpp baseline"
OVER_BASELINE = "over the baseline"


def arms_overview(replies: pd.DataFrame, options: Options,
                  ar_replies: pd.DataFrame | None = None,
                  drafters: dict[str, str] | None = None) -> pd.DataFrame:
    """Every arm of the main runs: decode tok/s (the headline, §4.1), its speed over its drafter
    block's llama.cpp baseline (:func:`adaspark.analysis.tables.common.block_of`: the DSpark
    block's arms over ``llamacpp-dspark``, every other arm over ``llamacpp-chain``, llama.cpp's
    draft-model chain; geometric mean of per-reply ratios with the bootstrap interval over
    conversations)
    and its tok/s over our AR decode's (``ar_replies``: the AR arm's rows, the short stage's when
    it ran); then, beside the headline, what §4.1 leaves out by design: the median time to first
    token, the end-to-end tok/s and the drafter's median prompt prefill
    (:func:`adaspark.analysis.throughput.arm_end_to_end`). Not a table of the paper: it shows the
    extension arm (``adaspark-w1``) beside the others. ``drafters``: the drafter each arm's file
    names (``drafter:``), which places an arm outside the paper's blocks."""
    ar = throughput_or_none(ar_replies if ar_replies is not None else replies, AR)
    arms = list(dict.fromkeys(replies["arm"].astype(str)))
    rows = []
    for arm in arms:
        t = throughput_or_none(replies, arm)
        e = end_to_end_or_none(replies, arm)
        base = block_of(arm, (drafters or {}).get(arm.split("@")[0])).llamacpp
        vs_llama = None if arm == base else compare_or_none(replies, arm, base, options)
        rows.append({
            "arm": arm, "runs": int(replies.loc[replies["arm"] == arm, "repeat"].nunique()),
            "replies": None if t is None else t.n_replies,
            DECODE_TPS: None if t is None else t.tokens_per_s,
            BASELINE: None if arm == base else base,
            OVER_BASELINE: None if vs_llama is None
            else ci_text(vs_llama.ratio, vs_llama.lo, vs_llama.hi),
            "tok/s over AR": None if t is None or ar is None
            else t.tokens_per_s / ar.tokens_per_s,
            MEDIAN_TTFT: None if e is None else e.median_ttft_s,
            E2E_TPS: None if e is None else e.tokens_per_s,
            DRAFTER_PREFILL: None if e is None else e.median_drafter_prefill_s,
        })
    frame = pd.DataFrame(rows)
    frame.attrs["formats"] = {DECODE_TPS: "{:.1f}", "replies": "{:,.0f}",
                              "tok/s over AR": "{:.2f}×", MEDIAN_TTFT: "{:.2f}",
                              E2E_TPS: "{:.1f}", DRAFTER_PREFILL: "{:.2f}"}
    return frame


def sharding_note(replies: pd.DataFrame) -> str | None:
    """The label of results spread over machines (issue 16, ``launcher=ray``): which arms'
    replies came from more than one node, and what that means for the learners."""
    if "node" not in replies.columns:
        return None
    nodes = replies.dropna(subset=["node"]).groupby("arm")["node"].nunique()
    spread = {str(a): int(n) for a, n in nodes.items() if n > 1}
    if not spread:
        return None
    return ("SHARDED over a cluster: " + ", ".join(f"{a} ({n} nodes)" for a, n in spread.items())
            + ". Each node ran its shard of the conversations (launcher.shard=conversations), "
            "so each node's AdaSpark learned from its own shard only, not from the whole subset "
            "in the paper's order; launcher.shard=arms keeps the paper's order. Replies are "
            "paired only within one hardware fingerprint.")


# ---------------------------------------------------------------------------------------------
# Assembling


def _paper_cells(name: str) -> tuple[list[str], list[list[str]]]:
    t = paper_values.paper_table(name)
    return [str(c) for c in t.columns], [[str(v) for v in row] for row in t.to_numpy()]


def _flatten(d: Any, prefix: str = "") -> list[str]:
    if isinstance(d, dict):
        if d and all(not isinstance(v, dict) for v in d.values()):
            inner = ", ".join(f"{k} {_fmt(v)}" for k, v in d.items())
            return [f"{prefix}: {inner}" if prefix else inner]
        out: list[str] = []
        for k, v in d.items():
            out += _flatten(v, f"{prefix} / {k}" if prefix else str(k))
        return out
    return [f"{prefix}: {_fmt(d)}"]


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, list):
        return ", ".join(_fmt(x) for x in v)
    return str(v)


def _run_section(records: Records, params: dict[str, Any]) -> Section:
    from adaspark import provenance

    sec = Section("The run: machine, models, build, versions")
    machine = None
    for name in ("survey/survey.json", "fig5/fig5.json"):
        p = records.root / name
        if p.is_file():
            machine = machine or json.loads(p.read_text()).get("machine")
    m = machine or machine_info()
    items = [
        f"Machine{'' if machine else ' (where the report was generated)'}: "
        f"{m.get('cpu') or m.get('machine')}, {m.get('cpu_count')} cores"
        + (f", {m['memory_gib']} GiB" if m.get("memory_gib") else "")
        + f"; {m.get('system')}; Python {m.get('python')}."]
    preset = params.get("preset")
    preset_name = preset.get("name", "?") if isinstance(preset, dict) else preset or "?"
    run = params.get("run") or {}
    items.append(
        f"Preset `{preset_name}`: run_arms {', '.join(map(str, params.get('run_arms') or []))}; "
        f"subset {records.main_subset or run.get('subset', '?')}; cap {run.get('cap', '?')}.")
    models = records.models()
    for role in ("target", "drafter"):
        r = models.get(role)
        if isinstance(r, dict):
            items.append(f"{role.capitalize()}: {Path(str(r.get('path'))).name} "
                         f"({r.get('bytes', 0):,} bytes), sha256 `{r.get('sha256')}`.")
    git = provenance.git_state()
    items.append(f"Code: git {git.get('commit')}{' (dirty)' if git.get('dirty') else ''}; "
                 + ", ".join(f"{k} {v}" for k, v in provenance.versions().items()) + ".")
    left_out = records.left_out()
    if left_out:
        items.append("Left out, not made under these params (run_arms and extra_runs do not "
                     f"name them): {', '.join(left_out)}.")
    sec.ul(items)
    rows = []
    for rel, meta in records.run_metas().items():
        fp = meta.get("fingerprint", {})
        binary = fp.get("binary", {})
        bsha = (binary.get("llama_server_sha256") or binary.get("libllama_sha256") or "")[:16]
        rows.append([rel, str(fp.get("engine", DASH)), str(fp.get("run", {}).get("subset", DASH)),
                     str(fp.get("run", {}).get("cap", DASH)),
                     str(binary.get("version") or binary.get("llama_cpp_python") or DASH),
                     bsha or DASH, str(meta.get("fingerprint_sha256", DASH))])
    if rows:
        sec.tables(("Runs (each arm's run.json)",
                    ["run", "engine", "subset", "cap", "build", "binary sha256", "fingerprint"],
                    rows))
    return sec


def _why_section(records: Records, tables: dict[str, dict[str, Any]],
                 params: dict[str, Any]) -> Section:
    from adaspark.analysis.figures.fig3 import ratio_at
    from adaspark.replay.survey import per_row_increment, survey_medians

    sec = Section("Why it differs")
    paper3 = paper_values.paper_figure("fig3")["caption"]["T16_over_T2_at_1596"]
    try:
        survey = records.survey("the report")
    except FileNotFoundError:
        survey = None
    if survey is not None and len(survey):
        inc = per_row_increment(survey)
        med = survey_medians(survey)
        ctx = int(inc.get("context", 0))
        r16 = ratio_at(med, ctx, 16, 2)
        if "per_row_in_plain_decodes" in inc:
            sec.p(
                f"Verify cost. At {ctx:,} tokens of context each extra verified row costs this "
                f"machine {inc['ms_per_row']:.1f} ms, {inc['per_row_in_plain_decodes']:.2f} "
                f"times a plain one-token decode ({inc['t1_ms']:.1f} ms)"
                + (f", and 16 rows cost {r16:.2f} times 2 rows" if r16 else "")
                + " (Table 1, Figure 3). The paper's GPU verify streams the weights once for "
                "many rows: there 16 rows cost " + ", ".join(f"{v:.2f}" for v in paper3.values())
                + " times 2 rows on its four targets, flat to 8-16 rows on the dense ones. A "
                "wide tree is nearly free there and costs about one plain decode per row on a "
                "compute-bound CPU, so the widths the chooser picks, the gain of n-gram fill and "
                "the speedups over AR all shrink; the scheduler's task (find the width that "
                "pays) is the same, and its answer is narrower.")
    t4 = tables.get("table4")
    rows = [dict(zip(t4["columns"], r, strict=False)) for r in t4["rows"]] if t4 else []
    kinds = {b.kind: b for b in BLOCKS}
    rows = [(kinds[r["drafter"]], r) for r in rows if r.get("drafter") in kinds]
    if rows:
        sec.p(
            "End to end (Table 4), this run's "
            + "; ".join(f"{b.adaspark_label} over {b.llamacpp_label} is "
                        f"{r.get('AdaSpark / llama.cpp', DASH)} and over its own AR decode "
                        f"{r.get('AdaSpark / own AR', DASH)}" for b, r in rows)
            + "; the paper's, with its DSpark drafters, are "
            f"{_paper_range('table4', 'AdaSpark / llama.cpp')} and "
            f"{_paper_range('table4', 'AdaSpark / own AR')} over its four targets."
            + "".join(f" The {b.kind} block runs {b.stand_in}, so a round's fixed cost D is "
                      "larger as well." for b, _ in rows if b.stand_in)
            + "".join(f" The {b.kind} block runs the DSpark file the run names in both "
                      "engines, the paper's kind of drafter; how well it drafts is that file's "
                      "(no package ships trained DSpark weights for our targets)."
                      for b, _ in rows if not b.stand_in))
    run = params.get("run") or {}
    subset = records.main_subset or run.get("subset")
    try:
        n = len(records.replies("the report").groupby(
            ["set", "conversation", "turn", "reply"]))
    except FileNotFoundError:
        n = 0
    from adaspark.testset.subsets import PAPER_COUNTS

    protocol_cap = (f"{int(run['protocol_cap']):,} tokens" if "protocol_cap" in run
                    else "the protocol cap")
    sec.p(f"Protocol. This run served the {subset} subset ({n} distinct replies) with replies "
          f"capped at {run.get('cap', '?')} tokens; the paper serves the evaluation subset "
          f"({PAPER_COUNTS['evaluation'][2]} timed replies) to each reply's end or "
          f"{protocol_cap}. With few replies the intervals are wide and a context band "
          "can be empty (a dash).")
    return sec


def _paper_range(name: str, column: str) -> str:
    """The smallest and largest leading number of a paper table's column (``1.54-3.11×``)."""
    values = []
    for cell in paper_values.paper_table(name)[column]:
        head = str(cell).split("×")[0].split()[0].replace("−", "-") if str(cell) else ""
        try:
            values.append(float(head))
        except ValueError:
            continue
    return f"{min(values):.2f}-{max(values):.2f}×" if values else DASH


def _table_sections(tables: list[dict[str, Any]]) -> list[Section]:
    out = []
    for t in tables:
        sec = Section(f"{t['label']}: {t['title']}", level=3)
        pair: list[Table] = []
        stand = [b for b in BLOCKS if b.stand_in and stand_in_note(b) in (t.get("notes") or [])]
        if t.get("error"):
            sec.p(f"Not generated: {t['error']}")
        else:
            sec.p(f"This run. {t['caption']}")
            pair.append(("This run" + "".join(f" ({b.kind} block: {b.stand_in})"
                                              for b in stand), t["columns"], t["rows"]))
        try:
            pt = paper_values.paper_table(t["name"])
            cols, rows = _paper_cells(t["name"])
            pair.append((f"Paper ({pt.attrs['section']})", cols, rows))
        except KeyError:
            pass
        sec.tables(*pair)
        if t.get("dashes"):
            sec.p(f"{t['dashes']} cell(s) are dashes: not run in this preset; {t['filled_by']} "
                  "fills them.")
        sec.ul(list(t.get("notes") or []))
        out.append(sec)
    return out


def _figure_sections(figures: list[dict[str, Any]], figures_dir: Path) -> list[Section]:
    out = []
    for f in figures:
        sec = Section(f"{f['label']}: {f['title']}", level=3)
        if f.get("error"):
            sec.p(f"Not generated: {f['error']}")
        else:
            sec.figure(figures_dir / f"{f['name']}.png", f"This run. {f['caption']}")
            if not f.get("complete", True):
                sec.p(f"Partly empty: not run in this preset; {f['filled_by']} fills it.")
        try:
            pf = paper_values.paper_figure(f["name"])
        except KeyError:
            out.append(sec)
            continue
        lines = _flatten(pf.get("caption") or {}) + [
            f"(in the text) {x}" for x in _flatten(pf.get("text") or {})]
        stand = [b for b in BLOCKS if b.stand_in and stand_in_note(b) in str(f.get("caption"))]
        if lines:
            sec.p(f"The paper ({pf['section']}) states"
                  + "".join(f", for its DSpark drafters (this run's {b.kind} block runs "
                            f"{b.stand_in})" for b in stand) + ":").ul(lines)
        out.append(sec)
    return out


def build_sections(runs: Path, tables_dir: Path, figures_dir: Path, params: dict[str, Any],
                   options: Options) -> list[Section]:
    """Every section of the report, from the written files (see the module docstring). Only the
    run directories the params name are read (:func:`adaspark.analysis.records.
    selection_from_params`); one holding another run raises
    :class:`~adaspark.analysis.run_selection.StaleRunError`."""
    records = Records(runs, target_label=options.target, selection=selection_from_params(params))
    tables = _read_index(tables_dir / TABLES_INDEX).get("tables", [])
    figures = _read_index(figures_dir / FIGURES_INDEX).get("figures", [])
    intro = Section("About this report").p(
        "Generated by the pipeline's report stage from this run's records. Each table shows "
        "this run's cells beside the paper's cells for the same quantities; each figure shows "
        "this run and lists the numbers the paper states for it. Tables 4-6 and Figure 6 hold "
        "a block per drafter kind this preset ran, each over its own llama.cpp baseline; the "
        "paper's hold its targets, each with its DSpark drafter. Our target is "
        f"{options.target}; the paper's are {', '.join(paper_values.targets())}. A dash, or an "
        "empty panel marked \"not run in this preset\", is something this preset did not run; "
        "the note under it says which preset does. Bootstrap intervals: "
        f"{options.n_resamples:,} resamples over conversations, seed {options.seed}.")
    sections = [_claims_section(tables_dir.parent / CLAIMS_FILE), intro,
                _run_section(records, params)]
    ext = Section("Every arm this preset ran (not a table of the paper)")
    try:
        ar, ar_subset = records.ar_replies("the report")
        replies = records.replies("the report")
        drafters = {str(k): str(a["drafter"]) for k, a in (params.get("arms") or {}).items()
                    if isinstance(a, dict) and a.get("drafter")}
        ov = arms_overview(replies, options, ar, drafters)
        ext.p("Decode tok/s on the client's clock, from the first to the last streamed token "
              "(the headline, §4.1); each arm over its drafter block's llama.cpp baseline ("
              + "; ".join(f"{b.llamacpp}, {b.llamacpp_label}, for the {b.kind} block"
                          for b in shown_blocks(replies)[0])
              + f"; geometric mean of per-reply ratios, {DEFAULT_CONFIDENCE:.0%} bootstrap "
              "interval over "
              f"conversations) and its tok/s over our AR decode's on the {ar_subset} subset. "
              "End to end, which §4.1 leaves out by design: the median time to first token "
              "(request sent to first token), the end-to-end tok/s (reply tokens over the time "
              "from sending the request to the last token, summed over replies) and the "
              "drafter's median prompt prefill per reply (a dash where the server does not "
              "report it: llama-server's arms; 0 for our arms without a drafter). "
              "adaspark-w1 is the extension arm that may choose width 1 (plain decode).")
        ext.tables(("Arms", *frame_cells(ov)))
        note = sharding_note(replies)
        if note:
            ext.p(note)
    except FileNotFoundError as e:
        ext.p(str(e))
    sections.append(ext)
    sampled = ((params.get("extra_runs") or {}).get("sampled") or {}).get("arms")
    if sampled:  # a preset that samples (preset=sampling)
        from adaspark.analysis.sampling import sampling_section

        sections.append(sampling_section(records, options))
    if ((params.get("load") or {}).get("arms")):  # a preset with load points (preset=load)
        from adaspark.analysis.load import load_section

        sections.append(load_section(runs / "load", runs / "replay" / "batch"))
    sections.append(_why_section(records, {t["name"]: t for t in tables}, params))
    sections.append(Section("Tables").p(
        "Tables 1-10 of the paper; Tables 11-15 are its prose and are left out."
        if tables else f"No table index at {tables_dir / TABLES_INDEX}: run the tables stage."))
    sections += _table_sections(tables)
    sections.append(Section("Figures").p(
        "Figures 3-10 of the paper (Figures 1 and 2 are diagrams)."
        if figures else f"No figure index at {figures_dir / FIGURES_INDEX}: run the figures "
        "stage."))
    sections += _figure_sections(figures, figures_dir)
    if "replay" in params:  # a preset with a replay section (issue 14)
        from adaspark.analysis.replay import replay_sections

        sections += replay_sections(runs / "replay", runs, options)
    return sections


CLAIMS_FILE = "claims.json"


def _claims_section(path: Path) -> Section:
    """The report's first section: the claims stage's verdicts (``paper/claims.json``)."""
    sec = Section("The paper's claims: a verdict each")
    if not path.is_file():
        return sec.p(f"Not judged: {path} does not exist (the claims stage writes it).")
    doc = json.loads(path.read_text(encoding="utf-8"))
    sec.p(f"Each claim of the ledger (data/claims.yaml) measured in every regime that tests it "
          f"(this machine's real runs, and REPLAY under each device model). {doc['rule']} "
          "paper/claims.md gives every regime's numbers.")
    sec.tables(("Claims", ["claim", "the paper", "verdict", "why"],
                [[c["id"], c["paper"], c["verdict"], c["why"]] for c in doc["claims"]]))
    rows = [[r["arm"], f"{r['real_tok_s']:.2f}", f"{r['replay_tok_s']:.2f}",
             f"{r['replay_over_real']:.3f}"] for r in doc.get("replay_vs_real", [])]
    if rows:
        sec.tables(("Replay against reality (cpu-measured)",
                    ["arm", "real tok/s", "replay tok/s", "replay / real"], rows))
    return sec


def _read_index(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    doc = json.loads(path.read_text(encoding="utf-8"))
    return doc if isinstance(doc, dict) else {}


# ---------------------------------------------------------------------------------------------
# Rendering


def _md_table(title: str, columns: list[str], rows: list[list[str]]) -> str:
    frame = pd.DataFrame(rows, columns=columns, dtype=object)
    return f"*{title}*\n\n" + to_markdown(frame)


def render_markdown(sections: list[Section], out_dir: Path, title: str) -> str:
    lines = [f"# {title}", "", f"_Generated {datetime.now(UTC):%Y-%m-%d %H:%M} UTC._", ""]
    for s in sections:
        lines += ["#" * s.level + " " + s.heading, ""]
        for kind, body in s.blocks:
            if kind == "p":
                lines += [body, ""]
            elif kind == "ul":
                lines += [f"- {b}" for b in body] + [""]
            elif kind == "tables":
                for t in body:
                    lines += [_md_table(*t), ""]
            elif kind == "figure":
                img, cap = body
                rel = os.path.relpath(img, out_dir)
                lines += [f"![{html.escape(cap[:40])}]({rel})", "", cap, ""]
    return "\n".join(lines).rstrip() + "\n"


_CSS = """
body { font-family: Georgia, serif; max-width: 1200px; margin: 2em auto; padding: 0 1em;
       color: #222; line-height: 1.45; }
table { border-collapse: collapse; margin: 0.4em 0 1em; font-size: 0.85em; }
th, td { border-bottom: 1px solid #ddd; padding: 0.2em 0.6em; text-align: right; }
th:first-child, td:first-child { text-align: left; }
th { border-bottom: 1.5px solid #444; }
.pair { display: flex; flex-wrap: wrap; gap: 2em; align-items: flex-start; }
.pair > div { overflow-x: auto; }
.cap { font-size: 0.9em; color: #444; }
img { max-width: 100%; }
h3 { margin-top: 2em; }
"""


def _html_table(title: str, columns: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = []
    for row in rows:
        cells = []
        for v in row:
            text = html.escape(str(v))
            if text.startswith("**") and text.endswith("**") and len(text) > 4:
                text = f"<b>{text[2:-2]}</b>"
            cells.append(f"<td>{text}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return (f"<div><p class='cap'><i>{html.escape(title)}</i></p><table><thead><tr>{head}"
            f"</tr></thead><tbody>{''.join(body)}</tbody></table></div>")


def render_html(sections: list[Section], title: str) -> str:
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}"
             f"</title><style>{_CSS}</style></head><body><h1>{html.escape(title)}</h1>",
             f"<p class='cap'>Generated {datetime.now(UTC):%Y-%m-%d %H:%M} UTC.</p>"]
    for s in sections:
        parts.append(f"<h{s.level}>{html.escape(s.heading)}</h{s.level}>")
        for kind, body in s.blocks:
            if kind == "p":
                parts.append(f"<p>{html.escape(body)}</p>")
            elif kind == "ul":
                parts.append("<ul>" + "".join(f"<li>{html.escape(b)}</li>" for b in body)
                             + "</ul>")
            elif kind == "tables":
                parts.append("<div class='pair'>" + "".join(_html_table(*t) for t in body)
                             + "</div>")
            elif kind == "figure":
                img, cap = body
                if Path(img).is_file():
                    data = base64.b64encode(Path(img).read_bytes()).decode()
                    parts.append(f"<figure><img alt='{html.escape(cap[:60])}' "
                                 f"src='data:image/png;base64,{data}'><figcaption class='cap'>"
                                 f"{html.escape(cap)}</figcaption></figure>")
                else:
                    parts.append(f"<p><i>missing image {html.escape(str(img))}</i></p>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def latex_engine() -> str | None:
    """The first LaTeX engine on PATH, or None (then no PDF is made)."""
    for name in LATEX_ENGINES:
        if shutil.which(name):
            return name
    return None


def render_latex(sections: list[Section], title: str) -> str:
    out = [r"\documentclass[10pt]{article}", r"\usepackage[margin=2cm]{geometry}",
           r"\usepackage[T1]{fontenc}", r"\usepackage{graphicx}", r"\usepackage{booktabs}",
           r"\usepackage{longtable}", r"\usepackage{caption}",
           r"\begin{document}", r"\title{" + latex_escape(title) + "}", r"\maketitle"]
    cmd = {2: "section*", 3: "subsection*"}
    for s in sections:
        out.append("\\" + cmd.get(s.level, "paragraph*") + "{" + latex_escape(s.heading) + "}")
        for kind, body in s.blocks:
            if kind == "p":
                out.append(latex_escape(body) + "\n")
            elif kind == "ul":
                out += [r"\begin{itemize}", *(r"\item " + latex_escape(b) for b in body),
                        r"\end{itemize}"]
            elif kind == "tables":
                for ttl, cols, rows in body:
                    out.append(r"\noindent\textit{" + latex_escape(ttl) + r"}\\[2pt]")
                    out.append(r"{\scriptsize\begin{longtable}{" + "l" * len(cols) + "}")
                    out.append(" & ".join(latex_escape(c) for c in cols) + r" \\ \midrule")
                    out += [" & ".join(latex_escape(str(v).strip("*")) for v in row) + r" \\"
                            for row in rows]
                    out.append(r"\end{longtable}}")
            elif kind == "figure":
                pdf = Path(body[0]).with_suffix(".pdf")
                if pdf.is_file():
                    out += [r"\begin{figure}[h]\centering",
                            r"\includegraphics[width=0.8\linewidth]{" + str(pdf.resolve()) + "}",
                            r"\caption*{" + latex_escape(body[1]) + "}", r"\end{figure}"]
    out.append(r"\end{document}")
    return "\n".join(out) + "\n"


def write_report(runs: Path, tables_dir: Path, figures_dir: Path, out_dir: Path,
                 params: dict[str, Any], options: Options,
                 title: str = "AdaSpark, regenerated") -> list[Path]:
    """Write ``report.md``, ``report.html`` and (with a LaTeX engine) ``report.pdf``."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    sections = build_sections(Path(runs), Path(tables_dir), Path(figures_dir), params, options)
    written = []
    md = out_dir / "report.md"
    write_text(md, render_markdown(sections, out_dir, title))
    written.append(md)
    page = out_dir / "report.html"
    write_text(page, render_html(sections, title))
    written.append(page)
    (out_dir / "report.pdf").unlink(missing_ok=True)  # never leave an older run's PDF
    engine = latex_engine()
    if engine is None:
        print(f"report: no PDF: no LaTeX engine on PATH ({', '.join(LATEX_ENGINES)})",
              file=sys.stderr)
    else:
        pdf = _latex_pdf(render_latex(sections, title), engine, out_dir)
        if pdf is not None:
            written.append(pdf)
    return written


def _latex_pdf(tex: str, engine: str, out_dir: Path) -> Path | None:
    with scratch_dir() as tmp:
        src = write_text(tmp / "report.tex", tex)
        argv = ([engine, str(src)] if engine == "tectonic"
                else [engine, "-interaction=nonstopmode", "-halt-on-error", src.name])
        try:
            for _ in range(1 if engine == "tectonic" else 2):
                subprocess.run(argv, cwd=tmp, capture_output=True, check=True, timeout=300,
                               text=True, errors="replace")
        except (subprocess.SubprocessError, OSError) as e:
            log = out_dir / "report.latex.log"
            write_text(out_dir / "report.tex", tex)
            write_text(log, f"{' '.join(argv)}\n{e}\n{getattr(e, 'stdout', '') or ''}")
            print(f"report: no PDF: {engine} failed; its output is in {log}, the source in "
                  f"{out_dir / 'report.tex'}", file=sys.stderr)
            return None
        made = tmp / "report.pdf"
        if not made.is_file():
            return None
        return write_bytes(out_dir / "report.pdf", made.read_bytes())
