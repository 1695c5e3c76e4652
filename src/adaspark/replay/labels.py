"""Labels for trace-driven replay (issue 14, "Labels"): what any round at any anchor of a reply
could be told by the target and the drafter.

Under greedy decoding a verify row is accepted exactly when its parent row is accepted and its
token is the target's argmax at the parent. An accepted row therefore always lies on the reply's
own greedy text, and the only argmax a verify ever reads is the target's argmax at a text
position: the text's next token. So for one prompt the labels are, at every position ``p`` an
anchor can sit at (the prompt's last token, then every generated token):

- ``next``: the target's greedy token after ``text[:p + 1]`` (Eq. 1's acceptance: the label of
  every tree node whose path is the text; a node off the text is never accepted, whatever the
  target's argmax below it);
- ``next_eog``: whether that token ends generation;
- the drafter's **full** block at ``p`` (B positions, top-K tokens and probabilities, the
  confidence head): every arm's block at that anchor is its first positions.

Nothing else a width rule reads comes from the engine: n-gram candidates come from the rule's own
index over the committed text, and times from a device model (:mod:`adaspark.replay.prices`).

Under sampling (:mod:`adaspark.decoding.sampling`) the same holds with the target's draw in place
of its argmax: each position's token is drawn from the target's row with a uniform keyed by
(seed, position), whatever tree reached it, so ``next`` is the sampled reply's next token and a
node is accepted exactly when its path is that text. A sampled prompt's labels are made with the
reply's own seed and named by it (:func:`label_key`), so two seeds never share a file.

Labels are made in exact mode (the target's argmax is then plain greedy decoding's, the same for
every lossless arm), one position per round: a one-row verify after drafting the full block. One
Parquet file per prompt (:data:`SCHEMA`, one row per anchor), written atomically when the prompt
is done, so a killed labelling run resumes at the next prompt; the directory's ``meta.json``
names the target, drafter and llama.cpp build the labels were made with, and labels made with
other ones are refused, never mixed.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from adaspark import io
from adaspark.config import ConfigError
from adaspark.decoding.drafter.base import Block
from adaspark.decoding.round import room_left
from adaspark.decoding.sampling import SamplingParams, keyed_draws
from adaspark.decoding.tree import chain_tree

META_FILE = "meta.json"
_META_KEY = b"adaspark.labels"

SCHEMA = pa.schema([
    pa.field("anchor_pos", pa.int64()),
    pa.field("anchor", pa.int64()),
    pa.field("next", pa.int64()),
    pa.field("next_eog", pa.bool_()),
    pa.field("block_tokens", pa.list_(pa.int64())),   # B*K, row-major; empty without a drafter
    pa.field("block_probs", pa.list_(pa.float64())),
    pa.field("confidence", pa.list_(pa.float64())),   # B
])


class LabelsError(ConfigError):
    """Labels that cannot serve this replay as they are (another model, too short, missing)."""


class LabelsTooShort(LabelsError):
    """A replayed round needs the label at ``position``, past the labelled text."""

    def __init__(self, key: str, position: int, have: int) -> None:
        super().__init__(f"the labels of prompt {key} end at position {have - 1}; the replay "
                         f"needs position {position}: label this prompt further")
        self.key, self.position = key, position


def label_depth(scheduler: dict[str, Any] | None) -> int:
    """Positions labelled past a reply's block, so that no tree of any rule walks past them: the
    n-gram chains' depth limit (``scheduler.ngram_fill.chain_depth_limit``), plus two."""
    return int(((scheduler or {}).get("ngram_fill") or {}).get("chain_depth_limit", 32)) + 2


def prompt_key(prompt: list[int]) -> str:
    """The file name of a prompt's labels: its tokens' sha256 (16 hex digits)."""
    return hashlib.sha256(np.asarray(prompt, dtype=np.int64).tobytes()).hexdigest()[:16]


def label_key(prompt: list[int], seed: int | None = None) -> str:
    """The file name of a prompt's labels: :func:`prompt_key`, and the sampling seed they were
    drawn with (none: greedy)."""
    return prompt_key(prompt) if seed is None else f"{prompt_key(prompt)}-s{int(seed)}"


