"""Real-sized programs (family ``large_real``): JAX code as users write it, with loops.

Each program runs a time-stepping loop (``lax.fori_loop``), a sequence scan
(``lax.scan``) or a map over cameras (``lax.map``) with a static trip count, and traces
to 500-5,000 intermediate vertices once the loop is unrolled. Nothing here is
pre-unrolled: the loops are the ones a user would write. Where a JAX primitive has no
Jacobian rule, the program uses what a user reasonably would instead: convolutions are
sums of shifted slices times weights (``conv_general_dilated`` has no rule), and a 2x2
inverse is written by its adjugate (``linalg.solve`` has none).

Every program has a builder ``make_<name>(**sizes)`` returning its :class:`Example`
(fixed NumPy seeds, float32 arguments); :data:`EXAMPLES` holds the default sizes and
:data:`BUILDERS` maps each name to its builder (the tests build smaller sizes of the
same code). Reference computations live in ``tests/test_real_zoo.py``.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from alphagrad.examples import Example

FAMILY = "large_real"
_F32 = jnp.float32


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def _f32(a) -> jax.Array:
    return jnp.asarray(np.asarray(a, dtype=np.float32))


def _rk4(f, y, dt):
    """One classical Runge-Kutta step of ``y' = f(y)`` for a pytree state ``y``."""
    add = lambda a, k, h: jax.tree_util.tree_map(lambda u, v: u + h * v, a, k)
    k1 = f(y)
    k2 = f(add(y, k1, 0.5 * dt))
    k3 = f(add(y, k2, 0.5 * dt))
    k4 = f(add(y, k3, dt))
    return jax.tree_util.tree_map(
        lambda a, p, q, r, s: a + (dt / 6.0) * (p + 2.0 * q + 2.0 * r + s), y, k1, k2, k3, k4)


# ---------------------------------------------------------------------------
# 1. N-body: the Sun and the four inner planets
# ---------------------------------------------------------------------------

#: Gravitational constant in AU^3 / (solar mass * year^2).
G_SOLAR = 4.0 * math.pi**2
#: Sun, Mercury, Venus, Earth, Mars: masses (solar masses), semi-major axes (AU).
INNER_SOLAR_MASSES = (1.0, 1.660e-7, 2.448e-6, 3.003e-6, 3.227e-7)
INNER_SOLAR_AXES = (0.0, 0.387, 0.723, 1.000, 1.524)


def nbody_accelerations(x, m):
    """Newtonian accelerations ``G sum_j m_j (x_j - x_i) / |x_j - x_i|^3`` of bodies at
    ``x`` (N, 3) with masses ``m`` (N,)."""
    n = x.shape[0]
    eye = np.eye(n, dtype=np.float32)
    d = x[None, :, :] - x[:, None, :]  # d[i, j] = x_j - x_i
    r2 = jnp.sum(d * d, axis=-1) + eye  # 1 on the diagonal: no 0/0
    w = G_SOLAR * (1.0 - eye) * m[None, :] * r2 ** (-1.5)
    return jnp.einsum("ij,ijk->ik", w, d)


def nbody_rk4(x, v, m, steps=12, dt=0.002):
    """``steps`` classical RK4 steps (Kutta 1901; Hairer, Norsett & Wanner, Solving ODEs I)
    of the Newtonian N-body problem in AU, years and solar masses: positions and
    velocities (N, 3), masses (N,). Returns the final positions and velocities."""

    def f(s):
        x, v = s
        return v, nbody_accelerations(x, m)

    return lax.fori_loop(0, steps, lambda i, s: _rk4(f, s, dt), (x, v))


