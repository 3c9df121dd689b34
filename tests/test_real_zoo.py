"""Tests of the real-sized programs (alphagrad.examples.real, family ``large_real``).

Each program is checked against an independent computation (a float64 NumPy
re-implementation, a closed form, a known invariant or JAX's own convolution), its graph
size is checked against 500-5,000 intermediates, and its Jacobian (reverse and Markowitz
orders) against ``jax.jacrev`` with executed == predicted multiplications: by default on a
smaller size of the same code (a few loop iterations), at full size under ``-m slow``.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import alphagrad as ag
from alphagrad.examples import real
from alphagrad.interpreter import executed_multiplications, jacobian

EX = {e.name: e for e in real.EXAMPLES}


def _np(tree):
    return jax.tree_util.tree_map(lambda a: np.asarray(a, np.float64), tree)


def _run(e):
    """The program's output at its example arguments (compiled, loops kept as loops)."""
    return _np(jax.jit(e.fn)(*e.args))


def _rk4_np(f, y, dt):
    k1 = f(y)
    k2 = f([a + 0.5 * dt * k for a, k in zip(y, k1)])
    k3 = f([a + 0.5 * dt * k for a, k in zip(y, k2)])
    k4 = f([a + dt * k for a, k in zip(y, k3)])
    return [a + dt / 6 * (p + 2 * q + 2 * r + s) for a, p, q, r, s in zip(y, k1, k2, k3, k4)]


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


# ---------------------------------------------------------------------------
# registry
# ---------------------------------------------------------------------------


def test_programs_and_metadata():
    assert len(EX) >= 8 and list(EX) == list(real.BUILDERS)
    for name, e in EX.items():
        assert e.name == name and name.isidentifier()
        assert e.family == "large_real"
        assert len(e.description) > 40
        for a in jax.tree_util.tree_leaves(e.args):
            assert isinstance(a, jax.Array) and a.dtype == jnp.float32, name
    # a builder makes the same example again (fixed seeds)
    again = real.make_kalman()
    np.testing.assert_array_equal(np.asarray(again.args[0]), np.asarray(EX["KalmanFilter_Scan"].args[0]))


# ---------------------------------------------------------------------------
# the computations are what they say
# ---------------------------------------------------------------------------


def _nbody_energy(x, v, m):
    kinetic = 0.5 * np.sum(m * np.sum(v * v, axis=1))
    potential = 0.0
    for i in range(len(m)):
        for j in range(i + 1, len(m)):
            potential -= real.G_SOLAR * m[i] * m[j] / np.linalg.norm(x[i] - x[j])
    return kinetic + potential


def test_nbody_matches_numpy_rk4_and_conserves_energy_and_momentum():
    e = EX["NBodySolar_RK4"]
    x0, v0, m = _np(e.args)
    x, v = _run(e)

    def f(s):
        xs, vs = s
        a = np.zeros_like(xs)
        for i in range(len(m)):
            for j in range(len(m)):
                if i != j:
                    d = xs[j] - xs[i]
                    a[i] += real.G_SOLAR * m[j] * d / np.linalg.norm(d) ** 3
        return [vs, a]

    want = [x0, v0]
    for _ in range(12):
        want = _rk4_np(f, want, 0.002)
    np.testing.assert_allclose(x, want[0], atol=2e-6)
    np.testing.assert_allclose(v, want[1], atol=2e-5)
    # invariants of the exact flow, kept by RK4 up to its error and float32 rounding
    e0, e1 = _nbody_energy(x0, v0, m), _nbody_energy(x, v, m)
    assert abs(e1 - e0) <= 1e-5 * abs(e0)
    p0, p1 = (m[:, None] * v0).sum(0), (m[:, None] * v).sum(0)
    assert np.abs(p1 - p0).max() <= 1e-6 * np.sum(m[:, None] * np.abs(v0))
    # the planets moved along their orbits (0.024 yr): Earth by about 2 pi * 0.024 AU
    assert np.linalg.norm(x[3] - x0[3]) == pytest.approx(2 * math.pi * 0.024, rel=0.01)


def _chain_energy(theta, omega, kappa, g_over_l=9.81):
    return np.sum(0.5 * omega**2 + g_over_l * (1 - np.cos(theta))) + 0.5 * kappa * np.sum(np.diff(theta) ** 2)


