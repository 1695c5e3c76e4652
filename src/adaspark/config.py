"""One config truth (HARNESS "Conventions"): compose ``conf/`` with ``key=value`` overrides.

Free-text keys (``prompt=``, ``system=``) are taken verbatim, everything after the first ``=``:
they never pass through Hydra's override grammar, and OmegaConf never interpolates them
(``${arm.name}`` stays ``${arm.name}``, a backslash stays a backslash).
"""

from __future__ import annotations

import re
from collections.abc import Collection
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from adaspark import paths

FREE_TEXT_KEYS = ("prompt", "system")


class ConfigError(ValueError):
    """An override that names no config, or a value of the wrong kind."""


def verbatim(text: str) -> str:
    """``text`` escaped for an OmegaConf string node so that reading the node gives ``text``
    back exactly: OmegaConf interpolates ``${...}`` and treats backslashes right before ``${``
    as escapes, so each ``${`` preceded by k backslashes becomes 2k backslashes and ``\\${``.
    Nothing else in a string is special to it."""
    return re.sub(r"(\\*)\$\{", lambda m: m.group(1) * 2 + "\\${", text)


def split_words(args: list[str], keys: Collection[str]) -> tuple[list[str], dict[str, str]]:
    """Separate the ``key=value`` words whose key is one of ``keys`` (the value: everything after
    the first ``=``) from the other arguments (Hydra overrides)."""
    rest: list[str] = []
    found: dict[str, str] = {}
    for a in args:
        key, eq, value = a.partition("=")
        if eq and key in keys:
            found[key] = value
        else:
            rest.append(a)
    return rest, found


def split_free_text(args: list[str]) -> tuple[list[str], dict[str, str]]:
    """Separate free-text ``key=value`` arguments from Hydra overrides."""
    return split_words(args, FREE_TEXT_KEYS)


def compose(args: list[str], conf_dir: Path | None = None) -> DictConfig:
    """Compose ``conf/config.yaml`` with ``args`` (Hydra overrides plus free-text keys)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    overrides, free = split_free_text(args)
    for o in overrides:
        if "=" not in o:
            raise ConfigError(f"argument {o!r} is not key=value (e.g. arm=chain3, max_tokens=32)")
    cdir = str(conf_dir or paths.conf_dir())
    try:
        with initialize_config_dir(config_dir=cdir, version_base=None):
            cfg = hydra_compose(config_name="config", overrides=overrides)
    except (HydraException, OmegaConfBaseException) as e:
        raise ConfigError(f"{e}\n(config directory: {cdir})") from None
    OmegaConf.set_struct(cfg, False)
    for k, v in free.items():
        cfg[k] = verbatim(v)
    OmegaConf.set_struct(cfg, True)
    return cfg


def to_dict(cfg: DictConfig) -> dict[str, Any]:
    return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]