def make_nbody(steps: int = 12, seed: int = 1000) -> Example:
    """The Sun and Mercury to Mars on circular, slightly inclined orbits (random phases),
    in the barycentric frame."""
    rng = _rng(seed)
    m = np.array(INNER_SOLAR_MASSES)
    x, v = np.zeros((5, 3)), np.zeros((5, 3))
    for i, a in enumerate(INNER_SOLAR_AXES[1:], start=1):
        phase, inc = rng.uniform(0, 2 * math.pi), rng.uniform(-0.05, 0.05)
        speed = math.sqrt(G_SOLAR * (1.0 + m[i]) / a)
        x[i] = a * np.array([math.cos(phase), math.sin(phase) * math.cos(inc), math.sin(phase) * math.sin(inc)])
        v[i] = speed * np.array([-math.sin(phase), math.cos(phase) * math.cos(inc), math.cos(phase) * math.sin(inc)])
    x -= (m[:, None] * x).sum(0) / m.sum()
    v -= (m[:, None] * v).sum(0) / m.sum()
    fn = lambda x, v, m: nbody_rk4(x, v, m, steps=steps)
    return Example(
        "NBodySolar_RK4", fn, (_f32(x), _f32(v), _f32(m)), FAMILY,
        f"{steps} RK4 steps (lax.fori_loop, dt = 0.002 yr) of the Sun and the four inner planets "
        "under Newtonian gravity (G = 4 pi^2 AU^3 / (M_sun yr^2)).")


# ---------------------------------------------------------------------------
# 2. A damped chain of pendula coupled by torsion springs
# ---------------------------------------------------------------------------


def pendulum_chain_rhs(theta, omega, kappa, gamma, g_over_l=9.81):
    """``theta_i'' = -(g/L) sin theta_i + kappa (theta_{i+1} - 2 theta_i + theta_{i-1})
    - gamma theta_i'`` with free ends (unit masses and lengths)."""
    twist = theta[1:] - theta[:-1]  # each spring's twist
    torque = jnp.pad(twist, (0, 1)) - jnp.pad(twist, (1, 0))  # right spring minus left spring
    return omega, -g_over_l * jnp.sin(theta) + kappa * torque - gamma * omega


def pendulum_chain_rk4(theta, omega, kappa, gamma, steps=16, dt=0.01):
    """``steps`` RK4 steps of Scott's mechanical transmission line (A. C. Scott, "A
    nonlinear Klein-Gordon equation", Am. J. Phys. 37, 1969): pendula on a common axis,
    neighbours coupled by torsion springs ``kappa``, viscous damping ``gamma``."""
    f = lambda s: pendulum_chain_rhs(s[0], s[1], kappa, gamma)
    return lax.fori_loop(0, steps, lambda i, s: _rk4(f, s, dt), (theta, omega))


def make_pendulum_chain(n: int = 10, steps: int = 16, seed: int = 1001) -> Example:
    rng = _rng(seed)
    theta = rng.uniform(-1.0, 1.0, n)
    omega = rng.uniform(-0.5, 0.5, n)
    fn = lambda theta, omega, kappa, gamma: pendulum_chain_rk4(theta, omega, kappa, gamma, steps=steps)
    return Example(
        "PendulumChain_RK4", fn, (_f32(theta), _f32(omega), _f32(4.0), _f32(0.3)), FAMILY,
        f"{steps} RK4 steps (lax.fori_loop, dt = 0.01) of a damped chain of {n} pendula coupled by "
        "torsion springs (Scott's mechanical sine-Gordon transmission line, Am. J. Phys. 1969).")


# ---------------------------------------------------------------------------
# 3. A stack of pre-LN transformer blocks, scanned over layers
# ---------------------------------------------------------------------------


def layer_norm(x, g, b, eps=1e-5):
    """Layer normalisation (Ba, Kiros & Hinton 2016) over the last axis."""
    mu = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean((x - mu) ** 2, axis=-1, keepdims=True)
    return (x - mu) * lax.rsqrt(var + eps) * g + b


def causal_self_attention(x, wqkv, bqkv, wo, bo, heads):
    """Multi-head causal self-attention (Vaswani et al. 2017) of ``x`` (T, D)."""
    T, D = x.shape
    dh = D // heads
    q, k, v = jnp.split(x @ wqkv + bqkv, 3, axis=-1)
    split = lambda a: a.reshape(T, heads, dh).transpose(1, 0, 2)  # (heads, T, dh)
    q, k, v = split(q), split(k), split(v)
    mask = np.where(np.tril(np.ones((T, T), bool)), 0.0, -1e9).astype(np.float32)
    p = jax.nn.softmax(jnp.einsum("htd,hsd->hts", q, k) / math.sqrt(dh) + mask, axis=-1)
    out = jnp.einsum("hts,hsd->htd", p, v).transpose(1, 0, 2).reshape(T, D)
    return out @ wo + bo


