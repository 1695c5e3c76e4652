"""A device model's prices against a real run's own rounds, term by term (issue 33, item 3).

A replay's round costs ``T(rows, context) + D(positions) + host`` (:mod:`adaspark.replay.prices`);
a real round's trace holds its measured verify, its drafter's time and its whole round. Pricing
every round of a fast-mode run with round traces (the instrumented runs) at the widths, contexts
and block sizes it actually had, and setting each term beside what was measured, says which term
a replay gets wrong, free of acceptance: the same rounds on both sides.

The real round's rest, ``round_s - verify_s - draft_s``, is what the model's ``host`` stands for:
the rule's plan and learning, the commit, the streaming and the loop's own bookkeeping.
"""

from __future__ import annotations

from typing import Any

from adaspark.decoding.round_trace import RequestTrace
from adaspark.replay.device import DeviceModel

#: The terms of a round, in the order a table shows them.
TERMS = ("verify", "draft", "rest", "round")


def price_check(traces: list[RequestTrace], model: DeviceModel, kind: str | None
                ) -> dict[str, Any]:
    """Every round of ``traces`` priced by ``model`` (drafter ``kind``'s D, no noise) beside its
    measured times: per term the real and priced seconds summed over the rounds and their
    ratio priced/real; and the verify's ratio per verified width (rows), with its rounds. A
    round wider than the model's widest class is left out and counted."""
    real = dict.fromkeys(TERMS, 0.0)
    priced = dict.fromkeys(TERMS, 0.0)
    by_rows: dict[int, list[float]] = {}
    n = wider = 0
    for t in traces:
        for r in t.rounds:
            if r.rows > model.max_rows:  # the model prices no such verify (a replay caps
                wider += 1               # its rules' widths at the model's widest)
                continue
            n += 1
            v = model.verify_s(r.rows, r.anchor_pos + 1)
            d = model.draft_s_of(kind, len(r.picks)) if r.picks else 0.0
            real["verify"] += r.verify_s
            real["draft"] += r.draft_s
            real["rest"] += r.round_s - r.verify_s - r.draft_s
            real["round"] += r.round_s
            priced["verify"] += v
            priced["draft"] += d
            priced["rest"] += model.host_s
            priced["round"] += v + d + model.host_s
            acc = by_rows.setdefault(r.rows, [0.0, 0.0, 0.0])
            acc[0] += r.verify_s
            acc[1] += v
            acc[2] += 1
    return {
        "rounds": n,
        "rounds_wider_than_priced": wider,
        "real_s": {k: round(v, 4) for k, v in real.items()},
        "priced_s": {k: round(v, 4) for k, v in priced.items()},
        "priced_over_real": {k: round(priced[k] / real[k], 4) if real[k] > 0 else None
                             for k in TERMS},
        "verify_by_rows": {str(w): {"rounds": int(a[2]),
                                    "priced_over_real": round(a[1] / a[0], 4) if a[0] > 0
                                    else None}
                           for w, a in sorted(by_rows.items())},
    }
