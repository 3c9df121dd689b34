"""Local search over elimination orders from given start orders: :func:`descend` to a
local optimum, :func:`anneal` (simulated annealing, the bar every learned method must
clear at the same time budget) and :func:`anneal_dense` (release 0.1.0's annealer, kept
as the benchmark's comparison).

How :func:`anneal` spends a budget. Moves swap two positions or move one vertex
elsewhere, mostly within a window of nearby positions, drawn along a cursor that sweeps
the order; each is scored from the state at its first changed position (reached through
an undo log) and stops as soon as its outcome is decided, and one that provably changes
nothing is not scored (see :mod:`alphagrad.evaluator`). The start orders (forward,
reverse and Markowitz, or ``start``) are first each descended (:func:`descend`, side by
side, for at most :attr:`AnnealSettings.start_share` of the budget): on large graphs they
lie in basins of very different depth, and the cheapest start is often not in the
deepest. Independent chains (one per thread, each with its own seed) anneal from the
results, the first from the cheapest, the next from the next cheapest (and round again);
the temperature decays geometrically over the budget (:func:`temperatures`), less the
time kept for a final descent (:attr:`AnnealSettings.descent_share`). Each chain then
descends from its best order by moving one vertex at a time to a later position while
that makes the order cheaper, every target of a vertex scored in one walk
(:meth:`Evaluator.descend`): moves over long distances that annealing rarely draws. The
cheapest order of any chain wins. It returns at once when the optimum is proven: a graph
of at most :attr:`AnnealSettings.exact_limit` intermediates is solved exactly, and an
order of zero cost cannot be beaten.

With :attr:`AnnealSettings.schedule` ``"nested"`` nothing depends on the budget but
where the run stops: bounded descents of the starts, then cycles of a fixed number of
moves per chain, doubling, each cooling from the chain's best; more time repeats a
shorter run's moves and adds more, so the order is never dearer.

All of it counts with the compiled evaluator (:mod:`alphagrad.evaluator`), whose kernels
release the GIL, so the chains run side by side in threads.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import sys
import threading
import time
import warnings

import numpy as np

from alphagrad import evaluator as ev_
from alphagrad import orders
from alphagrad import rules as rl
from alphagrad.checks import check_budget, check_graph, check_int, check_seed
from alphagrad.evaluator import Evaluator
from alphagrad.graph import Graph
from alphagrad.scoring import resolve_order


@dataclasses.dataclass(frozen=True)
class AnnealSettings:
    """The schedule of :func:`anneal` (the defaults were measured; the notes say how)."""

    #: Graphs with at most this many intermediates are solved exactly (dynamic programming
    #: over at most 2**10 states), which then returns at once.
    exact_limit: int = 10
    #: The (start, end) temperatures, in units of the start order's mean cost per
    #: eliminated vertex (a move re-prices a few eliminations, so the unit fits graphs of
    #: every size): ``cold`` on graphs of at most ``cold_up_to`` intermediates, ``hot`` from
    #: ``hot_from`` on, geometric in between. Measured side by side (medians of 3 seeds): on
    #: the ten published tasks and on random programs of 75-222 intermediates the cold pair
    #: reaches the best known cost sooner at every budget from 0.1 s to 1 s; on graphs of
    #: 387-459 intermediates the hot pair is better at 5 s (0.234 vs 0.283 x best baseline
    #: on a random program, 0.746 vs 0.765 on RoeFlux_3d x3).
    cold: tuple[float, float] = (0.3, 0.01)
    hot: tuple[float, float] = (3.0, 0.05)
    cold_up_to: int = 150
    hot_from: int = 400
    #: Whatever the size, a run with fewer moves than this per vertex is cold: the hot start
    #: scrambles a good start order faster than so few moves repair it (side by side, hot /
    #: cold: RoeFlux_3d x14 at 68 moves per vertex 0.887 / 0.787 x best baseline,
    #: BlackScholes x20 at 106 0.707 / 0.673, a 387-intermediate random program at 69
    #: 0.446 / 0.419, but at 133 0.305 / 0.391).
    few_moves: int = 100
    #: A late order (:func:`anneal`'s ``late``) replaces a chain only if it costs less than
    #: this share of every chain's best: a chain holding a dearer order may be descending
    #: into a deeper basin. Measured with the network's greedy orders at 1 s: on
    #: NeuralCA_Conv the order arrived at 0.983 of the cheapest chain's best and took
    #: forward's chain, the only one that reaches 0.36 x the best baseline (0.973 returned
    #: instead); on 13 graphs of 1,500-1,900 intermediates it arrived at 0.71-0.92 where it
    #: helped (0.62 vs 0.67 x the best baseline on BlackScholes x20).
    late_margin: float = 0.95
    #: One chain per core this process may use, up to this many (:func:`default_threads`).
    max_threads: int = 8
    #: The most of the budget kept for the descent that ends each chain
    #: (:meth:`Evaluator.descend`): it keeps 1.5 times the time one pass over the order is
    #: estimated to take (:func:`_pass_seconds`), at most this share, and nothing if not
    #: even half a pass fits in this share: a small part of a pass on a large graph gains
    #: less than annealing does in the same time (BlackScholes x20 at 5 s: 0.678 vs 0.670 x
    #: best baseline), while a small graph's pass is worth its time even when it is cut
    #: short. With ``iterations``, the descent scores at most one target per annealing move
    #: instead (about a sixth of the annealing's work).
    descent_share: float = 0.2
    #: Given several start orders (by default forward, reverse and Markowitz), each is first
    #: descended (side by side, one per chain) for at most this share of the budget, and
    #: annealing starts from the cheapest results: on large graphs the starts lie in basins
    #: of very different depth (NeuralCA_Conv, 687 intermediates: reverse, the cheapest
    #: baseline, descends to 0.97 x its cost, forward to 0.36), which a few seconds of
    #: annealing from the cheapest start never leave. Measured side by side on 12 large
    #: held-out graphs (359-1,182 intermediates, seeds 0 and 1): 0.766 vs 0.846 x best
    #: baseline at 5 s, 0.774 vs 0.848 at 1 s; the published tasks unchanged (0.846 vs
    #: 0.845 at 0.1 s).
    start_share: float = 0.25
    #: Each chunk of moves (one full pass to set up, then incremental moves) runs at least
    #: this long, so that setting up stays a small part of short budgets.
    min_chunk_s: float = 0.003
    #: ``"budget"``: one cooling over the whole budget (the temperature follows the
    #: elapsed share of it). ``"nested"``: an anytime schedule whose moves, temperatures
    #: and seeds do not depend on the budget, so that a run with more ``iterations``
    #: repeats a shorter run's work and goes on, and never returns a dearer order (with
    #: a time budget: whenever the longer run gets at least as far): each start is
    #: descended for ``start_targets`` targets per unit, then each chain anneals in
    #: cycles of ``cycle_moves`` moves per unit (the first two alike, then doubling),
    #: each cooling from the chain's best order and closing with a descent of
    #: ``cycle_descent`` targets per move made. Measured side by side on 19 held-out
    #: graphs of 838-1,924 intermediates (2 cores, seed 0), budget / nested x the best
    #: baseline: 0.832 / 0.798 at 1 s, 0.752 / 0.752 at 5 s, 0.736 / 0.746 at 20 s; 4 of
    #: the 19 graphs got a dearer order at a longer budget with "budget", none with
    #: "nested". The cost of an anytime schedule is its last cycle, cut short by the
    #: deadline: up to half the time of a long run, hence 20 s. "budget" stays the
    #: default (the strongest search at the longer budgets, the yardstick).
    schedule: str = "budget"
    cycle_moves: int = 2
    start_targets: int = 32
    cycle_descent: int = 1
    #: With ``"nested"``: the cycle before which the last chain asks ``late`` for its one
    #: order (waiting for it), so that where a late start lands does not depend on timing.
    late_cycle: int = 3

    def __post_init__(self):
        if self.schedule not in ("budget", "nested"):
            raise ValueError(f"schedule must be 'budget' or 'nested', got {self.schedule!r}")
        check_int(self.cycle_moves, "cycle_moves", 1)
        check_int(self.start_targets, "start_targets", 0)
        check_int(self.cycle_descent, "cycle_descent", 0)
        check_int(self.late_cycle, "late_cycle", 0)
        for name in ("exact_limit", "few_moves", "cold_up_to", "hot_from"):
            check_int(getattr(self, name), name, 0)
        check_int(self.max_threads, "max_threads", 1)
        if self.hot_from <= self.cold_up_to:
            raise ValueError(f"hot_from ({self.hot_from}) must be more than cold_up_to ({self.cold_up_to})")
        for name in ("cold", "hot"):
            pair = getattr(self, name)
            if not (isinstance(pair, tuple) and len(pair) == 2 and all(t > 0 for t in pair)):
                raise ValueError(f"{name} must be a (start, end) pair of temperatures > 0, got {pair!r}")
        for name in ("late_margin", "descent_share", "start_share"):
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"{name} must be a share in [0, 1], got {getattr(self, name)!r}")
        if not self.min_chunk_s >= 0:
            raise ValueError(f"min_chunk_s must be a number of seconds >= 0, got {self.min_chunk_s!r}")


def temperatures(cost: int, n: int, moves: int | None = None,
                 settings: AnnealSettings = AnnealSettings()) -> tuple[float, float]:
    """:func:`anneal`'s start and end temperatures for an order of ``n`` vertices costing
    ``cost`` and a run of ``moves`` moves (if known): the pair for its size (see
    :attr:`AnnealSettings.cold`), or the cold pair for fewer than
    :attr:`AnnealSettings.few_moves` moves per vertex, times its mean cost per vertex (at
    least 1 and 0.05)."""
    s = settings
    per_vertex = cost / n
    f = min(max((n - s.cold_up_to) / (s.hot_from - s.cold_up_to), 0.0), 1.0)
    if moves is not None and moves < s.few_moves * n:
        f = 0.0
    t_start = s.cold[0] * (s.hot[0] / s.cold[0]) ** f
    t_end = s.cold[1] * (s.hot[1] / s.cold[1]) ** f
    return max(1.0, t_start * per_vertex), max(0.05, t_end * per_vertex)


def default_threads(settings: AnnealSettings = AnnealSettings()) -> int:
    """The cores this process may use (its CPU affinity), at most
    :attr:`AnnealSettings.max_threads`."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(cores or 1, settings.max_threads))


