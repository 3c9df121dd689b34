"""A compiled CPU evaluator of elimination orders, for local search.

It reads the same rule tables as the JAX engine (:mod:`alphagrad.rules`) and applies the
same step, looping only over the current predecessors and successors of the eliminated
vertex, so one full order of a ~150-vertex graph takes microseconds. A conformance test
(``tests/test_engine.py``) checks it against :func:`alphagrad.engine.eliminate` on every
benchmark graph and on random orders.
"""

from __future__ import annotations

import dataclasses

import numba
import numpy as np

from alphagrad import engine
from alphagrad.graph import Graph


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
    total = 0
    for a in range(np_):
        i = preds[a]
        b_id = E[i, v]
        for b in range(ns):
            k = succs[b]
            a_id = E[v, k]
            total += cost[a_id, b_id]
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
    total = 0
    for v in order:
        total += _eliminate(E, compose, join, cost, v, preds, succs)
    return total


@numba.njit(cache=True, nogil=True)
def _vertex_cost(E, cost, v):
    n = E.shape[0]
    total = 0
    for i in range(n):
        b_id = E[i, v]
        if b_id == 0:
            continue
        for k in range(n):
            a_id = E[v, k]
            if a_id != 0:
                total += cost[a_id, b_id]
    return total


@numba.njit(cache=True, nogil=True)
def _markowitz_nb(E0, compose, join, cost, inter):
    """Greedy minimal elimination cost, smallest id on ties; returns (order, total).

    The same rule as ``baselines.markowitz`` (a test checks they give the same order), for
    bulk work such as dataset builds, where compiling the JAX version for every padded
    graph size would dominate."""
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
    total = 0
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
        total += _eliminate(E, compose, join, cost, best, preds, succs)
        alive[best] = False
        order[step] = best
        # Only the rows/columns of the eliminated vertex's neighbours changed.
        for t in range(nt):
            u = touched[t]
            if alive[u]:
                costs[u] = _vertex_cost(E, cost, u)
    return order, total


@dataclasses.dataclass(frozen=True, eq=False)
class Evaluator:
    """Scores orders of one graph with the compiled evaluator.

    Attributes:
      graph: the graph.
      convention: the cost convention.
      rule_tables: the graph's rule tables if the caller keeps them (default: built once
        and cached by :func:`alphagrad.engine.tables`).
    """

    graph: Graph
    convention: str = "exact"
    rule_tables: object = None

    def __post_init__(self):
        T = self.rule_tables if self.rule_tables is not None else engine.tables(self.graph)
        V = self.graph.num_vertices
        E = np.zeros((V, V), np.int32)
        for e in self.graph.edges:
            E[e.src, e.dst] = T.index(e.structure)
        object.__setattr__(self, "edges", E)
        object.__setattr__(self, "compose", np.ascontiguousarray(T.compose))
        object.__setattr__(self, "join", np.ascontiguousarray(T.join))
        object.__setattr__(self, "cost_table", np.ascontiguousarray(T.cost[self.convention]))

    def cost(self, order) -> int:
        """Multiplications of a full order (not validated: see ``Graph.check_order``)."""
        return int(_order_cost(self.edges, self.compose, self.join, self.cost_table, np.asarray(order, np.int64)))

    def new_state(self) -> np.ndarray:
        return self.edges.copy()

    def step(self, E: np.ndarray, v: int) -> int:
        """Eliminates ``v`` from the edge matrix ``E`` in place; returns its cost."""
        n = E.shape[0]
        return int(_eliminate(E, self.compose, self.join, self.cost_table, int(v), np.empty(n, np.int64), np.empty(n, np.int64)))

    def markowitz(self) -> list[int]:
        """The order of :func:`alphagrad.baselines.markowitz` (a test checks they agree),
        without compiling the JAX engine for this graph's size."""
        inter = np.asarray(self.graph.intermediates, np.int64)
        if len(inter) == 0:
            return []
        return [int(v) for v in _markowitz_nb(self.edges, self.compose, self.join, self.cost_table, inter)[0]]

    def vertex_cost(self, E: np.ndarray, v: int) -> int:
        return int(_vertex_cost(E, self.cost_table, int(v)))
