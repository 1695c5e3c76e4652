"""The cluster launcher's pure parts (issue 16): dealing conversations to nodes, the launcher's
config, pairing within one hardware fingerprint, and the report's label of sharded results."""

from __future__ import annotations

import pandas as pd
import pytest

from adaspark.analysis import stats
from adaspark.analysis.report import sharding_note
from adaspark.config import ConfigError
from adaspark.runs.cluster import LauncherSettings, deal
from adaspark.runs.hardware import hardware_fingerprint


def test_deal_is_round_robin_in_order_and_drops_empty_shards():
    assert deal(list("abcde"), 2) == [["a", "c", "e"], ["b", "d"]]
    assert deal(list("ab"), 5) == [["a"], ["b"]]
    with pytest.raises(ValueError):
        deal(["a"], 0)


def test_launcher_config_is_typed():
    assert LauncherSettings.from_config({}).name == "local"
    ray = LauncherSettings.from_config({"launcher": {"name": "ray", "workers": 3}})
    assert ray.workers == 3 and ray.shard == "conversations"
    assert ray.record() == {"launcher": "ray", "shard": "conversations"}
    with pytest.raises(ConfigError, match=r"launcher.shard"):
        LauncherSettings.from_config({"launcher": {"name": "ray", "shard": "replies"}})
    with pytest.raises(ConfigError, match=r"launcher.workers"):
        LauncherSettings.from_config({"launcher": {"name": "ray", "workers": 0}})
    with pytest.raises(ConfigError, match=r"unknown key"):
        LauncherSettings.from_config({"launcher": {"name": "ray", "nodes": 2}})


def test_the_hardware_fingerprint_changes_with_the_machine():
    a = {"cpu": "x", "logical_cpus": 2, "memory_gib": 24, "gpus": [], "backend": "cpu"}
    assert hardware_fingerprint(a) == hardware_fingerprint(dict(a))
    assert hardware_fingerprint(a) != hardware_fingerprint({**a, "gpus": ["NVIDIA H200"]})
    assert len(hardware_fingerprint()) == 16


def frame(hw_a: list[str], hw_b: list[str]) -> pd.DataFrame:
    rows = []
    for arm, hws, tps in (("a", hw_a, 12.0), ("b", hw_b, 10.0)):
        for i, hw in enumerate(hws):
            rows.append({"arm": arm, "repeat": 1, "set": "s", "conversation": f"c{i}",
                         "turn": 0, "reply": 0, "status": "finished",
                         "decode_tps": tps + i % 3, "completion_tokens": 50,
                         "prompt_tokens": 100, "hardware": hw, "node": f"n{i % 2}"})
    return pd.DataFrame(rows)


def test_pairs_across_two_hardware_fingerprints_are_refused_unless_told():
    same = frame(["h1"] * 6, ["h1"] * 6)
    assert stats.compare(same, "a", "b", n_resamples=200).ratio > 1
    mixed = frame(["h1"] * 6, ["h1"] * 3 + ["h2"] * 3)
    with pytest.raises(stats.StatsInputError, match=r"different hardware fingerprints.*"
                                                    r"cross_hardware=True"):
        stats.compare(mixed, "a", "b", n_resamples=200)
    assert stats.compare(mixed, "a", "b", n_resamples=200, cross_hardware=True).ratio > 1
    old = frame([""] * 6, [""] * 6)  # rows written before the column: no fingerprint
    assert stats.compare(old, "a", "b", n_resamples=200).ratio > 1


def test_sharded_results_are_labelled():
    df = frame(["h1"] * 6, ["h1"] * 6)
    note = sharding_note(df)
    assert note is not None and note.startswith("SHARDED") and "a (2 nodes)" in note
    assert sharding_note(df.assign(node="local-x")) is None
    assert sharding_note(df.drop(columns="node")) is None


def test_a_cluster_address_where_nothing_listens_fails_naming_it_and_what_to_start():
    """Issue 34, item 8: ``launcher.address=127.0.0.1:59999`` with nothing listening retried
    for ever (no message after 500 s)."""
    import socket

    from adaspark.config import ConfigError
    from adaspark.runs.cluster import check_reachable
    from adaspark.runs.settings import RunError

    with socket.socket() as s:  # a port that was free a moment ago, nothing listening now
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for address in (f"127.0.0.1:{port}", f"ray://127.0.0.1:{port}"):
        with pytest.raises(RunError, match=rf"{address}.*ray start --head --port={port}.*"
                                           r"launcher\.address=null"):
            check_reachable(address, timeout_s=5)
    with socket.socket() as s:  # something listening: accepted
        s.bind(("127.0.0.1", 0))
        s.listen()
        check_reachable(f"127.0.0.1:{s.getsockname()[1]}", timeout_s=5)
    with pytest.raises(ConfigError, match="is not host:port"):
        check_reachable("nowhere", timeout_s=5)
