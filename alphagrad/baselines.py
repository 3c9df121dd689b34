"""Classic elimination orders, each ``fn(graph, ...) -> list[int]``.

* :func:`forward` / :func:`reverse`: intermediates in computation order / its reverse
  (forward- and reverse-mode accumulation as vertex elimination).
* :func:`markowitz`: greedy minimal Markowitz degree, where the degree of a vertex is
  the multiplication cost of eliminating it now (Naumann, *The Art of Differentiating
  Computer Programs*, 2012, ch. 4; Griewank & Walter, sec. 10.1); ties go to the smallest id.
* :func:`optimal`: exact minimum by search over elimination states, for small graphs.
* :func:`anneal`: simulated annealing over orders, the bar every learned method must
  clear at the same time budget.
"""

from __future__ import annotations

import functools
import hashlib
import math
import sys
import time

import jax
import jax.numpy as jnp
import numba
import numpy as np

from alphagrad import engine
from alphagrad.evaluator import Evaluator
from alphagrad.graph import Graph


def forward(graph: Graph) -> list[int]:
    """Forward mode: eliminate intermediates in the order they are computed."""
    return list(graph.intermediates)


def reverse(graph: Graph) -> list[int]:
    """Reverse mode: eliminate intermediates from the last computed to the first."""
    return list(reversed(graph.intermediates))


@functools.partial(jax.jit, static_argnums=1)
def _markowitz_scan(state: engine.GameState, steps: int):
    def body(state, _):
        costs = engine.vertex_costs(state)
        big = jnp.iinfo(jnp.int32).max
        v = jnp.argmin(jnp.where(state.eliminable, costs, big))
        state, _ = engine.eliminate(state, v)
        return state, v

    return jax.lax.scan(body, state, None, length=steps)[1]


def markowitz(graph: Graph, convention: str = "exact") -> list[int]:
    """Greedy minimal Markowitz degree: repeatedly eliminate the vertex that is cheapest
    to eliminate now (smallest id on ties). Runs on the JAX engine."""
    n = len(graph.intermediates)
    if n == 0:
        return []
    with jax.ensure_compile_time_eval():  # concrete even when called inside a jit trace
        order = _markowitz_scan(engine.encode(graph, convention), n)
        return [int(v) for v in np.asarray(order)]


def optimal(graph: Graph, convention: str = "exact", max_intermediates: int = 20,
            upper_bound: int | None = None) -> list[int]:
    """The cheapest order, by depth-first search with memoised elimination states.

    States are keyed by their full edge structure (not just the eliminated set), so the
    result is exact even where the structure of a fill-in edge depends on the order in
    which vertices were eliminated. Branches that already cost more than the best known
    order (at first the best baseline) are cut. Practical up to about 20 intermediates.

    Raises:
      ValueError: the graph has more than ``max_intermediates`` intermediates.
    """
    inter = list(graph.intermediates)
    if len(inter) > max_intermediates:
        raise ValueError(
            f"optimal search is exponential: the graph has {len(inter)} intermediates, more "
            f"than max_intermediates={max_intermediates}; raise it (time doubles per vertex) "
            f"or use baselines.anneal"
        )
    ev = Evaluator(graph, convention)
    best_order, best = None, math.inf
    for fn in (forward, reverse):
        o = fn(graph)
        c = ev.cost(o)
        if c < best:
            best_order, best = o, c
    if upper_bound is not None and upper_bound < best:
        best = upper_bound + 1  # allow finding an order of cost <= upper_bound
        best_order = None
    memo: dict = {}  # state key -> (cost to finish, best first vertex)

    def key(E, remaining):
        return hashlib.blake2b(E.tobytes(), digest_size=16).digest()

    sys.setrecursionlimit(max(1000, 10 * len(inter) + 100))

    def solve(E, remaining, budget):
        """Cheapest cost to eliminate `remaining` from E, if below `budget` (else inf)."""
        if not remaining:
            return 0, None
        k = key(E, remaining)
        hit = memo.get(k)
        if hit is not None:
            c, v, exact = hit
            if exact or c >= budget:
                return (c, v) if c < budget else (math.inf, None)
        best_c, best_v = math.inf, None
        for v in remaining:
            step = ev.vertex_cost(E, v)
            if step >= min(budget, best_c):
                continue
            E2 = E.copy()
            ev.step(E2, v)
            rest, _ = solve(E2, [u for u in remaining if u != v], min(budget, best_c) - step)
            if step + rest < best_c:
                best_c, best_v = step + rest, v
        # exact if a solution below budget was found; else a lower bound `budget`
        if best_c < budget:
            memo[k] = (best_c, best_v, True)
        else:
            memo[k] = (budget, None, False)
        return best_c, best_v

    E = ev.new_state()
    c, _ = solve(E, inter, best)
    if c == math.inf:
        if best_order is None:
            raise ValueError("no order is cheaper than upper_bound")
        return best_order
    order, remaining = [], list(inter)
    E = ev.new_state()
    while remaining:
        _, v, _ = memo[key(E, remaining)]
        order.append(v)
        ev.step(E, v)
        remaining.remove(v)
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


