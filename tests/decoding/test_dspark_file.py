"""DSpark drafter files the project writes itself (§2.1; issue 13): a random and an oracle file for
the tiny target load in llama.cpp, the reader refuses files that do not fit the target, and
llama-server's own ``draft-dspark`` loop, run on them, decodes the plain text while drafting what
the oracle construction predicts (no mocks: the real tiny model and the real llama-server)."""

from __future__ import annotations

import ctypes
import dataclasses
import json
import os
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
import pytest
from helpers import run_cli

from adaspark.cli.dspark_file import greedy_continuation
from adaspark.decoding.drafter import dspark_file as dsf
from adaspark.decoding.drafter.dspark_predict import (
    MarkovHead,
    chain,
    markov_successors,
    predict_server_rounds,
)
from adaspark.decoding.drafter.gguf_meta import read_meta
from adaspark.schema import LlamaServerOptions

PROMPT = "The history of the Roman Empire began"
N_REPLY = 32  # tokens asked from llama-server
BLOCK = 8
CORRUPT_AT = 5  # a transition of the text that is its token's first occurrence (checked below)


@dataclass
class Files:
    prompt: list[int]
    text: list[int]  # our engine's greedy continuation (N_REPLY + BLOCK tokens)
    random: Path
    oracle: Path
    corrupted: Path
    table: dsf.SuccessorTable
    corrupted_table: dsf.SuccessorTable


@pytest.fixture(scope="module")
def files(tmp_path_factory, tiny_path, tiny_target) -> Files:
    d = tmp_path_factory.mktemp("dspark")
    prompt = tiny_target.tokenize(PROMPT, add_special=True, parse_special=False)
    text = greedy_continuation(tiny_target, prompt, N_REPLY + BLOCK)
    shape = dsf.DrafterShape(block_size=BLOCK)
    random = dsf.write_random(tiny_path, d / "random.gguf", seed=7, shape=shape)
    oracle, table = dsf.write_oracle(tiny_path, d / "oracle.gguf", text, shape=shape)
    corrupted, ctable = dsf.write_oracle(tiny_path, d / "corrupted.gguf", text, shape=shape,
                                         corrupt_at=CORRUPT_AT)
    return Files(prompt, text, random, oracle, corrupted, table, ctable)


def rewrite(src: Path, dst: Path, *, fields: dict | None = None,
            tensors: dict[str, np.ndarray] | None = None) -> Path:
    """Copy a (float32) GGUF with some metadata values replaced or added (unsigned integers)
    and some int64 tensors added."""
    import gguf

    m = read_meta(src)
    w = gguf.GGUFWriter(dst, arch=m.get("general.architecture"))
    fields = dict(fields or {})
    for key, f in m.fields.items():
        if key != "general.architecture":
            sub = None if f.sub_type is None else gguf.GGUFValueType(f.sub_type)
            w.add_key_value(key, fields.pop(key, f.value), gguf.GGUFValueType(f.vtype),
                            sub_type=sub)
    for k, v in fields.items():
        w.add_uint32(k, int(v))
    for name in m.tensors:
        w.add_tensor(name, m.tensor(name))
    for name, arr in (tensors or {}).items():
        w.add_tensor(name, arr, raw_dtype=gguf.GGMLQuantizationType.I64)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return dst


# ---------------------------------------------------------------------------------------------
# The files


def test_both_files_load_in_llama_cpp(files):
    from adaspark.decoding.engine import _llama

    ll = _llama()
    for path in (files.random, files.oracle, files.corrupted):
        mp = ll.llama_model_default_params()
        mp.n_gpu_layers = 0
        m = ll.llama_model_load_from_file(str(path).encode(), mp)
        assert m, f"llama.cpp could not load {path.name}"
        try:
            buf = ctypes.create_string_buffer(64)
            assert ll.llama_model_meta_val_str(m, b"general.architecture", buf, 64) > 0
            assert buf.value == b"dflash"
            assert ll.llama_model_meta_val_str(m, b"dflash.block_size", buf, 64) > 0
            assert buf.value == str(BLOCK).encode()
            assert ll.llama_model_n_embd(m) == 576
            vocab = ll.llama_model_get_vocab(m)
            assert ll.llama_vocab_n_tokens(vocab) == 49152
            assert ll.llama_vocab_mask(vocab) == 2  # the target's padding token
        finally:
            ll.llama_model_free(m)


