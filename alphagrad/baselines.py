"""Classic elimination orders, each ``fn(graph, ...) -> list[int]``, and the door that
turns anything a user may call an order into one.

* :func:`forward` / :func:`reverse`: intermediates in computation order / its reverse
  (forward- and reverse-mode accumulation as vertex elimination).
* :func:`markowitz`: greedy minimal Markowitz degree, where the degree of a vertex is
  the multiplication cost of eliminating it now (Naumann, *The Art of Differentiating
  Computer Programs*, 2012, ch. 4; Griewank & Walter, sec. 10.1); ties go to the smallest id.
* :func:`optimal`: exact minimum by search over elimination states, for small graphs.
* :func:`descend`: a local optimum from any order, by moves of one vertex to a later
  position.
* :func:`anneal`: simulated annealing over orders, the bar every learned method must
  clear at the same time budget.
* :func:`resolve_order`: a name, a sequence of vertex ids or a result object (an
  ``OrderResult``) -> a checked order; :func:`alphagrad.cost` and
  :func:`alphagrad.jacobian` both go through it.

All of them count with the compiled evaluator (:mod:`alphagrad.evaluator`): exact
integers, never wrapped. Every argument that sets a budget, a count or a seed is checked
at the door (:func:`check_budget`, :func:`check_int`, :func:`check_seed`).
"""

from __future__ import annotations

import math
import numbers
import os
import sys
import threading
import time
import warnings

import numpy as np

from alphagrad import evaluator as ev_
from alphagrad import rules as rl
from alphagrad.evaluator import Evaluator
from alphagrad.graph import Graph

#: Graphs with at most this many intermediates are solved exactly by :func:`anneal`
#: (dynamic programming over at most 2**10 states), which then returns at once.
EXACT_LIMIT = 10
#: :func:`anneal`'s (start, end) temperatures, in units of the start order's mean cost per
#: eliminated vertex (a move re-prices a few eliminations, so the unit fits graphs of every
#: size): ``COLD`` on graphs of at most ``COLD_UP_TO`` intermediates, ``HOT`` from
#: ``HOT_FROM`` on, geometric in between. Measured side by side (medians of 3 seeds): on
#: the ten published tasks and on random programs of 75-222 intermediates the cold pair
#: reaches the best known cost sooner at every budget from 0.1 s to 1 s; on graphs of
#: 387-459 intermediates the hot pair is better at 5 s (0.234 vs 0.283 x best baseline on
#: a random program, 0.746 vs 0.765 on RoeFlux_3d x3).
#: Whatever the size, an annealing run with fewer moves than this per vertex is cold: the
#: hot start scrambles a good start order faster than so few moves repair it (side by
#: side, hot / cold: RoeFlux_3d x14 at 68 moves per vertex 0.887 / 0.787 x best baseline,
#: BlackScholes x20 at 106 0.707 / 0.673, a 387-intermediate random program at 69
#: 0.446 / 0.419, but at 133 0.305 / 0.391).
FEW_MOVES = 100
COLD, HOT = (0.3, 0.01), (3.0, 0.05)
COLD_UP_TO, HOT_FROM = 150, 400
#: A late order (:func:`anneal`'s ``late``) replaces a chain only if it costs less than
#: this share of every chain's best: a chain holding a dearer order may be descending into
#: a deeper basin. Measured with the network's greedy orders at 1 s: on NeuralCA_Conv the
#: order arrived at 0.983 of the cheapest chain's best and took forward's chain, the only
#: one that reaches 0.36 x the best baseline (0.973 returned instead); on 13 graphs of
#: 1,500-1,900 intermediates it arrived at 0.71-0.92 where it helped (0.62 vs 0.67 x the
#: best baseline on BlackScholes x20).
LATE_MARGIN = 0.95


def temperatures(cost: int, n: int, moves: int | None = None) -> tuple[float, float]:
    """:func:`anneal`'s start and end temperatures for an order of ``n`` vertices costing
    ``cost`` and a run of ``moves`` moves (if known): the pair for its size (see
    :data:`COLD`), or :data:`COLD` for fewer than :data:`FEW_MOVES` moves per vertex, times
    its mean cost per vertex (at least 1 and 0.05)."""
    per_vertex = cost / n
    f = min(max((n - COLD_UP_TO) / (HOT_FROM - COLD_UP_TO), 0.0), 1.0)
    if moves is not None and moves < FEW_MOVES * n:
        f = 0.0
    t_start = COLD[0] * (HOT[0] / COLD[0]) ** f
    t_end = COLD[1] * (HOT[1] / COLD[1]) ** f
    return max(1.0, t_start * per_vertex), max(0.05, t_end * per_vertex)