def test_pendulum_chain_matches_numpy_rk4_and_dissipates():
    e = EX["PendulumChain_RK4"]
    theta0, omega0, kappa, gamma = _np(e.args)
    theta, omega = _run(e)

    def f(s):
        th, om = s
        acc = -9.81 * np.sin(th) - gamma * om
        for i in range(len(th)):
            if i > 0:
                acc[i] += kappa * (th[i - 1] - th[i])
            if i < len(th) - 1:
                acc[i] += kappa * (th[i + 1] - th[i])
        return [om, acc]

    want = [theta0, omega0]
    for _ in range(16):
        want = _rk4_np(f, want, 0.01)
    np.testing.assert_allclose(theta, want[0], atol=1e-5)
    np.testing.assert_allclose(omega, want[1], atol=1e-5)
    # damping removes energy; without it energy is conserved (RK4, dt = 0.01)
    assert _chain_energy(theta, omega, kappa) < _chain_energy(theta0, omega0, kappa) - 1e-3
    th, om = _np(real.pendulum_chain_rk4(*e.args[:3], jnp.float32(0.0)))
    e0 = _chain_energy(theta0, omega0, kappa)
    assert abs(_chain_energy(th, om, kappa) - e0) <= 1e-5 * e0


def test_transformer_matches_numpy():
    e = EX["TransformerStack"]
    x, p = _np(e.args)
    T, D = x.shape
    heads, dh = 2, D // 2

    def ln(a, g, b):
        mu = a.mean(-1, keepdims=True)
        return (a - mu) / np.sqrt(((a - mu) ** 2).mean(-1, keepdims=True) + 1e-5) * g + b

    for layer in range(p["wqkv"].shape[0]):
        w = {k: v[layer] for k, v in p.items()}
        qkv = ln(x, w["ln1_g"], w["ln1_b"]) @ w["wqkv"] + w["bqkv"]
        att = np.zeros((T, D))
        for h in range(heads):
            q, k, v = (qkv[:, j * D + h * dh: j * D + (h + 1) * dh] for j in range(3))
            for t in range(T):
                s = np.array([q[t] @ k[u] / math.sqrt(dh) for u in range(t + 1)])  # causal
                w_att = np.exp(s - s.max()) / np.exp(s - s.max()).sum()
                att[t, h * dh:(h + 1) * dh] = w_att @ v[: t + 1]
        h_ = x + att @ w["wo"] + w["bo"]
        z = ln(h_, w["ln2_g"], w["ln2_b"]) @ w["w1"] + w["b1"]
        gelu = 0.5 * z * (1 + np.tanh(math.sqrt(2 / math.pi) * (z + 0.044715 * z**3)))
        x = h_ + gelu @ w["w2"] + w["b2"]
    np.testing.assert_allclose(_run(e), x, rtol=1e-4, atol=1e-4)


def test_neural_ca_matches_lax_conv():
    e = EX["NeuralCA_Conv"]
    state, w1, b1, w2 = e.args
    C = state.shape[0]
    # the depthwise convolution of the perception is JAX's own
    sobel = np.stack([real.SOBEL_X, real.SOBEL_X.T])  # (2, 3, 3)
    kernel = jnp.asarray(np.tile(sobel, (C, 1, 1))[:, None], jnp.float32)  # (2C, 1, 3, 3), OIHW

    def step(s):
        grads = jax.lax.conv_general_dilated(s[None], kernel, (1, 1), "SAME", feature_group_count=C,
                                             precision="highest")[0]  # (2C, H, W): per channel (sx, sy)
        perception = jnp.concatenate([s, grads[0::2], grads[1::2]], axis=0)
        hidden = np.maximum(np.einsum("kc,chw->khw", w1, perception) + np.asarray(b1)[:, None, None], 0)
        return s + np.einsum("ck,khw->chw", w2, hidden)

    s = np.asarray(state, np.float64)
    for _ in range(16):
        s = np.asarray(step(jnp.asarray(s, jnp.float32)), np.float64)
    np.testing.assert_allclose(_run(e), s, rtol=1e-4, atol=1e-5)
    assert np.abs(_run(e) - np.asarray(state)).max() > 0.05  # the cells changed


