"""The scoring door: cost, resolve_order and the best baseline, one answer wherever asked."""

import jax.numpy as jnp
import pytest

import alphagrad as ag
from alphagrad import scoring
from alphagrad.evaluator import Evaluator


def f(x, y):
    a = jnp.sin(x * y)
    b = jnp.exp(a + y)
    return jnp.cos(a * b - x), a / b


@pytest.fixture(scope="module")
def graph():
    return ag.trace(f, 0.3, 0.5)


def test_the_best_baseline_is_the_cheapest_of_forward_reverse_and_markowitz(graph):
    for convention in ("exact", "published"):
        costs = {o: ag.cost(graph, o, convention) for o in ("forward", "reverse", "markowitz")}
        assert scoring.baseline_costs(graph, convention) == costs
        assert scoring.best_baseline(graph, convention) == min(costs.values())
        ev = Evaluator(graph, convention)  # a caller's evaluator is reused
        assert scoring.best_baseline(graph, convention, ev) == min(costs.values())
    assert ag.cost is scoring.cost


def test_the_best_baseline_refuses_another_graphs_or_conventions_evaluator(graph):
    with pytest.raises(ValueError, match="another graph or convention"):
        scoring.best_baseline(graph, "published", Evaluator(graph, "exact"))
    other = ag.trace(lambda x: jnp.sin(jnp.exp(x)) * x, 0.3)
    with pytest.raises(ValueError, match="another graph or convention"):
        scoring.best_baseline(graph, "exact", Evaluator(other, "exact"))
    with pytest.raises(TypeError, match="trace it first"):
        scoring.best_baseline(f)
