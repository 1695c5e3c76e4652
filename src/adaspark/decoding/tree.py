"""Verify trees: validation, best-first order (§3.1, Prop. 1), depth-first layout, acceptance.

A verify tree has ``n`` rows: row 0 is the anchor (the last committed token, whose KV is not yet in
the cache) and rows 1..n-1 are candidates, each with the row index of its parent. Under greedy
decoding (§2.2) a candidate is accepted when its token equals the target's argmax at its parent's
row; the accepted nodes form one path from the anchor, and the round commits that path plus the
target's argmax after its last node (the bonus token).

Everything here is pure: lists and numpy arrays in, lists out.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from adaspark.jit import kernel

#: Widest verify in exact mode (HARNESS "Widths"): at 64 rows flash attention switches path.
MAX_ROWS_EXACT = 63
#: Widest verify otherwise (the top of the paper's ladder).
MAX_ROWS_FAST = 64
#: The widest verify a config may name (HARNESS "Widths"): no width of an arm or of the
#: scheduler's ladder may exceed it.
MAX_WIDTH = MAX_ROWS_FAST


class TreeError(ValueError):
    """A malformed verify tree; the message names the row and the defect."""


@dataclass(frozen=True)
class Tree:
    """Rows of one verify. ``parents[0] == -1`` (the anchor); every other parent is a row index.

    ``sources`` optionally tags each row (``anchor``, ``pick``, ``sibling``, ``ngram``,
    ``agreed``) for the per-round records; the engine ignores it.
    """

    tokens: tuple[int, ...]
    parents: tuple[int, ...]
    sources: tuple[str, ...] = ()

    @property
    def n_rows(self) -> int:
        return len(self.tokens)

    def depths(self) -> list[int]:
        d = [0] * self.n_rows
        for i in range(1, self.n_rows):
            d[i] = d[self.parents[i]] + 1
        return d

    def children(self) -> list[list[int]]:
        ch: list[list[int]] = [[] for _ in range(self.n_rows)]
        for i in range(1, self.n_rows):
            ch[self.parents[i]].append(i)
        return ch

    def leaves(self) -> list[int]:
        return [i for i, c in enumerate(self.children()) if not c]


def make_tree(
    tokens: Sequence[int], parents: Sequence[int], sources: Sequence[str] = (), max_rows: int = 64
) -> Tree:
    """Build a :class:`Tree` after checking it; every defect gets a :class:`TreeError`.

    Checked, in this order: empty tree, too wide, lengths, root, orphans (a parent that is not a
    row), cycles, and a node placed before its parent (layouts must list parents first).
    """
    n = len(tokens)
    if n == 0:
        raise TreeError("empty tree: a verify needs at least the anchor row")
    if n > max_rows:
        raise TreeError(f"tree of {n} rows is wider than the widest verify ({max_rows} rows)")
    if len(parents) != n:
        raise TreeError(f"{n} tokens but {len(parents)} parent links")
    if sources and len(sources) != n:
        raise TreeError(f"{n} tokens but {len(sources)} source tags")
    if parents[0] != -1:
        raise TreeError(f"row 0 must be the anchor (parent -1), it has parent {parents[0]}")
    if all(0 <= parents[i] < i for i in range(1, n)):  # parents first: no orphan, no cycle
        return Tree(tuple(map(int, tokens)), tuple(map(int, parents)), tuple(sources))
    for i in range(1, n):
        p = parents[i]
        if p == -1:
            raise TreeError(f"orphan node at row {i}: parent -1 (only the anchor has no parent)")
        if not 0 <= p < n:
            raise TreeError(f"orphan node at row {i}: parent {p} is not a row of this tree")
    for i in range(1, n):
        seen = {i}
        p = parents[i]
        while p != -1:
            if p in seen:
                raise TreeError(f"cycle through row {i}: its parent chain returns to row {p}")
            seen.add(p)
            p = parents[p]
    for i in range(1, n):
        if parents[i] >= i:
            raise TreeError(f"node at row {i} comes before its parent (row {parents[i]})")
    return Tree(tuple(map(int, tokens)), tuple(map(int, parents)), tuple(sources))


def chain_tree(anchor: int, tokens: Sequence[int], max_rows: int = 64) -> Tree:
    """A chain is the tree with one child per node (§2.2)."""
    toks = [anchor, *tokens]
    return make_tree(toks, list(range(-1, len(toks) - 1)), max_rows=max_rows)


def path_to(parents: Sequence[int], row: int) -> list[int]:
    """Rows from the anchor to ``row`` inclusive."""
    out = [row]
    while parents[out[-1]] != -1:
        out.append(parents[out[-1]])
    return out[::-1]


# -- §3.1: best-first order and S(n) ---------------------------------------------------------


def path_products(parents: Sequence[int], q: Sequence[float]) -> np.ndarray:
    """Q_j = prod of q along the path from the anchor to candidate j (Eq. 1).

    ``parents[j]`` is -1 for a child of the anchor, else the index of another candidate that
    precedes ``j`` (candidates are indexed parents first).
    """
    pa = np.asarray(parents, dtype=np.int64)
    qa = np.asarray(q, dtype=np.float64)
    if pa.shape != qa.shape:
        raise TreeError(f"{len(pa)} parents but {len(qa)} probabilities")
    Q, bad = _path_products(pa, qa)
    if bad >= 0:
        raise TreeError(f"candidate {bad} is indexed before its parent {int(pa[bad])}")
    return Q


@kernel
def _path_products(parent: np.ndarray, q: np.ndarray) -> tuple[np.ndarray, int]:
    """:func:`path_products`: ``Q[j] = q[j] * Q[parent[j]]`` (``* 1.0`` below the anchor), and
    the first candidate indexed before its parent (-1: none)."""
    n = parent.shape[0]
    out = np.empty(n)
    for j in range(n):
        p = parent[j]
        if p == -1:
            out[j] = q[j] * 1.0
        elif 0 <= p < j:
            out[j] = q[j] * out[p]
        else:
            return out, j
    return out, -1


def best_first_order(parents: Sequence[int], q: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """Proposition 1: candidates by decreasing Q, ties toward the lower index.

    Returns ``(order, S)`` where ``order`` lists candidate indices and ``S[k]`` is the expected
    number of accepted candidates of the tree made of the first ``k`` of them (``S[0] = 0``), so a
    verify of width ``n`` expects ``S[n-1]`` accepted candidates. Every prefix of ``order`` is a
    tree when ``0 <= q <= 1``.
    """
    qa = checked_q(q)
    return order_by_products(path_products(parents, qa))


def checked_q(q: Sequence[float]) -> np.ndarray:
    """``q`` as an array, after checking that every probability lies in [0, 1]."""
    qa = np.asarray(q, dtype=np.float64)
    if len(qa) and (qa.min() < 0 or qa.max() > 1):
        raise TreeError("acceptance probabilities q must lie in [0, 1]")
    return qa


def order_by_products(Q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Proposition 1's order and ``S`` from the path products ``Q`` (see
    :func:`best_first_order`): :func:`order_and_sums`."""
    return order_and_sums(np.asarray(Q, dtype=np.float64))


