"""The AdaSpark width rule: Algorithm 1, lines 4-18, over the scheduler's modules.

Per round (``wants_block`` / ``plan`` / ``observe`` of :class:`~adaspark.decoding.round.WidthRule`):

4. n-gram chains from the anchor and each pick join the drafter's candidates (``ngram``);
5. every candidate gets q: Eq. (6) (``acceptance``), or the head-based estimate while the guard
   prefers it;
6. best-first order by Q with S(n) for every n in one pass (Prop. 1, ``adaspark.decoding.tree``);
7-10. a learned width with fewer than 3 measurements is measured (cold start; with
   ``cold_start: bounded`` only a width whose optimistic rate could beat the best priced one),
   else the width maximising Eq. (7) over the offered widths (``chooser``, prices from
   ``cost_model``), kept at the incumbent unless beaten by the margin; then the split test;
11-12. the first n*-1 nodes laid out depth-first; every 16th tree round with n-gram candidates
   the last row goes to the least-labelled n-gram bucket's frontier node;
15-18. after the verify: the cost model (not in a request's first round), rho (over the whole
   round, ``RoundOutcome.round_s``), the gains, the acceptance model (guard first, then every
   candidate of every accepted parent), the request's offset and intercept, and the n-gram
   index.

Arms differ only in switches (``conf/arm/*.yaml``, the ``rule:`` mapping): ``width`` is
``learned`` (the learned table), ``classes`` (declared classes every 8 rows, Table 9) or a pinned
row count; ``acceptance`` is ``fitted`` (Eq. 6 under the guard) or ``head`` (the head-based
estimate only); ``ngram`` turns the n-gram candidates on; ``offer_width1`` is the width-1
extension (plain decode offered to the chooser, decided before the drafter is called).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from adaspark.decoding.candidates import CandidateSet, from_block
from adaspark.decoding.drafter.base import Block
from adaspark.decoding.round import RoundOutcome, RoundPlan, RoundState, WidthRule
from adaspark.decoding.tree import chain_tree, prefix_tree
from adaspark.jit import kernel
from adaspark.rules.adaspark import acceptance as acc
from adaspark.rules.adaspark.chooser import (
    DraftForecast,
    GainLearner,
    LongRunRate,
    Valuer,
    bounded_measurement,
    choose,
    could_beat,
    ngram_order_arrays,
    priced_value,
    reference_width,
    width1_switch,
    width_without_ngram,
)
from adaspark.rules.adaspark.config import SchedulerConfig, load_config
from adaspark.rules.adaspark.context import RoundContext
from adaspark.rules.adaspark.features import Features, feature_arrays
from adaspark.rules.adaspark.ngram import NgramIndex, add_chains
from adaspark.rules.adaspark.options import AdaSparkOptions
from adaspark.rules.adaspark.records import (
    RequestSummary,
    RoundLogWriter,
    add_counts,
    add_losses,
    round_record,
)
from adaspark.rules.adaspark.records import request_id as request_id_of
from adaspark.rules.adaspark.store import learned_state, load_learned, load_store, save_store
from adaspark.rules.adaspark.width_table import WidthTable, envelope_mask


@dataclass
class AdaSparkPlan(RoundPlan):
    """A :class:`RoundPlan` that carries the round's context to ``observe``."""

    round: RoundContext | None = None


