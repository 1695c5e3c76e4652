"""Device models for replay (issue 14, "Device models"; ``adaspark.replay.device``): Eq. (3) by
row class with known answers, the shipped files load and say where their numbers come from, a
file with a missing, negative or inconsistent coefficient is refused naming the key, and noise
is deterministic under its seed."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from adaspark.replay.device import DeviceModelError, device_from_mapping, load_device

BASE = {
    "name": "t", "label": "synthetic", "draft_ms": 2.0, "host_ms": 0.5,
    "verify": {"rows": [4, 8, 32], "alpha_ms": [10.0, 12.0, 40.0],
               "beta_ms_per_1k": [0.0, 1.0, 4.0]},
}


def model(**changes):
    raw = copy.deepcopy(BASE)
    for key, value in changes.items():
        if key.startswith("verify."):
            raw["verify"][key.split(".", 1)[1]] = value
        elif value is None:
            raw.pop(key)
        else:
            raw[key] = value
    return device_from_mapping(raw, "t")


def test_a_verify_costs_its_class_top_widths_eq3_time():
    d = model()
    # 1-4 rows: class 4; 5-8: class 8; 9-32: class 32 (flat inside, steps between, §3.2)
    assert [d.class_of(n) for n in (1, 4, 5, 8, 9, 32)] == [0, 0, 1, 1, 2, 2]
    assert d.verify_s(3, 5000) == pytest.approx(0.010)
    assert d.verify_s(8, 2000) == pytest.approx((12.0 + 1.0 * 2.0) / 1e3)
    assert d.verify_s(9, 500) == pytest.approx((40.0 + 4.0 * 0.5) / 1e3)
    assert (d.draft_s, d.host_s) == (0.002, 0.0005)
    with pytest.raises(DeviceModelError, match="1 to 32 rows, not 33"):
        d.verify_s(33, 0)


@pytest.mark.parametrize("changes, message", [
    ({"draft_ms": None}, r"t\.draft_ms is missing"),
    ({"verify.alpha_ms": [10.0, -1.0, 40.0]}, r"alpha_ms\[1\] \(the 8-row class\) is -1.0"),
    ({"verify.beta_ms_per_1k": [0.0, 1.0]}, r"beta_ms_per_1k has 2 values for 3 classes"),
    ({"verify.rows": [4, 4, 32]}, r"strictly increasing"),
    ({"host_ms": -0.1}, r"host_ms"),
    ({"label": "measured"}, r"sources is empty"),
    ({"label": "guessed"}, r"label"),
    ({"speed": 3}, r"unknown key"),
])
def test_a_bad_file_is_refused_naming_the_key(changes, message):
    with pytest.raises(DeviceModelError, match=message):
        model(**changes)


def test_the_shipped_models_load_and_the_reconstruction_cites_its_lines():
    paper = load_device("qwen3-4b-paper")
    assert paper.label == "reconstructed" and paper.sources
    # Table 1's Qwen3-4B rows at 1,596 tokens, within the fit's residual
    for rows, table1 in ((8, 26.8), (16, 40.6), (32, 106.6)):
        assert paper.verify_s(rows, 1596) * 1e3 == pytest.approx(table1, rel=0.01)
    # §3.2: a 10-row verify 1.48x an 8-row one at 1,596 tokens (flat to 8, then a step)
    assert paper.verify_s(10, 1596) / paper.verify_s(8, 1596) == pytest.approx(1.48, rel=0.01)
    step = load_device("step-at-8")
    assert step.verify_s(8, 8000) == step.verify_s(1, 0) < step.verify_s(9, 0)
    with pytest.raises(DeviceModelError, match="no device model 'nosuch'"):
        load_device("nosuch")


def test_noise_is_seeded_and_of_mean_one():
    a = model(noise={"cv": 0.2, "seed": 7}).noise_source()
    b = model(noise={"cv": 0.2, "seed": 7}).noise_source()
    xs = [a.factor() for _ in range(4000)]
    assert xs == [b.factor() for _ in range(4000)]
    assert sum(xs) / len(xs) == pytest.approx(1.0, abs=0.02)
    assert len(set(xs)) > 1
    assert model().noise_source().factor() == 1.0


def _survey(law):
    import pandas as pd

    rows = []
    for width, (a, b) in law.items():
        for c in (400, 1600, 8400):
            for pas in (0, 1):
                for rnd in range(4):
                    rows.append({"context": c, "context_paper": c, "prompt": f"{c}A",
                                 "pass_index": pas, "width": width, "round": rnd,
                                 "kept": rnd > 0, "verify_ms": a + b * c / 1000.0
                                 + (50.0 if rnd == 0 else 0.0)})
    return pd.DataFrame(rows)


def test_a_survey_gives_a_measured_device_model_through_its_points():
    """Known times in, the same times out at the surveyed contexts (dropped first rounds
    ignored), straight lines between them and along the end segments beyond (a falling end
    segment flat); between surveyed widths, the straight line."""
    from adaspark.replay.device import device_from_survey

    law = {1: (39.0, 2.0), 8: (120.0, 6.5), 16: (150.0, -1.0)}
    m = device_from_survey(_survey(law), name="here", source="s.parquet", draft_ms=80.0,
                           host_ms=0.4, timing_source="a run")
    assert m.label == "measured" and m.verify.rows == [1, 8, 16]
    assert m.verify.contexts == [400, 1600, 8400] and not m.verify.alpha_ms
    assert m.verify_s(8, 1600) == pytest.approx((120.0 + 6.5 * 1.6) / 1e3)
    assert m.verify_s(5, 1000) == pytest.approx((39.0 + 2.0 + 4 / 7 * (81.0 + 4.5)) / 1e3)
    assert m.verify.shape == "linear"  # 5 rows: 4/7 of the way from 1 row to 8 rows
    assert m.verify_s(1, 100) == pytest.approx((39.0 + 0.2) / 1e3)     # the first segment on
    assert m.verify_s(16, 100) == pytest.approx((150.0 - 0.4) / 1e3)   # a falling one: flat
    assert m.verify_s(16, 12000) == pytest.approx((150.0 - 8.4) / 1e3)
    assert m.draft_ms == 80.0 and "joined by straight lines" in m.sources["verify"]


def test_measured_points_bend_where_one_line_cannot():
    """A law that steepens with context (flat, then rising) is priced on its points, where
    Eq. (3)'s single least-squares line over them misses at both ends; a file gives lines or
    points, not both."""
    from adaspark.replay.device import polyline_ms

    contexts, ms = [443.0, 1596.0, 8444.0], [190.0, 200.0, 600.0]
    assert polyline_ms(contexts, ms, 443) == 190.0
    assert polyline_ms(contexts, ms, 1019.5) == pytest.approx(195.0)
    assert polyline_ms(contexts, ms, 100) == pytest.approx(190.0 - 343 * 10 / 1153)
    assert polyline_ms([443.0, 1596.0], [100.0, 400.0], 0) == 50.0  # half the least
    b, a = np.polyfit(contexts, ms, 1)
    assert abs(a + b * 443 - 190) > 0.1 * 190  # the one line misses the short end's point
    with pytest.raises(DeviceModelError, match=r"either as Eq. \(3\)'s line"):
        model(**{"verify.contexts": [400.0], "verify.ms": [[1.0], [2.0], [3.0]]})
    with pytest.raises(DeviceModelError, match="one time per context"):
        model(**{"verify.alpha_ms": [], "verify.beta_ms_per_1k": [],
                 "verify.contexts": [400.0, 800.0], "verify.ms": [[1.0, 2.0], [2.0], [3.0, 4]]})


def test_a_linear_model_interpolates_between_its_widths():
    """``shape: linear`` (a routed target, §3.2): alpha and beta on the straight line between
    the listed widths; below the first width, its price."""
    d = model(**{"verify.shape": "linear"})
    assert d.verify_s(2, 0) == pytest.approx(0.010)        # below 4 rows: the 4-row price
    assert d.verify_s(6, 0) == pytest.approx(0.011)        # halfway from 4 (10) to 8 (12)
    assert d.verify_s(6, 2000) == pytest.approx((11.0 + 0.5 * 2.0) / 1e3)
    assert d.verify_s(20, 0) == pytest.approx((12.0 + 0.5 * 28.0) / 1e3)
    with pytest.raises(DeviceModelError, match="shape"):
        model(**{"verify.shape": "cubic"})


PAPER_MODELS = ("lfm2.5-2.6b-paper", "lfm2.5-8b-a1b-paper", "qwen3-4b-paper", "qwen3-8b-paper")


@pytest.mark.parametrize("name", PAPER_MODELS)
def test_each_reconstruction_gives_the_papers_table1_and_figure3_numbers(name):
    """Every reconstructed target against the paper's own cells (data/paper-values.json): Table
    1's T at its three contexts for 8, 16 and 32 rows (within 4%, the largest residual Table 1
    prints is 3.9%) and Figure 3's T(16)/T(2) at 1,596 tokens (within 2%)."""
    from adaspark.analysis import paper_values

    m = load_device(name)
    assert m.label == "reconstructed" and m.paper_target in paper_values.targets()
    assert all("line" in v for v in m.sources.values()), m.sources
    t1 = paper_values.paper_table("table1")
    rows = t1[t1["target"] == m.paper_target]
    assert len(rows) == 3
    for _, r in rows.iterrows():
        n = int(r["rows"])
        for col, c in (("T(443)", 443), ("T(1,596)", 1596), ("T(8,444)", 8444)):
            assert m.verify_s(n, c) * 1e3 == pytest.approx(float(r[col]), rel=0.04), (n, c)
    ratio = paper_values.paper_figure("fig3")["caption"]["T16_over_T2_at_1596"][m.paper_target]
    assert m.verify_s(16, 1596) / m.verify_s(2, 1596) == pytest.approx(ratio, rel=0.02)


