"""Tests of the published benchmark zoo (alphagrad.examples.published)."""

from __future__ import annotations

import collections

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from alphagrad.examples import all_examples, get
from alphagrad.examples import published

NAMES = [
    "RoeFlux_1d",
    "RoeFlux_3d",
    "RobotArm_6DOF",
    "HumanHeartDipole",
    "PropaneCombustion",
    "BlackScholes_Jacobian",
    "MLP",
    "Encoder",
    "RandomF",
    "RandomG",
]

# "Trace: N primitives" of shared/benchmarks.md section 2 (RandomF / RandomG:
# the sizes of the reference's f and g, which our own functions imitate).
PUBLISHED_PRIMITIVES = {
    "RoeFlux_1d": 101,
    "RoeFlux_3d": 146,
    "RobotArm_6DOF": 114,
    "HumanHeartDipole": 86,
    "PropaneCombustion": 62,
    "BlackScholes_Jacobian": 134,
    "MLP": 39,
    "Encoder": 91,
    "RandomF": 80,
    "RandomG": 105,
}

# Counts of this implementation with jax 0.10.2 (pyproject pins jax>=0.10.2,<0.11):
# equations of jax.make_jaxpr(fn)(*args) with sub-jaxprs inlined, per primitive. Every
# task's total equals the published figure exactly; the published per-kind lists
# (shared/benchmarks.md section 2) write x**2 as "square" where this JAX writes integer_pow.
COUNTS_JAX_0_10_2 = {
    "RoeFlux_1d": {"abs": 3, "add": 19, "div": 14, "integer_pow": 3, "mul": 38, "sqrt": 8, "sub": 16},
    "RoeFlux_3d": {"add": 30, "broadcast_in_dim": 10, "concatenate": 3, "div": 12, "dot_general": 1,
                   "integer_pow": 5, "mul": 47, "reduce_sum": 3, "slice": 10, "sqrt": 7, "sub": 18},
    "RobotArm_6DOF": {"add": 21, "atan2": 3, "cos": 9, "integer_pow": 1, "mul": 60, "neg": 2, "sin": 9,
                      "sqrt": 1, "sub": 8},
    "HumanHeartDipole": {"add": 12, "integer_pow": 12, "mul": 40, "sub": 22},
    "PropaneCombustion": {"add": 11, "div": 3, "integer_pow": 2, "mul": 20, "sqrt": 6, "sub": 20},
    "BlackScholes_Jacobian": {"add": 13, "convert_element_type": 4, "div": 25, "erf": 2, "exp": 4,
                              "integer_pow": 8, "log": 1, "mul": 56, "neg": 13, "sqrt": 6, "sub": 2},
    "MLP": {"add": 4, "broadcast_in_dim": 7, "convert_element_type": 2, "div": 4, "dot_general": 2, "exp": 1,
            "integer_pow": 1, "log": 1, "mul": 2, "neg": 1, "reduce_max": 1, "reduce_sum": 4, "sqrt": 1,
            "stop_gradient": 1, "sub": 3, "tanh": 2, "transpose": 2},
    "Encoder": {"add": 10, "broadcast_in_dim": 13, "convert_element_type": 4, "div": 11, "dot_general": 12,
                "exp": 5, "integer_pow": 2, "log": 1, "mul": 5, "neg": 3, "reduce_max": 3, "reduce_sum": 8,
                "sqrt": 2, "stop_gradient": 3, "sub": 7, "transpose": 2},
    "RandomF": {"abs": 1, "acos": 1, "add": 7, "asinh": 2, "atan": 2, "cos": 2, "cosh": 2, "div": 2,
                "dot_general": 14, "exp": 1, "integer_pow": 5, "logistic": 2, "mul": 2, "neg": 2,
                "reduce_max": 1, "reduce_min": 1, "reduce_sum": 5, "reshape": 11, "sin": 1, "sinh": 1,
                "slice": 1, "sqrt": 5, "stop_gradient": 1, "sub": 6, "tanh": 1, "transpose": 1},
    "RandomG": {"add": 8, "asin": 1, "asinh": 1, "atan": 2, "atan2": 18, "atanh": 3, "cos": 2, "div": 15,
                "exp": 1, "log": 1, "mul": 11, "neg": 1, "pow": 18, "sin": 1, "sinh": 1, "square": 2,
                "sub": 17, "tan": 2},
}

EXAMPLES = {e.name: e for e in published.EXAMPLES}


def _leaves(tree):
    return jax.tree_util.tree_leaves(tree)


def _jaxpr_types():
    try:
        import jax.extend.core as jex_core

        return (jex_core.ClosedJaxpr, jex_core.Jaxpr)
    except (ImportError, AttributeError):  # older JAX
        return (jax.core.ClosedJaxpr, jax.core.Jaxpr)