def descend(graph: Graph, start, convention: str = "exact", limit: int | None = None) -> list[int]:
    """A local optimum from ``start`` (anything :func:`~alphagrad.scoring.resolve_order`
    accepts): pass after pass, each vertex moves to the later position that makes the order
    cheapest, while one does; every target of a vertex is scored in one walk of the rest of
    the order (:meth:`Evaluator.descend`). What :func:`anneal` does to each start order and
    to each chain's best order at its end: moves over long distances that annealing rarely
    draws. ``limit`` (an int >= 0) caps the targets scored (a whole pass scores n(n-1)/2)."""
    check_graph(graph, "baselines.descend")
    ev = Evaluator(graph, rl.check_convention(convention, time=True))
    order = np.asarray(resolve_order(graph, start, convention), np.int64)
    limit = None if limit is None else check_int(limit, "limit", 0)

    def step(first, lim):
        return ev.descend(order, first, lim)
    if len(order) > 1:
        _descend(step, len(order), limit)
    _check_cap(ev.cost(order))
    return [int(v) for v in order]


def _budgeted(chunk_fn, budget_s, iterations, seed, temps, on_best=None, min_chunk_s=0.0,
              t_start=None, stop=None):
    """Runs ``chunk_fn(moves, t_from, t_to, seed) -> best`` for ``iterations`` moves, or
    in chunks of about 1% of ``budget_s`` and at least ``min_chunk_s`` (sized from the
    measured speed, never past the end) with the temperature following the elapsed
    fraction of the budget from ``temps(moves)[0]`` to ``[1]``, ``moves`` the run's moves
    (for a budget: ``None`` for the first two chunks, then estimated from the speed of the
    second, which runs about 1% of the budget). The clock starts at ``t_start``, or else
    after a call of no moves, which compiles the kernels the first time on a machine
    (seconds). It stops early when ``stop`` (a ``threading.Event``) is set; it calls
    ``on_best(best)`` when a chunk improves, and with ``iterations`` once, after its one
    chunk (the caller reports it if it beats what it has shown). Interrupted (Ctrl-C)
    between or in a chunk, it stops with a warning: the chunks replace the best order
    whole, so what it holds is complete."""
    if iterations is not None:
        best = chunk_fn(iterations, *temps(iterations), seed)
        if on_best is not None:
            on_best(best)
        return best
    t0, t1 = temps(None)
    best = chunk_fn(0, t0, t0, seed)  # compiles the kernels (or loads numba's cache) before the clock
    t_start = time.perf_counter() if t_start is None else t_start
    k, chunk, done = 0, 16, 0
    try:
        while best > 0 and not (stop is not None and stop.is_set()):  # a zero-cost order is optimal
            frac = (time.perf_counter() - t_start) / budget_s
            if frac >= 1:
                break
            span = max(0.01 * budget_s, min_chunk_s)
            lo = t0 * (t1 / t0) ** frac
            hi = t0 * (t1 / t0) ** min(1.0, frac + span / budget_s)
            before = best
            t_chunk = time.perf_counter()
            best = chunk_fn(chunk, lo, hi, (seed * 1_000_003 + k) % 2**32)
            per_move = max(time.perf_counter() - t_chunk, 1e-9) / chunk
            left = budget_s - (time.perf_counter() - t_start)
            done += chunk
            if k == 1:  # the moves the budget allows
                t0, t1 = temps(done + int(max(left, 0.0) / per_move))
            chunk = int(min(max(min(span, left) / per_move, 1), 10_000_000))
            k += 1
            if on_best is not None and best < before:
                on_best(best)
    except KeyboardInterrupt:
        _interrupted(t_start, budget_s, stop)
    return best


