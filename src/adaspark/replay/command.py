"""``adaspark replay arm=ARM run_dir=DIR device=recorded|<conf/device name>|FILE [out=DIR]
[replies_of=ARM] [json=true]``: replay an arm's width rule over a run's labelled replies (issue
14).

``run_dir`` is a directory ``adaspark run ... run.exact=true run.round_log=true out=DIR`` wrote
(or one arm's directory in it): the arm's ``trace/`` gives the prompts, caps and request order,
and the recorded rounds (``replies_of``: another arm's run of the same target, for a replay
under a device model; every lossless arm's exact-mode replies are the same text). The replies'
labels (:mod:`adaspark.replay.labels`) are made on the
engine in exact mode the first time and cached beside the run (``DIR/labels/<drafter>/``). The
arm's real rule then replays every reply in the run's order (:mod:`adaspark.replay.loop`),
priced by the device model; the replayed rounds go to ``out`` (default
``DIR/replay/<arm>@<device>/``) as trace files marked as replay with the device model's name.
Under ``device=recorded`` the replay is checked against the run round by round
(:mod:`adaspark.replay.check`); the exit status is 3 when it is not exact.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from adaspark import io
from adaspark.config import ConfigError, compose
from adaspark.decoding.round_trace import TRACE_DIR, RequestTrace, read_traces, write_request
from adaspark.decoding.sampling import SamplingParams
from adaspark.replay.check import check_replay
from adaspark.replay.labels import (
    LabelsTooShort,
    LabelStore,
    PromptLabels,
    ensure_labels,
    label_prompt_jointly,
    prompt_key,
)
from adaspark.replay.loop import ReplayedReply, replay_reply
from adaspark.replay.prices import DevicePrices, Pricer, RecordedPrices
from adaspark.runs.rows import reply_turn
from adaspark.runs.store import ROWS_FILE

#: Positions labelled past a reply's last token at first (a tree reaching deeper asks for more).
EXTRA_POSITIONS = 2
MAX_RELABELS = 50


def _split(args: list[str], keys: tuple[str, ...]) -> tuple[dict[str, str], list[str]]:
    mine: dict[str, str] = {}
    rest = []
    for a in args:
        k, eq, v = a.partition("=")
        if eq and k in keys:
            if not v:
                raise ConfigError(f"{k}= is empty")
            mine[k] = v
        else:
            rest.append(a)
    return mine, rest


def arm_trace_dir(run_dir: Path, arm: str) -> Path:
    """The trace directory of ``arm`` in ``run_dir`` (a run's out= directory or the arm's own)."""
    for d in (run_dir / arm / TRACE_DIR, run_dir / TRACE_DIR):
        if d.is_dir() and any(d.glob("*.parquet")):
            return d
    raise ConfigError(f"{run_dir} holds no round trace of arm {arm} ({run_dir / arm / TRACE_DIR} "
                      "has no trace files): make the run with `adaspark run run_arms=[" + arm +
                      "] run.exact=true run.round_log=true out=" + str(run_dir) + "`")


def file_sha(entry: dict[str, Any] | None) -> str | None:
    """A model entry's sha256 (``Parts.models``): the manifest's, else the file's own (a file
    given by path has no manifest entry)."""
    from adaspark import provenance

    if not entry:
        return None
    if entry.get("sha256"):
        return str(entry["sha256"])
    path = Path(str(entry.get("path", "")))
    return provenance.recorded_sha256(str(path)) if path.is_file() else None


def labels_identity(models: dict[str, Any], drafter_cfg: Any, block_positions: int,
                    drafted: bool) -> dict[str, Any]:
    from adaspark import provenance

    build = provenance.llama_build()
    return {
        "target_sha256": file_sha(models["target"]),
        "drafter_sha256": file_sha(models["drafter"]) if drafted else None,
        "drafter_kind": str(drafter_cfg.kind) if drafted else None,
        "block_positions": block_positions if drafted else 0,
        "candidates_per_position": int(drafter_cfg.candidates_per_position) if drafted else 0,
        "exact": True,
        "decoding_code": provenance.code_fingerprint(),
        "llama_cpp_commit": build.get("llama_cpp_commit"),
        "llama_patches": build.get("llama_patches"),
        "libllama_sha256": build.get("libllama_sha256"),
    }


def traces_sampling(traces: list[RequestTrace]
                    ) -> tuple[dict[str, Any] | None, dict[str, int] | None]:
    """A run's sampling from its traces (each request's ``meta.sampling``, its own seed): the
    fields but the seed, shared by every request, and each prompt's seed; (None, None) for a
    greedy run. A run whose requests were sampled differently is refused."""
    samplings = [t.meta.get("sampling") for t in traces]
    if all(s is None for s in samplings):
        return None, None
    if any(s is None for s in samplings):
        raise ConfigError("the run's traces mix greedy and sampled requests: replay one kind")
    fields = [{k: v for k, v in s.items() if k != "seed"} for s in samplings]
    if any(f != fields[0] for f in fields):
        raise ConfigError("the run's requests were sampled with different temperatures or "
                          "cuts: replay a run of one sampling")
    return fields[0], {prompt_key(t.prompt): int(s["seed"])
                       for t, s in zip(traces, samplings, strict=True)}


def _check_models(traces: list[RequestTrace], models: dict[str, Any], parts: tuple[str, ...]
                  ) -> None:
    """The run's model files are this config's: the target always (the labels' text is its),
    the drafter too for the exactness check (a replay under a device model may replay another
    drafter's arm over the same replies: its labels are made with that drafter)."""
    have = traces[0].meta.get("models") or {}
    for part in parts:
        want, got = file_sha(have.get(part)), file_sha(models.get(part))
        if want != got:
            raise ConfigError(f"the run's {part} file has sha256 {want}, this config's {got}: "
                              f"replay with the {part} the run used (its trace meta names it)")


def device_dir_name(device: str, pricer: Pricer) -> str:
    """A safe directory name for a replay's default output: a name of ``conf/device/`` (or
    ``recorded``) as it is; a file or a survey by the model's name and content hash, so that two
    files of one ``name:`` never share a directory."""
    import re

    if re.fullmatch(r"[A-Za-z0-9._-]+", device) and not device.endswith((".yaml", ".yml")):
        return device
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", pricer.name).strip("._") or "device"
    return f"{safe}-{pricer.sha256[:8]}" if pricer.sha256 else safe


def pricer_for(device: str, traces: list[RequestTrace]) -> Pricer:
    """``recorded``, ``survey:PATH`` (a survey's verify law with the run's own median D and host
    time per round: ``cpu-measured`` when the survey and the run are this machine's) or a
    device model of ``conf/device/`` (a name or a file)."""
    from adaspark.replay.device import load_device

    if device == "recorded":
        return RecordedPrices(traces)
    if device.startswith("survey:"):
        path = Path(device.partition(":")[2])
        return DevicePrices(survey_device(path, traces,
                                          name=f"survey-{path.parent.name or path.stem}"))
    return DevicePrices(load_device(device))


#: Fewest drafted rounds of one block size for that size's median to enter D's line.
MIN_ROUNDS_PER_SIZE = 5


def drafter_time(kind: str, traces: list[RequestTrace]) -> Any:
    """D of a drafter ``kind`` from its drafted rounds in ``traces``, as
    :class:`~adaspark.replay.device.DrafterTime` (None without drafted rounds).

    Where the rounds drafted blocks of two or more sizes (at least :data:`MIN_ROUNDS_PER_SIZE`
    rounds each), D is the straight line through each size's median time, least squares
    weighted by rounds: a draft model's block is a catch-up of the tokens committed since its
    last block and one step per further position, so its fixed part is the catch-up less a
    step; a DSpark block's forward may still grow with its positions. With one size: the
    median block for a kind whose block is one forward (DSpark), else the median per position
    (a draft model), the only split one size allows."""
    from adaspark.decoding.drafter.base import DRAFTERS
    from adaspark.replay.device import DrafterTime

    drafted = [r for t in traces for r in t.rounds if r.picks]
    if not drafted:
        return None
    by_size: dict[int, list[float]] = {}
    for r in drafted:
        by_size.setdefault(len(r.picks), []).append(r.draft_s)
    sizes = sorted(n for n, v in by_size.items() if len(v) >= MIN_ROUNDS_PER_SIZE)
    if len(sizes) >= 2:
        x = np.array(sizes, dtype=float)
        y = np.array([np.median(by_size[n]) for n in sizes]) * 1e3
        w = np.array([len(by_size[n]) for n in sizes], dtype=float)
        slope, fixed = np.polyfit(x, y, 1, w=np.sqrt(w))
        if slope < 0:  # no growth with the positions: one fixed cost
            return DrafterTime(fixed_ms=float(np.average(y, weights=w)))
        if fixed < 0:  # through the origin: a cost per position only
            return DrafterTime(per_position_ms=float(np.average(y / x, weights=w)))
        return DrafterTime(fixed_ms=float(fixed), per_position_ms=float(slope))
    if getattr(DRAFTERS.get(kind), "one_forward", False):
        return DrafterTime(fixed_ms=float(np.median([r.draft_s for r in drafted])) * 1e3)
    return DrafterTime(per_position_ms=float(np.median([r.draft_s / len(r.picks)
                                                        for r in drafted])) * 1e3)


def survey_device(path: Path, traces: list[RequestTrace], *, name: str,
                  by_kind: dict[str, list[RequestTrace]] | None = None) -> Any:
    """The ``measured`` device model of a survey file (its per-width verify law) with the D and
    host time per round of ``traces`` (their drafted rounds' medians: the drafter's time, and
    the round less its verify and drafter), and D per drafter kind from ``by_kind``'s traces
    (:func:`drafter_time`)."""
    import pandas as pd

    from adaspark.replay.device import device_from_survey

    if not path.is_file():
        raise ConfigError(f"device=survey:{path}: {path} does not exist (a survey stage's "
                          "survey.parquet)")
    times = {k: t for k, ts in (by_kind or {}).items()
             if (t := drafter_time(k, ts)) is not None}
    drafted = [r for t in traces for r in t.rounds if r.picks]
    draft = float(np.median([r.draft_s for r in drafted])) * 1e3 if drafted else 0.0
    # the rest of a round, what the model's host time stands for: the rule's plan and learning,
    # the commit, streaming (:mod:`adaspark.replay.price_check`)
    host = float(np.median([r.round_s - r.verify_s - r.draft_s for r in drafted] or
                           [r.round_s - r.verify_s for t in traces for r in t.rounds]
                           or [0.0])) * 1e3
    return device_from_survey(
        pd.read_parquet(path), name=name, source=str(path), draft_ms=draft,
        host_ms=max(host, 0.0),
        timing_source=f"medians over the drafted rounds of {traces[0].meta.get('arm', 'the')} "
                      f"run's trace ({len(drafted)} rounds, "
                      f"{'exact' if traces[0].exact else 'fast'} mode)" if traces else "none",
        drafters=times or None)


def replay_all(arm: Any, scheduler: dict[str, Any] | None, traces: list[RequestTrace],
               labels: dict[str, PromptLabels], pricer: Pricer, out_dir: Path,
               max_rows: int) -> list[ReplayedReply]:
    """One fresh rule replays every reply in the run's order (a learning rule's state carries
    from reply to reply, as in the run); the replies come back in that order."""
    from adaspark.arms import make_arm_rule

    extra: dict[str, Any] = {}
    if hasattr(arm.rule, "store"):  # a rule that keeps a store keeps it beside the replay
        store = out_dir / "store.json"
        store.unlink(missing_ok=True)
        extra["store"] = str(store)
    if hasattr(arm.rule, "log_dir"):
        log = out_dir / "rounds"
        shutil.rmtree(log, ignore_errors=True)
        extra["log_dir"] = str(log)
    rule = make_arm_rule(arm, scheduler, **extra)
    out = []
    for t in traces:
        out.append(replay_reply(
            rule, labels[prompt_key(t.prompt)], t.max_tokens, pricer, seq=t.seq,
            request_id=t.request_id, block_positions=int(t.meta["block_positions"]),
            max_rows=max_rows, n_ctx=int(t.meta["n_ctx"])))
    return out


def check_labelling_backend(backend: str | None = None) -> None:
    """Refuse to label on a GPU build: labels are made in exact mode
    (:mod:`adaspark.replay.labels`), whose bit-identity is a CPU property
    (:func:`adaspark.decoding.backend.check_exact`). Replaying labels made elsewhere needs no
    engine and runs on any build."""
    from adaspark.decoding.backend import BackendError, build_backend, is_gpu

    backend = backend or build_backend()
    if is_gpu(backend):
        raise BackendError(
            f"replay's labels are made in exact mode, which needs a CPU build of llama.cpp; this "
            f"one runs on {backend}. Make the labels on a CPU build (the labels stage, or "
            "`adaspark replay` there), then replay them here: pricing labels needs no engine")


class Labeller:
    """An arm's labels over a run's replies, from the label store or made on the engine.

    The engine (``arms.build`` in exact mode) is loaded only when a prompt has too few
    labels; ``engine=False`` (the replay stage, whose labels the labels stage made) refuses to
    label instead, naming the stage to rerun."""

    def __init__(self, cfg: Any, arm: Any, root: Path, *, engine: bool = True,
                 restart: bool = False, log: Any = None,
                 sampling: dict[str, Any] | None = None) -> None:
        """``sampling``: the sampled run's fields but the seed (:func:`run_sampling`), for the
        labels of a sampled run's replies (each drawn with its reply's seed, :meth:`labels`)."""
        from adaspark import model_files
        from adaspark.arms import make_arm_rule
        from adaspark.schema import arm_view, drafter_config, scheduler_mapping, target_config

        self.cfg, self.arm, self.engine = cfg, arm, engine
        self.say = log or (lambda _m: None)
        self.view = arm_view(cfg, arm)
        self.parts: Any = None
        self.guest: tuple[Any, Any] | None = None  # (target, drafter) of another's pass
        self.drafted = make_arm_rule(arm, scheduler_mapping(self.view)).uses_drafter
        dcfg = drafter_config(self.view)
        tpath, tsha = model_files.resolve(target_config(self.view))
        self.models: dict[str, Any] = {"target": {"path": str(tpath), "sha256": tsha}}
        B = dcfg.block_positions
        if self.drafted:
            if not dcfg.path and not dcfg.model:
                raise ConfigError(f"arm {arm.name}: the drafter {dcfg.name} has no file, so "
                                  "its labels cannot be made (set its path=FILE)")
            dpath, dsha = model_files.resolve(dcfg)
            self.models["drafter"] = {"path": str(dpath), "sha256": dsha}
            if B is None and str(dcfg.kind) == "dspark":  # the file's own block size
                from adaspark.decoding.drafter.dspark_file import read_dspark_file

                B = read_dspark_file(dpath).block_size
            if B is None:  # another drafter kind with a block of its own: load it
                B = self._parts(label=False).block_positions
        self.block_positions = int(B or 1) if self.drafted else 1
        self.identity = labels_identity(self.models, dcfg, self.block_positions, self.drafted)
        name = (f"{self.view.drafter.name}-{self.identity['drafter_sha256'][:8]}"
                if self.drafted else "no-drafter")
        self.sampling = sampling
        if sampling is not None:  # a sampled run's labels: a store of their own
            self.identity["sampling"] = dict(sampling)
            name += "-t{temperature:g}-k{top_k}-p{top_p:g}-m{min_p:g}".format(**sampling)
        self.store = LabelStore(root / name, self.identity, restart=restart)
        self.spent = 0.0
        self.spent_by_part: dict[str, float] = {}  # label_jointly: target and drafter seconds

    def _parts(self, label: bool = True) -> Any:
        from adaspark.arms import build

        if self.parts is None:
            if label and not self.engine:
                raise ConfigError(f"the labels in {self.store.dir} do not cover this replay (a "
                                  "prompt has too few positions): rerun the labels stage "
                                  "(`dvc repro labels`); it labels "
                                  "scheduler.ngram_fill.chain_depth_limit + 2 positions past "
                                  "each reply's block")
            check_labelling_backend()
            self.say(f"replay: loading the engine ({self.arm.name}'s target and drafter)")
            self.parts = build(self.cfg, self.arm, exact=True)
        return self.parts

    def positions(self, t: RequestTrace, depth: int = EXTRA_POSITIONS) -> int:
        """Positions to label for a reply: its tokens, a full block past its end and ``depth``.
        A sampled reply is labelled to its cap instead of its length: its run may have drawn on
        fast kernels, whose probabilities differ from exact mode's in the last bits, so a draw
        near a boundary of the distribution can go the other way in the labels; from there the
        labels are their own text, which may run longer than the run's reply."""
        n = max(len(t.tokens), int(t.max_tokens)) if self.sampling is not None else len(t.tokens)
        return n + (self.block_positions if self.drafted else 0) + depth

    @property
    def reads_target(self) -> bool:
        """Whether this labeller's drafter hooks the target (one such drafter per target)."""
        from adaspark.decoding.drafter.base import DRAFTERS
        from adaspark.schema import drafter_config

        return self.drafted and bool(
            getattr(DRAFTERS.get(str(drafter_config(self.view).kind)), "reads_target", False))

    def target_key(self) -> tuple[Any, ...]:
        """What must agree for two labellers to share one pass of the target: its file, its
        context and the threads."""
        from adaspark.schema import target_config

        return (self.identity["target_sha256"], int(target_config(self.view).n_ctx),
                self.view.get("threads"))

    def drafter_on(self, target: Any) -> Any:
        """This labeller's drafter, on its own target or (another labeller's pass) on
        ``target``: built there once, closed with this labeller."""
        from adaspark.arms import build_drafter

        if not self.drafted:
            return None
        if self.parts is not None and self.parts.target is target:
            return self.parts.drafter
        if self.guest is None or self.guest[0] is not target:
            self._close_guest()
            self.say(f"replay: loading {self.view.drafter.name} beside another arm's target")
            self.guest = (target, build_drafter(self.view, self.arm, target, exact=True)[0])
        return self.guest[1]

    def labels(self, wants: list[tuple[list[int], int]],
               texts: dict[str, list[int]] | None = None,
               seeds: dict[str, int] | None = None) -> dict[str, PromptLabels]:
        """The labels of ``wants`` (``(prompt, positions)``); ``seeds``: a sampled run's seed of
        each prompt (by :func:`~adaspark.replay.labels.prompt_key`)."""
        return label_jointly([self], [wants], log=self.say, texts=texts, seeds=seeds)[0]

    def sampling_of(self, prompt: list[int]) -> SamplingParams | None:
        """The sampling a prompt's labels are drawn with (None: greedy)."""
        seed = self.store.seed_of(prompt)
        if self.sampling is None or seed is None:
            return None
        return SamplingParams(**self.sampling, seed=seed)

    def _close_guest(self) -> None:
        if self.guest is not None:
            self.guest[1].close()
            self.guest = None

    def close(self) -> None:
        self._close_guest()
        if self.parts is not None:
            self.parts.close()
            self.parts = None


def joint_groups(labellers: list[Labeller]) -> list[list[Labeller]]:
    """The labellers that can share one pass of the target, in their order: the same target
    file, context and threads, and at most one drafter that hooks the target per group (the
    first such labeller leads the group: its parts load the target)."""
    groups: list[list[Labeller]] = []
    for lab in labellers:
        home = next((g for g in groups if g[0].target_key() == lab.target_key()
                     and not (lab.reads_target and any(o.reads_target for o in g))), None)
        if home is None:
            groups.append([lab])
        elif lab.reads_target:
            home.insert(0, lab)
        else:
            home.append(lab)
    return groups


def label_jointly(labellers: list[Labeller], wants: list[list[tuple[list[int], int]]],
                  log: Any = None, texts: dict[str, list[int]] | None = None,
                  seeds: dict[str, int] | None = None) -> list[dict[str, PromptLabels]]:
    """Each labeller's labels over its ``wants`` (``(prompt, n)``), made in one pass of the
    target per prompt for all the labellers that need that prompt
    (:func:`~adaspark.replay.labels.label_prompt_jointly`). The labellers must share a target
    (:func:`joint_groups`); the first loads it. Each labeller's ``spent`` gets the whole pass's
    time (the passes are shared, not split). ``texts``: each prompt's reply where known (by
    :func:`~adaspark.replay.labels.prompt_key`), verified in wide chains instead of one row
    per position. ``seeds``: a sampled run's seed of each prompt (the labellers then share its
    sampling: :class:`Labeller`'s ``sampling``)."""
    lead = labellers[0]
    if seeds:
        if any(o.sampling != lead.sampling or o.sampling is None for o in labellers):
            raise ConfigError("labels of a sampled run need every labeller made with the run's "
                              "sampling (Labeller(sampling=...))")
        for o in labellers:
            o.store.seeds = dict(seeds)
    if joint_groups(labellers) != [labellers]:
        raise ConfigError("these labellers cannot share one pass of the target (another target, "
                          "or a second drafter reading the target): group them with "
                          "joint_groups")

    def make(prompt: list[int], n: int, which: list[int]) -> list[PromptLabels]:
        parts = lead._parts()
        drafters = [(labellers[j].drafter_on(parts.target), labellers[j].block_positions
                     if labellers[j].drafted else 0) for j in which]
        return label_prompt_jointly(parts.target, drafters, prompt, n,
                                    (texts or {}).get(prompt_key(prompt), ()),
                                    lead.sampling_of(prompt))

    made: dict[int, list[PromptLabels]] = {}

    def make_timed(prompt: list[int], n: int, which: list[int]) -> list[PromptLabels]:
        labs = make(prompt, n, which)
        for j, lab in zip(which, labs, strict=True):
            made.setdefault(j, []).append(lab)
        return labs

    got, dt = ensure_labels([o.store for o in labellers], wants, make_timed,
                            log=log or lead.say)
    for j, o in enumerate(labellers):
        o.spent += dt
        for lab in made.get(j, []):  # the pass's time by part: the shared target, each drafter
            for part, sec in lab.seconds.items():
                o.spent_by_part[part] = o.spent_by_part.get(part, 0.0) + sec
    return got


def run_replay(args: list[str], log: Any = None) -> dict[str, Any]:
    """``adaspark replay ...``: the arguments, the composed config, then :func:`replay_arm`."""
    from adaspark.config_check import validate
    from adaspark.overrides import check_overrides

    mine, rest = _split(args, ("run_dir", "device", "out", "replies_of", "labels"))
    if "run_dir" not in mine:
        raise ConfigError("replay needs run_dir=DIR: a run made with run.exact=true "
                          "run.round_log=true")
    check_overrides(rest, "replay")
    cfg = compose(rest)
    arm = validate(cfg, command="replay").arm
    return replay_arm(cfg, arm, Path(mine["run_dir"]), device=mine.get("device", "recorded"),
                      out=Path(mine["out"]) if "out" in mine else None,
                      replies_of=mine.get("replies_of"),
                      labels=Path(mine["labels"]) if "labels" in mine else None, log=log)


def replay_arm(cfg: Any, arm: Any, run_dir: Path, *, device: str = "recorded",
               out: Path | None = None, replies_of: str | None = None,
               labels: Path | None = None, engine: bool = True, log: Any = None,
               cap: int | None = None,
               conversations: set[tuple[str, str, int]] | None = None) -> dict[str, Any]:
    """Replay ``arm`` (under ``cfg``'s target, drafters and scheduler) over ``run_dir``'s
    replies of ``replies_of`` (default: its own) priced by ``device``; labels from ``labels``
    (default ``<run>/labels``), made on the engine when missing unless ``engine`` is false.
    ``conversations``: only the replies of these ``(set, conversation, turn)`` (another run's
    subset, to set the replay beside it), in their order.
    ``cap`` caps every reply below its recorded cap (the run stage's cap, to set a replay
    beside a real run of other caps). Writes the replay's trace, rows and summary under ``out``
    and returns the summary."""
    from adaspark.schema import scheduler_mapping

    say = log or (lambda m: print(m, file=sys.stderr))
    if arm.engine != "ours":
        raise ConfigError(f"arm {arm.name} runs on {arm.engine}: replay runs our engine's width "
                          "rules only (llama.cpp's own loop is not a rule it can call)")
    source = replies_of or str(arm.name)
    if device == "recorded" and source != arm.name:
        raise ConfigError(f"replies_of={source}: the exactness check replays an arm over its own "
                          f"run; leave replies_of out, or name a device model")
    trace_dir = arm_trace_dir(run_dir, source)
    traces = read_traces(trace_dir)
    if conversations is not None:
        if device == "recorded":
            raise ConfigError("a replay of some of the run's replies cannot be checked against "
                              "the run's recorded rounds: name a device model")
        traces = [t for t in traces if reply_turn(t.request_id) in conversations]
        if not traces:
            raise ConfigError(f"none of the replies in {trace_dir} is of the conversations "
                              "asked for: the runs cover other subsets")
    if cap is not None:
        if device == "recorded":
            raise ConfigError("a cap other than the run's cannot be checked against the run's "
                              "recorded rounds: name a device model")
        traces = [dataclasses.replace(t, max_tokens=min(int(t.max_tokens), int(cap)))
                  for t in traces]
    arm_dir = trace_dir.parent
    base = arm_dir.parent if arm_dir != run_dir else run_dir
    label_root = labels or base / "labels"
    meta0 = traces[0].meta
    pricer = pricer_for(device, traces)
    out_dir = out or base / "replay" / f"{arm.name}@{device_dir_name(device, pricer)}"
    max_rows = int(meta0["max_rows"])
    if isinstance(pricer, DevicePrices):
        max_rows = min(pricer.model.max_rows, max_rows)

    # labels: from the store beside the run, else on the engine in exact mode
    sampling, seeds = traces_sampling(traces)
    labeller = Labeller(cfg, arm, label_root, engine=engine, log=say, sampling=sampling)
    pricer = pricer.for_drafter(labeller.identity.get("drafter_kind") if labeller.drafted
                                else None)
    labels_of: dict[str, PromptLabels] = {}
    try:
        _check_models(traces, labeller.models,
                      ("target", "drafter") if device == "recorded" else ("target",))
        want = {t.seq: labeller.positions(t) for t in traces}
        for _attempt in range(MAX_RELABELS):
            labels_of = labeller.labels([(t.prompt, want[t.seq]) for t in traces],
                                        {prompt_key(t.prompt): t.tokens for t in traces},
                                        seeds)
            try:
                replies = replay_all(arm, scheduler_mapping(labeller.view), traces, labels_of,
                                     pricer.fresh(), out_dir, max_rows)
                break
            except LabelsTooShort as e:
                for t in traces:
                    if prompt_key(t.prompt) == e.key:
                        want[t.seq] = e.position - (len(t.prompt) - 1) + 1 + EXTRA_POSITIONS
                say(f"replay: a tree reaches past prompt {e.key}'s labels; labelling further")
        else:
            raise RuntimeError(f"the replay still needs more labels after {MAX_RELABELS} tries")
    finally:
        labeller.close()

    for t, r in zip(traces, replies, strict=True):
        write_request(out_dir / TRACE_DIR, RequestTrace(
            seq=r.seq, request_id=r.request_id, prompt=list(t.prompt), tokens=r.tokens,
            max_tokens=t.max_tokens, stop=r.stop, exact=True, rounds=r.rounds,
            meta={"replay": True, "device": pricer.name, "device_label": pricer.label,
                  "device_sha256": pricer.sha256, "arm": str(arm.name),
                  "run_dir": str(run_dir)}))
    rows = replay_rows(arm_dir, str(arm.name), replies, pricer)
    if rows is not None:
        import pyarrow as pa

        io.write_parquet(out_dir / ROWS_FILE, pa.Table.from_pandas(rows, preserve_index=False))
    widths: Counter[int] = Counter()
    for r in replies:
        widths.update(r.width_hist)
    n_tok = sum(len(r.tokens) for r in replies)
    secs = sum(r.decode_s for r in replies)
    result: dict[str, Any] = {
        "arm": str(arm.name), "device": pricer.name, "device_label": pricer.label,
        "device_sha256": pricer.sha256, "replay": True, "run_dir": str(run_dir),
        "replies_of": source, "out": str(out_dir),
        "replies": len(replies), "tokens": n_tok,
        "rounds": sum(len(r.rounds) for r in replies),
        "tokens_per_round": n_tok / max(1, sum(len(r.rounds) for r in replies)),
        "tokens_per_s": n_tok / secs if secs > 0 else None,
        "accepted": sum(r.counts.n_accepted for r in replies),
        "drafted": sum(r.counts.n_drafted for r in replies),
        "widths": {str(k): v for k, v in sorted(widths.items())},
        "labelling_s": labeller.spent,
        "labelled_positions": sum(len(lab.next) for lab in labels_of.values()),
    }
    if device == "recorded":
        text = {t.seq: labels_of[prompt_key(t.prompt)].text[len(t.prompt):] for t in traces}
        check = check_replay(traces, replies, text)
        result |= check.as_dict()
        result["fast_mode_run"] = not all(t.exact for t in traces)
    io.write_json(out_dir / "summary.json", result)
    return result


def replay_rows(arm_dir: Path, arm: str, replies: list[ReplayedReply], pricer: Pricer
                ) -> Any:
    """The replay's per-reply rows in a run's shape (``replies.parquet``: the columns
    :mod:`adaspark.analysis.stats` reads), from the replayed run's own rows (the reply keys,
    prompt tokens and serving order, by request id) with the replayed tokens, time and status;
    ``None`` when the run has no rows file (a run not made by ``adaspark run``). Every row is
    marked ``replay`` with the device model's name and label."""
    import pandas as pd

    from adaspark.runs.rows import CUT, FINISHED, KEY_COLUMNS, LOOPED, reply_id

    path = arm_dir / ROWS_FILE
    if not path.is_file():
        return None
    run = pd.read_parquet(path)
    by_id = {reply_id(*(r[k] for k in KEY_COLUMNS)): r for r in run.to_dict("records")}
    out = []
    for r in replies:
        rec = by_id.get(str(r.request_id))
        if rec is None:  # a request the run did not keep (an untimed warm-up)
            continue
        out.append({
            "arm": arm, "repeat": 1, "entry": arm, **{k: rec[k] for k in KEY_COLUMNS},
            # a reply the run saw loop to the protocol cap loops in every replay of its text
            "status": LOOPED if rec["status"] == LOOPED else FINISHED if r.stop == "eog" else CUT,
            "decode_tps": r.tokens_per_s, "completion_tokens": len(r.tokens),
            "prompt_tokens": int(rec["prompt_tokens"]), "decode_s": r.decode_s,
            "rounds": len(r.rounds),
            "timings": json.dumps({"rule_summary": r.summary}, default=_plain),
            "replay": True, "device": pricer.name, "device_label": pricer.label,
            "device_sha256": pricer.sha256})
    return pd.DataFrame(out)


def _plain(x: Any) -> Any:
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    return str(x)


def replay_main(args: list[str]) -> int:
    want_json = any(a in ("json=true", "json=True") for a in args)
    result = run_replay(args)
    if want_json:
        print(json.dumps(result, ensure_ascii=False))
    else:
        print(summary_text(result))
    return 3 if result.get("exact") is False else 0


def summary_text(r: dict[str, Any]) -> str:
    sha = f", sha {r['device_sha256'][:8]}" if r.get("device_sha256") else ""
    lines = [f"replay of arm {r['arm']} under device model {r['device']} ({r['device_label']}"
             f"{sha}):",
             f"  {r['replies']} replies, {r['tokens']} tokens in {r['rounds']} rounds "
             f"({r['tokens_per_round']:.2f} per round); accepted {r['accepted']} of "
             f"{r['drafted']} drafted rows",
             f"  replayed tok/s {r['tokens_per_s']:.1f}" if r.get("tokens_per_s") else
             "  replayed tok/s: none (no time priced)",
             f"  widths: {r['widths']}",
             f"  labels: {r['labelled_positions']} positions ({r['labelling_s']:.1f} s spent "
             "labelling now)"]
    if "exact" in r:
        lines.append(f"  exactness: {r['rounds_identical']}/{r['rounds_compared']} rounds "
                     f"identical, committed tokens identical: {r['committed_identical']}, text "
                     f"cuts {r['text_cuts']} -> {'EXACT' if r['exact'] else 'NOT EXACT'}")
    lines.append(f"  records: {r['out']}")
    return "\n".join(lines)
