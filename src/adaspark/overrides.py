"""The keys a command's ``key=value`` overrides may name (issue 34, item 6), checked against
the typed schemas of :mod:`adaspark.schema` before the config is composed: an unknown key, or a
known key at the wrong level, is refused with the key it probably meant."""

from __future__ import annotations

from dataclasses import fields

from omegaconf import OmegaConf

from adaspark.config import ConfigError
from adaspark.schema import (
    ArmConfig,
    DrafterConfig,
    EngineOptions,
    GenerateOptions,
    TablesOptions,
    TargetConfig,
)

# ---------------------------------------------------------------------------------------------
# The keys a command's overrides may name (issue 34, item 6)


#: The top-level keys (beyond the config groups) each command reads; a known key another
#: command reads is refused with the key it probably meant (``adaspark run exact=true``:
#: ``run.exact``). ``config`` prints the whole config and takes every key.
COMMAND_KEYS: dict[str, tuple[type, ...] | None] = {
    "generate": (GenerateOptions,),
    "serve": (EngineOptions,),
    "replay": (EngineOptions,),
    "run": (),
    "config": None,
}
#: Other top-level keys a command reads: a run its servers' threads, a replay ``json``.
EXTRA_TOP_KEYS: dict[str, tuple[str, ...]] = {"run": ("threads",), "replay": ("json",)}


def _top_keys(command: str) -> set[str]:
    """The top-level option keys ``command`` reads (None in :data:`COMMAND_KEYS`: all)."""
    classes = COMMAND_KEYS.get(command)
    if classes is None:
        return {f.name for c in (GenerateOptions, EngineOptions) for f in fields(c)}
    keys = {f.name for c in classes for f in fields(c)}
    return keys | set(EXTRA_TOP_KEYS.get(command, ()))


def _group_schemas() -> dict[str, type]:
    """The config groups whose keys a schema names (``arm``: every rule's keywords)."""
    from adaspark.decoding.sampling import SamplingParams
    from adaspark.runs.cluster import LauncherSettings
    from adaspark.runs.settings import RunSettings

    return {"target": TargetConfig, "drafter": DrafterConfig, "run": RunSettings,
            "launcher": LauncherSettings, "tables": TablesOptions, "arm": ArmConfig,
            "sampling": SamplingParams}


def _group_fields(group: str) -> set[str]:
    """The keys the group ``group`` may hold (an arm: the common keys and every rule's)."""
    cls = _group_schemas()[group]
    names = {f.name for f in fields(cls)}
    if group == "arm":
        from adaspark.rules.base import WIDTH_RULES, rule_class

        names |= {f.name for r in WIDTH_RULES.names() for f in fields(rule_class(r).Options)}
    return names


def _known_paths() -> list[str]:
    """Every key path a schema names, dotted (for the key an override probably meant)."""
    from adaspark.rules.adaspark.config import _SECTIONS

    out = sorted(f.name for c in (GenerateOptions, EngineOptions) for f in fields(c))
    out += sorted(f"{g}.{k}" for g in _group_schemas() for k in _group_fields(g))
    out += sorted(f"scheduler.{s}.{f.name}" for s, c in _SECTIONS.items() for f in fields(c))
    return list(dict.fromkeys(out))


def _config_top_keys() -> set[str]:
    """The top-level keys a composed config may hold: the config groups (folders of
    ``conf/``), the mappings arms and drafters are composed into, and the keys of
    ``conf/config.yaml`` and of every preset."""
    from adaspark import paths

    conf = paths.conf_dir()
    keys = {d.name for d in conf.iterdir() if d.is_dir()} | {"arms", "drafters", "hydra"}
    for f in [conf / "config.yaml", *sorted((conf / "preset").glob("*.yaml"))]:
        keys |= {str(k) for k in (OmegaConf.load(f) or {}) if k != "defaults"}
    return keys


def _probably(key: str, candidates: list[str]) -> str | None:
    """The key of ``candidates`` that ``key`` probably meant: the one with the same last
    part, else the closest spelling."""
    import difflib

    leaf = key.rsplit(".", 1)[-1]
    same = [c for c in candidates if c.rsplit(".", 1)[-1] == leaf and c != key]
    if same:
        return same[0]
    close = difflib.get_close_matches(key, candidates, n=1, cutoff=0.6)
    if close:
        return close[0]
    leaves = {c.rsplit(".", 1)[-1]: c for c in candidates}
    close = difflib.get_close_matches(leaf, list(leaves), n=1, cutoff=0.75)
    return leaves[close[0]] if close else None


def _meant(key: str, value: str, candidates: list[str]) -> str:
    best = _probably(key, candidates)
    return f"; did you mean {best}={value}?" if best else ""


def _nested_unknown(path: list[str]) -> bool:
    """Whether the dotted ``path`` (below a config group) names a key no schema knows."""
    from adaspark.rules.adaspark.config import _SECTIONS

    head, rest = path[0], path[1:]
    if head in ("arms", "drafters"):  # arms.<name>.<key>, drafters.<name>.<key>
        head, rest = ("arm" if head == "arms" else "drafter"), rest[1:]
    if not rest:
        return False
    if head == "scheduler":
        section = _SECTIONS.get(rest[0])
        return section is None or (len(rest) > 1
                                   and rest[1] not in {f.name for f in fields(section)})
    if head not in _group_schemas():
        return False
    return rest[0] not in _group_fields(head)  # deeper keys belong to a mapping field


def check_overrides(args: list[str], command: str) -> None:
    """Refuse an override whose key no part of the composed config's schema knows (``+foo=1``,
    ``run.cpa=16``), or a known top-level key ``command`` does not read (``adaspark run
    exact=true``, which only ``run.exact`` sets), naming the key it probably meant. The config
    groups (``target=``, ``drafter=``, ``arm=``, ...) are taken by every command."""
    top = _config_top_keys()
    reads = _top_keys(command)
    paths = _known_paths()
    readable = [p for p in paths if "." in p or p in reads]
    for a in args:
        key, eq, value = a.partition("=")
        if not eq:
            continue  # compose says it is not key=value
        key = key.lstrip("+~")
        if "@" in key:  # a group picked into a package (+arm@arms.x=x)
            continue
        parts = key.split(".")
        head = parts[0]
        if head not in top:
            raise ConfigError(f"{key} is not a key of the config (conf/config.yaml and its "
                              f"groups){_meant(key, value, readable)}")
        if len(parts) > 1 and _nested_unknown(parts):
            raise ConfigError(f"{key} is not a key of the {head} group"
                              f"{_meant(key, value, readable)}")
        if len(parts) == 1 and head in _top_keys("config") and head not in reads:
            takes = ", ".join(sorted(reads)) or "none"
            raise ConfigError(f"adaspark {command} does not read the top-level key {key} "
                              f"({a} would change nothing){_meant(key, value, readable)} "
                              f"(its top-level keys: {takes}; and the config groups: run.cap, "
                              "target=, arm=, ...)")
