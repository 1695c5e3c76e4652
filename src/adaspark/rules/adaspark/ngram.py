"""N-gram candidates (§3.3): an index over the request's own text, prompt and reply.

A lookup proposes the token that followed an earlier occurrence of the current context, reading on
along the earlier passage (a *copy*), or else the most frequent follower of the last
``follower_context`` (3) tokens. Each proposal carries its evidence: the length of the copy it
continues, or its follower count. The index also measures its own top-1 precision on the committed
text, per evidence class, scoring each committed token before indexing it; that precision is the
n-gram source's ``p_src`` in Eq. (6).

Chains (Algorithm 1, line 4) start at the anchor and at each of the drafter's picks. A chain step
equal to a candidate the drafter already proposed at that parent marks it *agreed* (every other
drafter candidate there is *contradicted*); otherwise it adds an n-gram node. A chain stops at the
depth limit below the anchor, when nothing is proposed, or when it reaches a pick (the pick's own
chain continues from it). The index is per request.

The index and the chains run as compiled kernels (``adaspark.jit``): the committed text is an
array, and the two tables (3-token followers, 4-token occurrences) map a context to a slot of
fixed-width arrays (the followers kept, most counted first; the occurrences kept, latest last).
A table is an open-addressing hash table over the context packed exactly into two integers
(three tokens of 21 bits each), so a context holds at most :data:`KEY` tokens, each below
:data:`TOKEN_LIMIT`.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from adaspark.decoding.candidates import CandidateSet
from adaspark.jit import kernel
from adaspark.rules.adaspark.config import NGRAM_KEY, NgramConfig

#: Evidence classes of a proposal (Eq. 6's bucket evidence; the precision is kept per class).
EVIDENCE_NAMES = ("n1", "n2+", "copy", "copy-long")
#: The longest context a table key holds (``follower_context`` and ``copy_min_match`` at most,
#: as the config's validation says).
KEY = NGRAM_KEY
#: Token ids the index keys exactly (21 bits each, three to an integer; one value kept free).
TOKEN_LIMIT = (1 << 21) - 1


class Proposal(NamedTuple):
    """One chain step: the token, its follower count (0 for a copy), the copy's match length (0
    for a follower), and for a copy the position in the committed text it was read from."""

    token: int
    count: int
    matched: int
    copied_from: int


@kernel
def evidence_class(count: int, matched: int, long_match: int, count_edge: int) -> int:
    """0: follower seen once, 1: follower seen ``count_edge`` times or more, 2: a copy,
    3: a copy of at least ``long_match`` tokens."""
    if matched > 0:
        return 3 if matched >= long_match else 2
    return 1 if count >= count_edge else 0


class NgramIndex:
    """The request's index: 3-token followers and earlier occurrences of 4-token contexts."""

    def __init__(self, cfg: NgramConfig, long_match: int, count_edge: int) -> None:
        self.cfg = cfg   # follower_context, copy_min_match in 1..KEY (the config's ranges)
        self.long_match = long_match
        self.count_edge = count_edge
        self.reset()

    def reset(self) -> None:
        cap = 256
        c = self.cfg
        self._tail = np.zeros(cap, dtype=np.int64)
        self._n = 0
        self._fol = _new_table(2 * cap)
        self._fol_tok = np.zeros((cap, c.followers_kept), dtype=np.int64)
        self._fol_cnt = np.zeros((cap, c.followers_kept), dtype=np.int64)
        self._fol_n = np.zeros(cap, dtype=np.int64)
        self._occ = _new_table(2 * cap)
        self._occ_pos = np.zeros((cap, c.occurrences_kept), dtype=np.int64)
        self._occ_n = np.zeros(cap, dtype=np.int64)
        self._slots = np.zeros(2, dtype=np.int64)   # slots used: followers, occurrences
        self._scored = np.zeros((len(EVIDENCE_NAMES), 2), dtype=np.int64)

    @property
    def tail(self) -> np.ndarray:
        """The committed text indexed so far."""
        return self._tail[: self._n]

    @property
    def scored(self) -> list[list[int]]:
        """Per evidence class: ``[proposed, right]``."""
        return self._scored.tolist()

    def _reserve(self, more: int) -> None:
        """Room for ``more`` tokens (each adds at most one slot to either table, and a table
        keeps at most half its cells full)."""
        need = self._n + more
        cap = len(self._tail)
        if need > cap:
            cap = max(need, 2 * cap)

            def grown(a: np.ndarray) -> np.ndarray:
                out = np.zeros((cap, *a.shape[1:]), dtype=a.dtype)
                out[: len(a)] = a
                return out

            self._tail = grown(self._tail)
            self._fol_tok, self._fol_cnt = grown(self._fol_tok), grown(self._fol_cnt)
            self._fol_n = grown(self._fol_n)
            self._occ_pos, self._occ_n = grown(self._occ_pos), grown(self._occ_n)
        cells = len(self._fol[1])
        if 2 * need > cells:
            while 2 * need > cells:
                cells *= 2
            self._fol = _rehash(self._fol[0], self._fol[1], cells)
            self._occ = _rehash(self._occ[0], self._occ[1], cells)

    def _tables(self) -> tuple:
        return (self._tail, self._n, self._occ[0], self._occ[1], self._occ_pos, self._occ_n,
                self._fol[0], self._fol[1], self._fol_tok, self._fol_cnt, self._fol_n,
                self.cfg.copy_min_match, self.cfg.follower_context, self.cfg.copy_max_match)

    # -- lookups ---------------------------------------------------------------------------------

    def step(self, ctx: list[int] | np.ndarray) -> Proposal | None:
        """A copy of the request's own text first, else the top follower of the last tokens.

        The copy is the longest earlier passage of the committed text that ``ctx`` ends with, at
        least ``copy_min_match`` and at most ``copy_max_match`` tokens (longest wins, the latest
        among equals), proposing the token that followed it (:func:`_step`)."""
        a = np.asarray(ctx, dtype=np.int64)
        tok, count, matched, at = _step(a, len(a), *self._tables())
        return None if tok < 0 else Proposal(int(tok), int(count), int(matched), int(at))

    def copy_on(self, prev: Proposal) -> Proposal | None:
        """The step after a copy step: the next token of the same passage, one token longer."""
        at = prev.copied_from + 1
        if prev.matched == 0 or at >= self._n:
            return None
        return Proposal(int(self._tail[at]), 0, min(prev.matched + 1, self.cfg.copy_max_match),
                        at)

    def evidence(self, p: Proposal) -> int:
        return evidence_class(p.count, p.matched, self.long_match, self.count_edge)

    # -- the committed text ----------------------------------------------------------------------

    def extend(self, tokens: list[int] | np.ndarray, score: bool = True) -> None:
        """Index newly committed tokens (Algorithm 1, line 18), each scored first: the proposal a
        lookup would have made for it counts toward its evidence class's precision
        (:func:`_extend`)."""
        toks = np.asarray(tokens, dtype=np.int64)
        if not len(toks):
            return
        self._reserve(len(toks))
        c = self.cfg
        n = _extend(toks, score, self._slots, self._scored, c.followers_kept,
                    c.occurrences_kept, self.long_match, self.count_edge, *self._tables())
        if n < 0:
            raise ValueError(f"the n-gram index keys token ids 0 to {TOKEN_LIMIT - 1}: got "
                             f"{int(toks.min())} to {int(toks.max())}")
        self._n = n

    def precision(self) -> list[float]:
        """``p_src`` per evidence class: ``(right + a) / (proposed + b)`` (``precision_prior``)."""
        a, b = self.cfg.precision_prior
        return [(right + a) / (n + b) for n, right in self._scored.tolist()]


