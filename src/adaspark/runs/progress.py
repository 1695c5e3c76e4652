"""What a long run shows while it works (a progress line per reply) and ends with (a one-screen
summary per arm).
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from adaspark.runs.rows import CUT, FINISHED, LOOPED, SINGLE_DELTA, ReplyRow, pooled_throughput
from adaspark.runs.settings import ArmEntry

# ---------------------------------------------------------------------------------------------
# Progress


class ProgressView:
    """A progress display per arm and conversation (rich on a terminal, one line per reply
    otherwise), and the summary table at the end. An interleaved group shows a bar per arm
    and one for the conversation the group is in."""

    def __init__(self, stream: Any = None) -> None:
        from rich.console import Console

        self.console = Console(file=stream or sys.stderr)
        self.live = self.console.is_terminal
        if not self.live:  # a log file: wide enough for the summary table
            self.console = Console(file=stream or sys.stderr, width=150)
        self._progress: Any = None
        self._arm_tasks: dict[str, Any] = {}
        self._conv_task: Any = None

    def __enter__(self) -> ProgressView:
        if self.live:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
            )

            self._progress = Progress(TextColumn("{task.description}"), BarColumn(),
                                      MofNCompleteColumn(), TimeElapsedColumn(),
                                      console=self.console, transient=False)
            self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()

    def arm(self, entry: str, total: int, done: int) -> None:
        if self._progress is not None:
            self._arm_tasks[entry] = self._progress.add_task(f"[bold]{entry}", total=total,
                                                             completed=done)
        else:
            self.console.print(f"run {entry}: {done} of {total} timed replies stored")

    def conversation(self, entry: str, name: str, total: int) -> None:
        if self._progress is not None:
            if self._conv_task is not None:
                self._progress.remove_task(self._conv_task)
            self._conv_task = self._progress.add_task(f"  {name}", total=total)

    def reply(self, entry: str, row: ReplyRow | None, advance: int = 1) -> None:
        if self._progress is not None:
            self._progress.advance(self._arm_tasks[entry], advance)
            if self._conv_task is not None:
                self._progress.advance(self._conv_task, advance)
        elif row is not None:
            tps = "-" if math.isnan(row.decode_tps) else f"{row.decode_tps:.1f} tok/s"
            self.console.print(f"  {entry} {row.set}/{row.conversation} turn {row.turn} "
                               f"reply {row.reply}: {row.completion_tokens} tokens, {tps}, "
                               f"{row.status}", highlight=False)

    def log(self, text: str) -> None:
        self.console.print(text, highlight=False)


@dataclass
class ArmSummary:
    """What one arm's run produced (``summary.json``)."""

    entry: str
    engine: str
    out_dir: str
    n_replies: int
    n_expected: int
    statuses: dict[str, int] = field(default_factory=dict)
    completion_tokens: int = 0
    tokens_per_s: float = float("nan")
    median_ttft_s: float = float("nan")
    drafted: int = 0
    accepted: int = 0
    resumed_from: int = 0
    wall_s: float = 0.0


def summarize(entry: ArmEntry, engine: str, out_dir: Path, rows: list[dict[str, Any]],
              n_expected: int, resumed_from: int, wall_s: float) -> ArmSummary:
    import numpy as np
    import pandas as pd

    s = ArmSummary(entry.entry, engine, str(out_dir), len(rows), n_expected,
                   resumed_from=resumed_from, wall_s=wall_s)
    if not rows:
        return s
    df = pd.DataFrame(rows)
    s.statuses = {k: int(v) for k, v in df["status"].value_counts().items()}
    s.completion_tokens = int(df["completion_tokens"].sum())
    s.drafted = int(df["server_drafted"].sum())
    s.accepted = int(df["server_accepted"].sum())
    s.median_ttft_s = float(np.nanmedian(df["ttft_s"])) if df["ttft_s"].notna().any() \
        else float("nan")
    s.tokens_per_s = pooled_throughput(df, entry.name, None).tokens_per_s
    return s


def summary_table(summaries: list[ArmSummary]) -> Any:
    """One screen: a row per arm."""
    from rich.table import Table

    t = Table(title="runs", show_lines=False)
    for col in ("arm", "engine", "replies", "finished", "cut", "looped", "single-delta",
                "tokens", "decode tok/s", "median TTFT s", "accepted/drafted"):
        t.add_column(col, justify="left" if col in ("arm", "engine") else "right")
    for s in summaries:
        acc = f"{s.accepted}/{s.drafted}" if s.drafted else "-"
        t.add_row(s.entry, s.engine, f"{s.n_replies}/{s.n_expected}",
                  *(str(s.statuses.get(k, 0)) for k in (FINISHED, CUT, LOOPED, SINGLE_DELTA)),
                  str(s.completion_tokens),
                  "-" if math.isnan(s.tokens_per_s) else f"{s.tokens_per_s:.1f}",
                  "-" if math.isnan(s.median_ttft_s) else f"{s.median_ttft_s:.2f}", acc)
    return t
