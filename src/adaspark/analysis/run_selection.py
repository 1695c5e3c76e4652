"""Which run directories the current params name, and what each must have recorded
(:class:`RunSelection`): the tables, figures and report read only those, and refuse
(:class:`StaleRunError`) a named directory whose ``run.json`` records another target, drafter
(the arm's own, when its file names one: ``drafters.<name>``), subset, cap or preset. With the
stage and directory names of the pipeline (dvc.yaml), which :mod:`adaspark.analysis.records`
lays out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from adaspark.runs.store import RUN_FILE

#: Stages (names in dvc.yaml) and what they make.
STAGE_MODELS = "models"
STAGE_RUN = "run"
STAGE_REPEAT = "repeat"
STAGE_HELDOUT = "heldout"
STAGE_SHORT = "short"
STAGE_INSTRUMENTED = "instrumented"
STAGE_SAMPLED = "sampled"
STAGE_SURVEY = "survey"
STAGE_FIG5 = "fig5"
STAGE_TABLES = "tables"
STAGE_FIGURES = "figures"

ARMS_DIR = "arms"
EXTRA_DIR = "extra"
ROUNDS_DIR = "rounds"
SURVEY_FILE = Path("survey") / "survey.parquet"
FIG5_FILE = Path("fig5") / "fig5.parquet"
MODELS_FILE = "models.json"




class RunSelectionError(ValueError):
    """The params do not say which runs to read (a model the manifest does not hold), or a run
    directory they name holds another run (:class:`StaleRunError`)."""


@dataclass(frozen=True)
class Mismatch:
    """One fingerprint key whose recorded value differs from what the params name."""

    key: str
    recorded: Any
    expected: Any
    source: str


class StaleRunError(RunSelectionError):
    """A run directory the params name holds a run made with other settings (another target,
    drafter, subset, cap or preset): the tables, figures and report refuse to label it as this
    run's. The message names the directory, each key with both values, and the fix."""

    def __init__(self, run_dir: Path, stage: str, mismatches: list[Mismatch]) -> None:
        self.run_dir, self.stage, self.mismatches = Path(run_dir), stage, list(mismatches)
        what = "\n  ".join(
            f"{m.key}: {RUN_FILE} records {m.recorded!r}, the params name {m.expected!r} "
            f"({m.source})" for m in mismatches)
        super().__init__(
            f"{run_dir} holds a run made with other settings than the params name, so it is "
            f"not read as this run's:\n  {what}\nRerun its stage (`dvc repro --force "
            f"--single-item {stage}`: the run restarts when its fingerprint changed), or delete "
            f"{run_dir} and run `dvc repro`.")


