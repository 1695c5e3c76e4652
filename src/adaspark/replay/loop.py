"""Replay: Algorithm 1 with the engine replaced by labels.

Each round runs in the one round loop (:func:`adaspark.decoding.loop.run_rounds`), with the real
width rule: the rule sees the round's state; if it drafts, the drafter's block is the labelled
block at the anchor, cut to the positions the rule asks for; the rule builds its tree; the
accepted path is walked from the labels (a row is accepted when its parent is and its token is
the label at the parent's text position, :mod:`adaspark.replay.labels`); the committed tokens are
the accepted drafts and the label after them; the rule observes the outcome with the pricer's
times (:mod:`adaspark.replay.prices`) in place of measured ones. The records are a real run's
trace rows (:class:`~adaspark.decoding.round_trace.TraceRow`), so a replay and the run it replays
compare row by row.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from adaspark.decoding.drafter.base import Block
from adaspark.decoding.loop import RequestSession, Verified, run_rounds
from adaspark.decoding.round import RoundCounts, RoundPlan, WidthRule
from adaspark.decoding.round_trace import TraceRow
from adaspark.decoding.tree import Tree, walk_path
from adaspark.replay.labels import PromptLabels
from adaspark.replay.prices import Pricer


@dataclass
class ReplayedReply:
    seq: int
    request_id: str | None
    tokens: list[int]
    stop: str
    rounds: list[TraceRow] = field(default_factory=list)
    counts: RoundCounts = field(default_factory=RoundCounts)
    width_hist: dict[int, int] = field(default_factory=dict)
    decode_s: float = 0.0
    summary: dict[str, object] = field(default_factory=dict)

    @property
    def tokens_per_s(self) -> float:
        return len(self.tokens) / self.decode_s if self.decode_s > 0 else float("nan")


def accepted_rows(tree: Tree, labels: PromptLabels, anchor_pos: int) -> list[int]:
    """The accepted path's rows from the anchor (row 0), as the engine walks it
    (:func:`~adaspark.decoding.tree.walk_path`), with the label at each accepted row's text
    position as the target's token there."""
    return _walk(tree, labels, anchor_pos)[0]


def _walk(tree: Tree, labels: PromptLabels, anchor_pos: int) -> tuple[list[int], int]:
    depths = tree.depths()
    return walk_path(tree, lambda r: labels.label(anchor_pos + depths[r]))


class LabelWorld:
    """One labelled reply as the round loop's :class:`~adaspark.decoding.loop.RoundWorld`: the
    labelled block at the anchor, the accepted path walked from the labels (:func:`accepted_rows`),
    the pricer's times (:mod:`adaspark.replay.prices`)."""

    measured = False
    drafts = True

    def __init__(self, labels: PromptLabels, pricer: Pricer, max_rows: int, n_ctx: int) -> None:
        self.labels, self.pricer = labels, pricer
        self.committed: list[int] = list(labels.prompt)
        self.max_rows, self.n_ctx = max_rows, n_ctx
        # every committed token is a label, and ending generation is a property of the token
        self.is_eog = labels.eog_tokens.__contains__

    def draft(self, positions: int) -> Block:
        return self.labels.block(len(self.committed) - 1, positions)

    def walk(self, tree: Tree) -> tuple[list[int], list[int]]:
        """The accepted path of ``tree`` at the anchor (:func:`accepted_rows`) and the tokens it
        commits (the accepted drafts and the label after them), committed here."""
        path, after = _walk(tree, self.labels, len(self.committed) - 1)
        new = [int(tree.tokens[r]) for r in path[1:]] + [after]
        self.committed.extend(new)
        return path, new

    def verify(self, plan: RoundPlan, block: Block | None, round_index: int) -> Verified:
        times = self.pricer.price(round_index, plan.tree.n_rows, len(self.committed),
                                  0 if block is None else int(block.tokens.shape[0]))
        if block is not None:
            block.draft_s = times.draft_s
        path, new = self.walk(plan.tree)
        return Verified(path, new, times.verify_s, fixed_s=times.fixed_s, draft_s=times.draft_s,
                        commit_s=times.commit_s, round_s=times.round_s)


def replay_reply(rule: WidthRule, labels: PromptLabels, max_tokens: int, pricer: Pricer, *,
                 seq: int, request_id: str | None, block_positions: int, max_rows: int,
                 n_ctx: int) -> ReplayedReply:
    """Replay one reply of up to ``max_tokens`` tokens after ``labels.prompt`` with ``rule``
    (the round loop, :func:`adaspark.decoding.loop.run_rounds`, in a :class:`LabelWorld`)."""
    world = LabelWorld(labels, pricer, max_rows, n_ctx)
    session = RequestSession(rule, list(labels.prompt), request_id, keep_records=True)
    with session:
        pricer.begin_request(seq)
        run_rounds(world, session, max_tokens, block_positions)
    return ReplayedReply(seq=seq, request_id=request_id, tokens=session.tokens,
                         stop=session.stop, rounds=[TraceRow.of(o) for o in session.records],
                         counts=session.counts, width_hist=session.width_hist,
                         decode_s=session.decode_s, summary=session.summary)