# -- issue 34, item 4 (and item 7's device coefficients) ---------------------------------------


def test_a_device_model_is_identified_by_its_content_as_well_as_its_name(tmp_path):
    """A copy of step-at-8 with every alpha zeroed was reported as ``step-at-8`` and replayed
    into ``replay/<arm>@<the file's absolute path>/``."""
    import yaml

    from adaspark.replay.command import device_dir_name
    from adaspark.replay.device import device_path
    from adaspark.replay.prices import DevicePrices, RecordedPrices

    real = load_device("step-at-8")
    raw = yaml.safe_load(device_path("step-at-8").read_text())
    raw["verify"]["alpha_ms"] = [0.0] * len(raw["verify"]["alpha_ms"])
    f = tmp_path / "conf" / "step-at-8.yaml"
    f.parent.mkdir()
    f.write_text(yaml.safe_dump(raw))
    fake = load_device(str(f))
    assert fake.name == real.name == "step-at-8"
    assert len(real.sha256) == 64 and fake.sha256 != real.sha256
    assert fake.ident == f"step-at-8 (sha {fake.sha256[:8]})" != real.ident
    assert load_device(str(device_path("step-at-8"))).sha256 == real.sha256
    d = device_dir_name(str(f.resolve()), DevicePrices(fake))
    assert d == f"step-at-8-{fake.sha256[:8]}" and "/" not in d
    assert device_dir_name("step-at-8", DevicePrices(real)) == "step-at-8"
    assert device_dir_name("recorded", RecordedPrices([])) == "recorded"
    with pytest.raises(DeviceModelError, match="hash is computed from its content"):
        device_from_mapping({**raw, "sha256": "0" * 64}, "t")


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_a_non_finite_coefficient_is_not_called_negative(value):
    with pytest.raises(DeviceModelError, match=r"alpha_ms=\[10.0,(nan|inf),40.0\] is not "
                                               r"allowed: .* a list of numbers \(finite\)"):
        model(**{"verify.alpha_ms": [10.0, value, 40.0]})


