"""A device model for trace-driven replay (issue 14, "Device models"): what a round would cost on
a device, so that labels recorded on this machine can be replayed under another device's prices.

A model is a file of ``conf/device/``: the verify time T(n rows, context) as the paper's row
classes (§3.2) with Eq. (3)'s per-class fit ``T_k(c) = alpha_k + beta_k * c`` — a verify of n rows
costs what the class of the smallest listed width at or above n costs, so T is flat inside a
class and steps between classes, as Eq. (2) describes — plus the drafter's time D per round
(``draft_ms``, or per drafter kind ``drafters:``, a fixed part and a part per drafted position:
a draft model's block is one forward per position, a DSpark block one forward), a per-round host
term (the scheduler's own time, which whole-round rho counts) and an optional
multiplicative noise with its own seed. ``label`` says where the numbers come from
(``measured`` on a named machine, ``reconstructed`` from the paper's figures, ``synthetic``) and
``sources`` where each one was read, so a replay's outputs can say so wherever they are shown.

A file with a missing, negative or inconsistent coefficient is refused, naming the key and the
fix (:class:`DeviceModelError`); nothing is clamped silently.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import yaml

from adaspark.checks import check_group, spec
from adaspark.config import ConfigError

LABELS = ("measured", "reconstructed", "synthetic")


class DeviceModelError(ConfigError):
    """A device model file that cannot price a round as written."""


@dataclass(frozen=True)
class VerifyClasses:
    """T(n, c) by row class (§3.2): ``rows[k]`` is class k's top width (increasing), and a
    verify of n rows, ``rows[k-1] < n <= rows[k]``, costs class k's time at c tokens of context:
    Eq. (3)'s line ``alpha_ms[k] + beta_ms_per_1k[k] * c / 1000`` (the paper's fit: the
    reconstructed models), or, where ``contexts`` and ``ms`` are given instead (a survey's
    measured points: ``cpu-measured``), the polyline through ``ms[k][j]`` at ``contexts[j]``,
    extended past the end points along its first and last segments (:func:`polyline_ms`)."""

    rows: list[int]
    alpha_ms: list[float] = field(default_factory=list)
    beta_ms_per_1k: list[float] = field(default_factory=list)
    #: ``step``: flat inside a class (Eq. 2's dense kernels); ``linear``: the class times
    #: interpolated between the listed widths, for a routed target whose time rises with every
    #: row (§3.2); below the first width, the first width's price.
    shape: Literal["step", "linear"] = "step"
    contexts: list[float] = spec(default_factory=list, increasing="strict", min=0)
    ms: list[list[float]] = field(default_factory=list)

    def class_ms(self, k: int, context: float) -> float:
        """Class k's time at ``context`` tokens (ms)."""
        if self.ms:
            return polyline_ms(self.contexts, self.ms[k], context)
        return self.alpha_ms[k] + self.beta_ms_per_1k[k] * context / 1000.0


def polyline_ms(contexts: list[float], ms: list[float], context: float) -> float:
    """The time at ``context`` on the line through the measured points ``(contexts[j], ms[j])``:
    linear between two points, along the first (last) segment before the first (after the last)
    point, its slope taken as 0 where it falls (a slope below 0 is noise on a rising law), and
    never below the smallest measured time's half (a floor for a steep first segment read far
    below its first point). One point: that time at every context."""
    if len(contexts) == 1:
        return ms[0]
    j = int(np.clip(np.searchsorted(contexts, context) - 1, 0, len(contexts) - 2))
    c0, c1, y0, y1 = contexts[j], contexts[j + 1], ms[j], ms[j + 1]
    slope = (y1 - y0) / (c1 - c0)
    if (context < c0 or context > c1) and slope < 0:
        slope = 0.0
    at = y0 + slope * (context - c0) if context <= c1 else y1 + slope * (context - c1)
    return max(at, 0.5 * min(ms))


@dataclass(frozen=True)
class Noise:
    """Multiplicative noise on each priced time: a lognormal factor of mean 1 and coefficient of
    variation ``cv`` (0: none), drawn from ``seed``."""

    cv: float = spec(min=0.0, default=0.0)
    seed: int = spec(min=0, default=0)


