"""Fixtures for the test-set tests: the vendored copy, a scratch copy of ``data/`` to tamper
with, and writers that lay synthetic rows out in each source's real file layout."""

from __future__ import annotations

import json
import shutil
import zipfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import pytest

from adaspark import paths
from adaspark.testset.lock import LOCK_FILE, read_vendored_files, vendored_sets
from adaspark.testset.model import SetFile


@pytest.fixture(scope="session")
def vendored() -> list[SetFile]:
    """The six vendored set files, in the published order."""
    return vendored_sets(read_vendored_files())


@pytest.fixture
def data_copy(tmp_path: Path) -> Path:
    """A scratch copy of the vendored data/ (set files, raw sources, lock)."""
    root = tmp_path / "data"
    src = paths.data_dir()
    shutil.copytree(src / "testset", root / "testset")
    shutil.copytree(src / "sources", root / "sources")
    shutil.copy2(src / LOCK_FILE, root / LOCK_FILE)
    return root


def _write_parquet(path: Path, rows: list[dict[str, Any]]) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def _write_json(path: Path, rows: list[dict[str, Any]], jsonl: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if jsonl:
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    else:
        path.write_text(json.dumps(rows, ensure_ascii=False))
    return path


def _write_longbench(
    root: Path, rows_by_task: Mapping[str, Iterable[dict[str, Any]]], zipped: bool = True
) -> Path:
    """LongBench's data.zip (members data/<task>.jsonl), or those files unpacked."""
    root.mkdir(parents=True, exist_ok=True)
    members = {
        f"data/{task}.jsonl": "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
        for task, rows in rows_by_task.items()
    }
    if zipped:
        with zipfile.ZipFile(root / "data.zip", "w") as z:
            for name, text in members.items():
                z.writestr(name, text)
    else:
        for name, text in members.items():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_text(text)
    return root


@pytest.fixture
def write_parquet() -> Callable[[Path, list[dict[str, Any]]], Path]:
    return _write_parquet


@pytest.fixture
def write_json() -> Callable[..., Path]:
    return _write_json


@pytest.fixture
def write_longbench() -> Callable[..., Path]:
    return _write_longbench


# --- source rows that reproduce the published conversations ---------------------------------


def _speedbench_rows(s: SetFile) -> list[dict[str, Any]]:
    return [
        {
            "question_id": c.source_id,
            "category": c.kind,
            "sub_category": "",
            "turns": c.texts,
            "source": "",
            "src_id": "",
            "difficulty": "",
            "multiturn": len(c.turns) > 1,
        }
        for c in s.conversations
    ]


def _wildchat_rows(s: SetFile) -> list[dict[str, Any]]:
    rows = []
    for c in s.conversations:
        messages = []
        for t in c.texts:
            messages += [{"role": "user", "content": t}, {"role": "assistant", "content": "ok"}]
        rows.append(
            {
                "conversation_id": c.source_id,
                "conversation": messages,
                "turn": len(c.turns),
                "language": "English",
                "toxic": False,
                "redacted": False,
            }
        )
    return rows


def _convfinqa_rows(s: SetFile) -> list[dict[str, Any]]:
    rows = []
    for c in s.conversations:
        report = c.texts[0]
        history = ""
        for k, text in enumerate(c.texts):
            query = text if k == 0 else f"{report}\n{history}Question: {text}\nAnswer:"
            rows.append(
                {
                    "id": f"{c.source_id}_{k}",
                    "query": query,
                    "answer": "0",
                    "turn": k,
                    "dialogue_id": int(c.source_id),
                }
            )
            history += f"Question: {text}\nAnswer: 0\n"
    return rows


def _toolace_rows(s: SetFile) -> list[dict[str, Any]]:
    rows = []
    for c in s.conversations:
        funcs = [t["function"] for t in c.tools or []]
        system = (
            "Here is a list of functions in JSON format that you can invoke:\n"
            f"{json.dumps(funcs, ensure_ascii=False)}. Should you decide to call one, say so."
        )
        messages = []
        for t in c.turns:
            messages.append({"from": "user", "value": t.text})
            if t.result is not None:
                messages += [
                    {"from": "assistant", "value": "[call()]"},
                    {"from": "tool", "value": t.result},
                ]
            messages.append({"from": "assistant", "value": "done"})
        rows.append({"system": system, "conversations": messages})
    return rows


ROWS_FROM_PUBLISHED = {
    "speedbench": (_speedbench_rows, "qualitative/test-00000-of-00001.parquet"),
    "wildchat": (_wildchat_rows, "data/train-00000-of-00001.parquet"),
    "convfinqa": (_convfinqa_rows, "data/test-00000-of-00001.parquet"),
    "toolace": (_toolace_rows, "data.json"),
}


@pytest.fixture
def mirror_from_published(tmp_path: Path, vendored: list[SetFile]) -> Callable[[str], Path]:
    """A mirror, in the source's real layout, whose rows give back the published set."""

    def make(name: str) -> Path:
        to_rows, rel = ROWS_FROM_PUBLISHED[name]
        rows = to_rows(next(s for s in vendored if s.name == name))
        root = tmp_path / f"mirror-{name}"
        path = root / rel
        if path.suffix == ".parquet":
            _write_parquet(path, rows)
        else:
            _write_json(path, rows)
        return root

    return make
