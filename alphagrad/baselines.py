"""Classic elimination orders, each ``fn(graph, ...) -> list[int]``, and the door that
turns anything a user may call an order into one.

* :func:`forward` / :func:`reverse`: intermediates in computation order / its reverse
  (forward- and reverse-mode accumulation as vertex elimination).
* :func:`markowitz`: greedy minimal Markowitz degree, where the degree of a vertex is
  the multiplication cost of eliminating it now (Naumann, *The Art of Differentiating
  Computer Programs*, 2012, ch. 4; Griewank & Walter, sec. 10.1); ties go to the smallest id.
* :func:`optimal`: exact minimum by search over elimination states, for small graphs.
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
import sys
import time

import numba
import numpy as np

from alphagrad import rules as rl
from alphagrad.evaluator import Evaluator
from alphagrad.evaluator import _add as _add_nb
from alphagrad.evaluator import _eliminate as _eliminate_nb
from alphagrad.evaluator import _order_cost as _order_cost_nb
from alphagrad.graph import Graph

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


@numba.njit(cache=True, nogil=True)
def _state_key(E):
    h = np.uint64(14695981039346656037)
    for x in E.ravel():
        h = (h ^ np.uint64(x + 1)) * np.uint64(1099511628211)
    return np.int64(h)


@numba.njit(cache=True, nogil=True)
def _solve(E, inter, remaining, memo, compose, join, cost, preds, succs):
    """Cheapest cost of eliminating the `remaining` intermediates from state E."""
    key = _state_key(E)
    if key in memo:
        return memo[key]
    best = np.int64(-1)
    for idx in range(inter.shape[0]):
        if not remaining[idx]:
            continue
        E2 = E.copy()
        c = _eliminate_nb(E2, compose, join, cost, inter[idx], preds, succs)
        remaining[idx] = False
        r = _add_nb(c, _solve(E2, inter, remaining, memo, compose, join, cost, preds, succs))
        remaining[idx] = True
        if best < 0 or r < best:
            best = r
    if best < 0:
        best = 0
    memo[key] = best
    return best


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
    memo = numba.typed.Dict.empty(numba.types.int64, numba.types.int64)
    n = graph.num_vertices
    preds, succs = np.empty(n, np.int64), np.empty(n, np.int64)
    tables = (ev.compose, ev.join, ev.cost_table)
    remaining = np.ones(len(inter), np.bool_)
    E = ev.new_state()
    total = int(_solve(E, inter, remaining, memo, *tables, preds, succs))
    if total >= rl.COST_CAP:
        raise OverflowError(
            f"every order of this graph costs at least {rl.COST_CAP} (2**62 - 1) multiplications, "
            f"beyond what optimal's 64-bit search can rank; score orders with alphagrad.cost, "
            f"which counts exactly at any size"
        )
    order = []
    while remaining.any():
        target = memo[_state_key(E)]
        for idx in np.flatnonzero(remaining):
            E2 = E.copy()
            c = ev.step(E2, inter[idx])
            rest = memo.get(_state_key(E2), 0) if remaining.sum() > 1 else 0
            if c + rest == target:
                order.append(int(inter[idx]))
                remaining[idx] = False
                E = E2
                break
        else:  # pragma: no cover - would mean an inconsistent memo
            raise RuntimeError("optimal: could not reconstruct the order")
    if ev.cost(order) != total:  # pragma: no cover - would mean an inconsistent memo
        raise RuntimeError("optimal: the reconstructed order does not cost the optimum")
    return order


@numba.njit(cache=True, nogil=True)
def _anneal_chunk(E0, compose, join, cost, order, cur, best_order, best, t0, t1, iters, seed):
    np.random.seed(seed)
    n = order.shape[0]
    cand = order.copy()
    for it in range(iters):
        temp = t0 * (t1 / t0) ** (it / max(iters - 1, 1))
        cand[:] = order
        i = np.random.randint(n)
        j = np.random.randint(n)
        if i == j:
            continue
        if np.random.random() < 0.5:
            cand[i], cand[j] = order[j], order[i]
        else:  # move element i to position j
            x = order[i]
            if i < j:
                cand[i:j] = order[i + 1:j + 1]
            else:
                cand[j + 1:i + 1] = order[j:i]
            cand[j] = x
        c = _order_cost_nb(E0, compose, join, cost, cand)
        if c <= cur or np.random.random() < np.exp((cur - c) / max(temp, 1e-9)):
            order[:] = cand
            cur = c
            if c < best:
                best = c
                best_order[:] = cand
    return cur, best


def anneal(graph: Graph, budget_s: float = 10.0, seed: int = 0, convention: str = "exact",
           iterations: int | None = None, start=None, progress: bool = False) -> list[int]:
    """Simulated annealing over orders: swap and move-to moves, starting from the best of
    forward, reverse and Markowitz (or ``start``), temperature decaying geometrically.

    Args:
      graph: the graph.
      budget_s: wall-clock seconds to spend, a finite number > 0 (ignored when
        ``iterations`` is given, but checked all the same). Moves run in chunks sized
        from their measured speed, so the search ends within about 1% of the budget
        after the first chunk (the first chunk, a few moves, always runs).
      seed: random seed, an int in ``[0, 2**32)``.
      convention: cost convention.
      iterations: a fixed number of moves (an int >= 0) instead of a time budget
        (deterministic).
      start: an order to start from instead of the best baseline (anything
        :func:`resolve_order` accepts).
      progress: print the best cost as it improves (to stderr).

    Returns:
      The cheapest order seen.

    Raises:
      TypeError, ValueError: an argument is not what is described above.
      OverflowError: the cheapest order seen costs 2**62 multiplications or more, so
        annealing (which compares int64 counts) could not rank what it saw.
    """
    check_graph(graph, "baselines.anneal")
    budget_s = check_budget(budget_s)
    seed = check_seed(seed)
    rl.check_convention(convention)
    if iterations is not None:
        iterations = check_int(iterations, "iterations", 0)
    ev = Evaluator(graph, convention)
    if start is None:
        starts = [forward(graph), reverse(graph), ev.markowitz()]
        start = min(starts, key=ev.cost)
    order = np.asarray(resolve_order(graph, start, convention), np.int64)
    if len(order) < 2:
        return [int(v) for v in order]
    args = (ev.edges, ev.compose, ev.join, ev.cost_table)
    cur = best = _order_cost_nb(*args, order)  # saturated int64, what the kernel compares
    best_order = order.copy()
    t0 = max(1.0, 0.02 * cur)
    t1 = max(0.05, 1e-4 * cur)
    if iterations is not None:
        cur, best = _anneal_chunk(*args, order, cur, best_order, best, t0, t1, iterations, seed)
    else:
        t_start = time.perf_counter()
        k, chunk = 0, 16
        while True:
            elapsed = time.perf_counter() - t_start
            frac = elapsed / budget_s
            if frac >= 1:
                break
            lo = t0 * (t1 / t0) ** frac
            hi = t0 * (t1 / t0) ** min(1.0, frac + 0.01)
            before = best
            t_chunk = time.perf_counter()
            cur, best = _anneal_chunk(*args, order, cur, best_order, best, lo, hi, chunk,
                                      (seed * 1_000_003 + k) % 2**32)
            per_move = max(time.perf_counter() - t_chunk, 1e-9) / chunk
            # the next chunk takes about 1% of the budget, and never runs past its end
            left = budget_s - (time.perf_counter() - t_start)
            chunk = int(min(max(min(0.01 * budget_s, left) / per_move, 1), 1_000_000))
            k += 1
            if progress and best < before:
                print(f"anneal: {best} multiplications after {time.perf_counter() - t_start:.1f}s",
                      file=sys.stderr)
    if best >= rl.COST_CAP:
        raise OverflowError(
            f"every order annealing saw costs at least {rl.COST_CAP} (2**62 - 1) multiplications, "
            f"beyond what its 64-bit comparisons can rank; score orders with alphagrad.cost, "
            f"which counts exactly at any size"
        )
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
            )
        order = order.order
    return graph.check_order(order)