@dataclass
class PromptLabels:
    """One prompt's labels: row ``i`` is anchor position ``start + i`` (``start`` is the prompt's
    last token). ``blocks`` is ``(n, B, K)`` tokens, ``probs`` the same shape, ``confidence``
    ``(n, B)``; ``B = 0`` without a drafter."""

    prompt: list[int]
    next: np.ndarray
    next_eog: np.ndarray
    blocks: np.ndarray
    probs: np.ndarray
    confidence: np.ndarray
    #: the sampling seed the labels were drawn with (None: greedy decoding's argmax)
    seed: int | None = None
    #: Seconds the labelling pass spent, by part (``target``: its prefill and one-row verifies;
    #: ``drafter``: this drafter's blocks); not stored, zero for labels read from a file.
    seconds: dict[str, float] = field(default_factory=dict, compare=False)

    @property
    def key(self) -> str:
        return prompt_key(self.prompt)

    @property
    def start(self) -> int:
        return len(self.prompt) - 1

    @property
    def end(self) -> int:
        """One past the last labelled anchor position."""
        return self.start + len(self.next)

    @property
    def text(self) -> list[int]:
        """The prompt and the target's greedy continuation as far as labelled."""
        return list(self.prompt) + [int(t) for t in self.next]

    def _row(self, position: int) -> int:
        i = position - self.start
        if i < 0:
            raise LabelsError(f"position {position} is inside prompt {self.key}")
        if i >= len(self.next):
            raise LabelsTooShort(self.key, position, self.end)
        return i

    def label(self, position: int) -> int:
        """The target's greedy token after ``text[:position + 1]``."""
        return int(self.next[self._row(position)])

    @property
    def eog_tokens(self) -> set[int]:
        """The labelled tokens that end generation."""
        return {int(t) for t in self.next[self.next_eog]}

    def block(self, position: int, n_positions: int, draft_s: float = 0.0) -> Block:
        """The drafter's block at anchor ``position``, its first ``n_positions`` positions."""
        i = self._row(position)
        B = self.blocks.shape[1]
        if B == 0:
            raise LabelsError(f"the labels of prompt {self.key} hold no drafter blocks: they "
                              "were made for an arm without a drafter; label with the arm's "
                              "drafter")
        if n_positions > B:
            raise LabelsError(f"a round asks for {n_positions} positions; the labelled blocks "
                              f"have {B}: label with the drafter's full block")
        return Block(self.blocks[i, :n_positions].copy(), self.probs[i, :n_positions].copy(),
                     self.confidence[i, :n_positions].copy(), draft_s=draft_s)


# -- storage ---------------------------------------------------------------------------------


def write_labels(path: Path, lab: PromptLabels, identity: dict[str, Any] | None = None) -> Path:
    """One prompt's labels; the file records the prompt (tokens and hash) and the ``identity``
    (target, drafter, build) it was made for, which :meth:`LabelStore.get` checks."""
    n = len(lab.next)
    B = lab.blocks.shape[1] if lab.blocks.ndim == 3 else 0
    table = pa.table({
        "anchor_pos": list(range(lab.start, lab.start + n)),
        "anchor": [int(t) for t in lab.text[lab.start:lab.start + n]],
        "next": lab.next.astype(np.int64).tolist(),
        "next_eog": lab.next_eog.astype(bool).tolist(),
        "block_tokens": [lab.blocks[i].ravel().tolist() for i in range(n)] if B else [[]] * n,
        "block_probs": [lab.probs[i].ravel().tolist() for i in range(n)] if B else [[]] * n,
        "confidence": [lab.confidence[i].tolist() for i in range(n)] if B else [[]] * n,
    }, schema=SCHEMA)
    shape = [int(x) for x in lab.blocks.shape[1:]] if B else [0, 0]
    head = {"prompt": [int(t) for t in lab.prompt], "block_shape": shape,
            "prompt_sha256": prompt_key(lab.prompt), "seed": lab.seed,
            "identity": None if identity is None else json.loads(json.dumps(identity,
                                                                            default=str))}
    return io.write_parquet(path, table.replace_schema_metadata(
        {_META_KEY: json.dumps(head).encode()}))


