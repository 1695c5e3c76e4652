"""Sampling at temperature > 0: llama.cpp's transforms, a random stream keyed by position, and
lossless verification of a tree (the paper's second open question, §7).

**The transforms** (:func:`transformed_probs`) are those of llama-server's default sampler chain
for the fields we take, in its order (``common_params_sampling.samplers`` of the vendored
llama.cpp: penalties, DRY, top-n-sigma, top-k, typical-p, top-p, min-p, XTC, temperature; the
ones left out are off at their defaults): ``top_k`` keeps the k highest logits (0 = off), ``top_p``
keeps the smallest prefix of the remaining tokens, by probability, whose mass reaches p (1 = off),
``min_p`` keeps the tokens whose probability is at least p times the highest (0 = off), and
``temperature`` divides the remaining logits before the final softmax. The request defaults are
llama-server's (:data:`LLAMA_SERVER_DEFAULTS`).

**The random stream** (:func:`keyed_uniform`) gives the uniform of text position ``i`` of a
request with seed ``s`` as a hash of ``(s, i)``, not as the next number of a generator: a
token's draw does not depend on how many draws came before it, so plain sampling and any tree
that reaches position ``i`` draw it with the same number.

**Verification of a tree** (:func:`verify_sampled`): every candidate our drafters propose is a
deterministic function of the context (a drafter's top-K picks and siblings, n-gram chains), so
the target-only rule is exact. At each accepted node the target's token ``y`` is drawn from its
transformed distribution at that row with the position's uniform; the child whose token is
``y`` is accepted, and when no child has it, ``y`` is the round's next token. Drawing ``y`` once
and matching it is the same distribution as trying the children one by one with recursive
rejection when the candidates carry no draft probability (a deterministic proposal puts all its
mass on one token, so the residual after rejecting it is the target's distribution without it:
SpecInfer's multi-step speculative sampling, Miao et al. 2024, §4, with point-mass proposals).
Each emitted token is thus the target's draw at its position, and with the keyed stream it is
the same token plain sampling emits there. A drafter that *samples* its candidates with draft
probabilities q would need SpecInfer's residual rule instead: accept a child x with probability
min(1, p(x)/q(x)), and on rejection draw from the normalised max(0, p - q) before trying the next
sibling; that is not built here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from adaspark.checks import check_group, spec
from adaspark.decoding.tree import Tree, walk_path


@dataclass(frozen=True)
class SamplingParams:
    """Sampling fields, the config's ``sampling`` group and a request's (the defaults are the
    group's, ``conf/config.yaml``: llama-server's, with temperature 0); ``temperature`` 0 is
    greedy decoding (the other fields are then unused). ``seed`` keys the random stream
    (:func:`keyed_uniform`)."""

    temperature: float = spec(min=0.0)
    top_k: int = spec(min=0)
    top_p: float = spec(gt=0.0, max=1.0)
    min_p: float = spec(min=0.0, max=1.0)
    seed: int = spec(min=0)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    @classmethod
    def check(cls, raw: Any, *, partial: bool = False) -> SamplingParams:
        """The config's ``sampling`` group checked (the one check of it: every command, the run
        loop and the server's process read it through here); ``partial`` lets a params file
        omit keys."""
        got = check_group(cls, raw, "sampling", extra="refuse", partial=partial)
        return got  # type: ignore[no-any-return]

_MASK64 = (1 << 64) - 1


def _mix64(x: int) -> int:
    """splitmix64's finaliser: a bijection of 64-bit integers that scatters every input bit."""
    x &= _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def keyed_uniform(seed: int, position: int) -> float:
    """The uniform in [0, 1) of text position ``position`` under ``seed``: 53 bits of a hash of
    the pair (independent of any draw made before it)."""
    h = _mix64(_mix64(seed + 0x9E3779B97F4A7C15) ^ (position * 0xD1B54A32D192ED03))
    return (h >> 11) * (1.0 / (1 << 53))


