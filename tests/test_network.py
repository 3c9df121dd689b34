"""The policy-value network: shapes, padding, and equivariance to renumbering vertices."""

import jax
import numpy as np

import alphagrad as ag
from alphagrad import engine
from alphagrad.network import NetworkConfig, PolicyValueNet
from alphagrad.network import observe as _observe

observe = jax.jit(_observe)


def _state():
    ex = ag.examples.get("HumanHeartDipole")
    return engine.encode(ag.trace(ex.fn, *ex.args))


def _permute(state, perm):
    """The same graph with vertex v renamed to perm[v] (padding included)."""
    inv = np.argsort(perm)
    return state.replace(
        edges=state.edges[inv][:, inv], eliminable=state.eliminable[inv],
        kinds=state.kinds[inv], sizes=state.sizes[inv],
    )


def test_network_is_equivariant_to_renumbering_and_ignores_padding():
    state = _state()
    net = PolicyValueNet(NetworkConfig(dim=32, heads=4, layers=2))
    obs = observe(state, 100.0)
    params = net.init(jax.random.key(0), *obs)
    apply = jax.jit(net.apply)
    logits, value = apply(params, *obs)
    V = state.edges.shape[0]
    assert logits.shape == (V,) and value.shape == ()
    perm = np.random.default_rng(0).permutation(V)
    logits_p, value_p = apply(params, *observe(_permute(state, perm), 100.0))
    np.testing.assert_allclose(np.asarray(logits_p)[perm], np.asarray(logits), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(float(value_p), float(value), rtol=1e-4, atol=1e-5)
    # more padding changes nothing for the real vertices
    g = ag.trace(ag.examples.get("HumanHeartDipole").fn, *ag.examples.get("HumanHeartDipole").args)
    bigger = engine.encode(g, num_vertices=V + 32)
    logits_b, value_b = apply(params, *observe(bigger, 100.0))
    np.testing.assert_allclose(np.asarray(logits_b)[:V], np.asarray(logits), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(float(value_b), float(value), rtol=1e-4, atol=1e-5)
