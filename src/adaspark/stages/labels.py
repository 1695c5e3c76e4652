"""Stage ``labels`` (issue 14, "Labels"): every label a replayed arm can need, over the labelled
run's replies, made once on the engine in exact mode and cached.

    python -m adaspark.stages.labels --params params.yaml --runs runs/labelled --out runs/labels

For each drafter the ``replay.arms`` use (each arm whose drafter has a file), the replies of
``replay.replies_of`` in ``--runs`` are labelled (:mod:`adaspark.replay.labels`) into
``OUT/<drafter>-<sha8>/``: every position of each reply, a full block past its end, and as deep
again as the deepest tree a rule can build past an anchor (the n-gram chains'
``scheduler.ngram_fill.chain_depth_limit``), so the replay stage never needs the engine. Labels
are written per prompt as each is done: a killed stage resumes at the next prompt. Labels made
with another target, drafter, build or decoding code are deleted and made again (as DVC reruns
a stage whose inputs changed), never mixed with these. ``OUT/summary.json`` gives the time
spent and the positions labelled per drafter, and the time per position by part (the target's
share of the pass, this drafter's blocks: ``target_s_per_position``, ``drafter_s_per_position``,
for the labels this run made). Drafters that share the target are labelled in one
pass of it (:func:`adaspark.replay.command.label_jointly`: one prefill and one verify per position
for all of them; ``labelled_with`` names the others, and each gets the pass's whole time).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from adaspark import io
from adaspark.stages import stage_main


def drafter_arms(cfg: Any, arms: list[str]) -> tuple[dict[str, str], dict[str, str]]:
    """One arm per drafter the ``arms`` use (by drafter name, the first arm naming it), and the
    arms left out with why (no drafter file; no drafter at all needs no labels of a block)."""
    from adaspark.arms import make_arm_rule
    from adaspark.runs.settings import ArmEntry, arm_config, no_drafter_file
    from adaspark.schema import arm_view, scheduler_mapping

    by_drafter: dict[str, str] = {}
    skipped: dict[str, str] = {}
    for name in arms:
        arm = arm_config(cfg, ArmEntry.parse(name))
        why = no_drafter_file(cfg, arm)
        if why:
            skipped[name] = why
            continue
        view = arm_view(cfg, arm)
        uses = make_arm_rule(arm, scheduler_mapping(view)).uses_drafter
        key = str(view.drafter.name) if uses else "no-drafter"
        by_drafter.setdefault(key, name)
    return by_drafter, skipped


def label_depth(params: dict[str, Any]) -> int:
    """Positions labelled past a reply's block (:func:`adaspark.replay.labels.label_depth`)."""
    from adaspark.replay.labels import label_depth as depth_of

    return depth_of(params.get("scheduler"))


def fig5_label_contexts(contexts: list[int], chosen: list[int] | None) -> tuple[list[int],
                                                                              list[int]]:
    """Figure 5's contexts to label and those left out: ``chosen`` of ``contexts`` in their
    order (``replay.fig5_contexts``; empty or None: every one)."""
    kept = [c for c in contexts if not chosen or c in chosen]
    return kept, [c for c in contexts if c not in kept]


def label_fig5(cfg: Any, params: dict[str, Any], out: Path, say: Any,
               contexts: list[int] | None = None) -> dict[str, Any]:
    """Figure 5's prompts (the fig5 stage's: ``fig5.contexts``, ``prompts_per_context``; only
    ``contexts`` of them when given), each labelled for ``fig5.max_tokens`` tokens and a tree's
    depth past them with the pinned pair's drafter; their tokens go to
    ``OUT/fig5_prompts.json`` for the replay stage, with the contexts left out."""
    from adaspark.replay.command import Labeller
    from adaspark.replay.settings import FIG5_PROMPTS
    from adaspark.schema import check_arm
    from adaspark.stages.fig5 import Fig5Settings, pinned_arm
    from adaspark.stages.measured import prompts_by_context
    from adaspark.testset.microbench import RESERVE_TOKENS

    f5 = Fig5Settings.from_section(params.get("fig5"))
    arm = check_arm(pinned_arm(params, f5.widths[0]), "fig5's pinned arm")
    wanted, left_out = fig5_label_contexts(list(f5.contexts), contexts)
    labeller = Labeller(cfg, arm, out, restart=True, log=lambda m: say(f"[fig5] {m}"))
    try:
        by_ctx, paper_of = prompts_by_context(
            labeller._parts(label=False), cfg, f5.testset, list(f5.contexts),
            reserve=max(RESERVE_TOKENS, f5.max_tokens + 16))
        prompts = [{"context": ctx, "context_paper": paper_of[ctx], "prompt": p.name,
                    "tokens": [int(t) for t in p.token_ids]}
                   for ctx in sorted(by_ctx) if paper_of[ctx] in wanted
                   for p in by_ctx[ctx][: f5.prompts_per_context]]
        n = f5.max_tokens + labeller.block_positions + label_depth(params)
        say(f"labels: Figure 5's {len(prompts)} prompts, {n} positions each"
            + (f" (contexts {left_out} left out: replay.fig5_contexts)" if left_out else ""))
        got = labeller.labels([(p["tokens"], n) for p in prompts])
    finally:
        labeller.close()
    io.write_json(out / FIG5_PROMPTS, {"max_tokens": f5.max_tokens, "widths": list(f5.widths),
                                       "prompts": prompts, "contexts_left_out": left_out})
    return {"arm": str(arm.name), "directory": str(labeller.store.dir), "prompts": len(got),
            "positions": sum(len(lab.next) for lab in got.values()),
            "reply_tokens": f5.max_tokens * len(prompts),
            "labelling_s_now": round(labeller.spent, 2), "identity": labeller.identity}