from alphagrad.evaluator import _order_cost as _order_cost_nb  # noqa: E402


def anneal(graph: Graph, budget_s: float = 10.0, seed: int = 0, convention: str = "exact",
           iterations: int | None = None, start=None, progress: bool = False) -> list[int]:
    """Simulated annealing over orders: swap and move-to moves, starting from the best of
    forward, reverse and Markowitz (or ``start``), temperature decaying geometrically.

    Args:
      graph: the graph.
      budget_s: wall-clock seconds to spend (ignored when ``iterations`` is given).
      seed: random seed.
      convention: cost convention.
      iterations: a fixed number of moves instead of a time budget (deterministic).
      start: an order to start from instead of the best baseline.
      progress: print the best cost as it improves (to stderr).

    Returns:
      The cheapest order seen.
    """
    ev = Evaluator(graph, convention)
    if start is None:
        starts = [forward(graph), reverse(graph), markowitz(graph, convention)]
        start = min(starts, key=ev.cost)
    order = np.asarray(graph.check_order(start), np.int64)
    if len(order) < 2:
        return [int(v) for v in order]
    cur = best = ev.cost(order)
    best_order = order.copy()
    t0 = max(1.0, 0.02 * cur)
    t1 = max(0.05, 1e-4 * cur)
    chunk = 2000
    args = (ev.edges, ev.compose, ev.join, ev.cost_table)
    if iterations is not None:
        cur, best = _anneal_chunk(*args, order, cur, best_order, best, t0, t1, iterations, seed)
        return [int(v) for v in best_order]
    t_start = time.perf_counter()
    k = 0
    while True:
        frac = (time.perf_counter() - t_start) / budget_s
        if frac >= 1:
            break
        lo = t0 * (t1 / t0) ** frac
        hi_frac = min(1.0, frac + 0.01)
        hi = t0 * (t1 / t0) ** hi_frac
        before = best
        cur, best = _anneal_chunk(*args, order, cur, best_order, best, lo, hi, chunk, seed * 1_000_003 + k)
        k += 1
        if progress and best < before:
            print(f"anneal: {best} multiplications after {time.perf_counter() - t_start:.1f}s", file=sys.stderr)
    return [int(v) for v in best_order]


BASELINES = {"fwd": forward, "forward": forward, "rev": reverse, "reverse": reverse,
             "markowitz": markowitz}


def by_name(name: str):
    """The baseline called ``name`` (fwd/forward, rev/reverse, markowitz)."""
    if name not in BASELINES:
        raise ValueError(f"unknown order {name!r}; use one of {sorted(BASELINES)} or a list of vertex ids")
    return BASELINES[name]