@dataclass(frozen=True)
class RunSelection:
    """The run directories the current params name, and what each must have recorded.

    ``dirs`` maps a parent under ``runs/`` (``arms``, ``extra/<group>``) to the directory names
    the params name there (``run_arms``; ``extra_runs.<group>.arms``, repeat entries
    ``<arm>@2``); ``subsets`` maps the same parents to the subset their runs serve. A field that
    is None is not compared (the params do not say). ``preset`` is compared only with a
    ``run.json`` that records one (runs made before the fingerprint held it are accepted).
    """

    dirs: Mapping[str, tuple[str, ...]]
    subsets: Mapping[str, str | None]
    target_file: str | None = None
    target_sha256: str | None = None
    drafter_file: str | None = None
    drafter_sha256: str | None = None
    cap: int | None = None
    preset: str | None = None
    #: an extra group's own reply cap (``extra_runs.<group>.cap``), by parent; a parent not
    #: here has ``cap`` (``run.cap``)
    caps: Mapping[str, int | None] = field(default_factory=dict)
    #: arms whose file names its own drafter (``drafter: <name>``): the arm's name -> the key
    #: (``drafters.<name>``), file name and manifest sha256 its runs must have recorded
    arm_drafters: Mapping[str, tuple[str, str | None, str | None]] = field(default_factory=dict)
    #: the sampling a run's fingerprint must record, by parent (its ``sampling`` mapping, or
    #: None for greedy decoding); a parent not here is not compared
    samplings: Mapping[str, Mapping[str, Any] | None] = field(default_factory=dict)

    def names(self, parent: str) -> tuple[str, ...]:
        """The directory names the params name under ``parent`` (``arms``, ``extra/short``)."""
        return tuple(self.dirs.get(parent, ()))

    def mismatches(self, meta: Mapping[str, Any], parent: str,
                   name: str | None = None) -> list[Mismatch]:
        """What a run directory's ``run.json`` (``meta``) under ``parent`` (the directory
        ``name``: its arm's own drafter, when its file names one) records otherwise than the
        params name; empty when it is this run's."""
        fp = meta.get("fingerprint")
        if not isinstance(fp, Mapping):
            return [Mismatch("fingerprint", "none", "the runner's fingerprint",
                             f"{RUN_FILE} is missing or holds none: the run's origin is unknown")]
        models = fp.get("models") if isinstance(fp.get("models"), Mapping) else {}
        run = fp.get("run") if isinstance(fp.get("run"), Mapping) else {}
        out: list[Mismatch] = []

        def check(key: str, recorded: Any, expected: Any, source: str) -> None:
            if expected is not None and recorded != expected:
                out.append(Mismatch(key, recorded, expected, source))

        target = models.get("target") if isinstance(models.get("target"), Mapping) else {}
        check("models.target.file", target.get("file"), self.target_file,
              "target.model or target.path")
        check("models.target.sha256", target.get("sha256"), self.target_sha256,
              "target.model in data/models.json")
        drafter = models.get("drafter")
        key, dfile, dsha = "drafter", self.drafter_file, self.drafter_sha256
        own = self.arm_drafters.get((name or "").partition("@")[0])
        if own is not None:
            key, dfile, dsha = own
        if isinstance(drafter, Mapping):  # recorded by speculative arms only
            check("models.drafter.file", drafter.get("file"), dfile,
                  f"{key}.model or {key}.path")
            check("models.drafter.sha256", drafter.get("sha256"), dsha,
                  f"{key}.model in data/models.json")
        subset_source = ("run.subset" if parent in (ARMS_DIR, f"{EXTRA_DIR}/repeat")
                         else f"extra_runs.{parent.split('/')[-1]}.subset")
        check("run.subset", run.get("subset"), self.subsets.get(parent), subset_source)
        if parent in self.caps:
            check("run.cap", run.get("cap"), self.caps[parent],
                  f"extra_runs.{parent.split('/')[-1]}.cap")
        else:
            check("run.cap", run.get("cap"), self.cap, "run.cap")
        if "preset" in run:
            check("run.preset", run.get("preset"), self.preset, "preset.name")
        if parent in self.samplings:  # greedy runs record none (and None is compared too)
            expected = self.samplings[parent]
            if fp.get("sampling") != (None if expected is None else dict(expected)):
                sampled = parent.startswith(f"{EXTRA_DIR}/{STAGE_SAMPLED}-t")
                out.append(Mismatch("sampling", fp.get("sampling"), expected,
                                    "sampling and extra_runs.sampled.temperatures" if sampled
                                    else "sampling (none: greedy decoding)"))
        return out


#: The sampled-replay stage's output under the runs' root (:mod:`adaspark.stages.sampled_replay`),
#: one directory per temperature (:func:`temperature_dir`).
REPLAY_DIR = "replay-sampled"
REPLAY_SUMMARY = "summary.json"


def temperature_dir(temperature: Any) -> str:
    """A temperature's directory in the sampled replay (``t0.7``, ``t1``)."""
    return f"t{float(temperature):g}"


def sampled_parent(temperature: Any, seed: Any) -> str:
    """The parent of the sampled runs at ``temperature`` with run seed ``seed``, as the params
    write them (``extra/sampled-t0.7-s0``): the directory the ``sampled`` stage of dvc.yaml
    names (DVC writes a value as Python does, so ``1.0`` and ``1`` are two directories)."""
    return f"{EXTRA_DIR}/{STAGE_SAMPLED}-t{temperature}-s{seed}"


def stage_of(parent: str, name: str) -> str:
    """The dvc.yaml stage that makes run directory ``<parent>/<name>`` (``run@chain3``,
    ``repeat@adaspark`` for ``extra/repeat/adaspark@2``, ``heldout@adaspark``,
    ``sampled@adaspark-0.7-0`` for ``extra/sampled-t0.7-s0/adaspark``)."""
    if parent == ARMS_DIR:
        return f"{STAGE_RUN}@{name}"
    group = parent.split("/")[-1]
    if group.startswith(f"{STAGE_SAMPLED}-t"):
        temperature, _, seed = group.removeprefix(f"{STAGE_SAMPLED}-t").rpartition("-s")
        return f"{STAGE_SAMPLED}@{name}-{temperature}-{seed}"
    return f"{group}@{name.split('@')[0]}" if group == STAGE_REPEAT else f"{group}@{name}"


