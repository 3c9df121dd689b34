"""A compiled CPU evaluator of elimination orders, for local search.

It reads the same rule tables as the JAX engine (:mod:`alphagrad.rules`) and applies the
same step, looping only over the current predecessors and successors of the eliminated
vertex, so one full order of a ~150-vertex graph takes microseconds. A conformance test
(``tests/test_engine.py``) checks it against :func:`alphagrad.engine.eliminate` on every
benchmark graph and on random orders.

Counts are exact int64. Every sum saturates at :data:`alphagrad.rules.COST_CAP`
(2**62 - 1) instead of wrapping; :meth:`Evaluator.cost` recounts a saturated order with
Python integers (exact at any size) and :meth:`Evaluator.markowitz` reruns a saturated
greedy with them, so no path returns a wrapped or capped number.
"""

from __future__ import annotations

import dataclasses

import numba
import numpy as np

from alphagrad import rules as rl
from alphagrad.graph import Graph

_CAP = np.int64(rl.COST_CAP)


@numba.njit(cache=True, nogil=True, inline="always")
def _add(a, b):
    """``min(a + b, COST_CAP)`` for ``0 <= a, b <= COST_CAP`` (never wraps)."""
    s = a + b
    return s if s < _CAP else _CAP


@numba.njit(cache=True, nogil=True)
def _eliminate(E, compose, join, cost, v, preds, succs):
    """Eliminates v in place; returns its multiplications. preds/succs are scratch."""
    n = E.shape[0]
    np_ = 0
    ns = 0
    for i in range(n):
        if E[i, v] != 0:
            preds[np_] = i
            np_ += 1
        if E[v, i] != 0:
            succs[ns] = i
            ns += 1
    total = np.int64(0)
    for a in range(np_):
        i = preds[a]
        b_id = E[i, v]
        for b in range(ns):
            k = succs[b]
            a_id = E[v, k]
            total = _add(total, cost[a_id, b_id])
            E[i, k] = join[E[i, k], compose[a_id, b_id]]
    for a in range(np_):
        E[preds[a], v] = 0
    for b in range(ns):
        E[v, succs[b]] = 0
    return total


@numba.njit(cache=True, nogil=True)
def _order_cost(E0, compose, join, cost, order):
    E = E0.copy()
    n = E.shape[0]
    preds = np.empty(n, np.int64)
    succs = np.empty(n, np.int64)
    total = np.int64(0)
    for v in order:
        total = _add(total, _eliminate(E, compose, join, cost, v, preds, succs))
    return total


@numba.njit(cache=True, nogil=True)
def _vertex_cost(E, cost, v):
    n = E.shape[0]
    total = np.int64(0)
    for i in range(n):
        b_id = E[i, v]
        if b_id == 0:
            continue
        for k in range(n):
            a_id = E[v, k]
            if a_id != 0:
                total = _add(total, cost[a_id, b_id])
    return total


@numba.njit(cache=True, nogil=True)
def _markowitz_nb(E0, compose, join, cost, inter):
    """Greedy minimal elimination cost, smallest id on ties; returns (order, total).

    The kernel of ``baselines.markowitz`` (a test checks it against a greedy run on the
    JAX engine). Vertex costs saturate at ``COST_CAP``: while the total stays below it,
    every chosen vertex had an unsaturated minimal cost, so the order is exact; a total
    at the cap means some choice may have been a tie between saturated costs (see
    :meth:`Evaluator.markowitz`)."""
    E = E0.copy()
    n = E.shape[0]
    alive = np.zeros(n, np.bool_)
    costs = np.zeros(n, np.int64)
    for v in inter:
        alive[v] = True
    for v in inter:
        costs[v] = _vertex_cost(E, cost, v)
    preds = np.empty(n, np.int64)
    succs = np.empty(n, np.int64)
    touched = np.empty(2 * n, np.int64)
    order = np.empty(inter.shape[0], np.int64)
    total = np.int64(0)
    for step in range(inter.shape[0]):
        best = -1
        best_cost = 0
        for v in range(n):
            if alive[v] and (best < 0 or costs[v] < best_cost):
                best = v
                best_cost = costs[v]
        nt = 0
        for i in range(n):
            if E[i, best] != 0 or E[best, i] != 0:
                touched[nt] = i
                nt += 1
        total = _add(total, _eliminate(E, compose, join, cost, best, preds, succs))
        alive[best] = False
        order[step] = best
        # Only the rows/columns of the eliminated vertex's neighbours changed.
        for t in range(nt):
            u = touched[t]
            if alive[u]:
                costs[u] = _vertex_cost(E, cost, u)
    return order, total


