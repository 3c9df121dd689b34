"""Gumbel MuZero search over elimination orders with network-free priors."""

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
                       prior=search.uniform_prior, simulations=8, record=True)
    n = len(graph.intermediates)
    for b, order in enumerate(search.orders(traj)):
        assert sorted(order) == sorted(graph.intermediates)  # every move legal, none repeated
        assert int(np.asarray(traj.mults[:, b]).sum()) == ag.cost(graph, order)
        assert np.asarray(traj.active[:, b]).sum() == n
    np.testing.assert_allclose(np.asarray(traj.weights[:n]).sum(-1), 1.0, rtol=1e-5)
    legal = np.zeros(traj.weights.shape[-1], bool)
    legal[list(graph.intermediates)] = True
    assert (np.asarray(traj.weights[0])[:, ~legal] == 0).all()
    # the recorded observation before the first move is the initial state's
    from alphagrad.network import observe
    tokens, edges, _mask = observe(engine.encode(graph), 10.0)
    np.testing.assert_allclose(np.asarray(traj.tokens[0, 0]), np.asarray(tokens), rtol=1e-6)
    assert (np.asarray(traj.edges[0, 0]) == np.asarray(edges)).all()


def test_network_rollout_and_search_give_complete_orders(graph):
    from alphagrad.network import NetworkConfig, PolicyValueNet, observe
    net = PolicyValueNet(NetworkConfig(dim=16, heads=2, layers=1))
    params = net.init(jax.random.key(0), *observe(engine.encode(graph), 1.0))
    state = search.batch_states([engine.encode(graph)] * 2)
    scale = jnp.asarray([10.0, 10.0])
    prior = search.network_prior(net)
    greedy = search.rollout(params, jax.random.key(0), state, scale, prior=prior)
    sampled = search.rollout(params, jax.random.key(0), state, scale, 1.0, prior=prior)
    searched = search.play(params, jax.random.key(0), state, scale, prior=prior, simulations=4)
    for traj in (greedy, sampled, searched):
        for order in search.orders(traj):
            assert sorted(order) == sorted(graph.intermediates)
    a, b = search.orders(greedy)
    assert a == b  # greedy is deterministic


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
                       prior=search.uniform_prior, simulations=8, record=True)
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