def _model_expected(section: Any, role: str,
                    manifest: Mapping[str, Any] | None) -> tuple[str | None, str | None]:
    """The file name and manifest sha256 a ``target``/``drafter`` params section names (its
    ``path`` when set, else its ``model``'s manifest entry); (None, None) when it names none."""
    if not isinstance(section, Mapping):
        return None, None
    if section.get("path"):
        return Path(str(section["path"])).expanduser().name, None
    model = section.get("model")
    if not model:
        return None, None
    if manifest is None:
        from adaspark import model_files

        manifest = model_files.load_manifest()
    entry = manifest.get(str(model))
    if entry is None:
        raise RunSelectionError(
            f"{role}.model {model!r} is not an entry of data/models.json (entries: "
            f"{', '.join(sorted(manifest))}): name one of them, or a file with {role}.path=")
    return str(entry.file), entry.sha256


def selection_from_params(params: Mapping[str, Any],
                          manifest: Mapping[str, Any] | None = None) -> RunSelection:
    """The run directories the params name (``run_arms``, ``extra_runs``) and the target,
    drafter, subsets, cap and preset their runs must have recorded. ``manifest`` (entries with
    ``.file`` and ``.sha256``) defaults to ``data/models.json``."""
    run = params.get("run") if isinstance(params.get("run"), Mapping) else {}
    extra = params.get("extra_runs") if isinstance(params.get("extra_runs"), Mapping) else {}
    dirs: dict[str, tuple[str, ...]] = {ARMS_DIR: tuple(map(str, params.get("run_arms") or ()))}
    subsets: dict[str, str | None] = {ARMS_DIR: run.get("subset")}
    caps: dict[str, int | None] = {}
    sampling = params.get("sampling") if isinstance(params.get("sampling"), Mapping) else None
    greedy = sampling is None or float(sampling.get("temperature") or 0.0) == 0.0
    samplings: dict[str, Mapping[str, Any] | None] = {ARMS_DIR: None if greedy else sampling}
    for group, spec in extra.items():
        spec = spec if isinstance(spec, Mapping) else {}
        arms = tuple(map(str, spec.get("arms") or ()))
        parent = f"{EXTRA_DIR}/{group}"
        if group == STAGE_SAMPLED:  # a parent per temperature and seed, the params' other fields
            for t in spec.get("temperatures") or ():
                for seed in spec.get("seeds") or ():
                    p = sampled_parent(t, seed)
                    dirs[p], subsets[p] = arms, spec.get("subset")
                    samplings[p] = {**(sampling or {}), "temperature": float(t), "seed": int(seed)}
            continue
        samplings[parent] = samplings[ARMS_DIR]
        if group == STAGE_REPEAT:  # the repeat stage serves run.subset, entries <arm>@2
            dirs[parent], subsets[parent] = tuple(f"{a}@2" for a in arms), run.get("subset")
        else:
            dirs[parent], subsets[parent] = arms, spec.get("subset")
            if spec.get("cap") is not None:  # the group's own cap (instrumented runs)
                caps[parent] = int(spec["cap"])
    tfile, tsha = _model_expected(params.get("target"), "target", manifest)
    dfile, dsha = _model_expected(params.get("drafter"), "drafter", manifest)
    drafters = params.get("drafters") if isinstance(params.get("drafters"), Mapping) else {}
    arm_drafters: dict[str, tuple[str, str | None, str | None]] = {}
    for arm_name, arm in (params.get("arms") or {}).items():
        own = arm.get("drafter") if isinstance(arm, Mapping) else None
        if own is not None and own in drafters:
            key = f"drafters.{own}"
            arm_drafters[str(arm_name)] = (key, *_model_expected(drafters[own], key, manifest))
    preset = params.get("preset")
    preset_name = preset.get("name") if isinstance(preset, Mapping) else preset
    return RunSelection(
        dirs=dirs, subsets=subsets, target_file=tfile, target_sha256=tsha, drafter_file=dfile,
        drafter_sha256=dsha, cap=run.get("cap"), caps=caps, arm_drafters=arm_drafters,
        samplings=samplings,
        preset=None if preset_name is None else str(preset_name))
