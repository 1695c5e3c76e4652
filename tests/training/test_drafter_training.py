"""The drafter pipeline (issue 15) on the real tiny model: capture, train, export, and the
exported GGUF drafting in our engine exactly what the PyTorch module computes; a training killed
midway resumes to the same weights as an unbroken one; the pure parts on known answers.

Needs the optional ``train`` group (``ADASPARK_EXTRAS=train bash scripts/setup.sh``; CI installs
it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import REPO

torch = pytest.importorskip("torch", reason="the drafter pipeline needs the train group")

from adaspark.training import corpus  # noqa: E402
from adaspark.training.capture import Captured  # noqa: E402
from adaspark.training.loss import block_loss, block_targets  # noqa: E402
from adaspark.training.model import rope_neox  # noqa: E402
from adaspark.training.train import (  # noqa: E402
    document_windows,
    draft_vocabulary,
    sample_windows,
    target_to_draft,
)

TINY_LAYERS = [2, 15, 28]
SMALL = [
    "drafter_data.stdlib_chars=6000", "drafter_data.n_prompts=4", "drafter_data.reply_tokens=24",
    "drafter_data.parallel=3", "drafter_data.window=128", "drafter_data.n_ctx=2048",
    f"drafter_data.layers=[{','.join(map(str, TINY_LAYERS))}]",
    "drafter_train.n_ff=256", "drafter_train.draft_vocab=512", "drafter_train.markov_rank=32",
    "drafter_train.windows_per_step=2", "drafter_train.window=128", "drafter_train.anchor_span=64",
    "drafter_train.warmup=2",
    "drafter_train.checkpoint_every=2", "drafter_train.eval_every=3", "drafter_train.heldout=0.25",
    "drafter_export.quant=Q8_0", "drafter_export.name=tiny-dspark",
]


# -- pure parts ---------------------------------------------------------------------------------


def test_block_targets_count_a_row_only_while_the_text_follows_the_argmax():
    tokens = np.array([5, 6, 7, 9, 10, 11])
    labels = np.array([6, 7, 8, 10, 11, 12])  # argmax predicts the next token, except at 2
    lab, ok = block_targets(tokens, labels, np.array([0, 2, 4]), 3)
    assert lab.tolist() == [[6, 7, 8], [8, 10, 11], [11, 12, 0]]
    # anchor 0: rows 1, 2 need tokens[1] == labels[0] (yes) and tokens[2] == labels[1] (yes)
    # anchor 2: row 1 needs tokens[3] == labels[2] (9 != 8): rows 1, 2 are not greedy
    # anchor 4: row 2 is past the text
    assert ok.tolist() == [[True, True, True], [True, False, False], [True, True, False]]


def test_block_loss_acceptance_counts_the_run_of_right_picks():
    logits = torch.full((2, 3, 4), -5.0)
    for n, picks in enumerate([[1, 2, 3], [1, 0, 3]]):
        for i, p in enumerate(picks):
            logits[n, i, p] = 5.0
    labels = torch.tensor([[1, 2, 3], [1, 2, 3]])
    r = block_loss(logits, torch.zeros(2, 3), labels, torch.ones(2, 3, dtype=torch.bool),
                   gamma=4.0, conf_weight=0.5)
    assert r.accept_len == pytest.approx(1 + (3 + 1) / 2)
    assert r.alive.tolist() == [2, 2, 1]  # row 2 of block 1 follows a wrong pick
    assert r.correct.tolist() == [2, 1, 1]


def test_draft_vocabulary_is_the_most_frequent_labels_ties_by_id():
    from adaspark.training.capture import Captured

    c = Captured(np.zeros(6, np.int32), np.array([3, 3, 1, 1, 2, 0], np.int32),
                 np.zeros((6, 1), np.float16), anchor_from=0)
    d2t = draft_vocabulary([c], 3, 5)
    assert d2t.tolist() == [1, 3, 0]
    assert target_to_draft(d2t, 5).tolist() == [2, 0, -1, 1, -1]


def _doc(n: int, anchor_from: int) -> Captured:
    z = np.zeros(n, dtype=np.int32)
    return Captured(z, z, np.zeros((n, 1), dtype=np.float16), anchor_from)


def test_document_windows_give_every_anchor_once_with_its_full_context():
    c = _doc(1000, 300)
    ws = document_windows(c, size=256, span=64)
    anchors = [a for w in ws for a in range(max(w.first_anchor, c.anchor_from), w.end)]
    assert anchors == list(range(300, 1000))   # each once, in order
    for w in ws:
        assert w.end - w.start <= 256 and w.end - w.first_anchor <= 64
        assert w.first_anchor - w.start == min(w.first_anchor, 256 - 64)   # context before


def test_sampled_windows_hold_anchors_of_their_document_and_context_before_them():
    docs = [_doc(1000, 1), _doc(200, 150), _doc(150, 149), _doc(400, 1)]
    ws = sample_windows(docs, np.random.default_rng(0), 300, size=256, span=64)
    assert {w.doc for w in ws} == {0, 1, 3}   # the one with no anchor is never drawn
    for w in ws:
        c = docs[w.doc]
        assert max(c.anchor_from, 1) <= w.first_anchor < len(c)
        assert w.start == max(0, w.first_anchor - 192) and w.end == min(len(c), w.first_anchor + 64)
    # a short reply is one run of anchors from its first: the whole reply in one window
    assert {w.first_anchor for w in ws if w.doc == 1} == {150}


def test_rope_scores_depend_only_on_the_distance():
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(1, 1, 8, generator=g), torch.randn(1, 1, 8, generator=g)
    s = [float((rope_neox(q, torch.tensor([p + 3]), 1e4) * rope_neox(k, torch.tensor([p]), 1e4))
               .sum()) for p in (0, 17)]
    assert s[0] == pytest.approx(s[1], abs=1e-5)


def test_overlap_report_finds_a_planted_50_character_span():
    row = "x" * 10 + "the quick brown fox jumps over the lazy dog and keeps running" + "y"
    forbidden = corpus.forbidden_spans([row])
    clean = corpus.Document("a", "stdlib", "nothing of that sentence is here, only other words")
    hit = corpus.Document("b", "stdlib", "prefix the quick brown fox jumps over the lazy dog and "
                                         "keeps running suffix")
    # the shared sentence has 61 characters: 61 - 50 + 1 spans of 50
    assert corpus.overlap_report([clean, hit], forbidden) == {"b": 12}


def test_the_training_text_shares_no_span_with_the_test_set():
    forbidden = corpus.forbidden_spans(corpus.test_set_rows(REPO / "data"))
    assert len(forbidden) > 100_000  # all six sources were read
    docs = corpus.prompts(60, seed=0) + corpus.stdlib_documents(40_000, seed=0)
    assert corpus.overlap_report(docs, forbidden) == {}


def test_the_default_and_smoke_pipelines_plan_no_drafter_stage():
    import yaml

    main = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]
    train = yaml.safe_load((REPO / "train" / "dvc.yaml").read_text())["stages"]
    assert set(train) == {"drafter-data", "drafter-train", "drafter-export"}
    assert not set(train) & set(main)
    out = subprocess.run([sys.executable, "-m", "dvc", "repro", "--dry", "--force"], cwd=REPO,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "Running stage 'run@" in out.stdout  # the plan lists the default stages ...
    assert "drafter-" not in out.stdout  # ... and none of the drafter pipeline's


# -- the chain on the tiny model ----------------------------------------------------------------


def _stage(*args: str, cache: Path, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "GGML_CPU_TILED_MM"}
    env |= {"PYTHONPATH": str(REPO / "src"), "ADASPARK_CACHE": str(cache)}
    # the model files stay where the session's are: ADASPARK_MODELS is not touched
    return subprocess.run([sys.executable, "-m", "adaspark.stages.drafter", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=timeout, env=env)


def _settings(tiny_path: Path) -> tuple[list[str], list[str]]:
    """The chain's params file and overrides (the tiny target, small data, 6 steps)."""
    return (["--params", str(REPO / "train" / "params.yaml")],
            [f"target={tiny_path}", *SMALL, "drafter_train.steps=6", "drafter_train.threads=1"])