def _new_table(cells: int) -> tuple[np.ndarray, np.ndarray]:
    """An empty table of ``cells`` cells (a power of two): each cell's packed context and its
    slot (-1: empty)."""
    return np.zeros((cells, 2), dtype=np.int64), np.full(cells, -1, dtype=np.int64)


@kernel
def _pack(seq: np.ndarray, end: int, k: int) -> tuple[int, int]:
    """The ``k`` tokens of ``seq`` before ``end`` packed exactly into two integers (21 bits a
    token, three to an integer, :data:`TOKEN_LIMIT` for the places past ``k``)."""
    a = b = 0
    for i in range(KEY):
        t = seq[end - k + i] if i < k else TOKEN_LIMIT
        if i < 3:
            a |= t << (21 * i)
        else:
            b |= t << (21 * (i - 3))
    return a, b


@kernel
def _cell(keys: np.ndarray, vals: np.ndarray, a: int, b: int) -> int:
    """The cell holding the packed context ``(a, b)``, else the empty cell where it goes
    (linear probing from a multiplicative hash)."""
    mask = vals.shape[0] - 1
    h = (a * -7046029254386353131 + b * -4658895280553007687) ^ (a >> 29)
    i = (h ^ (h >> 32)) & mask
    while vals[i] >= 0 and (keys[i, 0] != a or keys[i, 1] != b):
        i = (i + 1) & mask
    return i


