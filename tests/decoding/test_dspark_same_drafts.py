"""Same drafts as llama.cpp (issue 13): on a random-weight (non-zero) DSpark file, our engine's
DSpark drafter picks, round by round and at the same anchors, the drafts llama-server's own
``draft-dspark`` loop logs. Losslessness cannot show this (any drafter decodes losslessly); equal
picks show that the target's layer-input capture, the injection of the committed rows into the
drafter's KV, the block's positions and the in-graph Markov chain compute what llama.cpp does.

Setup. llama-server decodes ``--spec-draft-n-max`` block rows per round (3 here) and attention
inside the block is non-causal, so our engine gets a file whose ``dflash.block_size`` is 3 (its
full block is then llama-server's) and arm ``chain3``. Both see the same prompt tokens (a raw
token list to ``/completion``; ``chat=false`` for the command, which tokenizes as the test does)
and run llama.cpp's default kernels (``exact=false``: the command in a subprocess, since this
test process runs in exact mode). llama-server's drafts come from its debug log
(``--log-verbosity 5``; :mod:`adaspark.serving.llama_log`), ours from ``generate trace=true``.
Random weights accept almost nothing, so both advance about a token a round and the rounds'
anchors are the text's positions; llama-server's first round is at the first generated token
(its prefill samples it), ours at the prompt's last token, so llama-server's rounds are the ones
compared.

Tolerance rule. A row's pick may differ from llama-server's only at a near tie that the log itself
shows: our pick is llama-server's candidate 1 and the logged probabilities of candidates 0 and 1
differ by at most :data:`TIE_P` (the log prints three decimals; both rows' softmax is over the
same top ten, so this bounds the top-2 logit gap by about ``TIE_P / p``). The rows after such a
row in its round are not compared (the Markov bias of a row depends on the pick before it). Every
other row must be equal, and a run may have at most :data:`MAX_TIES` ties.

The comparison can fail: the same picks compared one anchor off, or against another random
file's log, are mostly different (sanity assertions below).

Beyond the picks, the logged candidates' probabilities (the softmax over each row's top ten, as
llama.cpp's drafter sampler has them) are our block's, from our engine in exact mode in this
process, to :data:`PROB_TOL`: the Markov bias and the backbone give the same distribution, not only
the same argmax. (Observed: at most 0.003, the same in fast mode; the log rounds to 0.0005 and the
rest is float noise of other batch shapes, e.g. llama-server prefills the prompt's last token
where our engine verifies it with its first round's drafts.)
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from helpers import run_cli

from adaspark.decoding.drafter import dspark_file as dsf
from adaspark.schema import LlamaServerOptions
from adaspark.serving.llama_log import Candidate, DraftRound, read_draft_rounds

PROMPTS = ("The history of the Roman Empire began", "Write a haiku about the sea")
SEEDS = (7, 11)
N_MAX = 3  # llama-server's --spec-draft-n-max: its block; the file's block size
N_TOKENS = 32
TIE_P = 0.002
MAX_TIES = 1
#: Compared rounds one anchor off (or against another file) may agree on at most this share of
#: their rows (the random files' later rows often pick the same few tokens; row 0 rarely).
MAX_CHANCE_SHARE = 0.25
#: The logged probabilities (three decimals, llama.cpp's kernels) against ours in exact mode.
PROB_TOL = 0.005

pytestmark = pytest.mark.server


@dataclass
class Served:
    """llama-server's reply and drafter rounds for one prompt."""

    tokens: list[int]
    content: str
    rounds: list[DraftRound]
    draft_n: int
    draft_n_accepted: int


@dataclass
class Ours:
    """Our engine's ``generate`` JSON for one prompt (trace on)."""

    out: dict
    rounds: dict[int, dict] = field(default_factory=dict)  # by anchor position


@pytest.fixture(scope="module")
def prompts(tiny_target) -> list[list[int]]:
    """The prompts as ``generate chat=false`` tokenizes them."""
    return [tiny_target.tokenize(p, add_special=True, parse_special=False) for p in PROMPTS]


@pytest.fixture(scope="module")
def files(tmp_path_factory, tiny_path) -> dict[int, Path]:
    d = tmp_path_factory.mktemp("same_drafts")
    shape = dsf.DrafterShape(block_size=N_MAX)
    return {s: dsf.write_random(tiny_path, d / f"random{s}.gguf", seed=s, shape=shape)
            for s in SEEDS}


