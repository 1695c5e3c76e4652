"""The run order (``run.order``, issue 12 "Plain decode parity, and drift between arms"): arms
run one after another (``sequential``), or a group's servers stay up together and each reply is
served to every arm of the group in turn (``interleaved``), so that slow drift of the machine
falls on every arm alike instead of on whichever ran later.

Interleaved, reply slot k of the protocol (each turn's reply, and a tool turn's second reply,
in the protocol's order: :func:`protocol_slots`) is sent first to arm ``k mod n`` of the group's
n arms, then to the next ones in the group's order (:func:`rotation`). An arm that does not make
that reply (a tool turn it answered without a call, or a reply it already has stored) is skipped.
Each arm still sees exactly the request sequence of a sequential run, in the protocol's order,
and learns only from its own requests (its own server and store): only the wall-clock
interleaving changes (:func:`interleave`).

Groups are named in the preset (``run.groups``: name -> arms); an arm in no group, and every
repeat entry ``<arm>@N`` (AdaSpark's before/after runs of Table 3), runs alone, in sequence
around the groups (:func:`plan_units`).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from adaspark.runs.settings import ORDERS, RunConfigError, RunError

if TYPE_CHECKING:
    from adaspark.runs.conversation import Planned

SEQUENTIAL, INTERLEAVED = ORDERS
#: How the first arm of a reply is chosen, as ``run.json`` records it.
ROTATION = "reply slot k starts at arm k mod n, then the next arms in the group's order"

K = TypeVar("K", bound=Hashable)


# ---------------------------------------------------------------------------------------------
# Which arms run together


@dataclass(frozen=True)
class RunUnit:
    """Arms whose servers are up together: a named group (interleaved) or one arm alone."""

    entries: tuple[str, ...]
    group: str | None = None

    @property
    def order(self) -> str:
        return INTERLEAVED if self.group is not None and len(self.entries) > 1 else SEQUENTIAL

    def record(self, entry: str) -> dict[str, Any]:
        """What ``run.json`` records of the order for ``entry`` (part of the fingerprint: a
        resume never mixes a sequential and an interleaved run, nor two groups)."""
        if self.order == SEQUENTIAL:
            return {"order": SEQUENTIAL}
        return {"order": INTERLEAVED, "group": self.group, "arms": list(self.entries),
                "position": self.entries.index(entry), "rotation": ROTATION}


def plan_units(entries: Sequence[str], order: str,
               groups: Mapping[str, Sequence[str]]) -> list[RunUnit]:
    """The run units of ``entries`` (a run's arm list, in its order). Sequential: each entry
    alone. Interleaved: each group's members among ``entries`` together (in the group's order),
    where its first member stands in ``entries``; the other entries alone where they stand."""
    if order not in ORDERS:
        raise RunConfigError(f"run.order={order!r} is not allowed: run.order must be one of "
                             f"{', '.join(ORDERS)}")
    if len(set(entries)) != len(entries):
        raise RunError(f"the arm list {list(entries)} names an entry twice")
    if order == SEQUENTIAL:
        return [RunUnit((e,)) for e in entries]
    group_of = {a: name for name, arms in groups.items() for a in arms}
    units: list[RunUnit] = []
    placed: set[str] = set()
    for e in entries:
        if e in placed:
            continue
        name = group_of.get(e)
        if name is None:
            units.append(RunUnit((e,)))
            placed.add(e)
            continue
        members = tuple(a for a in groups[name] if a in entries)
        units.append(RunUnit(members, name if len(members) > 1 else None))
        placed.update(members)
    return units


def unit_of(entry: str, units: Sequence[RunUnit]) -> RunUnit:
    for u in units:
        if entry in u.entries:
            return u
    raise RunError(f"arm entry {entry!r} is not in the run's arm list "
                   f"{[e for u in units for e in u.entries]}")


# ---------------------------------------------------------------------------------------------
# Which arm serves which reply, in which order


def protocol_slots(plan: Sequence[Planned]) -> list[tuple[str, str, int, int]]:
    """Every reply a run can make, in the protocol's order: ``(set, conversation, turn,
    reply)``, reply 1 only for a turn with a recorded tool result (sent when the model called
    a tool)."""
    out = []
    for p in plan:
        for ti, turn in enumerate(p.conversation.turns[: p.n_turns]):
            out.append((p.set_name, p.conversation.name, ti, 0))
            if turn.result is not None:
                out.append((p.set_name, p.conversation.name, ti, 1))
    return out


def rotation(k: int, n: int) -> list[int]:
    """The arms' order for reply slot ``k`` of a group of ``n``: ``k mod n`` first."""
    return [(k + i) % n for i in range(n)]


class Walk(Protocol[K]):
    """One arm's way through the protocol: the key of the next reply it will send."""

    def next_key(self) -> K | None: ...


def interleave(slots: Sequence[K], walks: Sequence[Walk[K]]) -> Iterator[tuple[int, K]]:
    """Yield ``(arm index, slot)`` in serving order; the caller sends that arm's reply (which
    moves its walk on) before taking the next item. For each slot in order, the arms go in
    :func:`rotation` order; an arm whose next reply is another slot is skipped. One arm alone
    is the sequential run. Every walk must yield its keys in the slots' order."""
    n = len(walks)
    for k, slot in enumerate(slots):
        for i in rotation(k, n):
            if walks[i].next_key() == slot:
                yield i, slot
                if walks[i].next_key() == slot:
                    raise RunError(f"arm {i} did not move past reply {slot} when it was sent")
    left = {i: w.next_key() for i, w in enumerate(walks) if w.next_key() is not None}
    if left:
        raise RunError(f"replies outside the protocol's order were left unsent: {left}")
