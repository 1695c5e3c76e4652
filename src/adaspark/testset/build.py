"""Build the six sets from their sources, or fall back to the vendored copy (issue 4).

Each source is read, in this order of preference, from a local mirror the caller names, from the
dataset hub at the pinned revision, or not at all: then the vendored copy of the published set
stands in, after it has been checked against the lock. Spec-Bench's raw file is vendored itself,
so that set is always rebuilt from its source.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from adaspark import paths
from adaspark.testset import convfinqa, longbench, specbench, speedbench, toolace, wildchat
from adaspark.testset.lock import VENDORED_SET_DIR
from adaspark.testset.model import SET_NAMES, SetFile, dumps_set, loads_set
from adaspark.testset.readers import SourceUnavailable, hub_reachable


@dataclass(frozen=True)
class SourceBuilder:
    name: str
    repo: str
    revision: str
    from_mirror: Callable[[Path], SetFile]
    from_hub: Callable[[], SetFile] | None


BUILDERS: dict[str, SourceBuilder] = {
    "specbench": SourceBuilder(
        "specbench", specbench.SOURCE, specbench.REVISION, specbench.build_from_mirror, None
    ),
    "speedbench": SourceBuilder(
        "speedbench",
        speedbench.HUB.repo,
        speedbench.HUB.revision,
        speedbench.build_from_mirror,
        speedbench.build_from_hub,
    ),
    "wildchat": SourceBuilder(
        "wildchat",
        wildchat.HUB.repo,
        wildchat.HUB.revision,
        wildchat.build_from_mirror,
        wildchat.build_from_hub,
    ),
    "convfinqa": SourceBuilder(
        "convfinqa",
        convfinqa.HUB.repo,
        convfinqa.HUB.revision,
        convfinqa.build_from_mirror,
        convfinqa.build_from_hub,
    ),
    "toolace": SourceBuilder(
        "toolace",
        toolace.HUB.repo,
        toolace.HUB.revision,
        toolace.build_from_mirror,
        toolace.build_from_hub,
    ),
    "longbench": SourceBuilder(
        "longbench",
        longbench.HUB.repo,
        longbench.HUB.revision,
        longbench.build_from_mirror,
        longbench.build_from_hub,
    ),
}


@dataclass
class Built:
    """One set as the stage will write it, and where it came from."""

    set_file: SetFile
    data: bytes
    origin: str
    rebuilt: bool


@dataclass
class BuildLog:
    lines: list[str] = field(default_factory=list)

    def say(self, line: str) -> None:
        self.lines.append(line)


Probe = Callable[[str, str], str | None]


def shown(path: Path) -> str:
    """``path`` relative to the repository when inside it (shorter, machine-independent)."""
    try:
        return str(path.resolve().relative_to(paths.checkout_root()))
    except ValueError:
        return str(path)


def vendored_built(name: str, files: Mapping[str, bytes]) -> Built:
    rel = f"{VENDORED_SET_DIR}/{name}.json"
    data = files[rel]
    s = loads_set(data.decode("utf-8"), where=f"data/{rel}")
    return Built(s, data, f"vendored copy data/{rel}", False)


def rebuilt(s: SetFile, origin: str) -> Built:
    return Built(s, dumps_set(s).encode("utf-8"), origin, True)


def build_sets(
    files: Mapping[str, bytes],
    *,
    mirrors: Mapping[str, Path] | None = None,
    try_hub: bool = True,
    probe: Probe = hub_reachable,
    data_dir: Path | None = None,
    log: BuildLog | None = None,
) -> dict[str, Built]:
    """Every set in the published order: rebuilt where its source can be read, else the
    vendored copy (``files``: the vendored bytes, already checked against the lock).

    The hub is probed once, when the first source needs it; if it cannot be reached, one line
    says so and every source left falls back to the vendored copy.
    """
    mirrors = dict(mirrors or {})
    unknown = sorted(set(mirrors) - set(SET_NAMES))
    if unknown:
        raise ValueError(f"no source called {unknown}; the sources are {list(SET_NAMES)}")
    log = log or BuildLog()
    data_dir = data_dir or paths.data_dir()
    out: dict[str, Built] = {}
    hub_down: str | None = None
    probed = False
    fallback: list[str] = []
    for name in SET_NAMES:
        b = BUILDERS[name]
        if name in mirrors:
            out[name] = rebuilt(
                b.from_mirror(mirrors[name]), f"rebuilt from mirror {mirrors[name]}"
            )
            continue
        if name == "specbench":
            root = data_dir / "sources" / "spec-bench"
            out[name] = rebuilt(b.from_mirror(root), f"rebuilt from {shown(root)}/question.jsonl")
            continue
        if try_hub and b.from_hub is not None:
            if not probed:
                hub_down, probed = probe(b.repo, b.revision), True
            if hub_down is None:
                try:
                    out[name] = rebuilt(
                        b.from_hub(), f"rebuilt from the hub, {b.repo}@{b.revision}"
                    )
                    continue
                except SourceUnavailable as e:
                    log.say(f"testset: {name}: {e}; using the vendored copy")
        out[name] = vendored_built(name, files)
        fallback.append(name)
    if fallback and (hub_down is not None or not try_hub):
        why = f"no dataset hub reachable ({hub_down})" if hub_down else "hub not tried (offline)"
        log.say(
            f"testset: {why}; using the vendored copy of {', '.join(fallback)}, "
            "checked against data/testset.lock.json"
        )
    return out