def transformer_block(x, p, heads):
    """One pre-LN block (Xiong et al. 2020; GPT-2): x + attention(LN(x)), then
    h + MLP(LN(h)) with a tanh-approximated GELU."""
    h = x + causal_self_attention(layer_norm(x, p["ln1_g"], p["ln1_b"]), p["wqkv"], p["bqkv"],
                                  p["wo"], p["bo"], heads)
    u = jax.nn.gelu(layer_norm(h, p["ln2_g"], p["ln2_b"]) @ p["w1"] + p["b1"], approximate=True)
    return h + u @ p["w2"] + p["b2"]


def transformer_stack(x, params, heads=2):
    """A stack of pre-LN transformer blocks over tokens ``x`` (T, D); ``params`` holds
    each weight stacked over layers, and ``lax.scan`` runs the layers."""
    y, _ = lax.scan(lambda h, p: (transformer_block(h, p, heads), None), x, params)
    return y


def make_transformer(layers: int = 7, tokens: int = 8, width: int = 16, heads: int = 2,
                     seed: int = 1002) -> Example:
    rng = _rng(seed)
    L, D, M = layers, width, 4 * width
    s = 1.0 / math.sqrt(D)
    params = {
        "ln1_g": 1.0 + 0.1 * rng.standard_normal((L, D)), "ln1_b": 0.1 * rng.standard_normal((L, D)),
        "wqkv": s * rng.standard_normal((L, D, 3 * D)), "bqkv": 0.1 * rng.standard_normal((L, 3 * D)),
        "wo": s * rng.standard_normal((L, D, D)), "bo": 0.1 * rng.standard_normal((L, D)),
        "ln2_g": 1.0 + 0.1 * rng.standard_normal((L, D)), "ln2_b": 0.1 * rng.standard_normal((L, D)),
        "w1": s * rng.standard_normal((L, D, M)), "b1": 0.1 * rng.standard_normal((L, M)),
        "w2": rng.standard_normal((L, M, D)) / math.sqrt(M), "b2": 0.1 * rng.standard_normal((L, D)),
    }
    params = {k: _f32(v) for k, v in params.items()}
    fn = lambda x, params: transformer_stack(x, params, heads=heads)
    return Example(
        "TransformerStack", fn, (_f32(rng.standard_normal((tokens, D))), params), FAMILY,
        f"{L} pre-LN transformer blocks (Vaswani et al. 2017; GPT-2 layout: layer norm, causal "
        f"{heads}-head attention, tanh-GELU MLP) scanned over layers, {tokens} tokens of width {D}.")


# ---------------------------------------------------------------------------
# 4. Growing neural cellular automaton: a 3x3 convolution per step
# ---------------------------------------------------------------------------

SOBEL_X = np.array([[-1.0, 0.0, 1.0], [-2.0, 0.0, 2.0], [-1.0, 0.0, 1.0]]) / 8.0


def depthwise_conv3x3(x, kernel):
    """Same-size cross-correlation of every channel of ``x`` (C, H, W) with the 3x3
    ``kernel`` (zero padding), as a sum of shifted slices."""
    _, H, W = x.shape
    p = jnp.pad(x, ((0, 0), (1, 1), (1, 1)))
    out = None
    for di in range(3):
        for dj in range(3):
            if kernel[di, dj] != 0.0:
                term = float(kernel[di, dj]) * p[:, di:di + H, dj:dj + W]
                out = term if out is None else out + term
    return out


def neural_ca(state, w1, b1, w2, steps=16):
    """``steps`` updates of a growing neural cellular automaton (Mordvintsev, Randazzo,
    Niklasson & Levin, "Growing Neural Cellular Automata", Distill 2020) on ``state``
    (C, H, W): perception by the identity and Sobel x/y filters per channel, a per-cell
    MLP (1x1 convolutions ``w1`` (K, 3C), ``b1``, ReLU, ``w2`` (C, K)), residual update.
    Deterministic: every cell updates at every step, no alive masking."""

    def step(_, s):
        perception = jnp.concatenate(
            [s, depthwise_conv3x3(s, SOBEL_X), depthwise_conv3x3(s, SOBEL_X.T)], axis=0)
        hidden = jax.nn.relu(jnp.einsum("kc,chw->khw", w1, perception) + b1[:, None, None])
        return s + jnp.einsum("ck,khw->chw", w2, hidden)

    return lax.fori_loop(0, steps, step, state)