@kernel
def order_and_sums(Q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Candidates by decreasing ``Q``, ties by index (a stable sort of ``-Q``), and ``S``, the
    running sums of ``Q`` in that order (``S[0] = 0``)."""
    order = np.argsort(-Q, kind="mergesort")
    S = np.zeros(Q.shape[0] + 1)
    acc = 0.0
    for k in range(Q.shape[0]):
        acc += Q[order[k]]
        S[k + 1] = acc
    return order, S


def prefix_tree(
    anchor: int,
    tokens: Sequence[int],
    parents: Sequence[int],
    order: Sequence[int],
    n_rows: int,
    sources: Sequence[str] = (),
    max_rows: int = 64,
    parent_arr: np.ndarray | None = None,
) -> tuple[Tree, list[int]]:
    """The verify tree of the first ``n_rows - 1`` candidates of ``order``, laid out depth-first.

    Returns the tree and, per row after the anchor, the candidate index it holds
    (``parent_arr``: ``parents`` as an array, when the caller has it).
    """
    keep = min(max(0, n_rows - 1), len(order))
    if keep + 1 > max_rows:
        raise TreeError(f"tree of {keep + 1} rows is wider than the widest verify ({max_rows} "
                        "rows)")
    pa = parent_arr if parent_arr is not None else np.asarray(parents, dtype=np.int64)
    chosen = np.asarray(order[:keep], dtype=np.int64)
    cand_of_row, row_parent, bad = _prefix_rows(pa, chosen)
    if bad >= 0:
        raise TreeError(f"prefix is not a tree: candidate {bad} is placed without its parent")
    cands = cand_of_row.tolist()
    # a depth-first layout lists every parent before its children: make_tree's checks hold
    toks = (int(anchor), *np.asarray(tokens, dtype=np.int64)[cand_of_row].tolist())
    srcs = ("anchor", *(sources[c] for c in cands)) if sources else ()
    return Tree(toks, (-1, *row_parent.tolist()), srcs), cands


@kernel
def _prefix_rows(parent: np.ndarray, chosen: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """:func:`prefix_tree`'s layout: the chosen candidates in depth-first row order and each
    row's parent row, and the first chosen candidate whose parent is not chosen (-1: none)."""
    keep = chosen.shape[0]
    pos = np.full(parent.shape[0], -1, dtype=np.int64)
    for i in range(keep):
        pos[chosen[i]] = i
    up = np.empty(keep, dtype=np.int64)
    for i in range(keep):
        p = parent[chosen[i]]
        if p == -1:
            up[i] = -1
        elif pos[p] >= 0:
            up[i] = pos[p]
        else:
            return chosen, chosen, chosen[i]
    rows, row_parent = _depth_first(up)
    out = np.empty(keep, dtype=np.int64)
    for r in range(keep):
        out[r] = chosen[rows[r]]
    return out, row_parent, -1


def depth_first(ids: Sequence[int], parent_ids: Sequence[int]) -> list[int]:
    """Depth-first layout (Algorithm 1, line 11) of nodes given in a parents-first order.

    ``ids[i]`` has parent ``parent_ids[i]`` (an id in ``ids``, or anything else for a child of the
    anchor). Children keep their given order. Returns positions into ``ids``.
    """
    pos = {v: i for i, v in enumerate(ids)}
    return depth_first_rows([pos.get(p, -1) for p in parent_ids])[0]


def depth_first_rows(up: Sequence[int]) -> tuple[list[int], list[int]]:
    """:func:`depth_first` on positions: node ``i``'s parent is node ``up[i]`` (``-1``: a child of
    the anchor, row 0). Returns the nodes in row order (row ``r + 1`` holds ``out[r]``) and the row
    of each one's parent (:func:`_depth_first`)."""
    rows, row_parent = _depth_first(np.asarray(up, dtype=np.int64).reshape(-1))
    return rows.tolist(), row_parent.tolist()


@kernel
def _depth_first(up: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Preorder over the forest ``up`` (parents first), children in index order: each node's
    children and the roots are linked lists in index order, walked with a stack of the siblings
    still to visit."""
    n = up.shape[0]
    first = np.full(n, -1, dtype=np.int64)   # a node's first child
    nxt = np.full(n, -1, dtype=np.int64)     # a node's next sibling
    root = -1
    for i in range(n - 1, -1, -1):
        p = up[i]
        if p == -1:
            nxt[i] = root
            root = i
        else:
            nxt[i] = first[p]
            first[p] = i
    out = np.empty(n, dtype=np.int64)
    row_parent = np.empty(n, dtype=np.int64)
    row_of = np.zeros(n, dtype=np.int64)
    stack = np.empty(n + 1, dtype=np.int64)
    sp = 0
    r = 0
    cur = root
    while cur != -1:
        out[r] = cur
        r += 1
        row_of[cur] = r
        row_parent[r - 1] = 0 if up[cur] == -1 else row_of[up[cur]]
        if first[cur] != -1:
            stack[sp] = nxt[cur]
            sp += 1
            cur = first[cur]
        else:
            cur = nxt[cur]
            while cur == -1 and sp > 0:
                sp -= 1
                cur = stack[sp]
    return out, row_parent


# -- §2.2: greedy acceptance ------------------------------------------------------------------


def accepted_path(tree: Tree, argmax: Sequence[int]) -> list[int]:
    """Rows of the accepted path, starting at the anchor (row 0).

    A child is accepted when its token equals the target's argmax at its parent's row; at most one
    child of a node can match, so the walk is unique.
    """
    return walk_path(tree, lambda r: int(argmax[r]))[0]


def walk_path(tree: Tree, target_token: Callable[[int], int]) -> tuple[list[int], int]:
    """The accepted path's rows from the anchor (row 0) and the target's token after it, where
    ``target_token(r)`` is the target's token at row ``r`` (its argmax, or a draw:
    :func:`adaspark.decoding.sampling.verify_sampled`): a child is accepted when its token is
    its parent's; of two children with the same token the first is taken. Each row on the
    path is asked once, in path order."""
    kids = tree.children()
    path = [0]
    while True:
        want = target_token(path[-1])
        nxt = [c for c in kids[path[-1]] if tree.tokens[c] == want]
        if not nxt:
            return path, want
        path.append(nxt[0])