def label_head(path: Path) -> dict[str, Any]:
    """A labels file's record of what it was made for (prompt, its hash, identity, shape)."""
    raw = (pq.read_schema(path).metadata or {}).get(_META_KEY)
    if raw is None:
        raise LabelsError(f"{path} is not a labels file of this version: remove it and label "
                          "again")
    return json.loads(raw)  # type: ignore[no-any-return]


def read_labels(path: Path) -> PromptLabels:
    table = pq.read_table(path)
    raw = (table.schema.metadata or {}).get(_META_KEY)
    if raw is None or table.schema.remove_metadata() != SCHEMA:
        raise LabelsError(f"{path} is not a labels file of this version: remove it and label "
                          "again")
    head = json.loads(raw)
    B, K = head["block_shape"]
    cols = table.to_pydict()
    n = table.num_rows
    if B:
        blocks = np.asarray(cols["block_tokens"], dtype=np.int64).reshape(n, B, K)
        probs = np.asarray(cols["block_probs"], dtype=np.float64).reshape(n, B, K)
        conf = np.asarray(cols["confidence"], dtype=np.float64).reshape(n, B)
    else:
        blocks = np.zeros((n, 0, 0), dtype=np.int64)
        probs = np.zeros((n, 0, 0))
        conf = np.zeros((n, 0))
    return PromptLabels(head["prompt"], np.asarray(cols["next"], dtype=np.int64),
                        np.asarray(cols["next_eog"], dtype=bool), blocks, probs, conf,
                        seed=head.get("seed"))


class LabelStore:
    """A directory of labels made with one target, drafter and build (``identity``)."""

    def __init__(self, directory: Path, identity: dict[str, Any], *,
                 restart: bool = False) -> None:
        """``restart``: labels made with another identity are deleted (the labels stage's
        ``--on-mismatch restart``, as DVC reruns a stage); else they are refused. A sampled
        store's identity holds the sampling fields but the seed; :attr:`seeds` gives each
        prompt's (by :func:`prompt_key`), and the file is named by both (:func:`label_key`)."""
        self.dir = Path(directory)
        self.identity = identity
        self.seeds: dict[str, int] = {}
        meta = self.dir / META_FILE
        if meta.is_file():
            have = json.loads(meta.read_text(encoding="utf-8"))
            if have != identity and restart:
                import shutil

                shutil.rmtree(self.dir)
            elif have != identity:
                diff = sorted(k for k in set(have) | set(identity)
                              if have.get(k) != identity.get(k))
                raise LabelsError(
                    f"the labels in {self.dir} were made with another {', '.join(diff)}; "
                    "labels of two models or builds are never mixed: remove that directory "
                    "to label again with this one")

    def seed_of(self, prompt: list[int]) -> int | None:
        return self.seeds.get(prompt_key(prompt))

    def path(self, prompt: list[int]) -> Path:
        return self.dir / f"{label_key(prompt, self.seed_of(prompt))}.parquet"

    def get(self, prompt: list[int]) -> PromptLabels | None:
        """The prompt's labels, or None; a file made for another prompt (a file renamed or
        swapped) or another identity is refused, naming it."""
        p = self.path(prompt)
        if not p.is_file():
            return None
        head = label_head(p)
        want = prompt_key(prompt)
        made_for = head.get("prompt_sha256") or prompt_key(head.get("prompt") or [])
        if made_for != want or [int(t) for t in head.get("prompt") or []] != list(map(int,
                                                                                     prompt)):
            raise LabelsError(f"{p} holds the labels of another prompt (sha256 {made_for}, "
                              f"not {want}): label files are named by their prompt; remove it "
                              "and label again")
        mine = json.loads(json.dumps(self.identity, default=str))
        if head.get("identity") is not None and head["identity"] != mine:
            raise LabelsError(f"{p} was labelled with another target, drafter or build than "
                              f"its directory's {META_FILE}: remove it and label again")
        if head.get("seed") != self.seed_of(prompt):
            raise LabelsError(f"{p} was drawn with seed {head.get('seed')}, not this reply's "
                              f"{self.seed_of(prompt)}: remove it and label again")
        return read_labels(p)

    def put(self, lab: PromptLabels) -> None:
        if lab.seed != self.seed_of(lab.prompt):
            raise LabelsError(f"labels drawn with seed {lab.seed} are not prompt {lab.key}'s "
                              f"(seed {self.seed_of(lab.prompt)}) in {self.dir}")
        self.dir.mkdir(parents=True, exist_ok=True)
        meta = self.dir / META_FILE
        if not meta.is_file():
            io.write_json(meta, self.identity)
        write_labels(self.path(lab.prompt), lab, self.identity)