def test_d_is_priced_by_drafter_kind_and_positions_drafted():
    """A model's ``drafters:`` prices D per kind: fixed + per position (a draft model's block is
    one forward per position, a DSpark block one forward); a kind not listed pays draft_ms."""
    from adaspark.replay.prices import DevicePrices

    d = model(drafters={"draft-model": {"per_position_ms": 25.0},
                        "dspark": {"fixed_ms": 15.0}})
    assert d.draft_s_of("draft-model", 3) == pytest.approx(0.075)
    assert d.draft_s_of("draft-model", 4) == pytest.approx(0.100)
    assert d.draft_s_of("dspark", 4) == d.draft_s_of("dspark", 1) == pytest.approx(0.015)
    assert d.draft_s_of("other", 4) == d.draft_s_of(None, 4) == pytest.approx(0.002)
    chain = DevicePrices(d).for_drafter("draft-model")
    assert chain.price(0, 4, 100, 3).draft_s == pytest.approx(0.075)
    assert chain.price(1, 4, 100, 0).draft_s == 0.0  # no block drafted this round
    assert chain.fresh().price(0, 4, 100, 3).draft_s == pytest.approx(0.075)  # kind kept
    with pytest.raises(DeviceModelError, match=r"drafters\.dspark"):
        model(drafters={"dspark": {"fixed_ms": -1.0}})
    with pytest.raises(DeviceModelError, match=r"drafters\.dspark"):
        model(drafters={"dspark": {"fixed": 1.0}})


