"""Baselines: forward, reverse, Markowitz, the exact optimum and annealing."""

import itertools

import jax.numpy as jnp
import pytest

import alphagrad as ag
from alphagrad import baselines
from alphagrad.evaluator import Evaluator


def small_scalar(x, y, z):
    a = jnp.sin(x * y)
    b = jnp.exp(a + z)
    c = a * b
    d = jnp.cos(c - x)
    return d * b, c + z * d


def small_tensor(x, W, v):
    h = jnp.tanh(W @ x)
    s = jnp.sum(h * v)
    g = jnp.exp(h) * s
    return g, jnp.sin(s) * x


SMALL = [
    (small_scalar, (0.3, 0.5, 0.7)),
    (small_tensor, (jnp.ones(3), jnp.ones((4, 3)) * 0.1, jnp.arange(4.0))),
]


def _brute_force(graph, convention):
    ev = Evaluator(graph, convention)
    return min(ev.cost(p) for p in itertools.permutations(graph.intermediates))


@pytest.mark.parametrize("f,args", SMALL)
@pytest.mark.parametrize("convention", ["exact", "published"])
def test_optimal_equals_brute_force_and_beats_every_baseline(f, args, convention):
    g = ag.trace(f, *args)
    assert 3 <= len(g.intermediates) <= 8
    best = _brute_force(g, convention)
    opt = baselines.optimal(g, convention)
    assert ag.cost(g, opt, convention=convention) == best
    for fn in (baselines.forward, baselines.reverse):
        assert best <= ag.cost(g, fn(g), convention=convention)
    assert best <= ag.cost(g, baselines.markowitz(g, convention), convention=convention)


def test_optimal_refuses_large_graphs_with_advice():
    ex = ag.examples.get("RoeFlux_1d")
    g = ag.trace(ex.fn, *ex.args)
    with pytest.raises(ValueError, match="max_intermediates.*anneal"):
        baselines.optimal(g)


def test_markowitz_is_greedy_and_deterministic():
    ex = ag.examples.get("HumanHeartDipole")
    g = ag.trace(ex.fn, *ex.args)
    o1, o2 = baselines.markowitz(g), baselines.markowitz(g)
    assert o1 == o2 and sorted(o1) == sorted(g.intermediates)
    # each step picks a vertex of minimal current cost, the smallest id on ties
    ev = Evaluator(g)
    E = ev.new_state()
    remaining = set(g.intermediates)
    for v in o1:
        costs = {u: ev.vertex_cost(E, u) for u in remaining}
        assert v == min(remaining, key=lambda u: (costs[u], u))
        ev.step(E, v)
        remaining.remove(v)


def test_anneal_never_worse_than_its_start_and_deterministic_with_iterations():
    ex = ag.examples.get("RoeFlux_1d")
    g = ag.trace(ex.fn, *ex.args)
    start = min((baselines.forward(g), baselines.reverse(g), baselines.markowitz(g)), key=lambda o: ag.cost(g, o))
    a1 = baselines.anneal(g, iterations=20000, seed=3)
    a2 = baselines.anneal(g, iterations=20000, seed=3)
    assert a1 == a2
    assert ag.cost(g, a1) <= ag.cost(g, start)
    assert sorted(a1) == sorted(g.intermediates)
    assert ag.cost(g, baselines.anneal(g, budget_s=0.5, seed=0)) <= ag.cost(g, start)


def test_compiled_markowitz_equals_the_engine_markowitz():
    from alphagrad.evaluator import Evaluator

    for name in ("RoeFlux_1d", "RobotArm_6DOF", "HumanHeartDipole", "MLP"):
        ex = ag.examples.get(name)
        g = ag.trace(ex.fn, *ex.args)
        assert Evaluator(g).markowitz() == baselines.markowitz(g), name