@kernel
def _slot(keys: np.ndarray, vals: np.ndarray, seq: np.ndarray, end: int, k: int) -> int:
    """The slot of the context ``seq[end - k:end]``, -1 when absent."""
    a, b = _pack(seq, end, k)
    return vals[_cell(keys, vals, a, b)]


@kernel
def _find_or_add(keys: np.ndarray, vals: np.ndarray, seq: np.ndarray, end: int, k: int,
                 slots: np.ndarray, which: int) -> tuple[int, bool]:
    """The slot of the context ``seq[end - k:end]``, and whether it is new (taken from
    ``slots[which]``, the table's next free slot)."""
    a, b = _pack(seq, end, k)
    cell = _cell(keys, vals, a, b)
    if vals[cell] >= 0:
        return vals[cell], False
    slot = slots[which]
    slots[which] += 1
    keys[cell, 0], keys[cell, 1], vals[cell] = a, b, slot
    return slot, True


@kernel
def _rehash(keys: np.ndarray, vals: np.ndarray, cells: int) -> tuple[np.ndarray, np.ndarray]:
    """The table's entries in a table of ``cells`` cells."""
    new_keys = np.zeros((cells, 2), dtype=np.int64)
    new_vals = np.full(cells, -1, dtype=np.int64)
    for i in range(vals.shape[0]):
        if vals[i] >= 0:
            j = _cell(new_keys, new_vals, keys[i, 0], keys[i, 1])
            new_keys[j, 0], new_keys[j, 1], new_vals[j] = keys[i, 0], keys[i, 1], vals[i]
    return new_keys, new_vals


@kernel
def common_suffix(a: np.ndarray, end_a: int, b: np.ndarray, end_b: int, limit: int) -> int:
    """The length (at most ``limit``) of the longest common suffix of ``a[:end_a]`` and
    ``b[:end_b]``."""
    n = 0
    while n < limit and a[end_a - 1 - n] == b[end_b - 1 - n]:
        n += 1
    return n


@kernel
def _step(ctx: np.ndarray, n_ctx: int, tail: np.ndarray, n_tail: int, occ_keys: np.ndarray,
          occ: np.ndarray, occ_pos: np.ndarray, occ_n: np.ndarray, fol_keys: np.ndarray,
          fol: np.ndarray, fol_tok: np.ndarray, fol_cnt: np.ndarray, fol_n: np.ndarray, k: int,
          f: int, max_match: int) -> tuple[int, int, int, int]:
    """:meth:`NgramIndex.step` on ``ctx[:n_ctx]``: ``(token, count, matched, copied_from)``,
    token -1 for none."""
    if n_ctx >= k:
        slot = _slot(occ_keys, occ, ctx, n_ctx, k)
        if slot >= 0:
            best_len, best_p = 0, -1
            cap = min(max_match, n_ctx)   # no match is longer: stop once one is
            for t in range(occ_n[slot] - 1, -1, -1):
                p = occ_pos[slot, t]
                length = common_suffix(ctx, n_ctx, tail, p, min(cap, p))
                if length >= k and length > best_len:
                    best_len, best_p = length, p
                    if length >= cap:
                        break
            if best_p >= 0:
                return tail[best_p], 0, best_len, best_p
    if n_ctx < f:
        return -1, 0, 0, -1
    slot = _slot(fol_keys, fol, ctx, n_ctx, f)
    if slot < 0 or fol_n[slot] == 0:
        return -1, 0, 0, -1
    return fol_tok[slot, 0], fol_cnt[slot, 0], 0, -1


