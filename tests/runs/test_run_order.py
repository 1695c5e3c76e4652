"""The run order (issue 12): which arm serves which reply in which order, the rotation, each
arm's request sequence identical to the sequential run's; the units a run list makes; the
settings' checks; one arm's walk over a partly stored plan (the resume). Synthetic inputs with
known answers, and the vendored test set's plans; no server."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from helpers import run_defaults

from adaspark.config import ConfigError
from adaspark.config_check import validate
from adaspark.runs.conversation import plan_subset
from adaspark.runs.order import (
    ROTATION,
    RunUnit,
    interleave,
    plan_units,
    protocol_slots,
    rotation,
)
from adaspark.runs.run import ArmWalk
from adaspark.runs.settings import RunConfigError, RunError, RunSettings, check_groups
from adaspark.testset import load_checked_sets

REPO = Path(__file__).resolve().parents[2]


class ListWalk:
    """A walk over a fixed list of keys (an arm whose replies are known in advance)."""

    def __init__(self, keys: list[str]) -> None:
        self.keys = list(keys)
        self.sent: list[str] = []

    def next_key(self) -> str | None:
        return self.keys[len(self.sent)] if len(self.sent) < len(self.keys) else None

    def send(self) -> None:
        self.sent.append(self.keys[len(self.sent)])


def _serve(slots: list[str], walks: list[ListWalk]) -> list[tuple[int, str]]:
    order = []
    for i, key in interleave(slots, walks):
        walks[i].send()
        order.append((i, key))
    return order


def test_rotation_starts_reply_k_at_arm_k_mod_n():
    assert rotation(0, 3) == [0, 1, 2]
    assert rotation(1, 3) == [1, 2, 0]
    assert rotation(5, 3) == [2, 0, 1]
    assert rotation(7, 1) == [0]


def test_interleave_known_order_with_skipped_replies():
    """Slots a0 a1 b0 b1 c0 (a1, b1: a tool turn's second reply); arm 1 has no a1 (answered
    without a call), arm 0 no b1 (stored already, or no call)."""
    slots = ["a0", "a1", "b0", "b1", "c0"]
    walks = [ListWalk(["a0", "a1", "b0", "c0"]), ListWalk(["a0", "b0", "b1", "c0"]),
             ListWalk(slots)]
    assert _serve(slots, walks) == [
        (0, "a0"), (1, "a0"), (2, "a0"),   # k=0: arm 0 first
        (2, "a1"), (0, "a1"),              # k=1: arm 1 first, but it has no a1
        (2, "b0"), (0, "b0"), (1, "b0"),   # k=2
        (1, "b1"), (2, "b1"),              # k=3: arm 0 first, but it has no b1
        (1, "c0"), (2, "c0"), (0, "c0"),   # k=4
    ]


@pytest.mark.parametrize("seed", range(6))
def test_each_arm_sends_its_sequential_sequence(seed):
    """Random arms (each a random subsequence of the slots): interleaved, every arm's requests
    are its own list in order (what it sends alone); every slot all arms make starts at arm
    k mod n; one arm alone is the sequential run."""
    rng = random.Random(seed)
    slots = [f"s{k}" for k in range(rng.randint(5, 30))]
    n = rng.randint(2, 6)
    lists = [[s for s in slots if rng.random() < 0.8] for _ in range(n)]
    order = _serve(slots, [ListWalk(x) for x in lists])
    for i, keys in enumerate(lists):
        assert [k for j, k in order if j == i] == keys
        assert _serve(slots, [ListWalk(keys)]) == [(0, k) for k in keys]
    for k, slot in enumerate(slots):
        served = [j for j, s in order if s == slot]
        makers = [i for i in rotation(k, n) if slot in lists[i]]
        assert served == makers
        if len(makers) == n:
            assert served[0] == k % n
    keys = [s for _, s in order]
    assert keys == sorted(keys, key=slots.index)  # slot after slot, never back


def test_interleave_refuses_a_walk_that_does_not_move_or_leaves_the_protocol():
    class Stuck(ListWalk):
        def send(self) -> None:
            pass

    with pytest.raises(RunError, match="did not move past"):
        for _ in interleave(["a", "b"], [Stuck(["a"])]):
            pass
    with pytest.raises(RunError, match="left unsent"):
        _serve(["a", "b"], [ListWalk(["a", "x"])])


def test_plan_units():
    entries = ["llamacpp-ar", "ar", "chain3", "tree16", "adaspark", "adaspark@2"]
    groups = {"g": ["chain3", "adaspark", "ar"], "other": ["fullchain", "tree16"]}
    assert plan_units(entries, "sequential", groups) == [RunUnit((e,)) for e in entries]
    assert plan_units(entries, "interleaved", groups) == [
        RunUnit(("llamacpp-ar",)),
        RunUnit(("chain3", "adaspark", "ar"), "g"),   # where its first member stands
        RunUnit(("tree16",)),                        # alone among the entries: sequential
        RunUnit(("adaspark@2",)),                    # a repeat runs alone, after its group
    ]
    with pytest.raises(RunConfigError, match=r"run\.order must be one of sequential, interleaved"):
        plan_units(entries, "alternate", groups)
    with pytest.raises(RunError, match="twice"):
        plan_units(["ar", "ar"], "interleaved", groups)


def test_the_record_names_the_order_group_and_rotation():
    assert RunUnit(("ar",)).record("ar") == {"order": "sequential"}
    assert RunUnit(("ar",), "g").record("ar") == {"order": "sequential"}  # a group of one
    assert RunUnit(("ar", "chain3"), "g").record("chain3") == {
        "order": "interleaved", "group": "g", "arms": ["ar", "chain3"], "position": 1,
        "rotation": ROTATION}


def test_groups_and_order_are_checked_with_clear_errors():
    assert check_groups({"g": ["ar", "chain3"]}) == {"g": ["ar", "chain3"]}
    with pytest.raises(RunConfigError, match=r"repeat entry 'adaspark@2'.*list 'adaspark'"):
        check_groups({"g": ["ar", "adaspark@2"]})
    with pytest.raises(RunConfigError, match="'ar' is in groups 'g' and 'h'"):
        check_groups({"g": ["ar"], "h": ["chain3", "ar"]})
    with pytest.raises(RunConfigError, match=r"run.groups.g=.*a list of arm names"):
        check_groups({"g": "ar"})
    with pytest.raises(ConfigError, match=r"run.order='alternate' is not allowed.*interleaved"):
        RunSettings.check(run_defaults(order="alternate"))
    s = RunSettings.check(run_defaults(order="interleaved", groups={"g": ["ar", "chain3"]}))
    assert (s.order, s.groups) == ("interleaved", {"g": ["ar", "chain3"]})
    with pytest.raises(ConfigError, match=r"run.groups.g names the arm 'chian3'"):
        validate({"arms": {"ar": {"name": "ar", "width_rule": "ar"}},
                  "run": run_defaults(groups={"g": ["ar", "chian3"]})}, command="stage")


def test_protocol_slots_of_the_smoke_subset():
    """ToolACE's turn has a recorded tool result: its second reply is a slot."""
    plan = plan_subset(load_checked_sets(REPO / "data" / "testset"), "smoke")
    assert protocol_slots(plan) == [("specbench", "sb-coding-1", 0, 0),
                                    ("toolace", "ta-1", 0, 0), ("toolace", "ta-1", 0, 1)]


