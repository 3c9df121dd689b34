"""The ten benchmark tasks of the AlphaGrad paper (Lohoff & Neftci, NeurIPS 2024).

Each function follows the definitions in the project's benchmark notes
(``shared/benchmarks.md``, sections 1-2) op for op, quirks included: values the
reference computes several times are written several times here (there is no
CSE in the traced graph), literal constants stay literals, and structural ops
(broadcasts from ``vmap``, slices, concatenations, dtype conversions, stop
gradients) are kept where the reference has them. This keeps the traced graphs
close in size to the published ones.

``RandomF`` and ``RandomG`` are the project's own fixed random functions, of the
size and primitive mix of the reference's f and g (whose exact code is not
reproduced).

Tasks marked "vmapped with batch 1" are written per sample and wrapped in
``jax.vmap`` over a leading batch axis of size 1; their example arguments carry
that batch axis.
"""

from __future__ import annotations

from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from alphagrad.examples import Example

_F32 = jnp.float32


def _scalar(value: float) -> jax.Array:
    """A 0-d float32 array."""
    return jnp.asarray(value, dtype=_F32)


def _weak_scalar(value: float) -> jax.Array:
    """A 0-d weakly typed float32 array (a Python float turned into an array).

    In the published MLP and Encoder graphs each layer-norm gain and bias passes
    through one dtype conversion. A weakly typed input reproduces that: jnp
    converts it to strong float32 when it meets the float32 activations (a
    strongly typed input would drop those ``convert_element_type`` ops).
    """
    out = jnp.asarray(float(value))
    if out.dtype != _F32:  # 64-bit mode: Python floats become float64
        out = jnp.asarray(value, dtype=_F32)
    return out


# ---------------------------------------------------------------------------
# 2.1 RoeFlux_1d
# ---------------------------------------------------------------------------


def roe_flux_1d(rhoL, mL, EL, rhoR, mR, ER):
    """Roe's approximate Riemann flux for the 1-D Euler equations (gamma = 0.5)."""
    gm1 = -0.5  # gamma - 1 with gamma = 0.5, as in the reference

    # 1. jumps and averages
    drho = rhoR - rhoL
    rho = jnp.sqrt(rhoL * rhoR)
    w = jnp.sqrt(rhoL) + jnp.sqrt(rhoR)

    # 2. left and right states
    vL = mL / rhoL
    pL = gm1 * (EL - 0.5 * mL**2 / rhoL)
    hL = (EL + pL) / rhoL
    vR = mR / rhoR
    pR = gm1 * (ER - 0.5 * mR**2 / rhoR)
    hR = (ER + pR) / rhoR

    # 3.
    dp = pR - pL
    dv = vR - vL

    # 4. Roe averages (square roots recomputed)
    u = (jnp.sqrt(rhoL) * vL + jnp.sqrt(rhoR) * vR) / w
    h = (jnp.sqrt(rhoL) * hL + jnp.sqrt(rhoR) * hR) / w

    # 5.
    q2 = u**2
    a2 = gm1 * (h - 0.5 * q2)
    a = jnp.sqrt(a2)

    # 6. eigenvalues (the reference uses |u| for lambda_-)
    lp = jnp.abs(u + a)
    l0 = jnp.abs(u)
    lm = jnp.abs(u)

    # 7. wave strengths (dp / n computed twice)
    n = a * rho
    c0 = (drho - dp / a2) * l0
    c1 = (dv + dp / n) * lp
    c2 = (dv - dp / n) * lm

    # 8. physical fluxes, left then right (v' = m / rho is a new division,
    # not vL / vR)
    vL_ = mL / rhoL
    FL1 = pL + mL * vL_
    FL2 = vL_ * (pL + EL)
    vR_ = mR / rhoR
    FR1 = pR + mR * vR_
    FR2 = vR_ * (pR + ER)

    # 9.
    F0 = mL + mR
    F1 = FL1 + FR1
    F2 = FL2 + FR2

    # 10.
    c = (0.5 * rho) / a

    # 11. flux corrections (c*c1, c*c2 each computed 3x; u+a, u*a 2x)
    dF0 = c0 + c * c1 - c * c2
    dF1 = c0 * u + (c * c1) * (u + a) - (c * c2) * (u - a)
    dF2 = (c0 * 0.5) * q2 + (c * c1) * (h + u * a) - (c * c2) * (h - u * a)

    # 12.
    phi0 = 0.5 * (F0 - dF0)
    phi1 = 0.5 * (F1 - dF1)
    phi2 = 0.5 * (F2 - dF2)
    return phi0, phi1, phi2


