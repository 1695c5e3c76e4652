"""What a replayed round costs (issue 14, "Replay"): the times a width rule is told.

A :class:`Pricer` gives, for each round of a reply, the times a real round's
:class:`~adaspark.decoding.round.RoundOutcome` carries: ``verify_s`` (T), ``fixed_s`` (D: the
drafter and the scheduler's own tree build), ``draft_s`` (the drafter's part of D), ``commit_s``
and ``round_s`` (the whole round, which rho is priced over, §3.4).

- :class:`RecordedPrices` (device model ``recorded``): each round's recorded times from a real
  run's trace (:mod:`adaspark.decoding.round_trace`), by round index. It supplies times only; trees,
  accepted paths and committed tokens come from the rule and the labels.
- :class:`DevicePrices`: a device model's (:mod:`adaspark.replay.device`): T(n rows, context),
  the drafter's D on drafted rounds (by its kind and the positions drafted, where the model
  lists the kind), a host term every round, seeded noise.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from adaspark.decoding.round_trace import RequestTrace
from adaspark.replay.device import DeviceModel


@dataclass(frozen=True)
class RoundTimes:
    verify_s: float
    fixed_s: float
    draft_s: float
    commit_s: float
    round_s: float


class Pricer(Protocol):
    #: The device model's name, as replay outputs say it.
    name: str
    #: ``measured`` | ``reconstructed`` | ``synthetic`` | ``recorded``.
    label: str
    #: The device model's content hash ("" for the recorded times).
    sha256: str

    def begin_request(self, seq: int) -> None: ...

    def fresh(self) -> Pricer:
        """The same prices from their start (a noise source back at its seed)."""
        ...

    def for_drafter(self, kind: str | None) -> Pricer:
        """The same prices for an arm whose drafter is of ``kind`` (None: no drafter)."""
        ...

    def price(self, round_index: int, rows: int, context: int, drafted: int) -> RoundTimes:
        """The times of a round of ``rows`` verify rows at ``context`` tokens that drafted
        ``drafted`` block positions (0: no drafter ran)."""
        ...


class RecordedPrices:
    """The recorded run's own times, round by round (``recorded``). A replay that makes more
    rounds than the run did has already diverged from it; its extra rounds reuse the last
    recorded round's times (the exactness check reports the round counts' difference)."""

    name = "recorded"
    label = "recorded"
    sha256 = ""

    def __init__(self, traces: list[RequestTrace]) -> None:
        self.by_seq = {t.seq: t for t in traces}
        self.current: RequestTrace | None = None

    def fresh(self) -> RecordedPrices:
        return RecordedPrices(list(self.by_seq.values()))

    def begin_request(self, seq: int) -> None:
        self.current = self.by_seq[seq]

    def for_drafter(self, kind: str | None) -> RecordedPrices:
        return self

    def price(self, round_index: int, rows: int, context: int, drafted: int) -> RoundTimes:
        assert self.current is not None
        rounds = self.current.rounds
        if not rounds:
            return RoundTimes(0.0, 0.0, 0.0, 0.0, 0.0)
        r = rounds[min(round_index, len(rounds) - 1)]
        return RoundTimes(r.verify_s, r.fixed_s, r.draft_s, r.commit_s, r.round_s)


class DevicePrices:
    """A device model's prices: ``verify_s = T(rows, context)``, ``draft_s = D`` on a drafted
    round (0 otherwise; the drafter kind's D for the positions drafted where the model lists the
    kind, :meth:`DeviceModel.draft_s_of`), ``fixed_s = draft_s + host``, ``round_s = fixed_s +
    verify_s``; each priced time times its own noise factor, drawn in round order from the
    model's seed (so the same labels, model and seed give the same records)."""

    def __init__(self, model: DeviceModel, drafter: str | None = None) -> None:
        self.model = model
        self.drafter = drafter
        self.name = model.name
        self.label = model.label
        self.sha256 = model.sha256
        self.noise = model.noise_source()

    def begin_request(self, seq: int) -> None:
        pass

    def fresh(self) -> DevicePrices:
        return DevicePrices(self.model, self.drafter)

    def for_drafter(self, kind: str | None) -> DevicePrices:
        return DevicePrices(self.model, kind)

    def price(self, round_index: int, rows: int, context: int, drafted: int) -> RoundTimes:
        m = self.model
        verify = m.verify_s(rows, context) * self.noise.factor()
        draft = (m.draft_s_of(self.drafter, int(drafted)) * self.noise.factor() if drafted
                 else 0.0)
        host = m.host_s * self.noise.factor()
        fixed = draft + host
        return RoundTimes(verify, fixed, draft, 0.0, fixed + verify)