def test_the_reader_reads_what_was_written(files, tiny_path):
    r = dsf.check_dspark_file(files.random, tiny_path)
    assert (r.target_layers, r.block_size, r.hidden_size, r.n_layer) == ((2, 15, 28), 8, 576, 1)
    assert (r.markov_rank, r.has_confidence_head, r.sample_from_anchor) == (32, True, True)
    assert (r.mask_token_id, r.kind, r.d2t, r.selector) == (2, "random", None, {})
    assert not r.own_embeddings and not r.own_output  # borrowed through ctx_other
    o = dsf.check_dspark_file(files.oracle, tiny_path)
    n_successors = len(set(files.table.successor.values()) | {files.table.fallback})
    assert o.kind == "oracle" and o.markov_rank == n_successors and o.is_dspark


def test_random_weights_are_not_zero_and_the_oracle_backbone_is(files):
    r, o = read_meta(files.random), read_meta(files.oracle)
    rnd = {n: r.tensor(n) for n in r.tensors}
    orc = {n: o.tensor(n) for n in o.tensors}
    assert set(rnd) == set(orc)
    assert all(np.count_nonzero(a) > 0.9 * a.size for a in rnd.values())
    backbone = [n for n in orc if not n.startswith(("markov_", "conf_proj"))]
    assert backbone and all(not orc[n].any() for n in backbone)


def test_the_oracle_tensors_chain_the_text(files):
    text, table = files.text, files.table
    succ = markov_successors(files.oracle, [*text, table.fallback, 17])
    assert all(succ[t] == s for t, s in table.successor.items())
    assert succ[table.fallback] == succ[17] == table.fallback  # tokens the text never continues
    first_conflict = table.conflicts[0] if table.conflicts else len(text) - 1
    assert first_conflict > 10, "choose a prompt whose continuation repeats itself later"
    assert chain(succ.__getitem__, text[0], first_conflict) == tuple(text[1:first_conflict + 1])
    assert text.index(text[CORRUPT_AT]) == CORRUPT_AT
    bad = markov_successors(files.corrupted, [text[CORRUPT_AT]])[text[CORRUPT_AT]]
    assert bad == files.corrupted_table.wrong and bad != text[CORRUPT_AT + 1]
    assert bad not in text


def test_the_successor_table_resolves_repeats_by_first_occurrence():
    t = dsf.successor_table([5, 6, 5, 7, 6, 8], 1000)
    assert t.successor == {5: 6, 6: 5, 7: 6} and t.conflicts == (2, 4)
    assert t(999) == t.fallback == 100
    with pytest.raises(dsf.DSparkFileError, match="first occurs at 0"):
        dsf.successor_table([5, 6, 5, 7], 1000, corrupt_at=2)
    with pytest.raises(dsf.DSparkFileError, match="rank=2 is below the 3 distinct"):
        dsf.oracle_markov(t, 1000, rank=2)


def test_the_prediction_follows_llama_servers_loop():
    ref = [10, 11, 12, 13, 14, 15, 16, 17]
    succ = {10: 11, 11: 12, 12: 99, 13: 14, 14: 15, 15: 16, 16: 17}.get
    rounds = predict_server_rounds(ref, lambda t: succ(t, 0), n_max=3, max_tokens=8)
    # anchor 10: drafts 11 12 99, 2 accepted; anchor 13 (index 3): 14 15 16 all accepted;
    # anchor 17 (index 7): no room left (8 tokens emitted)
    assert [(r.anchor, r.drafts, r.accepted) for r in rounds] == [
        (0, (11, 12, 99), 2), (3, (14, 15, 16), 3)]
    cut = predict_server_rounds(ref, lambda t: succ(t, 0), n_max=3, max_tokens=6)
    assert [(r.anchor, len(r.drafts)) for r in cut] == [(0, 3), (3, 1)]  # cap - emitted - 1


# ---------------------------------------------------------------------------------------------
# The validator


def test_refused_target_layers_beyond_the_targets(files, tiny_cut_path):
    with pytest.raises(dsf.DSparkFileError) as e:
        dsf.check_dspark_file(files.random, tiny_cut_path)  # SmolLM2 cut to 22 blocks
    msg = str(e.value)
    assert "dflash.target_layers=[2, 15, 28]" in msg and "[28]" in msg and "22 blocks" in msg


def test_refused_another_hidden_size(tmp_path, tiny_path):
    small = dataclasses.replace(dsf.read_target(tiny_path), n_embd=512, n_head=8, n_head_kv=2)
    shape = dsf.DrafterShape(markov_rank=4)
    p = dsf.write_dflash_gguf(tmp_path / "h512.gguf", small, shape,
                              dsf.random_tensors(small, shape, 0), name="h512")
    with pytest.raises(dsf.DSparkFileError, match=r"dflash.embedding_length=512 differs .*"
                                                  r"embedding_length=576"):
        dsf.check_dspark_file(p, tiny_path)