def make_neural_ca(channels: int = 4, side: int = 8, hidden: int = 16, steps: int = 16,
                   seed: int = 1003) -> Example:
    rng = _rng(seed)
    state = rng.uniform(0.0, 1.0, (channels, side, side))
    w1 = rng.standard_normal((hidden, 3 * channels)) / math.sqrt(3 * channels)
    b1 = 0.1 * rng.standard_normal(hidden)
    w2 = 0.1 * rng.standard_normal((channels, hidden)) / math.sqrt(hidden)
    fn = lambda state, w1, b1, w2: neural_ca(state, w1, b1, w2, steps=steps)
    return Example(
        "NeuralCA_Conv", fn, tuple(_f32(a) for a in (state, w1, b1, w2)), FAMILY,
        f"{steps} steps (lax.fori_loop) of a growing neural cellular automaton (Mordvintsev et al., "
        f"Distill 2020): Sobel perception as 3x3 depthwise convolutions, a {hidden}-unit per-cell MLP, "
        f"{channels} channels on {side}x{side}.")


# ---------------------------------------------------------------------------
# 5. A Kalman filter over a measurement sequence
# ---------------------------------------------------------------------------


def constant_velocity_model(dt=0.1):
    """2-D constant-velocity model: transition F, unit-intensity white-acceleration
    process covariance Q0 (Bar-Shalom, Li & Kirubarajan 2001, sec. 6.2.2), position
    measurement H."""
    F = np.eye(4)
    F[:2, 2:] = dt * np.eye(2)
    Q0 = np.block([[dt**3 / 3 * np.eye(2), dt**2 / 2 * np.eye(2)],
                   [dt**2 / 2 * np.eye(2), dt * np.eye(2)]])
    H = np.hstack([np.eye(2), np.zeros((2, 2))])
    return F, Q0, H


def _inv2_and_logdet(S):
    """Inverse and log-determinant of a 2x2 matrix by its adjugate."""
    a, b, c, d = S[0, 0], S[0, 1], S[1, 0], S[1, 1]
    det = a * d - b * c
    adj = jnp.stack([jnp.stack([d, -b]), jnp.stack([-c, a])])
    return adj / det, jnp.log(det)


def kalman_filter(zs, x0, log_q, log_r, dt=0.1):
    """The Kalman (1960) filter (Sarkka, Bayesian Filtering and Smoothing, 2013, alg. 4.2)
    over position measurements ``zs`` (T, 2) of a 2-D constant-velocity target, run by
    ``lax.scan``: prior mean ``x0`` (4,), prior covariance I, process intensity
    ``exp(log_q)``, measurement variance ``exp(log_r)``. Returns the filtered means (T, 4)
    and the log-likelihood of the measurements (prediction error decomposition)."""
    F, Q0, H = (jnp.asarray(a, _F32) for a in constant_velocity_model(dt))
    Q = jnp.exp(log_q) * Q0
    R = jnp.exp(log_r) * jnp.eye(2, dtype=_F32)

    def step(carry, z):
        x, P, loglik = carry
        x = F @ x
        P = F @ P @ F.T + Q
        S = H @ P @ H.T + R
        S_inv, logdet = _inv2_and_logdet(S)
        K = P @ H.T @ S_inv
        innovation = z - H @ x
        x = x + K @ innovation
        P = P - K @ S @ K.T
        loglik = loglik - 0.5 * (innovation @ S_inv @ innovation + logdet + 2.0 * math.log(2 * math.pi))
        return (x, P, loglik), x

    (_, _, loglik), means = lax.scan(step, (x0, jnp.eye(4, dtype=_F32), jnp.zeros((), _F32)), zs)
    return means, loglik


def make_kalman(steps: int = 20, seed: int = 1004) -> Example:
    """Measurements of a target simulated from the model itself (q = 0.5, r = 0.04)."""
    rng = _rng(seed)
    F, Q0, H = constant_velocity_model()
    x = np.array([0.0, 0.0, 1.0, 0.5])
    zs = []
    for _ in range(steps):
        x = F @ x + rng.multivariate_normal(np.zeros(4), 0.5 * Q0)
        zs.append(H @ x + 0.2 * rng.standard_normal(2))
    fn = lambda zs, x0, log_q, log_r: kalman_filter(zs, x0, log_q, log_r)
    args = (_f32(zs), _f32([0.1, -0.1, 0.8, 0.6]), _f32(math.log(0.5)), _f32(math.log(0.04)))
    return Example(
        "KalmanFilter_Scan", fn, args, FAMILY,
        f"A Kalman (1960) filter over {steps} position measurements of a 2-D constant-velocity target "
        "(lax.scan; Sarkka 2013, alg. 4.2): filtered means and the log-likelihood.")


