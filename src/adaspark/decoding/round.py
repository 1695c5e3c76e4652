"""A speculative round as the decoder sees it (Algorithm 1, lines 5-12): the round's state
(:class:`RoundState`), the verify tree a width rule plans (:class:`RoundPlan`), the outcome of the
verify with its rows and accepted rows counted by source once (:class:`RoundOutcome`,
:class:`RoundCounts`, :func:`count_by_source`), and the interface every width rule implements
(:class:`WidthRule`). The speculative loop (:mod:`adaspark.decoding.loop`) runs any rule and sums
the rounds' counts into its result; the rules themselves, and the registry of them by config
name, live in :mod:`adaspark.rules`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from adaspark.decoding.candidates import CandidateSet
from adaspark.decoding.drafter.base import Block
from adaspark.decoding.tree import Tree


def room_left(n_ctx: int, context: int) -> int:
    """Tokens that still fit after ``context`` tokens in a context of ``n_ctx``: one position is
    kept for the token a verify commits after its accepted path (§2.2). A prompt fits when this
    is at least 1; a reply's cap, a round's drafted positions and the loop's context stop all
    read it."""
    return n_ctx - context - 1


@dataclass
class RoundState:
    """What a rule may read before the verify. ``committed[-1]`` is the anchor."""

    committed: list[int]
    round_index: int
    max_rows: int
    block_positions: int

    @property
    def context(self) -> int:
        return len(self.committed)

    @property
    def anchor(self) -> int:
        return self.committed[-1]


@dataclass
class RoundPlan:
    """The verify a rule asks for. ``cand_of_row[r-1]`` is the candidate of ``candidates`` held
    by row r."""

    tree: Tree
    candidates: CandidateSet | None = None
    cand_of_row: list[int] = field(default_factory=list)
    why: str = "choice"
    info: dict[str, Any] = field(default_factory=dict)
    state: Any = None  # the rule's own per-round state, handed back in observe()

    def row_source(self, row: int) -> str:
        """Where verify row ``row`` (1 = the first after the anchor) came from, as
        :meth:`CandidateSet.source <adaspark.decoding.candidates.CandidateSet.source>` says;
        ``drafter`` for a row the plan holds no candidate for."""
        if self.candidates is None or row - 1 >= len(self.cand_of_row):
            return "drafter"
        return self.candidates.source(self.cand_of_row[row - 1])


def count_by_source(plan: RoundPlan, rows: Iterable[int]) -> dict[str, int]:
    """How many of ``rows`` (verify rows of ``plan``, the anchor excluded) came from each source
    (:data:`~adaspark.decoding.candidates.SOURCES`); sources with no row are left out."""
    out: dict[str, int] = {}
    for row in rows:
        s = plan.row_source(row)
        out[s] = out.get(s, 0) + 1
    return out


def positions_tested(tree: Tree, path: Sequence[int]) -> int:
    """Text positions after the anchor at which a round tested a candidate: every position of
    the accepted ``path`` (rows from the anchor), and the one after it when the path's last node
    has a child in ``tree`` (a candidate there was rejected). A chain that accepts all its
    drafts tested only their positions; a round of one row tested none."""
    has_child = path[-1] in tree.parents[1:]
    return len(path) - 1 + int(has_child)


@dataclass
class RoundCounts:
    """Verified candidate rows (``drafted``) and accepted ones, by source, over ``rounds``
    rounds: one round's (:meth:`RoundOutcome.of`) or a reply's (the loop's sum)."""

    rounds: int = 0
    drafted: dict[str, int] = field(default_factory=dict)
    accepted: dict[str, int] = field(default_factory=dict)
    #: Acceptance per position (``[k-1]`` for the k-th text position after the anchor): rounds
    #: that tested a candidate there (the node accepted at position k-1, the anchor for k = 1,
    #: had a child in the tree) and rounds that accepted one (:func:`positions_tested`).
    tested: list[int] = field(default_factory=list)
    passed: list[int] = field(default_factory=list)

    @classmethod
    def of_round(cls, plan: RoundPlan, path: list[int]) -> RoundCounts:
        """One round: every row after the anchor, and the accepted ``path`` (from the anchor)."""
        n_tested = positions_tested(plan.tree, path)
        return cls(1, count_by_source(plan, range(1, plan.tree.n_rows)),
                   count_by_source(plan, path[1:]), [1] * n_tested, [1] * (len(path) - 1))

    @property
    def n_drafted(self) -> int:
        return sum(self.drafted.values())

    @property
    def n_accepted(self) -> int:
        return sum(self.accepted.values())

    def add(self, other: RoundCounts) -> None:
        self.rounds += other.rounds
        for mine, theirs in ((self.drafted, other.drafted), (self.accepted, other.accepted)):
            for s, n in theirs.items():
                mine[s] = mine.get(s, 0) + n
        for mine_l, theirs_l in ((self.tested, other.tested), (self.passed, other.passed)):
            mine_l.extend([0] * (len(theirs_l) - len(mine_l)))
            for k, n in enumerate(theirs_l):
                mine_l[k] += n

    def positions(self) -> dict[str, dict[str, int]]:
        """Per text position after the anchor (``"1"``, ``"2"``, ...): ``{"tested": n,
        "accepted": m}``; acceptance at position k is m / n, the chance that a round which
        reached position k with a candidate there went past it (the server's ``positions``)."""
        passed = self.passed + [0] * (len(self.tested) - len(self.passed))
        return {str(k + 1): {"tested": t, "accepted": a}
                for k, (t, a) in enumerate(zip(self.tested, passed, strict=True))}

    def as_dict(self) -> dict[str, dict[str, int]]:
        """Per source seen: ``{"drafted": n, "accepted": m}`` (the server's ``by_source``)."""
        srcs = sorted(set(self.drafted) | set(self.accepted))
        return {s: {"drafted": self.drafted.get(s, 0), "accepted": self.accepted.get(s, 0)}
                for s in srcs}


@dataclass
class RoundOutcome:
    """What the verify did: the accepted rows (from the anchor), the committed tokens, the
    measured verify time, the round's fixed cost D (drafter forward plus tree build) and its
    rows by source (``counts``; build an outcome with :meth:`of`, which counts them).

    ``verify_s`` is the whole verify the cost model learns (the batch build that grows with
    the width, the forward and the read-out: ``engine.VerifyResult``), ``build_s`` and
    ``decode_s`` its first two parts; ``draft_s`` is the drafter's part of D (the rest is the
    tree build: the rule's ``plan``); ``commit_s`` is the target's commit after the verify;
    ``backlog_rows`` the rows exact mode decodes again in the verify's batch (Figure 7's anatomy
    of a round; 0 in fast mode).
    ``round_s`` is the whole round, the time rho is priced over (§3.4: "measured over whole
    rounds"): from the end of the previous round's ``observe`` (the request's decode start for
    its first round) to this round's ``observe``, so the previous round's learning, streaming
    and bookkeeping count too and the rounds' ``round_s`` add up to the reply's decode time
    (less the last round's ``observe``). :meth:`of` defaults it to D, verify and commit.

    It is the one record of a round: where it stood (``round_index``, the anchor's position
    ``anchor_pos`` and token ``anchor``), whether it drafted and the block's ``picks``, the tree's
    ``rows`` and the rule's ``why``; a trace file's row
    (:meth:`adaspark.decoding.round_trace.TraceRow.of`) and the AdaSpark rule's log
    (:func:`adaspark.rules.adaspark.records.round_record`) are derived from it."""

    path: list[int]
    new_tokens: list[int]
    verify_s: float
    fixed_s: float
    counts: RoundCounts
    draft_s: float = 0.0
    commit_s: float = 0.0
    round_s: float = 0.0
    build_s: float = 0.0
    decode_s: float = 0.0
    backlog_rows: int = 0
    round_index: int = 0
    anchor_pos: int = 0
    anchor: int = 0
    drafted: bool = False
    picks: tuple[int, ...] = ()
    rows: int = 0
    why: str = ""

    @classmethod
    def of(cls, plan: RoundPlan, path: list[int], new_tokens: list[int], verify_s: float,
           fixed_s: float, draft_s: float = 0.0, commit_s: float = 0.0,
           round_s: float | None = None, build_s: float = 0.0, decode_s: float = 0.0,
           backlog_rows: int = 0, *, round_index: int = 0, anchor_pos: int = 0,
           anchor: int = 0, drafted: bool = False,
           picks: tuple[int, ...] = ()) -> RoundOutcome:
        """The outcome of verifying ``plan``, its rows counted by source."""
        whole = fixed_s + verify_s + commit_s if round_s is None else round_s
        return cls(path, new_tokens, verify_s, fixed_s, RoundCounts.of_round(plan, path),
                   draft_s, commit_s, whole, build_s, decode_s, backlog_rows, round_index,
                   anchor_pos, anchor, drafted, picks, plan.tree.n_rows, plan.why)

    @property
    def accepted(self) -> int:
        """Accepted drafts: the path's rows after the anchor."""
        return len(self.path) - 1


@dataclass(frozen=True)
class NoOptions:
    """The keywords of a rule that takes none (plain decode)."""


class WidthRule(ABC):
    """Contract: ``begin_request`` once per reply, then per round ``wants_block`` (may this
    round call the drafter?), ``plan`` and ``observe``; ``end_request`` after the reply.

    A rule's keywords in an arm file are its :attr:`Options`, a frozen dataclass whose fields'
    metadata (:func:`adaspark.checks.spec`) gives their ranges and choices and whose defaults are
    the rule's; an arm's keywords are checked once, against it, where the arm is read
    (:func:`adaspark.schema.check_arm`), and the rule is built from the checked object
    (:meth:`from_options`), checking nothing again. A cross-field condition is the options'
    ``check(where)`` method, called there too."""

    #: The rule's keywords (:class:`NoOptions`: none).
    Options: ClassVar[type] = NoOptions

    def __init__(self, options: Any = None, **keywords: Any) -> None:
        self.options = self.options_of(options, **keywords)

    #: The rule's config name, as in :data:`WIDTH_RULES`.
    name: str = "rule"
    #: Whether the rule's rounds call the drafter (a rule without one verifies one row).
    uses_drafter: bool = True
    #: Whether the rule takes the composed ``scheduler`` group (Table 14's constants) as its
    #: ``scheduler`` keyword.
    needs_scheduler: bool = False

    def begin_request(self, prompt: list[int], request_id: str | None = None) -> None:  # noqa: B027
        pass

    def wants_block(self, state: RoundState) -> bool:
        return self.uses_drafter

    def block_positions(self, default: int) -> int:
        """Positions to draft this round (the drafter's B unless the rule uses fewer)."""
        return default

    def offer(self, state: RoundState, block: Block | None) -> Sequence[float] | None:
        """For a verify shared by several requests (:mod:`adaspark.decoding.slots`): the expected
        committed tokens each further row would add to this round's tree, best first (the 2nd
        row, the 3rd, ...), before :meth:`plan`; the step divides its rows between the requests
        by them and plans each round under its share (``state.max_rows``). None (the default):
        the rule keeps its own width (a pinned, chain or plain rule batches with it)."""
        return None

    @abstractmethod
    def plan(self, state: RoundState, block: Block | None) -> RoundPlan: ...

    def observe(self, plan: RoundPlan, outcome: RoundOutcome) -> None:  # noqa: B027
        pass

    def end_request(self) -> dict[str, Any]:
        return {}

    @classmethod
    def options_of(cls, options: Any = None, **keywords: Any) -> Any:
        """A rule's options: ``options`` (checked where its arm was read) with ``keywords`` set
        over it, or :attr:`Options` made from ``keywords`` (its defaults for the rest: each
        default is written once, in the options' dataclass)."""
        if options is None:
            return cls.Options(**keywords)
        return replace(options, **keywords) if keywords else options

    @classmethod
    def from_options(cls, options: Any, **extra: Any) -> WidthRule:
        """The rule built from its checked :attr:`Options` (``extra``: fields the caller sets,
        such as a store path or the composed scheduler constants)."""
        return cls(options, **extra)  # type: ignore[call-arg]


def offers_rows(rule: WidthRule) -> bool:
    """Whether ``rule`` offers its rows' expected tokens to a shared step
    (:meth:`WidthRule.offer`, AdaSpark's learned widths), so that a batch rule divides the
    step's rows; a pinned, chain or plain rule keeps its own width."""
    return type(rule).offer is not WidthRule.offer
