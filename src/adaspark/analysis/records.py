"""Where the tables and figures find their records, and which pipeline stage makes each.

Every table and figure reads records, never logs (STYLE): per-reply rows (the runner's
``replies.parquet``, columns of :mod:`adaspark.analysis.stats`), the per-request summaries the
scheduler attaches to each reply (``timings.rule_summary``, the schema of
:class:`adaspark.rules.adaspark.records.RequestSummary`), the per-round logs of the instrumented run
(:class:`adaspark.rules.adaspark.records.RoundRecord`), and the survey and Figure 5 stages' Parquet.

The run directory (``runs/`` by default), by stage::

    runs/models.json                        models        model files and checksums
    runs/arms/<arm>/                        run           one run of each run_arms entry
    runs/extra/repeat/<arm>@2/              repeat        an arm's second run, after the others
    runs/extra/heldout/<arm>/               heldout       held-out conversations (Table 5)
    runs/extra/short/<arm>/                 short         arms timed on the short subset (AR)
    runs/extra/instrumented/<arm>/rounds/   instrumented  per-round logs (Table 7, Figs 7-10)
    runs/survey/survey.parquet              survey        verify-cost survey (Table 1, Fig 3)
    runs/fig5/fig5.parquet                  fig5          8- vs 16-row runs (Figure 5)

Each arm directory holds ``replies.parquet`` and ``run.json`` (the runner's fingerprint: subset,
cap, engine, binary and model checksums). A table whose input directory is missing fails with
:class:`MissingInputError`, naming the stage that makes it; an arm a preset did not run is simply
absent, and its cells are dashes.

Run directories persist between pipeline runs (``persist: true`` in dvc.yaml), so ``runs/`` can
hold runs another preset, target or subset made. The stages read only the directories the
current params name, and refuse a named directory whose ``run.json`` records another target,
drafter, subset, cap or preset than the params (:mod:`adaspark.analysis.run_selection`).
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from adaspark.analysis.bootstrap import (
    DEFAULT_BOOTSTRAP_METHOD,
    DEFAULT_N_RESAMPLES,
    DEFAULT_SEED,
    BootstrapMethod,
)
from adaspark.analysis.run_selection import (  # noqa: F401 - the names tables read here
    ARMS_DIR,
    EXTRA_DIR,
    FIG5_FILE,
    MODELS_FILE,
    ROUNDS_DIR,
    STAGE_FIG5,
    STAGE_FIGURES,
    STAGE_HELDOUT,
    STAGE_INSTRUMENTED,
    STAGE_MODELS,
    STAGE_REPEAT,
    STAGE_RUN,
    STAGE_SHORT,
    STAGE_SURVEY,
    STAGE_TABLES,
    SURVEY_FILE,
    Mismatch,
    RunSelection,
    RunSelectionError,
    StaleRunError,
    selection_from_params,
    stage_of,
)
from adaspark.runs.rows import KEY_COLUMNS, LOOPED, REQUIRED_COLUMNS
from adaspark.runs.store import ROWS_FILE, RUN_FILE

# ---------------------------------------------------------------------------------------------
# Names

#: The arms of the paper's tables, by their file in conf/arm/ (HARNESS "Arms").
LLAMACPP_AR = "llamacpp-ar"
LLAMACPP_CHAIN = "llamacpp-chain"  # llama-server's draft-simple chain of at most 3 drafts
AR = "ar"
CHAIN3 = "chain3"  # the same chain from the draft model on our engine
#: The DSpark block's arms: llama-server's draft-dspark chain of at most 3 drafts, our engine's
#: 3-pick chain and AdaSpark, all from one DSpark file (run directories runs/arms/<name>).
LLAMACPP_DSPARK = "llamacpp-dspark"
CHAIN3_DSPARK = "chain3-dspark"
ADASPARK_DSPARK = "adaspark-dspark"
FULLCHAIN = "fullchain"
TREE16 = "tree16"
COSTMODEL = "costmodel"
ADASPARK = "adaspark"
CLASSES = "adaspark-classes"
WIDTH1 = "adaspark-w1"
#: AdaSpark with its width pinned (Table 3), by rows.
PINNED: dict[int, str] = {w: f"adaspark-w{w}" for w in (4, 5, 6, 8, 12, 16)}
#: The same pinned widths on the DSpark drafter (replayed by default; Table 3's claim there).
PINNED_DSPARK: dict[int, str] = {w: f"adaspark-dspark-w{w}" for w in PINNED}


@dataclass(frozen=True)
class DrafterBlock:
    """One drafter kind's arms in Tables 4-6 and Figure 6, each with the one name every output
    shows it by: the llama.cpp baseline the block's ratios are over, our engine's 3-pick chain
    and AdaSpark. ``stand_in`` says what the drafter is when it is not the paper's DSpark;
    ``ablation`` holds the block's arms between the chain and AdaSpark (Table 6); ``needs`` says
    what its arms need besides a place in ``run_arms`` (the run stage leaves them out without
    it)."""

    kind: str
    llamacpp: str
    llamacpp_label: str
    chain: str
    chain_label: str
    adaspark: str
    adaspark_label: str
    stand_in: str = ""
    ablation: tuple[str, ...] = ()
    needs: str = ""
    #: the drafter its arms' files name (``drafter:``, a file of conf/drafter/), None for the
    #: composed one: another arm naming it belongs to this block (:func:`~adaspark.analysis.
    #: tables.common.block_of`)
    drafter: str | None = None

    @property
    def arms(self) -> tuple[str, ...]:
        """The llama.cpp baseline, the chain and AdaSpark (the block's Table 4 arms)."""
        return (self.llamacpp, self.chain, self.adaspark)


DRAFT_MODEL_BLOCK = DrafterBlock(
    "draft model", LLAMACPP_CHAIN, "llama.cpp draft-model chain (draft-simple)", CHAIN3,
    "imparo draft-model chain", ADASPARK, "AdaSpark (draft model)",
    stand_in="a stand-in drafter (a same-vocabulary draft model, one forward per drafted "
    "position), not the paper's DSpark", ablation=(FULLCHAIN, TREE16, COSTMODEL))
DSPARK_BLOCK = DrafterBlock(
    "DSpark", LLAMACPP_DSPARK, "llama.cpp DSpark", CHAIN3_DSPARK, "imparo DSpark",
    ADASPARK_DSPARK, "AdaSpark", drafter="dspark",
    needs="a DSpark drafter file for the target (this project's own for the embedded target, "
    "data/models.json `dspark-embedded`; for another target `-S drafters.dspark.path=FILE`)")
#: The blocks in the order every output shows them. The draft-model block leads: every preset
#: runs it today (no package ships a DSpark file for our targets), so the first row of each table
#: stays the one a default run fills and the row its readers (the report, the recorded fixture)
#: have always read; the paper's DSpark block follows.
BLOCKS: tuple[DrafterBlock, ...] = (DRAFT_MODEL_BLOCK, DSPARK_BLOCK)

#: The six sources in serving order: set name, the paper's name, its abbreviation (Table 6).
SOURCES: tuple[tuple[str, str, str], ...] = (
    ("specbench", "Spec-Bench", "SB"),
    ("speedbench", "SPEED-Bench", "SP"),
    ("wildchat", "WildChat", "WC"),
    ("convfinqa", "ConvFinQA", "CF"),
    ("toolace", "ToolACE", "TA"),
    ("longbench", "LongBench", "LB"),
)
SOURCE_NAME = {s: name for s, name, _ in SOURCES}
SOURCE_ABBR = {s: abbr for s, _, abbr in SOURCES}

#: Why a round's width was set (RoundRecord.why) when the chooser set it from S.
CHOICE = "choice"
COLD_START = ("cold-start", "width1-cold-start")


class MissingInputError(FileNotFoundError):
    """A table or figure's input is missing; the message names the stage that makes it."""

    def __init__(self, what: str, path: Path, stage: str, also: str = "") -> None:
        self.what, self.path, self.stage = what, Path(path), stage
        super().__init__(
            f"{what} needs {path}, which the `{stage}` stage makes{also}: run "
            f"`dvc repro {stage}` (or the whole pipeline, `dvc repro`) first"
        )


class CorruptInputError(ValueError):
    """A run directory's file cannot be read; the message names it and what to do."""

    def __init__(self, path: Path, error: Any) -> None:
        self.path = Path(path)
        super().__init__(
            f"{path} cannot be read ({error}): it is damaged or not a file a run wrote. Delete "
            f"it, or the run directory {self.path.parent}, and rerun that arm (`dvc repro`), or "
            "point --runs at another directory"
        )


# ---------------------------------------------------------------------------------------------
# Options shared by every table


@dataclass(frozen=True)
class Options:
    """What every table's statistics share (§4.1): bootstrap seed and resamples, the band edge
    of Tables 3 and 9, and the label of the target the runs served. ``bootstrap_method`` is
    ``percentile`` (the paper) or ``BCa`` (:mod:`adaspark.analysis.bootstrap`)."""

    target: str = "target"
    seed: int = DEFAULT_SEED
    n_resamples: int = DEFAULT_N_RESAMPLES
    bootstrap_method: BootstrapMethod = DEFAULT_BOOTSTRAP_METHOD
    context_split_tokens: int = 2048
    preset: str = "default"


# ---------------------------------------------------------------------------------------------
# Reading one arm's run


def read_replies(run_dir: Path) -> pd.DataFrame:
    """One arm's per-reply rows, in the order they were served (column ``order``)."""
    import pyarrow as pa

    path = Path(run_dir) / ROWS_FILE
    try:
        frame = pd.read_parquet(path)
    except (pa.ArrowException, OSError) as e:
        if isinstance(e, FileNotFoundError):
            raise
        raise CorruptInputError(path, e) from None
    frame = frame.reset_index(drop=True)
    frame["order"] = np.arange(len(frame))
    if "entry" not in frame.columns:
        frame["entry"] = frame["arm"].astype(str)
    return frame


def read_run_meta(run_dir: Path) -> dict[str, Any]:
    """``run.json`` of one arm's run (empty when absent)."""
    path = Path(run_dir) / RUN_FILE
    if not path.is_file():
        return {}
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CorruptInputError(path, e) from None
    if not isinstance(meta, dict):
        raise CorruptInputError(path, "not a JSON object")
    return meta


def run_dirs(parent: Path) -> list[Path]:
    """Arm directories directly under ``parent`` that hold per-reply rows, sorted by name."""
    if not parent.is_dir():
        return []
    return sorted(p for p in parent.iterdir() if (p / ROWS_FILE).is_file())


def concat_replies(dirs: Iterable[Path]) -> pd.DataFrame:
    frames = [read_replies(d) for d in dirs]
    frames = [f for f in frames if not f.empty]
    if not frames:
        return pd.DataFrame(columns=[*REQUIRED_COLUMNS, "entry", "order"])
    return pd.concat(frames, ignore_index=True)


def has_arm(replies: pd.DataFrame | None, selector: str) -> bool:
    """Whether ``selector`` (``adaspark``, ``adaspark@2``) names rows of ``replies``."""
    if replies is None or replies.empty:
        return False
    arm = replies["arm"].astype(str)
    if (arm == selector).any():
        return True
    base, at, rep = selector.partition("@")
    if at and rep.isdigit():
        rows = replies[arm == base]
        if (pd.to_numeric(rows["repeat"]) == int(rep)).any():
            return True
    return bool(arm.str.startswith(f"{selector}@").any())


def arm_rows(replies: pd.DataFrame, selector: str) -> pd.DataFrame:
    """Rows of one arm selector (as :mod:`adaspark.analysis.stats` reads them); empty when
    absent."""
    if not has_arm(replies, selector):
        return replies.iloc[0:0]
    arm = replies["arm"].astype(str)
    base, at, rep = selector.partition("@")
    if (arm == selector).any():
        return replies[arm == selector]
    if at and rep.isdigit():
        return replies[(arm == base) & (pd.to_numeric(replies["repeat"]) == int(rep))]
    return replies[arm.str.startswith(f"{selector}@")]


# ---------------------------------------------------------------------------------------------
# Per-request summaries and per-round logs


def _summary_of(timings: Any) -> dict[str, Any] | None:
    if timings is None or (isinstance(timings, float) and np.isnan(timings)):
        return None
    try:
        t = json.loads(timings) if isinstance(timings, str) else dict(timings)
    except (TypeError, ValueError):
        return None
    s = t.get("rule_summary")
    return s if isinstance(s, dict) and s else None


def request_summaries(replies: pd.DataFrame) -> pd.DataFrame:
    """The scheduler's per-request summaries (§3.2-§3.3 records), one row per reply that has one.

    Columns: the reply's ``arm``, ``repeat``, ``entry``, ``set``, ``conversation``, ``turn``,
    ``reply``, ``status`` and serving ``order``, then every field of the summary
    (``request_id``, ``tree_rounds``, ``labelled_nodes``, ``logloss_fitted``,
    ``logloss_head``, ``rounds_priced_fitted``, ``widths_learned``, ...).
    """
    keep = ["arm", "repeat", "entry", *KEY_COLUMNS, "status", "order"]
    rows = []
    if "timings" in replies.columns:
        for rec in replies[[*keep, "timings"]].to_dict("records"):
            s = _summary_of(rec.pop("timings"))
            if s is not None:
                rows.append({**rec, **s})
    if not rows:
        return pd.DataFrame(columns=[*keep, "request_id"])
    frame = pd.DataFrame(rows)
    return frame.sort_values(["entry", "order"], kind="stable").reset_index(drop=True)


def read_rounds(run_dir: Path, replies: pd.DataFrame | None = None) -> pd.DataFrame:
    """One arm's per-round log (``<run_dir>/rounds/*.parquet``), in serving order.

    Each round gets its reply's keys and status through the request summary the reply carries
    (``request_id``); ``seq`` numbers the rounds of the run from 0. Rounds whose request has no
    reply row (none in a finished run) keep NaN keys and sort by their request id.
    """
    rdir = Path(run_dir) / ROUNDS_DIR
    parts = sorted(rdir.glob("*.parquet")) if rdir.is_dir() else []
    if not parts:
        return pd.DataFrame()
    frame = pd.concat([pd.read_parquet(p) for p in parts], ignore_index=True)
    if replies is None and (Path(run_dir) / ROWS_FILE).is_file():
        replies = read_replies(run_dir)
    keys = ["request_id", "arm", *KEY_COLUMNS, "status", "order"]
    if replies is not None and not replies.empty:
        summ = request_summaries(replies)
        if not summ.empty:
            frame = frame.merge(summ[keys].drop_duplicates("request_id"), on="request_id",
                                how="left")
    for k in keys:
        if k not in frame.columns:
            frame[k] = np.nan
    frame["_req"] = frame["request_id"].astype(str)
    frame = frame.sort_values(["order", "_req", "round_index"], kind="stable", na_position="last")
    frame = frame.drop(columns="_req").reset_index(drop=True)
    frame["seq"] = np.arange(len(frame))
    return frame


def accepted_nodes(rounds: pd.DataFrame) -> pd.Series:
    """Draft nodes accepted per round: the accepted path less its anchor (§4.7)."""
    return rounds["accepted_path"].map(lambda p: max(len(p) - 1, 0) if p is not None else 0)


def without_looped(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows whose reply did not loop (loops are left out of every statistic, §4.3)."""
    if "status" not in frame.columns:
        return frame
    return frame[frame["status"].astype(str) != LOOPED]


# ---------------------------------------------------------------------------------------------
# The whole run directory


@dataclass
class Records:
    """Lazy access to the records under one run directory (``runs/``).

    With a ``selection`` (the pipeline's stages always pass one, built from the params by
    :func:`selection_from_params`) only the run directories it names are read, and a named one
    whose ``run.json`` disagrees with it raises :class:`StaleRunError` when the records are
    made; without one (tests, notebooks) every run directory under the root is read.

    Properties that a table cannot do without raise :class:`MissingInputError` naming the
    stage; optional groups (held-out, short, repeat) are empty frames when not run.
    """

    root: Path
    target_label: str | None = None
    selection: RunSelection | None = None
    _cache: dict[str, Any] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self.root = Path(self.root)
        if self.selection is not None:
            self.check_runs()

    # -- which run directories ------------------------------------------------------------------

    def dirs(self, parent: Path) -> list[Path]:
        """The run directories (with per-reply rows) read under ``parent``, sorted by name:
        those the selection names there, or every one when there is no selection."""
        parent = Path(parent)
        if self.selection is None:
            return run_dirs(parent)
        names = self.selection.names(parent.relative_to(self.root).as_posix())
        return [parent / n for n in sorted(set(names)) if (parent / n / ROWS_FILE).is_file()]

    def _parents(self) -> list[Path]:
        return [self.root / ARMS_DIR, *sorted(p for p in (self.root / EXTRA_DIR).glob("*")
                                              if p.is_dir())]

    def check_runs(self) -> None:
        """Raise :class:`StaleRunError` for the first run directory the selection names whose
        ``run.json`` records another target, drafter, subset, cap or preset."""
        if self.selection is None:
            return
        for parent, names in self.selection.dirs.items():
            for name in sorted(set(names)):
                d = self.root / parent / name
                if not (d / ROWS_FILE).is_file():
                    continue  # not run (yet): its cells are dashes
                try:
                    meta = read_run_meta(d)
                except (ValueError, UnicodeDecodeError) as e:  # a corrupt run.json
                    raise StaleRunError(d, stage_of(parent, name), [Mismatch(
                        RUN_FILE, f"unreadable ({e})", "the runner's JSON",
                        "the run's origin is unknown")]) from None
                found = self.selection.mismatches(meta if isinstance(meta, Mapping) else {},
                                                  parent, name)
                if found:
                    raise StaleRunError(d, stage_of(parent, name), found)

    def left_out(self) -> list[str]:
        """Run directories under the root (paths relative to it) the selection does not name:
        leftovers of other params, not read. Empty without a selection."""
        if self.selection is None:
            return []
        read = {d for p in self._parents() for d in self.dirs(p)}
        return [str(d.relative_to(self.root)) for p in self._parents() for d in run_dirs(p)
                if d not in read]

    # -- per-reply rows -------------------------------------------------------------------------

    @cached_property
    def main_dirs(self) -> list[Path]:
        return self.dirs(self.root / ARMS_DIR)

    def replies(self, what: str = "this table") -> pd.DataFrame:
        """Every run of the main subset: ``runs/arms/*`` plus second runs (``extra/repeat``)."""
        if not self.main_dirs:
            raise MissingInputError(what, self.root / ARMS_DIR / "<arm>" / ROWS_FILE,
                                    STAGE_RUN)
        key = "replies"
        if key not in self._cache:
            dirs = [*self.main_dirs, *self.dirs(self.root / EXTRA_DIR / "repeat")]
            self._cache[key] = concat_replies(dirs)
        return self._cache[key]

    def group_replies(self, group: str) -> pd.DataFrame:
        """Rows of an optional group under ``runs/extra/<group>`` (empty when not run)."""
        key = f"group:{group}"
        if key not in self._cache:
            self._cache[key] = concat_replies(self.dirs(self.root / EXTRA_DIR / group))
        return self._cache[key]

    @property
    def heldout(self) -> pd.DataFrame:
        return self.group_replies("heldout")

    def ar_replies(self, what: str = "this table") -> tuple[pd.DataFrame, str | None]:
        """The autoregressive arms' rows the paper times on the short subset (Table 4, Fig. 7):
        ``runs/extra/short`` when that stage ran, else the main runs; and their subset."""
        short = self.group_replies("short")
        if not short.empty:
            return short, self.subset_of(self.root / EXTRA_DIR / "short")
        return self.replies(what), self.main_subset

    def instrumented_dirs(self, what: str = "this figure") -> list[Path]:
        parent = self.root / EXTRA_DIR / "instrumented"
        dirs = self.dirs(parent)
        if not dirs:
            raise MissingInputError(what, parent / "<arm>" / ROWS_FILE, STAGE_INSTRUMENTED)
        return dirs

    def instrumented_replies(self, what: str = "this figure") -> pd.DataFrame:
        key = "instrumented"
        if key not in self._cache:
            self._cache[key] = concat_replies(self.instrumented_dirs(what))
        return self._cache[key]

    def rounds(self, what: str = "this figure") -> pd.DataFrame:
        """Per-round logs of every instrumented arm (column ``arm`` names the arm; ``seq``
        numbers each arm's rounds in serving order). Raises when no arm logged a round."""
        key = "rounds"
        if key not in self._cache:
            frames = []
            for d in self.instrumented_dirs(what):
                r = read_rounds(d)
                if r.empty:
                    continue
                r["arm"] = r["arm"].where(r["arm"].notna(), d.name.split("@")[0])
                frames.append(r)
            if not frames:
                raise MissingInputError(
                    what, self.root / EXTRA_DIR / "instrumented" / "<arm>" / ROUNDS_DIR,
                    STAGE_INSTRUMENTED)
            self._cache[key] = pd.concat(frames, ignore_index=True)
        return self._cache[key]

    # -- stage outputs --------------------------------------------------------------------------

    def survey(self, what: str = "this table") -> pd.DataFrame:
        path = self.root / SURVEY_FILE
        if not path.is_file():
            raise MissingInputError(what, path, STAGE_SURVEY)
        return pd.read_parquet(path)

    def fig5(self, what: str = "this figure") -> pd.DataFrame:
        path = self.root / FIG5_FILE
        if not path.is_file():
            raise MissingInputError(what, path, STAGE_FIG5)
        return pd.read_parquet(path)

    # -- metadata -------------------------------------------------------------------------------

    def subset_of(self, parent: Path) -> str | None:
        """The subset the runs under ``parent`` served (their ``run.json``)."""
        for d in self.dirs(parent):
            sub = read_run_meta(d).get("fingerprint", {}).get("run", {}).get("subset")
            if sub:
                return str(sub)
        return None

    @property
    def main_subset(self) -> str | None:
        return self.subset_of(self.root / ARMS_DIR)

    @property
    def heldout_subset(self) -> str | None:
        return self.subset_of(self.root / EXTRA_DIR / "heldout")

    def run_metas(self) -> dict[str, dict[str, Any]]:
        """``run.json`` of every run directory read, keyed by its path under the root."""
        out: dict[str, dict[str, Any]] = {}
        for parent in self._parents():
            for d in self.dirs(parent):
                out[str(d.relative_to(self.root))] = read_run_meta(d)
        return out

    def models(self) -> dict[str, Any]:
        path = self.root / MODELS_FILE
        return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}

    @property
    def target(self) -> str:
        """The label of the target the runs served (params' ``target.name`` when given)."""
        if self.target_label:
            return self.target_label
        for meta in self.run_metas().values():
            f = meta.get("fingerprint", {}).get("models", {}).get("target", {}).get("file")
            if f:
                return str(Path(f).stem)
        return "target"


def group_order(labels: Iterable[Hashable]) -> list[Hashable]:
    """Distinct labels in first-seen order."""
    return list(dict.fromkeys(labels))