@kernel
def bump_follower(toks: np.ndarray, counts: np.ndarray, n: int, tok: int, kept: int) -> int:
    """Count one more ``tok`` among a context's ``n`` followers (a new one is kept while fewer
    than ``kept`` are), keeping them sorted by count, most first, then by token: the counted
    slot moves up past those it now outranks. Returns the followers kept."""
    i = -1
    for t in range(n):
        if toks[t] == tok:
            counts[t] += 1
            i = t
            break
    if i < 0:
        if n >= kept:
            return n
        i = n
        toks[i], counts[i] = tok, 1
        n += 1
    c, t_i = counts[i], toks[i]
    while i > 0 and (counts[i - 1] < c or (counts[i - 1] == c and toks[i - 1] > t_i)):
        toks[i], counts[i] = toks[i - 1], counts[i - 1]
        i -= 1
    toks[i], counts[i] = t_i, c
    return n


@kernel
def _extend(toks: np.ndarray, score: bool, slots: np.ndarray, scored: np.ndarray, kept: int,
            occ_kept: int, long_match: int, count_edge: int, tail: np.ndarray, n: int,
            occ_keys: np.ndarray, occ: np.ndarray, occ_pos: np.ndarray, occ_n: np.ndarray,
            fol_keys: np.ndarray, fol: np.ndarray, fol_tok: np.ndarray, fol_cnt: np.ndarray,
            fol_n: np.ndarray, k: int, f: int, max_match: int) -> int:
    """:meth:`NgramIndex.extend`: per token, score the lookup the text before it makes, then
    count it as the follower of its last ``f`` tokens and record its position under its last
    ``k`` (the oldest of ``occ_kept`` dropped). Returns the text's new length (-1, and
    nothing indexed, when a token is outside ``0 .. TOKEN_LIMIT - 1``)."""
    for tok in toks:
        if not 0 <= tok < TOKEN_LIMIT:
            return -1
    for tok in toks:
        if score:
            t, count, matched, _ = _step(tail, n, tail, n, occ_keys, occ, occ_pos, occ_n,
                                         fol_keys, fol, fol_tok, fol_cnt, fol_n, k, f,
                                         max_match)
            if t >= 0:
                ev = evidence_class(count, matched, long_match, count_edge)
                scored[ev, 0] += 1
                scored[ev, 1] += 1 if t == tok else 0
        at = n
        if at >= f:
            slot, new = _find_or_add(fol_keys, fol, tail, at, f, slots, 0)
            if new:
                fol_tok[slot, 0], fol_cnt[slot, 0], fol_n[slot] = tok, 1, 1
            else:
                fol_n[slot] = bump_follower(fol_tok[slot], fol_cnt[slot], fol_n[slot], tok,
                                            kept)
        if at >= k:
            slot, new = _find_or_add(occ_keys, occ, tail, at, k, slots, 1)
            if new:
                occ_pos[slot, 0], occ_n[slot] = at, 1
            else:
                m = occ_n[slot]
                if m >= occ_kept:
                    for t in range(1, m):
                        occ_pos[slot, t - 1] = occ_pos[slot, t]
                    m -= 1
                occ_pos[slot, m] = at
                occ_n[slot] = m + 1
        tail[n] = tok
        n += 1
    return n


@kernel
def run_class(run: int, edges: tuple[int, int]) -> int:
    """The number of n-gram nodes above a node on its path, bucketed: 0 | 1-2 | 3+."""
    if run < edges[0]:
        return 0
    return 1 if run < edges[1] else 2


def add_chains(index: NgramIndex, tree: CandidateSet, depth_limit: int, max_added: int,
               run_edges: tuple[int, int] | None = None) -> int:
    """Algorithm 1, line 4: n-gram chains from the anchor and from each pick, into ``tree``.

    The context of a chain is the committed text (which ends in the anchor), the path from the
    anchor to the branch point, and the chain's own tokens. After a copy step the chain reads on
    along the copied passage. Returns the number of n-gram nodes added (at most ``max_added``):
    :func:`_add_chains`, on the set's arrays in place (``run_edges``: unused, the buckets are
    Eq. (6)'s)."""
    tree.reserve(len(tree) + max(max_added, 0))
    a = tree.buffers()
    n, added = _add_chains(
        a["tokens"], a["parent"], a["kind"], a["position"], a["head_q"], a["agreed"],
        a["evidence"], a["run"], a["contra"], a["src_p"], len(tree), tree.n_drafted, tree.B,
        max(tree.K, 1), depth_limit, max_added, np.asarray(index.precision()),
        index.long_match, index.count_edge, *index._tables())
    tree.grow_to(n)
    return int(added)