def _kept(logits: np.ndarray, params: SamplingParams) -> tuple[np.ndarray, np.ndarray]:
    """The token ids llama.cpp's chain keeps, highest logit first, and their logits (float64):
    top-k, top-p, then min-p."""
    logits = np.asarray(logits)
    k = logits.shape[0] if params.top_k <= 0 else min(params.top_k, logits.shape[0])
    if k < logits.shape[0]:  # the k highest without sorting the vocabulary
        ids = np.argpartition(-logits, k - 1)[:k]
        ids = ids[np.lexsort((ids, -logits[ids]))]
    else:
        ids = np.argsort(-logits, kind="stable")
    kept = logits[ids].astype(np.float64)
    if params.top_p < 1.0:
        p = np.exp(kept - kept[0])
        cum = np.cumsum(p / p.sum())
        n = int(np.searchsorted(cum, params.top_p, side="left")) + 1
        ids, kept = ids[:n], kept[:n]
    if params.min_p > 0.0:
        keep = kept >= kept[0] + math.log(params.min_p)
        ids, kept = ids[keep], kept[keep]
    return ids, kept


def _weights(logits: np.ndarray, params: SamplingParams) -> tuple[np.ndarray, np.ndarray]:
    """The kept token ids (:func:`_kept`) and their unnormalised probabilities after the
    temperature, the last transform of the chain."""
    ids, kept = _kept(logits, params)
    z = kept / params.temperature
    return ids, np.exp(z - z[0])


def transformed_probs(logits: np.ndarray, params: SamplingParams) -> np.ndarray:
    """The distribution llama-server samples from for these ``logits`` (one row, the whole
    vocabulary): top-k, top-p, min-p, then temperature, in that order; zero outside the kept
    tokens. Greedy parameters give a point mass on the argmax."""
    out = np.zeros(np.asarray(logits).shape[0])
    if params.greedy:
        out[int(np.argmax(logits))] = 1.0
        return out
    ids, p = _weights(logits, params)
    out[ids] = p / p.sum()
    return out


def sample_token(logits: np.ndarray, params: SamplingParams, position: int) -> int:
    """The token the target emits at text ``position`` from this row of ``logits``: the argmax
    when greedy, else the draw of :func:`keyed_uniform` from the transformed distribution (the
    kept tokens in id order, as :func:`draw` orders them). Reads only the kept tokens after the
    top-k cut, so a row of a large vocabulary costs one partition."""
    if params.greedy:
        return int(np.argmax(logits))
    ids, p = _weights(logits, params)
    order = np.argsort(ids)
    return int(ids[order][draw(p[order], keyed_uniform(params.seed, position))])


def keyed_draws(logits: np.ndarray, params: SamplingParams, first_position: int,
                depths: Sequence[int]) -> Callable[[int], int]:
    """The target's token at each row of a verify under sampling: row ``r`` (at depth
    ``depths[r]``) draws text position ``first_position + depths[r]`` from its row of ``logits``
    (:func:`sample_token`; :func:`verify_sampled` states why this is lossless). The engine's
    rounds and the replay's labels draw through here."""
    return lambda r: sample_token(logits[r], params, first_position + depths[r])


def draw(probs: np.ndarray, u: float) -> int:
    """The token at ``u`` of ``probs``'s cumulative distribution, in token-id order."""
    cum = np.cumsum(probs)
    return int(min(np.searchsorted(cum, u * cum[-1], side="right"), len(probs) - 1))


def verify_sampled(tree: Tree, row_probs: Callable[[int], np.ndarray], seed: int,
                   first_position: int) -> tuple[list[int], list[int]]:
    """The accepted path's rows (from the anchor, row 0) and the committed tokens (the accepted
    drafts and the target's draw after them) of a sampled verify. ``row_probs(r)`` is the
    target's transformed distribution at row ``r``; ``first_position`` is the text position of
    the token after the anchor, so row ``r`` at depth ``d`` draws position ``first_position +
    d``. A pure function of the tree, the distributions and the keyed stream."""
    depths = tree.depths()
    path, y = walk_path(tree, lambda r: draw(row_probs(r),
                                             keyed_uniform(seed, first_position + depths[r])))
    return path, [int(tree.tokens[c]) for c in path[1:]] + [y]


def sample_plain(row_probs: Callable[[Sequence[int]], np.ndarray], prompt: Sequence[int],
                 n_tokens: int, seed: int) -> list[int]:
    """Plain sampling: ``n_tokens`` tokens after ``prompt``, each drawn from
    ``row_probs(text so far)`` with its position's keyed uniform (what our ``ar`` arm does)."""
    text = list(prompt)
    for _ in range(n_tokens):
        text.append(draw(row_probs(text), keyed_uniform(seed, len(text))))
    return text[len(prompt):]