def test_kalman_filter_equals_gaussian_conditioning_of_the_joint():
    """Filtered means E[x_t | z_1..t] and the log-likelihood, from the joint Gaussian of
    all states and measurements (no recursion)."""
    e = EX["KalmanFilter_Scan"]
    zs, x0, log_q, log_r = _np(e.args)
    means, loglik = _run(e)
    F, Q0, H = real.constant_velocity_model()
    T, Q, R = len(zs), math.exp(log_q) * Q0, math.exp(log_r) * np.eye(2)
    Fp = [np.linalg.matrix_power(F, k) for k in range(T + 1)]
    # x_k = F^k x_0 + sum_{j <= k} F^(k-j) w_j, x_0 ~ N(x0, I)
    mean_x = np.concatenate([Fp[k] @ x0 for k in range(1, T + 1)])
    cov_x = np.zeros((4 * T, 4 * T))
    for k in range(1, T + 1):
        for l in range(1, T + 1):
            c = Fp[k] @ Fp[l].T + sum(Fp[k - j] @ Q @ Fp[l - j].T for j in range(1, min(k, l) + 1))
            cov_x[4 * (k - 1):4 * k, 4 * (l - 1):4 * l] = c
    Hb = np.kron(np.eye(T), H)
    mean_z, cov_z = Hb @ mean_x, Hb @ cov_x @ Hb.T + np.kron(np.eye(T), R)
    z = zs.reshape(-1)
    r = z - mean_z
    want_ll = -0.5 * (r @ np.linalg.solve(cov_z, r) + np.linalg.slogdet(cov_z)[1] + len(z) * math.log(2 * math.pi))
    np.testing.assert_allclose(loglik, want_ll, rtol=1e-4)
    cov_xz = cov_x @ Hb.T
    for t in range(1, T + 1):
        k = 2 * t  # the first t measurements
        cond = mean_x + cov_xz[:, :k] @ np.linalg.solve(cov_z[:k, :k], r[:k])
        np.testing.assert_allclose(means[t - 1], cond[4 * (t - 1):4 * t], rtol=1e-3, atol=1e-4)


def test_burgers_matches_numpy_conserves_mass_and_keeps_the_maximum_principle():
    e = EX["BurgersRusanov"]
    u0, nu = _np(e.args)
    u = _run(e)
    n, dt = len(u0), 0.02
    dx = 2 * math.pi / n
    w = u0.copy()
    for _ in range(24):
        new = np.empty_like(w)
        for i in range(n):
            a, b, c = w[i - 1], w[i], w[(i + 1) % n]
            flux_r = 0.25 * (b * b + c * c) - 0.5 * max(abs(b), abs(c)) * (c - b)
            flux_l = 0.25 * (a * a + b * b) - 0.5 * max(abs(a), abs(b)) * (b - a)
            new[i] = b - dt / dx * (flux_r - flux_l) + nu * dt / dx**2 * (c - 2 * b + a)
        w = new
    np.testing.assert_allclose(u, w, atol=2e-5)
    # conservative flux form on a periodic grid: the total is conserved
    assert abs(u.sum() - u0.sum()) <= 1e-4 * np.abs(u0).sum()
    # a monotone scheme (CFL 0.23, diffusion number 0.06): no new extrema
    assert u.max() <= u0.max() + 1e-6 and u.min() >= u0.min() - 1e-6
    assert np.abs(u - u0).max() > 0.1


def _dh_np(theta, a, d, alpha):
    """Rot_z(theta) Trans_z(d) Trans_x(a) Rot_x(alpha) as a product of four matrices."""
    ct, st, ca, sa = math.cos(theta), math.sin(theta), math.cos(alpha), math.sin(alpha)
    rz = np.array([[ct, -st, 0, 0], [st, ct, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]])
    tz, tx = np.eye(4), np.eye(4)
    tz[2, 3], tx[0, 3] = d, a
    rx = np.array([[1, 0, 0, 0], [0, ca, -sa, 0], [0, sa, ca, 0], [0, 0, 0, 1]])
    return rz @ tz @ tx @ rx


def test_puma_trajectory_matches_dh_products():
    e = EX["PumaTrajectory"]
    q0, q1 = _np(e.args)
    got = _run(e)
    n = got.shape[0]

    def fk(q):
        T = np.eye(4)
        for th, (a, d, alpha) in zip(q, real.PUMA560_DH):
            T = T @ _dh_np(th, a, d, alpha)
        return T[:3, 3]

    for i, s in enumerate(np.linspace(0, 1, n)):
        np.testing.assert_allclose(got[i], fk(q0 + (3 * s**2 - 2 * s**3) * (q1 - q0)), atol=1e-5)
    np.testing.assert_allclose(got[0], fk(q0), atol=1e-5)
    np.testing.assert_allclose(got[-1], fk(q1), atol=1e-5)
    # the PUMA's reach: shoulder offset and the two links
    assert np.all(np.linalg.norm(got, axis=1) <= 0.4318 + math.hypot(0.0203, 0.4318) + 0.15005)


def test_gru_matches_numpy():
    e = EX["GRUSequence"]
    xs, h, W, U, b_in, b_hn = _np(e.args)
    H = len(h)
    want = []
    for x in xs:
        r = _sigmoid(W[:H] @ x + b_in[:H] + U[:H] @ h)
        z = _sigmoid(W[H:2 * H] @ x + b_in[H:2 * H] + U[H:2 * H] @ h)
        n = np.tanh(W[2 * H:] @ x + b_in[2 * H:] + r * (U[2 * H:] @ h + b_hn))
        h = (1 - z) * n + z * h
        want.append(h)
    np.testing.assert_allclose(_run(e), np.array(want), atol=1e-5)


