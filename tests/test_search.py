"""Gumbel MuZero search over elimination orders with network-free priors (the control a
learned policy is measured against): complete, legal, never worse than the baselines."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import alphagrad as ag
from alphagrad import baselines, engine, search
from test_baselines import small_scalar


@pytest.fixture(scope="module")
def graph():
    return ag.trace(small_scalar, 0.3, 0.5, 0.7)


def test_search_order_is_a_valid_order_never_worse_than_the_baselines(graph):
    best = min(ag.cost(graph, o) for o in ("fwd", "rev", baselines.markowitz(graph)))
    for prior in ("uniform", "markowitz"):
        order = search.search_order(graph, simulations=8, prior=prior, seed=0)
        assert sorted(order) == sorted(graph.intermediates)
        assert ag.cost(graph, order) <= best


def test_play_moves_are_legal_and_targets_are_distributions(graph):
    state = search.batch_states([engine.encode(graph)] * 2)
    traj = search.play(None, jax.random.key(1), state, jnp.asarray([10.0, 10.0]),
                       prior=search.uniform_prior, simulations=8)
    n = len(graph.intermediates)
    for b, order in enumerate(search.orders(traj)):
        assert sorted(order) == sorted(graph.intermediates)  # every move legal, none repeated
        assert int(np.asarray(traj.mults[:, b]).sum()) == ag.cost(graph, order)
        assert np.asarray(traj.active[:, b]).sum() == n
    np.testing.assert_allclose(np.asarray(traj.weights[:n]).sum(-1), 1.0, rtol=1e-5)
    assert not np.asarray(traj.weights[n:]).any() and not np.asarray(traj.active[n:]).any()
    # the search's policy never puts weight on an eliminated or non-intermediate vertex
    weights, actions = np.asarray(traj.weights), np.asarray(traj.actions)
    for b in range(2):
        legal = np.zeros(weights.shape[-1], bool)
        legal[list(graph.intermediates)] = True
        for t in range(n):
            assert (weights[t, b][~legal] == 0).all() and legal[actions[t, b]]
            legal[actions[t, b]] = False


def test_network_free_priors(graph):
    """uniform: equal logits; markowitz: minus each vertex's elimination cost now, over
    temperature x scale (the evaluator's count); both value the state at 0."""
    from alphagrad.evaluator import Evaluator

    state = search.batch_states([engine.encode(graph)] * 2)
    scale = jnp.asarray([10.0, 40.0])
    logits, value = search.uniform_prior(None, state, scale)
    assert not np.asarray(logits).any() and not np.asarray(value).any()
    logits, value = search.markowitz_prior(None, state, scale)
    ev = Evaluator(graph)
    costs = np.asarray([ev.vertex_cost(ev.new_state(), v) for v in graph.intermediates], np.float64)
    assert costs.max() > costs.min()
    for b, s in enumerate([10.0, 40.0]):
        np.testing.assert_allclose(np.asarray(logits)[b, list(graph.intermediates)], -costs / (0.1 * s), rtol=1e-6)
    assert not np.asarray(value).any()
    assert set(search.PRIORS) == {"uniform", "markowitz"}


def test_unknown_prior_is_refused(graph):
    with pytest.raises(ValueError, match="unknown prior"):
        search.search_order(graph, prior="oracle")


def test_search_runs_on_a_40x40_matmul_and_counts_a_2e9_step_without_wrapping(graph):
    """The engine once refused any graph whose rule tables held a product past 2**31 (a
    40x40 matmul's closure does); a 1000x1000 layer's one step costs 2e9 multiplications,
    past int32: the trajectory's float32 count holds it exactly."""
    S = jax.ShapeDtypeStruct
    f = lambda A, B: jnp.tanh(A @ B)
    g40 = ag.trace(f, S((40, 40), jnp.float32), S((40, 40), jnp.float32))
    assert search.search_order(g40, simulations=8, prior="markowitz", seed=0) == list(g40.intermediates)
    g1000 = ag.trace(f, S((1000, 1000), jnp.float32), S((1000, 1000), jnp.float32))
    state = search.batch_states([engine.encode(g1000)] * 2)
    traj = search.play(None, jax.random.key(1), state, jnp.asarray([2e9, 2e9]),
                       prior=search.uniform_prior, simulations=8)
    assert traj.mults.dtype == jnp.float32
    assert np.asarray(traj.mults).sum(0).tolist() == [2e9, 2e9] == [float(ag.cost(g1000, "rev"))] * 2


@pytest.mark.parametrize("kwargs,error,message", [
    (dict(simulations=0), ValueError, "simulations must be an int >= 1"),
    (dict(simulations=8.0), TypeError, "simulations must be an int"),
    (dict(simulations=True), TypeError, "simulations must be an int"),
    (dict(seed=-1), ValueError, "seed must be an int"),
    (dict(seed=0.5), TypeError, "seed must be an int"),
    (dict(seed=2**32), ValueError, r"seed must be an int in \[0, 2\*\*32\)"),
    (dict(budget_s=float("nan")), ValueError, "budget_s must be a finite number of seconds > 0"),
    (dict(budget_s=-2), ValueError, "budget_s must be a finite number of seconds > 0"),
    (dict(budget_s=0), ValueError, "budget_s must be a finite number of seconds > 0"),
    (dict(budget_s="5"), TypeError, "budget_s is a number of seconds"),
    (dict(games=0), ValueError, "games must be an int >= 1"),
    (dict(games=2.5), TypeError, "games must be an int"),
    (dict(max_considered=0), ValueError, "max_considered must be an int >= 1"),
    (dict(convention="flops"), ValueError, "unknown cost convention 'flops'"),
    (dict(prior=None), ValueError, "unknown prior None"),
])
def test_search_order_refuses_bad_arguments_before_any_work(graph, kwargs, error, message):
    with pytest.raises(error, match=message):
        search.search_order(graph, **kwargs)


def test_search_order_given_a_function_says_trace_it_first():
    with pytest.raises(TypeError, match=r"trace it first: search\.search_order\(alphagrad\.trace"):
        search.search_order(small_scalar)
