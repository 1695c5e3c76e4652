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
"""

from __future__ import annotations

from typing import NamedTuple

from adaspark.decoding.candidates import NGRAM, PICK, CandidateSet
from adaspark.rules.adaspark.config import NgramConfig

#: Evidence classes of a proposal (Eq. 6's bucket evidence; the precision is kept per class).
EVIDENCE_NAMES = ("n1", "n2+", "copy", "copy-long")


class Proposal(NamedTuple):
    """One chain step: the token, its follower count (0 for a copy), the copy's match length (0
    for a follower), and for a copy the position in the committed text it was read from.
    (A named tuple: a round builds dozens, and a frozen dataclass costs three times as much.)"""

    token: int
    count: int
    matched: int
    copied_from: int


def evidence_class(count: int, matched: int, long_match: int, count_edge: int) -> int:
    """0: follower seen once, 1: follower seen ``count_edge`` times or more, 2: a copy,
    3: a copy of at least ``long_match`` tokens."""
    if matched > 0:
        return 3 if matched >= long_match else 2
    return 1 if count >= count_edge else 0


class NgramIndex:
    """The request's index: 3-token followers and earlier occurrences of 4-token contexts."""

    def __init__(self, cfg: NgramConfig, long_match: int, count_edge: int) -> None:
        self.cfg = cfg
        self.long_match = long_match
        self.count_edge = count_edge
        self.tail: list[int] = []
        self.followers: dict[tuple[int, ...], list[list[int]]] = {}
        self.occurrences: dict[tuple[int, ...], list[int]] = {}
        self.scored = [[0, 0] for _ in EVIDENCE_NAMES]  # per evidence class: [proposed, right]

    def reset(self) -> None:
        self.tail = []
        self.followers = {}
        self.occurrences = {}
        self.scored = [[0, 0] for _ in EVIDENCE_NAMES]

    # -- lookups ---------------------------------------------------------------------------------

    def step(self, ctx: list[int]) -> Proposal | None:
        """A copy of the request's own text first, else the top follower of the last tokens.

        The copy is the longest earlier passage of the committed text that ``ctx`` ends with, at
        least ``copy_min_match`` and at most ``copy_max_match`` tokens (longest wins, the latest
        among equals), proposing the token that followed it; one pass, as every chain step and
        every committed token asks."""
        cfg = self.cfg
        n_ctx = len(ctx)
        k = cfg.copy_min_match
        if n_ctx >= k:
            seen = self.occurrences.get(tuple(ctx[-k:]))
            if seen:
                tail = self.tail
                best_len, best_p = 0, -1
                cap = min(cfg.copy_max_match, n_ctx)   # no match is longer: stop once one is
                for p in reversed(seen):
                    length = common_suffix(ctx, n_ctx, tail, p, min(cap, p))
                    if length >= k and length > best_len:
                        best_len, best_p = length, p
                        if length >= cap:
                            break
                if best_p >= 0:
                    return Proposal(tail[best_p], 0, best_len, best_p)
        f = cfg.follower_context
        if n_ctx < f:
            return None
        followers = self.followers.get(tuple(ctx[-f:]))
        if not followers:
            return None
        token, count = followers[0]
        return Proposal(token, count, 0, -1)

    def copy_on(self, prev: Proposal) -> Proposal | None:
        """The step after a copy step: the next token of the same passage, one token longer."""
        at = prev.copied_from + 1
        if prev.matched == 0 or at >= len(self.tail):
            return None
        return Proposal(self.tail[at], 0, min(prev.matched + 1, self.cfg.copy_max_match), at)

    def evidence(self, p: Proposal) -> int:
        return evidence_class(p.count, p.matched, self.long_match, self.count_edge)

    # -- the committed text ----------------------------------------------------------------------

    def extend(self, tokens: list[int], score: bool = True) -> None:
        """Index newly committed tokens (Algorithm 1, line 18), each scored first: the proposal a
        lookup would have made for it counts toward its evidence class's precision."""
        tail = self.tail
        f, k = self.cfg.follower_context, self.cfg.copy_min_match
        kept, occ = self.cfg.followers_kept, self.cfg.occurrences_kept
        for tok in tokens:
            if score:
                p = self.step(tail)
                if p is not None:
                    s = self.scored[self.evidence(p)]
                    s[0] += 1
                    s[1] += int(p.token == tok)
            at = len(tail)
            if at >= f:
                key = tuple(tail[at - f:])
                seen = self.followers.get(key)
                if seen is None:
                    self.followers[key] = [[tok, 1]]
                else:
                    bump_follower(seen, tok, kept)
            if at >= k:
                key = tuple(tail[at - k:])
                pos = self.occurrences.get(key)
                if pos is None:
                    self.occurrences[key] = [at]
                else:
                    if len(pos) >= occ:
                        del pos[0]
                    pos.append(at)
            tail.append(tok)

    def precision(self) -> list[float]:
        """``p_src`` per evidence class: ``(right + a) / (proposed + b)`` (``precision_prior``)."""
        a, b = self.cfg.precision_prior
        return [(right + a) / (n + b) for n, right in self.scored]


