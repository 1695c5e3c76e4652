"""The DSpark drafter as PyTorch trains it: the same computation as llama.cpp's ``dflash`` graph
(``src/models/dflash.cpp`` of the vendored source, read, not copied), so that the exported GGUF
drafts what the trained module predicts (§2.1: one forward gives the B positions after the
anchor from hidden states of selected target layers; a low-rank Markov head biases each position
by the pick before it; a confidence head predicts whether the pick survives).

The graph, for a target of hidden size ``d`` (heads, KV heads, head size, RoPE base and RMS
epsilon are the target's):

* Context (the committed text, positions ``0..P-1``): the concatenated target layer inputs ``f``
  go through ``g = rmsnorm(fc @ f) * enc_norm``; each drafter layer's context keys are
  ``rope(k_norm(Wk g))`` and values ``Wv g`` (no ``attn_norm`` on this path, one ``g`` for every
  layer).
* Block (positions ``P..P+B-1``): the target's embeddings of ``[anchor, MASK x (B-1)]``; per
  layer, pre-norm attention (``q_norm``/``k_norm`` per head, NeoX RoPE, grouped-query, no
  biases) over the context and the whole block (non-causal), residual, then a SwiGLU FFN,
  residual; ``h = rmsnorm(x) * output_norm``.
* Logits of block row ``i`` over the draft vocabulary: ``output @ h_i + markov_w2 @
  markov_w1[prev_i]``, ``prev_0`` the anchor and ``prev_i`` the pick of row ``i-1``; a reduced
  draft vocabulary maps draft row ``j`` to target token ``d2t[j]`` (the other tokens get
  ``-inf``). Row ``i`` drafts the token at position ``P + i + 1``.
* Confidence of row ``i``: ``sigmoid(conf_proj . [h_i ; markov_w1[prev_i]] + b)``.

Training (``training.loss``) teacher-forces ``prev_i`` with the target's greedy token, which
is the pick whenever the rows before were right: the only rows whose drafts can be accepted.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from torch import nn
from torch.nn import functional as F


@dataclass(frozen=True)
class DrafterDims:
    """The drafter's shapes: the target's (``n_embd``, heads, RoPE, epsilon, vocabulary) and its
    own (layers, FFN width, feature layers, draft vocabulary, Markov rank, block)."""

    n_embd: int
    n_head: int
    n_head_kv: int
    rope_base: float
    rms_eps: float
    n_vocab: int  # the target's vocabulary (markov_w1's rows, the embeddings)
    n_feat: int  # target layer inputs concatenated into fc's input
    n_layers: int
    n_ff: int
    draft_vocab: int  # rows of the own output head (len(d2t))
    markov_rank: int
    block: int

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    def as_dict(self) -> dict[str, float | int]:
        return asdict(self)


def rms_norm(x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> torch.Tensor:
    """ggml's ``rms_norm`` then the norm's weight (``build_norm(..., LLM_NORM_RMS)``)."""
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return y if weight is None else y * weight


def rope_neox(x: torch.Tensor, pos: torch.Tensor, base: float) -> torch.Tensor:
    """NeoX-style rotary embedding (the two halves of each head rotate together), ``x`` of
    shape ``(..., n_pos, heads, head_dim)`` and ``pos`` of shape ``(..., n_pos)``."""
    hd = x.shape[-1]
    inv = base ** (-torch.arange(0, hd // 2, dtype=torch.float32, device=x.device) * 2.0 / hd)
    ang = pos.to(torch.float32)[..., None] * inv  # (..., n_pos, hd/2)
    cos, sin = ang.cos()[..., None, :], ang.sin()[..., None, :]
    a, b = x[..., : hd // 2], x[..., hd // 2 :]
    return torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1)


class Layer(nn.Module):
    """One drafter block (``blk.N.*`` in the GGUF)."""

    def __init__(self, d: DrafterDims) -> None:
        super().__init__()
        hd = d.head_dim
        self.attn_norm = nn.Parameter(torch.ones(d.n_embd))
        self.wq = nn.Linear(d.n_embd, d.n_head * hd, bias=False)
        self.wk = nn.Linear(d.n_embd, d.n_head_kv * hd, bias=False)
        self.wv = nn.Linear(d.n_embd, d.n_head_kv * hd, bias=False)
        self.wo = nn.Linear(d.n_head * hd, d.n_embd, bias=False)
        self.q_norm = nn.Parameter(torch.ones(hd))
        self.k_norm = nn.Parameter(torch.ones(hd))
        self.ffn_norm = nn.Parameter(torch.ones(d.n_embd))
        self.gate = nn.Linear(d.n_embd, d.n_ff, bias=False)
        self.up = nn.Linear(d.n_embd, d.n_ff, bias=False)
        self.down = nn.Linear(d.n_ff, d.n_embd, bias=False)


class DSparkNet(nn.Module):
    """The trainable drafter. The target's token embeddings are a frozen buffer (the GGUF
    borrows them through ``ctx_other``); everything else is exported."""

    def __init__(self, dims: DrafterDims, tok_embd: torch.Tensor) -> None:
        super().__init__()
        self.dims = d = dims
        self.register_buffer("tok_embd", tok_embd, persistent=False)
        self.fc = nn.Linear(d.n_feat * d.n_embd, d.n_embd, bias=False)
        self.enc_norm = nn.Parameter(torch.ones(d.n_embd))
        self.layers = nn.ModuleList(Layer(d) for _ in range(d.n_layers))
        self.out_norm = nn.Parameter(torch.ones(d.n_embd))
        self.output = nn.Linear(d.n_embd, d.draft_vocab, bias=False)
        self.markov_w1 = nn.Embedding(d.n_vocab, d.markov_rank)
        self.markov_w2 = nn.Linear(d.markov_rank, d.draft_vocab, bias=False)
        self.conf = nn.Linear(d.n_embd + d.markov_rank, 1)
        nn.init.normal_(self.markov_w1.weight, std=0.02)
        nn.init.zeros_(self.markov_w2.weight)  # the Markov bias starts at nothing
        nn.init.zeros_(self.conf.weight)
        nn.init.zeros_(self.conf.bias)

    # -- the graph --------------------------------------------------------------------------

    def context_kv(self, feats: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per layer, the context's keys (RoPE'd) and values from the features ``(S, n_feat *
        n_embd)`` of positions ``0..S-1``: ``(S, n_head_kv, head_dim)`` each."""
        d = self.dims
        g = rms_norm(self.fc(feats), self.enc_norm, d.rms_eps)
        pos = torch.arange(feats.shape[0], device=feats.device)
        out = []
        for lay in self.layers:
            k = lay.wk(g).view(-1, d.n_head_kv, d.head_dim)
            k = rope_neox(rms_norm(k, lay.k_norm, d.rms_eps), pos, d.rope_base)
            v = lay.wv(g).view(-1, d.n_head_kv, d.head_dim)
            out.append((k, v))
        return out

    def hidden(self, ctx: list[tuple[torch.Tensor, torch.Tensor]], anchors: torch.Tensor,
               anchor_tokens: torch.Tensor, mask_token: int) -> torch.Tensor:
        """The block rows' final hidden states ``(N, B, n_embd)`` for ``N`` anchors of one
        context: block ``n`` sits at positions ``anchors[n] + 0..B-1`` and sees the context
        positions before ``anchors[n]``."""
        d = self.dims
        n, b = anchors.shape[0], d.block
        toks = torch.full((n, b), mask_token, dtype=torch.long, device=anchors.device)
        toks[:, 0] = anchor_tokens
        x = self.tok_embd[toks].to(torch.float32)  # (N, B, d)
        pos = anchors[:, None] + torch.arange(b, device=anchors.device)  # (N, B)
        S = ctx[0][0].shape[0] if ctx else 0
        seen = torch.arange(S, device=anchors.device)[None, :] < anchors[:, None]  # (N, S)
        rep = d.n_head // d.n_head_kv
        scale = d.head_dim ** -0.5
        for lay, (kc, vc) in zip(self.layers, ctx, strict=True):
            xn = rms_norm(x, lay.attn_norm, d.rms_eps)
            q = rms_norm(lay.wq(xn).view(n, b, d.n_head, d.head_dim), lay.q_norm, d.rms_eps)
            k = rms_norm(lay.wk(xn).view(n, b, d.n_head_kv, d.head_dim), lay.k_norm, d.rms_eps)
            v = lay.wv(xn).view(n, b, d.n_head_kv, d.head_dim)
            q, k = rope_neox(q, pos, d.rope_base), rope_neox(k, pos, d.rope_base)
            kc_h, vc_h = kc.repeat_interleave(rep, dim=1), vc.repeat_interleave(rep, dim=1)
            k_h, v_h = k.repeat_interleave(rep, dim=2), v.repeat_interleave(rep, dim=2)
            s_ctx = torch.einsum("nbhe,she->nhbs", q, kc_h) * scale  # (N, H, B, S)
            s_ctx = s_ctx.masked_fill(~seen[:, None, None, :], float("-inf"))
            s_blk = torch.einsum("nbhe,nche->nhbc", q, k_h) * scale  # (N, H, B, B)
            p = torch.softmax(torch.cat([s_ctx, s_blk], dim=-1), dim=-1)
            o = (torch.einsum("nhbs,she->nbhe", p[..., :S], vc_h)
                 + torch.einsum("nhbc,nche->nbhe", p[..., S:], v_h))
            x = x + lay.wo(o.reshape(n, b, d.n_head * d.head_dim))
            xn = rms_norm(x, lay.ffn_norm, d.rms_eps)
            x = x + lay.down(F.silu(lay.gate(xn)) * lay.up(xn))
        return rms_norm(x, self.out_norm, d.rms_eps)

    def logits(self, h: torch.Tensor, prev: torch.Tensor) -> torch.Tensor:
        """Draft-vocabulary logits of rows ``h`` ``(..., n_embd)`` given each row's conditioning
        token ``prev`` (the pick before it, or the anchor)."""
        return self.output(h) + self.markov_w2(self.markov_w1(prev))

    def confidence_logit(self, h: torch.Tensor, prev: torch.Tensor) -> torch.Tensor:
        """The confidence head before its sigmoid (trained on detached inputs: it reads the
        drafter, it does not shape it)."""
        feat = torch.cat([h.detach(), self.markov_w1(prev).detach()], dim=-1)
        return self.conf(feat).squeeze(-1)