# ---------------------------------------------------------------------------
# 6. Viscous Burgers equation, finite volumes with the Rusanov flux
# ---------------------------------------------------------------------------


def burgers_step(u, nu, dt, dx):
    """One forward-Euler finite-volume step of ``u_t + (u^2/2)_x = nu u_xx`` on a periodic
    grid: Rusanov (local Lax-Friedrichs) interface fluxes (LeVeque, Finite Volume Methods
    for Hyperbolic Problems, 2002, sec. 12.5) and central diffusion."""
    right, left = jnp.roll(u, -1), jnp.roll(u, 1)
    speed = jnp.maximum(jnp.abs(u), jnp.abs(right))
    flux = 0.25 * (u * u + right * right) - 0.5 * speed * (right - u)  # at i + 1/2
    return u - (dt / dx) * (flux - jnp.roll(flux, 1)) + (nu * dt / dx**2) * (right - 2.0 * u + left)


def burgers_rusanov(u, nu, steps=24, dt=0.02):
    """``steps`` steps (``lax.fori_loop``) of :func:`burgers_step` on [0, 2 pi)."""
    dx = 2.0 * math.pi / u.shape[0]
    return lax.fori_loop(0, steps, lambda i, u: burgers_step(u, nu, dt, dx), u)


def make_burgers(n: int = 48, steps: int = 24, seed: int = 1005) -> Example:
    rng = _rng(seed)
    x = 2 * math.pi * np.arange(n) / n
    u = np.sin(x) + 0.5 * np.cos(2 * x + 0.3) + 0.05 * rng.standard_normal(n)
    fn = lambda u, nu: burgers_rusanov(u, nu, steps=steps)
    return Example(
        "BurgersRusanov", fn, (_f32(u), _f32(0.05)), FAMILY,
        f"{steps} steps (lax.fori_loop) of the viscous Burgers equation on a periodic grid of {n} cells: "
        "Rusanov fluxes and central diffusion (LeVeque 2002), shifts by jnp.roll.")


# ---------------------------------------------------------------------------
# 7. A robot arm along a joint-space trajectory
# ---------------------------------------------------------------------------

#: Standard DH parameters (a, d, alpha) of the PUMA 560 (Corke, Robotics, Vision and Control).
PUMA560_DH = ((0.0, 0.0, math.pi / 2), (0.4318, 0.0, 0.0), (0.0203, 0.15005, -math.pi / 2),
              (0.0, 0.4318, math.pi / 2), (0.0, 0.0, -math.pi / 2), (0.0, 0.0, 0.0))


def dh_transform(theta, a, d, alpha):
    """The standard Denavit-Hartenberg link transform Rot_z(theta) Trans_z(d) Trans_x(a)
    Rot_x(alpha) (Spong, Hutchinson & Vidyasagar, Robot Modeling and Control, eq. 3.10)."""
    ct, st = jnp.cos(theta), jnp.sin(theta)
    ca, sa = math.cos(alpha), math.sin(alpha)
    zero, one = jnp.zeros_like(theta), jnp.ones_like(theta)
    return jnp.stack([
        jnp.stack([ct, -st * ca, st * sa, a * ct]),
        jnp.stack([st, ct * ca, -ct * sa, a * st]),
        jnp.stack([zero, zero + sa, zero + ca, zero + d]),
        jnp.stack([zero, zero, zero, one]),
    ])


def puma_trajectory(q0, q1, samples=8):
    """End-effector positions (samples, 3) of the PUMA 560 along the cubic joint
    trajectory from ``q0`` to ``q1`` with zero end velocities (Spong et al., sec. 5.5.1),
    sampled at ``samples`` equally spaced times by ``lax.scan``."""

    def at(carry, s):
        q = q0 + s * s * (3.0 - 2.0 * s) * (q1 - q0)
        T = jnp.eye(4, dtype=_F32)
        for i, (a, d, alpha) in enumerate(PUMA560_DH):
            T = T @ dh_transform(q[i], a, d, alpha)
        return carry, T[:3, 3]

    _, positions = lax.scan(at, None, jnp.linspace(0.0, 1.0, samples, dtype=_F32))
    return positions