def serve(target: Path, drafter: Path, prompts: list[list[int]], log: Path) -> list[Served]:
    """One llama-server ``draft-dspark`` (greedy, n_max 3, p_min 0, debug log) answering every
    prompt through ``/completion`` in turn; each prompt's rounds from the log, by task."""
    from adaspark.serving.llama_server import LlamaServerSpec, llama_server_process
    from adaspark.serving.main import free_port

    spec = LlamaServerSpec(model=target, n_ctx=1024, threads=os.cpu_count() or 1,
                           port=free_port(), drafter=drafter,
                           server=LlamaServerOptions(spec_type="draft-dspark",
                                                     spec_draft_n_max=N_MAX, spec_draft_p_min=0.0,
                                                     extra_args=["--log-verbosity", "5"]))
    replies = []
    with llama_server_process(spec, log, startup_timeout_s=120) as proc:
        for p in prompts:
            r = httpx.post(f"{proc.url}/completion", timeout=120, json={
                "prompt": p, "n_predict": N_TOKENS, "return_tokens": True,
                "cache_prompt": False})
            r.raise_for_status()
            replies.append(r.json())
    rounds = read_draft_rounds(log)
    tasks = list(dict.fromkeys(r.task for r in rounds))
    assert len(tasks) == len(prompts), tasks
    return [Served([int(t) for t in j["tokens"]], j["content"],
                   [r for r in rounds if r.task == task], j["timings"]["draft_n"],
                   j["timings"]["draft_n_accepted"])
            for j, task in zip(replies, tasks, strict=True)]


@pytest.fixture(scope="module")
def served(files, prompts, tiny_path, tmp_path_factory) -> dict[int, list[Served]]:
    d = tmp_path_factory.mktemp("same_drafts_logs")
    return {s: serve(tiny_path, f, prompts, d / f"llama-server-{s}.log")
            for s, f in files.items()}


@pytest.fixture(scope="module")
def ours(files) -> dict[tuple[int, int], Ours]:
    """``adaspark generate`` in fast mode with arm chain3 on each file and prompt."""
    got = {}
    for s, f in files.items():
        for i, prompt in enumerate(PROMPTS):
            r = run_cli("generate", "target=tiny", "drafter=dspark", f"drafter.path={f}",
                        "arm=chain3", f"prompt={prompt}", "chat=false", f"max_tokens={N_TOKENS}",
                        "trace=true", "json=true", "exact=false", "check_greedy=true")
            assert r.returncode == 0, r.stderr[-2000:]
            out = json.loads(r.stdout)
            got[s, i] = Ours(out, {t["anchor_pos"]: t for t in out["trace"]})
    return got


# ---------------------------------------------------------------------------------------------
# The comparison


def near_tie(ours: int, cands: tuple[Candidate, ...]) -> bool:
    """Our pick is llama-server's runner-up, logged within :data:`TIE_P` of its pick."""
    return len(cands) > 1 and cands[1].token == ours and cands[0].p - cands[1].p <= TIE_P


@dataclass
class Comparison:
    rounds: int = 0  # llama-server rounds with one of ours at the same anchor
    rows: int = 0  # rows compared
    equal: int = 0
    ties: list[tuple[int, int]] = field(default_factory=list)  # (anchor position, row)
    differ: list[tuple[int, int, int, tuple]] = field(default_factory=list)

    @property
    def share(self) -> float:
        return self.equal / self.rows if self.rows else float("nan")


def compare(theirs: list[DraftRound], ours: dict[int, dict], *, shift: int = 0) -> Comparison:
    """Row by row, llama-server's round at anchor position ``p`` against ours at ``p + shift``
    (``shift=0``: the same anchors), under the module's tolerance rule."""
    c = Comparison()
    for r in theirs:
        mine = ours.get(r.anchor_pos + shift)
        if mine is None:
            continue
        c.rounds += 1
        for i, (pick, cands) in enumerate(zip(mine["picks"], r.candidates, strict=False)):
            c.rows += 1
            if pick == cands[0].token:
                c.equal += 1
                continue
            if near_tie(pick, cands):
                c.ties.append((r.anchor_pos, i))
            else:
                c.differ.append((r.anchor_pos, i, pick, tuple((x.token, x.p) for x in cands)))
            break  # the next rows' Markov bias follows a different pick
    return c


def test_both_decode_the_plain_greedy_text(served, ours, prompts):
    for s in SEEDS:
        for i in range(len(PROMPTS)):
            srv, mine = served[s][i], ours[s, i].out
            assert mine["greedy_match"] and not mine["differences"], (s, i)
            assert mine["prompt_tokens"] == len(prompts[i]) and mine["tokens"] == N_TOKENS
            assert len(srv.tokens) == N_TOKENS and srv.content == mine["text"], (s, i)
            # random weights: almost nothing accepted (a reply that repeats itself lets a random
            # drafter copy a token or two), so about a round per token in both
            assert srv.draft_n_accepted <= 3 and mine["accepted"] <= 3, (s, i)
            # the anchors are the same tokens at the same positions
            text = prompts[i] + srv.tokens
            assert all(text[r.anchor_pos] == r.anchor for r in srv.rounds)
            assert all(text[p] == t["anchor"] for p, t in ours[s, i].rounds.items())


