"""The exactness check (issue 14): a replay under the recorded times against the run it replays.

Replaying a real run with each round's recorded time (device model ``recorded``) must reproduce
that run's rounds (anchor, rows, accepted drafts, committed tokens, the drafted picks) and every
reply's tokens exactly; a mismatch is a bug, never a tolerance. A fast-mode run's text may leave
the exact-mode labels' text at a near tie: such a reply (of a fast-mode run only) is cut at its
first differing token (its rounds from the one whose committed tokens reach the cut are not
compared) and counted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from adaspark.decoding.round_trace import RequestTrace, TraceRow
from adaspark.replay.loop import ReplayedReply

#: The fields of a round a replay must reproduce (times are the pricer's, not compared).
ROUND_KEYS = ("anchor_pos", "rows", "accepted", "committed", "picks")


def round_key(r: TraceRow) -> tuple[Any, ...]:
    return tuple(getattr(r, k) for k in ROUND_KEYS)


def first_difference(a: list[int], b: list[int]) -> int | None:
    """The first index where ``a`` and ``b`` differ (a length difference counts), or None."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


@dataclass
class CheckResult:
    replies: int = 0
    rounds: int = 0
    recorded_rounds: int = 0
    rounds_compared: int = 0
    rounds_identical: int = 0
    committed_identical: bool = True
    text_cuts: int = 0
    mismatches: list[dict[str, Any]] = field(default_factory=list)

    @property
    def exact(self) -> bool:
        return self.committed_identical and self.rounds_identical == self.rounds_compared \
            and self.rounds == self.recorded_rounds

    def as_dict(self) -> dict[str, Any]:
        return {"replies": self.replies, "rounds": self.rounds,
                "recorded_rounds": self.recorded_rounds,
                "rounds_compared": self.rounds_compared,
                "rounds_identical": self.rounds_identical,
                "committed_identical": self.committed_identical,
                "text_cuts": self.text_cuts, "exact": self.exact,
                "first_mismatches": self.mismatches[:5]}


def check_replay(recorded: list[RequestTrace], replayed: list[ReplayedReply],
                 label_text: dict[int, list[int]]) -> CheckResult:
    """Compare each recorded reply with its replay. ``label_text[seq]`` is the labels' greedy
    continuation after that reply's prompt (where a fast-mode reply's text may leave it)."""
    by_seq = {r.seq: r for r in replayed}
    out = CheckResult()
    for rec in recorded:
        rep = by_seq[rec.seq]
        out.replies += 1
        out.rounds += len(rep.rounds)
        out.recorded_rounds += len(rec.rounds)
        # only a fast-mode reply may leave the labels' text (a near tie); an exact-mode reply
        # that does is a mismatch like any other
        cut = (None if rec.exact else
               first_difference(rec.tokens, label_text[rec.seq][: len(rec.tokens)]))
        if cut is not None:
            out.text_cuts += 1
        limit = len(rec.prompt) - 1 + (len(rec.tokens) if cut is None else cut)
        for a, b in zip(rec.rounds, rep.rounds, strict=False):
            if b.anchor_pos + b.committed > limit and cut is not None:
                break
            out.rounds_compared += 1
            if round_key(a) == round_key(b):
                out.rounds_identical += 1
            elif len(out.mismatches) < 20:
                out.mismatches.append({"seq": rec.seq, "round": a.round_index,
                                       "recorded": dict(zip(ROUND_KEYS, round_key(a),
                                                            strict=True)),
                                       "replayed": dict(zip(ROUND_KEYS, round_key(b),
                                                            strict=True))})
        if cut is None:
            out.rounds_compared += abs(len(rec.rounds) - len(rep.rounds))
        n = len(rec.tokens) if cut is None else cut
        if rec.tokens[:n] != rep.tokens[:n] or (cut is None and rec.tokens != rep.tokens):
            out.committed_identical = False
    return out
