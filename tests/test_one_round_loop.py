"""One round loop (Algorithm 1) for every world: the simulator and the replay, given the same
inputs, step through :func:`adaspark.decoding.loop.run_rounds` to the same round records (the
engine against the replay is the replay's exactness check, ``tests/replay/test_replay_exact.py``);
and a request's session always ends the rule's request, also when a round raises."""

from __future__ import annotations

from dataclasses import asdict

import numpy as np
import pytest

from adaspark.decoding import loop
from adaspark.decoding.loop import RequestSession, run_rounds
from adaspark.decoding.round_trace import TraceRow
from adaspark.replay.labels import PromptLabels
from adaspark.replay.loop import replay_reply
from adaspark.replay.prices import RoundTimes
from adaspark.rules.adaspark.rule import AdaSparkRule
from adaspark.rules.adaspark.simulator import (
    DrafterProcess,
    Environment,
    Simulator,
    SimWorld,
    StepCost,
    TextProcess,
)
from adaspark.rules.base import make_rule

ENV = Environment(cost=StepCost(tops=(8, 16, 64), levels=(0.02, 0.03, 0.06)),
                  drafter=DrafterProcess(B=4, K=8), fixed=0.008, seed=5,
                  text=TextProcess(copy_start=0.05))
PROMPT_LEN, MAX_TOKENS = 300, 160


class SimPrices:
    """The simulator's prices as a replay pricer: D when the round drafted, the verify cost by
    rows and context, each with the request world's noise at the round's context."""

    def __init__(self, sim: Simulator, world: SimWorld) -> None:
        self.env, self.w = sim.env, world.w

    def begin_request(self, seq: int) -> None:
        pass

    def price(self, round_index: int, rows: int, context: int, drafted: int) -> RoundTimes:
        env, w = self.env, self.w
        fixed = (env.fixed * (1.0 + env.fixed_slope * context / 1000.0) * w.noise_fixed[context]
                 if drafted else 0.0)
        verify = env.cost(rows, context) * w.noise_verify[context]
        return RoundTimes(verify, fixed, env.draft_share * fixed, 0.0, fixed + verify)


def labels_of(sim: Simulator, world: SimWorld) -> PromptLabels:
    """The simulated request as labels: the world's text is the target's greedy text (held at its
    last token past its end, as the simulator's verify holds it), and the block at each anchor is
    the simulated drafter's (every anchor a reply of ``MAX_TOKENS`` can reach)."""
    w, B = world.w, sim.env.drafter.B
    text = w.text
    anchors = range(PROMPT_LEN - 1, PROMPT_LEN + MAX_TOKENS + ENV.max_rows)
    drafted = [sim.block(w, p + 1, B)[0] for p in range(PROMPT_LEN - 1, PROMPT_LEN + MAX_TOKENS)]
    blocks = drafted + [drafted[-1]] * (len(anchors) - len(drafted))  # past the reply: unused
    return PromptLabels(prompt=text[:PROMPT_LEN].tolist(),
                        next=np.array([text[min(p + 1, len(text) - 1)] for p in anchors]),
                        next_eog=np.zeros(len(anchors), dtype=bool),
                        blocks=np.stack([b.tokens for b in blocks]),
                        probs=np.stack([b.probs for b in blocks]),
                        confidence=np.stack([b.confidence for b in blocks]))


@pytest.mark.parametrize("rule_of", [
    lambda: AdaSparkRule(),
    lambda: make_rule("pinned", width=8),
    lambda: make_rule("chain", positions=3),
], ids=["adaspark", "pinned8", "chain3"])
def test_the_simulator_and_the_replay_give_the_same_round_records(rule_of) -> None:
    sim = Simulator(ENV)
    world = SimWorld(sim, sim.world(0, PROMPT_LEN, MAX_TOKENS))
    labels = labels_of(sim, world)
    simulated = RequestSession(rule_of(), list(world.committed), keep_records=True)
    with simulated:
        run_rounds(world, simulated, MAX_TOKENS, ENV.drafter.B)
    fresh = SimWorld(sim, sim.world(0, PROMPT_LEN, MAX_TOKENS))
    replayed = replay_reply(rule_of(), labels, MAX_TOKENS, SimPrices(sim, fresh), seq=0,
                            request_id=None, block_positions=ENV.drafter.B,
                            max_rows=ENV.max_rows, n_ctx=fresh.n_ctx)
    assert len(simulated.records) > 20
    assert [asdict(TraceRow.of(o)) for o in simulated.records] == [asdict(r) for r in
                                                                   replayed.rounds]
    assert simulated.tokens == replayed.tokens
    assert simulated.counts == replayed.counts
    assert simulated.decode_s == pytest.approx(replayed.decode_s)


def test_a_simulated_request_runs_through_the_one_loop(monkeypatch) -> None:
    calls = []
    real = loop.step_round

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(loop, "step_round", counted)
    reply = Simulator(ENV).run_request(make_rule("pinned", width=8), 0, PROMPT_LEN, 64)
    assert reply.rounds == len(calls) > 0


class Failing(RuntimeError):
    pass


def test_the_session_ends_the_rules_request_when_a_round_raises() -> None:
    rule = make_rule("pinned", width=8)
    ended = []
    rule.end_request = lambda: ended.append(1) or {"ended": True}  # type: ignore[method-assign]
    sim = Simulator(ENV)
    world = SimWorld(sim, sim.world(0, PROMPT_LEN, MAX_TOKENS))
    session = RequestSession(rule, list(world.committed))

    def stop(tokens: list[int]) -> None:
        raise Failing("the client went away")

    with pytest.raises(Failing), session:
        run_rounds(world, session, MAX_TOKENS, ENV.drafter.B, on_tokens=stop)
    assert ended == [1] and session.summary == {"ended": True} and session.rounds == 1