def count_primitives(fn, args) -> collections.Counter:
    """Primitive equations of the traced ``fn(*args)``, sub-jaxprs inlined.

    An equation that carries sub-jaxprs (pjit, custom_jvp_call, ...) is replaced
    by the equations of those sub-jaxprs, recursively.
    """
    closed_t, jaxpr_t = _jaxpr_types()
    counts: collections.Counter = collections.Counter()

    def walk(jaxpr):
        for eqn in jaxpr.eqns:
            subs = [p for p in eqn.params.values() if isinstance(p, (closed_t, jaxpr_t))]
            if subs:
                for sub in subs:
                    walk(sub.jaxpr if isinstance(sub, closed_t) else sub)
            else:
                counts[eqn.primitive.name] += 1

    walk(jax.make_jaxpr(fn)(*args).jaxpr)
    return counts


# ---------------------------------------------------------------------------
# registry
# ---------------------------------------------------------------------------


def test_names_unique_and_in_order():
    names = [e.name for e in published.EXAMPLES]
    assert names == NAMES
    assert len(set(names)) == len(names)
    assert [e.name for e in all_examples()][: len(NAMES)] == NAMES  # the zoo follows
    assert get("MLP") is published.EXAMPLES[6]


def test_metadata():
    for e in published.EXAMPLES:
        assert e.family == "published"
        assert isinstance(e.description, str) and len(e.description) > 20
        assert isinstance(e.args, tuple)
        for a in _leaves(e.args):
            assert isinstance(a, jax.Array)
            assert a.dtype == jnp.float32


# ---------------------------------------------------------------------------
# every example runs, with finite values and Jacobians
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_runs_and_is_finite(name):
    e = EXAMPLES[name]
    out = e.fn(*e.args)
    leaves = _leaves(out)
    assert leaves
    for leaf in leaves:
        assert np.all(np.isfinite(np.asarray(leaf))), name


# Matrix tasks are faster jitted; the scalar ones (RandomG above all) compile
# slowly on CPU and run faster op by op.
_JIT_JACOBIAN = {"MLP", "Encoder", "RandomF"}


@pytest.mark.parametrize("name", NAMES)
def test_jacobian_is_finite(name):
    e = EXAMPLES[name]
    argnums = tuple(range(len(e.args)))
    jacobian = jax.jacrev(e.fn, argnums=argnums)
    if name in _JIT_JACOBIAN:
        jacobian = jax.jit(jacobian)
    jac = jacobian(*e.args)
    leaves = _leaves(jac)
    assert leaves
    for leaf in leaves:
        assert np.all(np.isfinite(np.asarray(leaf))), name


def test_output_shapes():
    shapes = lambda name: [np.shape(x) for x in _leaves(EXAMPLES[name].fn(*EXAMPLES[name].args))]  # noqa: E731
    assert shapes("RoeFlux_1d") == [()] * 3
    assert shapes("RoeFlux_3d") == [(1, 1), (1, 3), (1, 1)]
    assert shapes("RobotArm_6DOF") == [()] * 6
    assert shapes("HumanHeartDipole") == [()] * 8
    assert shapes("PropaneCombustion") == [()] * 11
    assert shapes("BlackScholes_Jacobian") == [(1,)] * 5
    assert shapes("MLP") == [(1,)]
    assert shapes("Encoder") == [(2,)]
    assert len(shapes("RandomF")) == 5
    assert shapes("RandomG") == [(1, 1)] * 20


# ---------------------------------------------------------------------------
# BlackScholes_Jacobian is the gradient of the Black-76 price
# ---------------------------------------------------------------------------


def _price_grad(S, K, r, sigma, T):
    grad = jax.grad(published.black_scholes_price, argnums=(0, 1, 2, 3, 4))
    return jax.vmap(grad)(S, K, r, sigma, T)


@pytest.mark.parametrize(
    "point",
    [
        None,  # the example arguments
        (1.2, 0.9, 0.05, 0.3, 0.7),
        (0.8, 1.1, 0.02, 0.5, 2.0),
    ],
)
def test_black_scholes_jacobian_equals_grad_of_price(point):
    e = EXAMPLES["BlackScholes_Jacobian"]
    args = e.args if point is None else tuple(jnp.asarray([v], jnp.float32) for v in point)
    got = e.fn(*args)
    want = _price_grad(*args)
    assert len(got) == 5
    for g, w in zip(got, want):
        assert g.shape == (1,)
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-5, atol=1e-6)


def test_black_scholes_price_is_black_scholes():
    # Black-76 on the forward F = S e^{rT} equals the Black-Scholes call price.
    from math import erf, exp, log, sqrt

    S, K, r, sigma, T = 1.2, 0.9, 0.05, 0.3, 0.7
    Phi = lambda z: 0.5 * (1.0 + erf(z / sqrt(2.0)))  # noqa: E731
    d1 = (log(S / K) + (r + sigma**2 / 2) * T) / (sigma * sqrt(T))
    d2 = d1 - sigma * sqrt(T)
    want = S * Phi(d1) - K * exp(-r * T) * Phi(d2)
    got = published.black_scholes_price(*(jnp.float32(v) for v in (S, K, r, sigma, T)))
    np.testing.assert_allclose(float(got), want, rtol=1e-5)


