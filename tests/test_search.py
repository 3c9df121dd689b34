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
