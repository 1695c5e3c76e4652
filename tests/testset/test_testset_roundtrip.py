"""Rows in each source's real schema that carry the published texts give the published set back
through the mirror path: the rules and the file format agree with the published set."""

from __future__ import annotations

import pytest

from adaspark.testset import convfinqa, speedbench, toolace, wildchat
from adaspark.testset.lock import check_set, read_lock
from adaspark.testset.model import conversation_to_json

MODULES = {
    "speedbench": speedbench,
    "wildchat": wildchat,
    "convfinqa": convfinqa,
    "toolace": toolace,
}


@pytest.mark.parametrize("name", list(MODULES))
def test_rows_carrying_the_published_texts_rebuild_the_published_set(
    name, vendored, mirror_from_published
):
    built = MODULES[name].build_from_mirror(mirror_from_published(name))
    published = next(s for s in vendored if s.name == name)
    assert check_set(built, read_lock()) == []
    assert [conversation_to_json(c) for c in built.conversations] == [
        conversation_to_json(c) for c in published.conversations
    ]