@pytest.fixture(scope="module")
def chain(tmp_path_factory, tiny_path):
    """data -> train (once whole, once killed after step 3 and rerun) -> export."""
    d = tmp_path_factory.mktemp("drafter")
    params, over = _settings(tiny_path)
    r = _stage("data", *params, "--out", str(d / "data"), *over, cache=d / "cache")
    assert r.returncode == 0, r.stderr[-3000:]
    logs = {}
    for name, halt in (("whole", None), ("killed", 3)):
        train = ["train", *params, "--data", str(d / "data"), "--out", str(d / name)]
        if halt is not None:
            r = _stage(*train, "--halt-after", str(halt), *over, cache=d / name / "cache")
            assert r.returncode == 137, r.stderr[-3000:]
            assert not (d / name / "weights.pt").exists()
        r = _stage(*train, *over, cache=d / name / "cache")
        assert r.returncode == 0, r.stderr[-3000:]
        logs[name] = r.stderr
    r = _stage("export", *params, "--train", str(d / "whole"), "--out", str(d / "export"),
               *over, cache=d / "cache")
    assert r.returncode == 0, r.stderr[-3000:]
    return d, logs


def test_data_stage_records_its_sources_and_the_overlap_check(chain):
    d, _ = chain
    m = json.loads((d / "data" / "manifest.json").read_text())
    kinds = {e["kind"] for e in m["docs"]}
    assert kinds == {"reply", "stdlib"}
    assert m["overlap"]["test_set_spans"] > 100_000
    assert m["tokens"]["reply"] > 0 and m["layers"] == TINY_LAYERS
    from adaspark.training.data import load_captured

    c = load_captured(d / "data" / "docs" / f"{m['docs'][0]['key']}.npz")
    assert c.feats.shape == (len(c), 3 * 576) and c.anchor_from > 1  # a reply: past its prompt
    assert np.isfinite(c.feats.astype(np.float32)).all() and np.abs(c.feats).max() > 0