def test_cpu_measured_d_per_kind_is_fitted_from_a_trace_of_each_kind():
    from adaspark.decoding.round_trace import RequestTrace, TraceRow
    from adaspark.replay.command import drafter_time

    def trace(times_and_picks):
        rows = [TraceRow(round_index=i, anchor_pos=0, anchor=0, picks=list(range(n)), rows=1,
                         accepted=0, committed=1, verify_s=0.01, fixed_s=t, draft_s=t,
                         commit_s=0.0, round_s=t + 0.01)
                for i, (t, n) in enumerate(times_and_picks)]
        return [RequestTrace(seq=0, request_id=None, prompt=[1], tokens=[], max_tokens=1,
                             stop="length", exact=False, rounds=rows)]

    rounds = [(0.100, 4), (0.075, 3), (0.050, 2), (0.120, 4), (0.0, 0)]
    dm = drafter_time("draft-model", trace(rounds))
    assert (dm.fixed_ms, dm.per_position_ms) == (0.0, pytest.approx(25.0))
    ds = drafter_time("dspark", trace(rounds))
    assert (ds.fixed_ms, ds.per_position_ms) == (pytest.approx(87.5), 0.0)
    assert drafter_time("dspark", trace([(0.0, 0)])) is None
    # two block sizes of at least five rounds each: the line through their medians, so a
    # catch-up of 40 ms and steps of 25 ms (D = 15 + 25 n) are told apart; one-forward or not
    two = [(0.115, 4)] * 6 + [(0.090, 3)] * 5 + [(0.500, 2)]  # a lone 2-block: not a size
    for kind in ("draft-model", "dspark"):
        t = drafter_time(kind, trace(two))
        assert (t.fixed_ms, t.per_position_ms) == (pytest.approx(15.0), pytest.approx(25.0))
    flat = drafter_time("draft-model", trace([(0.08, 4)] * 5 + [(0.09, 3)] * 5))
    assert (flat.fixed_ms, flat.per_position_ms) == (pytest.approx(85.0), 0.0)
    steep = drafter_time("dspark", trace([(0.08, 4)] * 5 + [(0.02, 3)] * 5))
    assert steep.fixed_ms == 0.0 and steep.per_position_ms == pytest.approx(13.33, abs=0.01)


