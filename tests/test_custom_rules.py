"""Functions with custom derivative rules (jax.custom_jvp / jax.custom_vjp) are
differentiated by their rule, as jax.jacrev does, never through their implementation."""

import functools

import jax
import jax.numpy as jnp
import jax.scipy.special as jss
import numpy as np
import pytest

import alphagrad as ag
from alphagrad.interpreter import executed_multiplications

ORDERS = ("rev", "fwd", "markowitz")


def _check(f, *args, argnums=0, orders=ORDERS):
    """Every order gives jax.jacrev's Jacobian and executes what the cost model predicts."""
    want = jax.jacrev(f, argnums=argnums)(*args)
    graph = ag.trace(f, *args)
    for order in orders:
        got = ag.jacobian(f, order, argnums=argnums)(*args)
        assert jax.tree_util.tree_structure(got) == jax.tree_util.tree_structure(want)
        for a, b in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=2e-5, atol=1e-6)
        assert executed_multiplications(f, order, *args) == ag.cost(graph, order)


# Every function of jax.nn, jax.numpy and jax.scipy.special with a custom rule in jax
# 0.10 (found by scanning their jaxprs for custom_jvp_call / custom_vjp_call), at its
# kinks and at ordinary points where its derivative is finite.
KINKS = jnp.array([0.0, -3.0, 3.0, 6.0, 0.7, -1.3, 2.5, -0.2])
POSITIVE = jnp.array([0.3, 1.0, 2.5, 6.0, 0.7, 1.3, 4.0, 0.05])
NN = ["relu", "relu6", "softplus", "log_sigmoid", "mish", "hard_sigmoid", "hard_silu", "hard_swish"]


@pytest.mark.parametrize("name", NN)
def test_jax_nn_rules_at_kinks(name):
    _check(getattr(jax.nn, name), KINKS)


def test_relu_and_softplus_values_at_zero():
    """The regression: differentiating the implementation gave relu'(0) = 0.5, softplus'(0) = 0."""
    x = jnp.zeros(3)
    np.testing.assert_allclose(np.diag(ag.jacobian(jax.nn.relu, "rev")(x)), 0.0)
    np.testing.assert_allclose(np.diag(ag.jacobian(jax.nn.softplus, "rev")(x)), 0.5)
    np.testing.assert_allclose(ag.jacobian(lambda x: jax.nn.softplus(x).sum(), "rev")(x), 0.5)


@pytest.mark.parametrize(
    "f, args",
    [
        (jax.nn.log1mexp, (-POSITIVE,)),
        (jnp.sinc, (KINKS,)),
        (jnp.i0, (KINKS,)),
        (jnp.logaddexp, (KINKS, KINKS[::-1])),
        (jnp.logaddexp2, (KINKS, jnp.zeros(8))),
        (jss.logit, (jnp.linspace(0.1, 0.9, 8),)),
        (jss.log_ndtr, (KINKS,)),
        (jss.erfcx, (KINKS,)),
        (jss.dawsn, (KINKS,)),
        (jss.entr, (POSITIVE,)),
        (jss.exp1, (POSITIVE,)),
        (jss.expi, (POSITIVE,)),
        (jss.sici, (POSITIVE,)),
        (jss.fresnel, (KINKS,)),
        (jss.xlogy, (KINKS, POSITIVE)),
        (jss.xlog1py, (KINKS, POSITIVE)),
        (jss.rel_entr, (POSITIVE, POSITIVE[::-1])),
        (jss.kl_div, (POSITIVE, POSITIVE[::-1])),
        (jss.zeta, (POSITIVE + 1.5, POSITIVE)),
        (jss.poch, (POSITIVE, POSITIVE[::-1])),
        (jss.owens_t, (KINKS, POSITIVE)),
        (functools.partial(jss.expn, 2), (POSITIVE,)),
    ],
    ids=lambda v: getattr(v, "__name__", None) or getattr(getattr(v, "func", None), "__name__", ""),
)
def test_jax_numpy_and_scipy_rules(f, args):
    _check(f, *args, argnums=tuple(range(len(args))))


def test_rules_inside_a_network_layer():
    def layer(W, x):
        h = jax.nn.relu(W @ x)
        return jax.nn.logsumexp(jax.nn.softplus(h) * x[:3])

    W = jnp.arange(12.0).reshape(3, 4) - 6.0  # some pre-activations exactly 0
    x = jnp.array([0.5, 0.0, -1.0, 2.0])
    _check(layer, W, x, argnums=(0, 1))
    _check(jax.jit(layer), W, x, argnums=(0, 1))


# ------------------------------------------------------------------ user-defined rules
@jax.custom_jvp
def straight_through_round(x):
    return jnp.round(x)


straight_through_round.defjvp(lambda p, t: (straight_through_round(p[0]), t[0]))


@jax.custom_jvp
def spike(v):
    """Heaviside spike with the SuperSpike surrogate derivative 1 / (1 + 10|v|)^2."""
    return (v > 0).astype(v.dtype)


@spike.defjvp
def _spike_jvp(primals, tangents):
    (v,), (t,) = primals, tangents
    return spike(v), t / (1.0 + 10.0 * jnp.abs(v)) ** 2


def lif_step(v, i, w):
    """One leaky integrate-and-fire step (as in the AlphaGrad authors' tests)."""
    v = 0.9 * v + w @ i
    s = spike(v - 1.0)
    return v * (1.0 - s), s