class AdaSparkRule(WidthRule):
    """The AdaSpark scheduler (§3) as a width rule.

    Keyword arguments (an arm's keywords, :class:`.options.AdaSparkOptions`):
    ``width`` (``learned`` | ``classes`` | a pinned row count), ``acceptance`` (``fitted`` |
    ``head``), ``ngram`` (bool), ``offer_width1`` (bool), ``rate_rule`` (``long_run`` |
    ``ratio``: the per-round ratio always, for the §3.4 comparison), ``head_offset`` (bool),
    ``scheduler`` (the ``conf/scheduler`` file name, or a composed mapping; None:
    ``adaspark``), ``constants`` (overrides of it), ``store`` (JSON path: load at start, save
    after each request), ``log_dir`` (per-round Parquet directory; ``None`` is off).
    """

    name = "adaspark"
    uses_drafter = True
    needs_scheduler = True
    Options = AdaSparkOptions

    def __init__(self, options: AdaSparkOptions | None = None, *,
                 config: SchedulerConfig | None = None, **keywords: Any) -> None:
        # the keywords are AdaSparkOptions' fields (their defaults are written there once)
        o = self.options_of(options, **keywords)
        width, ngram, store, log_dir = o.width, o.ngram, o.store, o.log_dir
        self.cfg = (config if config is not None
                    else load_config(o.scheduler or "adaspark", o.constants))
        self.width_mode = width
        self.pinned = width if isinstance(width, int) else None
        self.ngram_on = bool(ngram)
        self.offer_width1 = bool(o.offer_width1)
        self.rate_rule = o.rate_rule
        self.head_offset_on = bool(o.head_offset)
        self.store_path = Path(store) if store else None
        self.agreed_counts = self.cfg.width_choice.agreed_counts_as == "ngram"
        self.bounded = self.cfg.cost_model.cold_start == "bounded"
        self._bounded_measuring = True  # bounded: did the last drafted round measure a width?
        # read now, applied once the widest verify is known (the first round)
        self._stored = load_store(self.store_path) if self.store_path is not None else None
        c = self.cfg
        self.table: WidthTable | None = None
        self.rate = LongRunRate(c.width_choice)
        self.gains = GainLearner(c.width_choice)
        self.forecast = DraftForecast(c.width_choice)
        self.model = (acc.AcceptanceModel(c.acceptance_model) if o.acceptance == "fitted"
                      else None)
        self.head = acc.HeadEstimate(c.acceptance_model)
        a = c.acceptance_model
        self.index = NgramIndex(c.ngram_fill, a.copy_long_match, a.follower_count_edge)
        self.incumbent = 0
        self.w1_incumbent = False
        self.exploration_clock = 0
        self.max_rows: int | None = None
        self.n_requests = 0
        self.summary = RequestSummary("")
        self.log = RoundLogWriter(log_dir) if log_dir else None
        self._first_round = True
        self._width1_now = False
        self._why1 = "width1"
        #: Host time per phase (seconds), accumulated when set to a dict (the benchmark).
        self.profile: dict[str, float] | None = None
        self._t = 0.0
        #: this round's candidates and order (:meth:`_ordered`), kept from offer to plan
        self._ordered_cache: tuple[tuple[int, int], tuple[CandidateSet, tuple]] | None = None

    def _tick(self, phase: str | None) -> None:
        """Charge the time since the last tick to ``phase`` (``None``: start the clock)."""
        prof = self.profile
        if prof is None:
            return
        t = time.perf_counter()
        if phase is not None:
            prof[phase] = prof.get(phase, 0.0) + t - self._t
        self._t = t

    # -- lifecycle ----------------------------------------------------------------------------

    def _ensure(self, max_rows: int) -> None:
        if self.max_rows is not None:
            return
        self.max_rows = max_rows
        if self.pinned is None:
            self.table = WidthTable(self.cfg.cost_model, max_rows,
                                    mode=str(self.width_mode), width1=self.offer_width1)
        if self._stored is not None:
            self.load_state(self._stored)
            self._stored = None

    def begin_request(self, prompt: list[int], request_id: str | None = None) -> None:
        self.n_requests += 1
        self.summary = RequestSummary(request_id or request_id_of(self.n_requests, prompt))
        self.index.reset()
        if self.ngram_on:
            self.index.extend(prompt, score=self.cfg.ngram_fill.precision_scores_prompt)
        if self.model is not None:
            self.model.begin_request()
        self.head.begin_request()
        self._first_round = True

    def end_request(self) -> dict[str, Any]:
        if self.table is not None:
            self.summary.refits_adopted = self.table.refit()
            self.summary.widths_learned = self.table.widths()
        if self.store_path is not None and self.max_rows is not None:
            save_store(self.store_path, self.state())
        if self.log is not None:
            self.log.flush(self.summary.request_id)
        return self.summary.finish()

    # -- Algorithm 1 -----------------------------------------------------------------------------

    def wants_block(self, state: RoundState) -> bool:
        """The width-1 extension decides here, before the drafter is called: plain decode (no
        drafter call, D = 0, priced by plain decode's own law) against a drafted round's
        forecast value, with the chooser's hysteresis."""
        self._ensure(state.max_rows)
        self._width1_now = False
        table = self.table
        if not self.offer_width1 or table is None:
            return True
        if table.measurement_width(drafted=False) == 1:
            self._width1_now, self._why1 = True, "width1-cold-start"
            return False
        c = state.context
        phi = table.basis(c)
        t1 = table.plain_price(phi)
        est = self.forecast.estimate(c)
        rho = self.rate.rate(c) if self.rate_rule == "long_run" else None
        # the ladder drafts until every width is measured; bounded until a drafted round finds
        # no width worth measuring (its tree's depth bounds what a width could accept)
        measuring = (self._bounded_measuring if self.bounded
                     else table.measurement_width() is not None)
        if t1 is None or est is None or measuring:
            self.w1_incumbent = False
            return True
        self.w1_incumbent = width1_switch(self.w1_incumbent, t1, est, rho,
                                          self.cfg.width_choice)
        self._width1_now, self._why1 = self.w1_incumbent, "width1"
        return not self.w1_incumbent

    def plan(self, state: RoundState, block: Block | None) -> RoundPlan:
        self._ensure(state.max_rows)
        c = state.context
        if block is None:
            why = self._why1 if self._width1_now else "width1"
            rc = RoundContext(context=c, drafted=False, why=why, width=1)
            if self.table is not None:
                phi = self.table.basis(c)
                rc.predicted_verify = self.table.plain_price(phi)
            return AdaSparkPlan(chain_tree(state.anchor, []), None, [], why=why,
                                info={"width": 1}, round=rc)
        cfg = self.cfg
        cands, ordered = self._ordered(state, block)
        self._ordered_cache = None
        (lh, ls, logr, q_head, q_model, coef, base, is_ng, order_arr, S, s_ng, rank) = ordered
        n = len(cands)
        model = self.model
        u = c / cfg.cost_model.context_basis_unit
        priced = model is not None and model.prices()
        buf = cands.buffers()
        feats = Features(lh=lh, ls=ls, logr=logr)
        rc = RoundContext(context=c, drafted=True, why="choice", width=0, cands=cands,
                          features=feats)
        parent = rc.parent = buf["parent"][:n]
        rc.head_raw, rc.q_head = buf["head_q"][:n], q_head
        if model is not None:
            rc.terms = acc.RoundTerms.of(feats, u, coef, base)
            rc.q_model = q_model
        rc.priced_fitted = priced
        q = rc.q = q_model if priced else q_head
        rc.s, rc.s_ng, rc.rank, rc.is_ng = S, s_ng, rank, is_ng
        order = order_arr.tolist()
        self._tick("order")
        width = self._choose_width(state, rc)
        self._bounded_measuring = rc.why == "cold-start"
        keep = min(width - 1, n, state.max_rows - 1)  # within a shared step's share
        has_ngram = self.ngram_on and len(cands) > cands.n_drafted
        if cfg.ngram_fill.exploration_counts == "all_tree_rounds" or has_ngram:
            self.exploration_clock += 1
        if (has_ngram and self.model is not None and keep > 0
                and self.exploration_clock % cfg.ngram_fill.exploration_period == 0):
            rc.explored = self._explore(order, keep, cands, q)
        tree, rows = prefix_tree(state.anchor, cands.tokens, cands.parent, order, keep + 1,
                                 max_rows=state.max_rows, parent_arr=parent)
        if rc.why == "cold-start" and self.table is not None and tree.n_rows < width:
            self.table.short_measurement(width, tree.n_rows)
        # the placed nodes are the first ``keep`` of the order (exploration swaps the last one
        # for an n-gram node further down): their own Q, read off S at their ranks
        placed = np.asarray(order[:keep], dtype=np.int64) if rc.explored else order_arr[:keep]
        s_all, s_ngram = _placed_sums(S, rank, is_ng, placed)
        rc.s_chosen = (s_all, s_all - s_ngram, s_ngram)
        rc.order = order
        rc.width = tree.n_rows
        self._tick("layout")
        return AdaSparkPlan(tree, cands, rows, why=rc.why,
                            info={"width": tree.n_rows, "S": s_all}, round=rc)

    def _ordered(self, state: RoundState, block: Block) -> tuple[CandidateSet, tuple]:
        """Lines 5-6 for this round: the candidates (the block and the n-gram chains) and
        :func:`_round_order`'s arrays, computed once per round whether :meth:`offer` or
        :meth:`plan` asks first (the n-gram chains are added up to the rule's own widest
        verify, so a smaller share of a shared step only cuts the tree)."""
        key = (id(block), len(state.committed))
        if self._ordered_cache is not None and self._ordered_cache[0] == key:
            return self._ordered_cache[1]
        cfg = self.cfg
        a = cfg.acceptance_model
        self._tick(None)
        cands = from_block(block)
        self._tick("order")
        if self.ngram_on:
            add_chains(self.index, cands, cfg.ngram_fill.chain_depth_limit,
                       (self.max_rows or state.max_rows) - 1, a.run_edges)
        self._tick("ngram")
        # lines 5-6 in one kernel: the features, q (head-based, and Eq. 6 under the guard),
        # Prop. 1's order, S and S_ng
        n = len(cands)
        model = self.model
        u = state.context / cfg.cost_model.context_basis_unit
        priced = model is not None and model.prices()
        buf = cands.buffers()
        ordered = _round_order(
            np.ascontiguousarray(block.probs, dtype=np.float64),
            np.ascontiguousarray(block.confidence, dtype=np.float64), a.logit_eps, a.log_r_floor,
            buf["parent"][:n], buf["kind"][:n], buf["agreed"][:n], buf["evidence"][:n],
            buf["run"][:n], buf["contra"][:n], buf["src_p"][:n], buf["head_q"][:n],
            cands.n_drafted, max(cands.K, 1), self.head.b if self.head_offset_on else 0.0,
            model is not None, model.w if model is not None else _NO_WEIGHTS,
            model.b if model is not None else 0.0, u, a.run_edges[0], a.run_edges[1], priced,
            self.agreed_counts)
        self._ordered_cache = (key, (cands, ordered))
        return cands, ordered

    def offer(self, state: RoundState, block: Block | None) -> list[float] | None:
        """The expected accepted tokens of each further row under Prop. 1's order (``S``'s
        steps, made non-increasing), up to the rule's widest verify; None for a pinned width or
        a round without a block (they keep their width in a shared step)."""
        if block is None or self.pinned is not None:
            return None
        self._ensure(state.max_rows)
        _, ordered = self._ordered(state, block)
        S = ordered[9]
        steps = np.maximum(np.diff(S)[: state.max_rows - 1], 0.0)
        return np.minimum.accumulate(steps).tolist() if len(steps) else []

    def _width_without_ngram(self, rc: RoundContext) -> int | None:
        """Table 7's counterfactual width of this round (``chooser.width_without_ngram``);
        ``None`` when Eq. (7) did not choose this round's width.
        Computed when the round is logged, after the verify, so it never adds to the round's
        measured D."""
        if (rc.why != "choice" or rc.cands is None or rc.q is None or rc.gains is None
                or rc.predicted_fixed is None or not rc.offered):
            return None
        valuer_args = (rc.n0, rc.gains, rc.predicted_fixed, rc.rho)
        return width_without_ngram(rc.cands, rc.q, self.agreed_counts, valuer_args, rc.offered,
                                   rc.incumbent_before, self.cfg.width_choice)

    def _choose_width(self, state: RoundState, rc: RoundContext) -> int:
        """Lines 7-10: pinned, cold start, or Eq. (7) with the hysteresis and the split test."""
        if self.pinned is not None:
            rc.why = "pinned"
            return min(self.pinned, state.max_rows)
        table = self.table
        assert table is not None and rc.s is not None and rc.s_ng is not None
        cw = self.cfg.width_choice
        c = rc.context
        phi = table.basis(c)
        u = c / self.cfg.cost_model.context_basis_unit
        tops_a, prices_a = table.price_arrays(phi)
        keep = envelope_mask(prices_a)
        off_w, off_p = tops_a[keep], prices_a[keep]
        offered = list(zip(off_w.tolist(), off_p.tolist(), strict=True))
        rc.offered = offered

        def price_list() -> list[tuple[int, float | None]]:   # table.class_prices(phi)
            return [(t, None if math.isnan(p) else p)
                    for t, p in zip(tops_a.tolist(), prices_a.tolist(), strict=True)]

        tops = off_w.tolist() or table.widths()
        rc.n0 = reference_width(tops, cw)
        rc.first = tops[0]
        rc.predicted_fixed = table.fixed_cost(phi)
        gains = self.gains.at(u)
        rho = self.rate.rate(c) if self.rate_rule == "long_run" else None
        valuer = Valuer(rc.s, rc.s_ng, rc.n0, gains, rc.predicted_fixed, rho)
        bound = self._bound(rc, valuer, offered, phi) if self.bounded and offered else None
        meas = table.measurement_width(could_change=bound,
                                       prices=price_list() if bound is not None else None,
                                       phi=phi)
        if meas is not None:
            self._tick("pricing")
            rc.why = "cold-start"
            rc.predicted_verify = dict(price_list()).get(meas)
            return meas
        if not offered:  # bounded: nothing priced yet, so nothing to pass a width over for
            meas = table.measurement_width()
            assert meas is not None, "a width table with no priced width has one to measure"
            rc.why = "cold-start"
            return meas
        rc.gains, rc.rho = gains, rho
        self._tick("pricing")
        incumbent = self.incumbent or int(off_w[-1])
        pick = choose(valuer, (off_w, off_p), incumbent, cw)
        rc.width_chosen, rc.incumbent_before = pick.width, incumbent
        self.incumbent = pick.width
        held_price = float(off_p[pick.index])   # an offered width's price is its own (Prop. 2)
        rc.predicted_verify = held_price
        table.hold(pick.width)
        if table.may_split():
            table.split(lambda w, p: could_beat(valuer, w, p, pick.width, held_price, cw),
                        price_list())
        self._tick("choice")
        return pick.width

    def _bound(self, rc: RoundContext, valuer: Valuer, offered: list[tuple[int, float]],
               phi: Any) -> Callable[[int, float], bool]:
        """``cold_start: bounded`` in a drafted round: a width is measured only if its
        optimistic value (one more token than the deepest of the first ``width - 1`` nodes of
        this round's order, in D plus the table's time floor) beats the best priced width's
        value (plain decode's too, in the width-1 extension)."""
        assert self.table is not None and rc.cands is not None and rc.rank is not None
        best = max(valuer.value(w, p) for w, p in offered)
        t1 = self.table.plain_price(phi)
        if t1 is not None:
            best = max(best, priced_value(1.0, t1, valuer.rho))
        order = np.argsort(rc.rank)
        deepest = np.maximum.accumulate(np.asarray(rc.cands.position, dtype=np.int64)[order] + 1)

        def tokens_at(width: int) -> float:
            keep = min(width - 1, len(deepest))
            return 1.0 + (float(deepest[keep - 1]) if keep > 0 else 0.0)

        return bounded_measurement(best, tokens_at, valuer.d_fixed, valuer.rho)

    def _explore(self, order: list[int], keep: int, cands: CandidateSet,
                 q: np.ndarray) -> bool:
        """Line 12: the last row goes to the unplaced n-gram frontier node of the bucket with the
        fewest labels (ties: the higher Q). The removed node is the last one best-first took,
        which is a leaf."""
        assert self.model is not None
        placed = set(order[: keep - 1])
        last = order[keep - 1]
        Q = np.empty(len(cands))
        for j, p in enumerate(cands.parent):
            Q[j] = q[j] * (1.0 if p == -1 else Q[p])
        edges = self.cfg.acceptance_model.run_edges
        best: tuple[int, float, int] | None = None
        for j in range(cands.n_drafted, len(cands)):
            if j in placed or j == last or Q[j] <= 0.0:
                continue
            p = cands.parent[j]
            if p != -1 and p not in placed:
                continue
            labels = self.model.bucket_labels(acc.NEW + acc.bucket(cands.evidence[j],
                                                                   cands.run[j], edges))
            if best is None or labels < best[0] or (labels == best[0] and Q[j] > best[1]):
                best = (labels, float(Q[j]), j)
        if best is None:
            return False
        j = best[2]
        pos = order.index(j)
        order[keep - 1], order[pos] = order[pos], order[keep - 1]
        return True

    def observe(self, plan: RoundPlan, outcome: RoundOutcome) -> None:
        rc = plan.round if isinstance(plan, AdaSparkPlan) else None
        if rc is None:
            return
        self._tick(None)
        t_observe = time.perf_counter()
        c = rc.context
        t = outcome.verify_s
        d = outcome.fixed_s if rc.drafted else 0.0
        rows = plan.tree.n_rows
        committed = len(outcome.new_tokens)
        sm = self.summary
        add_counts(sm, outcome.counts)   # the round, its rows and accepted rows by source
        sm.committed += committed
        sm.scheduler_time_s += d + t
        if rc.why in ("cold-start", "width1-cold-start"):
            sm.cold_start_rounds += 1
            sm.cold_start_s += d + t
        # line 15: the cost model, not in a request's first round
        table = self.table
        if table is not None and not self._first_round:
            phi = table.basis(c)
            if rc.drafted:
                table.observe_fixed(c, d, phi)
            table.observe_verify(rows, c, t, phi)
        self._first_round = False
        self._tick("cost-learning")
        # line 16: rho over whole rounds (and the width-1 forecast)
        self.rate.observe(c, committed, outcome.round_s)
        record = (round_record(sm.request_id, sm.rounds - 1, rc, plan, outcome,
                               self._width_without_ngram(rc))
                  if self.log is not None else None)
        if not rc.drafted:
            sm.width1_rounds += 1
            if self.ngram_on:
                self.index.extend(outcome.new_tokens)
            if record is not None:
                record.learn_s = time.perf_counter() - t_observe
                self.log.add(record)  # type: ignore[union-attr]
            return
        self.forecast.observe(c, committed, d + t)
        sm.tree_rounds += 1
        sm.rounds_priced_fitted += int(rc.priced_fitted)
        cands = rc.cands
        assert cands is not None and rc.rank is not None
        path_c = [plan.cand_of_row[r - 1] for r in outcome.path[1:]]
        # gains: from what narrower prefixes of this tree would have accepted
        if (table is not None and self.pinned is None and not rc.explored
                and rc.s is not None and rc.s_ng is not None):
            u = c / self.cfg.cost_model.context_basis_unit
            on_path = np.asarray(path_c, dtype=np.int64)
            ng = (rc.is_ng[on_path] if rc.is_ng is not None else
                  np.asarray([cands.is_ngram_source(j, self.agreed_counts) for j in path_c],
                             dtype=np.bool_))
            self.gains.observe(u, rc.s, rc.s_ng, rows, rc.n0, rc.first, rc.rank[on_path], ng)
        self._tick("rate-gains")
        # line 17: guard, then learn from every candidate of every accepted parent
        losses = self._learn_acceptance(rc, path_c, outcome)
        self._tick("acceptance-learning")
        # line 18
        if self.ngram_on:
            self.index.extend(outcome.new_tokens)
        self._tick("ngram")
        if record is not None:
            record.n_labelled, record.logloss_fitted, record.logloss_head = losses
            record.learn_s = time.perf_counter() - t_observe
            self.log.add(record)  # type: ignore[union-attr]

    def _learn_acceptance(self, rc: RoundContext, path_c: list[int],
                          outcome: RoundOutcome) -> tuple[int, float | None, float | None]:
        cands = rc.cands
        assert (cands is not None and rc.features is not None and rc.q_head is not None
                and rc.head_raw is not None)
        labelled = acc.learn_round(
            cands, rc.features, path_c, int(outcome.new_tokens[-1]), rc.q_head,
            rc.head_raw, rc.q_model, rc.terms, set(rc.order[: max(rc.width - 1, 0)]),
            self.model, self.head if self.head_offset_on else None,
            self.cfg.acceptance_model.offset_labels == "all_candidates", rc.parent)
        return add_losses(self.summary, *labelled, fitted=rc.q_model is not None)

    # -- the store -------------------------------------------------------------------------------

    def _parts(self) -> dict[str, Any]:
        return {"rate": self.rate, "gains": self.gains, "forecast": self.forecast,
                "model": self.model}

    def state(self) -> dict[str, Any]:
        """Everything that outlives a request (the per-request offset, intercept and n-gram
        index do not), as :func:`~adaspark.rules.adaspark.store.learned_state` lays it out."""
        chooser = {"incumbent": self.incumbent, "w1_incumbent": self.w1_incumbent,
                   "exploration_clock": self.exploration_clock}
        return learned_state(self.max_rows, self.width_mode, self.table, self._parts(), chooser,
                             self.cfg.store.persist_fast_state)

    def load_state(self, s: dict[str, Any]) -> None:
        ch = load_learned(s, self.max_rows, self.width_mode, self.table, self._parts())
        if ch is not None:
            self.incumbent = int(ch["incumbent"])
            self.w1_incumbent = bool(ch["w1_incumbent"])
            self.exploration_clock = int(ch["exploration_clock"])


