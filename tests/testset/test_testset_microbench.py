"""Microbenchmark prompts: three disjoint prompts per context, cut to the first N tokens."""

from __future__ import annotations

import pytest

from adaspark.testset.microbench import (
    SEPARATOR,
    TARGET_TOKENS,
    Document,
    context_prompts,
    long_documents,
    microbench_prompts,
    scaled_targets,
)
from adaspark.testset.model import SetFile, make_conversation


def whitespace_tokenizer():
    """A trivial tokenizer: one id per whitespace-separated word, ids given in first-seen order."""
    vocab: dict[str, int] = {}

    def tokenize(text: str) -> list[int]:
        return [vocab.setdefault(w, len(vocab)) for w in text.split()]

    return tokenize


def docs(n: int, words: int) -> list[Document]:
    return [Document(f"d{k}", " ".join(f"w{k}_{i}" for i in range(words))) for k in range(n)]


def test_three_disjoint_prompts_per_context():
    tok = whitespace_tokenizer()
    documents = docs(12, 100)
    prompts = context_prompts(documents, tok, (50, 150, 250))
    assert [p.name for p in prompts] == [
        "50A",
        "50B",
        "50C",
        "150A",
        "150B",
        "150C",
        "250A",
        "250B",
        "250C",
    ]
    texts = {d.doc_id: d.text for d in documents}
    for n in (50, 150, 250):
        group = [p for p in prompts if p.n_tokens == n]
        used = [d for p in group for d in p.documents]
        assert len(used) == len(set(used))  # no document shared between the three
        assert used == [d.doc_id for d in documents[: len(used)]]  # file order, none skipped
        for p in group:
            assert len(p.token_ids) == n
            assert list(p.token_ids) == tok(SEPARATOR.join(texts[d] for d in p.documents))[:n]
            assert len(p.documents) == -(-n // 100)  # only as many documents as N needs


def test_running_out_of_documents_says_so():
    with pytest.raises(ValueError, match="needs 250"):
        context_prompts(docs(5, 100), whitespace_tokenizer(), (250,))


def test_scaled_to_a_smaller_window():
    assert scaled_targets(TARGET_TOKENS, None) == TARGET_TOKENS
    assert scaled_targets(TARGET_TOKENS, 16_384) == TARGET_TOKENS
    small = scaled_targets(TARGET_TOKENS, 8_192, reserve=256)
    assert max(small) + 256 <= 8_192
    assert small[0] < 443 and small[1] < 1596
    ratios = [s / t for s, t in zip(small, TARGET_TOKENS, strict=True)]
    assert max(ratios) - min(ratios) < 0.01  # one factor for all three
    tok = whitespace_tokenizer()
    prompts = context_prompts(docs(30, 1000), tok, TARGET_TOKENS, n_ctx=8_192)
    assert sorted({p.n_tokens for p in prompts}) == list(small)


def test_documents_of_the_vendored_set(vendored):
    documents = long_documents(vendored)
    ids = [d.doc_id for d in documents]
    lb = next(s for s in vendored if s.name == "longbench")
    sb = next(s for s in vendored if s.name == "specbench")
    expected = [f"longbench/{c.name}" for c in lb.conversations] + [
        f"specbench/{c.name}" for c in sb.conversations if c.kind in ("rag", "summarization")
    ]
    assert ids == expected  # LongBench first, then Spec-Bench's RAG and summarisation texts
    assert len({d.text for d in documents}) == len(documents)  # no text repeated
    prompts = microbench_prompts(vendored, whitespace_tokenizer(), (200, 800, 1600))
    for n in (200, 800, 1600):
        used = [d for p in prompts if p.n_tokens == n for d in p.documents]
        assert len(used) == len(set(used))


def test_a_repeated_text_is_used_once():
    dup = "the same long text " * 50
    s_lb = SetFile(
        "longbench",
        [
            make_conversation("lb-a-1", "a", "s", "1", [dup]),
            make_conversation("lb-a-2", "a", "s", "2", [dup]),
        ],
    )
    s_sb = SetFile(
        "specbench",
        [
            make_conversation("sb-rag-1", "rag", "s", "3", [dup + "!"]),
            make_conversation("sb-qa-1", "qa", "s", "4", ["short"]),
        ],
    )
    assert [d.doc_id for d in long_documents([s_lb, s_sb])] == [
        "longbench/lb-a-1",
        "specbench/sb-rag-1",
    ]
