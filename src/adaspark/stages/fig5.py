"""Stage ``fig5``: fixed 8- and 16-row runs at three contexts (§3.4, Figure 5).

    python -m adaspark.stages.fig5 --params params.yaml --out runs/fig5

The paper: "runs of 256 tokens at a fixed width of 8 and of 16 rows (acceptance model on, n-gram
candidates off)" at three contexts (443, 1,596 and 8,444 tokens), three prompts per context. Ours
runs the scheduler's pinned arms (``arms.adaspark-w8`` and ``arms.adaspark-w16`` of the params, the
fitted acceptance model learning from empty in each run) with ``ngram`` set false, on our engine
with fast kernels, each prompt decoded by the round loop (:func:`adaspark.decoding.loop.generate`)
without the HTTP layer: Figure 5 compares time and tokens per round, not client-clock speeds.

Reads ``target``, ``drafter``, ``threads``, ``scheduler``, the two arms and the ``fig5``
section: ``contexts``, ``prompts_per_context`` (the default preset 1, preset=paper 3),
``max_tokens``, ``widths`` and ``testset``. Writes ``fig5.parquet`` (one row per run,
:data:`adaspark.analysis.figures.fig5.FIG5_COLUMNS` plus ``width_hist``) and ``fig5.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from omegaconf import OmegaConf

from adaspark.stages import load_params, stage_main
from adaspark.stages.measured import (
    model_pair,
    prompts_by_context,
    section_values,
    write_outputs,
)


@dataclass(frozen=True)
class Fig5Settings:
    """The ``fig5`` params section (see the module docstring)."""

    contexts: tuple[int, ...] = (443, 1596, 8444)
    prompts_per_context: int = 1
    max_tokens: int = 256
    widths: tuple[int, ...] = (8, 16)
    testset: str = "runs/testset"

    @classmethod
    def from_section(cls, section: dict[str, Any] | None) -> Fig5Settings:
        s = cls(**section_values(cls, section, "fig5"))
        if s.max_tokens < 2 or s.prompts_per_context < 1 or len(s.widths) < 2:
            raise ValueError("fig5 needs max_tokens >= 2, a prompt per context and two widths")
        return s


def pinned_arm(params: dict[str, Any], width: int) -> dict[str, Any]:
    """The scheduler's arm pinned at ``width`` rows with n-gram candidates off (and no store
    or round log): ``arms.adaspark-w<width>``, or ``arms.adaspark`` pinned when that is absent."""
    arms = params.get("arms") or {}
    name = f"adaspark-w{width}"
    if name in arms:
        arm = json.loads(json.dumps(arms[name]))
    elif "adaspark" in arms:
        arm = json.loads(json.dumps(arms["adaspark"]))
        arm["name"] = name
        _set_rule_key(arm, "width", width)
    else:
        raise KeyError(f"the params hold neither arms.{name} nor arms.adaspark")
    _set_rule_key(arm, "ngram", False)
    for k in ("store", "log_dir"):
        _set_rule_key(arm, k, None)
    return arm


def _set_rule_key(arm: dict[str, Any], key: str, value: Any) -> None:
    """Set a rule keyword where the arm keeps it (top level, or under ``rule:``)."""
    rule = arm.get("rule")
    if isinstance(rule, dict):
        rule[key] = value
    if not isinstance(rule, dict) or key in arm:
        arm[key] = value


def run_fig5(params: dict[str, Any], out: Path, log: Callable[[str], None] = print) -> Path:
    """Decode every (context, prompt, width) once; write ``fig5.parquet`` and ``fig5.json``."""
    from adaspark import arms as arm_parts
    from adaspark.analysis.figures.fig5 import FIG5_COLUMNS
    from adaspark.decoding.loop import generate
    from adaspark.schema import check_arm, scheduler_mapping
    from adaspark.testset.microbench import RESERVE_TOKENS

    settings = Fig5Settings.from_section(params.get("fig5"))
    cfg = OmegaConf.create(params)
    scheduler = scheduler_mapping(cfg)
    arms = {w: pinned_arm(params, w) for w in settings.widths}
    rows: list[dict[str, Any]] = []
    with model_pair(cfg) as pair:
        by_ctx, paper_of = prompts_by_context(
            pair, cfg, settings.testset, list(settings.contexts),
            reserve=max(RESERVE_TOKENS, settings.max_tokens + 16))
        for ctx in sorted(by_ctx):
            for p in by_ctx[ctx][: settings.prompts_per_context]:
                for w in settings.widths:
                    arm = arms[w]
                    rule = arm_parts.make_arm_rule(check_arm(arm, f"arms.{arm['name']}"),
                                                   scheduler)
                    gen = generate(pair.target, list(p.token_ids), settings.max_tokens, rule,
                                   pair.drafter, pair.block_positions)
                    rows.append({
                        "context": ctx, "context_paper": paper_of[ctx], "prompt": p.name,
                        "width": w, "arm": str(arm.get("name")), "rounds": gen.rounds,
                        "tokens": len(gen.tokens), "decode_s": gen.decode_s,
                        "width_hist": json.dumps({str(k): v for k, v in
                                                  sorted(gen.width_hist.items())}),
                    })
                    log(f"fig5: {p.name} width {w}: {len(gen.tokens)} tokens in {gen.rounds} "
                        f"rounds, {1e3 * gen.decode_s / max(gen.rounds, 1):.0f} ms/round")
        frame = pd.DataFrame(rows, columns=[*FIG5_COLUMNS, "width_hist"])
        meta = {"settings": asdict(settings), "arms": {str(w): a for w, a in arms.items()}}
        return write_outputs(out, "fig5", frame, meta, pair, params)


@stage_main("fig5")
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--out", default="runs/fig5", type=Path)
    a = ap.parse_args(argv)
    params = load_params(a.params)
    try:
        path = run_fig5(params, a.out)
    except (FileNotFoundError, KeyError, ValueError, RuntimeError) as e:
        print(f"fig5: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    print(f"fig5: wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