def test_our_picks_are_llama_servers_drafts_round_by_round(served, ours, prompts):
    for s in SEEDS:
        for i in range(len(PROMPTS)):
            srv, mine = served[s][i], ours[s, i].rounds
            # llama-server drafts from the first generated token on until the request's room
            # runs out (its last round drafts none); every one of its rounds has ours
            assert srv.rounds[0].anchor_pos == len(prompts[i])
            assert min(mine) == len(prompts[i]) - 1
            assert all(len(r.candidates) == N_MAX for r in srv.rounds)
            c = compare(srv.rounds, mine)
            print(f"seed {s} prompt {i}: {c.rounds} rounds, {c.rows} rows, {c.equal} equal, "
                  f"ties {c.ties}, differ {c.differ}")
            assert c.rounds == len(srv.rounds) >= N_TOKENS - 6, (s, i)
            assert not c.differ, (s, i, c.differ)
            assert len(c.ties) <= MAX_TIES, (s, i, c.ties)
            assert c.rows >= N_MAX * c.rounds - len(c.ties) * (N_MAX - 1)
            # and the same verify: a round that verified the whole block accepted as many
            assert all(r.accepted == mine[r.anchor_pos]["accepted"] for r in srv.rounds
                       if r.kept == N_MAX and not c.ties), (s, i)


def test_the_comparison_tells_other_drafts_apart(served, ours):
    """Sanity: the same comparison, one anchor off or against the other file's log, fails."""
    for i in range(len(PROMPTS)):
        a, b = SEEDS
        for shift in (-1, 1):
            off = compare(served[a][i].rounds, ours[a, i].rounds, shift=shift)
            print(f"prompt {i}, shift {shift}: {off.rounds} rounds, {off.rows} rows, "
                  f"{off.equal} equal, {len(off.differ)} differ")
            assert off.rounds >= len(served[a][i].rounds) - 4 and off.differ, (i, shift)
            assert off.share <= MAX_CHANCE_SHARE, (i, shift, off.share)
        other = compare(served[b][i].rounds, ours[a, i].rounds)
        print(f"prompt {i}, other file: {other.rounds} rounds, {other.rows} rows, "
              f"{other.equal} equal, {len(other.differ)} differ")
        assert other.rounds >= len(served[b][i].rounds) - 4 and other.differ, i
        assert other.share <= MAX_CHANCE_SHARE, (i, other.share)


def test_the_logged_probabilities_are_our_blocks_in_exact_mode(served, files, prompts):
    from adaspark import arms
    from adaspark.config import compose
    from adaspark.decoding.loop import generate
    from adaspark.schema import check_arm

    for s, path in files.items():
        for i, prompt in enumerate(prompts):
            cfg = compose(["target=tiny", "drafter=dspark", f"drafter.path={path}", "arm=chain3",
                           "drafter.candidates_per_position=10"])
            parts = arms.build(cfg, check_arm(cfg.arm, "arm"), exact=True)
            blocks = {}
            draft = parts.drafter.draft

            def keep(committed, n, draft=draft, blocks=blocks):
                blocks[len(committed) - 1] = b = draft(committed, n)
                return b

            parts.drafter.draft = keep
            try:
                gen = generate(parts.target, prompt, N_TOKENS, parts.rule, parts.drafter,
                               parts.block_positions)
            finally:
                parts.close()
            assert gen.tokens == served[s][i].tokens, (s, i)
            rows, worst = 0, 0.0
            for r in served[s][i].rounds:
                b = blocks[r.anchor_pos]
                for row, cands in enumerate(r.candidates):
                    p = dict(zip(b.tokens[row].tolist(), b.probs[row] / b.probs[row].sum(),
                                 strict=True))
                    for c in cands:
                        assert c.token in p, (s, i, r.anchor_pos, row, c)
                        worst = max(worst, abs(p[c.token] - c.p))
                    rows += 1
                    if b.tokens[row, 0] != cands[0].token:
                        assert near_tie(int(b.tokens[row, 0]), cands), (s, i, r.anchor_pos, row)
                        break
            print(f"seed {s} prompt {i}: {rows} rows, worst |p - p_logged| {worst:.4f}")
            assert rows >= N_MAX * (N_TOKENS - 6) and worst <= PROB_TOL, (s, i, worst)
