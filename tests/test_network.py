"""The policy-value network: shapes, padding, and equivariance to renumbering vertices,
with outputs that depend on the vertex and on the graph (a constant network, trivially
equivariant, fails)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import alphagrad as ag
from alphagrad import engine
from alphagrad.network import NUM_FEATURES, NetworkConfig, PolicyValueNet
from alphagrad.network import observe as _observe

observe = jax.jit(_observe)


def _graph(name="HumanHeartDipole"):
    ex = ag.examples.get(name)
    return ag.trace(ex.fn, *ex.args)


def _permute(state, perm):
    """The same graph with vertex v renamed to perm[v] (padding included)."""
    inv = np.argsort(perm)
    return state.replace(
        edges=state.edges[inv][:, inv], eliminable=state.eliminable[inv],
        kinds=state.kinds[inv], sizes=state.sizes[inv],
    )


def _check_network(apply):
    """Equivariant to renumbering, blind to padding, and not constant: the logits differ
    between vertices, and the outputs change with the graph."""
    g = _graph()
    state = engine.encode(g)
    V, n = state.edges.shape[0], g.num_vertices
    logits, value = apply(*observe(state, 100.0))
    assert logits.shape == (V,) and value.shape == ()
    real = np.asarray(logits)[:n]
    # not constant across vertices: many distinct logits, spread well beyond rounding
    assert len(np.unique(np.round(real, 3))) >= 10, "logits (nearly) equal for every vertex"
    assert real.std() > 1e-2
    perm = np.random.default_rng(0).permutation(V)
    assert (perm[:n] != np.arange(n)).any()
    logits_p, value_p = apply(*observe(_permute(state, perm), 100.0))
    np.testing.assert_allclose(np.asarray(logits_p)[perm], np.asarray(logits), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(float(value_p), float(value), rtol=1e-4, atol=1e-5)
    # more padding changes nothing for the real vertices
    bigger = engine.encode(g, num_vertices=V + 32)
    logits_b, value_b = apply(*observe(bigger, 100.0))
    np.testing.assert_allclose(np.asarray(logits_b)[:V], np.asarray(logits), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(float(value_b), float(value), rtol=1e-4, atol=1e-5)
    # the outputs depend on the input: another state of the same graph (one vertex
    # eliminated), and another graph padded to the same size
    after, _ = engine.eliminate(state, g.intermediates[len(g.intermediates) // 2])
    logits_e, value_e = apply(*observe(after, 100.0))
    assert np.abs(np.asarray(logits_e)[:n] - real).max() > 1e-3 and abs(float(value_e) - float(value)) > 1e-4
    other = engine.encode(_graph("PropaneCombustion"), num_vertices=V)
    logits_o, value_o = apply(*observe(other, 100.0))
    assert abs(float(value_o) - float(value)) > 1e-4
    assert np.abs(np.asarray(logits_o)[:n] - real).max() > 1e-3


def test_network_is_equivariant_to_renumbering_and_ignores_padding():
    state = engine.encode(_graph())
    net = PolicyValueNet(NetworkConfig(dim=32, heads=4, layers=2))
    params = net.init(jax.random.key(0), *observe(state, 100.0))
    apply = jax.jit(net.apply)
    _check_network(lambda *obs: apply(params, *obs))


@pytest.mark.parametrize("network", ["constant", "same logits for every vertex", "value blind to the graph"])
def test_the_check_rejects_degenerate_networks(network):
    """Each of these is equivariant and blind to padding; the check must still fail."""
    if network == "constant":
        apply = lambda tokens, edges, mask: (jnp.zeros(tokens.shape[0]), jnp.zeros(()))
    elif network == "same logits for every vertex":  # a value that reads the graph, logits that do not
        apply = lambda tokens, edges, mask: (jnp.ones(tokens.shape[0]), (tokens * mask[:, None]).sum())
    else:  # logits from each vertex's features (they pass), a constant value
        w = jnp.asarray(np.random.default_rng(0).normal(size=NUM_FEATURES))
        apply = lambda tokens, edges, mask: (tokens @ w, jnp.zeros(()))
    with pytest.raises(AssertionError):
        _check_network(apply)