def label_replies(cfg: Any, traces: list[Any], arms: list[str], out: Path, depth: int,
                  say: Any, *, source: str, sampling: dict[str, Any] | None = None,
                  seeds: dict[str, int] | None = None) -> tuple[dict[str, Any], dict[str, str]]:
    """Label ``traces`` (the replies of ``source``) under ``out`` for every drafter ``arms``
    use (:func:`drafter_arms`), drafters sharing the target in one pass of it: per drafter,
    what was made (positions, time by part, its directory), and the arms left out with why.
    ``sampling`` and ``seeds``: a sampled run's (:func:`adaspark.replay.command.traces_sampling`),
    each reply labelled with its own seed's keyed draws."""
    from adaspark.replay.command import Labeller, joint_groups, label_jointly
    from adaspark.replay.labels import prompt_key
    from adaspark.runs.settings import ArmEntry, arm_config

    by_drafter, skipped = drafter_arms(cfg, arms)
    done: dict[str, Any] = {}
    labellers = {drafter: Labeller(cfg, arm_config(cfg, ArmEntry.parse(name)), out,
                                   restart=True, log=lambda m, d=drafter: say(f"[{d}] {m}"),
                                   sampling=sampling)
                 for drafter, name in by_drafter.items()}
    by_labeller = {id(lab): d for d, lab in labellers.items()}
    try:
        for group in joint_groups(list(labellers.values())):
            names = [by_labeller[id(lab)] for lab in group]
            tag = "+".join(names)
            say(f"labels: drafters {', '.join(names)} in one pass of the target (each for its "
                f"arm and every arm sharing it), {len(traces)} replies of {source}")
            got = label_jointly(group, [[(t.prompt, lab.positions(t, depth)) for t in traces]
                                        for lab in group],
                                log=lambda m, g=tag: say(f"[{g}] {m}"),
                                texts={prompt_key(t.prompt): t.tokens for t in traces},
                                seeds=seeds)
            for lab, name, labs in zip(group, names, got, strict=True):
                made = sum(len(x.next) for x in labs.values())
                parts = {f"{k}_s_per_position": round(v / made, 4)
                         for k, v in lab.spent_by_part.items() if made}
                done[name] = {**parts,
                    "arm": by_drafter[name], "directory": str(lab.store.dir),
                    "prompts": len(labs), "positions": made,
                    "reply_tokens": sum(len(t.tokens) for t in traces),
                    "labelled_with": [n for n in names if n != name],
                    "labelling_s_now": round(lab.spent, 2), "identity": lab.identity}
    finally:
        for lab in labellers.values():
            lab.close()
    return done, skipped


@stage_main("labels")
def main(argv: list[str] | None = None) -> int:
    from adaspark.decoding.round_trace import read_traces
    from adaspark.replay.command import arm_trace_dir
    from adaspark.replay.settings import read_replay_params

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--runs", default="runs/labelled", type=Path)
    ap.add_argument("--out", default="runs/labels", type=Path)
    a = ap.parse_args(argv)
    cfg, params, settings = read_replay_params(a.params)
    traces = read_traces(arm_trace_dir(a.runs, settings.replies_of))
    depth = label_depth(params)

    def say(m: str) -> None:
        print(m, file=sys.stderr, flush=True)

    t_all = time.perf_counter()
    done, skipped = label_replies(cfg, traces, settings.arms, a.out, depth, say,
                                  source=settings.replies_of)
    if settings.fig5_prompts:
        done["fig5"] = label_fig5(cfg, params, a.out, say, settings.fig5_contexts)
    summary = {"replies_of": settings.replies_of, "subset": settings.subset,
               "cap": settings.cap, "depth": depth, "drafters": done,
               "skipped_arms": skipped, "stage_s": round(time.perf_counter() - t_all, 2)}
    prev = a.out / "summary.json"
    if prev.is_file():  # the time of the run that made them, kept across cached reruns
        old = json.loads(prev.read_text(encoding="utf-8"))
        for k, v in (old or {}).get("drafters", {}).items():
            if k in done and done[k]["labelling_s_now"] == 0.0:
                done[k]["labelling_s"] = v.get("labelling_s", v.get("labelling_s_now"))
    for v in done.values():
        v.setdefault("labelling_s", v["labelling_s_now"])
    io.write_json(prev, summary)
    print(f"labels: {len(traces)} replies of {settings.replies_of} "
          f"({settings.subset}, cap {settings.cap}); "
          + "; ".join(f"{k}: {v['positions']} positions, {v['labelling_s']:.0f} s labelling"
                      + (f" (per position: target {v['target_s_per_position']:.3f} s, this "
                         f"drafter {v['drafter_s_per_position']:.3f} s)"
                         if "drafter_s_per_position" in v else "")
                      for k, v in done.items())
          + (f"; not labelled: {', '.join(skipped)} (no drafter file)" if skipped else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
