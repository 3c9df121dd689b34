"""The one door for scoring orders: what an order is (:func:`resolve_order`), what it
costs (:func:`cost`) and the bar every order is measured against (:func:`best_baseline`,
the cheapest of forward, reverse and Markowitz; also the network's cost scale).

All counts are exact integers from the compiled evaluator (:mod:`alphagrad.evaluator`):
int64, and Python integers where a count reaches 2**62; the time convention
(:mod:`alphagrad.time_model`) sums picoseconds on the same evaluator and returns seconds.
"""

from __future__ import annotations

from alphagrad import orders
from alphagrad import rules as rl
from alphagrad import time_model
from alphagrad.checks import check_graph
from alphagrad.evaluator import Evaluator
from alphagrad.graph import Graph


def resolve_order(graph: Graph, order, convention: str = "exact") -> list[int]:
    """An order for ``graph`` from whatever names one: the one door of
    :func:`cost`, :func:`alphagrad.jacobian` and :func:`alphagrad.anneal.anneal`'s ``start``.

    Args:
      graph: the graph.
      order: a baseline's name (:data:`alphagrad.orders.BASELINES`; ``"markowitz"`` is
        computed in ``convention``), a sequence of intermediate vertex ids (list, tuple,
        range or 1-D integer array), or a result object with ``.order`` (and optionally
        ``.fingerprint``, checked against the graph's), such as an ``OrderResult``.
      convention: the cost model a named Markowitz order is computed in.

    Raises:
      TypeError: ``order`` is not one of those (a set, floats, ...).
      ValueError: an unknown name, an order that is not a permutation of the
        intermediates, or a result computed for another graph.
    """
    check_graph(graph, "resolve_order")
    if isinstance(order, str):
        fn = orders.by_name(order)
        return fn(graph, convention) if fn is orders.markowitz else fn(graph)
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


def cost(graph: Graph, order, convention: str = "exact", platform: str | None = None) -> int | float:
    """Multiplications needed to accumulate the Jacobian of ``graph`` by ``order`` (exact
    integers at any size), or its modelled time: the one door for scoring an order.

    Args:
      graph: a traced graph (:func:`alphagrad.trace`).
      order: every intermediate vertex id exactly once (a list, tuple or 1-D integer
        array), ``"fwd"``, ``"rev"`` or ``"markowitz"``, or a result with ``.order`` (an
        ``OrderResult``), as :func:`alphagrad.jacobian` accepts (see :func:`resolve_order`).
      convention: ``"exact"`` (what :func:`alphagrad.jacobian` executes; identity and
        +-1 factors are free), ``"published"`` (the published AlphaGrad cost model) or
        ``"time"`` (:mod:`alphagrad.time_model`: the seconds the order's products add to a
        call of ``jax.jit(jax.vmap(J))`` at the model's batch on ``platform``, what every
        order pays alike left out; with a warning, 1 ns per multiplication where no model
        is fitted for it).
      platform: for ``"time"``, the platform (JAX's backend name; default
        ``jax.default_backend()``).

    Returns:
      A Python int, counted with the compiled evaluator in int64 (the same rule tables
      as the JAX engine) and with Python integers if a count reaches 2**62; for
      ``"time"``, a float in seconds (summed in int64 picoseconds).

    Raises:
      TypeError: ``graph`` is not a Graph (e.g. the function itself), or ``order`` is
        not a sequence of integers.
      ValueError: unknown convention, ``platform`` without ``"time"``, or ``order`` is not
        a permutation of the intermediates (or was computed for another graph).
    """
    check_graph(graph, "alphagrad.cost", "alphagrad.cost(alphagrad.trace(f, *args), order)")
    rl.check_convention(convention, time=True)
    timed = time_model.is_time(convention)
    if platform is not None and not timed:
        raise ValueError(f"platform= is for convention='time', not {convention!r}")
    if timed:
        convention = f"{time_model.TIME}:{time_model.platform_of(convention, platform)}"
    order = resolve_order(graph, order, convention)
    total = Evaluator(graph, convention).cost(order) if order else 0
    return total * time_model.UNIT_S if timed else total


def baseline_costs(graph: Graph, convention: str = "exact", evaluator: Evaluator | None = None) -> dict:
    """The costs of forward, reverse and Markowitz (:func:`alphagrad.orders.classic`), by
    name; ``evaluator``: one of ``graph`` in ``convention`` the caller already holds, so
    that no tables are built twice."""
    check_graph(graph, "scoring.baseline_costs")
    ev = evaluator if evaluator is not None else Evaluator(graph, rl.check_convention(convention, time=True))
    return {name: ev.cost(order) for name, order in orders.classic(graph, convention, ev).items()}


def best_baseline(graph: Graph, convention: str = "exact", evaluator: Evaluator | None = None) -> int:
    """The cost of the cheapest of forward, reverse and Markowitz: the bar a learned or
    searched order must clear, and the scale its costs are measured in (a ratio of 1 is
    the best baseline). ``evaluator`` as in :func:`baseline_costs`."""
    return min(baseline_costs(graph, convention, evaluator).values())