# ---------------------------------------------------------------------------
# 2.2 RoeFlux_3d
# ---------------------------------------------------------------------------


def _roe_flux_3d_sample(rhoL, mL, EL, rhoR, mR, ER):
    """One sample: rho, E of shape (1,), m of shape (3,)."""
    gm1 = -0.5  # gamma - 1 with gamma = 0.5

    # 1. jumps
    drho = rhoR - rhoL
    dm = mR - mL
    dm1 = dm[0:1]
    dm2 = dm[1:2]
    dm3 = dm[2:3]
    dE = ER - EL

    # 2. velocities
    vL = mL / rhoL
    vR = mR / rhoR

    # 3. Roe-averaged velocity (fresh square roots)
    w = jnp.sqrt(rhoL) + jnp.sqrt(rhoR)
    uvec = (jnp.sqrt(rhoL) * vL + jnp.sqrt(rhoR) * vR) / w
    u = uvec[0:1]
    v = uvec[1:2]
    w3 = uvec[2:3]

    # 4. pressures and enthalpies
    pL = gm1 * (EL - 0.5 * jnp.sum(mL**2) / rhoL)
    hL = (EL + pL) / rhoL
    pR = gm1 * (ER - 0.5 * jnp.sum(mR**2) / rhoR)
    hR = (ER + pR) / rhoR

    # 5. Roe-averaged enthalpy (fresh square roots again)
    h = (jnp.sqrt(rhoL) * hL + jnp.sqrt(rhoR) * hR) / w

    # 6. (q2 is the full sum, not halved)
    q2 = jnp.sum(uvec**2)
    a2 = gm1 * (h - 0.5 * q2)
    a = jnp.sqrt(a2)

    # 7. eigenvalues (no absolute values in 3-D)
    lp = u + a
    l0 = u
    lm = u - a

    # 8. wave strengths
    c3 = (gm1 / a2) * ((h - q2) * drho + jnp.dot(uvec, dm) - dE) * l0
    c2 = (dm3 / w3 - dm1) * l0
    c1 = (dm2 / v - drho) * l0
    k1 = drho - c3
    k2 = (dm1 - u * drho) / a
    c0 = 0.5 * (k1 - k2) * lm
    c4 = 0.5 * (k1 + k2) * lp

    # 9. physical fluxes, left then right
    FL0 = mL[0:1]
    FL = jnp.concatenate([pL, jnp.zeros(2, _F32)]) + mL * vL
    FL4 = vL[0:1] * (pL + EL)
    FR0 = mR[0:1]
    FR = jnp.concatenate([pR, jnp.zeros(2, _F32)]) + mR * vR
    FR4 = vR[0:1] * (pR + ER)

    # 10.
    F0 = FL0 + FR0
    F = FL + FR
    F4 = FL4 + FR4

    # 11. flux corrections
    dF0 = c0 + c3 + c4 * lp
    dF1 = c0 * lm + c3 * u + c4 * lp
    dF2 = c0 * v + c1 * v + c3 * v + c4 * v
    dF3 = c0 * w3 + c2 * w3 + c3 * w3 + c4 * w3
    dF4 = (
        c0 * (h - u * a)
        + c1 * v**2
        + c2 * w3**2
        + (c3 * 0.5) * q2
        + c4 * (h + u * a)
    )
    dF = jnp.concatenate([dF1, dF2, dF3])

    # 12.
    phi0 = 0.5 * (F0 - dF0)
    phi = 0.5 * (F - dF)
    phi4 = 0.5 * (F4 - dF4)
    return phi0, phi, phi4


roe_flux_3d = jax.vmap(_roe_flux_3d_sample)


# ---------------------------------------------------------------------------
# 2.3 RobotArm_6DOF
# ---------------------------------------------------------------------------


