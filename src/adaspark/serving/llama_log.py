"""llama-server's debug log, read back: each speculative round's drafts, at its anchor (issue 13,
"Same drafts as llama.cpp").

llama-server prints its drafts only at debug verbosity (``--log-verbosity 5``, or ``--verbose``).
Facts of the vendored llama.cpp this parser relies on (read, not copied):

* ``common/speculative.cpp`` (``common_speculative_impl_draft_dflash::draft``, lines 1284 and
  1303; the draft-simple, EAGLE3 and MTP drafters log the same line, lines 357, 803 and 1657):
  after the drafter's decode, per drafted position the top three candidates of the position's
  sampler are logged as `` - seq_id %d, draft candidate %3d, pos %3d: %6d (%8.3f) '%s'``
  (sequence, rank, position, token id, probability, piece), best first; the draft's token is
  candidate 0. ``pos i`` drafts the token at the anchor's position ``+ i + 1`` (draft-dspark
  with ``dflash.sample_from_anchor`` logs block row ``i`` as ``pos i``, draft-dflash block row
  ``i`` as ``pos i - 1``, draft-simple its ``i``-th step). The dflash drafters' sampler is top-k
  10 then ``dist``: ``p`` is the softmax over those ten, so ``log(p_0 / p_1)`` is the row's
  top-2 logit gap. draft-dspark's block is ``--spec-draft-n-max`` rows, all logged, before
  ``common_speculative_draft`` cuts the draft to the room the request has left (line 2834,
  ``truncating draft to %d tokens``).
* ``tools/server/server-context.cpp``, ``server_slot::handle_last_sampled_token`` (lines 487 and
  490): right after the draft, ``generate_draft: id=%d, #tokens=%zu, #draft=%zu,
  pos_next=%d`` (the anchor, the slot's last sampled token; the cached tokens before it; the
  kept draft; the anchor's position, the drafter's ``pos0``), or, when the draft came back
  empty, ``slot decode token, id=%d, n_ctx = %d, n_tokens = %d, truncated = %d`` (``n_tokens``:
  the anchor's position, for a text prompt). A partial accept on a target that cannot drop
  cells (a checkpoint restore, line 3915) replays the accepted part: a ``generate_draft`` line
  with no candidate lines before it, which is no new round.
* after the verify (``update_slots``, line 4003): ``accepted %d/%d draft tokens, new n_tokens =
  %d``, with ``new n_tokens`` the anchor's position ``+ accepted + 1``; after a replay the
  verify saw the accepted drafts and the target's token after them again, and the line counts
  the original round's accepted drafts over one more token (``accepted a/a+1``, ``new
  n_tokens``: ``+ a + 2``).
* ``slot`` lines carry ``id %2d | task %d |`` (the slot is the sequence: ``slot.id`` is the
  ``seq_id`` the drafter is called with); every line has a prefix (time stamp, level letter) that
  depends on the flags, so lines are searched, not matched from their start; a piece may hold a
  newline, so the candidate pattern stops at the probability.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

_CANDIDATE = re.compile(r" - seq_id (\d+), draft candidate +(\d+), pos +(\d+): +(-?\d+) "
                        r"\( *([-+0-9.eEnaif]+)\)")
_SLOT = re.compile(r"\bid +(\d+) \| task (-?\d+) \| ")
_DRAFT = re.compile(r"generate_draft: id=(-?\d+), #tokens=(\d+), #draft=(\d+), pos_next=(-?\d+)")
_NO_DRAFT = re.compile(r"slot decode token, id=(-?\d+), n_ctx = \d+, n_tokens = (\d+)")
_ACCEPTED = re.compile(r"accepted +(\d+)/ *(\d+) draft tokens, new n_tokens = (\d+)")


class LlamaLogError(ValueError):
    """The log's draft lines are not in the order llama-server writes them."""


@dataclass(frozen=True)
class Candidate:
    token: int
    p: float  # the softmax over the position's top ten (llama.cpp's drafter sampler)