def test_bundle_adjustment_matches_the_matrix_exponential_model():
    e = EX["BundleAdjustBAL"]
    cams, X = _np(e.args)
    cams_true, X_true, observed, noise = real.bal_scene(12, 16, 1008)
    want = np.stack([real.bal_project_reference(c, X) for c in cams]) - observed
    got = _run(e)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-3)  # pixels
    # at the true scene the residual is minus the observation noise
    at_truth = np.asarray(e.fn(jnp.asarray(cams_true, jnp.float32), jnp.asarray(X_true, jnp.float32)))
    np.testing.assert_allclose(at_truth, -noise, atol=5e-3)
    # Rodrigues' formula is a rotation
    w = jnp.asarray([0.1, -0.2, 0.3], jnp.float32)
    P = np.eye(3, dtype=np.float32)
    np.testing.assert_allclose(np.asarray(real.angle_axis_rotate(w, jnp.asarray(P))), real._rotation_matrix(
        np.asarray(w, np.float64)).T, atol=1e-6)


# ---------------------------------------------------------------------------
# graphs and Jacobians
# ---------------------------------------------------------------------------

#: Each program at a few loop iterations and small widths: the same code, fast to compile.
SMALL = {
    "NBodySolar_RK4": dict(steps=2),
    "PendulumChain_RK4": dict(n=4, steps=2),
    "TransformerStack": dict(layers=1, tokens=3, width=4),
    "NeuralCA_Conv": dict(channels=2, side=4, hidden=4, steps=2),
    "KalmanFilter_Scan": dict(steps=3),
    "BurgersRusanov": dict(n=8, steps=3),
    "PumaTrajectory": dict(samples=2),
    "GRUSequence": dict(steps=3, hidden=4, inputs=2),
    "BundleAdjustBAL": dict(cameras=2, points=3),
}


def test_small_sizes_cover_every_program():
    assert set(SMALL) == set(EX)


@pytest.mark.parametrize("name", list(EX))
def test_graph_has_500_to_5000_intermediates(name):
    e = EX[name]
    g = ag.trace(e.fn, *e.args)
    assert 500 <= len(g.intermediates) <= 5000, len(g.intermediates)
    # the loop is unrolled: the graph grows with the trip count of the same code
    small = real.BUILDERS[name](**SMALL[name])
    assert len(ag.trace(small.fn, *small.args).intermediates) < len(g.intermediates)


def _check_jacobian(e, orders=("rev", "markowitz")):
    """alphagrad's Jacobian in each order equals jax.jacrev's, and the interpreter executes
    exactly the multiplications the cost model predicts."""
    argnums = tuple(range(len(e.args)))
    g = ag.trace(e.fn, *e.args)
    want = _np(jax.jit(jax.jacrev(e.fn, argnums=argnums))(*e.args))
    for order in orders:
        got = _np(jax.jit(jacobian(e.fn, order, argnums=argnums))(*e.args))
        assert jax.tree_util.tree_structure(got) == jax.tree_util.tree_structure(want)
        for a, b in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
            assert a.shape == b.shape
            scale = max(1.0, float(np.abs(b).max(initial=0.0)))
            np.testing.assert_allclose(a / scale, b / scale, rtol=2e-4, atol=5e-5, err_msg=f"{e.name} {order}")
        assert executed_multiplications(e.fn, order, *e.args) == ag.cost(g, order), order


@pytest.mark.parametrize("name", list(EX))
def test_jacobian_small(name):
    _check_jacobian(real.BUILDERS[name](**SMALL[name]))


@pytest.mark.slow
@pytest.mark.parametrize("name", list(EX))
def test_jacobian_full_size(name):
    _check_jacobian(EX[name])


def test_a_build_holds_the_programs_out():
    """A dataset build puts the family in the held-out split, never in train/validation."""
    from data_gen import dataset as D

    config = D.BuildConfig(seed=0, num_random=0, validation_fraction=0.5, zoo=("KalmanFilter_Scan",))
    row, failure = D.compute_item(config, "zoo", "KalmanFilter_Scan")
    assert failure is None, failure
    assert (row["split"], row["family"], row["name"]) == ("heldout", "large_real", "KalmanFilter_Scan")
    g = ag.trace(EX["KalmanFilter_Scan"].fn, *EX["KalmanFilter_Scan"].args)
    assert row["graph_hash"] == g.fingerprint and row["num_intermediates"] == len(g.intermediates)
    assert row["cost_reverse"] == ag.cost(g, "rev")