# -- labelling on the engine -----------------------------------------------------------------


def label_prompt_jointly(target: Any, drafters: Sequence[tuple[Any, int]], prompt: list[int],
                         n: int, text: Sequence[int] = (),
                         sampling: SamplingParams | None = None) -> list[PromptLabels]:
    """Label ``n`` anchor positions after ``prompt`` on the engine for several drafters in one
    pass of the target: per position each drafter's full block (``drafters``: ``(drafter,
    B)``, a drafter of None drafts nothing) and the target's greedy token there (the label).
    The target's labels are the same for every drafter (a drafter never changes what the target
    computes), so one prefill and one pass of verifies serve them all. It does not stop at an
    end-of-generation token: a round's tree may reach past it. The labels stop, for every
    drafter, where the widest block no longer fits the target's context.

    ``text``: the reply the labels are for, when known (an exact-mode greedy reply: the
    target's argmax at each of its positions). The target then verifies it as a chain of up to
    the exact path's width (``target.max_rows`` rows; a drafter that is always right), so a
    position costs a share of a wide forward instead of a one-row verify of its own; exact
    mode's rows are bit-identical in any batch of that width, so the labels (and a DSpark
    drafter's features, injected one position at a time as the labels need them) are those of
    one-row verifies. Where the target's argmax leaves ``text`` (not the target's greedy text),
    the rest of ``text`` is dropped and the labels go on one row at a time, as they do past
    its end.

    ``sampling``: the reply's sampling (its own seed), for a sampled reply: each position's
    label is the target's keyed draw there (:func:`adaspark.decoding.sampling.keyed_draws`),
    ``text`` verified as a chain through the engine's verify and commit."""
    sampled = sampling is not None and not sampling.greedy
    t0 = time.perf_counter()
    target.prefill(prompt)
    target_s = time.perf_counter() - t0
    drafter_s = [0.0 for _ in drafters]
    for j, (drafter, _B) in enumerate(drafters):
        if drafter is not None:
            t0 = time.perf_counter()
            drafter.begin(prompt)
            drafter_s[j] += time.perf_counter() - t0
    widths = [B if drafter is not None else 0 for drafter, B in drafters]
    widest = max(1, *widths)
    drafted: list[tuple[list[Any], list[Any], list[Any]]] = [([], [], []) for _ in drafters]

    def room(committed: list[int]) -> int:  # positions left past the widest block's
        return room_left(target.n_ctx, len(committed)) - widest

    last: list[Block | None] = [None for _ in drafters]

    def draft_all(committed: list[int]) -> None:
        for j, ((drafter, _B), B, (blocks, probs, conf)) in enumerate(zip(
                drafters, widths, drafted, strict=True)):
            if B:
                t0 = time.perf_counter()
                prev = last[j]
                b = (drafter.draft_next(committed, B, prev)  # one position on: reuse its rows
                     if prev is not None and hasattr(drafter, "draft_next")
                     else drafter.draft(committed, B))
                last[j] = b
                drafter_s[j] += time.perf_counter() - t0
                blocks.append(b.tokens)
                probs.append(b.probs)
                conf.append(b.confidence)

    inject = target.on_committed_rows  # a DSpark drafter's hook: fed one position at a time
    injector = next((j for j, (d, _B) in enumerate(drafters)
                     if inject is not None and getattr(d, "inject", None) == inject), None)
    rows: list[tuple[list[int], int]] = []
    known = [int(t) for t in text]
    chain = target.max_rows - 1
    nxt: list[int] = []
    more = n > 0 and room(target.committed) >= 0
    if more:
        draft_all(list(target.committed))
    target.on_committed_rows = lambda r, p0: rows.append((list(r), p0))
    try:
        while more:
            committed = target.committed
            ahead = known[len(nxt):len(nxt) + max(0, min(chain, n - len(nxt) - 1,
                                                         room(committed)))]
            rows.clear()
            t0 = time.perf_counter()
            if sampled:
                assert sampling is not None
                tree = chain_tree(int(committed[-1]), ahead)
                res = target.verify(tree)
                new = list(target.commit(res, keyed_draws(
                    target.logits(tree.n_rows), sampling, len(committed),
                    tree.depths())).tokens)
            elif ahead:
                new = list(target.follow(ahead).tokens)
            else:
                new = list(target.commit(target.verify(chain_tree(int(committed[-1]),
                                                                  []))).tokens)
            target_s += time.perf_counter() - t0
            if new != known[len(nxt):len(nxt) + len(new)]:
                known = []  # the target left the text (or it ended): one row at a time on
            path, p0 = rows[0]
            for i, tok in enumerate(new):
                if inject is not None:
                    t0 = time.perf_counter()
                    inject([path[i]], p0 + i)
                    if injector is not None:
                        drafter_s[injector] += time.perf_counter() - t0
                nxt.append(tok)
                done = list(prompt) + nxt
                more = len(nxt) < n and room(done) >= 0
                if not more:
                    break
                draft_all(done)
    finally:
        target.on_committed_rows = inject
    eog = [bool(target.is_eog(t)) for t in nxt]
    m = len(nxt)
    out = []
    for B, (blocks, probs, conf), d_s in zip(widths, drafted, drafter_s, strict=True):
        K = blocks[0].shape[1] if blocks else 0
        out.append(PromptLabels(
            list(prompt), np.asarray(nxt, dtype=np.int64), np.asarray(eog, dtype=bool),
            np.asarray(blocks, dtype=np.int64).reshape(m, B, K) if B else
            np.zeros((m, 0, 0), dtype=np.int64),
            np.asarray(probs, dtype=np.float64).reshape(m, B, K) if B else np.zeros((m, 0, 0)),
            np.asarray(conf, dtype=np.float64).reshape(m, B) if B else np.zeros((m, 0)),
            seed=sampling.seed if sampled and sampling is not None else None,
            seconds={"target": target_s, "drafter": d_s}))
    return out