@jax.custom_jvp
def stable_logsumexp(x):
    m = jax.lax.stop_gradient(x.max())
    return m + jnp.log(jnp.exp(x - m).sum())


@stable_logsumexp.defjvp
def _stable_logsumexp_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    y = stable_logsumexp(x)
    return y, (jnp.exp(x - y) * t).sum()


@jax.custom_vjp
def scaled_grad(x, y):
    return x * y


scaled_grad.defvjp(lambda x, y: (x * y, (x, y)), lambda r, g: (3.0 * g * r[1], g * r[0]))


@functools.partial(jax.custom_vjp, nondiff_argnums=(1,))
def clip_to(x, bound):
    return x


clip_to.defvjp(lambda x, bound: (x, None), lambda bound, r, g: (bound * g,))


@jax.custom_jvp
def two_outputs(x):
    return jnp.sin(x), jnp.cos(x)


@two_outputs.defjvp
def _two_outputs_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return two_outputs(x), (2.0 * t, jnp.zeros_like(t))


#: A fixed non-symmetric matrix: a rule's Jacobian and its transpose differ.
A = jnp.arange(16.0).reshape(4, 4) / 10.0 - jnp.eye(4)


@jax.custom_vjp
def reverse_cumsum_rule(x):
    """cumsum, whose backward rule is the reversed cumsum of the cotangent (its transpose)."""
    return jnp.cumsum(x)


reverse_cumsum_rule.defvjp(lambda x: (jnp.cumsum(x), None), lambda _, g: (jnp.cumsum(g[::-1])[::-1],))


@jax.custom_vjp
def apply_a(x):
    return A @ x


apply_a.defvjp(lambda x: (A @ x, None), lambda _, g: (A.T @ g,))


@jax.custom_vjp
def matvec(W, x):
    return W @ x


matvec.defvjp(lambda W, x: (W @ x, (W, x)), lambda r, g: (jnp.outer(g, r[1]), r[0].T @ g))


def test_custom_vjp_rules_with_non_symmetric_jacobians():
    """A backward rule maps cotangents: its Jacobian is the transpose of the function's.
    Elementwise rules are symmetric and cannot tell the two apart; these can."""
    x = jnp.array([0.3, -1.0, 2.0, 0.5])
    np.testing.assert_allclose(ag.jacobian(reverse_cumsum_rule, "rev")(x), np.tril(np.ones((4, 4))))
    np.testing.assert_allclose(ag.jacobian(apply_a, "fwd")(x), A)
    _check(reverse_cumsum_rule, x)
    _check(lambda x: jnp.sin(apply_a(jnp.cos(x))), x)
    _check(matvec, A[:3], x, argnums=(0, 1))


def test_straight_through_estimator():
    x = jnp.array([0.2, 1.7, -2.4])
    _check(lambda x: jnp.sin(straight_through_round(x) * x), x)
    np.testing.assert_allclose(ag.jacobian(straight_through_round)(x), np.eye(3))


def test_spiking_neuron_surrogate_gradient():
    v = jnp.array([0.5, 1.2, 0.95, 2.0, 0.0, 1.0])
    i = jnp.linspace(-1.0, 1.0, 7)
    w = jnp.linspace(-0.5, 0.5, 42).reshape(6, 7)
    _check(lif_step, v, i, w, argnums=(0, 1, 2))


def test_user_rules_jvp_vjp_nondiff_and_several_outputs():
    x = jnp.array([0.3, -1.0, 2.0, 0.0])
    _check(stable_logsumexp, x)
    _check(lambda x: jnp.tanh(scaled_grad(x, jnp.cos(x))), x)
    _check(scaled_grad, x, x[::-1], argnums=(0, 1))
    _check(lambda x: clip_to(jnp.sin(x), 0.5) * x, x)
    _check(lambda x: two_outputs(x)[0] + two_outputs(x * x)[1], x)
    _check(two_outputs, x)


def test_a_rule_that_is_not_linear_is_refused_clearly():
    @jax.custom_vjp
    def clip_gradient(x):
        return x

    clip_gradient.defvjp(lambda x: (x, None), lambda _, g: (jnp.clip(g, -1.0, 1.0),))
    with pytest.raises(ag.TraceError, match="custom_vjp rule of `clip_gradient`.*not a linear map"):
        ag.trace(lambda x: jnp.sin(clip_gradient(x)), jnp.ones(3))

    @jax.custom_jvp
    def squared_tangent(x):
        return x

    squared_tangent.defjvp(lambda p, t: (p[0], t[0] * t[0]))
    with pytest.raises(ag.TraceError, match="squared_tangent rule.*`mul`.*non-linearly"):
        ag.trace(squared_tangent, jnp.ones(3))


def test_a_rule_closing_over_a_traced_argument_is_refused_clearly():
    with pytest.raises(ag.TraceError, match="custom derivative rule of `expn`.*nondiff_argnums"):
        ag.trace(jss.expn, jnp.array([1.0, 2.0]), jnp.array([0.5, 1.0]))


def test_custom_rule_edges_keep_elementwise_sparsity():
    """relu on a 1,000 x 1,000 layer stays one diagonal edge, not a dense 10^12 block."""
    W = jax.ShapeDtypeStruct((1000, 1000), jnp.float32)
    g = ag.trace(lambda W, x: jax.nn.relu(W @ x).sum(), W, jax.ShapeDtypeStruct((1000,), jnp.float32))
    assert ag.cost(g, "rev") <= 2 * 1000 * 1000