def _interrupted(t_start, budget_s, stop=None):
    """Warns that Ctrl-C ended the search early, and tells the other chains (``stop``)."""
    if stop is not None:
        stop.set()
    warnings.warn(f"anneal interrupted after {time.perf_counter() - t_start:.1f}s of {budget_s:g}s: "
                  f"returning the best order found so far", stacklevel=4)


def _descend(step, n, limit=None, deadline=None, stop=None, on_best=None, span=0.003):
    """Runs ``step(first, limit) -> (cost, moves applied, next position, targets scored)``
    (:meth:`Evaluator.descend` on one order) pass after pass over the order's ``n``
    positions until a whole pass applies no move (a local optimum), ``limit`` targets have
    been scored, ``deadline`` (``time.perf_counter``) has passed or ``stop`` is set; with a
    deadline, in calls of about ``span`` seconds, sized from the measured speed (a call
    first re-scores the order: two eliminations a position). Calls
    ``on_best(cost)`` when a call improves the order."""
    first, clean, ask = 0, 0, 4 * n
    while clean < n - 1 and (limit is None or limit > 0):
        if deadline is not None and (time.perf_counter() >= deadline or (stop is not None and stop.is_set())):
            break
        t = time.perf_counter()
        cost, moved, nxt, scored = step(first, ask if limit is None else limit)
        if limit is not None:
            limit -= scored
        clean = 0 if moved else clean + nxt - first
        first = 0 if nxt >= n - 1 else nxt
        if moved and on_best is not None:
            on_best(cost)
        per = max(time.perf_counter() - t, 1e-9) / max(scored, 1)
        ask = int(min(max(span / per, n), 10_000_000))