def robot_arm_6dof(t1, t2, t3, t4, t5, t6):
    """Forward kinematics of a 6-DOF arm: position and three orientation angles."""
    a1, a2, a3 = 175.0, 890.0, 50.0
    d1, d4, d6 = 575.0, 1035.0, 185.0

    c1 = jnp.cos(t1)
    c2 = jnp.cos(t2)
    c4 = jnp.cos(t4)
    c5 = jnp.cos(t5)
    c6 = jnp.cos(t6)
    c23 = jnp.cos(t2) * jnp.cos(t3) - jnp.sin(t2) * jnp.sin(t3)

    s1 = jnp.sin(t1)
    s2 = jnp.sin(t2)
    s4 = jnp.sin(t4)
    s5 = jnp.sin(t5)
    s6 = jnp.sin(t6)
    s23 = jnp.cos(t2) * jnp.sin(t3) + jnp.sin(t2) * jnp.cos(t3)

    ax = s5 * (c1 * c23 * c4 + s1 * s4) + c1 * s23 * c5
    ay = s5 * (s1 * c23 * c4 - c1 * s4) + s1 * s23 * c5
    az = s23 * c4 * s5 - c23 * c5
    nz = c6 * (c23 * s5 + s23 * c4 * c5) - s23 * s4 * s6
    oz = -s6 * (c23 * s5 + s23 * c4 * c5) - s23 * s4 * c6

    phi = jnp.arctan2(ay, ax)
    theta = jnp.arctan2(jnp.sqrt(1.0 - az**2), az)
    psi = jnp.arctan2(oz, -nz)

    px = d6 * (s5 * (c1 * c23 * c4 + s1 * s4) + c1 * s23 * c5) + c1 * (
        a1 + a2 * c2 + a3 * c23 + d4 * s23
    )
    py = d6 * (s5 * (s1 * c23 * c4 + c1 * s4) + s1 * s23 * c5) + s1 * (
        a1 + a2 * c2 + a3 * c23 + d4 * s23
    )
    pz = a2 * s2 + d1 + a3 * s23 - d4 * c23 + d6 * (s23 * c4 * s5 - c23 * c5)
    return px, py, pz, phi, theta, psi


# ---------------------------------------------------------------------------
# 2.4 HumanHeartDipole
# ---------------------------------------------------------------------------


def human_heart_dipole(x1, x2, x3, x4, x5, x6, x7, x8):
    """MINPACK-2 human heart dipole residual, R^8 -> R^8, all sigmas = 1."""
    smx = smy = sA = sB = sC = sD = sE = 1.0

    f1 = x1 + x2 - smx
    f2 = x3 + x4 - smy
    f3 = x5 * x1 + x6 * x2 - x7 * x3 - x8 * x4 - sA
    f4 = x7 * x1 + x8 * x2 + x5 * x3 + x6 * x4 - sB
    A = x5**2 - x7**2
    B = x6**2 - x8**2
    f5 = x1 * A - 2.0 * x3 * x5 * x7 + x2 * B - 2.0 * x4 * x6 * x8 - sC
    f6 = x3 * A - 2.0 * x1 * x5 * x7 + x4 * B - 2.0 * x2 * x6 * x8 - sD
    P = x5 * (x5**2 - 3.0 * x7**2)
    Q = x7 * (x7**2 - 3.0 * x5**2)
    R = x6 * (x6**2 - 3.0 * x8**2)
    S = x8 * (x8**2 - 3.0 * x6**2)
    f7 = x1 * P + x3 * Q + x2 * R + x4 * S - sE
    f8 = x3 * P - x1 * Q + x4 * R - x2 * S - sE  # sigma_E again, as in the reference
    return f1, f2, f3, f4, f5, f6, f7, f8


# ---------------------------------------------------------------------------
# 2.5 PropaneCombustion
# ---------------------------------------------------------------------------


def propane_combustion(x1, x2, x3, x4, x5, x6, x7, x8, x9, x10, x11):
    """MINPACK-2 propane combustion (full formulation), equilibrium constants = 1."""
    p = 40.0
    R = 10.0

    s = jnp.sqrt(p / x11)
    f1 = x1 + x4 - 3.0
    f2 = 2.0 * x1 + x2 + x4 + x7 + x8 + x9 + 2.0 * x10 - R
    f3 = 2.0 * x2 + 2.0 * x5 + x6 + x7 - 8.0
    f4 = 2.0 * x3 + x9 - 40.0  # 4R as one literal
    f5 = x2 * x4 - x1 * x5
    f6 = jnp.sqrt(x2 * x4) - jnp.sqrt(x1) * s * x6
    f7 = jnp.sqrt(x1 * x2) - jnp.sqrt(x4) * x7 * s
    f8 = x1 - x4 * x8 * p / x11
    f9 = x1 * jnp.sqrt(x3) - x4 * x9 * s
    f10 = x1**2 - x4**2 * x10 * p / x11
    f11 = x11 - x1 - x2 - x3 - x4 - x5 - x6 - x7 - x8 - x9 - x10
    return f1, f2, f3, f4, f5, f6, f7, f8, f9, f10, f11


# ---------------------------------------------------------------------------
# 2.6 BlackScholes_Jacobian
# ---------------------------------------------------------------------------


def _minus_one():
    """A traced constant vertex -1 (negation of the literal 1)."""
    return lax.neg(_F32(1.0))


