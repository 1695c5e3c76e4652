"""``adaspark dspark-file``: write a DSpark drafter file for tests (random or oracle weights;
:mod:`adaspark.decoding.drafter.dspark_file` states the constructions)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from adaspark.config import ConfigError
from adaspark.decoding.drafter.dspark_file import (
    KINDS,
    MAX_BLOCK_SIZE,
    DrafterShape,
    check_dspark_file,
    write_oracle,
    write_random,
)

# ---------------------------------------------------------------------------------------------
# The command


OWN_KEYS = ("kind", "out", "seed", "block", "layers", "n_layers", "rank", "corrupt_at",
            "confidence", "mask", "n_text")


def _int_list(key: str, v: str) -> tuple[int, ...]:
    try:
        got = tuple(int(x) for x in v.replace("[", "").replace("]", "").split(",") if x.strip())
    except ValueError:
        got = ()
    if not got:
        raise ConfigError(f"{key}={v!r}: give integers separated by commas, e.g. "
                          f"{key}=2,15,28 (leave {key}= out for the default)")
    return got


def _int(key: str, v: str, *, min: int | None = None, max: int | None = None) -> int:
    """``v`` as an integer within ``min``..``max`` (:func:`adaspark.checks.check_value`)."""
    from adaspark.checks import check_value

    try:
        n = int(v)
    except ValueError:
        raise ConfigError(f"{key}={v!r} is not an integer") from None
    meta = {k: b for k, b in (("min", min), ("max", max)) if b is not None}
    return int(check_value(key, n, int, meta))


def cli_main(args: list[str]) -> int:
    """``adaspark dspark-file kind=random|oracle out=FILE [target=tiny] ...``: write a DSpark
    file for the composed target. Keys: ``seed`` (random), ``block`` (8), ``layers`` (e.g.
    2,15,28), ``n_layers`` (1), ``rank`` (random: 32; oracle: the text's need), ``confidence``
    (true), ``mask``; the oracle reads ``prompt=``/``system=``/``chat=`` as ``generate`` does,
    decodes ``n_text`` tokens (default ``max_tokens`` + block) greedily with our engine and
    takes their successors; ``corrupt_at=i`` corrupts transition ``i``. Prints one JSON line."""
    from adaspark import model_files
    from adaspark.cli.generate import prompt_tokens
    from adaspark.config import compose, split_words
    from adaspark.config_check import validate
    from adaspark.overrides import check_overrides

    rest, own = split_words(args, OWN_KEYS)
    kind = own.get("kind", "")
    if kind not in KINDS:
        raise ConfigError(f"kind={kind!r}: dspark-file writes kind=random or kind=oracle")
    if not own.get("out"):
        raise ConfigError("out= is missing: name the GGUF file to write, e.g. out=dspark.gguf")
    if Path(own["out"]).is_dir():
        raise ConfigError(f"out={own['out']} is a directory: name the GGUF file to write, e.g. "
                          f"out={Path(own['out']) / 'dspark.gguf'}")
    conf = own.get("confidence", "true").lower()
    if conf not in ("true", "false"):
        raise ConfigError(f"confidence={conf!r}: true or false")
    shape = DrafterShape(
        block_size=_int("block", own.get("block", "8"), min=1, max=MAX_BLOCK_SIZE),
        target_layers=_int_list("layers", own["layers"]) if "layers" in own else None,
        n_layers=_int("n_layers", own.get("n_layers", "1"), min=1),
        markov_rank=_int("rank", own.get("rank", "32"), min=1),
        confidence_head=conf == "true",
        mask_token_id=_int("mask", own["mask"]) if own.get("mask") else None)
    check_overrides(rest, "generate")  # the target, the prompt keys and max_tokens
    cfg = compose(rest)
    validate(cfg, command="generate")
    tpath, _ = model_files.resolve(cfg.target)
    out = Path(own["out"])
    summary: dict[str, Any] = {"kind": kind, "out": str(out), "target": str(tpath)}
    if kind == "random":
        write_random(tpath, out, seed=_int("seed", own.get("seed", "0")), shape=shape)
    else:
        from adaspark.decoding.engine import Target

        n_text = _int("n_text", own.get("n_text", str(int(cfg.max_tokens) + shape.block_size)))
        target = Target(tpath, int(cfg.target.n_ctx), exact=True)
        try:
            prompt = prompt_tokens(target, cfg)
            text = greedy_continuation(target, prompt, n_text)
        finally:
            target.close()
        _, table = write_oracle(
            tpath, out, text, shape=shape,
            corrupt_at=_int("corrupt_at", own["corrupt_at"]) if own.get("corrupt_at") else None,
            rank=_int("rank", own["rank"], min=1) if own.get("rank") else None)
        summary |= {"prompt_tokens": len(prompt), "text": list(table.text),
                    "conflicts": list(table.conflicts), "corrupt_at": table.corrupt_at,
                    "fallback": table.fallback}
    info = check_dspark_file(out, tpath)
    summary |= {"target_layers": list(info.target_layers), "block_size": info.block_size,
                "markov_rank": info.markov_rank, "bytes": os.path.getsize(out)}
    print(json.dumps(summary), file=sys.stdout)
    return 0


# ---------------------------------------------------------------------------------------------
# The greedy text an oracle is built from


def greedy_continuation(target: Any, prompt: Sequence[int], n_tokens: int, *,
                        n_ctx: int = 2048) -> list[int]:
    """The target's greedy continuation of ``prompt`` by our engine (the ``ar`` rule):
    ``target`` is a loaded :class:`~adaspark.decoding.engine.Target` (used as it is) or a GGUF
    path (loaded in exact mode and closed again)."""
    from adaspark.decoding.engine import Target
    from adaspark.decoding.loop import generate
    from adaspark.rules.base import make_rule

    own = not isinstance(target, Target)
    t = Target(target, n_ctx, exact=True) if own else target
    try:
        return list(generate(t, list(prompt), n_tokens, make_rule("ar")).tokens)
    finally:
        if own:
            t.close()