def _pass_seconds(ev, order, prefix, units) -> float:
    """The seconds a pass of :meth:`Evaluator.descend` over ``order`` should take,
    estimated from a call that scores nothing (re-scoring the order) and one over its
    first positions, on a copy."""
    probe, m = order.copy(), len(order)
    t = time.perf_counter()
    ev.descend(probe, 0, 0, prefix=prefix, units=units)
    t_call = time.perf_counter() - t
    scored = ev.descend(probe, 0, 8 * m, prefix=prefix, units=units)[3]
    t_scored = time.perf_counter() - t - 2 * t_call
    return t_call + max(t_scored, 0.0) / max(scored, 1) * m * (m - 1) / 2


def _side_by_side(run, count: int, interrupted=None):
    """Runs ``run(k, stop)`` for ``k`` in ``range(count)``: ``k = 0`` in this thread (where
    Ctrl-C arrives), the others in threads, and waits for all. ``stop`` (a
    ``threading.Event``) is set, and every run should then end soon, when one of them
    fails or is interrupted (a run that catches Ctrl-C sets it itself); Ctrl-C while
    waiting for the others calls ``interrupted()``, or is raised if that is ``None``. An
    error in any of them is raised here once all have ended."""
    stop, errors = threading.Event(), []

    def guarded(k):
        try:
            run(k, stop)
        except BaseException as e:  # raised by the caller, not lost with the thread
            errors.append(e)
            stop.set()

    workers = [threading.Thread(target=guarded, args=(k,), daemon=True) for k in range(1, count)]
    for w in workers:
        w.start()
    try:
        run(0, stop)
        try:
            for w in workers:
                w.join()
        except KeyboardInterrupt:
            if interrupted is None:
                raise
            interrupted()
    finally:
        stop.set()
        for w in workers:
            w.join()
    if errors:
        raise errors[0]


def _anneal_setup(graph, budget_s, seed, convention, iterations, start, where):
    """Checked arguments, the evaluator and the start orders (forward, reverse and
    Markowitz by default; duplicates dropped)."""
    check_graph(graph, where)
    budget_s = check_budget(budget_s)
    seed = check_seed(seed)
    rl.check_convention(convention, time=True)
    if iterations is not None:
        iterations = check_int(iterations, "iterations", 0)
    ev = Evaluator(graph, convention)
    if start is None:
        start = list(orders.classic(graph, convention, ev).values())
    elif not _several(start):
        start = [start]
    unique = {tuple(resolve_order(graph, o, convention)): None for o in start}
    return budget_s, seed, iterations, ev, [np.asarray(o, np.int64) for o in unique]


def _several(start) -> bool:
    """Whether ``start`` is a list of orders rather than one order (a list of ints)."""
    return isinstance(start, (list, tuple)) and len(start) > 0 and all(
        isinstance(o, (str, list, tuple, range, np.ndarray)) or hasattr(o, "order") for o in start)


def _check_cap(best):
    if best >= rl.COST_CAP:
        raise OverflowError(
            f"every order annealing saw costs at least {rl.COST_CAP} (2**62 - 1) multiplications, "
            f"beyond what its 64-bit comparisons can rank; score orders with alphagrad.cost, "
            f"which counts exactly at any size"
        )


