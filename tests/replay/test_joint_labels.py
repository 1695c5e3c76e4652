"""Labels for several drafters in one pass of the target (the labels stage; issue 15's time):
the bookkeeping on synthetic labels with known answers, and on the real tiny model a DSpark file
written here and the truncated draft model labelled together give exactly the labels each gets
alone, while two drafters that both read the target are never put in one pass."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from adaspark.replay.labels import LabelStore, PromptLabels, ensure_labels, prompt_key

IDENTITY = {"target_sha256": "t", "drafter_sha256": "d"}


def synthetic(prompt: list[int], n: int, B: int) -> PromptLabels:
    """Labels whose values say which prompt and position made them."""
    base = sum(prompt)
    nxt = np.arange(base, base + n, dtype=np.int64)
    blocks = (nxt[:, None, None] + np.arange(B)[None, :, None]
              + np.zeros((1, 1, 2), dtype=np.int64))
    return PromptLabels(list(prompt), nxt, np.zeros(n, dtype=bool), blocks,
                        np.full(blocks.shape, 0.5), np.full((n, B), 0.25))


def test_a_prompt_two_stores_need_is_made_once_to_the_longer_need(tmp_path: Path) -> None:
    stores = [LabelStore(tmp_path / "a", IDENTITY), LabelStore(tmp_path / "b", IDENTITY)]
    calls: list[tuple[list[int], int, list[int]]] = []

    def make(prompt: list[int], n: int, which: list[int]) -> list[PromptLabels]:
        calls.append((prompt, n, which))
        return [synthetic(prompt, n, 3) for _ in which]

    p, q = [1, 2, 3], [7, 8]
    got, _ = ensure_labels(stores, [[(p, 5), (q, 4)], [(p, 9)]], make)
    assert calls == [(p, 9, [0, 1]), (q, 4, [0])]
    assert {k: len(v.next) for k, v in got[0].items()} == {prompt_key(p): 9, prompt_key(q): 4}
    assert {k: len(v.next) for k, v in got[1].items()} == {prompt_key(p): 9}
    assert len(stores[1].get(p).next) == 9 and stores[1].get(q) is None


def test_a_label_file_swapped_with_another_prompts_is_refused(tmp_path: Path) -> None:
    """Issue 34, item 3: swapping two prompts' label files went unnoticed under a device
    model (20 rounds at 33.6 tok/s where the true figures are 23 and 29.9)."""
    from adaspark.replay.labels import LabelsError, write_labels

    store = LabelStore(tmp_path / "a", IDENTITY)
    p, q = [1, 2, 3], [7, 8]
    store.put(synthetic(p, 4, 3))
    store.put(synthetic(q, 4, 3))
    fp, fq = store.path(p), store.path(q)
    tmp = tmp_path / "swap"
    fp.rename(tmp)
    fq.rename(fp)
    tmp.rename(fq)
    with pytest.raises(LabelsError, match=f"{fp} holds the labels of another prompt "
                                          f"\\(sha256 {prompt_key(q)}, not {prompt_key(p)}\\)"):
        store.get(p)
    # a file made for another target or drafter than its directory's meta.json
    write_labels(store.path(p), synthetic(p, 4, 3), {**IDENTITY, "drafter_sha256": "e"})
    with pytest.raises(LabelsError, match="labelled with another target, drafter or build"):
        store.get(p)
    store.put(synthetic(p, 4, 3))
    assert len(store.get(p).next) == 4


def test_a_resumed_pass_labels_only_the_store_that_lacks_the_prompt(tmp_path: Path) -> None:
    a, b = LabelStore(tmp_path / "a", IDENTITY), LabelStore(tmp_path / "b", IDENTITY)
    p = [4, 5, 6]
    a.put(synthetic(p, 6, 3))
    b.put(synthetic(p, 2, 3))  # too short for what store b needs now
    calls: list[list[int]] = []

    def make(prompt: list[int], n: int, which: list[int]) -> list[PromptLabels]:
        calls.append(which)
        return [synthetic(prompt, n, 3) for _ in which]

    got, _ = ensure_labels([a, b], [[(p, 6)], [(p, 5)]], make)
    assert calls == [[1]]
    assert [len(g[prompt_key(p)].next) for g in got] == [6, 6]
    assert len(b.get(p).next) == 6


# -- on the engine ---------------------------------------------------------------------------


def labeller(root: Path, drafter: list[str]):
    from adaspark.config import compose
    from adaspark.replay.command import Labeller
    from adaspark.schema import check_arm

    cfg = compose(["target=tiny", *drafter, "arm=chain3"])
    return Labeller(cfg, check_arm(cfg.arm, "arm"), root, restart=True)


@pytest.fixture(scope="module")
def dspark_files(tmp_path_factory, tiny_path) -> list[Path]:
    from adaspark.decoding.drafter import dspark_file as dsf

    d = tmp_path_factory.mktemp("joint")
    shape = dsf.DrafterShape(block_size=6)
    return [dsf.write_random(tiny_path, d / f"random{s}.gguf", seed=s, shape=shape)
            for s in (3, 4)]


def test_drafters_labelled_in_one_pass_get_the_labels_each_gets_alone(tmp_path, dspark_files,
                                                                      tiny_target) -> None:
    from adaspark.replay.command import joint_groups, label_jointly

    prompts = [tiny_target.tokenize(t) for t in ("The history of the Roman Empire began",
                                                 "def fib(n):\n    return")]
    kinds = (["drafter=tiny-truncated"], ["drafter=dspark", f"drafter.path={dspark_files[0]}"])
    alone = []
    for i, kind in enumerate(kinds):
        lab = labeller(tmp_path / f"alone{i}", kind)
        try:
            alone.append(lab.labels([(p, 12) for p in prompts]))
        finally:
            lab.close()
    together = [labeller(tmp_path / "joint", kind) for kind in kinds]
    try:
        groups = joint_groups(together)
        assert groups == [[together[1], together[0]]]  # the drafter reading the target leads
        got = label_jointly(groups[0], [[(p, 12) for p in prompts]] * 2)
        assert together[0].parts is None and together[1].parts is not None  # one target
        # the pass's time by part: one target shared, each drafter its own blocks
        parts = [lab.spent_by_part for lab in together]
        assert parts[0]["target"] == parts[1]["target"] > 0, parts
        assert parts[0]["drafter"] > 0 and parts[1]["drafter"] > 0, parts
        assert parts[0]["drafter"] != parts[1]["drafter"], parts
    finally:
        for lab in together:
            lab.close()
    got = [got[1], got[0]]
    for one, both in zip(alone, got, strict=True):
        assert set(one) == set(both) and len(one) == 2
        for key, x in one.items():
            y = both[key]
            assert len(x.next) == len(y.next) == 12
            for field in ("next", "next_eog", "blocks", "probs", "confidence"):
                assert np.array_equal(getattr(x, field), getattr(y, field)), (key, field)
    assert got[0][next(iter(got[0]))].blocks.shape[1:] == (4, 8)
    assert got[1][next(iter(got[1]))].blocks.shape[1:] == (6, 8)


def test_two_drafters_reading_the_target_take_two_passes(tmp_path, dspark_files) -> None:
    from adaspark.config import ConfigError
    from adaspark.replay.command import joint_groups, label_jointly

    labs = [labeller(tmp_path, ["drafter=dspark", f"drafter.path={f}"]) for f in dspark_files]
    labs.append(labeller(tmp_path, ["drafter=tiny-truncated"]))
    assert joint_groups(labs) == [[labs[0], labs[2]], [labs[1]]]
    with pytest.raises(ConfigError, match="joint_groups"):
        label_jointly(labs[:2], [[], []])


def test_labels_over_a_known_text_are_the_labels_made_one_position_at_a_time(
        tmp_path, dspark_files, tiny_target) -> None:
    """The labels pass verifies a known reply in wide chains (``Target.follow``) and drafts a
    draft model's block from the one before (``draft_next``): the labels are bit for bit those
    of one-row verifies and whole blocks, past a chain's width, where the text leaves the
    target's greedy text, and past its end."""
    from adaspark.replay.command import joint_groups
    from adaspark.replay.labels import label_prompt_jointly

    prompt = tiny_target.tokenize("The history of the Roman Empire began")
    kinds = (["drafter=tiny-truncated"], ["drafter=dspark", f"drafter.path={dspark_files[0]}"])
    labs = [labeller(tmp_path / "known", kind) for kind in kinds]
    try:
        group = joint_groups(labs)[0]
        target = group[0]._parts().target
        drafters = [(lab.drafter_on(target), lab.block_positions) for lab in group]
        n = 150
        slow = label_prompt_jointly(target, drafters, prompt, n)
        greedy = [int(t) for t in slow[0].next]
        wrong = list(greedy[:100])
        wrong[90] = (wrong[90] + 1) % 1000  # not the target's greedy token
        for text in (greedy[:130], wrong):
            fast = label_prompt_jointly(target, drafters, prompt, n, text)
            for x, y in zip(slow, fast, strict=True):
                assert len(x.next) == len(y.next) == n
                for field in ("next", "next_eog", "blocks", "probs", "confidence"):
                    assert np.array_equal(getattr(x, field), getattr(y, field)), field
        # the draft model's shifted blocks are its whole blocks
        drafter = next(d for d, _B in drafters if hasattr(d, "draft_next"))
        drafter.begin(prompt)
        text = prompt + greedy
        prev = drafter.draft(text[:len(prompt)], 4)
        reused = 0
        for p in range(len(prompt) + 1, len(prompt) + 60):
            b = drafter.draft_next(text[:p], 4, prev)
            reused += int(prev.tokens[0, 0]) == text[p - 1]
            prev = b
            whole = drafter.draft(text[:p], 4)
            assert np.array_equal(b.tokens, whole.tokens) and np.array_equal(b.probs,
                                                                              whole.probs), p
            prev = whole
        assert reused > 0  # the shortcut was taken
    finally:
        for lab in labs:
            lab.close()
