"""Statistics module (§4.1; Tables 3, 4, 6, 8, 9) on synthetic data with known answers."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest

from adaspark.analysis import bootstrap, stats, throughput
from adaspark.analysis.bootstrap import StatsInputError
from adaspark.analysis.stats import Comparison


def row(
    arm: str,
    conversation: str,
    decode_tps: float,
    *,
    turn: int = 0,
    reply: int = 0,
    repeat: int = 1,
    source: str = "spec-bench",
    status: str = "finished",
    completion_tokens: int = 101,
    prompt_tokens: int = 100,
) -> dict[str, object]:
    return {
        "arm": arm,
        "repeat": repeat,
        "set": source,
        "conversation": conversation,
        "turn": turn,
        "reply": reply,
        "status": status,
        "decode_tps": decode_tps,
        "completion_tokens": completion_tokens,
        "prompt_tokens": prompt_tokens,
    }


def pair_frame(
    ratios_by_conversation: dict[str, list[float]], speed_b: float = 10.0
) -> pd.DataFrame:
    """Arms ``a`` and ``b``; reply i of conversation c has speed ratio ratios[c][i]."""
    rows = []
    for conv, ratios in ratios_by_conversation.items():
        for turn, ratio in enumerate(ratios):
            rows.append(row("a", conv, speed_b * ratio, turn=turn))
            rows.append(row("b", conv, speed_b, turn=turn))
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------------------------------
# Ratio and interval computed by hand


def test_two_conversations_by_hand() -> None:
    # Ratios 1 and 4: geometric mean 2. Resamples of two conversations give 1 (AA, p=1/4),
    # 2 (AB or BA, p=1/2) or 4 (BB, p=1/4); the 2.5% and 97.5% percentiles are 1 and 4.
    result = stats.compare(pair_frame({"A": [1.0], "B": [4.0]}), "a", "b", seed=7)
    assert result.ratio == pytest.approx(2.0)
    assert result.lo == pytest.approx(1.0)
    assert result.hi == pytest.approx(4.0)
    assert (result.n_replies, result.n_conversations) == (2, 2)
    assert (result.seed, result.n_resamples, result.resample_unit) == (7, 2000, "conversation")


def test_unequal_conversations_bootstrap_distribution_by_hand() -> None:
    # Conversation A: one reply at ratio 1; B: three replies at ratio 8. Over all four replies
    # the geometric mean is 8**(3/4). Resamples: AA -> 1 (1/4), AB/BA -> 8**(3/4) (1/2),
    # BB -> 8 (1/4): a reply-weighted mean, not a mean of conversation means (which would be
    # sqrt(8)).
    log_ratios = [0.0, math.log(8), math.log(8), math.log(8)]
    clusters = ["A", "B", "B", "B"]
    ratio, lo, hi, boot = bootstrap.bootstrap_geomean(log_ratios, clusters, seed=3)
    assert ratio == pytest.approx(8**0.75)
    assert (lo, hi) == (pytest.approx(1.0), pytest.approx(8.0))
    assert len(boot) == 2000
    share = {value: np.mean(np.isclose(boot, value)) for value in (1.0, 8**0.75, 8.0)}
    assert sum(share.values()) == pytest.approx(1.0)
    assert share[1.0] == pytest.approx(0.25, abs=0.04)
    assert share[8**0.75] == pytest.approx(0.5, abs=0.04)
    assert share[8.0] == pytest.approx(0.25, abs=0.04)


def test_interval_matches_enumerated_bootstrap_distribution() -> None:
    # Four conversations, 4**4 = 256 equally likely ordered resamples: enumerate the exact
    # bootstrap distribution and check the Monte Carlo percentiles fall within its quantiles
    # at 2.5% +- 1.5% and 97.5% +- 1.5% (over 4 binomial standard errors at 2,000 resamples).
    conversations = {"A": [0.8], "B": [1.1, 1.3], "C": [1.6], "D": [2.0, 2.4, 2.2]}
    sums = {c: sum(math.log(r) for r in rs) for c, rs in conversations.items()}
    sizes = {c: len(rs) for c, rs in conversations.items()}
    exact = sorted(
        math.exp(sum(sums[c] for c in draw) / sum(sizes[c] for c in draw))
        for draw in itertools.product(conversations, repeat=4)
    )

    def exact_quantile(p: float) -> float:
        return exact[math.ceil(p * len(exact)) - 1]

    result = stats.compare(pair_frame(conversations), "a", "b", seed=11)
    all_logs = [math.log(r) for rs in conversations.values() for r in rs]
    assert result.ratio == pytest.approx(math.exp(np.mean(all_logs)))
    tol = 1e-9  # the same resample summed in another order differs in the last bits
    assert exact_quantile(0.010) - tol <= result.lo <= exact_quantile(0.040) + tol
    assert exact_quantile(0.960) - tol <= result.hi <= exact_quantile(0.990) + tol
    assert result.lo < result.ratio < result.hi


def test_interval_collapses_when_every_conversation_has_the_same_ratio() -> None:
    conversations = {f"c{i}": [1.5] * (1 + i % 3) for i in range(6)}
    frame = pair_frame(conversations)
    # Different absolute speeds per reply, the same ratio: the interval is the point.
    frame.loc[frame["turn"] == 1, "decode_tps"] *= 3.0
    result = stats.compare(frame, "a", "b", seed=1)
    assert result.ratio == pytest.approx(1.5)
    assert result.lo == pytest.approx(1.5)
    assert result.hi == pytest.approx(1.5)
    assert result.n_conversations == 6


# ---------------------------------------------------------------------------------------------
# Exclusions


def exclusion_frame() -> pd.DataFrame:
    nan = float("nan")
    specs = [
        # conversation, turn, (status_a, tps_a), (status_b, tps_b)
        ("c1", 0, ("finished", 20.0), ("finished", 10.0)),  # kept, ratio 2
        ("c1", 1, ("cut", 40.0), ("cut", 20.0)),  # kept (cut), ratio 2
        ("c2", 0, ("finished", 30.0), ("cut", 15.0)),  # kept (cut in b), ratio 2
        ("c2", 1, ("looped", 900.0), ("finished", 10.0)),  # looped in a
        ("c3", 0, ("finished", 10.0), ("looped", nan)),  # looped in b
        ("c3", 1, ("looped", 500.0), ("looped", 400.0)),  # looped in both
        ("c4", 0, ("single-delta", nan), ("finished", 10.0)),  # single-delta in a
        ("c4", 1, ("finished", 1.0), ("single-delta", nan)),  # single-delta in b
        ("c5", 0, ("looped", 50.0), ("single-delta", nan)),  # looped wins: counted once
    ]
    rows = []
    for conv, turn, (status_a, tps_a), (status_b, tps_b) in specs:
        rows.append(row("a", conv, tps_a, turn=turn, status=status_a))
        rows.append(row("b", conv, tps_b, turn=turn, status=status_b))
    return pd.DataFrame(rows)


def test_exclusions_are_counted_and_left_out() -> None:
    result = stats.compare(exclusion_frame(), "a", "b", seed=0)
    assert result.n_looped_excluded == 4
    assert result.n_single_delta_excluded == 2
    assert result.n_cut == 2
    assert result.n_replies == 3
    assert result.n_conversations == 2
    # Every kept reply has ratio 2; any excluded reply would move it.
    assert result.ratio == pytest.approx(2.0)
    assert (result.lo, result.hi) == (pytest.approx(2.0), pytest.approx(2.0))


def test_unpaired_replies_are_counted() -> None:
    frame = pair_frame({"A": [2.0], "B": [2.0]})
    extra = row("a", "B", 50.0, turn=0, reply=1)  # a tool answer only arm a produced
    frame = pd.concat([frame, pd.DataFrame([extra])], ignore_index=True)
    result = stats.compare(frame, "a", "b")
    assert result.n_unpaired == 1
    assert result.n_replies == 2
    assert result.ratio == pytest.approx(2.0)


def test_count_looped_over_arms() -> None:
    frame = exclusion_frame()
    assert stats.count_looped(frame, ["a"]) == 3
    assert stats.count_looped(frame, ["b"]) == 2
    assert stats.count_looped(frame, ["a", "b"]) == 4


# ---------------------------------------------------------------------------------------------
# Repeats


def test_repeats_are_averaged_per_reply() -> None:
    frame = pd.DataFrame(
        [
            row("ada", "c1", 10.0, repeat=1),
            row("ada", "c1", 30.0, repeat=2),
            row("ref", "c1", 10.0),
            row("ada", "c2", 12.0, repeat=1),
            row("ada", "c2", 36.0, repeat=2),
            row("ref", "c2", 12.0),
        ]
    )
    speeds = stats.arm_speeds(frame, "ada")
    assert speeds["decode_tps"].tolist() == pytest.approx([20.0, 24.0])
    assert speeds["n_repeats"].tolist() == [2, 2]
    # Arithmetic mean of the two runs' speeds (20 = (10 + 30) / 2), then the ratio: 2, not the
    # geometric mean of run ratios (sqrt(3)) nor either run alone (1 or 3).
    result = stats.compare(frame, "ada", "ref")
    assert result.ratio == pytest.approx(2.0)
    assert stats.compare(frame, "ada@2", "ada@1").ratio == pytest.approx(3.0)


def test_repeats_named_with_at_suffix() -> None:
    frame = pd.DataFrame(
        [
            row("ada@1", "c1", 10.0),
            row("ada@2", "c1", 30.0),
            row("ref", "c1", 10.0),
        ]
    )
    assert stats.compare(frame, "ada", "ref").ratio == pytest.approx(2.0)
    assert stats.compare(frame, "ada@2", "ref").ratio == pytest.approx(3.0)
    assert stats.arm_speeds(frame, "ada")["n_repeats"].tolist() == [2]


def test_looped_in_one_repeat_is_looped_for_the_arm() -> None:
    frame = pd.DataFrame(
        [
            row("ada", "c1", 10.0, repeat=1, status="looped"),
            row("ada", "c1", 30.0, repeat=2),
            row("ref", "c1", 10.0),
            row("ada", "c2", 20.0, repeat=1),
            row("ada", "c2", 20.0, repeat=2, status="cut"),
            row("ref", "c2", 10.0),
        ]
    )
    speeds = stats.arm_speeds(frame, "ada")
    assert speeds["status"].tolist() == ["looped", "cut"]
    result = stats.compare(frame, "ada", "ref")
    assert (result.n_looped_excluded, result.n_cut, result.n_replies) == (1, 1, 1)
    assert result.ratio == pytest.approx(2.0)


# ---------------------------------------------------------------------------------------------
# Determinism and the resampling unit


def random_frame(
    n_conversations: int,
    replies_per_conversation: int,
    conversation_sd: float,
    reply_sd: float,
    seed: int,
) -> pd.DataFrame:
    """Log ratio = 0.3 + conversation effect + reply noise; arm b at 20 tok/s with noise."""
    rng = np.random.default_rng(seed)
    rows = []
    for c in range(n_conversations):
        effect = rng.normal(0.0, conversation_sd)
        for t in range(replies_per_conversation):
            speed_b = 20.0 * math.exp(rng.normal(0.0, 0.2))
            log_ratio = 0.3 + effect + rng.normal(0.0, reply_sd)
            rows.append(row("a", f"c{c}", speed_b * math.exp(log_ratio), turn=t))
            rows.append(row("b", f"c{c}", speed_b, turn=t))
    return pd.DataFrame(rows)


def test_seeded_determinism() -> None:
    frame = random_frame(12, 3, 0.2, 0.1, seed=5)
    first = stats.compare(frame, "a", "b", seed=123)
    again = stats.compare(frame.sample(frac=1.0, random_state=1), "a", "b", seed=123)
    other = stats.compare(frame, "a", "b", seed=124)
    assert first == again  # row order does not matter, the seed fixes the draws
    assert first.seed == 123
    assert other.ratio == first.ratio
    assert (other.lo, other.hi) != (first.lo, first.hi)


def test_conversation_resampling_widens_interval_under_correlation() -> None:
    # Strong conversation effect: 30 conversations of 6 replies. The reply-level bootstrap
    # treats the 180 replies as independent; resampling conversations gives about 2.4 times the
    # standard error here (sqrt((0.3**2 + 0.05**2 / 6) / 30) vs sqrt((0.3**2 + 0.05**2) / 180)).
    correlated = random_frame(30, 6, conversation_sd=0.3, reply_sd=0.05, seed=2)
    by_conv = stats.compare(correlated, "a", "b", seed=9)
    by_reply = stats.compare_reply_level(correlated, "a", "b", seed=9)
    assert by_reply.resample_unit == "reply"
    assert by_conv.ratio == pytest.approx(by_reply.ratio)
    width_conv = math.log(by_conv.hi) - math.log(by_conv.lo)
    width_reply = math.log(by_reply.hi) - math.log(by_reply.lo)
    assert width_conv > 1.8 * width_reply

    # Control: independent replies, no conversation effect; the two widths agree.
    independent = random_frame(30, 6, conversation_sd=0.0, reply_sd=0.3, seed=2)
    ind_conv = stats.compare(independent, "a", "b", seed=9)
    ind_reply = stats.compare_reply_level(independent, "a", "b", seed=9)
    ratio = (math.log(ind_conv.hi) - math.log(ind_conv.lo)) / (
        math.log(ind_reply.hi) - math.log(ind_reply.lo)
    )
    assert 0.6 < ratio < 1.5  # over 15 data seeds: 0.68-1.20 (correlated case: 2.3-2.5)


# ---------------------------------------------------------------------------------------------
# Grouping


def test_group_by_source() -> None:
    frame = pd.DataFrame(
        [
            row("a", "c1", 20.0, source="LongBench"),
            row("b", "c1", 10.0, source="LongBench"),
            row("a", "c2", 40.0, source="LongBench"),
            row("b", "c2", 10.0, source="LongBench"),
            row("a", "c1", 15.0, source="WildChat"),  # same conversation name, other source
            row("b", "c1", 10.0, source="WildChat"),
            row("a", "c3", 90.0, source="WildChat", status="looped"),
            row("b", "c3", 10.0, source="WildChat"),
        ]
    )
    groups = stats.compare(frame, "a", "b", by="set", seed=4)
    assert list(groups) == ["LongBench", "WildChat"]
    assert groups["LongBench"].ratio == pytest.approx(math.sqrt(8.0))
    assert groups["LongBench"].n_conversations == 2
    assert groups["WildChat"].ratio == pytest.approx(1.5)
    assert groups["WildChat"].n_looped_excluded == 1
    assert groups["WildChat"].group == "WildChat"
    overall = stats.compare(frame, "a", "b", seed=4)
    assert overall.n_conversations == 3  # conversations are (set, conversation)
    assert overall.ratio == pytest.approx((2.0 * 4.0 * 1.5) ** (1 / 3))


def test_group_by_context_band() -> None:
    # Context = prompt + half the reply: 2,047 is under, 2,048 and 5,050 are over.
    frame = pd.DataFrame(
        [
            row("a", "c1", 20.0, prompt_tokens=1997, completion_tokens=100),
            row("b", "c1", 10.0, prompt_tokens=1997, completion_tokens=100),
            row("a", "c2", 30.0, prompt_tokens=1998, completion_tokens=100),
            row("b", "c2", 10.0, prompt_tokens=1998, completion_tokens=100),
            row("a", "c3", 50.0, prompt_tokens=5000, completion_tokens=100),
            row("b", "c3", 10.0, prompt_tokens=5000, completion_tokens=100),
        ]
    )
    bands = stats.compare(frame, "a", "b", by="context_band")
    assert list(bands) == ["under 2,048", "2,048 and over"]
    assert bands["under 2,048"].n_replies == 1
    assert bands["under 2,048"].ratio == pytest.approx(2.0)
    assert bands["2,048 and over"].n_replies == 2
    assert bands["2,048 and over"].ratio == pytest.approx(math.sqrt(15.0))

    # The band of a reply can follow one arm's context (Table 3 counts AdaSpark's).
    frame.loc[(frame["arm"] == "a") & (frame["conversation"] == "c2"), "prompt_tokens"] = 100
    by_a = stats.compare(frame, "a", "b", by="context_band", context_arm="a")
    by_b = stats.compare(frame, "a", "b", by="context_band", context_arm="b")
    assert by_a["under 2,048"].n_replies == 2
    assert by_b["under 2,048"].n_replies == 1


def test_empty_group_is_nan_not_an_error() -> None:
    frame = pair_frame({"A": [2.0], "B": [3.0]})
    bands = stats.compare(frame, "a", "b", by="context_band")
    over = bands["2,048 and over"]
    assert over.n_replies == 0 and math.isnan(over.ratio) and over.format() == "–"
    assert bands["under 2,048"].format() == f"{math.sqrt(6):.2f}× [2.00, 3.00]"


# ---------------------------------------------------------------------------------------------
# Aggregate tok/s (Table 4)


def test_arm_throughput_by_hand() -> None:
    frame = pd.DataFrame(
        [
            # 10 decode tokens at 5 tok/s: 2 s; 20 decode tokens at 10 tok/s: 2 s.
            row("a", "c1", 5.0, completion_tokens=11),
            row("a", "c2", 10.0, completion_tokens=21, status="cut"),
            row("a", "c3", 1000.0, completion_tokens=8192, status="looped"),
            row("a", "c4", float("nan"), completion_tokens=30, status="single-delta"),
        ]
    )
    result = throughput.arm_throughput(frame, "a")
    assert result.tokens_per_s == pytest.approx(30.0 / 4.0)
    assert (result.decode_tokens, result.decode_s) == (pytest.approx(30.0), pytest.approx(4.0))
    assert (result.n_replies, result.n_looped_excluded) == (2, 1)
    assert (result.n_single_delta_excluded, result.n_cut) == (1, 1)


def test_arm_throughput_leaves_out_only_its_own_loops_and_averages_repeats() -> None:
    frame = pd.DataFrame(
        [
            row("ada", "c1", 4.0, repeat=1, completion_tokens=21, source="SB"),
            row("ada", "c1", 6.0, repeat=2, completion_tokens=21, source="SB"),
            row("ref", "c1", 1.0, status="looped", source="SB"),
            row("ada", "c2", 10.0, repeat=1, completion_tokens=11, source="LB"),
            row("ada", "c2", 10.0, repeat=2, completion_tokens=11, source="LB"),
        ]
    )
    # Mean speed 5 tok/s on c1 (20 tokens, 4 s) and 10 on c2 (10 tokens, 1 s).
    result = throughput.arm_throughput(frame, "ada")
    assert result.tokens_per_s == pytest.approx(30.0 / 5.0)
    assert result.n_replies == 2  # ref's loop on c1 does not remove ada's reply
    per_source = throughput.arm_throughput(frame, "ada", by="set")
    assert per_source["SB"].tokens_per_s == pytest.approx(5.0)
    assert per_source["LB"].tokens_per_s == pytest.approx(10.0)


def timed(r: dict[str, object], ttft_s: float, decode_s: float,
          drafter_prefill_s: float = float("nan")) -> dict[str, object]:
    """A row with the time columns the end-to-end aggregate reads (adaspark.runs.rows)."""
    return r | {"ttft_s": ttft_s, "decode_s": decode_s, "drafter_prefill_s": drafter_prefill_s}


def test_arm_end_to_end_by_hand() -> None:
    nan = float("nan")
    frame = pd.DataFrame(
        [
            # end to end 1 + 3 = 4 s, 2 + 2 = 4 s and 3 + 0 = 3 s (one token event): 70 tokens
            timed(row("a", "c1", 13.0, completion_tokens=40), 1.0, 3.0, 0.5),
            timed(row("a", "c2", 9.5, completion_tokens=20, status="cut"), 2.0, 2.0, 1.5),
            timed(row("a", "c4", nan, completion_tokens=10, status="single-delta"), 3.0, 0.0,
                  1.0),
            timed(row("a", "c3", 80.0, completion_tokens=8192, status="looped"), 1.0, 100.0),
            timed(row("a", "c5", nan, completion_tokens=5, status="single-delta"), nan, nan),
        ]
    )
    e = throughput.arm_end_to_end(frame, "a")
    assert e.tokens_per_s == pytest.approx(70.0 / 11.0)
    assert (e.tokens, e.e2e_s) == (pytest.approx(70.0), pytest.approx(11.0))
    assert e.median_ttft_s == pytest.approx(2.0)
    assert e.median_drafter_prefill_s == pytest.approx(1.0)
    assert (e.n_replies, e.n_looped_excluded, e.n_untimed_excluded) == (3, 1, 1)
    # the headline over the same rows leaves the single-delta reply out and times decode only
    assert throughput.arm_throughput(frame, "a").tokens_per_s == pytest.approx(58.0 / 5.0)


def test_arm_end_to_end_averages_runs_and_reads_files_without_the_prefill_column() -> None:
    frame = pd.DataFrame(
        [
            timed(row("ada", "c1", 5.0, repeat=1, completion_tokens=21), 1.0, 3.0),
            timed(row("ada", "c1", 5.0, repeat=2, completion_tokens=21), 3.0, 3.0),
            timed(row("ada", "c2", 5.0, repeat=1, completion_tokens=11), 0.5, 2.5),
            timed(row("ada", "c2", 5.0, repeat=2, completion_tokens=11), 0.5, 2.5),
        ]
    ).drop(columns="drafter_prefill_s")  # a replies file from before the column
    e = throughput.arm_end_to_end(frame, "ada")
    # c1: mean TTFT 2 s, mean end to end 5 s; c2: 0.5 s and 3 s
    assert e.tokens_per_s == pytest.approx(32.0 / 8.0)
    assert e.median_ttft_s == pytest.approx(1.25) and e.n_replies == 2
    assert math.isnan(e.median_drafter_prefill_s)
    assert throughput.arm_end_to_end(frame, "ada@2").tokens_per_s == pytest.approx(32.0 / 9.0)


def test_arm_end_to_end_refuses_rows_it_cannot_time() -> None:
    nan = float("nan")
    with pytest.raises(StatsInputError, match=r"lack column\(s\) \['ttft_s'\]"):
        throughput.arm_end_to_end(pd.DataFrame([timed(row("a", "c1", 5.0), 1.0, 2.0)])
                                  .drop(columns="ttft_s"), "a")
    untimed = pd.DataFrame([timed(row("a", "c1", nan, status="single-delta"), nan, nan)])
    with pytest.raises(StatsInputError, match="no reply with a time to first token"):
        throughput.arm_end_to_end(untimed, "a")


# ---------------------------------------------------------------------------------------------
# Bad input


def test_missing_columns() -> None:
    frame = pair_frame({"A": [2.0]}).drop(columns=["status", "prompt_tokens"])
    with pytest.raises(StatsInputError, match=r"lack column\(s\) \['status', 'prompt_tokens'\]"):
        stats.compare(frame, "a", "b")


def test_arm_not_present() -> None:
    expected = r"arm 'c' is not in the rows; arms present: \['a', 'b'\]"
    with pytest.raises(StatsInputError, match=expected):
        stats.compare(pair_frame({"A": [2.0]}), "a", "c")
    with pytest.raises(StatsInputError, match="not in the rows"):
        stats.arm_speeds(pair_frame({"A": [2.0]}), "a@2")


def test_no_replies_left() -> None:
    frame = pd.DataFrame([row("a", "c1", 10.0, status="looped"), row("b", "c1", 10.0)])
    with pytest.raises(StatsInputError, match=r"no reply .* left after exclusions"):
        stats.compare(frame, "a", "b")
    with pytest.raises(StatsInputError, match="no reply left after exclusions"):
        throughput.arm_throughput(frame, "a")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"status": "timeout"}, "unknown status"),
        ({"decode_tps": float("nan")}, "no positive finite decode_tps"),
        ({"decode_tps": -3.0}, "no positive finite decode_tps"),
        ({"decode_tps": "fast"}, "non-numeric"),
        ({"turn": 0.5}, "whole numbers"),
        ({"completion_tokens": -1}, "counts >= 0"),
    ],
)
def test_bad_values(change: dict[str, object], message: str) -> None:
    frame = pair_frame({"A": [2.0], "B": [3.0]}).astype({"decode_tps": object, "turn": object})
    for column, value in change.items():
        frame.loc[0, column] = value
    with pytest.raises(StatsInputError, match=message):
        stats.compare(frame, "a", "b")


def test_other_bad_input() -> None:
    frame = pair_frame({"A": [2.0]})
    with pytest.raises(StatsInputError, match="DataFrame"):
        stats.compare(frame.to_dict(), "a", "b")  # type: ignore[arg-type]
    with pytest.raises(StatsInputError, match="itself"):
        stats.compare(frame, "a", "a")
    with pytest.raises(StatsInputError, match="cannot group by 'source'"):
        stats.compare(frame, "a", "b", by="source")
    with pytest.raises(StatsInputError, match="n_resamples"):
        stats.compare(frame, "a", "b", n_resamples=0)
    with pytest.raises(StatsInputError, match="seed"):
        stats.compare(frame, "a", "b", seed=1.5)  # type: ignore[arg-type]
    with pytest.raises(StatsInputError, match="context_arm"):
        stats.compare(frame, "a", "b", by="context_band", context_arm="z")
    duplicated = pd.concat([frame, frame.iloc[[0]]], ignore_index=True)
    with pytest.raises(StatsInputError, match="repeat a \\(run, reply\\) pair"):
        stats.compare(duplicated, "a", "b")
    with pytest.raises(StatsInputError, match="no per-reply rows"):
        stats.compare(frame.iloc[0:0], "a", "b")
    with pytest.raises(StatsInputError, match="cluster labels"):
        bootstrap.bootstrap_geomean([0.1, 0.2], ["x"])


def test_comparisons_frame() -> None:
    groups = stats.compare(pair_frame({"A": [2.0], "B": [3.0]}), "a", "b", by="set")
    table = stats.comparisons_frame(groups)
    assert list(table["group"]) == ["spec-bench"]
    assert {"ratio", "lo", "hi", "n_replies", "seed", "n_resamples"} <= set(table.columns)
    assert isinstance(next(iter(groups.values())), Comparison)


# ---------------------------------------------------------------------------------------------
# scipy.stats.bootstrap against the hand-written resampler it replaced


def numpy_bootstrap_log(log_ratios: np.ndarray, clusters: list[object], *, seed: int,
                        n_resamples: int) -> np.ndarray:
    """The old implementation (numpy, before scipy): resampled mean log ratios over clusters."""
    codes = np.asarray(pd.factorize(pd.Series(clusters, dtype=object))[0])
    n = int(codes.max()) + 1
    cluster_sum = np.bincount(codes, weights=log_ratios, minlength=n)
    cluster_n = np.bincount(codes, minlength=n).astype(float)
    rng = np.random.default_rng(seed)
    block = max(1, 4_000_000 // n)
    boot = np.empty(n_resamples)
    for start in range(0, n_resamples, block):
        stop = min(n_resamples, start + block)
        draws = rng.integers(0, n, size=(stop - start, n))
        boot[start:stop] = cluster_sum[draws].sum(axis=1) / cluster_n[draws].sum(axis=1)
    return boot


def synthetic_log_ratios(seed: int) -> tuple[np.ndarray, list[object]]:
    """The log ratios and conversations of a synthetic run: 40 conversations of 1 to 5 replies,
    longer conversations faster (so a reply-weighted mean and a mean of conversation means
    differ), through the same per-reply speeds the tables use (:func:`stats.arm_speeds`)."""
    rng = np.random.default_rng(seed)
    rows = []
    for c in range(40):
        effect = rng.normal(0.08 * (c % 5), 0.2)
        for t in range(1 + c % 5):
            speed_b = 20.0 * math.exp(rng.normal(0.0, 0.2))
            ratio = math.exp(0.3 + effect + rng.normal(0.0, 0.1))
            rows += [row("a", f"c{c}", speed_b * ratio, turn=t), row("b", f"c{c}", speed_b, turn=t)]
    a = stats.arm_speeds(pd.DataFrame(rows), "a")
    b = stats.arm_speeds(pd.DataFrame(rows), "b")
    log_ratio = np.log(a["decode_tps"].to_numpy()) - np.log(b["decode_tps"].to_numpy())
    return log_ratio, list(a.index.get_level_values("conversation"))


def test_scipy_bootstrap_agrees_with_the_numpy_one_within_monte_carlo_error() -> None:
    # Two independent streams (different seeds) of n = 2,000 resamples each estimate the same
    # percentile q_p of the bootstrap distribution. An estimate's rank error is about
    # sqrt(p (1 - p) / n) in probability, the difference of two about sqrt(2) times that; allow
    # 4 of those (d = 0.0197 at p = 0.025). The tolerance in value is the width of
    # [q(p - d), q(p + d)] of a reference distribution of 200,000 resamples.
    n, p = 2000, 0.025
    log_ratios, clusters = synthetic_log_ratios(seed=21)
    ratio, lo, hi, boot = bootstrap.bootstrap_geomean(log_ratios, clusters, seed=101,
                                                      n_resamples=n)
    old = numpy_bootstrap_log(log_ratios, clusters, seed=202, n_resamples=n)
    old_lo, old_hi = np.exp(np.quantile(old, [p, 1 - p]))
    reference = np.exp(numpy_bootstrap_log(log_ratios, clusters, seed=303, n_resamples=200_000))
    d = 4 * math.sqrt(2 * p * (1 - p) / n)
    for got, want, level in ((lo, old_lo, p), (hi, old_hi, 1 - p)):
        below, above = np.quantile(reference, [level - d, level + d])
        assert abs(got - want) <= above - below, (level, got, want, above - below)
    assert ratio == pytest.approx(math.exp(log_ratios.mean()))
    assert len(boot) == n and lo < ratio < hi


def test_batches_bound_memory_without_changing_the_draws(monkeypatch: pytest.MonkeyPatch) -> None:
    log_ratios, clusters = synthetic_log_ratios(seed=4)
    whole = bootstrap.bootstrap_geomean(log_ratios, clusters, seed=9, n_resamples=500)
    monkeypatch.setattr(bootstrap, "MAX_DRAW_ELEMENTS", 7 * 40)  # batches of 7 resamples
    batched = bootstrap.bootstrap_geomean(log_ratios, clusters, seed=9, n_resamples=500)
    assert whole[:3] == batched[:3]
    np.testing.assert_array_equal(whole[3], batched[3])


def test_bca_is_an_option_and_is_recorded() -> None:
    frame = random_frame(30, 2, conversation_sd=0.3, reply_sd=0.1, seed=8)
    percentile = stats.compare(frame, "a", "b", seed=5)
    bca = stats.compare(frame, "a", "b", seed=5, method="BCa")
    assert (percentile.method, bca.method) == ("percentile", "BCa")
    assert bca.ratio == percentile.ratio
    assert bca.lo < bca.ratio < bca.hi
    assert (bca.lo, bca.hi) != (percentile.lo, percentile.hi)  # the same draws, another interval
    with pytest.raises(StatsInputError, match=r"one of \['percentile', 'BCa'\], got 'bca'"):
        stats.compare(frame, "a", "b", method="bca")  # type: ignore[arg-type]
