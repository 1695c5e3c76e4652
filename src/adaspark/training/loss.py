"""The drafter's training objective (issue 15), as DFlash and DSpark train block drafters:

* **Block-wise cross-entropy** on the target's greedy labels, row ``i`` of a block (the token
  ``i + 1`` after the anchor) weighted by ``exp(-i / gamma)``: DFlash's position decay (the
  form ``exp(-k / gamma)``, ``k = 0..B-1``, as in SpecForge's public DFlash trainer), since a
  later row only matters when every row before it was accepted.
* **Labels that are the target's greedy continuation.** Row ``i``'s label is the target's
  argmax at position ``anchor + i``. On plain text that is the greedy continuation only while
  the text itself follows the target's argmax: row ``i`` counts only if the text's tokens
  ``anchor + 1 .. anchor + i`` each equal the target's argmax before them (on the target's own
  greedy replies every row counts). :func:`block_targets` builds labels and that mask.
* **Markov conditioning teacher-forced**: row ``i`` is conditioned on the label of row ``i-1``
  (row 0 on the anchor), which is the in-graph pick whenever the rows before were right.
* **Confidence head on survival** (DSpark §2.1): a binary cross-entropy of ``sigmoid(conf)``
  against "this row's pick equals its label", on the rows whose earlier picks all did (the
  probability that the pick survives given that the picks before it did). Its inputs are
  detached (:meth:`~adaspark.training.model.DSparkNet.confidence_logit`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch.nn import functional as F


def block_targets(tokens: np.ndarray, labels: np.ndarray, anchors: np.ndarray,
                  block: int) -> tuple[np.ndarray, np.ndarray]:
    """Per anchor, the ``block`` labels (target token ids; 0 where out of range) and whether
    each is the target's greedy continuation from the anchor (the mask above)."""
    S = tokens.shape[0]
    idx = anchors[:, None] + np.arange(block)[None, :]  # position whose argmax is row i's label
    inside = idx < S
    lab = np.where(inside, labels[np.minimum(idx, S - 1)], 0)
    agree = np.zeros(S + block + 1, dtype=bool)
    agree[1:S] = tokens[1:] == labels[:-1]  # text token j equals the argmax before it
    # row i needs agree[anchor + j] for j = 1..i
    ok = np.ones_like(inside)
    for i in range(1, block):
        ok[:, i] = ok[:, i - 1] & agree[np.minimum(anchors + i, S + block)]
    return lab.astype(np.int64), ok & inside


@dataclass
class BlockLoss:
    loss: torch.Tensor  # total: cross-entropy + conf_weight * confidence BCE
    ce: float
    conf: float
    rows: int  # weighted rows (valid labels)
    correct: np.ndarray  # (B,) picks equal to their label, given the rows before were right
    alive: np.ndarray  # (B,) rows whose earlier picks were all right (valid rows)
    accept_len: float  # mean over anchors of 1 + accepted rows (vLLM's acceptance length)


def block_loss(logits: torch.Tensor, conf_logit: torch.Tensor, labels_d: torch.Tensor,
               valid: torch.Tensor, *, gamma: float, conf_weight: float) -> BlockLoss:
    """The objective for ``N`` blocks of ``B`` rows: ``logits`` ``(N, B, V_draft)``,
    ``conf_logit`` ``(N, B)``, ``labels_d`` ``(N, B)`` the labels as draft-vocabulary rows (-1:
    not in the draft vocabulary, a row no pick can match) and ``valid`` ``(N, B)``."""
    n, b, _ = logits.shape
    in_vocab = labels_d >= 0
    w = torch.exp(-torch.arange(b, dtype=torch.float32) / gamma)[None, :] * valid
    ce_rows = F.cross_entropy(logits.reshape(n * b, -1), labels_d.clamp(min=0).reshape(-1),
                              reduction="none").view(n, b)
    wm = w * in_vocab
    ce = (ce_rows * wm).sum() / wm.sum().clamp(min=1e-6)
    with torch.no_grad():
        right = (logits.argmax(-1) == labels_d) & in_vocab & valid
        before = torch.cumprod(torch.cat([torch.ones(n, 1, dtype=torch.bool), right[:, :-1]],
                                         dim=1).to(torch.int64), dim=1).bool()
        alive = before & valid
    cb = F.binary_cross_entropy_with_logits(conf_logit, right.float(), reduction="none")
    conf = (cb * alive).sum() / alive.sum().clamp(min=1)
    run = torch.cumprod(right.to(torch.int64), dim=1)
    return BlockLoss(
        loss=ce + conf_weight * conf, ce=float(ce.detach()), conf=float(conf.detach()),
        rows=int(valid.sum()), correct=(right & alive).sum(0).numpy(),
        alive=alive.sum(0).numpy(), accept_len=float(1 + run.sum(1).float().mean()))