def test_a_killed_training_resumes_to_the_weights_of_an_unbroken_one(chain):
    d, runs = chain
    assert "resumed from" in runs["killed"] and "at step 2/6" in runs["killed"]
    a = torch.load(d / "whole" / "weights.pt", weights_only=False)["model"]
    b = torch.load(d / "killed" / "weights.pt", weights_only=False)["model"]
    assert set(a) == set(b)
    for k in a:
        assert torch.equal(a[k], b[k]), k
    m = json.loads((d / "whole" / "metrics.json").read_text())
    assert len(m["curve"]) == 6 and "heldout" in m["curve"][2]


def test_the_exported_file_drafts_in_our_engine_what_the_module_computes(chain, tiny_path):
    """The GGUF (F16 and Q8_0) in our DSpark drafter against the PyTorch module on the same
    features: the same picks, and the same probabilities and confidences (F16 within rounding)."""
    from adaspark.decoding.drafter.dspark import DSparkDrafter
    from adaspark.decoding.drafter.dspark_file import read_dspark_file, read_target
    from adaspark.decoding.engine import Model, Target
    from adaspark.stages.drafter import target_tensors
    from adaspark.training.capture import capture, enable_capture
    from adaspark.training.model import DrafterDims, DSparkNet

    d, _ = chain
    rec = json.loads((d / "export" / "export.json").read_text())
    w = torch.load(d / "whole" / "weights.pt", weights_only=False)
    emb, _ = target_tensors(tiny_path)
    net = DSparkNet(DrafterDims(**w["dims"]), emb)
    net.load_state_dict(w["model"], strict=False)
    prompt = Model(tiny_path, 512, exact=True, n_seq_max=1)
    toks = prompt.tokenize("def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.",
                           add_special=False, parse_special=False)
    enable_capture(prompt, TINY_LAYERS)
    feats = capture(prompt, toks[:-1], TINY_LAYERS, anchor_from=1).feats
    prompt.close()
    B = w["dims"]["block"]
    d2t = w["d2t"]
    with torch.no_grad():
        ctx = net.context_kv(torch.from_numpy(feats.astype(np.float32)))
        h = net.hidden(ctx, torch.tensor([len(toks) - 1]), torch.tensor([toks[-1]]),
                       int(w["mask_token"]))[0]

    def module_at(i: int, prev: int) -> tuple[np.ndarray, float]:
        """The module's draft-vocabulary distribution and confidence at block position i after
        token prev (each position reads the token picked before it)."""
        with torch.no_grad():
            p = torch.softmax(net.logits(h[i], torch.tensor(prev)), -1).numpy()
            c = float(torch.sigmoid(net.confidence_logit(h[i], torch.tensor(prev))))
        return p, c

    # The module's own greedy chain: F16 must draft exactly these tokens.
    prev, picks = toks[-1], []
    for i in range(B):
        p, _ = module_at(i, prev)
        prev = int(d2t[int(p.argmax())])
        picks.append(prev)
    for label, tol in (("f16", 5e-3), ("quant", 5e-2)):
        path = d / "export" / rec["files"][label]["file"]
        info = read_dspark_file(path)
        assert info.block_size == B and info.d2t is not None and info.own_output
        assert info.kind == "trained" and info.target_layers == tuple(TINY_LAYERS)
        assert read_target(tiny_path).n_vocab == info.n_vocab
        target = Target(tiny_path, 512, exact=True)
        drafter = DSparkDrafter(path, 512, exact=True, target=target)
        try:
            target.prefill(toks)
            drafter.begin(toks)
            blk = drafter.draft(list(toks), B)
        finally:
            drafter.close()
            target.close()
        got = blk.tokens[:, 0].tolist()
        if label == "f16":
            assert got == picks, label
        # Each pick against the module after the file's own previous pick: Q8_0 may break a
        # near-tie the other way (within its tolerance of the top), never pass over a clear
        # winner, and gives the module's probability and confidence within that tolerance.
        prev = toks[-1]
        for i, tok in enumerate(got):
            p, c = module_at(i, prev)
            j = int(np.flatnonzero(d2t == tok)[0])
            assert p[j] >= p.max() - tol, (label, i, float(p[j]), float(p.max()))
            assert abs(float(blk.probs[i, 0]) - float(p[j])) <= tol, (label, i)
            assert abs(float(blk.confidence[i]) - c) <= tol, (label, i)
            prev = tok