def _neighbours(E: np.ndarray, v: int):
    return np.flatnonzero(E[:, v]), np.flatnonzero(E[v, :])


@dataclasses.dataclass(frozen=True, eq=False)
class Evaluator:
    """Scores orders of one graph with the compiled evaluator (exact integers).

    Attributes:
      graph: the graph.
      convention: the cost convention.
      rule_tables: the graph's rule tables if the caller keeps them (default: built once
        and cached by :func:`alphagrad.rules.tables`).
    """

    graph: Graph
    convention: str = "exact"
    rule_tables: object = None

    def __post_init__(self):
        if not isinstance(self.graph, Graph):
            raise TypeError(f"Evaluator needs an alphagrad.Graph (alphagrad.trace(f, *args)), got "
                            f"{type(self.graph).__name__}")
        rl.check_convention(self.convention)
        T = self.rule_tables if self.rule_tables is not None else rl.tables(self.graph)
        V = self.graph.num_vertices
        E = np.zeros((V, V), np.int32)
        for e in self.graph.edges:
            E[e.src, e.dst] = T.index(e.structure)
        object.__setattr__(self, "tables", T)
        object.__setattr__(self, "edges", E)
        object.__setattr__(self, "compose", np.ascontiguousarray(T.compose))
        object.__setattr__(self, "join", np.ascontiguousarray(T.join))
        object.__setattr__(self, "cost_table", np.ascontiguousarray(T.cost[self.convention]))

    def cost(self, order) -> int:
        """Multiplications of a full order (not validated: see ``Graph.check_order``),
        exact: int64 arithmetic, recounted with Python integers past ``COST_CAP``."""
        order = np.asarray(order, np.int64)
        total = int(_order_cost(self.edges, self.compose, self.join, self.cost_table, order))
        if total >= rl.COST_CAP:
            E = self.new_state()
            total = sum(self._exact_step(E, int(v)) for v in order)
        return total

    def new_state(self) -> np.ndarray:
        return self.edges.copy()

    def step(self, E: np.ndarray, v: int) -> int:
        """Eliminates ``v`` from the edge matrix ``E`` in place; returns its exact cost."""
        n, v = E.shape[0], int(v)
        col, row = E[:, v].copy(), E[v, :].copy()
        c = int(_eliminate(E, self.compose, self.join, self.cost_table, v, np.empty(n, np.int64),
                           np.empty(n, np.int64)))
        if c >= rl.COST_CAP:  # the same fill-in; recount the products exactly
            T, conv = self.tables, self.convention
            c = sum(T.exact_cost(conv, a, b) for b in col[col != 0] for a in row[row != 0])
        return c

    def markowitz(self) -> list[int]:
        """The order of :func:`alphagrad.baselines.markowitz`: repeatedly the vertex that is
        cheapest to eliminate now, the smallest id on ties (compiled; exact integers)."""
        inter = np.asarray(self.graph.intermediates, np.int64)
        if len(inter) == 0:
            return []
        order, total = _markowitz_nb(self.edges, self.compose, self.join, self.cost_table, inter)
        if total >= rl.COST_CAP:  # a choice may have compared saturated costs: redo exactly
            return self._exact_markowitz()
        return [int(v) for v in order]

    def vertex_cost(self, E: np.ndarray, v: int) -> int:
        """The exact cost of eliminating ``v`` from ``E`` now (0 if it has no edges)."""
        c = int(_vertex_cost(E, self.cost_table, int(v)))
        return c if c < rl.COST_CAP else self._exact_vertex_cost(E, int(v))

    # -------------------------------------------------- exact paths past COST_CAP (Python)
    def _exact_vertex_cost(self, E, v) -> int:
        preds, succs = _neighbours(E, v)
        T, c = self.tables, self.convention
        return sum(T.exact_cost(c, E[v, k], E[i, v]) for i in preds for k in succs)

    def _exact_step(self, E, v) -> int:
        preds, succs = _neighbours(E, v)
        T, c = self.tables, self.convention
        total = 0
        for i in preds:
            b = E[i, v]
            for k in succs:
                a = E[v, k]
                total += T.exact_cost(c, a, b)
                E[i, k] = self.join[E[i, k], self.compose[a, b]]
        E[preds, v] = 0
        E[v, succs] = 0
        return total

    def _exact_markowitz(self) -> list[int]:
        E = self.new_state()
        remaining = set(self.graph.intermediates)
        order = []
        while remaining:
            v = min(remaining, key=lambda u: (self._exact_vertex_cost(E, u), u))
            self._exact_step(E, v)
            remaining.remove(v)
            order.append(int(v))
        return order