# ---------------------------------------------------------------------------
# independent float64 numpy references
# ---------------------------------------------------------------------------


def _roe_flux_1d_numpy(rhoL, mL, EL, rhoR, mR, ER, gamma=0.5):
    """Textbook Roe flux, with the reference's quirks that change the maths
    (gamma = 0.5 and lambda_- = |u|)."""

    def state(rho, m, E):
        v = m / rho
        p = (gamma - 1.0) * (E - 0.5 * m * m / rho)
        return v, p, (E + p) / rho, np.array([m, p + m * v, v * (p + E)])

    vL, pL, hL, FL = state(rhoL, mL, EL)
    vR, pR, hR, FR = state(rhoR, mR, ER)
    sL, sR = np.sqrt(rhoL), np.sqrt(rhoR)
    rho = sL * sR
    u = (sL * vL + sR * vR) / (sL + sR)
    h = (sL * hL + sR * hR) / (sL + sR)
    a = np.sqrt((gamma - 1.0) * (h - 0.5 * u * u))
    drho, dp, dv = rhoR - rhoL, pR - pL, vR - vL
    lam = np.abs([u + a, u, u])
    alpha0 = (drho - dp / a**2) * lam[1]
    alpha1 = (dv + dp / (rho * a)) * lam[0]
    alpha2 = (dv - dp / (rho * a)) * lam[2]
    c = rho / (2.0 * a)
    dF = (
        alpha0 * np.array([1.0, u, 0.5 * u * u])
        + c * alpha1 * np.array([1.0, u + a, h + u * a])
        - c * alpha2 * np.array([1.0, u - a, h - u * a])
    )
    return 0.5 * (FL + FR - dF)


def _human_heart_dipole_numpy(x):
    x1, x2, x3, x4, x5, x6, x7, x8 = x
    s = 1.0
    A = x5**2 - x7**2
    B = x6**2 - x8**2
    P = x5 * (x5**2 - 3 * x7**2)
    Q = x7 * (x7**2 - 3 * x5**2)
    R = x6 * (x6**2 - 3 * x8**2)
    S = x8 * (x8**2 - 3 * x6**2)
    return np.array(
        [
            x1 + x2 - s,
            x3 + x4 - s,
            x1 * x5 + x2 * x6 - x3 * x7 - x4 * x8 - s,
            x1 * x7 + x2 * x8 + x3 * x5 + x4 * x6 - s,
            x1 * A - 2 * x3 * x5 * x7 + x2 * B - 2 * x4 * x6 * x8 - s,
            x3 * A - 2 * x1 * x5 * x7 + x4 * B - 2 * x2 * x6 * x8 - s,
            x1 * P + x3 * Q + x2 * R + x4 * S - s,
            x3 * P - x1 * Q + x4 * R - x2 * S - s,
        ]
    )


def _as_f64(args):
    return [np.float64(np.asarray(a)) for a in args]


@pytest.mark.parametrize(
    "point",
    [None, (0.02, 0.05, 0.03, 0.015, 0.04, 0.02)],
)
def test_roe_flux_1d_matches_numpy(point):
    e = EXAMPLES["RoeFlux_1d"]
    args = e.args if point is None else tuple(jnp.float32(v) for v in point)
    got = np.array([float(v) for v in e.fn(*args)])
    want = _roe_flux_1d_numpy(*_as_f64(args))
    assert np.all(np.isfinite(want))
    np.testing.assert_allclose(got, want, rtol=1e-4)


@pytest.mark.parametrize("point", [None, (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8)])
def test_human_heart_dipole_matches_numpy(point):
    e = EXAMPLES["HumanHeartDipole"]
    args = e.args if point is None else tuple(jnp.float32(v) for v in point)
    got = np.array([float(v) for v in e.fn(*args)])
    want = _human_heart_dipole_numpy(_as_f64(args))
    np.testing.assert_allclose(got, want, rtol=1e-4)


# ---------------------------------------------------------------------------
# graph size
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_primitive_counts_are_exact(name):
    e = EXAMPLES[name]
    counts = count_primitives(e.fn, e.args)
    assert dict(counts) == COUNTS_JAX_0_10_2[name], f"jaxpr changed (jax {jax.__version__})"
    assert sum(counts.values()) == PUBLISHED_PRIMITIVES[name]


def test_intermediates_are_primitives_minus_outputs():
    # Intermediates = traced primitives - outputs (benchmarks.md section 1), exactly as published.
    published_intermediates = {
        "RoeFlux_1d": 98,
        "RoeFlux_3d": 143,
        "RobotArm_6DOF": 108,
        "HumanHeartDipole": 78,
        "PropaneCombustion": 51,
        "BlackScholes_Jacobian": 129,
        "MLP": 38,
        "Encoder": 90,
        "RandomF": 75,
        "RandomG": 85,
    }
    for name, want in published_intermediates.items():
        e = EXAMPLES[name]
        n = sum(count_primitives(e.fn, e.args).values())
        n_out = len(_leaves(jax.eval_shape(e.fn, *e.args)))
        assert n - n_out == want, (name, n - n_out, want)
