"""Throughput and latency under load (issue 37; not a table of the paper): the load stage's points
(:mod:`adaspark.runs.load`) as the report's table and figure.

The figure has two panels: aggregate output tok/s against the number of concurrent clients (one
line per arm), and p99 time to first token against aggregate tok/s (one line per arm, its points
in the order of N). The table gives, per arm and point, every figure the stage measured.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from adaspark.analysis.figures.style import save
from adaspark.analysis.sections import Section, frame_cells

#: The points file the load stage writes (:func:`adaspark.runs.load.run_points`).
POINTS = "points.csv"
FIGURE = "load"

COLUMNS = {"arm": "arm", "clients": "N", "rate": "rate (req/s)", "answered": "answered",
           "aggregate_tps": "aggregate tok/s", "decode_tps_p50": "decode tok/s p50",
           "ttft_p50_s": "TTFT p50 (s)", "ttft_p99_s": "TTFT p99 (s)",
           "itl_p50_s": "ITL p50 (s)", "itl_p99_s": "ITL p99 (s)",
           "queue_p50_ms": "queue p50 (ms)", "rows_per_step": "rows/step",
           "requests_per_step": "requests/step",
           "host_us_per_request_step": "host µs per request-step"}


def _read_points(directory: Path) -> pd.DataFrame | None:
    """``directory``'s points file, or None when there is none or it is empty."""
    path = directory / POINTS
    if not path.is_file() or path.stat().st_size == 0:
        return None
    return pd.read_csv(path)


def load_points(load_dir: Path) -> pd.DataFrame:
    """The points, one row per arm and point (empty when the stage ran none)."""
    frame = _read_points(load_dir)
    if frame is None:
        return pd.DataFrame(columns=list(COLUMNS))
    for c in COLUMNS:
        if c not in frame:
            frame[c] = None
    return frame


def load_table(points: pd.DataFrame) -> pd.DataFrame:
    """Every point's figures, arms in the order they ran, N rising."""
    keep = [c for c in COLUMNS if c in points]
    out = points[keep].copy()
    if "rate" in out and (out["rate"].fillna(0) == 0).all():
        out = out.drop(columns=["rate"])
    return out.rename(columns=COLUMNS)


def load_figure(points: pd.DataFrame) -> Figure:
    fig = Figure(figsize=(9.0, 3.6))
    left, right = fig.subplots(1, 2)
    for arm, g in points.groupby("arm", sort=False):
        g = g.sort_values("clients")
        left.plot(g["clients"], g["aggregate_tps"], marker="o", label=str(arm))
        right.plot(g["aggregate_tps"], g["ttft_p99_s"], marker="o", label=str(arm))
    left.set_xlabel("concurrent clients N")
    left.set_ylabel("aggregate output tok/s")
    right.set_xlabel("aggregate output tok/s")
    right.set_ylabel("p99 time to first token (s)")
    left.legend(fontsize=7)
    fig.tight_layout()
    return fig


def write_load_figure(load_dir: Path) -> Path | None:
    """The load stage's figure, ``load.png`` (and ``.pdf``) beside its points; None without
    points."""
    points = load_points(load_dir)
    if points.empty:
        return None
    return save(load_figure(points), load_dir, FIGURE)[0]


#: The replay stage's batch points (``runs/replay/batch/points.csv``: :mod:`adaspark.replay.batch`)
BATCH_COLUMNS = {"device": "device model", "arm": "arm", "clients": "N",
                 "aggregate_tps": "aggregate tok/s", "decode_tps_p50": "decode tok/s p50",
                 "rows_per_request_step": "rows per request-step",
                 "requests_per_step": "requests/step", "replies": "replies"}


def batch_replay_table(batch_dir: Path) -> pd.DataFrame | None:
    """The batch replay's points (None without them), each device model's arms by N, with
    each arm's aggregate tok/s over the same device's best other arm at that N."""
    frame = _read_points(batch_dir)
    if frame is None:
        return None
    best_other = [frame[(frame["device"] == r.device) & (frame["clients"] == r.clients)
                        & (frame["arm"] != r.arm)]["aggregate_tps"].max()
                  for r in frame.itertuples()]
    out = frame[[c for c in BATCH_COLUMNS if c in frame]].rename(columns=BATCH_COLUMNS)
    out["over the best other arm"] = [f"{a / b:.2f}x" if b and b == b else ""
                                      for a, b in zip(frame["aggregate_tps"], best_other,
                                                      strict=True)]
    return out


def load_section(load_dir: Path, batch_dir: Path | None = None) -> Section:
    """The report's block (a line naming the preset that fills it when no point ran), with the
    replay stage's batch points under ``batch_dir`` where it made them."""
    sec = Section("Several requests at once (not a table of the paper)")
    points = load_points(load_dir)
    meta_path = load_dir / "load.json"
    meta = json.loads(meta_path.read_text()) if meta_path.is_file() else {}
    batch = batch_replay_table(batch_dir) if batch_dir is not None else None
    if batch is not None:
        sec.p("Batch replay (synthetic batch law: the paper gives no batch numbers). The "
              "labelled replies in a closed loop of N clients under each device model, a "
              "step priced as one verify of all its rows at their mean context, linear past "
              "the model's widest class, D once a step (adaspark.replay.batch). An "
              "extrapolation of the device models, not a measurement.")
        sec.tables(("Batch replay (synthetic)", *frame_cells(batch)))
    if points.empty:
        return sec.p("No load point in this preset: `dvc exp run -S preset=load` runs our "
                     "server with several slots against llama-server --parallel "
                     "(the `load` config group; docs/serving.md, \"Several requests at once\").")
    settings = meta.get("settings", {})
    sec.p("Closed loop: N clients, each sending its next request when its last one ends"
          if settings.get("mode", "closed") == "closed" else
          "Open loop: requests arriving at a set rate (Poisson)")
    sec.p(f"{settings.get('requests', '?')} requests per point "
          f"({settings.get('source', '?')} first turns), at most "
          f"{settings.get('max_tokens', '?')} tokens each, streamed; this machine's real "
          "servers (fast kernels). Aggregate tok/s: every reply's tokens over the wall time "
          "of the point; ITL: a request's mean gap between token events; percentiles over "
          "requests. AdaSpark's store is carried from point to point.")
    sec.tables(("Load points", *frame_cells(load_table(points))))
    sec.figure(load_dir / f"{FIGURE}.png", "Aggregate tok/s against N, and p99 TTFT against "
               "aggregate tok/s, per arm.")
    return sec
