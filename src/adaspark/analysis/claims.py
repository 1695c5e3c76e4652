"""The claims ledger's verdicts: each quantitative claim of the paper (``data/claims.yaml``)
measured in every regime that can test it, judged by one written rule.

Regimes: ``cpu``, this machine's real runs (``runs/arms``, ``runs/extra``, ``runs/survey``;
measured), and ``replay:<device>``, the replay stage's records under each device model
(``runs/replay``), labelled with the model's own label (reconstructed from the paper, measured
here, or synthetic). A measurement is a :class:`Value`: an estimate with its interval (the 95%
percentile bootstrap over conversations of §4.1 for ratios of decode speed; a point, lo = hi,
for counts and shares, which have no interval), or one value per group (context band, source,
pinned width) that must each meet the bound.

The rule (:data:`RULE`), written once here and printed in ``paper/claims.md``:

- per regime: ``holds`` when our interval lies inside the paper's bound, ``fails`` when it lies
  wholly outside it, ``inconclusive`` otherwise (the interval straddles an edge); a claim made
  per group holds when every group holds and fails when any group fails;
- overall: the claim's deciding regimes (``decides`` in the ledger: ``cpu``, ``reconstructed``,
  ``dense``, ``routed``) decide it: ``holds`` when every deciding regime that was measured
  holds, ``fails`` when any fails, ``inconclusive`` when none fails and one is inconclusive,
  ``not-testable`` when no deciding regime could be measured (or the ledger names none, with
  the reason).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from adaspark.analysis.claim_measures import MEASURES, cold_start, comparison_value
from adaspark.analysis.claim_rule import (
    CPU,
    DECIDE_SETS,
    FAILS,
    HOLDS,
    INCONCLUSIVE,
    NOT_TESTABLE,
    REPLAY,
    RULE,
    VERDICTS,
    Bound,
    NotMeasured,
    Regime,
    Value,
    combine,
    value_of,
    value_record,
    verdict,
)
from adaspark.analysis.claim_widths import rounds_curve, rounds_figure, width_markdown, width_report

#: What the stage and the tests take from here (the rule, the measures and the width report
#: live in claim_rule, claim_measures and claim_widths).
__all__ = [
    "CPU",
    "FAILS",
    "HOLDS",
    "INCONCLUSIVE",
    "MEASURES",
    "NOT_TESTABLE",
    "REPLAY",
    "RULE",
    "VERDICTS",
    "Bound",
    "Claim",
    "Ledger",
    "NotMeasured",
    "Regime",
    "Value",
    "claims_markdown",
    "cold_start",
    "combine",
    "comparison_value",
    "evaluate",
    "judge",
    "metrics",
    "read_ledger",
    "replay_vs_real",
    "rounds_curve",
    "rounds_figure",
    "value_of",
    "value_record",
    "verdict",
    "width_markdown",
    "width_report",
]

# -- the ledger -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Claim:
    """One entry of ``data/claims.yaml``."""

    id: str
    paper: str
    source: str
    tested_by: str
    measure: dict[str, Any]
    bound: dict[str, Any]
    decides: tuple[str, ...]
    why: str = ""

    def bound_for(self, paper_target: str | None) -> Bound | None:
        """The bound in a regime: the claim's, or its paper target's (``by_target``); None where
        a per-target claim meets a regime of no paper target."""
        if "by_target" in self.bound:
            spec = self.bound["by_target"].get(paper_target or "")
            return None if spec is None else Bound.parse(spec, f"claim {self.id}")
        return Bound.parse(self.bound, f"claim {self.id}") if self.bound else None


@dataclass(frozen=True)
class Ledger:
    claims: tuple[Claim, ...]
    targets: dict[str, str]


def read_ledger(path: Path) -> Ledger:
    """``data/claims.yaml``, checked: every claim has its fields, a known measure, a readable
    bound and known deciding regimes; ids are unique. A bad entry raises ValueError naming it."""
    import yaml

    raw = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    targets = {str(k): str(v) for k, v in (raw.get("targets") or {}).items()}
    claims, seen = [], set()
    for i, c in enumerate(raw.get("claims") or []):
        where = f"{path}: claim {c.get('id', i)}"
        missing = [k for k in ("id", "paper", "source", "tested_by", "measure", "decides")
                   if k not in c]
        if missing:
            raise ValueError(f"{where} lacks {', '.join(missing)}")
        if c["id"] in seen:
            raise ValueError(f"{where}: the id is used twice")
        seen.add(c["id"])
        name = c["measure"].get("name")
        if name != "none" and name not in MEASURES:
            raise ValueError(f"{where}: measure {name!r} is not one of {sorted(MEASURES)}")
        bad = [d for d in c["decides"] if d not in DECIDE_SETS and not
               str(d).startswith(f"{REPLAY}:")]
        if bad:
            raise ValueError(f"{where}: decides {bad}: each is one of {DECIDE_SETS} or "
                             "replay:<device>")
        if not c["decides"] and not c.get("why"):
            raise ValueError(f"{where}: no deciding regime, and no `why`")
        claim = Claim(str(c["id"]), " ".join(str(c["paper"]).split()), str(c["source"]),
                      " ".join(str(c["tested_by"]).split()), dict(c["measure"]),
                      dict(c.get("bound") or {}), tuple(c["decides"]),
                      " ".join(str(c.get("why", "")).split()))
        if name != "none":
            if not claim.bound:
                raise ValueError(f"{where}: a measured claim needs a bound")
            for t in claim.bound.get("by_target", {None: None}):
                claim.bound_for(t)  # parses, or raises naming the claim
        claims.append(claim)
    return Ledger(tuple(claims), targets)


# -- evaluation -------------------------------------------------------------------------------


@dataclass
class RegimeResult:
    regime: str
    label: str
    verdict: str
    why: str = ""
    bound: str = ""
    values: list[dict[str, Any]] = field(default_factory=list)
    decides: bool = False

    @property
    def text(self) -> str:
        return "; ".join((f"{v['group']}: " if v.get("group") else "") + value_of(v).text()
                         for v in self.values)


def judge(claim: Claim, regime: Regime, options: Any, targets: Mapping[str, str]) -> RegimeResult:
    """One claim in one regime: its values and its verdict by :func:`verdict`."""
    res = RegimeResult(regime.name, regime.label, NOT_TESTABLE,
                       decides=regime.decided_by(claim.decides, targets))
    name = claim.measure.get("name")
    if name == "none":
        res.why = claim.why
        return res
    bound = claim.bound_for(regime.paper_target)
    if bound is None:
        res.why = ("the paper's bound is per target, and it states none for "
                   + (regime.paper_target or "a regime that reconstructs none of its targets"))
        return res
    res.bound = bound.text()
    args = {k: v for k, v in claim.measure.items() if k != "name"}
    if bound.width is not None:
        args["width"] = bound.width
    try:
        got = MEASURES[name](regime, options, **args)
    except NotMeasured as e:
        res.why = str(e)
        return res
    except (KeyError, ValueError, TypeError) as e:  # a measure's bug is shown, not hidden
        res.why = f"the measure failed: {type(e).__name__}: {e}"
        import sys

        print(f"claims: {claim.id} in {regime.name}: {res.why}", file=sys.stderr)
        return res
    values = got if isinstance(got, list) else [got]
    if not values:
        res.why = "nothing left to measure"
        return res
    res.values = [value_record(v) for v in values]
    res.verdict = combine(verdict(v, bound) for v in values)
    return res


def evaluate(ledger: Ledger, regimes: list[Regime], options: Any) -> list[dict[str, Any]]:
    """Every claim in every regime, with its overall verdict and a one-line why."""
    out = []
    for c in ledger.claims:
        results = [judge(c, r, options, ledger.targets) for r in regimes]
        deciding = [r for r in results if r.decides]
        overall = combine(r.verdict for r in deciding) if deciding else NOT_TESTABLE
        if not c.decides:
            why = c.why
        elif not deciding:
            why = f"no regime of {', '.join(c.decides)} was run"
        elif overall == NOT_TESTABLE:
            why = "; ".join(sorted({f"{r.regime}: {r.why}" for r in deciding}))
        else:
            why = "; ".join(f"{r.regime} {r.verdict} ({r.text} against {r.bound})"
                            for r in deciding if r.verdict != NOT_TESTABLE)
        out.append({"id": c.id, "paper": c.paper, "source": c.source, "tested_by": c.tested_by,
                    "decides": list(c.decides), "verdict": overall, "why": why,
                    "regimes": [asdict(r) | {"text": r.text} for r in results]})
    return out


# -- replay against reality (issue 33, item 3) ------------------------------------------------


def replay_vs_real(summary: Mapping[str, Any] | None, real_tok_s: Mapping[str, float],
                   device: str, real_cap: int | None,
                   real_tokens_per_round: Mapping[str, float] | None = None,
                   groups: Mapping[str, list[str]] | None = None) -> list[dict[str, Any]]:
    """Each arm both run on this machine (``real_tok_s``: its decode tok/s) and replayed under
    ``device`` (the replay summary's ``tokens_per_s``), with their ratio and whether it is
    within 5%. Where the real run counted its rounds (``real_tokens_per_round``), the ratio is
    split into its two factors: tokens per round (what was accepted) and seconds per round
    (what the device model charged), replay over real.

    Where ``groups`` (``run.groups``: arms whose servers ran interleaved, reply by reply) puts
    an arm with a reference (the group's first arm both run and replayed), the ratio is also
    given relative to it: ``(replay / replay of the reference) / (real / real of the
    reference)``. Interleaved arms share the machine's speed at each moment, so this ratio is
    free of the machine's drift between the survey and the run, which the plain ratio is not;
    it tests what a replay's verdicts rest on, one arm's speed against another's."""
    if not summary:
        return []
    # the replay at the run's cap where the replay stage made one, else the labelled cap's
    replayed = summary.get("reality") or (summary.get("replays") or {}).get(device) or {}
    rows = []
    for arm, r in replayed.items():
        real = real_tok_s.get(arm)
        rep = r.get("tokens_per_s")
        if real is None or rep is None or not (real > 0):
            continue
        ratio = round(float(rep) / float(real), 4)
        rows.append({"arm": arm, "real_tok_s": round(float(real), 3),
                     "replay_tok_s": round(float(rep), 3), "replay_over_real": ratio,
                     "within_5pct": bool(abs(ratio - 1.0) <= 0.05 + 1e-9),
                     "device": device, "real_cap": real_cap,
                     "replay_cap": r.get("cap") or summary.get("cap")})
        tpr = (real_tokens_per_round or {}).get(arm)
        if tpr and r.get("tokens_per_round"):
            tpr_ratio = float(r["tokens_per_round"]) / float(tpr)
            rows[-1] |= {"real_tokens_per_round": round(float(tpr), 3),
                         "replay_tokens_per_round": round(float(r["tokens_per_round"]), 3),
                         "tokens_per_round_ratio": round(tpr_ratio, 4),
                         "seconds_per_round_ratio": round(tpr_ratio / ratio, 4)}
    by_arm = {r["arm"]: r for r in rows}
    for members in (groups or {}).values():
        both = [a for a in members if a in by_arm]
        for a in both:  # the reference: the group's first arm both run and replayed
            rel = by_arm[a]["replay_over_real"] / by_arm[both[0]]["replay_over_real"]
            by_arm[a] |= {"reference": both[0], "relative_to_reference": round(rel, 4),
                          "relative_within_5pct": bool(abs(rel - 1.0) <= 0.05 + 1e-9)}
    return rows


# -- outputs ----------------------------------------------------------------------------------


def claims_markdown(claims: list[dict[str, Any]], reality: list[dict[str, Any]],
                    regimes: list[Regime],
                    price_checks: Mapping[str, Any] | None = None) -> str:
    """``paper/claims.md``: the rule, one line per claim, then every regime's numbers, replay
    against reality and, where the replay stage made it, cpu-measured's prices against the
    instrumented runs' own rounds (:func:`adaspark.replay.price_check.price_check`)."""
    def esc(s: str) -> str:
        return str(s).replace("|", "\\|").replace("\n", " ")

    lines = ["# The paper's claims, one verdict each", "",
             "Every claim below is tested by this project's outputs; a verdict follows from the "
             "numbers by one rule:", "", f"> {RULE}", "",
             "Regimes: " + "; ".join(
                 f"`{r.name}` ({'this machine, real runs' if r.kind == CPU else 'REPLAY'}, "
                 f"{r.label}{', the paper’s ' + r.paper_target if r.paper_target else ''})"
                 for r in regimes) + ". A replayed number is this machine's acceptance priced "
             "by a device model; a reconstructed model is read from the paper's figures.", "",
             "| claim | the paper | deciding regimes | verdict | why |", "|---|---|---|---|---|"]
    for c in claims:
        lines.append(f"| `{c['id']}` | {esc(c['paper'])} | {esc(', '.join(c['decides']) or '-')}"
                     f" | **{c['verdict']}** | {esc(c['why'])} |")
    lines += ["", "## Every regime", ""]
    for c in claims:
        lines += [f"### `{c['id']}`: {c['verdict']}", "", f"{c['paper']} ({c['source']}). "
                  f"Tested by: {c['tested_by']}.", "",
                  "| regime | label | decides | bound | ours | verdict | why |",
                  "|---|---|---|---|---|---|---|"]
        for r in c["regimes"]:
            lines.append(f"| {r['regime']} | {r['label']} | {'yes' if r['decides'] else ''} | "
                         f"{esc(r['bound'])} | {esc(r['text'])} | {r['verdict']} | "
                         f"{esc(r['why'])} |")
        lines.append("")
    lines += ["## Replay against reality", "",
              "Each arm run on this machine and replayed under `cpu-measured` (the device model "
              "fitted from this machine's survey and instrumented run): replayed over real "
              "decode tok/s. The replay's replies are the labelled run's (its own cap); the real"
              " run's are the run stage's (its cap).", "",
              "| arm | real tok/s | replay tok/s | replay / real | within 5% | caps (real, replay)"
              " | tokens per round (real, replay) | replay / real: tokens per round, seconds per"
              " round | relative to (interleaved) | relative within 5% |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for r in reality:
        split = (f"{r['real_tokens_per_round']:.2f}, {r['replay_tokens_per_round']:.2f} | "
                 f"{r['tokens_per_round_ratio']:.3f}, {r['seconds_per_round_ratio']:.3f}"
                 if "tokens_per_round_ratio" in r else "- | -")
        rel = (f"{r['relative_to_reference']:.3f} ({r['reference']}) | "
               f"{'yes' if r['relative_within_5pct'] else 'no'}"
               if "reference" in r else "- | -")
        lines.append(f"| {r['arm']} | {r['real_tok_s']:.2f} | {r['replay_tok_s']:.2f} | "
                     f"{r['replay_over_real']:.3f} | {'yes' if r['within_5pct'] else 'no'} | "
                     f"{r['real_cap']}, {r['replay_cap']} | {split} | {rel} |")
    if not reality:
        lines.append("| (no arm both run and replayed under cpu-measured) | | | | | | | | | |")
    else:
        lines += ["", "The relative column divides each arm's ratio by that of the first arm of"
                  " its interleaved group (`run.groups`) both run and replayed: the group's "
                  "servers ran reply by reply together, so it cancels the machine's speed drift "
                  "between the survey and the run."]
    if price_checks:
        lines += ["", "cpu-measured's prices against each instrumented run's own rounds (fast "
                  "mode; the same rounds on both sides, so acceptance plays no part): priced over"
                  " measured seconds, summed over the rounds, per term of a round. `rest` is the "
                  "round less its verify and its drafter (the rule, the commit, the streaming), "
                  "what the model's host time stands for.", "",
                  "| arm | rounds | verify | draft | rest | round |", "|---|---|---|---|---|---|"]
        for arm, c in price_checks.items():
            r = c["priced_over_real"]
            lines.append(f"| {arm} | {c['rounds']} | " + " | ".join(
                "-" if r[k] is None else f"{r[k]:.3f}" for k in ("verify", "draft", "rest",
                                                                 "round")) + " |")
    return "\n".join(lines) + "\n"


def metrics(claims: list[dict[str, Any]], reality: list[dict[str, Any]],
            decode_tok_s: Mapping[str, float]) -> dict[str, Any]:
    """The headline numbers DVC shows (``dvc metrics show``): each arm's decode tok/s, each
    claim's verdict and its deciding regimes' estimates, replay over real per arm."""
    code = {HOLDS: 1, INCONCLUSIVE: 0, FAILS: -1, NOT_TESTABLE: None}
    out: dict[str, Any] = {"decode_tok_s": {a: round(float(v), 3)
                                            for a, v in sorted(decode_tok_s.items())},
                           "claims": {}, "replay_over_real": {}}
    for c in claims:
        entry: dict[str, Any] = {"verdict": c["verdict"], "holds": code[c["verdict"]]}
        for r in c["regimes"]:
            if r["decides"] and r["values"]:
                v = min(r["values"], key=lambda x: x["estimate"])
                entry[r["regime"]] = round(float(v["estimate"]), 4)
        out["claims"][c["id"]] = entry
    for r in reality:
        out["replay_over_real"][r["arm"]] = r["replay_over_real"]
    return out