def _row(text: str, calls: str = "") -> dict:
    return {"text": text, "tool_calls": calls}


def test_a_walk_skips_stored_replies_and_carries_them_as_history():
    """The resume: a stored conversation is skipped; in a partly stored one the next reply is
    sent with the stored replies as the assistant's messages."""
    plan = plan_subset(load_checked_sets(REPO / "data" / "testset"), "short")
    sb, wc = plan[0], plan[2]
    done = {("specbench", sb.conversation.name, 0, 0): _row("first"),
            ("specbench", sb.conversation.name, 1, 0): _row("second"),
            ("wildchat", wc.conversation.name, 0, 0): _row("stored reply")}
    walk = ArmWalk(plan, done)
    assert walk.next_key() == ("speedbench", plan[1].conversation.name, 0, 0)
    walk.answer({"role": "assistant", "content": "sp"})
    assert walk.next_key() == ("wildchat", wc.conversation.name, 1, 0)
    assert walk.request().messages == [
        {"role": "user", "content": wc.conversation.turns[0].text},
        {"role": "assistant", "content": "stored reply"},
        {"role": "user", "content": wc.conversation.turns[1].text}]
    sent = []
    while walk.next_key() is not None:
        sent.append(walk.next_key())
        walk.answer({"role": "assistant", "content": "x"})  # no tool call: no second reply
    slots = protocol_slots(plan)
    assert sent == [k for k in slots[slots.index(sent[0]):] if k[3] == 0]


def test_the_run_stage_refuses_a_bad_group_list_or_out_before_any_server(tmp_path, capsys):
    from omegaconf import OmegaConf

    from adaspark.config import to_dict
    from adaspark.runs.run import compose_for_run
    from adaspark.stages import run as run_stage

    cfg = compose_for_run(["target=tiny", "drafter=tiny-truncated", "run.testset=data/testset",
                           "run_arms=[ar,chain3]", "run.order=interleaved",
                           "run.groups.default=[ar,chain3]"])
    params = tmp_path / "params.yaml"
    OmegaConf.save(OmegaConf.create(to_dict(cfg)), params)
    argv = ["--arm", "ar", "--params", str(params)]
    assert run_stage.main([*argv, "--out", str(tmp_path / "ar"),
                           "--group-from", "extra_runs.heldout.arms"]) == 1
    assert "not a list holding the arm 'ar'" in capsys.readouterr().err
    assert run_stage.main([*argv, "--out", str(tmp_path / "arm-ar"),
                           "--group-from", "run_arms"]) == 1
    assert "--out must end in /ar" in capsys.readouterr().err
    assert not any(tmp_path.glob("*ar*/run.json"))