def test_refused_another_vocabulary_and_a_bad_d2t_accepted_a_good_one(files, tmp_path, tiny_path):
    tokens = list(read_meta(files.random).get(dsf.KEY_TOKENS))
    tokens[500] = "a token the target does not have"
    other = rewrite(files.random, tmp_path / "vocab.gguf", fields={dsf.KEY_TOKENS: tokens})
    with pytest.raises(dsf.DSparkFileError, match=r"tokenizer .* differs from the target's"):
        dsf.check_dspark_file(other, tiny_path)
    ids = np.arange(0, 2000, 2, dtype=np.int64)
    good = rewrite(files.random, tmp_path / "d2t.gguf", tensors={"d2t": ids})
    info = dsf.check_dspark_file(good, tiny_path)
    assert info.draft_vocab == 1000 and info.d2t is not None and info.d2t[-1] == 1998
    ids[3] = ids[4]
    bad = rewrite(files.random, tmp_path / "d2t-dup.gguf", tensors={"d2t": ids})
    with pytest.raises(dsf.DSparkFileError, match="d2t tensor must map each draft row"):
        dsf.check_dspark_file(bad, tiny_path)


def test_refused_dflash2_and_non_dflash_files(files, tmp_path, tiny_path):
    p = rewrite(files.random, tmp_path / "dflash2.gguf", fields={"dflash.selector_rank": 16})
    with pytest.raises(dsf.DSparkFileError, match=r"DFlash2 .*selector_rank.* not supported"):
        dsf.check_dspark_file(p, tiny_path)
    with pytest.raises(dsf.DSparkFileError, match=r"general\.architecture='llama', not 'dflash'"):
        dsf.check_dspark_file(tiny_path, tiny_path)
    with pytest.raises(dsf.DSparkFileError, match="is a dflash drafter, not a target"):
        dsf.check_dspark_file(files.random, files.random)


# ---------------------------------------------------------------------------------------------
# The command


def test_command_writes_an_oracle_and_refuses_bad_input(tmp_path):
    out = tmp_path / "o.gguf"
    p = run_cli("dspark-file", "kind=oracle", "target=tiny", f"out={out}", "chat=false",
                f"prompt={PROMPT}", "max_tokens=16", "corrupt_at=3", "block=4")
    assert p.returncode == 0, p.stderr[-2000:]
    s = json.loads(p.stdout.strip().splitlines()[-1])
    assert s["kind"] == "oracle" and len(s["text"]) == 20 and s["corrupt_at"] == 3
    assert s["block_size"] == 4 and s["target_layers"] == [2, 15, 28] and out.is_file()
    p = run_cli("dspark-file", "kind=trained", "target=tiny", f"out={out}")
    assert p.returncode == 2 and "kind=random or kind=oracle" in p.stderr
    p = run_cli("dspark-file", "kind=random", "target=tiny", f"out={tmp_path / 'r.gguf'}",
                "layers=2,15,30")
    assert p.returncode == 1 and "[30] outside the target's layer inputs 0..29" in p.stderr


@pytest.mark.parametrize("words,shown", [
    (["layers="], "layers=''"),
    (["block=0"], "block=0 is not allowed"),
    (["rank=0"], "rank=0 is not allowed"),
    (["n_layers=0"], "n_layers=0 is not allowed"),
    (["block=1024"], f"block must be an integer from 1 to {dsf.MAX_BLOCK_SIZE}"),
])
def test_command_refuses_bad_shapes_with_exit_2(tmp_path, capsys, words, shown):
    """Issue 34, items 9 and 15: an empty ``layers=``, a block or a rank of 0 and a block the
    engine cannot hold are configuration errors (exit 2), nothing written."""
    from adaspark.cli import main

    out = tmp_path / "r.gguf"
    assert main(["dspark-file", "kind=random", "target=tiny", f"out={out}", *words]) == 2
    err = capsys.readouterr().err
    assert shown in err and "Traceback" not in err and not out.exists()


def test_command_refuses_a_directory_as_out(tmp_path, capsys):
    from adaspark.cli import main

    assert main(["dspark-file", "kind=random", "target=tiny", f"out={tmp_path}"]) == 2
    err = capsys.readouterr().err
    assert f"out={tmp_path} is a directory" in err and "Traceback" not in err


def test_a_block_the_engine_cannot_hold_is_refused_at_writing_and_at_loading(files, tmp_path,
                                                                            tiny_path):
    """Issue 34, item 9: a block of 1024 positions aborted the process when loaded
    (``GGML_ASSERT(obj_new)``): the writer refuses it, and so does every loader."""
    too_long = dsf.MAX_BLOCK_SIZE + 1
    with pytest.raises(dsf.DSparkFileError, match=f"block={too_long}: .* 1 to "
                                                   f"{dsf.MAX_BLOCK_SIZE} positions"):
        dsf.write_random(tiny_path, tmp_path / "long.gguf",
                         shape=dsf.DrafterShape(block_size=too_long))
    p = rewrite(files.random, tmp_path / "long.gguf", fields={dsf.KEY_BLOCK_SIZE: 1024})
    with pytest.raises(dsf.DSparkFileError, match=r"dflash.block_size=1024: .* 1 to "
                                                  f"{dsf.MAX_BLOCK_SIZE} positions"):
        dsf.check_dspark_file(p, tiny_path)


