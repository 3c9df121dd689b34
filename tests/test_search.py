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
    state = jax.tree_util.tree_map(lambda x: jnp.stack([x, x]), engine.encode(graph))
    actions, weights, mults = search.play(
        None, jax.random.key(1), state, jnp.asarray([10.0, 10.0]),
        prior=search.uniform_prior, simulations=8,
    )
    n = len(graph.intermediates)
    for b in range(2):
        first = [int(a) for a in np.asarray(actions[:n, b])]
        assert sorted(first) == sorted(graph.intermediates)  # every move legal, none repeated
        assert int(np.asarray(mults[:, b]).sum()) == ag.cost(graph, first)
    np.testing.assert_allclose(np.asarray(weights[:n]).sum(-1), 1.0, rtol=1e-5)
    legal = np.zeros(weights.shape[-1], bool)
    legal[list(graph.intermediates)] = True
    assert (np.asarray(weights[0])[:, ~legal] == 0).all()


def test_unknown_prior_is_refused(graph):
    with pytest.raises(ValueError, match="unknown prior"):
        search.search_order(graph, prior="oracle")
