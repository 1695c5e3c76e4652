"""Pipeline stage entry points: one module per DVC stage, each with ``main(argv)``."""

from pathlib import Path
from typing import Any


def load_params(path: str | Path) -> dict[str, Any]:
    """The composed ``params.yaml`` as a plain dict (every stage reads its sections from it)."""
    from omegaconf import OmegaConf

    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(
            f"{p} does not exist: compose it with `adaspark config format=yaml > {p}`"
        )
    params = OmegaConf.to_container(OmegaConf.load(p), resolve=True)
    if not isinstance(params, dict):
        raise ValueError(f"{p} is not a mapping of config sections")
    return params  # type: ignore[return-value]