@dataclass(frozen=True)
class DrafterTime:
    """D for one drafter kind: ``fixed_ms + per_position_ms * positions`` per drafted round."""

    fixed_ms: float = spec(min=0.0, default=0.0)
    per_position_ms: float = spec(min=0.0, default=0.0)

    def ms(self, positions: int) -> float:
        return self.fixed_ms + self.per_position_ms * positions


@dataclass(frozen=True)
class DeviceModel:
    """One ``conf/device/<name>.yaml``, checked (:func:`device_from_mapping`)."""

    name: str
    label: Literal["measured", "reconstructed", "synthetic"]
    verify: VerifyClasses
    draft_ms: float = spec(min=0.0)
    host_ms: float = spec(min=0.0)
    description: str | None = None
    #: The paper's target a ``reconstructed`` model stands for (its name in the paper's tables),
    #: so a replay's outputs are set beside that target's values.
    paper_target: str | None = None
    noise: Noise = field(default_factory=Noise)
    sources: dict[str, str] = field(default_factory=dict)
    #: D by drafter kind (``draft-model``, ``dspark``; :data:`adaspark.decoding.drafter.base.
    #: DRAFTERS`); a kind not listed pays ``draft_ms``.
    drafters: dict[str, DrafterTime] = field(default_factory=dict)
    #: The model's content hash (:func:`content_sha256`): two files with one ``name:`` and other
    #: numbers are told apart wherever the name is shown.
    sha256: str = ""

    @property
    def ident(self) -> str:
        """The name with the content hash beside it (``step-at-8 (sha 1a2b3c4d)``)."""
        return f"{self.name} (sha {self.sha256[:8]})" if self.sha256 else self.name

    @property
    def max_rows(self) -> int:
        return self.verify.rows[-1]

    def class_of(self, n_rows: int) -> int:
        """The index of the class a verify of ``n_rows`` rows falls in."""
        if n_rows < 1 or n_rows > self.max_rows:
            raise DeviceModelError(
                f"device model {self.name} prices verifies of 1 to {self.max_rows} rows, not "
                f"{n_rows}: add a wider class to verify.rows (with its alpha and beta), or keep "
                f"the arm's widths at most {self.max_rows}")
        return int(np.searchsorted(self.verify.rows, n_rows, side="left"))

    def verify_s(self, n_rows: int, context: int) -> float:
        """Eq. (3) for the class of ``n_rows`` at ``context`` tokens, in seconds (no noise)."""
        k = self.class_of(n_rows)
        v = self.verify
        t = v.class_ms(k, context)
        if v.shape == "linear" and k > 0:
            lo = v.rows[k - 1]
            f = (n_rows - lo) / (v.rows[k] - lo)
            below = v.class_ms(k - 1, context)
            t = below + f * (t - below)
        return t / 1e3

    @property
    def draft_s(self) -> float:
        return self.draft_ms / 1e3

    def draft_s_of(self, kind: str | None, positions: int) -> float:
        """D of a round that drafted ``positions`` positions with a drafter of ``kind``: its
        entry of ``drafters``, else ``draft_ms``."""
        t = self.drafters.get(kind or "")
        return (t.ms(positions) if t is not None else self.draft_ms) / 1e3

    @property
    def host_s(self) -> float:
        return self.host_ms / 1e3

    def noise_source(self) -> NoiseSource:
        """A fresh source of this model's noise factors (same seed, same sequence)."""
        return NoiseSource(self.noise.cv, self.noise.seed)


class NoiseSource:
    """Lognormal factors of mean 1 and coefficient of variation ``cv`` from ``seed``; 1.0 when
    ``cv`` is 0. Determinism: same ``cv`` and seed, same factors in the same order."""

    def __init__(self, cv: float, seed: int) -> None:
        self.sigma = math.sqrt(math.log1p(cv * cv))
        self.rng = np.random.default_rng(seed)

    def factor(self) -> float:
        if self.sigma == 0.0:
            return 1.0
        return float(self.rng.lognormal(-0.5 * self.sigma ** 2, self.sigma))