def make_robot_trajectory(samples: int = 8, seed: int = 1006) -> Example:
    rng = _rng(seed)
    q0 = rng.uniform(-1.0, 1.0, 6)
    q1 = q0 + rng.uniform(-1.0, 1.0, 6)
    fn = lambda q0, q1: puma_trajectory(q0, q1, samples=samples)
    return Example(
        "PumaTrajectory", fn, (_f32(q0), _f32(q1)), FAMILY,
        f"End-effector positions of the PUMA 560 (standard DH, Corke) at {samples} times of a cubic "
        "joint trajectory (Spong, Hutchinson & Vidyasagar), forward kinematics in a lax.scan.")


# ---------------------------------------------------------------------------
# 8. A GRU over a sequence
# ---------------------------------------------------------------------------


def gru_sequence(xs, h0, W, U, b_in, b_hn):
    """Hidden states (T, H) of a GRU (Cho et al. 2014) in the cuDNN/PyTorch form, run
    over ``xs`` (T, D) by ``lax.scan``: ``r, z = sigmoid(W_{r,z} x + U_{r,z} h + b)``,
    ``n = tanh(W_n x + b_in + r (U_n h + b_hn))``, ``h' = (1 - z) n + z h``; ``W``
    (3H, D), ``U`` (3H, H), ``b_in`` (3H,), ``b_hn`` (H,)."""
    H = h0.shape[0]

    def cell(h, x):
        gx = W @ x + b_in
        gh = U @ h
        r = jax.nn.sigmoid(gx[:H] + gh[:H])
        z = jax.nn.sigmoid(gx[H:2 * H] + gh[H:2 * H])
        n = jnp.tanh(gx[2 * H:] + r * (gh[2 * H:] + b_hn))
        h = (1.0 - z) * n + z * h
        return h, h

    _, hs = lax.scan(cell, h0, xs)
    return hs


def make_gru(steps: int = 30, hidden: int = 16, inputs: int = 4, seed: int = 1007) -> Example:
    rng = _rng(seed)
    s = 1.0 / math.sqrt(hidden)
    args = (rng.standard_normal((steps, inputs)), 0.5 * rng.standard_normal(hidden),
            rng.uniform(-s, s, (3 * hidden, inputs)), rng.uniform(-s, s, (3 * hidden, hidden)),
            rng.uniform(-s, s, 3 * hidden), rng.uniform(-s, s, hidden))
    return Example(
        "GRUSequence", gru_sequence, tuple(_f32(a) for a in args), FAMILY,
        f"A GRU (Cho et al. 2014, cuDNN/PyTorch form) over a sequence of {steps} inputs of width "
        f"{inputs} (lax.scan), hidden width {hidden}; all hidden states.")


# ---------------------------------------------------------------------------
# 9. Bundle adjustment residuals of the BAL camera model
# ---------------------------------------------------------------------------


def angle_axis_rotate(w, X):
    """Points ``X`` (N, 3) rotated by the angle-axis vector ``w`` (3,) (Rodrigues'
    formula, as in Ceres' ``AngleAxisRotatePoint``; ``|w|`` must not be 0)."""
    theta = jnp.sqrt(jnp.sum(w * w))
    k = w / theta
    c, s = jnp.cos(theta), jnp.sin(theta)
    return c * X + s * jnp.cross(k, X) + (1.0 - c) * (X @ k)[:, None] * k


def bal_project(camera, X):
    """Pixel coordinates (N, 2) of points ``X`` (N, 3) in a camera of the "Bundle
    Adjustment in the Large" model (Agarwal, Snavely, Seitz & Szeliski, ECCV 2010):
    ``camera`` = angle-axis rotation (3), translation (3), focal length, radial
    distortion k1, k2; ``P = R X + t``, ``p = -P_xy / P_z``, ``f (1 + k1 |p|^2 + k2 |p|^4) p``."""
    w, t, f, k1, k2 = camera[:3], camera[3:6], camera[6], camera[7], camera[8]
    P = angle_axis_rotate(w, X) + t
    p = -P[:, :2] / P[:, 2:3]
    r2 = jnp.sum(p * p, axis=1, keepdims=True)
    return f * (1.0 + k1 * r2 + k2 * r2 * r2) * p