def test_exporting_the_same_weights_again_gives_the_same_bytes(chain, tiny_path):
    """The export is a function of the weights and settings: its provenance names the weights'
    sha256, not the hour, so a second export of one training run has the first's sha256."""
    d, _ = chain
    params, over = _settings(tiny_path)
    r = _stage("export", *params, "--train", str(d / "whole"), "--out", str(d / "export2"),
               *over, cache=d / "cache")
    assert r.returncode == 0, r.stderr[-3000:]
    first = json.loads((d / "export" / "export.json").read_text())
    again = json.loads((d / "export2" / "export.json").read_text())
    for label in ("f16", "quant"):
        assert first["files"][label]["sha256"] == again["files"][label]["sha256"], label
    from adaspark.model_files import sha256_file

    assert first["provenance"]["weights_sha256"] == sha256_file(d / "whole" / "weights.pt")


def test_replies_captured_as_they_are_made_match_a_prefill_of_the_same_text(tiny_path):
    """A reply decoded in a batch of parallel sequences keeps, per row it decoded, the layer
    inputs a plain prefill of the same text gives (the same rows, in other batches: exact mode's
    kernels here, as this test process runs them; the stage runs fast mode), and its labels are
    its own next tokens."""
    from adaspark.decoding.engine import Model
    from adaspark.training.capture import capture, enable_capture, greedy_replies

    par = 3
    m = Model(tiny_path, 512 * par, exact=True, n_seq_max=par, n_batch=512, kv_unified=False)
    try:
        assert m.seq_cells == 512
        enable_capture(m, TINY_LAYERS)
        prompts = [m.tokenize(t, add_special=False, parse_special=False) for t in
                   ("def add(a, b):", "The capital of France is", "1, 2, 3, 4,", "import os\n")]
        docs = {}
        replies = greedy_replies(m, prompts, 12, parallel=par, layers=TINY_LAYERS,
                                 on_done=lambda i, r, d: docs.__setitem__(i, (r, d)))
        assert sorted(docs) == [0, 1, 2, 3]
        for i, (reply, doc) in docs.items():
            assert reply == replies[i] and len(reply) == 12
            assert doc.tokens.tolist() == prompts[i] + reply[:-1]
            assert doc.labels.tolist() == [*doc.tokens[1:].tolist(), reply[-1]]
            assert doc.anchor_from == len(prompts[i])
            plain = capture(m, doc.tokens.tolist(), TINY_LAYERS, anchor_from=doc.anchor_from)
            a, b = doc.feats.astype(np.float32), plain.feats.astype(np.float32)
            assert a.shape == b.shape == (len(doc), 3 * 576) and np.array_equal(a, b)
            # the prefill's argmax is the reply's next token from the prompt's last row on
            k = len(prompts[i]) - 1
            assert plain.labels[k:].tolist() == doc.labels[k:].tolist()
        with pytest.raises(Exception, match="cells of a sequence"):
            greedy_replies(m, [[1] * 600], 8, parallel=1)
    finally:
        m.close()
