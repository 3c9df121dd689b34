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

import sys
import time

import jax
import jax.numpy as jnp
import numba
import numpy as np

from alphagrad import engine
from alphagrad.evaluator import Evaluator
from alphagrad.evaluator import _eliminate as _eliminate_nb
from alphagrad.evaluator import _order_cost as _order_cost_nb
from alphagrad.graph import Graph


def forward(graph: Graph) -> list[int]:
    """Forward mode: eliminate intermediates in the order they are computed."""
    return list(graph.intermediates)


def reverse(graph: Graph) -> list[int]:
    """Reverse mode: eliminate intermediates from the last computed to the first."""
    return list(reversed(graph.intermediates))


@jax.jit
def _markowitz_scan(state: engine.GameState):
    """Greedy minimal-cost elimination. Only the neighbours of an eliminated vertex change
    cost, so only they are recomputed (all vertices when there are many neighbours). Runs
    one step per padded vertex (steps past the last intermediate are no-ops), so it
    compiles once per padded size."""
    big = jnp.iinfo(jnp.int32).max
    some = 2 * engine.BLOCK

    def body(carry, _):
        state, costs = carry
        v = jnp.argmin(jnp.where(state.eliminable, costs, big))
        affected = (state.edges[:, v] != 0) | (state.edges[v, :] != 0)
        state, _ = engine.eliminate(state, v)

        def recompute_some(costs):
            idx = jnp.nonzero(affected, size=some, fill_value=costs.shape[0])[0]
            new = jax.vmap(lambda j: engine.vertex_cost(state, j))(jnp.minimum(idx, costs.shape[0] - 1))
            return costs.at[idx].set(new, mode="drop")

        costs = jax.lax.cond(affected.sum() <= some, recompute_some,
                             lambda costs: engine.vertex_costs(state), costs)
        return (state, costs), v

    steps = state.eliminable.shape[0]
    return jax.lax.scan(body, (state, engine.vertex_costs(state)), None, length=steps)[1]


def markowitz(graph: Graph, convention: str = "exact") -> list[int]:
    """Greedy minimal Markowitz degree: repeatedly eliminate the vertex that is cheapest
    to eliminate now (smallest id on ties). Runs on the JAX engine."""
    n = len(graph.intermediates)
    if n == 0:
        return []
    S = max(64, 1 << (engine.tables(graph).size - 1).bit_length())  # few sizes: few compiles
    with jax.ensure_compile_time_eval():  # concrete even when called inside a jit trace
        order = _markowitz_scan(engine.encode(graph, convention, num_structures=S))
        return [int(v) for v in np.asarray(order)[:n]]


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
        r = c + _solve(E2, inter, remaining, memo, compose, join, cost, preds, succs)
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
    """
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
    total = _solve(E, inter, remaining, memo, *tables, preds, succs)
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
    assert ev.cost(order) == total
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
        starts = [forward(graph), reverse(graph), ev.markowitz()]
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