def ensure_labels(stores: Sequence[LabelStore], prompts: Sequence[Sequence[tuple[list[int], int]]],
                  make: Callable[[list[int], int, list[int]], list[PromptLabels]],
                  log: Callable[[str], None] = lambda _m: None
                  ) -> tuple[list[dict[str, PromptLabels]], float]:
    """Every prompt's labels in each store, at least ``n`` positions each (``prompts[j]``: the
    ``(prompt, n)`` store ``j`` needs), from the store or made with ``make(prompt, n, which)``,
    which labels the stores ``which`` (indices) in one pass, and stored at once (a killed run
    resumes at the prompt it was labelling). A prompt several stores need is labelled once, to
    the most positions any of them needs. Returns each store's labels by prompt key and the
    seconds spent labelling."""
    out: list[dict[str, PromptLabels]] = [{} for _ in stores]
    wants: dict[str, tuple[list[int], dict[int, int]]] = {}
    for j, want in enumerate(prompts):
        for prompt, n in want:
            _p, need = wants.setdefault(prompt_key(prompt), (list(prompt), {}))
            need[j] = max(n, need.get(j, 0))
    spent = 0.0
    for i, (key, (prompt, need)) in enumerate(wants.items(), 1):
        have = {j: out[j].get(key) or stores[j].get(prompt) for j in need}
        which = sorted(j for j in need if have[j] is None or len(have[j].next) < need[j])
        if which:
            n = max(need.values())
            t0 = time.perf_counter()
            made = make(prompt, n, which)
            dt = time.perf_counter() - t0
            spent += dt
            for j, lab in zip(which, made, strict=True):
                stores[j].put(lab)
                have[j] = lab
            log(f"labels {i}/{len(wants)}: prompt {key}, {len(made[0].next)} positions in "
                f"{dt:.1f} s" + (f" ({len(which)} drafters in one pass)" if len(which) > 1
                                 else ""))
        for j, lab in have.items():
            out[j][key] = lab
    return out, spent