@kernel
def _drafter_children(node: int, D: int, B: int, K: int) -> tuple[int, int]:
    """``CandidateSet.drafter_children`` as a range ``(lo, hi)``."""
    if node == -1:
        return 0, (K if B > 0 else 0)
    if node < D and node % K == 0:
        i = node // K + 1
        if i < B:
            return i * K, (i + 1) * K
    return 0, 0


@kernel
def _add_chains(tokens: np.ndarray, parent: np.ndarray, kind: np.ndarray,
                position: np.ndarray, head_q: np.ndarray, agreed: np.ndarray,
                evidence: np.ndarray, run: np.ndarray, contra: np.ndarray, src_p: np.ndarray,
                n: int, D: int, B: int, K: int, depth_limit: int, max_added: int,
                precision: np.ndarray, long_match: int, count_edge: int, tail: np.ndarray,
                n_tail: int, occ_keys: np.ndarray, occ: np.ndarray, occ_pos: np.ndarray,
                occ_n: np.ndarray, fol_keys: np.ndarray, fol: np.ndarray, fol_tok: np.ndarray,
                fol_cnt: np.ndarray, fol_n: np.ndarray, k: int, f: int,
                max_match: int) -> tuple[int, int]:
    """:func:`add_chains`. A chain step equal to a child the parent already has marks it
    agreed (a drafter candidate) and follows it, and contradicts the parent's other drafter
    children not agreed; a new token appends an n-gram node. Returns the candidates and the
    n-gram nodes added."""
    base = min(max_match, n_tail)
    ctx = np.empty(base + B + depth_limit + 1, dtype=np.int64)
    ctx[:base] = tail[n_tail - base:n_tail]
    run_at = np.zeros(D, dtype=np.int64)
    added = 0
    for bi in range(B + 1):
        if added >= max_added:
            break
        branch = -1 if bi == 0 else (bi - 1) * K
        depth = bi   # the picks from the anchor to the branch point
        if depth >= depth_limit:
            continue
        m = base
        for i in range(depth):
            ctx[m] = tokens[i * K]
            m += 1
        node = branch
        run_ = 0 if branch == -1 else run_at[branch]
        l_matched, l_from = 0, -1
        while depth < depth_limit and added < max_added:
            tok, count, matched, at = -1, 0, 0, -1
            if l_matched and l_from + 1 < n_tail:   # a copy reads on along its passage
                tok, matched, at = tail[l_from + 1], min(l_matched + 1, max_match), l_from + 1
            if tok < 0:
                tok, count, matched, at = _step(ctx, m, tail, n_tail, occ_keys, occ, occ_pos,
                                                occ_n, fol_keys, fol, fol_tok, fol_cnt, fol_n,
                                                k, f, max_match)
            if tok < 0:
                break
            ev = evidence_class(count, matched, long_match, count_edge)
            p = precision[ev]
            existing = -1   # the child of node carrying tok: a drafter candidate (the last
            lo, hi = _drafter_children(node, D, B, K)   # of its row), else an n-gram node
            for j in range(hi - 1, lo - 1, -1):
                if tokens[j] == tok:
                    existing = j
                    break
            if existing < 0:
                for j in range(D, n):
                    if parent[j] == node and tokens[j] == tok:
                        existing = j
                        break
            for c in range(lo, hi):
                if c != existing and not agreed[c]:
                    contra[c] = ev
                    src_p[c] = p
            node_run = run_
            run_ += 1
            depth += 1
            if existing >= 0:
                if kind[existing] != 2 and not agreed[existing]:
                    agreed[existing] = True
                    evidence[existing] = ev
                    run[existing] = node_run
                    contra[existing] = -1
                    src_p[existing] = p
                if existing < D:
                    run_at[existing] = run_
                    if kind[existing] == 0:
                        break   # the pick's own chain continues from it
                node = existing
            else:
                j = n
                tokens[j], parent[j], kind[j], position[j] = tok, node, 2, depth - 1
                head_q[j], agreed[j], evidence[j] = p, False, ev
                run[j], contra[j], src_p[j] = node_run, -1, p
                n += 1
                added += 1
                node = j
            ctx[m] = tok
            m += 1
            l_matched, l_from = matched, at
    return n, added
