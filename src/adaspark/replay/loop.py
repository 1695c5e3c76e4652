"""The replayed round loop (issue 14, "Replay"): Algorithm 1 with the engine replaced by labels.

Each round runs as :func:`adaspark.decoding.loop.generate` runs it, with the real width rule:
the rule sees the round's state; if it drafts, the drafter's block is the labelled block at the
anchor, cut to the positions the rule asks for; the rule builds its tree; the accepted path is
walked from the labels (a row is accepted when its parent is and its token is the label at the
parent's text position, :mod:`adaspark.replay.labels`); the committed tokens are the accepted
drafts and the label after them; the rule observes the outcome with the pricer's times
(:mod:`adaspark.replay.prices`) in place of measured ones. The records are a real run's trace
rows (:class:`~adaspark.decoding.round_trace.TraceRow`), so a replay and the run it replays compare
row by row.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from adaspark.decoding.loop import emitted_tokens
from adaspark.decoding.round import RoundCounts, RoundOutcome, RoundState, WidthRule
from adaspark.decoding.round_trace import TraceRow
from adaspark.decoding.tree import Tree
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
    """The accepted path's rows from the anchor (row 0), as the engine's
    :func:`~adaspark.decoding.tree.accepted_path` walks it, with the label at each accepted
    row's text position as the target's argmax there."""
    kids = tree.children()
    path = [0]
    while True:
        want = labels.label(anchor_pos + len(path) - 1)
        nxt = [c for c in kids[path[-1]] if tree.tokens[c] == want]
        if not nxt:
            return path
        path.append(nxt[0])


def replay_reply(rule: WidthRule, labels: PromptLabels, max_tokens: int, pricer: Pricer, *,
                 seq: int, request_id: str | None, block_positions: int, max_rows: int,
                 n_ctx: int) -> ReplayedReply:
    """Replay one reply of up to ``max_tokens`` tokens after ``labels.prompt`` with ``rule``."""
    prompt = list(labels.prompt)
    committed = list(prompt)
    out = ReplayedReply(seq=seq, request_id=request_id, tokens=[], stop="length")
    rule.begin_request(prompt, request_id)
    pricer.begin_request(seq)
    uses_drafter = rule.uses_drafter
    # every committed token is a label, and ending generation is a property of the token
    eog_tokens = labels.eog_tokens
    while len(out.tokens) < max_tokens:
        i = len(out.rounds)
        state = RoundState(committed=committed, round_index=i, max_rows=max_rows,
                           block_positions=block_positions)
        anchor_pos = len(committed) - 1
        block = None
        if uses_drafter and rule.wants_block(state):
            room = n_ctx - len(committed) - 1
            want = max(1, min(rule.block_positions(block_positions), room))
            block = labels.block(anchor_pos, want)
        plan = rule.plan(state, block)
        rows = plan.tree.n_rows
        times = pricer.price(i, rows, len(committed),
                             0 if block is None else int(block.tokens.shape[0]))
        if block is not None:
            block.draft_s = times.draft_s
        path = accepted_rows(plan.tree, labels, anchor_pos)
        new = [int(plan.tree.tokens[r]) for r in path[1:]]
        new.append(labels.label(anchor_pos + len(path) - 1))
        committed.extend(new)
        emitted, eog = emitted_tokens(new, max_tokens - len(out.tokens), eog_tokens.__contains__)
        if eog:
            out.stop = "eog"
        out.tokens.extend(emitted)
        outcome = RoundOutcome.of(plan, path, new, times.verify_s, times.fixed_s,
                                  draft_s=times.draft_s, commit_s=times.commit_s,
                                  round_s=times.round_s)
        out.counts.add(outcome.counts)
        out.width_hist[rows] = out.width_hist.get(rows, 0) + 1
        out.decode_s += times.round_s
        rule.observe(plan, outcome)
        out.rounds.append(TraceRow(
            round_index=i, anchor_pos=anchor_pos, anchor=int(committed[anchor_pos]),
            picks=[int(t) for t in block.tokens[:, 0]] if block is not None else [],
            rows=rows, accepted=len(path) - 1, committed=len(new),
            verify_s=times.verify_s, fixed_s=times.fixed_s, draft_s=times.draft_s,
            commit_s=times.commit_s, round_s=times.round_s))
        if out.stop == "eog":
            break
        if len(committed) + 1 >= n_ctx:
            out.stop = "context"
            break
    out.summary = rule.end_request()
    return out
