"""What a reply gets of a round's committed tokens: the cap, then the first end-of-generation
token (the one rule the round loop and the replay share)."""

from adaspark.decoding.loop import emitted_tokens


def test_the_cap_then_the_first_end_token_cut_a_round() -> None:
    eog = {9}.__contains__
    assert emitted_tokens([1, 2, 3], 5, eog) == ([1, 2, 3], False)
    assert emitted_tokens([1, 2, 3], 2, eog) == ([1, 2], False)
    assert emitted_tokens([1, 9, 3, 9], 5, eog) == ([1, 9], True)
    assert emitted_tokens([1, 2, 9], 2, eog) == ([1, 2], False)  # the end token is past the cap