_NO_WEIGHTS = np.zeros(acc.N_COEF)


@kernel
def _round_order(probs: np.ndarray, conf: np.ndarray, eps: float, r_floor: float,
                 parent: np.ndarray, kind: np.ndarray, agreed: np.ndarray, evidence: np.ndarray,
                 run: np.ndarray, contra: np.ndarray, src_p: np.ndarray, head_q: np.ndarray,
                 D: int, K: int, head_b: float, with_model: bool, w: np.ndarray, model_b: float,
                 u: float, e0: int, e1: int, priced: bool, agreed_counts: bool) -> tuple:
    """Algorithm 1, lines 5-6 for one round's candidates: the block's features
    (``features.feature_arrays``), the head-based q (shifted by the head offset ``head_b``),
    Eq. (6)'s q (``acceptance.bucket_terms``, ``eq6_scores``, ``softmax_by_parent``) when there is a
    model, the n-gram mask of Eq. (7) and, under the q that prices the tree (the model's while
    the guard lets it, ``priced``), Prop. 1's order, ``S``, ``S_ng`` and each candidate's rank."""
    lh, ls, logr = feature_arrays(probs, conf, eps, r_floor)
    n = parent.shape[0]
    q_head = acc.shift(head_q, head_b)
    if with_model:
        coef, base = acc.bucket_terms(kind, agreed, evidence, run, contra, src_p, eps, e0, e1)
        q_model = acc.softmax_by_parent(acc.eq6_scores(w, model_b, u, lh, ls, logr, D, K, coef,
                                                     base), parent)
    else:
        coef, base = np.full(n, -1, dtype=np.int64), np.zeros(n)
        q_model = np.zeros(0)
    is_ng = np.empty(n, dtype=np.bool_)
    for j in range(n):
        is_ng[j] = kind[j] == 2 or (agreed_counts and agreed[j])
    order, S, s_ng = ngram_order_arrays(parent, q_model if priced else q_head, is_ng)
    rank = np.empty(n, dtype=np.int64)   # the order's inverse permutation
    for k in range(n):
        rank[order[k]] = k
    return lh, ls, logr, q_head, q_model, coef, base, is_ng, order, S, s_ng, rank


@kernel
def _placed_sums(S: np.ndarray, rank: np.ndarray, is_ng: np.ndarray,
                 placed: np.ndarray) -> tuple[float, float]:
    """The placed candidates' expected accepted tokens, all and the n-gram-priced ones: each
    one's own ``Q`` read off ``S`` at its rank."""
    s_all = s_ng = 0.0
    for j in placed:
        r = rank[j]
        qp = S[r + 1] - S[r]
        s_all += qp
        if is_ng[j]:
            s_ng += qp
    return s_all, s_ng
