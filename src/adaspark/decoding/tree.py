"""Verify trees: validation, best-first order (§3.1, Prop. 1), depth-first layout, acceptance.

A verify tree has ``n`` rows: row 0 is the anchor (the last committed token, whose KV is not yet in
the cache) and rows 1..n-1 are candidates, each with the row index of its parent. Under greedy
decoding (§2.2) a candidate is accepted when its token equals the target's argmax at its parent's
row; the accepted nodes form one path from the anchor, and the round commits that path plus the
target's argmax after its last node (the bonus token).

Everything here is pure: lists and numpy arrays in, lists out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

#: Widest verify in exact mode (HARNESS "Widths"): at 64 rows flash attention switches path.
MAX_ROWS_EXACT = 63
#: Widest verify otherwise (the top of the paper's ladder).
MAX_ROWS_FAST = 64


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
    qs = q.tolist() if isinstance(q, np.ndarray) else [float(x) for x in q]
    out: list[float] = []
    append = out.append
    for j, (p, qj) in enumerate(zip(parents, qs, strict=True)):
        if p == -1:
            append(qj * 1.0)
        elif p < j:
            append(qj * out[p])
        else:
            raise TreeError(f"candidate {j} is indexed before its parent {p}")
    return np.asarray(out, dtype=np.float64)


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
    :func:`best_first_order`)."""
    order = np.argsort(-Q, kind="stable")  # by -Q, ties by index (a stable sort keeps it)
    S = np.zeros(len(Q) + 1)
    np.cumsum(Q[order], out=S[1:])
    return order, S


def prefix_tree(
    anchor: int,
    tokens: Sequence[int],
    parents: Sequence[int],
    order: Sequence[int],
    n_rows: int,
    sources: Sequence[str] = (),
    max_rows: int = 64,
) -> tuple[Tree, list[int]]:
    """The verify tree of the first ``n_rows - 1`` candidates of ``order``, laid out depth-first.

    Returns the tree and, per row after the anchor, the candidate index it holds.
    """
    chosen = [int(c) for c in order[: max(0, n_rows - 1)]]
    at = {c: i for i, c in enumerate(chosen)}
    up: list[int] = []          # each chosen node's parent, as a position in ``chosen`` (-1: root)
    for c in chosen:
        p = parents[c]
        if p == -1:
            up.append(-1)
        elif p in at:
            up.append(at[p])
        else:
            raise TreeError(f"prefix is not a tree: candidate {c} is placed without its parent")
    rows, row_parent = depth_first_rows(up)
    cand_of_row = [chosen[i] for i in rows]
    n = len(cand_of_row) + 1
    if n > max_rows:
        raise TreeError(f"tree of {n} rows is wider than the widest verify ({max_rows} rows)")
    # a depth-first layout lists every parent before its children: make_tree's checks hold
    toks = tuple(map(int, (anchor, *(tokens[c] for c in cand_of_row))))
    srcs = ("anchor", *(sources[c] for c in cand_of_row)) if sources else ()
    return Tree(toks, (-1, *row_parent), srcs), cand_of_row


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
    of each one's parent."""
    kids: list[list[int]] = [[] for _ in up]
    roots: list[int] = []
    for i, p in enumerate(up):
        (roots if p == -1 else kids[p]).append(i)
    out: list[int] = []
    row_parent: list[int] = []
    row_of = [0] * len(up)
    stack = roots[::-1]
    while stack:
        i = stack.pop()
        out.append(i)
        row_of[i] = len(out)
        p = up[i]
        row_parent.append(0 if p == -1 else row_of[p])
        if kids[i]:
            stack.extend(reversed(kids[i]))
    return out, row_parent


# -- §2.2: greedy acceptance ------------------------------------------------------------------


def accepted_path(tree: Tree, argmax: Sequence[int]) -> list[int]:
    """Rows of the accepted path, starting at the anchor (row 0).

    A child is accepted when its token equals the target's argmax at its parent's row; at most one
    child of a node can match, so the walk is unique.
    """
    kids = tree.children()
    path = [0]
    while True:
        want = int(argmax[path[-1]])
        nxt = [c for c in kids[path[-1]] if tree.tokens[c] == want]
        if not nxt:
            return path
        path.append(nxt[0])