def _const_sqrt(value: float):
    """A traced constant square root plus a dtype conversion, as in the reference."""
    return lax.convert_element_type(jnp.sqrt(value), _F32)


def _normal_cdf_forward(d):
    """Phi(d) = (1 + erf(d / sqrt 2)) / 2 with the forward-sweep local partials.

    Returns Phi(d), dz/dd, dPhi/dz (erf') -- the partials the reverse sweep uses.
    Unused partials are evaluated too, as in the reference's forward sweep.
    """
    sqrt2 = _const_sqrt(2.0)
    _ = 0.5 / sqrt2  # d sqrt2 (unused)
    z = d / sqrt2
    dz_dd = 1.0 / sqrt2
    _ = -d / sqrt2**2  # dz / d sqrt2 (unused)
    e = lax.erf(z)
    sqrtpi = _const_sqrt(np.pi)
    de_dz = 2.0 * jnp.exp(-(z**2)) / sqrtpi
    o = e + 1.0
    phi = o / 2.0
    _ = -o / 4.0  # d phi / d 2 (unused)
    return phi, dz_dd, de_dz


def _black_scholes_forward_sweep(S, K, r, sigma, T) -> SimpleNamespace:
    """The Black-76 call price's primal ops and their local partials, by name."""
    # ---- (a) forward sweep: primal ops and their local partials ----
    f = r * T
    g = jnp.exp(f)
    F = g * S
    i = F / K
    di_dF = 1.0 / K
    di_dK = -F / K**2
    ell = jnp.log(i)
    dl_di = 1.0 / i
    p = sigma**2
    dp_dsigma = 2.0 * lax.integer_pow(sigma, 1)
    s = p / 2.0
    _ = -p / 4.0  # ds / d2 (unused)
    u = s * T
    v = ell + u
    w = jnp.sqrt(T)
    dw_dT = 0.5 / w
    y = sigma * w
    d1 = v / y
    dd1_dv = 1.0 / y
    dd1_dy = -v / y**2
    w2 = jnp.sqrt(T)
    dw2_dT = 0.5 / w2
    y2 = sigma * w2
    d2 = d1 - y2
    dd2_dy2 = _minus_one()
    nu = -r
    dnu_dr = _minus_one()
    t = nu * T
    D = jnp.exp(t)
    phi1, dz1_dd1, de1_dz1 = _normal_cdf_forward(d1)
    A = F * phi1
    phi2, dz2_dd2, de2_dz2 = _normal_cdf_forward(d2)
    B = K * phi2
    C = A - B
    dC_dB = _minus_one()
    _ = D * C  # the price V (unused)
    return SimpleNamespace(**locals())


def _black_scholes_reverse_sweep(fw: SimpleNamespace):
    """The adjoints of the forward sweep's values, from the price back to the inputs."""
    (C, D, dC_dB, phi2, K, de2_dz2, dz2_dd2, phi1, F, de1_dz1, dz1_dd1, T, nu, dnu_dr, dd2_dy2, w2, sigma, dw2_dT, dd1_dv, dd1_dy, w, dw_dT, s, dp_dsigma, dl_di, di_dF, di_dK, S, g, r) = (
        fw.C, fw.D, fw.dC_dB, fw.phi2, fw.K, fw.de2_dz2, fw.dz2_dd2, fw.phi1, fw.F, fw.de1_dz1, fw.dz1_dd1, fw.T, fw.nu, fw.dnu_dr, fw.dd2_dy2, fw.w2, fw.sigma, fw.dw2_dT, fw.dd1_dv, fw.dd1_dy, fw.w, fw.dw_dT, fw.s, fw.dp_dsigma, fw.dl_di, fw.di_dF, fw.di_dK, fw.S, fw.g, fw.r)
    V_bar = 1.0
    # V = D * C
    D_bar = V_bar * C
    C_bar = V_bar * D
    # C = A - B
    A_bar = C_bar * 1.0
    B_bar = C_bar * dC_dB
    # B = K * phi2
    K_bar = B_bar * phi2
    phi2_bar = B_bar * K
    # phi2 = (erf(d2 / sqrt2) + 1) / 2
    o2_bar = phi2_bar * 0.5
    e2_bar = o2_bar * 1.0
    z2_bar = e2_bar * de2_dz2
    d2_bar = z2_bar * dz2_dd2
    # A = F * phi1
    F_bar = A_bar * phi1
    phi1_bar = A_bar * F
    # phi1
    o1_bar = phi1_bar * 0.5
    e1_bar = o1_bar * 1.0
    z1_bar = e1_bar * de1_dz1
    d1_bar = z1_bar * dz1_dd1
    # D = exp(t)
    t_bar = D_bar * D
    # t = nu * T
    nu_bar = t_bar * T
    T_bar = t_bar * nu
    # nu = -r
    r_bar = nu_bar * dnu_dr
    # d2 = d1 - y2
    d1_bar = d1_bar + d2_bar * 1.0
    y2_bar = d2_bar * dd2_dy2
    # y2 = sigma * w2
    sigma_bar = y2_bar * w2
    w2_bar = y2_bar * sigma
    # w2 = sqrt(T)
    T_bar = T_bar + w2_bar * dw2_dT
    # d1 = v / y
    v_bar = d1_bar * dd1_dv
    y_bar = d1_bar * dd1_dy
    # y = sigma * w
    sigma_bar = sigma_bar + y_bar * w
    w_bar = y_bar * sigma
    # w = sqrt(T)
    T_bar = T_bar + w_bar * dw_dT
    # v = ell + u
    ell_bar = v_bar * 1.0
    u_bar = v_bar * 1.0
    # u = s * T
    s_bar = u_bar * T
    T_bar = T_bar + u_bar * s
    # s = p / 2
    p_bar = s_bar * 0.5
    # p = sigma^2
    sigma_bar = sigma_bar + p_bar * dp_dsigma
    # ell = log(i)
    i_bar = ell_bar * dl_di
    # i = F / K
    F_bar = F_bar + i_bar * di_dF
    K_bar = K_bar + i_bar * di_dK
    # F = g * S
    g_bar = F_bar * S
    S_bar = F_bar * g
    # g = exp(f)
    f_bar = g_bar * g
    # f = r * T
    r_bar = r_bar + f_bar * T
    T_bar = T_bar + f_bar * r
    return S_bar, K_bar, r_bar, sigma_bar, T_bar


