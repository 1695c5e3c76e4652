"""The pipeline's ``replay`` section (issue 14): which exact-mode run is labelled, and which arms
are replayed under which device models (stages ``labelled``, ``labels`` and ``replay``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from adaspark.checks import check_group, spec
from adaspark.config import ConfigError

#: The labels stage's list of Figure 5's prompts (``runs/labels/fig5_prompts.json``).
FIG5_PROMPTS = "fig5_prompts.json"

#: The device model fitted from this machine's survey and the labelled run's trace by the replay
#: stage (``runs/replay/devices/cpu-measured.yaml``), not a file of ``conf/device/``.
CPU_MEASURED = "cpu-measured"


@dataclass(frozen=True)
class ReplaySettings:
    #: The labelled run's subset and reply cap (the cap bounds the labelling time: labels cost
    #: about one block and one 1-row verify per position).
    subset: str
    cap: int = spec(min=1)
    #: Arms run in exact mode with round traces (stage ``labelled``); each is also replayed under
    #: its own recorded times, the exactness check.
    labelled_arms: list[str] = field(default_factory=list)
    #: The labelled arm whose replies are labelled and replayed (in exact mode every lossless
    #: arm's text is the same).
    replies_of: str = "adaspark"
    #: Arms replayed over those replies, and the device models they are priced under (a name of
    #: ``conf/device/``, a file, or ``cpu-measured``).
    arms: list[str] = field(default_factory=list)
    devices: list[str] = field(default_factory=list)
    #: Also label Figure 5's prompts (the ``fig5`` section's contexts, prompts and tokens) and
    #: replay its pinned 8- and 16-row pair over them under every device model.
    fig5_prompts: bool = False
    #: Which of ``fig5.contexts`` those are (empty: every one). Labels are made in exact mode,
    #: whose prefill is slow here (about 20 tokens/s at 8k tokens): the default preset labels the
    #: two shorter contexts and the report says which were left out.
    fig5_contexts: list[int] = field(default_factory=list)
    #: The closed-loop batch replay (issue 37; :mod:`adaspark.replay.batch`, a synthetic batch
    #: law): these arms at these numbers of clients under every device model, over the first
    #: ``batch_replies`` replies (0: all). Empty clients: none (the load preset sets them).
    batch_clients: list[int] = field(default_factory=list)
    batch_arms: list[str] = field(default_factory=list)
    batch_replies: int = spec(min=0, default=0)


def read_replay_params(path: str) -> tuple[Any, dict[str, Any], ReplaySettings]:
    """A replay stage's params file: the checked config, the same as a plain dict, and its
    ``replay`` section."""
    from omegaconf import OmegaConf

    from adaspark.config_check import read_params

    cfg = read_params(path)
    params = OmegaConf.to_container(cfg, resolve=True)
    assert isinstance(params, dict)
    return cfg, params, replay_settings(params)  # type: ignore[arg-type]


def replay_settings(params: dict[str, Any]) -> ReplaySettings:
    raw = params.get("replay")
    if not isinstance(raw, dict):
        raise ConfigError("the params have no `replay:` section (conf/preset/*.yaml): compose "
                          "params.yaml again with `adaspark config format=yaml > params.yaml`")
    s: ReplaySettings = check_group(ReplaySettings, raw, "replay", extra="refuse")
    if s.replies_of not in s.labelled_arms:
        raise ConfigError(f"replay.replies_of={s.replies_of!r} is not one of "
                          f"replay.labelled_arms {s.labelled_arms}: the labelled replies are "
                          "one labelled arm's")
    known = list((params.get("fig5") or {}).get("contexts") or [])
    stray = [c for c in s.fig5_contexts if c not in known]
    if stray:
        raise ConfigError(f"replay.fig5_contexts has {stray}, which are not fig5.contexts "
                          f"{known}: name some of Figure 5's contexts, or leave it empty for all")
    arms = params.get("arms") or {}
    missing = [a for a in [*s.labelled_arms, *s.arms, *s.batch_arms] if a not in arms]
    if missing:
        raise ConfigError(f"replay names arms {missing} that are not under `arms:` (it has "
                          f"{sorted(arms)})")
    if any(n < 1 for n in s.batch_clients):
        raise ConfigError(f"replay.batch_clients {s.batch_clients}: each is a number of "
                          "clients, at least 1")
    return s
