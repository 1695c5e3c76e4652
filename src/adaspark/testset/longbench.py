"""LongBench: long documents with the benchmark's own task prompt (paper, Table 13).

Tasks gov_report, qasper, lcc, repobench-p, vcsum and multi_news, in that order (the published
order, HARNESS "Subsets"). Each row ``{input, context, answers, length, dataset, language,
all_classes, _id}`` becomes one single-turn conversation: the task's template from LongBench's
``dataset2prompt.json`` with the document and the question put in. Rule (Appendix A): rows in the
task file's order, the first two per task; a prompt over 12,000 characters has its document cut
from the middle (head and tail kept) to exactly the cap and is marked ``"truncated": "middle"``
(the only change to the text); one that would keep under 2,000 characters of its document is
skipped. The data comes from the dataset repository's ``data.zip`` (members
``data/<task>.jsonl``), unpacked or not, at a pinned revision.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from adaspark import paths
from adaspark.testset.model import SetFile, make_conversation
from adaspark.testset.readers import HubSource, SourceUnavailable, zip_or_dir_member
from adaspark.testset.rules import (
    CAP_CHARS_LONG,
    LONGBENCH_MIN_CONTEXT,
    TURNS_PER_CATEGORY,
    Candidate,
    fill_categories,
    fill_template,
    longbench_prompt,
    numbered_names,
)

NAME = "longbench"
SOURCE = "THUDM/LongBench"
TASKS: tuple[str, ...] = ("gov_report", "qasper", "lcc", "repobench-p", "vcsum", "multi_news")
HUB = HubSource(
    repo=SOURCE,
    config=None,
    split="test",
    revision="5e628be450b7e67fb7ae6e201bd6d8f7056f7672",
    mirror_patterns=("data.zip", "data/*.jsonl"),
)
#: The GitHub commit of LongBench's config files (the prompt templates).
PROMPTS_REVISION = "2e00731f8d0bff23dc4325161044d0ed8af94c1e"
#: Where the templates sit in the LongBench GitHub repository, and in ``data/sources``.
PROMPTS_REPO_PATH = "LongBench/config/dataset2prompt.json"


def vendored_templates_file() -> Path:
    return paths.data_dir() / "sources" / "longbench" / "config" / "dataset2prompt.json"


def load_templates(path: Path | None = None) -> dict[str, str]:
    """LongBench's task templates (``dataset2prompt.json``); the vendored copy by default."""
    path = path or vendored_templates_file()
    if not path.is_file():
        raise SourceUnavailable(
            f"LongBench's prompt templates are missing at {path}: restore data/sources/ from "
            f"git, or point at {PROMPTS_REPO_PATH} of a LongBench checkout at "
            f"{PROMPTS_REVISION[:12]}"
        )
    return json.loads(path.read_text(encoding="utf-8"))


def task_rows(root: Path, task: str) -> Iterator[dict[str, Any]]:
    """Rows of ``data/<task>.jsonl`` in ``root`` (unpacked) or in ``root/data.zip``."""
    text = zip_or_dir_member(root, f"data/{task}.jsonl")
    if text is None:
        raise SourceUnavailable(
            f"LongBench mirror {root} has neither data/{task}.jsonl nor data.zip holding it: "
            f"`{HUB.download_hint(root)}` fetches data.zip"
        )
    for line in text.splitlines():
        if line.strip():
            yield json.loads(line)


def candidates(
    task: str,
    rows: Iterable[dict[str, Any]],
    template: str,
    *,
    cap: int,
    min_context: int,
) -> Iterator[Candidate]:
    """One candidate per row; a prompt that cannot be cut to fit keeps its full length, so the
    cap rejects it and counts it."""
    for r in rows:
        context, question = str(r.get("context", "")), str(r.get("input") or "")
        fitted = longbench_prompt(template, context, question, cap=cap, min_context=min_context)
        if fitted is None:
            yield Candidate(task, str(r["_id"]), (fill_template(template, context, question),))
        else:
            yield Candidate(task, str(r["_id"]), (fitted.text,), truncated=fitted.truncated)


def build(
    rows_by_task: Mapping[str, Iterable[dict[str, Any]]],
    templates: Mapping[str, str],
    *,
    tasks: Sequence[str] = TASKS,
    cap: int = CAP_CHARS_LONG,
    turns_per_category: int = TURNS_PER_CATEGORY,
    min_context: int = LONGBENCH_MIN_CONTEXT,
) -> SetFile:
    """The LongBench set: per task in ``tasks`` order, its first items within the cap."""
    taken: list[Candidate] = []
    skipped = 0
    for task in tasks:
        if task not in templates:
            raise SourceUnavailable(f"LongBench's dataset2prompt.json has no template for {task}")
        fill = fill_categories(
            candidates(task, rows_by_task[task], templates[task], cap=cap, min_context=min_context),
            cap=cap,
            turns_per_category=turns_per_category,
            categories=(task,),
        )
        taken.extend(fill.taken)
        skipped += fill.skipped_over_cap
    names = numbered_names("lb", (c.category for c in taken))
    conversations = [
        make_conversation(
            name,
            c.category,
            SOURCE,
            c.source_id,
            c.texts,
            truncated="middle" if c.truncated else None,
        )
        for name, c in zip(names, taken, strict=True)
    ]
    provenance = {
        "source": SOURCE,
        "revision": HUB.revision,
        "prompts_revision": PROMPTS_REVISION,
        "tasks": list(tasks),
        "truncated_middle": sum(c.truncated for c in taken),
        "skipped_over_cap": skipped,
        "builder": __name__,
        "params": {"turns_per_category": turns_per_category, "cap_chars": cap},
    }
    return SetFile(NAME, conversations, provenance)


class _LazyTasks(Mapping[str, Iterable[dict[str, Any]]]):
    """Task name -> its rows, read from the mirror only when the builder asks."""

    def __init__(self, root: Path, tasks: Sequence[str]) -> None:
        self.root, self.tasks = root, tuple(tasks)

    def __getitem__(self, task: str) -> Iterable[dict[str, Any]]:
        return task_rows(self.root, task)

    def __iter__(self) -> Iterator[str]:
        return iter(self.tasks)

    def __len__(self) -> int:
        return len(self.tasks)


def build_from_mirror(root: Path, templates: Mapping[str, str] | None = None) -> SetFile:
    if not root.is_dir():
        raise SourceUnavailable(
            f"LongBench mirror directory {root} does not exist: `{HUB.download_hint(root)}`"
        )
    return build(_LazyTasks(root, TASKS), templates or load_templates())


def build_from_hub(templates: Mapping[str, str] | None = None) -> SetFile:
    """Download ``data.zip`` at the pinned revision (the dataset's loading script is not run),
    then read it exactly as a mirror."""
    try:
        from huggingface_hub import hf_hub_download

        archive = hf_hub_download(HUB.repo, "data.zip", repo_type="dataset", revision=HUB.revision)
    except Exception as e:
        raise SourceUnavailable(
            f"{HUB.repo}@{HUB.revision[:12]} data.zip could not be downloaded "
            f"({type(e).__name__}: {str(e)[:200]})"
        ) from e
    return build_from_mirror(Path(archive).parent, templates)