def _black_scholes_greeks_sample(S, K, r, sigma, T):
    """Gradient of the Black-76 call price, written out as a forward sweep of
    local partials and a reverse sweep of adjoints (no jax.grad)."""
    return _black_scholes_reverse_sweep(_black_scholes_forward_sweep(S, K, r, sigma, T))


black_scholes_jacobian = jax.vmap(_black_scholes_greeks_sample)


def black_scholes_price(S, K, r, sigma, T):
    """The Black-76 call price V(S, K, r, sigma, T) (per sample, scalars)."""
    F = jnp.exp(r * T) * S
    sqT = jnp.sqrt(T)
    d1 = (jnp.log(F / K) + (sigma**2 / 2.0) * T) / (sigma * sqT)
    d2 = d1 - sigma * sqT

    def cdf(z):
        return (1.0 + lax.erf(z / np.sqrt(2.0))) / 2.0

    return jnp.exp(-r * T) * (F * cdf(d1) - K * cdf(d2))


# ---------------------------------------------------------------------------
# 2.7 MLP
# ---------------------------------------------------------------------------


def _softmax_rows(x):
    """Softmax over the last axis with a (stop-gradient) max shift."""
    m = lax.stop_gradient(jnp.max(x, axis=-1, keepdims=True))
    e = jnp.exp(x - m)
    return e / jnp.sum(e, axis=-1, keepdims=True)


def _mlp_sample(x, y, W1, b1, W2, b2, gamma, beta):
    """2-layer perceptron with layer norm, softmax and cross-entropy loss."""
    a1 = jnp.tanh(W1 @ x + b1)
    mu = jnp.sum(a1) / 8.0
    var = jnp.sum((a1 - mu) ** 2) / 8.0
    a1n = (a1 - mu) / jnp.sqrt(var + 1e-6) * gamma + beta
    o = jnp.tanh(W2 @ a1n + b2)
    q = _softmax_rows(o)
    return -jnp.sum(y * jnp.log(q))


mlp = jax.vmap(_mlp_sample, in_axes=(0, 0, None, None, None, None, None, None))


# ---------------------------------------------------------------------------
# 2.8 Transformer encoder
# ---------------------------------------------------------------------------


def _encoder_block(X, WQ, WK, WV, W, b, gamma, beta):
    Q = WQ @ X
    K = WK @ X
    V = WV @ X
    A = Q.T @ K
    P = _softmax_rows(A)
    R = X + P @ V
    # layer norm with the reference's broadcasting: row means, subtracted
    # along the last axis; C is recomputed
    mu = jnp.sum(R, axis=-1) / 4.0
    s = jnp.sum((R - mu) ** 2, axis=-1) / 4.0
    N = (R - mu) / jnp.sqrt(s + 1e-6)
    Ln = N * gamma + beta
    H = W @ Ln + b
    return H * (1.0 / (jnp.exp(-H) + 1.0))  # SiLU with the sigmoid written out