# ---------------------------------------------------------------------------------------------
# llama-server's own draft-dspark loop on the files


def complete(target: Path, tmp: Path, prompt: list[int], *, spec_type: str = "none",
             drafter: Path | None = None) -> dict:
    """One greedy /completion of N_REPLY tokens from a fresh llama-server (stopped after)."""
    from adaspark.serving.llama_server import LlamaServerSpec, llama_server_process
    from adaspark.serving.main import free_port

    spec = LlamaServerSpec(model=target, n_ctx=1024, threads=os.cpu_count() or 1,
                           port=free_port(), drafter=drafter,
                           server=LlamaServerOptions(spec_type=spec_type, spec_draft_n_max=3,
                                                     spec_draft_p_min=0.0))
    log = tmp / f"{spec_type}-{drafter.stem if drafter else 'ar'}.log"
    with llama_server_process(spec, log, startup_timeout_s=120) as proc:
        r = httpx.post(f"{proc.url}/completion", timeout=120, json={
            "prompt": prompt, "n_predict": N_REPLY, "return_tokens": True,
            "cache_prompt": False})
    r.raise_for_status()
    return r.json()


@pytest.fixture(scope="module")
def plain(files, tiny_path, tmp_path_factory) -> list[int]:
    """llama-server's plain greedy reply (llamacpp-ar): the reference text."""
    r = complete(tiny_path, tmp_path_factory.mktemp("ar"), files.prompt)
    assert len(r["tokens"]) == N_REPLY, "the reference must reach the cap (no end of text)"
    return [int(t) for t in r["tokens"]]


def drafted(files, tiny_path, tmp_path_factory, path: Path) -> tuple[list[int], int, int]:
    r = complete(tiny_path, tmp_path_factory.mktemp("dspark"), files.prompt,
                 spec_type="draft-dspark", drafter=path)
    return [int(t) for t in r["tokens"]], r["timings"]["draft_n"], r["timings"]["draft_n_accepted"]


def predicted(path: Path, reference: list[int]) -> tuple[int, int, list]:
    """llama-server's draft_n and draft_n_accepted as the file's own Markov head predicts them."""
    rounds = predict_server_rounds(reference, MarkovHead.from_file(path), n_max=3,
                                   max_tokens=N_REPLY)
    return sum(len(r.drafts) for r in rounds), sum(r.accepted for r in rounds), rounds


@pytest.mark.server
def test_llama_server_oracle_accepts_what_the_construction_predicts(files, tiny_path, plain,
                                                                    tmp_path_factory):
    tokens, n, acc = drafted(files, tiny_path, tmp_path_factory, files.oracle)
    assert tokens == plain  # the same text as plain llama-server decoding
    want_n, want_acc, rounds = predicted(files.oracle, plain)
    assert (n, acc) == (want_n, want_acc), [(r.anchor, r.drafts, r.accepted) for r in rounds]
    assert acc >= 0.75 * n > 0  # high acceptance: the drafts are the text


@pytest.mark.server
def test_llama_server_corrupted_transition_rejects_where_predicted(files, tiny_path, plain,
                                                                   tmp_path_factory):
    tokens, n, acc = drafted(files, tiny_path, tmp_path_factory, files.corrupted)
    assert tokens == plain
    want_n, want_acc, rounds = predicted(files.corrupted, plain)
    assert (n, acc) == (want_n, want_acc), [(r.anchor, r.drafts, r.accepted) for r in rounds]
    _, oracle_acc, oracle_rounds = predicted(files.oracle, plain)
    assert acc < oracle_acc
    # the first round that differs from the oracle's is the one whose drafts pass the corrupted
    # transition: its drafts stop matching right after the corrupted token's position
    first = next(i for i, (a, b) in enumerate(zip(rounds, oracle_rounds, strict=False)) if a != b)
    r = rounds[first]
    wrong = files.corrupted_table.wrong
    assert wrong in r.drafts and r.anchor + r.accepted == CORRUPT_AT


@pytest.mark.server
def test_llama_server_random_file_accepts_almost_nothing(files, tiny_path, plain,
                                                         tmp_path_factory):
    tokens, n, acc = drafted(files, tiny_path, tmp_path_factory, files.random)
    assert tokens == plain
    assert n >= N_REPLY  # it drafts every round
    assert acc <= n // 10