def common_suffix(a: list[int], end_a: int, b: list[int], end_b: int, limit: int) -> int:
    """The length (at most ``limit``) of the longest common suffix of ``a[:end_a]`` and
    ``b[:end_b]``: a binary search on slice equality (matching suffixes nest), so each probe
    compares in C instead of token by token."""
    if limit <= 0 or a[end_a - 1] != b[end_b - 1]:
        return 0
    if a[end_a - limit:end_a] == b[end_b - limit:end_b]:
        return limit
    lo, hi = 1, limit - 1   # the suffix of length lo matches; length hi + 1 does not
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[end_a - mid:end_a] == b[end_b - mid:end_b]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def bump_follower(seen: list[list[int]], tok: int, kept: int) -> None:
    """Count one more ``tok`` among a context's followers ``[[token, count], ...]`` (a new
    one is kept while fewer than ``kept`` are), keeping them sorted by count, most first, then
    by token: the counted slot moves up past those it now outranks (the list was sorted)."""
    for i in range(len(seen)):  # i: the slot found, read after the loop
        slot = seen[i]
        if slot[0] == tok:
            slot[1] += 1
            break
    else:
        if len(seen) >= kept:
            return
        slot = [tok, 1]
        seen.append(slot)
        i = len(seen) - 1
    key = (-slot[1], slot[0])
    while i > 0 and (-seen[i - 1][1], seen[i - 1][0]) > key:
        seen[i] = seen[i - 1]
        i -= 1
    seen[i] = slot


def run_class(run: int, edges: tuple[int, int]) -> int:
    """The number of n-gram nodes above a node on its path, bucketed: 0 | 1-2 | 3+."""
    if run < edges[0]:
        return 0
    return 1 if run < edges[1] else 2


def add_chains(index: NgramIndex, tree: CandidateSet, depth_limit: int, max_added: int,
               run_edges: tuple[int, int]) -> int:
    """Algorithm 1, line 4: n-gram chains from the anchor and from each pick, into ``tree``.

    The context of a chain is the committed text (which ends in the anchor), the path from the
    anchor to the branch point, and the chain's own tokens. After a copy step the chain reads on
    along the copied passage. Returns the number of n-gram nodes added (at most ``max_added``).
    """
    precision = index.precision()
    drafted = tree.n_drafted
    base = index.tail[-index.cfg.copy_max_match:]
    run_at = [0] * drafted
    added = 0
    branches = [-1] + [tree.pick(i) for i in range(tree.B)]
    for branch in branches:
        if added >= max_added:
            break
        path = [] if branch == -1 else tree.tokens[0:branch + 1:tree.K]  # the picks to it
        depth = len(path)
        if depth >= depth_limit:
            continue
        ctx = base + path
        node = branch
        run = 0 if branch == -1 else run_at[branch]
        last: Proposal | None = None
        while depth < depth_limit and added < max_added:
            prop = index.copy_on(last) if last is not None and last.matched else None
            if prop is None:
                prop = index.step(ctx)
            if prop is None:
                break
            ev = index.evidence(prop)
            p = precision[ev]
            token = prop.token
            existing = tree.child(node, token)
            for c in tree.drafter_children(node):
                if c != existing and not tree.agreed[c]:
                    tree.contra[c] = ev
                    tree.src_p[c] = p
                    tree.marked.add(c)
            node_run = run
            run += 1
            depth += 1
            if existing is not None:
                if tree.kind[existing] != NGRAM and not tree.agreed[existing]:
                    tree.agreed[existing] = True
                    tree.evidence[existing] = ev
                    tree.run[existing] = node_run
                    tree.contra[existing] = -1
                    tree.src_p[existing] = p
                    tree.marked.add(existing)
                if existing < drafted:
                    run_at[existing] = run
                    if tree.kind[existing] == PICK:
                        break  # the pick's own chain continues from it
                node = existing
            else:
                node = tree.add_ngram(token, node, depth - 1, ev, node_run, p)
                added += 1
            ctx.append(token)
            last = prop
    return added