def encoder(X, Y, WQ1, WQ2, WK1, WK2, WV1, WV2, W1, W2, b1, b2, g0, be0, g1, be1):
    """Two-block transformer encoder with a row-wise softmax cross-entropy loss."""
    Z1 = _encoder_block(X, WQ1, WK1, WV1, W1, b1, g0, be0)
    Z2 = _encoder_block(Z1, WQ2, WK2, WV2, W2, b2, g1, be1)
    return -jnp.sum(Y * jnp.log(_softmax_rows(Z2)), axis=-1)


# ---------------------------------------------------------------------------
# 2.9 RandomF: the project's fixed random tensor function
# ---------------------------------------------------------------------------


def _dg(lhs, rhs, lhs_axis: int, rhs_axis: int):
    """dot_general contracting one axis of each operand, no batch axes."""
    return lax.dot_general(lhs, rhs, (((lhs_axis,), (rhs_axis,)), ((), ())))


def random_f(x, A, B, c):
    """A fixed random-style tensor function: inputs (4,), (2,3), (4,4), (4,1);
    five outputs of shapes (4,1), (4,4), (2,3), (1,1), (1,4).

    Every op stays in its domain for any inputs of moderate size (the example
    inputs are uniform in [0, 1)): square roots get arguments >= 1 or a sum of
    squares plus a positive literal, arccos gets a logistic value in (0, 1/2],
    divisions are by such square roots.
    """
    # vector/matrix trunk
    xc = x.reshape(4, 1)
    t1 = B @ xc  # (4,1)
    t2 = jnp.sin(t1 - c)
    t3 = _dg(B, t2, 0, 0)  # B^T t2, (4,1)
    t4 = jnp.sqrt(jnp.cosh(t3))
    t5 = _dg(xc, t4, 1, 1)  # outer product, (4,4)
    t6 = jnp.tanh(t5 + B)

    # (2,3) branch
    a1 = A.reshape(3, 2)
    a2 = jnp.arcsinh(A @ a1)  # (2,2)
    a3 = jnp.cos(a2.T - a2)
    a4 = a3.reshape(4, 1)
    a5 = (t6 @ a4) ** 2  # (4,1)
    n1 = jnp.sqrt(jnp.sum(a5).reshape(1, 1) + 1.0)
    out_vec = a5 / n1  # (4,1)

    # matrix branch
    m1 = lax.logistic(_dg(t6, B, 0, 0))  # t6^T B, (4,4)
    m2 = jnp.arctan(m1 - t6)
    m3 = m2 @ t6
    r1 = jnp.sum(m3**2, axis=0)  # (4,)
    r2 = jnp.sqrt(r1 + 0.5).reshape(1, 4)
    m4 = _dg(t4, r2, 1, 0)  # (4,1) x (1,4) -> (4,4)
    out_mat = m4 - m3

    # reductions
    mx = lax.stop_gradient(jnp.max(m3))
    mn = jnp.min(m4)
    sp = jnp.exp(mn - mx)

    # (2,3) output
    b1 = lax.slice(t6, (0, 0), (3, 2))  # (3,2)
    b2 = _dg(b1, A, 0, 1)  # (2,2)
    b3 = jnp.arcsinh(b2) * sp
    b4 = b3 @ A  # (2,3)
    out_A = jnp.sinh(b4) + A

    # (1,1) output
    v1 = jnp.abs(jnp.sum(c) - jnp.sum(x))
    v2 = jnp.arccos(lax.logistic(-v1))
    v4 = v2.reshape(1, 1) @ x.reshape(1, 4)  # (1,4)
    v5 = _dg(v4, t6, 1, 1)  # (1,4)
    v7 = (jnp.cos(v5) ** 2).reshape(4, 1)
    v8 = _dg(v7, a5, 0, 0)  # (1,1)
    v9 = jnp.arctan(v8 * mn)
    out_s = jnp.sqrt(v9**2 + 1.0)

    # (1,4) output
    w1 = jnp.cosh((-t4).reshape(2, 2))
    w3 = _dg(w1, a3, 1, 1)  # (2,2)
    w5 = jnp.sqrt(jnp.sum(w3**2) + 2.0)
    out_row = (w3 / w5).reshape(1, 4) + x.reshape(1, 4)
    return out_vec, out_mat, out_A, out_s, out_row


