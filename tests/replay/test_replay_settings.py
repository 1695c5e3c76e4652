"""The ``replay`` section's checks (``adaspark.replay.settings``) and which of Figure 5's
contexts the labels stage labels (``replay.fig5_contexts``), on the presets' own params."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from omegaconf import OmegaConf

from adaspark.config import ConfigError
from adaspark.replay.settings import replay_settings
from adaspark.stages.labels import fig5_label_contexts


def _params(preset: str) -> dict[str, Any]:
    from adaspark.config import compose

    out = OmegaConf.to_container(compose([f"preset={preset}"]), resolve=True)
    assert isinstance(out, dict)
    return out


@pytest.mark.parametrize("preset,labelled", [("default", [443, 1596]),
                                             ("paper", [443, 1596, 8444]),
                                             ("smoke", [128, 256])])
def test_each_preset_labels_the_contexts_it_names(preset: str, labelled: list[int]) -> None:
    params = _params(preset)
    s = replay_settings(params)
    kept, gone = fig5_label_contexts(list(params["fig5"]["contexts"]), s.fig5_contexts)
    assert kept == labelled
    assert gone == [c for c in params["fig5"]["contexts"] if c not in labelled]


def test_a_context_figure_5_does_not_run_is_refused_by_name() -> None:
    params = copy.deepcopy(_params("default"))
    params["replay"]["fig5_contexts"] = [443, 2000]
    with pytest.raises(ConfigError, match=r"\[2000\].*fig5.contexts"):
        replay_settings(params)


def test_labelled_replies_must_be_a_labelled_arms() -> None:
    params = copy.deepcopy(_params("default"))
    params["replay"]["replies_of"] = "chain3"
    with pytest.raises(ConfigError, match="replies_of='chain3' is not one of"):
        replay_settings(params)


def test_no_choice_labels_every_context_in_order() -> None:
    assert fig5_label_contexts([8444, 443, 1596], []) == ([8444, 443, 1596], [])
    assert fig5_label_contexts([443, 1596, 8444], [8444, 443]) == ([443, 8444], [1596])