def _check_classes(raw: Any, where: str) -> VerifyClasses:
    v: VerifyClasses = check_group(VerifyClasses, raw, where, extra="refuse")
    n = len(v.rows)
    if n == 0:
        raise DeviceModelError(f"{where}.rows is empty: list each class's top width")
    if v.rows[0] < 1 or any(b <= a for a, b in zip(v.rows, v.rows[1:], strict=False)):
        raise DeviceModelError(f"{where}.rows={v.rows}: the classes' top widths must be at least "
                               "1 and strictly increasing")
    lines, points = bool(v.alpha_ms or v.beta_ms_per_1k), bool(v.contexts or v.ms)
    if lines == points:
        raise DeviceModelError(
            f"{where}: give each class's time either as Eq. (3)'s line (alpha_ms and "
            "beta_ms_per_1k) or as measured points (contexts and ms), "
            + ("not both" if lines else "one of the two"))
    values: list[tuple[str, int, float]] = []
    if lines:
        for key in ("alpha_ms", "beta_ms_per_1k"):
            if len(getattr(v, key)) != n:
                raise DeviceModelError(f"{where}.{key} has {len(getattr(v, key))} values for "
                                       f"{n} classes ({where}.rows): give one per class")
            values += [(key, k, x) for k, x in enumerate(getattr(v, key))]
    else:
        if not v.contexts or len(v.ms) != n or any(len(m) != len(v.contexts) for m in v.ms):
            raise DeviceModelError(
                f"{where}.ms must hold one list per class ({n}, {where}.rows) of one time per "
                f"context of {where}.contexts ({len(v.contexts)})")
        values += [("ms", k, x) for k, m in enumerate(v.ms) for x in m]
    for key, k, x in values:
        if not math.isfinite(x):
            raise DeviceModelError(
                f"{where}.{key}[{k}] (the {v.rows[k]}-row class) is {x}: a time must be a "
                "finite number of milliseconds (>= 0)")
        if x < 0:
            raise DeviceModelError(
                f"{where}.{key}[{k}] (the {v.rows[k]}-row class) is {x}: a time cannot be "
                "negative; a source that reports a negative slope gives 0 here, and the "
                "file's sources say so")
    if v.shape not in ("step", "linear"):
        raise DeviceModelError(f"{where}.shape={v.shape!r}: step (flat inside a class) or linear "
                               "(interpolated between the listed widths)")
    return VerifyClasses([int(r) for r in v.rows], [float(a) for a in v.alpha_ms],
                         [float(b) for b in v.beta_ms_per_1k], v.shape,
                         [float(c) for c in v.contexts], [[float(x) for x in m] for m in v.ms])


def device_from_mapping(raw: Any, where: str = "device") -> DeviceModel:
    """A checked :class:`DeviceModel` from a file's mapping."""
    try:
        return _device(raw, where)
    except DeviceModelError:
        raise
    except ConfigError as e:  # a key's type or range, from the typed schema
        raise DeviceModelError(str(e)) from None


def _device(raw: Any, where: str) -> DeviceModel:
    if not isinstance(raw, dict):
        raise DeviceModelError(f"{where} must be a mapping of keys, not {type(raw).__name__}")
    for key in ("verify", "draft_ms", "host_ms", "label"):
        if key not in raw:
            raise DeviceModelError(f"{where}.{key} is missing: a device model names its label, "
                                   "its verify classes, the drafter's draft_ms and the host_ms "
                                   "per round (0 where the device has none)")
    if "sha256" in raw:
        raise DeviceModelError(f"{where}.sha256 is set in the file: a device model's hash is "
                               "computed from its content; remove the key")
    top = check_group(DeviceModel, {k: v for k, v in raw.items()
                                    if k not in ("verify", "noise", "drafters")},
                      where, extra="refuse", partial=True)
    drafters = raw.get("drafters") or {}
    if not isinstance(drafters, dict):
        raise DeviceModelError(f"{where}.drafters must map a drafter kind to its fixed_ms and "
                               "per_position_ms")
    times = {str(k): check_group(DrafterTime, v, f"{where}.drafters.{k}", extra="refuse")
             for k, v in drafters.items()}
    if top["label"] not in LABELS:
        raise DeviceModelError(f"{where}.label={top['label']!r}: one of {', '.join(LABELS)}")
    if top["label"] != "synthetic" and not top.get("sources"):
        raise DeviceModelError(f"{where}.sources is empty: a {top['label']} model says where "
                               "each number comes from (a machine, or the paper's line)")
    noise = check_group(Noise, raw.get("noise") or {}, f"{where}.noise", extra="refuse")
    return DeviceModel(
        name=str(top.get("name") or where), label=top["label"],
        verify=_check_classes(raw["verify"], f"{where}.verify"),
        draft_ms=float(top["draft_ms"]), host_ms=float(top["host_ms"]),
        description=top.get("description"), paper_target=top.get("paper_target"), noise=noise,
        sources={str(k): str(v) for k, v in (top.get("sources") or {}).items()},
        drafters=times, sha256=content_sha256(raw))