# ---------------------------------------------------------------------------
# 2.10 RandomG: the project's fixed random scalar function
# ---------------------------------------------------------------------------


def _random_g_sample(x0, x1, x2, x3, x4, x5, x6, x7, x8, x9, x10, x11, x12, x13, x14):
    """A fixed random-style scalar function: 15 inputs, 20 outputs.

    Meant for positive inputs (example: all 0.15). Every pow base is positive
    for positive inputs (an atan2 of positive values, a power, a quotient or a
    product of positive values); differences of inputs, which vanish at the
    example, only feed exponents, atan2 numerators, cos/sin/atan/sinh/asinh or
    sums, never a denominator or a pow base; the atanh and asin arguments lie
    in (0, 1) at and near the example.
    """
    atan2, pw = jnp.arctan2, jnp.power
    # first layer: from the inputs
    a1 = atan2(x0, x1)  # in (0, pi/2)
    a2 = pw(x2, x3)  # in (0, 1)
    a3 = atan2(x4, x5)
    a4 = pw(x6, x7)
    a5 = x8 / x9
    a6 = x10 - x11  # may vanish
    a7 = pw(x12, x13)
    a8 = x14 * x0
    a9 = atan2(x2, x14)
    a10 = x3 - x5  # may vanish

    # second layer
    b1 = pw(a1, a2)
    b2 = atan2(a6, a5)
    b3 = pw(a5, a6)
    b4 = jnp.arctanh(a2 * a7)
    b5 = a3 / a4
    b6 = atan2(a8, a7)
    b7 = pw(a9, a10)
    b8 = jnp.tan(a3)
    b9 = jnp.cos(a6)
    b10 = a1 + a9
    b11 = atan2(x6 - x8, b10)
    b12 = pw(b5, x9 - x12)
    b13 = jnp.exp(a10) / b10
    b14 = jnp.arcsin(a2 * x11)
    b15 = jnp.square(a1) - a4
    b16 = atan2(x13, x7 * x4)

    # outputs
    o1 = (b1 - b4) / (a5 + b10)
    o2 = atan2(b2 - b11, b5 * a4)
    o3 = pw(b5 / a7, b3 - a10)
    o4 = (b6 - b2) / (b10 + a2)
    o5 = b7 * b8 / atan2(a4, a9)
    o6 = atan2(b9, pw(b1, a6))
    o7 = pw(b10 / a3, b2 * a6)
    o8 = b8 - b3 / atan2(x4, x12)
    o9 = jnp.arctan(a10) + b6 + atan2(b13, a5)
    o10 = atan2(jnp.sin(a10) - b7, b9)
    o11 = pw(b13, b11) - b14
    o12 = (b12 - b6) / pw(b7, b15)
    o13 = atan2(jnp.arcsinh(a6), b13) - atan2(b16, a1)
    o14 = jnp.arctanh(b14 * a2) / (b12 + b3)
    o15 = pw(b16, jnp.sinh(b11)) * pw(b4, a1)
    o16 = atan2(b15, pw(a7, b2)) - a8 / b13
    o17 = jnp.log(pw(b6, b16) + b9) / b1
    o18 = atan2(jnp.tan(b16), -b3) + b12 * a1
    o19 = jnp.arctan(b11) * jnp.cos(b2) - jnp.square(b5)
    o20 = jnp.arctanh(pw(b1 / b10, pw(b3, a2))) / atan2(b13, x1 - x10)
    return (o1, o2, o3, o4, o5, o6, o7, o8, o9, o10,
            o11, o12, o13, o14, o15, o16, o17, o18, o19, o20)


random_g = jax.vmap(_random_g_sample)


# ---------------------------------------------------------------------------
# The examples
# ---------------------------------------------------------------------------


def _scalars(*values: float) -> tuple:
    return tuple(_scalar(v) for v in values)


def _batched(*arrays) -> tuple:
    """Add a leading batch axis of size 1."""
    return tuple(jnp.asarray(a, dtype=_F32)[None] for a in arrays)


_DRAW = 256  # one draw size for every task, so jax.random compiles only once


def _normal_arrays(seed: int, shapes) -> list:
    """Random normal arrays of the given shapes from ``PRNGKey(seed)``.

    One draw of ``_DRAW`` numbers is cut into the shapes in order (this keeps
    import fast: a single small XLA compilation serves every task).
    """
    flat = np.asarray(jax.random.normal(jax.random.PRNGKey(seed), (_DRAW,), _F32))
    out, start = [], 0
    for shape in shapes:
        size = int(np.prod(shape))
        out.append(jnp.asarray(flat[start : start + size].reshape(shape)))
        start += size
    assert start <= _DRAW
    return out


