"""The subsets of the test set (paper Appendix A and §4; HARNESS "Subsets").

- ``evaluation``: "the first conversation of every category of a multi-category source, and the
  first half of the conversations of a single-category source" (Appendix A); the paper counts 42
  conversations, 87 turns and 95 timed replies (a turn with a recorded tool result gives two).
- ``heldout``: the other conversations of the test set (31, 61 turns; §4.1, Table 5).
- ``short``: the first two turns of the first conversation of each source (11 timed replies; the
  instrumented subset of §4 and the default pipeline subset).
- ``replay``: ``short``, then the first two turns of five more Spec-Bench categories' first
  conversations (the default replay's labelled run: enough rounds for the width claims).
- ``smoke``: the first turn of the first Spec-Bench and of the first ToolACE conversation (CI).
- ``all``: the whole test set (73 conversations, 148 turns; Table 5).

Conversations keep the published order: the set files in Table 13's order, each file's
conversations in its own order. A source is multi-category when its conversations carry more
than one ``kind``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from adaspark.testset.model import Conversation, SetFile, is_placeholder, n_timed_replies

#: The paper's counts: (conversations, turns, timed replies); None where the paper gives none.
PAPER_COUNTS: dict[str, tuple[int | None, int | None, int | None]] = {
    "evaluation": (42, 87, 95),
    "heldout": (31, 61, None),
    "short": (None, None, 11),
    "all": (73, 148, None),
}


@dataclass(frozen=True)
class SubsetItem:
    """The first ``n_turns`` turns of one conversation."""

    set_name: str
    conversation: str
    n_turns: int
    n_timed: int
    placeholder: bool


@dataclass(frozen=True)
class Subset:
    name: str
    rule: str
    items: tuple[SubsetItem, ...]

    @property
    def n_conversations(self) -> int:
        return len(self.items)

    @property
    def n_turns(self) -> int:
        return sum(i.n_turns for i in self.items)

    @property
    def n_timed(self) -> int:
        return sum(i.n_timed for i in self.items)

    def without_placeholders(self) -> Subset:
        """The subset less SPEED-Bench's placeholder conversations (issue 4)."""
        return replace(self, items=tuple(i for i in self.items if not i.placeholder))

    def counts(self) -> dict[str, int]:
        return {
            "conversations": self.n_conversations,
            "turns": self.n_turns,
            "timed_replies": self.n_timed,
        }


def item(set_name: str, c: Conversation, n_turns: int | None = None) -> SubsetItem:
    turns = c.turns if n_turns is None else c.turns[:n_turns]
    return SubsetItem(set_name, c.name, len(turns), n_timed_replies(turns), is_placeholder(c))


def is_multi_category(s: SetFile) -> bool:
    return len({c.kind for c in s.conversations}) > 1


