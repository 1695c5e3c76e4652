"""Microbenchmark context prompts (paper §3.2, Figures 3 and 5; issue 4's last bullet).

The verify-time survey runs at three contexts (443, 1,596 and 8,444 tokens) on "prompts that
continue public text", three prompts per context. Ours are made from the long documents of the
vendored test set, LongBench's first and then Spec-Bench's RAG and summarisation texts, each in
file order with no text repeated. A context's three prompts share no document: each takes the
next unused documents, joined with a blank line, until it holds enough tokens, and is cut to the
first N tokens of its vocabulary. Contexts are independent of each other (every context starts
again from the first document). For a model whose window cannot hold the largest context plus
the tokens a run generates, the three lengths are scaled down together to fit.

Everything here is pure: the caller passes the tokenizer (``str -> list[int]``) of the model.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from adaspark.testset.model import SetFile

#: The paper's three survey contexts, in tokens (§3.2).
TARGET_TOKENS: tuple[int, ...] = (443, 1596, 8444)
#: Prompts per context (labelled A, B, C).
PROMPTS_PER_CONTEXT = 3
#: Tokens left free in the window for what a survey run generates (Figure 5 runs 256 tokens).
RESERVE_TOKENS = 256
#: Between two documents of one prompt.
SEPARATOR = "\n\n"
#: Where the long documents come from, in this order: (set, kinds or None for every kind).
DOCUMENT_SOURCES: tuple[tuple[str, frozenset[str] | None], ...] = (
    ("longbench", None),
    ("specbench", frozenset({"rag", "summarization"})),
)

Tokenize = Callable[[str], list[int]]


@dataclass(frozen=True)
class Document:
    doc_id: str  # "<set>/<conversation>"
    text: str


@dataclass(frozen=True)
class ContextPrompt:
    """One prompt: ``n_tokens`` token ids, the first of its documents joined."""

    name: str  # e.g. "1596B"
    n_tokens: int
    documents: tuple[str, ...]
    token_ids: tuple[int, ...]


def long_documents(
    sets: Iterable[SetFile],
    sources: Sequence[tuple[str, frozenset[str] | None]] = DOCUMENT_SOURCES,
) -> list[Document]:
    """The documents prompts are made of: each turn text of the chosen sets and kinds, sources
    in ``sources`` order and each set in file order; a text seen before is not repeated."""
    by_name = {s.name: s for s in sets}
    seen: set[str] = set()
    out = []
    for set_name, kinds in sources:
        if set_name not in by_name:
            raise ValueError(f"the microbenchmark documents need the {set_name} set")
        for c in by_name[set_name].conversations:
            if kinds is not None and c.kind not in kinds:
                continue
            for i, t in enumerate(c.turns):
                if t.text in seen:
                    continue
                seen.add(t.text)
                suffix = "" if len(c.turns) == 1 else f"#{i + 1}"
                out.append(Document(f"{set_name}/{c.name}{suffix}", t.text))
    return out


def scaled_targets(
    targets: Sequence[int] = TARGET_TOKENS,
    n_ctx: int | None = None,
    reserve: int = RESERVE_TOKENS,
) -> tuple[int, ...]:
    """``targets`` unchanged, or all scaled by one factor so the largest plus ``reserve`` fits
    in an ``n_ctx`` window (HARNESS: "scaled to fit the tiny model's 8,192 window")."""
    if n_ctx is None or max(targets) + reserve <= n_ctx:
        return tuple(targets)
    room = n_ctx - reserve
    if room <= 0:
        raise ValueError(f"a window of {n_ctx} tokens leaves no room after {reserve} reserved")
    factor = room / max(targets)
    return tuple(max(1, int(t * factor)) for t in targets)


def context_prompts(
    documents: Sequence[Document],
    tokenize: Tokenize,
    targets: Sequence[int] = TARGET_TOKENS,
    *,
    n_ctx: int | None = None,
    reserve: int = RESERVE_TOKENS,
    per_context: int = PROMPTS_PER_CONTEXT,
) -> list[ContextPrompt]:
    """Three disjoint prompts per context length (see the module docstring)."""
    out = []
    for n in scaled_targets(targets, n_ctx, reserve):
        start = 0
        for k in range(per_context):
            label = f"{n}{chr(ord('A') + k)}"
            used: list[Document] = []
            ids: list[int] = []
            while len(ids) < n:
                if start + len(used) >= len(documents):
                    raise ValueError(
                        f"prompt {label} holds {len(ids)} tokens after the last of the "
                        f"{len(documents)} documents and needs {n}: pass a smaller target or "
                        "a window (n_ctx) to scale the targets to"
                    )
                used.append(documents[start + len(used)])
                ids = tokenize(SEPARATOR.join(d.text for d in used))
            start += len(used)
            out.append(ContextPrompt(label, n, tuple(d.doc_id for d in used), tuple(ids[:n])))
    return out


def microbench_prompts(
    sets: Iterable[SetFile],
    tokenize: Tokenize,
    targets: Sequence[int] = TARGET_TOKENS,
    *,
    n_ctx: int | None = None,
    reserve: int = RESERVE_TOKENS,
) -> list[ContextPrompt]:
    """The survey's prompts for one vocabulary from the test set's long documents."""
    return context_prompts(long_documents(sets), tokenize, targets, n_ctx=n_ctx, reserve=reserve)