def _mlp_args() -> tuple:
    y, W1, b1, W2, b2 = _normal_arrays(1234, [(1, 4), (8, 4), (8,), (4, 8), (4,)])
    x = jnp.ones((1, 4), _F32)
    return (x, y, W1, b1, W2, b2, _weak_scalar(0.0), _weak_scalar(1.0))


def _encoder_args() -> tuple:
    shapes = [(2, 4)] + [(4, 4)] * 7 + [(2, 4), (4,), (2, 1)]
    Y, WQ1, WQ2, WK1, WK2, WV1, WV2, W1, W2, b1, b2 = _normal_arrays(250197, shapes)
    X = jnp.ones((4, 4), _F32)
    gb = (_weak_scalar(0.0), _weak_scalar(1.0), _weak_scalar(0.0), _weak_scalar(1.0))
    return (X, Y, WQ1, WQ2, WK1, WK2, WV1, WV2, W1, W2, b1, b2) + gb


def _random_f_args() -> tuple:
    rng = np.random.default_rng(42)
    shapes = [(4,), (2, 3), (4, 4), (4, 1)]
    return tuple(jnp.asarray(rng.uniform(size=s).astype(np.float32)) for s in shapes)


def _build() -> tuple[Example, ...]:
    return (
        Example(
            "RoeFlux_1d",
            roe_flux_1d,
            _scalars(0.01, 0.02, 0.02, 0.01, 0.03, 0.03),
            "published",
            "Roe's approximate Riemann solver flux for the 1-D Euler equations "
            "(P. L. Roe, J. Comput. Phys. 43, 1981), gamma = 0.5 as in the AlphaGrad reference.",
        ),
        Example(
            "RoeFlux_3d",
            roe_flux_3d,
            _batched([0.1], [0.1, 0.2, 0.3], [0.5], [0.2], [0.2, 0.2, 0.4], [0.6]),
            "published",
            "Roe's approximate Riemann solver flux for the 3-D Euler equations "
            "(P. L. Roe, 1981), vmapped with batch 1.",
        ),
        Example(
            "RobotArm_6DOF",
            robot_arm_6dof,
            _scalars(*([0.02] * 6)),
            "published",
            "Forward kinematics of a 6-DOF industrial robot arm: end-effector position "
            "and three orientation angles (DH-style model cited by the AlphaGrad reference).",
        ),
        Example(
            "HumanHeartDipole",
            human_heart_dipole,
            _scalars(*([0.15] * 8)),
            "published",
            "Residual of the human heart dipole system from the MINPACK-2 test "
            "problem collection (Averick, Carter, More & Xue, 1992).",
        ),
        Example(
            "PropaneCombustion",
            propane_combustion,
            _scalars(*([0.15] * 11)),
            "published",
            "Residual of the full-formulation propane combustion system from MINPACK-2 "
            "(Meintjes & Morgan, ACM TOMS 1990), equilibrium constants set to 1.",
        ),
        Example(
            "BlackScholes_Jacobian",
            black_scholes_jacobian,
            _batched(1.0, 1.0, 1.0, 1.0, 1.0),
            "published",
            "First-order Greeks of the Black-Scholes (1973) call price in Black-76 form, "
            "as a hand-written forward sweep of local partials plus reverse sweep; vmapped with batch 1.",
        ),
        Example(
            "MLP",
            mlp,
            _mlp_args(),
            "published",
            "Two-layer tanh perceptron with layer norm and a softmax cross-entropy loss, "
            "from the AlphaGrad benchmarks (Lohoff & Neftci, NeurIPS 2024); vmapped with batch 1.",
        ),
        Example(
            "Encoder",
            encoder,
            _encoder_args(),
            "published",
            "Two-block transformer encoder (single-head attention, layer norm, SiLU) with a "
            "row-wise softmax cross-entropy loss, from the AlphaGrad benchmarks (Lohoff & Neftci, NeurIPS 2024).",
        ),
        Example(
            "RandomF",
            random_f,
            _random_f_args(),
            "published",
            "A fixed random-style tensor function of the size and primitive mix of the "
            "AlphaGrad paper's random function f (the project's own substitute).",
        ),
        Example(
            "RandomG",
            random_g,
            _batched(*([[0.15]] * 15)),
            "published",
            "A fixed random-style scalar function (15 inputs, 20 outputs) of the size and "
            "primitive mix of the AlphaGrad paper's random function g (the project's own substitute); vmapped with batch 1.",
        ),
    )


EXAMPLES: tuple[Example, ...] = _build()
