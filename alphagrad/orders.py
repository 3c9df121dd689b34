"""The classic elimination orders, each ``fn(graph, ...) -> list[int]``.

* :func:`forward` / :func:`reverse`: intermediates in computation order / its reverse
  (forward- and reverse-mode accumulation as vertex elimination).
* :func:`markowitz`: greedy minimal Markowitz degree, where the degree of a vertex is
  the multiplication cost of eliminating it now (Naumann, *The Art of Differentiating
  Computer Programs*, 2012, ch. 4; Griewank & Walter, sec. 10.1); ties go to the smallest id.
* :func:`optimal`: exact minimum by search over elimination states, for small graphs.
* :func:`by_name`: the order producer a user names (``"fwd"``, ``"rev"``, ``"markowitz"``).

They count with the compiled evaluator (:mod:`alphagrad.evaluator`): exact integers,
never wrapped. Local search from an order (descent, annealing) is :mod:`alphagrad.anneal`.
"""

from __future__ import annotations

import numpy as np

from alphagrad import rules as rl
from alphagrad.checks import check_graph, check_int
from alphagrad.evaluator import Evaluator
from alphagrad.graph import Graph


def forward(graph: Graph) -> list[int]:
    """Forward mode: eliminate intermediates in the order they are computed."""
    return list(check_graph(graph, "baselines.forward").intermediates)


def reverse(graph: Graph) -> list[int]:
    """Reverse mode: eliminate intermediates from the last computed to the first."""
    return list(reversed(check_graph(graph, "baselines.reverse").intermediates))


def markowitz(graph: Graph, convention: str = "exact") -> list[int]:
    """Greedy minimal Markowitz degree: repeatedly eliminate the vertex that is cheapest
    to eliminate now (smallest id on ties), counted exactly (compiled, int64; Python
    integers past 2**62); in ``convention="time"``, the one quickest to eliminate now
    (:mod:`alphagrad.time_model`)."""
    check_graph(graph, "baselines.markowitz")
    return Evaluator(graph, rl.check_convention(convention, time=True)).markowitz()


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
    rl.check_convention(convention, time=True)
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


#: The orders a user may name, by name.
BASELINES = {"fwd": forward, "forward": forward, "rev": reverse, "reverse": reverse,
             "markowitz": markowitz}


def by_name(name: str):
    """The baseline called ``name`` (fwd/forward, rev/reverse, markowitz)."""
    if name not in BASELINES:
        raise ValueError(f"unknown order {name!r}; use one of {sorted(BASELINES)} or a list of vertex ids")
    return BASELINES[name]


def classic(graph: Graph, convention: str = "exact", evaluator: Evaluator | None = None) -> dict:
    """The forward, reverse and Markowitz orders by name (what annealing starts from and
    what a learned order is measured against); ``evaluator``: one of ``graph`` in
    ``convention`` the caller already holds (Markowitz then reuses its tables)."""
    check_graph(graph, "orders.classic")
    ev = evaluator if evaluator is not None else Evaluator(graph, rl.check_convention(convention, time=True))
    if ev.graph.fingerprint != graph.fingerprint or ev.convention != convention:
        raise ValueError(f"the evaluator counts another graph or convention ({ev.convention!r}) "
                         f"than the one asked for ({convention!r})")
    return {"forward": forward(graph), "reverse": reverse(graph), "markowitz": ev.markowitz()}
