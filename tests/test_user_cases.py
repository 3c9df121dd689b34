"""Functions users bring (of the kind the AlphaGrad authors test with): attention, a
vmapped transformer layer, an MLP loss over a parameter pytree, a wide layer. Every
baseline order scores without overflow, and the Jacobian equals jax.jacrev's with
executed multiplications equal to the predicted ones."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import alphagrad as ag
from alphagrad.interpreter import executed_multiplications


def attention(x, Wq, Wk, Wv):
    q, k, v = x @ Wq, x @ Wk, x @ Wv
    scores = q @ k.T / jnp.sqrt(q.shape[-1])
    return jax.nn.softmax(scores, axis=-1) @ v


def layer_norm(x):
    mu = x.mean(-1, keepdims=True)
    return (x - mu) / jnp.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + 1e-5)


def transformer_layer(params, x):
    h = layer_norm(x + attention(x, params["Wq"], params["Wk"], params["Wv"]))
    return layer_norm(h + jax.nn.gelu(h @ params["W1"]) @ params["W2"])


def vmapped_transformer(params, xs):
    return jax.vmap(transformer_layer, in_axes=(None, 0))(params, xs)


def mlp_loss(params, x, y):
    h = x
    for W, b in params[:-1]:
        h = jax.nn.relu(h @ W + b)
    W, b = params[-1]
    logits = h @ W + b
    return -(jax.nn.log_softmax(logits) * y).sum()


def _params(rng, shapes):
    return jax.tree_util.tree_map(lambda s: jnp.asarray(rng.normal(size=s) * 0.3, jnp.float32), shapes,
                                  is_leaf=lambda s: isinstance(s, tuple) and all(isinstance(n, int) for n in s))


rng = np.random.default_rng(0)
D, T, F = 8, 5, 16
CASES = {
    "attention": (attention, (jnp.asarray(rng.normal(size=(T, D)), jnp.float32),
                              *_params(rng, [(D, D), (D, D), (D, D)]))),
    "vmapped_transformer": (vmapped_transformer, (
        _params(rng, {"Wq": (D, D), "Wk": (D, D), "Wv": (D, D), "W1": (D, F), "W2": (F, D)}),
        jnp.asarray(rng.normal(size=(2, T, D)), jnp.float32))),
    "mlp_loss": (mlp_loss, (
        [tuple(_params(rng, [(12, 16), (16,)])), tuple(_params(rng, [(16, 16), (16,)])),
         tuple(_params(rng, [(16, 4), (4,)]))],
        jnp.asarray(rng.normal(size=(3, 12)), jnp.float32),
        jax.nn.one_hot(jnp.array([0, 2, 1]), 4))),
    "tanh_matmul_40": (lambda A, B: jnp.tanh(A @ B), _params(rng, [(40, 40), (40, 40)])),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_user_functions_every_order_exact(name):
    f, args = CASES[name]
    g = ag.trace(f, *args)
    argnums = tuple(range(len(args)))
    want = jax.jacrev(f, argnums=argnums)(*args)
    for order in ["fwd", "rev", "markowitz", ag.baselines.anneal(g, iterations=200)]:
        c = ag.cost(g, order)
        assert isinstance(c, int) and c >= 0
        assert executed_multiplications(f, order, *args) == c
        got = jax.jit(ag.jacobian(f, order, argnums=argnums))(*args)
        for a, b in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=2e-4, atol=2e-5)


def test_tanh_matmul_40_costs_what_it_should():
    """The regression: "a single product costs more than 2**31 multiplications" was raised
    for this function, whose products are all small."""
    f, args = CASES["tanh_matmul_40"]
    g = ag.trace(f, *args)
    # tanh(A @ B): the matmul edges carry the other operand; tanh is elementwise. Reverse
    # mode multiplies the diagonal tanh' into each 40 x 40 x 40 matmul partial: 2 x 40^3.
    assert ag.cost(g, "rev") == 2 * 40**3
    assert ag.cost(g, "markowitz") == 2 * 40**3


def _two_block_transformer():
    T, D, H, F = 16, 64, 4, 128
    Dh = D // H

    def heads(y):
        return y.reshape(T, H, Dh).transpose(1, 0, 2)

    def block(p, x):
        q, k, v = heads(x @ p["Wq"]), heads(x @ p["Wk"]), heads(x @ p["Wv"])
        s = jax.nn.softmax(jnp.einsum("htd,hsd->hts", q, k) / jnp.sqrt(Dh), -1)
        o = jnp.einsum("hts,hsd->htd", s, v).transpose(1, 0, 2).reshape(T, D) @ p["Wo"]
        h = layer_norm(x + o)
        return layer_norm(h + jax.nn.gelu(h @ p["W1"]) @ p["W2"])

    def loss(params, x, readout):
        for p in params:
            x = block(p, x)
        return jnp.tanh(readout @ x.reshape(-1))

    shapes = {"Wq": (D, D), "Wk": (D, D), "Wv": (D, D), "Wo": (D, D), "W1": (D, F), "W2": (F, D)}
    params = [_params(rng, shapes) for _ in range(2)]
    return loss, (params, jnp.asarray(rng.normal(size=(T, D)), jnp.float32),
                  jnp.asarray(rng.normal(size=T * D) * 0.05, jnp.float32))


def test_two_block_transformer_gradient_costs_about_what_jacrev_does():
    """The gradient of a 2-block multi-head transformer whose reshapes split heads and
    flatten the output: its reshapes relabel digits, so the reverse order's compiled
    Jacobian needs at most 2x jacrev's flops and temporary memory (with the reshapes as
    0/1 values it needed 1.8x the flops and 44x the memory)."""
    loss, args = _two_block_transformer()

    def stats(fn):
        c = jax.jit(fn).lower(*args).compile()
        flops = c.cost_analysis()
        flops = (flops[0] if isinstance(flops, list) else flops)["flops"]
        return flops, c.memory_analysis().temp_size_in_bytes

    ours, theirs = stats(ag.jacobian(loss, "rev")), stats(jax.jacrev(loss))
    assert ours[0] <= 2 * theirs[0] and ours[1] <= 2 * theirs[1], (ours, theirs)
    got, want = jax.jit(ag.jacobian(loss, "rev"))(*args), jax.jacrev(loss)(*args)
    for a, b in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=2e-4, atol=2e-6)
    g = ag.trace(loss, *args)
    assert executed_multiplications(loss, "rev", *args) == ag.cost(g, "rev")