class _Annealing:
    """One call of :func:`anneal` past its argument checks: the start orders with their
    false twins grouped into units, one evaluator and one chain (current and best order)
    per thread, and the steps each chain ``k`` runs on its thread."""

    def __init__(self, graph, ev, starts, keep, settings, budget_s, seed, iterations, threads,
                 progress, late, info, t_start):
        self.graph, self.convention, self.ev, self.s = graph, ev.convention, ev, settings
        self.budget_s, self.seed, self.iterations, self.threads = budget_s, seed, iterations, threads
        self.progress, self.late, self.info = progress, late, info
        self.t_start = t_start  # the budget counts from here, the kernels' compilation left out
        self.n, self.keep = len(starts[0]), keep
        self.prefix = starts[0][:keep]  # the kept opening
        self.starts = [o[keep:].copy() for o in starts]  # the rest of each start order
        self.report = self.on_best if progress else None
        self.lock = threading.Lock()

    def result(self, order, from_late=False):
        """``order`` as :func:`anneal` returns it (with ``info``: where it comes from)."""
        return (order, {"late": from_late}) if self.info else order

    def solve(self):
        """Everything :func:`anneal` does once its arguments are checked."""
        ev, prefix = self.ev, self.prefix
        if self.n - self.keep < 2:
            return self.result([int(v) for v in prefix] + [int(v) for v in self.starts[0]])
        self.fixed = ev.cost(prefix)
        self.start_costs = [ev.cost(np.concatenate([prefix, o])) for o in self.starts]
        self.shown = min(self.start_costs)  # the cheapest cost reported so far
        if self.n <= self.s.exact_limit and self.keep == 0:
            best_order, best = ev.optimal()
            _check_cap(best)
            if self.report is not None:
                self.report(best)
            return self.result(best_order)
        # false twins (that the kept opening does not touch) move as one unit, placed first
        # where the start order eliminates the first of them
        kept = set(prefix.tolist())
        groups = [g for g in self.graph.false_twins if not kept.intersection(g)]
        self.units = ev.units(groups)
        self.first = {v: g[0] for g in groups for v in g}
        self.grouped = [self.in_units(o) for o in self.starts]
        self.m = len(self.grouped[0])
        if self.m < 2:
            return self.cheapest(self.grouped)
        self.evs = [ev] + [Evaluator(self.graph, self.convention, ev.tables)
                           for _ in range(1, self.threads)]  # pools grow per chain
        self.compile()
        self.descent_s = self.descent_seconds()
        self.halted = threading.Event()
        if len(self.grouped) > 1:
            _side_by_side(self.run_starts, min(self.threads, len(self.grouped)), self.on_interrupt())
            if self.halted.is_set():
                return self.cheapest(self.grouped)
        self.set_up_chains()
        _side_by_side(self.run_chain, self.threads, self.on_interrupt())
        return self.cheapest([chain[1] for chain in self.chains] + self.grouped,
                             [k for k in range(self.threads) if self.took[k]])

    def in_units(self, order):
        """An order of the units: each group of twins as its first vertex."""
        return np.asarray(list(dict.fromkeys(self.first.get(int(v), int(v)) for v in order)), np.int64)

    def cheapest(self, unit_orders, late_ones=()):
        """The cheapest of these orders, re-scored from scratch, and the start orders (one
        wins if grouping its twins made every annealed order dearer), as :func:`anneal`
        returns it; ``late_ones``: the indices of orders that descend from a late one."""
        finals = [np.concatenate([self.prefix, ev_.expand(o, *self.units)]) for o in unit_orders]
        costs = [self.ev.cost(o) for o in finals] + self.start_costs
        finals += [np.concatenate([self.prefix, o]) for o in self.starts]
        best = min(range(len(costs)), key=costs.__getitem__)
        _check_cap(costs[best])
        return self.result([int(v) for v in finals[best]], best in late_ones)

    def on_best(self, cost):
        """Progress: the cheapest order of any chain, as it improves."""
        with self.lock:
            if cost < self.shown:
                self.shown = cost
                if callable(self.progress):
                    self.progress(cost)
                else:
                    print(f"anneal: {cost} multiplications after {time.perf_counter() - self.t_start:.1f}s",
                          file=sys.stderr)

    def on_interrupt(self):
        """What Ctrl-C while waiting for the chains does: a warning with a time budget,
        raised with ``iterations`` (a fixed amount of work)."""
        return None if self.iterations is not None else lambda: _interrupted(self.t_start, self.budget_s)

    def compile(self):
        """Compiles the kernels (or loads numba's cache), off the clock."""
        t_compile = time.perf_counter()
        order = self.grouped[0]
        self.ev.anneal(order.copy(), order.copy(), 0, 1.0, 1.0, self.seed, prefix=self.prefix, units=self.units)
        self.ev.descend(order.copy(), 0, 0, prefix=self.prefix, units=self.units)
        self.t_start += time.perf_counter() - t_compile

    def descent_seconds(self) -> float:
        """The time kept for each chain's final descent (see
        :attr:`AnnealSettings.descent_share`; none with ``iterations``)."""
        if self.iterations is not None or self.s.schedule == "nested":
            return 0.0
        pass_s = _pass_seconds(self.ev, self.grouped[0], self.prefix, self.units)
        share = self.s.descent_share * self.budget_s
        return min(1.5 * pass_s, share) if pass_s <= 2 * share else 0.0

    def descent(self, k, order, limit, deadline=None, stop=None):
        """Descends ``order`` (of units) in place on chain ``k``'s evaluator."""
        def step(first, lim):
            cost, moved, nxt, scored = self.evs[k].descend(order, first, lim, prefix=self.prefix, units=self.units)
            return self.fixed + cost, moved, nxt, scored
        _descend(step, self.m, limit, deadline, stop, self.report, max(0.01 * self.budget_s, self.s.min_chunk_s))

    def run_starts(self, k, stop):
        """Several starts: chain ``k`` descends starts ``k``, ``k + threads``, ..."""
        mine = self.grouped[k::self.threads]
        try:
            for i, order in enumerate(mine):
                if self.s.schedule == "nested":  # a bounded descent, as long whatever the budget
                    deadline = None if self.iterations is not None else self.t_start + self.budget_s
                    self.descent(k, order, self.s.start_targets * self.m, deadline, stop)
                elif self.iterations is not None:
                    self.descent(k, order, self.iterations)
                else:
                    left = self.t_start + self.s.start_share * self.budget_s - time.perf_counter()
                    self.descent(k, order, None, time.perf_counter() + left / (len(mine) - i), stop)
        except KeyboardInterrupt:
            if self.iterations is not None:
                raise
            self.halted.set()
            _interrupted(self.t_start, self.budget_s, stop)

    def set_up_chains(self):
        """The chains' start orders (the cheapest descended start first, then the next,
        and round again), best costs, seeds and annealing time."""
        prefix, units = self.prefix, self.units
        costs = [self.ev.descend(o, 0, 0, prefix=prefix, units=units)[0] for o in self.grouped]
        rank = sorted(range(len(self.grouped)), key=costs.__getitem__)
        ranked = [self.grouped[i] for i in rank]
        self.chosen_cost = self.fixed + min(costs)
        self.chains = [(ranked[k % len(ranked)].copy(), ranked[k % len(ranked)].copy())
                       for k in range(self.threads)]  # each chain's current and best order
        self.bests = [self.fixed + costs[rank[k % len(rank)]] for k in range(self.threads)]  # their costs
        self.handed = [None] * self.threads  # late orders handed to a chain
        self.took = [False] * self.threads  # the chains that took one
        self.seeds = [(self.seed + 7919 * k) % 2**32 for k in range(self.threads)]
        self.t_anneal = time.perf_counter()
        self.anneal_s = max(self.budget_s - (self.t_anneal - self.t_start) - self.descent_s, 1e-3)

    def arrived(self, k):
        """Polls ``late``; hands an order that arrived to the chain whose best is dearest
        (``handed[j]``), if :attr:`AnnealSettings.late_margin` of every chain's best is
        dearer; chain ``k`` then takes what it was handed."""
        with self.lock:
            order = self.late()
            if order is not None:
                unit_order, cost = self.late_order(k, order)
                if cost < self.s.late_margin * min(self.bests):
                    self.handed[max(range(self.threads), key=lambda i: (self.bests[i], i))] = unit_order
            mine, self.handed[k] = self.handed[k], None
        if mine is not None:
            self.chains[k] = (mine.copy(), mine)
            self.took[k] = True

    def late_order(self, k, order):
        """A late ``order`` as chain ``k`` would take it: an order of units, and its cost
        (the prefix's included)."""
        unit_order = self.in_units(resolve_order(self.graph, order, self.convention))
        return unit_order, self.fixed + self.evs[k].descend(unit_order, 0, 0, prefix=self.prefix, units=self.units)[0]

    def late_start(self, k):
        """The nested schedule's late start: chain ``k`` (the last) asks ``late`` once, at a
        fixed cycle (it may wait for the order), and takes the order as its current and
        best if it costs less than :attr:`AnnealSettings.late_margin` of its own best:
        nothing here depends on the other chains or on the clock."""
        order = self.late()
        if order is None:
            return
        unit_order, cost = self.late_order(k, order)
        if cost < self.s.late_margin * self.bests[k]:
            self.chains[k] = (unit_order.copy(), unit_order)
            self.bests[k], self.took[k] = cost, True

    def chunk(self, k, moves, t_from, t_to, chunk_seed):
        """``moves`` annealing moves of chain ``k``; its best cost (the prefix's included)."""
        if self.late is not None and self.s.schedule == "budget":
            self.arrived(k)
        current, best = self.chains[k]
        self.bests[k] = self.fixed + self.evs[k].anneal(current, best, moves, t_from, t_to, chunk_seed,
                                                        prefix=self.prefix, units=self.units)[1]
        return self.bests[k]

    def temps(self, moves):
        """A move changes a few eliminations: the temperatures scale with one."""
        return temperatures(self.chosen_cost, self.m, moves, self.s)

    def run_chain(self, k, stop):
        """One chain: annealing, then the descent from its best order."""
        if self.s.schedule == "nested":
            return self.run_cycles(k, stop)
        _budgeted(functools.partial(self.chunk, k), self.anneal_s, self.iterations, self.seeds[k], self.temps,
                  self.report, self.s.min_chunk_s, self.t_anneal, stop)
        if stop.is_set() or (self.iterations is None and self.descent_s == 0):  # interrupted, or no time kept
            return
        if self.iterations is not None:  # a fixed amount of work: Ctrl-C is raised, as in annealing
            self.descent(k, self.chains[k][1], self.iterations)
            return
        try:
            self.descent(k, self.chains[k][1], None, self.t_start + self.budget_s, stop)
        except KeyboardInterrupt:
            _interrupted(self.t_start, self.budget_s, stop)

    def run_cycles(self, k, stop):
        """One chain of the nested schedule (:attr:`AnnealSettings.schedule`): cycles of
        ``cycle_moves`` moves per unit, the first two alike, then doubling, each cooling
        from the chain's best order in 32 chunks and closing with a descent of its best
        (``cycle_descent`` targets per move). Moves, temperatures and seeds do not depend
        on the budget; a run stops at its deadline (between chunks and descents) or after
        ``iterations`` moves (a chunk cut short keeps its temperatures move by move), so a
        longer run repeats a shorter one's work and goes on."""
        deadline = None if self.iterations is not None else self.t_start + self.budget_s
        left, cycle, base = self.iterations, 0, self.s.cycle_moves * self.m
        try:
            while left is None or left > 0:
                length = base << max(cycle - 1, 0)
                if self.late is not None and cycle == self.s.late_cycle and k == self.threads - 1:
                    self.late_start(k)
                t0, t1 = self.temps(length)
                current, best = self.chains[k]
                current[:] = best
                parts = max(1, min(32, length // 256))
                for j in range(parts):
                    if stop.is_set() or (deadline is not None and time.perf_counter() >= deadline):
                        return
                    moves = length * (j + 1) // parts - length * j // parts
                    lo, hi = t0 * (t1 / t0) ** (j / parts), t0 * (t1 / t0) ** ((j + 1) / parts)
                    if left is not None and moves > left:  # the same moves, cut short
                        hi = lo * (hi / lo) ** ((left - 1) / max(moves - 1, 1))
                        moves = left
                    if left is not None:
                        left -= moves
                    before = self.bests[k]
                    cost = self.chunk(k, moves, lo, hi, (self.seeds[k] * 1_000_003 + 64 * cycle + j) % 2**32)
                    if self.report is not None and cost < before:
                        self.report(cost)
                    if cost == self.fixed or left == 0:  # nothing to save, or the moves are spent
                        return
                best = self.chains[k][1]  # a late start may have replaced the chain's orders
                self.descent(k, best, self.s.cycle_descent * length, deadline, stop)
                self.bests[k] = self.fixed + self.evs[k].descend(best, 0, 0, prefix=self.prefix,
                                                                 units=self.units)[0]
                cycle += 1
        except KeyboardInterrupt:
            if self.iterations is not None:
                raise
            _interrupted(self.t_start, self.budget_s, stop)


def anneal(graph: Graph, budget_s: float = 10.0, seed: int = 0, convention: str = "exact",
           iterations: int | None = None, start=None, progress=False, keep: int = 0,
           threads: int | None = None, late=None, info: bool = False,
           settings: AnnealSettings | None = None):
    """Simulated annealing over orders on the sparse, incremental evaluator, in chains
    side by side, each ending in a descent (how: see the module docstring).

    Args:
      graph: the graph.
      budget_s: wall-clock seconds to spend from the call (the kernels' one-time
        compilation left out), a finite number > 0 (ignored when ``iterations`` is
        given, but checked all the same). Moves run in chunks sized
        from their measured speed, so the search ends within about 1% of the budget
        after the first chunk (the first chunk, a few moves, always runs); it ends
        sooner when the descent reaches an order no such move improves.
      seed: random seed, an int in ``[0, 2**32)``.
      convention: cost convention (``"time"`` or ``"time:PLATFORM"``: the modelled
        time, :mod:`alphagrad.time_model`, minimised at the same speed).
      iterations: a fixed number of moves (an int >= 0) per chain instead of a time
        budget; each descent (of a start order, and at the end) then scores at most as
        many targets (deterministic; with the nested schedule, the descents are bounded
        as :attr:`AnnealSettings.schedule` says, and more iterations never give a dearer
        order).
      start: an order to start from instead of the baselines (anything
        :func:`~alphagrad.scoring.resolve_order` accepts), or a list of such orders to
        descend and start from the cheapest result; one order is annealed as it is.
      progress: print the best cost as it improves on every start order (to stderr),
        the last one printed being the returned order's (none if no order beats the
        cheapest start); or a function, called with it instead (from the chains'
        threads; e.g. to update a progress bar).
      keep: the first ``keep`` vertices of the start order stay first, in their order,
        and only the rest is annealed (a smaller search space: e.g. after a good
        opening); no exact solve then.
      threads: how many chains to run side by side, an int >= 1 (default
        :func:`default_threads`: one per core, since the kernels release the GIL). The
        chain with seed ``seed`` is always one of them, so one thread gives what a single
        chain gives, and more can only find an order at least as cheap at a fixed
        ``iterations``.
      late: a function of no arguments, polled by the chains between their chunks of
        moves (from their threads), that returns None or an order that arrived while
        annealing runs (e.g. a network's, played on another thread; each order once).
        If it costs less than :attr:`AnnealSettings.late_margin` of every chain's best
        order, the chain whose best is dearest takes it as its current and best order, at
        the temperature of the moment: a late start. With the nested schedule instead,
        only the last chain calls it, once, before its
        :attr:`AnnealSettings.late_cycle`-th cycle (it may block until its order is ready),
        and takes the order if it costs less than ``late_margin`` of that chain's own
        best, so that a longer budget still repeats a shorter one's work. Not with
        ``keep``, nor with ``iterations`` under the budget schedule (its result would
        depend on timing).
      info: also return where the order comes from (see Returns).
      settings: the schedule (default: :class:`AnnealSettings`'s measured defaults).

    Returns:
      The cheapest order seen (re-scored from scratch); if interrupted (Ctrl-C), the
      cheapest order seen so far, with a warning. With ``info``, ``(order, info)``:
      ``info["late"]`` says whether the order is a late order or annealed from one
      (which stage found it, for :attr:`alphagrad.inference.OrderResult.history`).

    Raises:
      TypeError, ValueError: an argument is not what is described above.
      OverflowError: the cheapest order seen costs 2**62 multiplications or more, so
        annealing (which compares int64 counts) could not rank what it saw.
    """
    t_start = time.perf_counter()  # the budget counts from here, the kernels' compilation left out
    budget_s, seed, iterations, ev, starts = _anneal_setup(graph, budget_s, seed, convention,
                                                           iterations, start, "baselines.anneal")
    keep = check_int(keep, "keep", 0)
    if settings is None:
        settings = AnnealSettings()
    elif not isinstance(settings, AnnealSettings):
        raise TypeError(f"settings must be an AnnealSettings, not {type(settings).__name__}")
    threads = default_threads(settings) if threads is None else check_int(threads, "threads", 1)
    if late is not None and not callable(late):
        raise TypeError(f"late must be a function returning None or an order, not {type(late).__name__}")
    if not isinstance(info, bool):
        raise TypeError(f"info must be True or False, not {info!r}")
    if late is not None and (keep or (iterations is not None and settings.schedule == "budget")):
        raise ValueError("late starts arrive on the clock: pass them with a time budget, without iterations or "
                         "keep (or, with iterations, use AnnealSettings(schedule='nested'))")
    n = len(starts[0])
    if keep > n:
        raise ValueError(f"keep = {keep} is more than the order's {n} vertices")
    if keep and len(starts) > 1:
        raise ValueError(f"keep = {keep} keeps the opening of one start order, but start is "
                         f"{len(starts)} different orders; pass one")
    return _Annealing(graph, ev, starts, keep, settings, budget_s, seed, iterations, threads,
                      progress, late, info, t_start).solve()


def anneal_dense(graph: Graph, budget_s: float = 10.0, seed: int = 0, convention: str = "exact",
                 iterations: int | None = None, start=None, progress: bool = False) -> list[int]:
    """The annealer of release 0.1.0 (deprecated; kept one release as the comparison in
    ``eval/bench_search.py``): uniform swap and move-to moves, each re-scoring the whole
    order on a dense ``V x V`` matrix, from the cheapest start order. Same arguments as
    :func:`anneal`."""
    budget_s, seed, iterations, ev, starts = _anneal_setup(graph, budget_s, seed, convention,
                                                           iterations, start, "baselines.anneal_dense")
    order = min(starts, key=ev.cost).copy()
    if len(order) < 2:
        return [int(v) for v in order]
    args = (ev.dense_matrix(), ev.compose, ev.join, ev.cost_table)
    current = best = ev_.dense_order_cost(*args, order)
    best_order = order.copy()
    t0 = max(1.0, 0.02 * current)
    t1 = max(0.05, 1e-4 * current)

    def chunk(moves, t_from, t_to, chunk_seed):
        nonlocal current, best
        current, best = ev_.dense_anneal(*args, order, current, best_order, best, t_from, t_to, moves, chunk_seed)
        return best

    shown = best

    def on_best(cost):
        nonlocal shown
        if cost < shown:
            shown = cost
            print(f"anneal: {cost} multiplications", file=sys.stderr)

    best = _budgeted(chunk, budget_s, iterations, seed, lambda moves: (t0, t1), on_best if progress else None)
    _check_cap(best)
    return [int(v) for v in best_order]
