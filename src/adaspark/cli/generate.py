"""``adaspark generate``: one prompt, one arm, and optionally a token-for-token check against
plain greedy decoding (§3.5; HARNESS "Near tie")."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from omegaconf import DictConfig

from adaspark import arms
from adaspark.config import ConfigError, to_dict
from adaspark.decoding.engine import NEAR_TIE_GAP, Model
from adaspark.decoding.loop import RequestSession, generate
from adaspark.decoding.round import room_left
from adaspark.decoding.round_trace import TraceRow
from adaspark.decoding.sampling import SamplingParams
from adaspark.provenance import run_metadata
from adaspark.rules.base import make_rule
from adaspark.schema import ArmConfig
from adaspark.serving import chat

#: Exact mode's guarantee holds below this many KV cells (HARNESS facts).
EXACT_CELLS = 512


@dataclass
class Difference:
    position: int  # index into the generated tokens
    gap: float  # plain decode's top-2 logit gap at that row
    allowed: bool  # a near tie outside exact mode's guarantee


def prompt_tokens(model: Model, cfg: DictConfig) -> list[int]:
    """The prompt as token ids: rendered with the model's chat template unless ``chat=false``."""
    text = str(cfg.prompt)
    if cfg.chat:
        template = model.chat_template()
        if template is None:
            raise ValueError(f"{model.path.name} has no chat template; pass chat=false")
        messages = ([{"role": "system", "content": str(cfg.system)}] if cfg.system else []) + [
            {"role": "user", "content": text}]
        text = chat.render(template, messages)
        return model.tokenize(text, add_special=model.add_bos, parse_special=True)
    return model.tokenize(text, add_special=True, parse_special=False)


def system_used(model: Model, cfg: DictConfig) -> str | None:
    """The system prompt the prompt was rendered with: ``system=`` when it is not empty, else
    the chat template's own default (None: none, or ``chat=false``)."""
    if not cfg.chat:
        return None
    if cfg.system:
        return str(cfg.system)
    template = model.chat_template()
    return None if template is None else chat.default_system_prompt(template)


def compare_greedy(spec: list[int], greedy: RequestSession, *, exact: bool,
                   prompt_len: int) -> list[Difference]:
    """Differences between a speculative stream and plain greedy decoding. Once the streams part
    the contexts differ, so only the first difference is comparable; it is reported with its gap.
    """
    for i, (a, b) in enumerate(zip(spec, greedy.tokens, strict=False)):
        if a != b:
            gap = greedy.gaps[i] if i < len(greedy.gaps) else float("nan")
            guaranteed = exact and prompt_len + i < EXACT_CELLS
            return [Difference(i, gap, (not guaranteed) and gap < NEAR_TIE_GAP)]
    if len(spec) != len(greedy.tokens):
        i = min(len(spec), len(greedy.tokens))
        return [Difference(i, float("nan"), False)]
    return []


def check_fits(n_prompt: int, n_ctx: int, key: str) -> None:
    """Refuse, before decoding, a prompt that leaves no room for one generated token."""
    if room_left(n_ctx, n_prompt) < 1:
        raise ConfigError(f"the prompt has {n_prompt} tokens and does not fit {key}={n_ctx} "
                          "(with room for one generated token): raise "
                          f"{key} or shorten the prompt")


def run_generate(cfg: DictConfig, arm: ArmConfig,
                 sampling: SamplingParams | None = None) -> dict[str, Any]:
    """Decode ``cfg.prompt`` with ``arm`` (checked by the command's config check), greedily or
    with ``sampling`` (the ``sampling`` group; ``check_greedy`` then compares with plain
    sampling under the same seed, which every arm of our engine emits in exact mode)."""
    sampling = None if sampling is None or sampling.greedy else sampling
    from adaspark.decoding.backend import build_backend, default_exact

    exact = default_exact(build_backend()) if cfg.exact is None else bool(cfg.exact)
    parts = arms.build(cfg, arm, exact=exact)
    try:
        target = parts.target
        prompt = prompt_tokens(target, cfg)
        check_fits(len(prompt), target.n_ctx, "target.n_ctx")
        if parts.drafter is not None:
            check_fits(len(prompt), int(cfg.drafter.n_ctx), "drafter.n_ctx")
        gen = generate(target, prompt, int(cfg.max_tokens), parts.rule, parts.drafter,
                       parts.block_positions, want_trace=bool(cfg.get("trace", False)),
                       sampling=sampling)
        text = target.detokenize([t for t in gen.tokens if not target.is_eog(t)])
        out: dict[str, Any] = {
            "text": text,
            "arm": str(cfg.arm.name),
            "exact": exact,
            "prompt": str(cfg.prompt),  # exactly as received (free text is verbatim)
            "system": None if cfg.system is None else str(cfg.system),
            "system_used": system_used(target, cfg),
            "prompt_tokens": len(prompt),
            "tokens": len(gen.tokens),
            "rounds": gen.rounds,
            "drafted": gen.drafted,
            "accepted": gen.accepted,
            "decode_s": gen.decode_s,
            "tokens_per_s": gen.tokens_per_s,
            "stop": gen.stop,
            "widths": {str(k): v for k, v in sorted(gen.width_hist.items())},
            "sampling": None if sampling is None else asdict(sampling),
        }
        if gen.records:  # trace=true: each round's anchor, picks, rows and accepted drafts
            out["trace"] = [asdict(TraceRow.of(r)) for r in gen.records]
        if cfg.check_greedy:
            greedy = generate(target, prompt, int(cfg.max_tokens), make_rule("ar"),
                              want_gaps=True, sampling=sampling)
            diffs = compare_greedy(gen.tokens, greedy, exact=exact, prompt_len=len(prompt))
            out["greedy_match"] = all(d.allowed for d in diffs)
            out["differences"] = [d.__dict__ for d in diffs]
        out["meta"] = run_metadata(to_dict(cfg), parts.models)
        return out
    finally:
        parts.close()
