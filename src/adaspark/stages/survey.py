"""Stage ``survey``: verify time against width at three contexts (§3.2; Table 1, Figure 3).

    python -m adaspark.stages.survey --params params.yaml --out runs/survey

The paper "ran DSpark decoding with the tree width pinned at each n [...] at three contexts
(443, 1,596 and 8,444 tokens) in two passes of opposite order, on prompts that continue public
text, and took the median verify time over the rounds that verified exactly n rows, after the
first two". As ``benchmarks/verify_cost.py`` does, each prompt is prefilled once, the drafter
drafts one block of ``block_positions`` positions (top-K each), the tree is filled best-first by
the head-based estimate to each width, and each width's tree is verified ``rounds`` times in a
row per pass (the verify discarded each time, so the context stays put); the first
``dropped_rounds`` of every run are dropped. Passes alternate the width order (ascending, then
descending). Fast kernels (HARNESS "Kernels").

Reads ``target``, ``drafter``, ``threads`` and the ``survey`` section of the params file:

``contexts``            the paper's three contexts, scaled down together when the window of the
                        target or drafter cannot hold the largest (the tiny model's 8,192)
``prompts_per_context`` prompts per context (the default preset 1, preset=paper 3)
``widths``              rows per verify (anchor included); a width over the engine's widest
                        verify or the block's reach is left out and named in ``survey.json``
``passes``, ``rounds``, ``dropped_rounds``, ``block_positions``, ``testset``

Writes ``survey.parquet`` (one row per verify, :mod:`adaspark.replay.survey` columns) and
``survey.json`` (settings, prompts, medians, machine and provenance).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

import pandas as pd
from omegaconf import OmegaConf

from adaspark.replay.survey import SURVEY_COLUMNS, median_table
from adaspark.stages import load_params, stage_main
from adaspark.stages.measured import (
    model_pair,
    prompts_by_context,
    section_values,
    write_outputs,
)


@dataclass(frozen=True)
class SurveySettings:
    """The ``survey`` params section (see the module docstring)."""

    contexts: tuple[int, ...] = (443, 1596, 8444)
    prompts_per_context: int = 1
    widths: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
    passes: int = 2
    rounds: int = 5
    dropped_rounds: int = 2
    block_positions: int = 8
    testset: str = "runs/testset"

    @classmethod
    def from_section(cls, section: dict[str, Any] | None) -> SurveySettings:
        s = cls(**section_values(cls, section, "survey"))
        if s.rounds <= s.dropped_rounds:
            raise ValueError(f"survey.rounds ({s.rounds}) must exceed survey.dropped_rounds "
                             f"({s.dropped_rounds}): nothing would be kept")
        if s.passes < 1 or s.prompts_per_context < 1 or not s.widths:
            raise ValueError("survey needs at least one pass, one prompt and one width")
        return s


def pass_orders(widths: Sequence[int], passes: int) -> list[list[int]]:
    """The width order of each pass: ascending, then descending, alternating (§3.2)."""
    up = sorted(set(int(w) for w in widths))
    return [up if p % 2 == 0 else up[::-1] for p in range(passes)]


class VerifyTarget(Protocol):
    """What the survey needs of the target (:class:`adaspark.decoding.engine.Target`)."""

    committed: list[int]
    max_rows: int

    def prefill(self, tokens: list[int]) -> object: ...
    def verify(self, tree: Any) -> Any: ...
    def discard(self) -> None: ...


def survey_rows(
    target: VerifyTarget,
    trees_for: Callable[[list[int]], dict[int, Any]],
    prompts: Sequence[tuple[str, int, int, list[int]]],
    settings: SurveySettings,
    log: Callable[[str], None] = lambda _: None,
) -> list[dict[str, Any]]:
    """Measure every (prompt, pass, width, round). ``prompts`` holds ``(name, context,
    context_paper, token ids)``; ``trees_for(committed)`` gives the tree of each width for the
    prompt just prefilled."""
    rows: list[dict[str, Any]] = []
    for name, ctx, ctx_paper, ids in prompts:
        target.prefill(list(ids))
        trees = trees_for(target.committed)
        for p, order in enumerate(pass_orders([w for w in settings.widths if w in trees],
                                              settings.passes)):
            for w in order:
                for rnd in range(settings.rounds):
                    res = target.verify(trees[w])
                    target.discard()
                    rows.append({"context": ctx, "context_paper": ctx_paper, "prompt": name,
                                 "pass_index": p, "width": w, "round": rnd,
                                 "kept": rnd >= settings.dropped_rounds,
                                 "verify_ms": 1e3 * float(res.verify_s)})
        here = pd.DataFrame([r for r in rows if r["prompt"] == name])
        kept = here[here["kept"]].groupby("width")["verify_ms"].median()
        log(f"survey: {name} ({ctx:,} tokens): "
            + " ".join(f"{w}:{m:.0f}ms" for w, m in kept.items()))
    return rows


def run_survey(params: dict[str, Any], out: Path, log: Callable[[str], None] = print) -> Path:
    """Load the models, make the prompts, measure, and write ``survey.parquet`` and
    ``survey.json`` under ``out``."""
    from adaspark.decoding.candidates import from_block
    from adaspark.decoding.tree import best_first_order, prefix_tree

    settings = SurveySettings.from_section(params.get("survey"))
    cfg = OmegaConf.create(params)
    with model_pair(cfg) as pair:
        target, drafter = pair.target, pair.drafter
        by_ctx, paper_of = prompts_by_context(pair, cfg, settings.testset,
                                              list(settings.contexts))
        prompts = [(p.name, p.n_tokens, paper_of[p.n_tokens], list(p.token_ids))
                   for ctx in sorted(by_ctx) for p in by_ctx[ctx][: settings.prompts_per_context]]
        reach = 1 + settings.block_positions * int(cfg.drafter.candidates_per_position)
        widths = [w for w in settings.widths if w <= min(target.max_rows, reach)]
        left_out = sorted(set(settings.widths) - set(widths))
        if left_out:
            log(f"survey: widths {left_out} exceed the widest verify ({target.max_rows}) or the "
                f"block's reach ({reach}) and are left out")
        run_settings = SurveySettings(**{**asdict(settings), "widths": tuple(widths)})

        def trees_for(committed: list[int]) -> dict[int, Any]:
            drafter.begin(list(committed))
            block = drafter.draft(list(committed), settings.block_positions)
            cands = from_block(block)
            order, _ = best_first_order(cands.parent, cands.head_q)
            return {w: prefix_tree(committed[-1], cands.tokens, cands.parent, order, w,
                                   max_rows=target.max_rows)[0] for w in widths}

        rows = survey_rows(target, trees_for, prompts, run_settings, log)
        frame = pd.DataFrame(rows, columns=list(SURVEY_COLUMNS))
        med = median_table(frame)
        meta = {
            "settings": asdict(settings), "widths_measured": widths, "widths_left_out": left_out,
            "prompts": [{"name": n, "context": c, "context_paper": cp}
                        for n, c, cp, _ in prompts],
            "median_ms": {str(w): {str(c): float(v) for c, v in row.items()}
                          for w, row in med.iterrows()},
        }
        return write_outputs(out, "survey", frame, meta, pair, params)


@stage_main("survey")
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--out", default="runs/survey", type=Path)
    a = ap.parse_args(argv)
    params = load_params(a.params)
    try:
        path = run_survey(params, a.out)
    except (FileNotFoundError, ValueError, RuntimeError) as e:
        print(f"survey: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    print(f"survey: wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