#: :func:`anneal` runs one chain per core this process may use, up to this many.
MAX_THREADS = 8


def default_threads() -> int:
    """The cores this process may use (its CPU affinity), at most :data:`MAX_THREADS`."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(cores or 1, MAX_THREADS))


#: The most of :func:`anneal`'s time budget kept for the descent that ends each chain
#: (:meth:`Evaluator.descend`): it keeps 1.5 times the time one pass over the order is
#: estimated to take (:func:`_pass_seconds`), at most this share, and nothing if not even
#: half a pass fits in this share: a small part of a pass on a large graph gains less than
#: annealing does in the same time (BlackScholes x20 at 5 s: 0.678 vs 0.670 x best
#: baseline), while a small graph's pass is worth its time even when it is cut short. With ``iterations``, the descent scores at most one
#: target per annealing move instead (about a sixth of the annealing's work).
DESCENT_SHARE = 0.2

#: Given several start orders (by default forward, reverse and Markowitz), :func:`anneal`
#: first descends each (:meth:`Evaluator.descend`, side by side, one per chain) for at
#: most this share of the budget, and anneals from the cheapest result: on large graphs
#: the starts lie in basins of very different depth (NeuralCA_Conv, 687 intermediates:
#: reverse, the cheapest baseline, descends to 0.97 x its cost, forward to 0.36), which a
#: few seconds of annealing from the cheapest start never leave. Measured side by side
#: on 12 large held-out graphs (359-1,182 intermediates, seeds 0 and 1): 0.766 vs 0.846 x
#: best baseline at 5 s, 0.774 vs 0.848 at 1 s; the published tasks unchanged (0.846 vs
#: 0.845 at 0.1 s).
START_SHARE = 0.25

#: Each chunk of :func:`anneal` moves (one full pass to set up, then incremental moves)
#: runs at least this long, so that setting up stays a small part of short budgets.
MIN_CHUNK_S = 0.003

# ------------------------------------------------------------------ argument checks


def check_graph(graph, where: str = "this function", example: str | None = None) -> Graph:
    """Returns ``graph`` if it is a :class:`~alphagrad.graph.Graph`; a function (or
    anything else) gets told to trace it first, with ``example`` showing how (default:
    ``where(alphagrad.trace(f, *args))``)."""
    if isinstance(graph, Graph):
        return graph
    example = example or f"{where}(alphagrad.trace(f, *args))"
    got = "a function" if callable(graph) else f"a {type(graph).__name__}"
    raise TypeError(f"{where} takes a traced graph, not {got}: trace it first: {example}")


def check_budget(value, name: str = "budget_s", allow_none: bool = False):
    """Returns ``value`` as a float if it is a finite number of seconds > 0 (or None when
    ``allow_none``); raises TypeError for a non-number (bools included), ValueError for
    NaN, infinities, zero and negative budgets."""
    if value is None and allow_none:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} is a number of seconds (a finite float > 0), got {value!r} "
                        f"of type {type(value).__name__}")
    value = float(value)
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a finite number of seconds > 0, got {value!r}")
    return value


def check_int(value, name: str, minimum: int = 0) -> int:
    """Returns ``value`` as an int if it is an integer (Python or numpy, not a bool or a
    float) of at least ``minimum``; raises TypeError or ValueError saying so."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {value!r} of type {type(value).__name__}")
    value = int(value)
    if value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value}")
    return value


def check_seed(seed, name: str = "seed") -> int:
    """Returns ``seed`` if it is an int in ``[0, 2**32)`` (Python or numpy, not a bool or
    a float): the range every random generator here uses without aliasing."""
    seed = check_int(seed, name, 0)
    if seed >= 2**32:
        raise ValueError(f"{name} must be an int in [0, 2**32), got {seed}")
    return seed


# ------------------------------------------------------------------ orders


def forward(graph: Graph) -> list[int]:
    """Forward mode: eliminate intermediates in the order they are computed."""
    return list(check_graph(graph, "baselines.forward").intermediates)