def evaluation_conversations(s: SetFile) -> list[Conversation]:
    """Appendix A's subset rule for one source: the first conversation of each category of a
    multi-category source, else the first half (rounded down) of its conversations."""
    if is_multi_category(s):
        first: dict[str, Conversation] = {}
        for c in s.conversations:
            first.setdefault(c.kind, c)
        return [c for c in s.conversations if first[c.kind] is c]
    return s.conversations[: len(s.conversations) // 2]


def evaluation(sets: Sequence[SetFile]) -> Subset:
    items = tuple(item(s.name, c) for s in sets for c in evaluation_conversations(s))
    return Subset(
        "evaluation",
        "first conversation of every category of a multi-category source, first half of the "
        "conversations of a single-category source (Appendix A)",
        items,
    )


def heldout(sets: Sequence[SetFile]) -> Subset:
    items = []
    for s in sets:
        chosen = {c.name for c in evaluation_conversations(s)}
        items.extend(item(s.name, c) for c in s.conversations if c.name not in chosen)
    return Subset("heldout", "the conversations outside the evaluation subset (§4.1)", tuple(items))


def short(sets: Sequence[SetFile]) -> Subset:
    items = tuple(item(s.name, s.conversations[0], 2) for s in sets if s.conversations)
    return Subset("short", "first two turns of the first conversation of each source (§4)", items)


#: Spec-Bench conversations ``replay`` adds after ``short`` (its first conversation of each
#: further category, in order, up to this many): short prompts, long replies.
REPLAY_EXTRA = 6


def replay(sets: Sequence[SetFile]) -> Subset:
    """``short``, then the first two turns of the first conversation of each further Spec-Bench
    category (the first :data:`REPLAY_EXTRA`): the default pipeline's labelled run, whose replay
    must give AdaSpark 2,000 rounds (issue 33). ``short``'s replies come first, so a replay of
    the first ``short`` replies sets itself beside the run stage's real runs of ``short``.
    Spec-Bench's prompts are short and its replies long: a reply's rounds cost labels, a prompt's
    tokens exact-mode prefill (27 tok/s here) in the labelled run and again in the labels."""
    base = short(sets)
    seen = {(i.set_name, i.conversation) for i in base.items}
    extra: list[SubsetItem] = []
    for s in sets:
        if s.name != "specbench":
            continue
        kinds: set[str] = {c.kind for c in s.conversations if (s.name, c.name) in seen}
        for c in s.conversations:
            if c.kind in kinds or len(extra) == REPLAY_EXTRA or is_placeholder(c):
                continue
            kinds.add(c.kind)
            extra.append(item(s.name, c, 2))
    return Subset("replay", "short, then the first two turns of the first conversation of "
                  f"each further Spec-Bench category (the first {REPLAY_EXTRA})",
                  base.items + tuple(extra))


def smoke(sets: Sequence[SetFile], sources: Iterable[str] = ("specbench", "toolace")) -> Subset:
    by_name = {s.name: s for s in sets}
    missing = [n for n in sources if n not in by_name or not by_name[n].conversations]
    if missing:
        raise ValueError(f"the smoke subset needs the sets {missing}, which are missing or empty")
    items = tuple(item(n, by_name[n].conversations[0], 1) for n in sources)
    return Subset(
        "smoke", "first turn of the first Spec-Bench and first ToolACE conversation", items
    )


def whole(sets: Sequence[SetFile]) -> Subset:
    items = tuple(item(s.name, c) for s in sets for c in s.conversations)
    return Subset("all", "the whole test set", items)


SUBSETS: dict[str, Callable[[Sequence[SetFile]], Subset]] = {
    "evaluation": evaluation,
    "heldout": heldout,
    "short": short,
    "replay": replay,
    "smoke": smoke,
    "all": whole,
}


def make_subset(name: str, sets: Sequence[SetFile]) -> Subset:
    if name not in SUBSETS:
        raise KeyError(f"unknown subset {name!r}; the subsets are {sorted(SUBSETS)}")
    return SUBSETS[name](sets)


def all_subsets(sets: Sequence[SetFile]) -> dict[str, Subset]:
    return {name: make(sets) for name, make in SUBSETS.items()}


def paper_count_differences(subsets: dict[str, Subset]) -> list[str]:
    """Where a derived subset's counts differ from the paper's; empty when all agree."""
    out = []
    for name, expected in PAPER_COUNTS.items():
        sub = subsets.get(name)
        if sub is None:
            continue
        got = (sub.n_conversations, sub.n_turns, sub.n_timed)
        for label, e, g in zip(
            ("conversations", "turns", "timed replies"), expected, got, strict=True
        ):
            if e is not None and e != g:
                out.append(f"{name}: {g} {label}, the paper has {e}")
    return out


def subset_to_json(sub: Subset) -> dict[str, Any]:
    return {
        "rule": sub.rule,
        **sub.counts(),
        "without_placeholders": sub.without_placeholders().counts(),
        "items": [
            {
                "set": i.set_name,
                "conversation": i.conversation,
                "turns": i.n_turns,
                "timed_replies": i.n_timed,
                "placeholder": i.placeholder,
            }
            for i in sub.items
        ],
    }


def subsets_to_json(sets: Sequence[SetFile]) -> dict[str, Any]:
    """Every subset with its counts (with and without SPEED-Bench's placeholders), the
    placeholder conversations, and any difference from the paper's counts."""
    subs = all_subsets(sets)
    return {
        "order": [s.name for s in sets],
        "placeholders": [
            {"set": s.name, "conversation": c.name}
            for s in sets
            for c in s.conversations
            if is_placeholder(c)
        ],
        "paper_count_differences": paper_count_differences(subs),
        "subsets": {name: subset_to_json(sub) for name, sub in subs.items()},
    }