@dataclass(frozen=True)
class DraftRound:
    """One drafter call of llama-server: the anchor (token and position), each drafted position's
    logged candidates (best first), how many drafts went to the verify, and how many of those
    were accepted (``None`` when the log ends before the verify)."""

    slot: int
    task: int
    anchor_pos: int
    anchor: int
    candidates: tuple[tuple[Candidate, ...], ...]
    kept: int
    accepted: int | None = None

    @property
    def picks(self) -> tuple[int, ...]:
        """The draft of every logged position (candidate 0), the cut ones included."""
        return tuple(row[0].token for row in self.candidates)

    @property
    def drafts(self) -> tuple[int, ...]:
        """The drafts the verify got."""
        return self.picks[: self.kept]


def parse_draft_rounds(text: str) -> list[DraftRound]:
    """Every drafter call in a llama-server debug log, in order."""
    pending: dict[int, list[list[Candidate]]] = {}
    replay: set[int] = set()  # slots whose last round is being replayed
    rounds: list[DraftRound] = []
    for n, line in enumerate(text.splitlines(), 1):
        if m := _CANDIDATE.search(line):
            seq, k, pos, tok, p = (int(m[1]), int(m[2]), int(m[3]), int(m[4]), float(m[5]))
            rows = pending.setdefault(seq, [])
            if k == 0 and pos == len(rows):
                rows.append([])
            elif not rows or pos != len(rows) - 1 or k != len(rows[-1]):
                raise LlamaLogError(f"line {n}: candidate {k} of position {pos} for sequence "
                                    f"{seq} follows {len(rows)} positions (the last with "
                                    f"{len(rows[-1]) if rows else 0} candidates)")
            rows[-1].append(Candidate(tok, p))
            continue
        slot = _SLOT.search(line)
        if slot is None:
            continue
        sid, task = int(slot[1]), int(slot[2])
        if m := _DRAFT.search(line):
            anchor, kept, pos = int(m[1]), int(m[3]), int(m[4])
        elif m := _NO_DRAFT.search(line):
            anchor, kept, pos = int(m[1]), 0, int(m[2])
        elif m := _ACCEPTED.search(line):
            last = next((i for i in range(len(rounds) - 1, -1, -1) if rounds[i].slot == sid),
                        None)
            if last is not None and rounds[last].accepted is None:
                r, a, extra = rounds[last], int(m[1]), int(sid in replay)
                replay.discard(sid)
                n_verified = a + 1 if extra else r.kept
                if int(m[2]) != n_verified or a > r.kept or \
                        int(m[3]) != r.anchor_pos + a + 1 + extra:
                    raise LlamaLogError(f"line {n}: {m[0]!r} does not fit the round at position "
                                        f"{r.anchor_pos} with {r.kept} drafts")
                rounds[last] = DraftRound(r.slot, r.task, r.anchor_pos, r.anchor, r.candidates,
                                          r.kept, a)
            continue
        else:
            continue
        rows = pending.pop(sid, None)
        if rows is None:  # a replay of accepted drafts, or a plain decode: no drafter call
            if kept and rounds and rounds[-1].slot == sid and rounds[-1].accepted is None:
                replay.add(sid)
            continue
        if kept > len(rows):
            raise LlamaLogError(f"line {n}: {kept} drafts kept of {len(rows)} logged positions")
        rounds.append(DraftRound(sid, task, pos, anchor,
                                 tuple(tuple(r) for r in rows), kept))
    if pending:
        raise LlamaLogError(f"the log ends with drafts of sequence(s) {sorted(pending)} that no "
                            "generate_draft line closes")
    return rounds


def read_draft_rounds(path: str | Path) -> list[DraftRound]:
    """:func:`parse_draft_rounds` of a log file."""
    return parse_draft_rounds(Path(path).read_text(encoding="utf-8", errors="replace"))