def reverse(graph: Graph) -> list[int]:
    """Reverse mode: eliminate intermediates from the last computed to the first."""
    return list(reversed(check_graph(graph, "baselines.reverse").intermediates))


def markowitz(graph: Graph, convention: str = "exact") -> list[int]:
    """Greedy minimal Markowitz degree: repeatedly eliminate the vertex that is cheapest
    to eliminate now (smallest id on ties), counted exactly (compiled, int64; Python
    integers past 2**62)."""
    check_graph(graph, "baselines.markowitz")
    return Evaluator(graph, rl.check_convention(convention)).markowitz()


def optimal(graph: Graph, convention: str = "exact", max_intermediates: int = 20) -> list[int]:
    """The cheapest order, by dynamic programming over elimination states (compiled).

    Every state reachable by eliminating some subset of the intermediates is solved once;
    states are keyed by a 64-bit hash of their full edge structure, not by the eliminated
    set, so the optimum is exact even where a fill-in edge's structure would depend on the
    order of elimination (up to a hash collision, about 1 in 10^7 at a million states).
    Time and memory grow as 2^n: practical up to about 20 intermediates.

    Raises:
      ValueError: the graph has more than ``max_intermediates`` intermediates.
      OverflowError: even the cheapest order costs 2**62 multiplications or more (the
        search counts in int64).
    """
    check_graph(graph, "baselines.optimal")
    rl.check_convention(convention)
    max_intermediates = check_int(max_intermediates, "max_intermediates", 0)
    inter = np.asarray(graph.intermediates, np.int64)
    if len(inter) > max_intermediates:
        raise ValueError(
            f"optimal search is exponential: the graph has {len(inter)} intermediates, more "
            f"than max_intermediates={max_intermediates}; raise it (time doubles per vertex) "
            f"or use baselines.anneal"
        )
    ev = Evaluator(graph, convention)
    order, total = ev.optimal()
    if total >= rl.COST_CAP:
        raise OverflowError(
            f"every order of this graph costs at least {rl.COST_CAP} (2**62 - 1) multiplications, "
            f"beyond what optimal's 64-bit search can rank; score orders with alphagrad.cost, "
            f"which counts exactly at any size"
        )
    if ev.cost(order) != total:  # pragma: no cover - would mean a hash collision in the memo
        raise RuntimeError("optimal: the reconstructed order does not cost the optimum")
    return order


