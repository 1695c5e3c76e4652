"""Replay for batches (issue 37, item 7) on synthetic labels with known answers: the batch law
prices a step as one verify of all its rows (linear past the widest class); one client replays
exactly as the single-request replay; replies keep their text whatever shares their steps; and
AdaSpark's batch rule narrows the trees when rows stop being free."""

from __future__ import annotations

import pytest
from test_replay_loop import ENV, PROMPT, STEP_DEVICE, LongerWorlds, replay, sim_labels

from adaspark.replay.batch import BatchLaw, replay_load
from adaspark.replay.device import device_from_mapping
from adaspark.replay.prices import DevicePrices
from adaspark.rules.adaspark.batch import BatchChoiceOptions, BatchChooser
from adaspark.rules.adaspark.rule import AdaSparkRule
from adaspark.rules.base import make_rule

TOKENS = 160
B = ENV.drafter.B


@pytest.fixture(scope="module")
def labels():
    sim = LongerWorlds(ENV)
    return [sim_labels(sim, r, PROMPT, TOKENS) for r in range(8)]


def _device(**verify) -> object:
    return device_from_mapping({**STEP_DEVICE, "verify": verify})


def test_the_law_is_one_verify_of_all_rows_linear_past_the_widest_class() -> None:
    law = BatchLaw(device_from_mapping(STEP_DEVICE))  # 30 ms to 12 rows, 48 ms to 64
    assert law.verify_s([4, 4], [500, 900]) == pytest.approx(0.030)
    assert law.verify_s([8, 8], [500, 900]) == pytest.approx(0.048)
    assert law.verify_s([64, 64], [500, 500]) == pytest.approx(0.096)  # 48 ms x 128 / 64
    # the attention part at the rows' mean context: (3 x 1000 + 1 x 5000) / 4 = 2000 tokens
    ctx = BatchLaw(_device(rows=[64], alpha_ms=[10.0], beta_ms_per_1k=[5.0]))
    assert ctx.verify_s([3, 1], [1000, 5000]) == pytest.approx(0.020)
    assert "synthetic batch law" in law.label and "sim-step" in law.label
    with pytest.raises(ValueError, match="at least one row"):
        law.verify_s([], [])


@pytest.mark.parametrize("arm", ["chain", "adaspark"])
def test_one_client_replays_as_the_single_request_replay(labels, arm) -> None:
    def rule():
        return make_rule("chain", positions=3) if arm == "chain" else AdaSparkRule(ngram=False)

    device = device_from_mapping(STEP_DEVICE)
    one = replay(rule(), labels[:4], DevicePrices(device), TOKENS)
    load = replay_load(rule, labels[:4], clients=1, max_tokens=TOKENS, law=BatchLaw(device),
                       max_rows=64, block_positions=B)
    assert [s.tokens for s in load.replies] == [r.tokens for r in one]
    assert [[r.rows for r in s.records] for s in load.replies] == \
        [[r.rows for r in rep.rounds] for rep in one]
    assert [s.decode_s for s in load.replies] == pytest.approx([r.decode_s for r in one])
    assert load.seconds == pytest.approx(sum(r.decode_s for r in one))


def test_replies_keep_their_text_whatever_shares_their_steps(labels) -> None:
    law = BatchLaw(device_from_mapping(STEP_DEVICE))
    alone = replay_load(lambda: make_rule("chain", positions=3), labels, clients=1,
                        max_tokens=TOKENS, law=law, max_rows=64, block_positions=B)
    shared = replay_load(lambda: make_rule("chain", positions=3), labels, clients=4,
                         max_tokens=TOKENS, law=law, max_rows=64, block_positions=B)
    assert [s.tokens for s in shared.replies] == [s.tokens for s in alone.replies]
    assert max(len(s.rows) for s in shared.steps) == 4
    assert shared.summary()["requests_per_step"] > 3
    # four requests share a step that costs one verify's time: more tokens per second
    assert shared.aggregate_tps > 2 * alone.aggregate_tps


def test_adaspark_narrows_when_rows_stop_being_free(labels) -> None:
    """Rows free up to 64 in all, or only up to 4 (then ten times dearer): with four clients
    the batch rule gives each request far fewer rows under the second law."""
    out = {}
    for name, verify in (("free", {"rows": [64], "alpha_ms": [30.0], "beta_ms_per_1k": [0]}),
                         ("knee", {"rows": [4, 64], "alpha_ms": [30.0, 300.0],
                                   "beta_ms_per_1k": [0, 0]})):
        chooser = BatchChooser(BatchChoiceOptions(min_steps=4, refit_every=2))
        out[name] = replay_load(lambda: AdaSparkRule(ngram=False), labels, clients=4,
                                max_tokens=TOKENS, law=BatchLaw(_device(**verify)),
                                max_rows=16, block_positions=B, divider=chooser)
    free, knee = out["free"], out["knee"]
    assert any(s.shares is not None for s in knee.steps)  # the batch rule divided
    assert knee.rows_per_request_step < 0.5 * free.rows_per_request_step
    assert [s.tokens for s in knee.replies] == [s.tokens for s in free.replies]


def test_the_reports_batch_table_sets_each_arm_beside_the_best_other(tmp_path) -> None:
    from adaspark import io
    from adaspark.analysis.load import batch_replay_table, load_section

    rows = [{"device": d, "arm": a, "clients": n, "aggregate_tps": t, "replies": 8,
             "label": "synthetic batch law on reconstructed device model x"}
            for d, a, n, t in (("gpu", "ar", 4, 100.0), ("gpu", "adaspark", 4, 150.0),
                               ("gpu", "chain3", 4, 120.0), ("gpu", "ar", 8, 200.0),
                               ("gpu", "adaspark", 8, 180.0), ("cpu", "ar", 4, 10.0))]
    io.write_text(tmp_path / "batch" / "points.csv", io.csv_text(rows))
    table = batch_replay_table(tmp_path / "batch")
    assert table is not None
    # adaspark at N=4 over chain3 (the best other), ar at N=8 over adaspark; alone: no ratio
    assert list(table["over the best other arm"]) == ["0.67x", "1.25x", "0.80x", "1.11x",
                                                      "0.90x", ""]
    sec = load_section(tmp_path / "load", tmp_path / "batch")
    text = " ".join(str(b) for b in sec.blocks)
    assert "synthetic" in text and "Batch replay" in text
    assert batch_replay_table(tmp_path / "none") is None
