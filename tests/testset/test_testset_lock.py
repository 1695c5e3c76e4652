"""The lock: the vendored copy matches it, and one changed character anywhere in a set file
fails the check and names the conversation it sits in."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from adaspark.testset.lock import (
    LockMismatchError,
    check_set,
    check_vendored,
    load_checked_sets,
    read_lock,
)
from adaspark.testset.model import SET_NAMES, SetFile, make_conversation

Path_ = tuple[Any, ...]


def dump(raw: dict) -> str:
    """The published layout (see model.dumps_set): the round trip is byte-exact."""
    return json.dumps(raw, ensure_ascii=False, indent=1)


def set_file(data: Path, name: str) -> Path:
    return data / "testset" / f"{name}.json"


def load_raw(data: Path, name: str) -> dict:
    return json.loads(set_file(data, name).read_text(encoding="utf-8"))


def get(obj: Any, path: Path_) -> Any:
    for k in path:
        obj = obj[k]
    return obj


def changed_char(s: str, i: int) -> str:
    return s[:i] + ("X" if s[i] != "X" else "Y") + s[i + 1 :]


def write_one_char_change(data: Path, name: str, raw: dict) -> None:
    """Write ``raw`` back and check that the file differs from before in exactly one character."""
    f = set_file(data, name)
    before, after = f.read_text(encoding="utf-8"), dump(raw)
    assert len(before) == len(after)
    assert sum(a != b for a, b in zip(before, after, strict=True)) == 1
    f.write_text(after, encoding="utf-8")


def plain(ch: str) -> bool:
    """A character JSON writes as itself (so changing it changes one character of the file)."""
    return ch not in '"\\' and ch.isprintable()


def moved_names(data: Path) -> set[str | None]:
    with pytest.raises(LockMismatchError) as err:
        check_vendored(data)
    return {m.conversation for m in err.value.mismatches}


def test_vendored_copy_matches_the_lock():
    report = check_vendored()
    assert report.ok and not report.allowed


def test_lock_covers_every_published_conversation(vendored):
    lock = read_lock()
    assert list(lock.sets) == list(SET_NAMES)
    for s in vendored:
        assert [e.name for e in lock.sets[s.name]] == [c.name for c in s.conversations]
        assert [e.sha256 for e in lock.sets[s.name]] == [c.sha256 for c in s.conversations]


@pytest.mark.parametrize(
    ("name", "conversation", "path", "what"),
    [
        ("wildchat", 2, ("turns", 1, "text"), "a turn"),
        ("toolace", 4, ("tools", 0, "function", "description"), "a tool schema"),
        ("toolace", 1, ("turns", 2, "result"), "a tool result"),
        ("longbench", 7, ("source_id",), "the provenance"),
        ("convfinqa", 0, ("turns", 0, "kind"), "a turn's kind"),
    ],
)
def test_one_changed_character_names_the_conversation(data_copy, name, conversation, path, what):
    raw = load_raw(data_copy, name)
    c = raw["conversations"][conversation]
    value = get(c, path)
    i = next(k for k in range(len(value) // 2, len(value)) if plain(value[k]))
    get(c, path[:-1])[path[-1]] = changed_char(value, i)
    write_one_char_change(data_copy, name, raw)
    assert moved_names(data_copy) == {c["name"]}, what


def test_a_changed_turn_with_its_stored_hash_updated_is_still_caught(data_copy):
    raw = load_raw(data_copy, "specbench")
    c = raw["conversations"][3]
    c["turns"][0]["text"] = c["turns"][0]["text"].replace("a", "e", 1)
    c["sha256"] = make_conversation("x", "k", "s", "0", [t["text"] for t in c["turns"]]).sha256
    set_file(data_copy, "specbench").write_text(dump(raw), encoding="utf-8")
    assert moved_names(data_copy) == {c["name"]}


def leaves(obj: Any, path: Path_ = ()) -> list[tuple[Path_, str]]:
    """Every place in a conversation one character can change: string values, the digits of
    numbers, and mapping keys."""
    out: list[tuple[Path_, str]] = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.append(((*path, k), "key"))
            out.extend(leaves(v, (*path, k)))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out.extend(leaves(v, (*path, i)))
    elif isinstance(obj, str) and any(plain(ch) for ch in obj):
        out.append((path, "str"))
    elif isinstance(obj, int) and not isinstance(obj, bool):
        out.append((path, "int"))
    return out


def tamper(c: dict, path: Path_, kind: str, rng: random.Random) -> None:
    parent, last = get(c, path[:-1]), path[-1]
    if kind == "int":
        parent[last] = parent[last] + (1 if parent[last] % 10 != 9 else -1)
    elif kind == "str":
        value = parent[last]
        parent[last] = changed_char(
            value, rng.choice([i for i, ch in enumerate(value) if plain(ch)])
        )
    else:  # rename a key by one character, keeping the key's place
        items = list(parent.items())
        new_key = changed_char(last, rng.randrange(len(last)))
        parent.clear()
        parent.update((new_key if k == last else k, v) for k, v in items)


@pytest.mark.parametrize("name", SET_NAMES)
def test_one_changed_character_anywhere_in_any_conversation(data_copy, name):
    """Seeded sample of positions across every conversation of the set file."""
    rng = random.Random(f"testset-lock-{name}")
    pristine = set_file(data_copy, name).read_text(encoding="utf-8")
    n_convs = len(json.loads(pristine)["conversations"])
    for trial in range(12):
        raw = json.loads(pristine)
        index = trial % n_convs if trial < n_convs else rng.randrange(n_convs)
        c = raw["conversations"][index]
        path, kind = rng.choice(leaves(c))
        original_name = c["name"]
        tamper(c, path, kind, rng)
        set_file(data_copy, name).write_text(dump(raw), encoding="utf-8")
        named = moved_names(data_copy)
        assert original_name in named, (path, kind)
        renamed = {c["name"]} if isinstance(c.get("name"), str) else set()
        assert named <= {original_name} | renamed, (path, kind)  # and nothing else
    set_file(data_copy, name).write_text(pristine, encoding="utf-8")
    assert check_vendored(data_copy).ok


def test_broken_json_names_the_conversation_around_the_break(data_copy):
    f = set_file(data_copy, "toolace")
    text = f.read_text(encoding="utf-8")
    at = text.index("Get Zip Code Information")  # in ta-2's second tool result
    f.write_text(text[: at - 3] + "\n" + text[at - 2 :], encoding="utf-8")
    assert moved_names(data_copy) == {"ta-2"}


def test_provenance_change_names_the_file(data_copy):
    raw = load_raw(data_copy, "speedbench")
    raw["provenance"]["revision"] = changed_char(raw["provenance"]["revision"], 0)
    write_one_char_change(data_copy, "speedbench", raw)
    with pytest.raises(LockMismatchError, match=r"testset/speedbench\.json: bytes differ"):
        check_vendored(data_copy)


def test_raw_source_change_is_named(data_copy):
    f = data_copy / "sources" / "spec-bench" / "question.jsonl"
    data = f.read_bytes()
    f.write_bytes(data[:100] + (b"X" if data[100:101] != b"X" else b"Y") + data[101:])
    with pytest.raises(LockMismatchError, match=r"sources/spec-bench/question\.jsonl"):
        check_vendored(data_copy)


def test_allow_mismatch_reports_instead_of_failing(data_copy):
    raw = load_raw(data_copy, "wildchat")
    raw["conversations"][5]["turns"][0]["text"] += "!"
    set_file(data_copy, "wildchat").write_text(dump(raw), encoding="utf-8")
    report = check_vendored(data_copy, allow_mismatch=True)
    assert not report.ok and report.allowed
    assert report.moved() == ["wildchat/wc-6"]


def test_rebuilt_set_missing_added_and_reordered(vendored):
    lock = read_lock()
    lb = next(s for s in vendored if s.name == "longbench")
    convs = list(lb.conversations)
    extra = make_conversation("lb-new-1", "new", "THUDM/LongBench", "x", ["a new prompt"])
    reordered = SetFile("longbench", [convs[1], convs[0], *convs[2:-1], extra])
    problems = {(m.conversation, m.problem.split(" ")[0]) for m in check_set(reordered, lock)}
    assert (convs[-1].name, "missing") in problems
    assert ("lb-new-1", "not") in problems
    assert (None, "conversation") in problems  # the order moved


def test_load_checked_sets_guards_downstream(tmp_path, vendored):
    from adaspark.testset.model import write_set

    for s in vendored:
        write_set(s, tmp_path / f"{s.name}.json")
    assert [s.name for s in load_checked_sets(tmp_path)] == list(SET_NAMES)
    raw = json.loads((tmp_path / "toolace.json").read_text(encoding="utf-8"))
    raw["conversations"][0]["tools"][0]["function"]["parameters"]["type"] = "dict"
    (tmp_path / "toolace.json").write_text(dump(raw), encoding="utf-8")
    with pytest.raises(LockMismatchError, match="toolace/ta-1"):
        load_checked_sets(tmp_path)
    assert len(load_checked_sets(tmp_path, allow_mismatch=True)) == len(SET_NAMES)


@pytest.mark.parametrize("text", ["{not json", "[]", '{"files": {}}'])
def test_an_invalid_lock_file_is_named(tmp_path: Path, text: str) -> None:
    bad = tmp_path / "testset.lock.json"
    bad.write_text(text)
    with pytest.raises(LockMismatchError) as e:
        read_lock(bad)
    assert f"{bad} is not a valid lock file" in str(e.value)
    assert "git checkout" in str(e.value)