def test_the_price_check_sets_each_term_of_a_real_round_beside_its_price():
    """cpu-measured's prices on a run's own rounds: verify by T(rows, context) at the round's
    context (anchor + 1), D by the kind's line, host for the rest; known sums and ratios."""
    from adaspark.decoding.round_trace import RequestTrace, TraceRow
    from adaspark.replay.price_check import price_check

    d = model(drafters={"draft-model": {"fixed_ms": 1.0, "per_position_ms": 2.0}})
    # round 0: 3 rows at context 5,000 (class 4: 10 ms), 3 positions drafted, real verify 20 ms,
    # draft 7 ms, round 30 ms; round 1: 8 rows at context 2,000 (14 ms), nothing drafted
    rows = [TraceRow(round_index=0, anchor_pos=4999, anchor=0, picks=[1, 2, 3], rows=3,
                     accepted=0, committed=1, verify_s=0.020, fixed_s=0.008, draft_s=0.007,
                     commit_s=0.0, round_s=0.030),
            TraceRow(round_index=1, anchor_pos=1999, anchor=0, picks=[], rows=8, accepted=0,
                     committed=1, verify_s=0.014, fixed_s=0.0, draft_s=0.0, commit_s=0.0,
                     round_s=0.015)]
    tr = [RequestTrace(seq=0, request_id=None, prompt=[1], tokens=[], max_tokens=2,
                       stop="length", exact=False, rounds=rows)]
    c = price_check(tr, d, "draft-model")
    assert c["rounds"] == 2
    assert c["real_s"] == {"verify": 0.034, "draft": 0.007, "rest": 0.004, "round": 0.045}
    assert c["priced_s"] == pytest.approx({"verify": 0.024, "draft": 0.007, "rest": 0.001,
                                           "round": 0.032})
    assert c["priced_over_real"]["verify"] == pytest.approx(0.024 / 0.034, abs=1e-4)
    assert c["priced_over_real"]["rest"] == 0.25
    assert c["verify_by_rows"] == {"3": {"rounds": 1, "priced_over_real": 0.5},
                                   "8": {"rounds": 1, "priced_over_real": 1.0}}
    assert price_check(tr, d, None)["priced_s"]["draft"] == pytest.approx(0.002)  # draft_ms


def test_cpu_measured_takes_d_and_host_from_a_traces_rounds(tmp_path):
    """survey_device: D the median drafted round's drafter time, host the median rest of a
    drafted round (its whole time less verify and drafter: plan, learning, commit, streaming),
    D per kind from the pooled traces; a missing survey is refused naming the file."""
    from adaspark.config import ConfigError
    from adaspark.decoding.round_trace import RequestTrace, TraceRow
    from adaspark.replay.command import survey_device

    path = tmp_path / "survey.parquet"
    _survey({1: (39.0, 2.0), 8: (120.0, 6.5)}).to_parquet(path)
    # drafted rounds: drafter 20-24 ms, rest 1, 2 and 3 ms; an undrafted round is not counted
    times = [(0.020, 0.100, 0.121), (0.022, 0.100, 0.124), (0.024, 0.100, 0.127),
             (0.0, 0.050, 0.060)]
    rows = [TraceRow(round_index=i, anchor_pos=10, anchor=0, picks=[1, 2] if d else [],
                     rows=3, accepted=0, committed=1, verify_s=v, fixed_s=d, draft_s=d,
                     commit_s=0.0, round_s=r) for i, (d, v, r) in enumerate(times)]
    tr = [RequestTrace(seq=0, request_id=None, prompt=[1], tokens=[], max_tokens=4,
                       stop="length", exact=False, rounds=rows, meta={"arm": "a"})]
    m = survey_device(path, tr, name="cpu-measured", by_kind={"dspark": tr})
    assert m.draft_ms == pytest.approx(22.0) and m.host_ms == pytest.approx(2.0)
    assert m.drafters["dspark"].fixed_ms == pytest.approx(22.0)
    with pytest.raises(ConfigError, match=r"nothere\.parquet does not exist"):
        survey_device(tmp_path / "nothere.parquet", tr, name="x")