def bal_residuals(cameras, points, observed):
    """Reprojection residuals (K, N, 2) of every point in every camera (``lax.map`` over
    the K cameras): projection minus the observed pixel."""
    return lax.map(lambda cam: bal_project(cam, points), cameras) - observed


def _rotation_matrix(w):
    """Rotation matrix of the angle-axis vector ``w`` (float64, by the matrix exponential
    of its cross-product matrix; used to make the data and by the tests)."""
    import scipy.linalg

    Wx = np.array([[0.0, -w[2], w[1]], [w[2], 0.0, -w[0]], [-w[1], w[0], 0.0]])
    return scipy.linalg.expm(Wx)


def bal_project_reference(camera, X):
    """:func:`bal_project` in float64 NumPy, with the rotation from the matrix exponential."""
    camera, X = np.asarray(camera, np.float64), np.asarray(X, np.float64)
    P = X @ _rotation_matrix(camera[:3]).T + camera[3:6]
    p = -P[:, :2] / P[:, 2:3]
    r2 = np.sum(p * p, axis=1, keepdims=True)
    return camera[6] * (1.0 + camera[7] * r2 + camera[8] * r2 * r2) * p


def bal_scene(cameras: int, points: int, seed: int):
    """A synthetic scene: true cameras (K, 9) and points (N, 3), observations (K, N, 2)
    with 0.5-pixel noise, and the noise itself."""
    rng = _rng(seed)
    X = rng.uniform(-1.0, 1.0, (points, 3))
    cams = np.zeros((cameras, 9))
    for k in range(cameras):
        axis = rng.standard_normal(3)
        cams[k, :3] = rng.uniform(0.1, 0.4) * axis / np.linalg.norm(axis)
        cams[k, 3:6] = [rng.uniform(-0.5, 0.5), rng.uniform(-0.5, 0.5), -rng.uniform(5.0, 7.0)]
        cams[k, 6:] = [rng.uniform(400.0, 600.0), rng.uniform(-0.05, 0.05), rng.uniform(-0.01, 0.01)]
    noise = 0.5 * rng.standard_normal((cameras, points, 2))
    observed = np.stack([bal_project_reference(c, X) for c in cams]) + noise
    return cams, X, observed, noise


def make_bundle_adjustment(cameras: int = 12, points: int = 16, seed: int = 1008) -> Example:
    """Residuals at the true scene perturbed (rotations by 0.01 rad, translations by 1 cm,
    focal lengths by 1 pixel, points by 1 cm)."""
    rng = _rng(seed + 1)
    cams, X, observed, _ = bal_scene(cameras, points, seed)
    cams = cams + np.concatenate([0.01 * rng.standard_normal((cameras, 6)),
                                  rng.standard_normal((cameras, 1)), np.zeros((cameras, 2))], axis=1)
    X = X + 0.01 * rng.standard_normal(X.shape)
    obs = _f32(observed)
    fn = lambda cameras, points: bal_residuals(cameras, points, obs)
    return Example(
        "BundleAdjustBAL", fn, (_f32(cams), _f32(X)), FAMILY,
        f"Reprojection residuals of {points} points in {cameras} cameras of the Bundle Adjustment in the "
        "Large model (Agarwal et al., ECCV 2010: angle-axis rotation, focal length, radial distortion), "
        "lax.map over cameras.")


# ---------------------------------------------------------------------------
# the registry
# ---------------------------------------------------------------------------

#: Each program's name -> its builder (keyword arguments: sizes; defaults give EXAMPLES).
BUILDERS = {
    "NBodySolar_RK4": make_nbody,
    "PendulumChain_RK4": make_pendulum_chain,
    "TransformerStack": make_transformer,
    "NeuralCA_Conv": make_neural_ca,
    "KalmanFilter_Scan": make_kalman,
    "BurgersRusanov": make_burgers,
    "PumaTrajectory": make_robot_trajectory,
    "GRUSequence": make_gru,
    "BundleAdjustBAL": make_bundle_adjustment,
}

EXAMPLES: tuple[Example, ...] = tuple(build() for build in BUILDERS.values())
