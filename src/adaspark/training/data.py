"""The ``drafter-data`` stage's work (issue 15): training text, the target's greedy replies to
the prompts (captured as they are made, ``training.capture.greedy_replies``), the overlap check
against the test set, and the capture of the plain text, written incrementally so that a killed
run resumes.

Layout of the output directory::

    replies.jsonl        one line per prompt: its reply's tokens and the test-set spans it
                         shared (appended as each ends, after its document; a reply with a
                         shared span is recorded empty and not kept)
    docs/<key>.npz       one captured document (tokens, labels, feats, anchor_from)
    manifest.json        what was captured, from what, with the overlap report and timings

A document's key is a digest of its token ids, the target file's sha256 and the layers, so a
rerun with another target or other layers never reuses a capture.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from adaspark.io import atomic_path, json_text, open_append, open_new, write_json
from adaspark.training.capture import (
    Captured,
    capture,
    enable_capture,
    greedy_replies,
    reply_rows,
)
from adaspark.training.corpus import (
    Document,
    forbidden_spans,
    overlap_report,
    prompts,
    stdlib_documents,
    test_set_rows,
)


@dataclass(frozen=True)
class DataSettings:
    """``drafter_data`` in ``train/params.yaml``."""

    layers: tuple[int, ...]
    stdlib_chars: int  # plain text, in characters
    n_prompts: int
    reply_tokens: int  # cap per reply
    parallel: int  # sequences per decode step while replying
    window: int  # plain text is cut into windows of this many tokens
    seed: int
    n_ctx: int  # cells per sequence (the context holds ``parallel`` of them)


def doc_key(tokens: np.ndarray, target_sha: str, layers: tuple[int, ...]) -> str:
    h = hashlib.sha256(target_sha.encode() + json.dumps(list(layers)).encode())
    h.update(np.asarray(tokens, dtype=np.int32).tobytes())
    return h.hexdigest()[:24]


def save_captured(path: Path, c: Captured) -> None:
    with atomic_path(path) as tmp, open_new(tmp) as f:
        np.savez(f, tokens=c.tokens, labels=c.labels, feats=c.feats,
                 anchor_from=np.int64(c.anchor_from))


def load_captured(path: Path) -> Captured:
    with np.load(path) as z:
        return Captured(z["tokens"], z["labels"], z["feats"], int(z["anchor_from"]))


def reply_key(prompt: list[int], cap: int) -> str:
    """A reply's identity: its prompt's tokens and the cap it was made under."""
    return hashlib.sha256(json.dumps([cap, prompt]).encode()).hexdigest()[:24]


def read_replies(path: Path) -> dict[str, tuple[list[int], int]]:
    """Recorded replies by :func:`reply_key`: the tokens (empty for a reply dropped by the
    overlap check) and how many test-set spans it shared (a line cut by a kill is left out:
    replied again)."""
    out: dict[str, tuple[list[int], int]] = {}
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                try:
                    r = json.loads(line)
                except json.JSONDecodeError:
                    continue
                out[str(r["key"])] = ([int(t) for t in r["tokens"]], int(r.get("hits", 0)))
    return out


def windows(tokens: list[int], size: int) -> list[list[int]]:
    """Plain text cut into consecutive windows of ``size`` tokens (the last one kept if it has
    at least 64)."""
    out = [tokens[i:i + size] for i in range(0, len(tokens), size)]
    return [w for w in out if len(w) >= 64]


def make_dataset(model: Any, target_sha: str, s: DataSettings, out: Path, data_dir: Path,
                 log: Any = print) -> dict[str, Any]:
    """Everything the stage writes, resuming whatever an earlier run left (see module doc)."""
    from adaspark.serving import chat

    t0 = time.time()
    out.mkdir(parents=True, exist_ok=True)
    (out / "docs").mkdir(exist_ok=True)
    forbidden = forbidden_spans(test_set_rows(data_dir))
    plain = stdlib_documents(s.stdlib_chars, s.seed)
    asks = prompts(s.n_prompts, s.seed)
    hit_in = overlap_report([*plain, *asks], forbidden)
    plain = [d for d in plain if d.name not in hit_in]
    asks = [d for d in asks if d.name not in hit_in]
    log(f"training text: {len(plain)} standard-library files, {len(asks)} prompts "
        f"({len(hit_in)} documents dropped for a 50-character span of the test set; "
        f"{len(forbidden):,} spans checked)")
    enable_capture(model, s.layers)

    # the target's greedy replies, captured as they are made (one document each)
    template = model.chat_template()
    prompt_toks = [model.tokenize(chat.render(template, [{"role": "user", "content": d.text}]),
                                  add_special=model.add_bos, parse_special=True) for d in asks]
    rpath = out / "replies.jsonl"
    keys = [reply_key(p, s.reply_tokens) for p in prompt_toks]
    kept = read_replies(rpath)
    done: dict[int, list[int]] = {}   # prompt -> its reply (empty: dropped)
    hit_rep: dict[str, int] = {}
    for i, k in enumerate(keys):
        if k not in kept:
            continue
        reply, hits = kept[k]
        if hits:
            done[i], hit_rep[asks[i].name] = [], hits
        elif _reply_doc(out, prompt_toks[i], reply, target_sha, s.layers).is_file():
            done[i] = reply
    todo = [i for i in range(len(asks)) if i not in done]
    t_rep = time.time()
    if todo:
        log(f"greedy replies, captured as they are made: {len(todo)} prompts to go "
            f"({len(done)} kept from an earlier run), {s.parallel} at a time, at most "
            f"{s.reply_tokens} tokens each")
        n_tok = [0]

        def on_done(j: int, reply: list[int], doc: Captured | None) -> None:
            i = todo[j]
            assert doc is not None
            hits = overlap_report([Document(asks[i].name, "reply", model.detokenize(reply))],
                                  forbidden).get(asks[i].name, 0)
            if hits:   # a reply sharing a span with the test set is not kept
                hit_rep[asks[i].name] = hits
            else:
                save_captured(_reply_doc(out, prompt_toks[i], reply, target_sha, s.layers), doc)
            with open_append(rpath) as f:   # after its document: a recorded reply is whole
                f.write(json_text({"key": keys[i], "name": asks[i].name,
                                   "tokens": [] if hits else reply, "hits": hits},
                                  indent=None).encode("utf-8"))
            done[i] = [] if hits else reply
            n_tok[0] += len(reply)
            k = len(done)
            el = time.time() - t_rep
            rate = n_tok[0] / max(el, 1e-9)
            eta = el / max(k - (len(asks) - len(todo)), 1) * (len(asks) - k)
            if k % 10 == 0 or k == len(asks):
                log(f"  replies {k}/{len(asks)}  {rate:.1f} tok/s  ETA {eta / 60:.1f} min")

        greedy_replies(model, [prompt_toks[i] for i in todo], s.reply_tokens,
                       parallel=s.parallel, layers=s.layers, on_done=on_done)
    rep_s = time.time() - t_rep

    docs: list[tuple[str, str, list[int], int]] = []
    for i, d in enumerate(asks):
        if done[i]:
            docs.append((d.name, "reply", reply_rows(prompt_toks[i], done[i]),
                         len(prompt_toks[i])))
    for d in plain:
        toks = model.tokenize(d.text, add_special=False, parse_special=False)
        for k, w in enumerate(windows(toks, s.window)):
            docs.append((f"{d.name}#{k}", "stdlib", w, 1))

    # plain text: one prefill each, logits on every row
    t_cap, n_new, entries = time.time(), 0, []
    total = sum(len(t) for _, kind, t, _ in docs if kind == "stdlib")
    seen = 0
    for name, kind, toks, a0 in docs:
        arr = np.asarray(toks, dtype=np.int32)
        key = doc_key(arr, target_sha, s.layers)
        path = out / "docs" / f"{key}.npz"
        if kind == "stdlib":
            if not path.is_file():
                save_captured(path, capture(model, toks, s.layers, anchor_from=a0))
                n_new += len(toks)
                el = time.time() - t_cap
                eta = el / max(n_new, 1) * (total - seen - len(toks))
                if len(entries) % 25 == 0:
                    log(f"  captured {seen + len(toks):,}/{total:,} standard-library tokens  "
                        f"{n_new / max(el, 1e-9):.0f} tok/s  ETA {eta / 60:.1f} min")
            seen += len(toks)
        entries.append({"name": name, "kind": kind, "key": key, "tokens": len(toks),
                        "anchor_from": a0})
    cap_s = time.time() - t_cap
    manifest = {
        "target_sha256": target_sha, "layers": list(s.layers),
        "settings": {k: (list(v) if isinstance(v, tuple) else v)
                     for k, v in s.__dict__.items()},
        "sources": {
            "stdlib": "the Python standard library's source files of this interpreter "
                      "(tests, idlelib, lib2to3, turtledemo and site-packages left out)",
            "replies": "the target's greedy replies (fast mode) to prompts written for this "
                       "purpose (adaspark.training.corpus.prompts), captured as they were made"},
        "overlap": {"span_chars": 50, "test_set_spans": len(forbidden),
                    "dropped_inputs": hit_in, "dropped_replies": hit_rep,
                    "kept_documents": len(docs)},
        "tokens": {"reply": sum(len(done[i]) for i in range(len(asks))),
                   "total": sum(e["tokens"] for e in entries),
                   "stdlib": total},
        "seconds": {"replies": rep_s, "capture": cap_s, "total": time.time() - t0},
        "docs": entries,
    }
    write_json(out / "manifest.json", manifest)
    return manifest


def _reply_doc(out: Path, prompt: list[int], reply: list[int], target_sha: str,
               layers: tuple[int, ...]) -> Path:
    """Where a reply's captured document lives (:func:`reply_rows` names its tokens)."""
    toks = np.asarray(reply_rows(prompt, reply), dtype=np.int32)
    return out / "docs" / f"{doc_key(toks, target_sha, layers)}.npz"
