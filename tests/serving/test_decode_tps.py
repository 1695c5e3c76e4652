"""The client clock's decode speed of one reply (HARNESS "Client clock", §4.1)."""

from __future__ import annotations

import pytest

from adaspark.serving.client import decode_tps


def test_decode_tps_formula() -> None:
    # 11 tokens: 10 decode tokens over the 2 s between first and last event.
    assert decode_tps(11, 1.0, 3.0) == pytest.approx(5.0)
    assert decode_tps(2, 0.5, 0.75) == pytest.approx(4.0)


def test_decode_tps_single_delta_is_none() -> None:
    assert decode_tps(1, 2.0, 2.0) is None
    # A bare tool call streamed as one event: many tokens, no decode interval.
    assert decode_tps(40, 2.0, 2.0) is None
    assert decode_tps(0, 2.0, 2.0) is None


def test_decode_tps_bad_input() -> None:
    with pytest.raises(ValueError, match="before the first"):
        decode_tps(10, 3.0, 1.0)
    with pytest.raises(ValueError, match=">= 0"):
        decode_tps(-1, 1.0, 2.0)
    with pytest.raises(ValueError, match="finite"):
        decode_tps(10, float("nan"), 2.0)