def descend(graph: Graph, start, convention: str = "exact", limit: int | None = None) -> list[int]:
    """A local optimum from ``start`` (anything :func:`resolve_order` accepts): pass after
    pass, each vertex moves to the later position that makes the order cheapest, while
    one does; every target of a vertex is scored in one walk of the rest of the order
    (:meth:`Evaluator.descend`). What :func:`anneal` does to each start order and to each
    chain's best order at its end: moves over long distances that annealing rarely draws.
    ``limit`` (an int >= 0) caps the targets scored (a whole pass scores n(n-1)/2)."""
    check_graph(graph, "baselines.descend")
    ev = Evaluator(graph, rl.check_convention(convention))
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
    ``on_best(best)`` when a chunk improves. Interrupted (Ctrl-C) between or in a chunk,
    it stops with a warning: the chunks replace the best order whole, so what it holds is
    complete."""
    if iterations is not None:
        return chunk_fn(iterations, *temps(iterations), seed)
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
    rl.check_convention(convention)
    if iterations is not None:
        iterations = check_int(iterations, "iterations", 0)
    ev = Evaluator(graph, convention)
    if start is None:
        start = [forward(graph), reverse(graph), ev.markowitz()]
    elif not _several(start):
        start = [start]
    orders = {tuple(resolve_order(graph, o, convention)): None for o in start}
    return budget_s, seed, iterations, ev, [np.asarray(o, np.int64) for o in orders]


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


def anneal(graph: Graph, budget_s: float = 10.0, seed: int = 0, convention: str = "exact",
           iterations: int | None = None, start=None, progress=False, keep: int = 0,
           threads: int | None = None, late=None, info: bool = False):
    """Simulated annealing over orders on the sparse, incremental evaluator.

    Moves swap two positions or move one vertex elsewhere, mostly within a window of
    nearby positions, drawn along a cursor that sweeps the order; each is scored from the
    state at its first changed position (reached through an undo log) and stops as soon
    as its outcome is decided, and one that provably changes nothing is not scored (see
    :mod:`alphagrad.evaluator`). The start orders (forward, reverse and Markowitz, or
    ``start``) are first each descended (:func:`descend`, side by side, for at most
    :data:`START_SHARE` of the budget): on large graphs they lie in basins of very
    different depth, and the cheapest start is often not in the deepest. Independent
    chains (one per thread, each with its own seed) anneal from the results, the first
    from the cheapest, the next from the next cheapest (and round again); the
    temperature decays geometrically over the budget, less the time kept for a final descent
    (:data:`DESCENT_SHARE`). Each chain then descends from its best order by moving one
    vertex at a time to a later position while that makes the order cheaper, every target
    of a vertex scored in one walk (:meth:`Evaluator.descend`): moves over long distances
    that annealing rarely draws. The cheapest order of any chain wins. It returns at once
    when the optimum is proven: a graph of at most :data:`EXACT_LIMIT` intermediates is
    solved exactly, and an order of zero cost cannot be beaten.

    Args:
      graph: the graph.
      budget_s: wall-clock seconds to spend from the call (the kernels' one-time
        compilation left out), a finite number > 0 (ignored when ``iterations`` is
        given, but checked all the same). Moves run in chunks sized
        from their measured speed, so the search ends within about 1% of the budget
        after the first chunk (the first chunk, a few moves, always runs); it ends
        sooner when the descent reaches an order no such move improves.
      seed: random seed, an int in ``[0, 2**32)``.
      convention: cost convention.
      iterations: a fixed number of moves (an int >= 0) instead of a time budget; each
        descent (of a start order, and at the end) then scores at most as many targets
        (deterministic).
      start: an order to start from instead of the baselines (anything
        :func:`resolve_order` accepts), or a list of such orders to descend and start
        from the cheapest result; one order is annealed as it is.
      progress: print the best cost as it improves (to stderr); or a function, called
        with it instead (from the chains' threads; e.g. to update a progress bar).
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
        If it costs less than :data:`LATE_MARGIN` of every chain's best order, the chain
        whose best is dearest takes it as its current and best order, at the
        temperature of the moment: a late start. Not with ``iterations`` (its result
        would depend on timing) nor with ``keep``.
      info: also return where the order comes from (see Returns).

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
    threads = default_threads() if threads is None else check_int(threads, "threads", 1)
    if late is not None and not callable(late):
        raise TypeError(f"late must be a function returning None or an order, not {type(late).__name__}")
    if not isinstance(info, bool):
        raise TypeError(f"info must be True or False, not {info!r}")
    if late is not None and (iterations is not None or keep):
        raise ValueError("late starts arrive on the clock: pass them with a time budget, without iterations or keep")
    n = len(starts[0])
    if keep > n:
        raise ValueError(f"keep = {keep} is more than the order's {n} vertices")
    if keep and len(starts) > 1:
        raise ValueError(f"keep = {keep} keeps the opening of one start order, but start is "
                         f"{len(starts)} different orders; pass one")
    prefix = starts[0][:keep]
    starts = [o[keep:].copy() for o in starts]

    def result(order, from_late=False):
        return (order, {"late": from_late}) if info else order

    if n - keep < 2:
        return result([int(v) for v in prefix] + [int(v) for v in starts[0]])
    if n <= EXACT_LIMIT and keep == 0:
        best_order, best = ev.optimal()
        _check_cap(best)
        return result(best_order)
    fixed = ev.cost(prefix)
    start_costs = [ev.cost(np.concatenate([prefix, o])) for o in starts]
    # false twins (that the kept opening does not touch) move as one unit, placed first
    # where the start order eliminates the first of them
    kept = set(prefix.tolist())
    groups = [g for g in graph.false_twins if not kept.intersection(g)]
    units = ev.units(groups)
    first = {v: g[0] for g in groups for v in g}

    def in_units(order):  # an order of the units: each group of twins as its first vertex
        return np.asarray(list(dict.fromkeys(first.get(int(v), int(v)) for v in order)), np.int64)

    grouped = [in_units(o) for o in starts]

    def cheapest(unit_orders, late_ones=()):
        """The cheapest of these orders, re-scored from scratch, and the start orders (one
        wins if grouping its twins made every annealed order dearer), as :func:`anneal`
        returns it; ``late_ones``: the indices of orders that descend from a late one."""
        finals = [np.concatenate([prefix, ev_.expand(o, *units)]) for o in unit_orders]
        costs = [ev.cost(o) for o in finals] + start_costs
        finals += [np.concatenate([prefix, o]) for o in starts]
        best = min(range(len(costs)), key=costs.__getitem__)
        _check_cap(costs[best])
        return result([int(v) for v in finals[best]], best in late_ones)

    m = len(grouped[0])
    if m < 2:
        return cheapest(grouped)
    evs = [ev] + [Evaluator(graph, convention, ev.tables) for _ in range(1, threads)]  # pools grow per chain
    lock, shown = threading.Lock(), [min(start_costs)]

    def on_best(cost):  # progress: the cheapest order of any chain, as it improves
        with lock:
            if cost < shown[0]:
                shown[0] = cost
                if callable(progress):
                    progress(cost)
                else:
                    print(f"anneal: {cost} multiplications after {time.perf_counter() - t_start:.1f}s",
                          file=sys.stderr)

    report = on_best if progress else None

    def descent(k, order, limit, deadline=None, stop=None):  # descends ``order`` in place on chain k's evaluator
        def step(first_, limit_):
            cost, moved, nxt, scored = evs[k].descend(order, first_, limit_, prefix=prefix, units=units)
            return fixed + cost, moved, nxt, scored
        _descend(step, m, limit, deadline, stop, report, max(0.01 * budget_s, MIN_CHUNK_S))

    def run_starts(k, stop):  # several starts: chain k descends starts k, k + threads, ...
        mine = grouped[k::threads]
        try:
            for i, order in enumerate(mine):
                if iterations is not None:
                    descent(k, order, iterations)
                else:
                    left = t_start + START_SHARE * budget_s - time.perf_counter()
                    descent(k, order, None, time.perf_counter() + left / (len(mine) - i), stop)
        except KeyboardInterrupt:
            if iterations is not None:
                raise
            halted.set()
            _interrupted(t_start, budget_s, stop)

    def arrived(k):
        """Polls ``late``; hands an order that arrived to the chain whose best is dearest
        (``handed[j]``), if :data:`LATE_MARGIN` of every chain's best is dearer; chain
        ``k`` then takes what it was handed."""
        with lock:
            order = late()
            if order is not None:
                unit_order = in_units(resolve_order(graph, order, convention))
                if evs[k].descend(unit_order, 0, 0, prefix=prefix, units=units)[0] < LATE_MARGIN * min(bests):
                    handed[max(range(threads), key=lambda i: (bests[i], i))] = unit_order
            mine, handed[k] = handed[k], None
        if mine is not None:
            chains[k] = (mine.copy(), mine)
            took[k] = True

    def chunk_of(k):
        def chunk(moves, t_from, t_to, chunk_seed):  # costs of whole orders: the rest's + the prefix's
            if late is not None:
                arrived(k)
            bests[k] = fixed + evs[k].anneal(chains[k][0], chains[k][1], moves, t_from, t_to, chunk_seed,
                                             prefix=prefix, units=units)[1]
            return bests[k]
        return chunk

    def temps(moves):  # a move changes a few eliminations: the temperatures scale with one
        return temperatures(chosen_cost, m, moves)

    def run(k, stop):  # one chain: annealing, then the descent from its best order
        _budgeted(chunk_of(k), anneal_s, iterations, seeds[k], temps, report, MIN_CHUNK_S, t_anneal, stop)
        if stop.is_set() or (iterations is None and descent_s == 0):  # interrupted, or no time kept
            return
        if iterations is not None:  # a fixed amount of work: Ctrl-C is raised, as in annealing
            descent(k, chains[k][1], iterations)
            return
        try:
            descent(k, chains[k][1], None, t_start + budget_s, stop)
        except KeyboardInterrupt:
            _interrupted(t_start, budget_s, stop)

    # compiles the kernels (or loads numba's cache), off the clock
    t_compile = time.perf_counter()
    ev.anneal(grouped[0].copy(), grouped[0].copy(), 0, 1.0, 1.0, seed, prefix=prefix, units=units)
    ev.descend(grouped[0].copy(), 0, 0, prefix=prefix, units=units)
    t_start += time.perf_counter() - t_compile
    descent_s = 0.0
    if iterations is None:
        pass_s = _pass_seconds(ev, grouped[0], prefix, units)
        descent_s = min(1.5 * pass_s, DESCENT_SHARE * budget_s) if pass_s <= 2 * DESCENT_SHARE * budget_s else 0.0
    halted = threading.Event()
    if len(grouped) > 1:
        _side_by_side(run_starts, min(threads, len(grouped)),
                      None if iterations is not None else lambda: _interrupted(t_start, budget_s))
        if halted.is_set():
            return cheapest(grouped)
    costs = [ev.descend(o, 0, 0, prefix=prefix, units=units)[0] for o in grouped]
    rank = sorted(range(len(grouped)), key=costs.__getitem__)
    ranked = [grouped[i] for i in rank]
    chosen_cost = fixed + min(costs)
    chains = [(ranked[k % len(ranked)].copy(), ranked[k % len(ranked)].copy()) for k in range(threads)]
    bests = [fixed + costs[rank[k % len(rank)]] for k in range(threads)]  # each chain's best cost
    handed = [None] * threads  # late orders handed to a chain
    took = [False] * threads  # the chains that took one
    seeds = [(seed + 7919 * k) % 2**32 for k in range(threads)]
    t_anneal = time.perf_counter()
    anneal_s = max(budget_s - (t_anneal - t_start) - descent_s, 1e-3)
    _side_by_side(run, threads, None if iterations is not None else lambda: _interrupted(t_start, budget_s))
    return cheapest([chain[1] for chain in chains] + grouped, [k for k in range(threads) if took[k]])


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
    state = {"cur": ev_.dense_order_cost(*args, order)}
    best_order = order.copy()
    t0 = max(1.0, 0.02 * state["cur"])
    t1 = max(0.05, 1e-4 * state["cur"])
    state["best"] = state["cur"]

    def chunk(moves, t_from, t_to, chunk_seed):
        state["cur"], state["best"] = ev_.dense_anneal(*args, order, state["cur"], best_order, state["best"],
                                                       t_from, t_to, moves, chunk_seed)
        return state["best"]

    def on_best(cost):
        print(f"anneal: {cost} multiplications", file=sys.stderr)

    best = _budgeted(chunk, budget_s, iterations, seed, lambda moves: (t0, t1), on_best if progress else None)
    _check_cap(best)
    return [int(v) for v in best_order]


BASELINES = {"fwd": forward, "forward": forward, "rev": reverse, "reverse": reverse,
             "markowitz": markowitz}


def by_name(name: str):
    """The baseline called ``name`` (fwd/forward, rev/reverse, markowitz)."""
    if name not in BASELINES:
        raise ValueError(f"unknown order {name!r}; use one of {sorted(BASELINES)} or a list of vertex ids")
    return BASELINES[name]


def resolve_order(graph: Graph, order, convention: str = "exact") -> list[int]:
    """An order for ``graph`` from whatever names one: the one door of
    :func:`alphagrad.cost`, :func:`alphagrad.jacobian` and :func:`anneal`'s ``start``.

    Args:
      graph: the graph.
      order: a baseline's name (:data:`BASELINES`; ``"markowitz"`` is computed in
        ``convention``), a sequence of intermediate vertex ids (list, tuple, range or
        1-D integer array), or a result object with ``.order`` (and optionally
        ``.fingerprint``, checked against the graph's), such as an ``OrderResult``.
      convention: the cost model a named Markowitz order is computed in.

    Raises:
      TypeError: ``order`` is not one of those (a set, floats, ...).
      ValueError: an unknown name, an order that is not a permutation of the
        intermediates, or a result computed for another graph.
    """
    check_graph(graph, "resolve_order")
    if isinstance(order, str):
        fn = by_name(order)
        return fn(graph, convention) if fn is markowitz else fn(graph)
    if hasattr(order, "order"):
        fingerprint = getattr(order, "fingerprint", None)
        if fingerprint is not None and fingerprint != graph.fingerprint:
            raise ValueError(
                f"this order was computed for graph {fingerprint}, but the function traces to "
                f"graph {graph.fingerprint} with these argument shapes; compute the order for "
                f"these shapes (e.g. agent.order(f, *args) with the same args)"
                + graph.branch_note()
            )
        order = order.order
    return graph.check_order(order)