def content_sha256(raw: Any) -> str:
    """The sha256 of a device model's mapping (keys sorted, as JSON): its identity beside its
    ``name:``, the same for the same numbers whatever the file's layout or comments."""
    import hashlib
    import json

    return hashlib.sha256(json.dumps(raw, sort_keys=True, default=str).encode()).hexdigest()


def device_path(name_or_path: str) -> Path:
    """``conf/device/<name>.yaml`` of the checkout, or a path to a file."""
    from adaspark import paths

    p = Path(name_or_path).expanduser()
    if p.suffix in (".yaml", ".yml") or p.is_file():
        return p
    return paths.conf_dir() / "device" / f"{name_or_path}.yaml"


def load_device(name_or_path: str) -> DeviceModel:
    """The device model a name of ``conf/device/`` or a file names, checked."""
    path = device_path(name_or_path)
    if not path.is_file():
        known = sorted(q.stem for q in (device_path("x").parent).glob("*.yaml"))
        raise DeviceModelError(f"no device model {name_or_path!r} ({path} does not exist); "
                               f"conf/device/ has {', '.join(known) or 'none'}")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as e:
        raise DeviceModelError(f"{path} is not YAML: {e}") from None
    return device_from_mapping(raw, where=path.stem)


def device_from_survey(survey: Any, *, name: str, source: str, draft_ms: float, host_ms: float,
                       timing_source: str, drafters: dict[str, DrafterTime] | None = None
                       ) -> DeviceModel:
    """A ``measured`` device model from a survey of this project (``survey.parquet``'s rows,
    :mod:`adaspark.replay.survey`): one row class per surveyed width, whose time is the
    polyline through the width's median verify time at each surveyed context, and a width
    between two surveyed ones priced on the straight line between them (``shape: linear``).
    Both follow what was measured here: one least-squares line per width over 443-8,444 tokens
    charged a 4-row verify about 210 ms at the short subset's contexts against about 145 ms
    measured in a run, and the 8-row class's price for a 5-row verify was 362 ms against 230 ms
    measured (the line from 4 to 8 rows gives 229); on this CPU a verify's time rises with every
    row. A survey of every width (a device profile's 1-64) gives each its own time, so the
    shape between widths matters only for a survey of a few. A width surveyed at fewer contexts
    than the others is read off its own points at the missing ones, and ``sources`` says which.
    ``draft_ms`` and ``host_ms`` come from elsewhere (a run's round trace: ``timing_source``
    names it), as the survey times verifies only; ``drafters``, D by drafter kind, from the same
    traces."""
    from adaspark.replay.survey import survey_medians

    med = survey_medians(survey)
    if med.empty:
        raise DeviceModelError(f"the survey {source} has no kept rounds: run the survey stage")
    contexts = sorted(float(c) for c in med["context"].unique())
    rows, ms, filled = [], [], []
    for width, g in med.groupby("width"):
        g = g.sort_values("context")
        c = g["context"].to_numpy(dtype=float)
        y = g["verify_ms"].to_numpy(dtype=float)
        if len(c) < len(contexts):
            filled.append(int(width))
        rows.append(int(width))
        ms.append([round(polyline_ms(list(c), list(y), x), 4) for x in contexts])
    sources = {"verify": f"the median verify time per width at each context of {source}, "
                         "joined by straight lines in context and, between surveyed widths, "
                         "in width",
               "draft_ms": timing_source, "host_ms": timing_source}
    if filled:
        sources["filled"] = (f"widths {filled}: surveyed at fewer contexts; read off their own "
                             "points at the others")
    raw = {"name": name, "label": "measured",
           "verify": {"rows": rows, "contexts": contexts, "ms": ms, "shape": "linear"},
           "draft_ms": round(float(draft_ms), 4), "host_ms": round(float(host_ms), 4),
           "description": f"fitted from {source}", "sources": sources}
    if drafters:
        raw["drafters"] = {k: {"fixed_ms": round(t.fixed_ms, 4),
                               "per_position_ms": round(t.per_position_ms, 4)}
                           for k, t in drafters.items()}
    return device_from_mapping(raw, where=name)
