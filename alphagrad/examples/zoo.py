"""More benchmark functions: real computations from many fields, as plain JAX.

Every function here traces with :func:`alphagrad.trace`: no control flow (loops are
unrolled in Python, branches are ``jnp.where``), no sorting, no linear solves (small
matrix inverses are written out by cofactors), no convolutions (they are sums of
shifted slices times weights) and no ``jnp.stack`` (its ``stack`` primitive has no
Jacobian rule; :func:`_stack` concatenates reshaped pieces instead).

Where a computation has a natural size (grid points, hidden width, joints, bodies,
batch), several sizes are separate entries named ``<Base>_<size>``. Example
arguments are float32 arrays drawn from a fixed NumPy generator per entry, scaled to
lie well inside each function's domain, so values and Jacobians are finite.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from alphagrad.examples import Example

_F32 = jnp.float32


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------


def _stack(xs, axis: int = 0):
    """``jnp.stack`` written as a concatenation of reshaped pieces."""
    xs = [jnp.asarray(x) for x in xs]
    return jnp.concatenate([jnp.expand_dims(x, axis) for x in xs], axis=axis)


def _scalar(value: float) -> jax.Array:
    return jnp.asarray(value, dtype=_F32)


def _scalars(*values: float) -> tuple:
    return tuple(_scalar(v) for v in values)


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def _f32(a) -> jax.Array:
    return jnp.asarray(np.asarray(a, dtype=np.float32))


def _normal(rng, shape, scale: float = 1.0) -> jax.Array:
    return _f32(scale * rng.standard_normal(shape))


def _uniform(rng, shape, lo: float, hi: float) -> jax.Array:
    return _f32(rng.uniform(lo, hi, size=shape))


def _sigmoid(x, steepness: float = 1.0):
    return jax.nn.sigmoid(steepness * x)


def _phi(z):
    """Standard normal CDF through erf."""
    return 0.5 * (1.0 + lax.erf(z / math.sqrt(2.0)))


def _rk4(f, y, dt):
    """One classical Runge-Kutta step of ``y' = f(y)`` for a tuple state ``y``."""
    k1 = f(y)
    k2 = f(tuple(a + 0.5 * dt * k for a, k in zip(y, k1)))
    k3 = f(tuple(a + 0.5 * dt * k for a, k in zip(y, k2)))
    k4 = f(tuple(a + dt * k for a, k in zip(y, k3)))
    return tuple(
        a + (dt / 6.0) * (p + 2.0 * q + 2.0 * r + s)
        for a, p, q, r, s in zip(y, k1, k2, k3, k4)
    )


# ===========================================================================
# MINPACK-2 (Averick, Carter, More & Xue, "The MINPACK-2 test problem
# collection", ANL/MCS-TM-150, 1992)
# ===========================================================================


def driven_cavity(psi, reynolds=100.0):
    """Residual of the flow in a driven cavity (MINPACK-2 ``dfdcfj``).

    The stream function ``psi`` on the ``n x n`` interior grid of the unit square
    satisfies ``lap^2 psi - R (psi_y (lap psi)_x - psi_x (lap psi)_y) = 0`` with
    ``psi = 0`` on the walls, zero normal derivative on the walls and ``psi_y = 1``
    on the moving lid (ghost points carry the derivative conditions).
    """
    n = psi.shape[0]
    h = 1.0 / (n + 1)
    p = jnp.pad(psi, 1)  # walls: psi = 0, (n+2, n+2)
    # ghost points one cell outside the walls: mirror images (d psi / dn = 0),
    # lid at y = 1 (last axis): psi_ghost = psi_inner + 2 h
    p = jnp.concatenate([p[1:2, :], p, p[n : n + 1, :]], axis=0)
    p = jnp.concatenate([p[:, 1:2], p, p[:, n : n + 1] + 2.0 * h], axis=1)
    # Laplacian on the interior and the walls, (n+2, n+2)
    c = p[1:-1, 1:-1]
    lap = (p[2:, 1:-1] + p[:-2, 1:-1] + p[1:-1, 2:] + p[1:-1, :-2] - 4.0 * c) / h**2
    # biharmonic on the interior
    lc = lap[1:-1, 1:-1]
    bih = (lap[2:, 1:-1] + lap[:-2, 1:-1] + lap[1:-1, 2:] + lap[1:-1, :-2] - 4.0 * lc) / h**2
    # convective term with central differences
    psi_x = (p[3:-1, 2:-2] - p[1:-3, 2:-2]) / (2.0 * h)
    psi_y = (p[2:-2, 3:-1] - p[2:-2, 1:-3]) / (2.0 * h)
    lap_x = (lap[2:, 1:-1] - lap[:-2, 1:-1]) / (2.0 * h)
    lap_y = (lap[1:-1, 2:] - lap[1:-1, :-2]) / (2.0 * h)
    return bih - reynolds * (psi_y * lap_x - psi_x * lap_y)


def _fe_triangles(p):
    """Lower and upper triangle vertex values of a padded grid ``p`` (MINPACK-2 style).

    Lower triangle at (i, j): v = p[i, j], right p[i+1, j], top p[i, j+1];
    upper triangle at (i+1, j+1): v = p[i+1, j+1], left p[i, j+1], bottom p[i+1, j].
    """
    lower = (p[:-1, :-1], p[1:, :-1], p[:-1, 1:])
    upper = (p[1:, 1:], p[:-1, 1:], p[1:, :-1])
    return lower, upper


def solid_fuel_ignition(u, lam=5.0):
    """Bratu objective of MINPACK-2 ``dsfifg`` on the interior grid ``u``.

    ``f(u) = area * sum_triangles (0.5 |grad u|^2 - lam * mean(exp u))`` with piecewise
    linear elements on the lower and upper triangles and ``u = 0`` on the boundary.
    """
    n = u.shape[0]
    h = 1.0 / (n + 1)
    (v, vr, vt), (w, wl, wb) = _fe_triangles(jnp.pad(u, 1))
    dvdx = (vr - v) / h
    dvdy = (vt - v) / h
    fquad = jnp.sum(dvdx**2 + dvdy**2)
    fexp = -jnp.sum(jnp.exp(v) + jnp.exp(vr) + jnp.exp(vt)) / 3.0
    dwdx = (w - wl) / h
    dwdy = (w - wb) / h
    fquad = fquad + jnp.sum(dwdx**2 + dwdy**2)
    fexp = fexp - jnp.sum(jnp.exp(w) + jnp.exp(wl) + jnp.exp(wb)) / 3.0
    area = 0.5 * h * h
    return area * (0.5 * fquad + lam * fexp)


def elastic_plastic_torsion(u, c=5.0):
    """Elastic-plastic torsion objective of MINPACK-2 ``dtorfg`` (unconstrained part).

    ``f(u) = area * sum_triangles (0.5 |grad u|^2 - c * mean(u))``, u = 0 on the boundary.
    """
    n = u.shape[0]
    h = 1.0 / (n + 1)
    (v, vr, vt), (w, wl, wb) = _fe_triangles(jnp.pad(u, 1))
    dvdx = (vr - v) / h
    dvdy = (vt - v) / h
    fquad = jnp.sum(dvdx**2 + dvdy**2)
    flin = jnp.sum(v + vr + vt) / 3.0
    dwdx = (w - wl) / h
    dwdy = (w - wb) / h
    fquad = fquad + jnp.sum(dwdx**2 + dwdy**2)
    flin = flin + jnp.sum(w + wl + wb) / 3.0
    area = 0.5 * h * h
    return area * (0.5 * fquad - c * flin)


def minimal_surface(u):
    """Minimal surface area of MINPACK-2 ``dmsafg``: sum over triangles of
    ``area * sqrt(1 + |grad u|^2)``, with boundary data ``1 - (2x - 1)^2`` on the
    bottom and top edges and 0 on the sides (a simple stand-in for Enneper's surface)."""
    n = u.shape[0]
    h = 1.0 / (n + 1)
    x = np.linspace(0.0, 1.0, n + 2)
    edge = (1.0 - (2.0 * x - 1.0) ** 2).astype(np.float32)  # along the first axis
    p = jnp.pad(u, 1)
    p = p + jnp.asarray(np.outer(edge, [1.0] + [0.0] * n + [1.0]).astype(np.float32))
    (v, vr, vt), (w, wl, wb) = _fe_triangles(p)
    dvdx = (vr - v) / h
    dvdy = (vt - v) / h
    fl = jnp.sum(jnp.sqrt(1.0 + dvdx**2 + dvdy**2))
    dwdx = (w - wl) / h
    dwdy = (w - wb) / h
    fu = jnp.sum(jnp.sqrt(1.0 + dwdx**2 + dwdy**2))
    area = 0.5 * h * h
    return area * (fl + fu)


def lennard_jones_cluster(x):
    """Lennard-Jones cluster energy of MINPACK-2 ``dljcfg``:
    ``sum_{i<j} r_ij^-12 - 2 r_ij^-6`` for atoms ``x`` of shape (N, 3), over all
    pairs at once (the diagonal is masked)."""
    n = x.shape[0]
    eye = np.eye(n, dtype=np.float32)
    d = x[:, None, :] - x[None, :, :]
    r2 = jnp.sum(d * d, axis=-1) + eye  # 1 on the diagonal: no division by zero
    inv6 = 1.0 / r2**3
    pair = inv6 * inv6 - 2.0 * inv6
    return 0.5 * jnp.sum(pair * (1.0 - eye))


def _lj_positions(n: int, seed: int) -> jax.Array:
    """Atoms on a jittered cubic lattice with spacing 1.1 (no close pairs)."""
    side = math.ceil(n ** (1.0 / 3.0))
    grid = np.array([(i, j, k) for i in range(side) for j in range(side) for k in range(side)])
    pts = 1.1 * grid[:n] + 0.05 * _rng(seed).standard_normal((n, 3))
    return _f32(pts)


# ===========================================================================
# numerics
# ===========================================================================


def chandrasekhar_h(h, c=0.9):
    """Residual of Chandrasekhar's H-equation (radiative transfer) discretised by the
    midpoint rule on N nodes, as in Kelley's nonlinear-solver test problem:
    ``F_i = h_i - 1 / (1 - c/(2N) sum_j mu_i h_j / (mu_i + mu_j))``."""
    n = h.shape[0]
    mu = (np.arange(1, n + 1) - 0.5) / n
    A = (mu[:, None] / (mu[:, None] + mu[None, :])).astype(np.float32)
    sums = [jnp.sum(A[i] * h) for i in range(n)]  # the row loop of the residual
    s = _stack(sums)
    return h - 1.0 / (1.0 - (c / (2.0 * n)) * s)


def lorenz63_rk4(x, y, z, dt=0.01):
    """One RK4 step of the Lorenz (1963) system, sigma = 10, rho = 28, beta = 8/3."""
    sigma, rho, beta = 10.0, 28.0, 8.0 / 3.0

    def f(s):
        x, y, z = s
        return sigma * (y - x), x * (rho - z) - y, x * y - beta * z

    return _rk4(f, (x, y, z), dt)


def lorenz96_rk4(x, forcing=8.0, dt=0.01):
    """One RK4 step of the Lorenz (1996) model
    ``dx_i/dt = (x_{i+1} - x_{i-2}) x_{i-1} - x_i + F`` on a periodic ring."""

    def f(s):
        (x,) = s
        return ((jnp.roll(x, -1) - jnp.roll(x, 2)) * jnp.roll(x, 1) - x + forcing,)

    return _rk4(f, (x,), dt)[0]


def heat_equation_ftcs(u, steps=3, alpha=0.2):
    """Three explicit (FTCS) steps of the 2-D heat equation: the 5-point Laplacian
    stencil with zero Dirichlet boundary, ``u += alpha * (sum of neighbours - 4u)``."""
    for _ in range(steps):
        p = jnp.pad(u, 1)
        lap = p[2:, 1:-1] + p[:-2, 1:-1] + p[1:-1, 2:] + p[1:-1, :-2] - 4.0 * u
        u = u + alpha * lap
    return u


def helmholtz_energy(x, b, A):
    """Helmholtz free energy of a mixed fluid (Griewank & Walter, *Evaluating
    Derivatives*, 2nd ed., 2008): ``R T sum x_i log(x_i / (1 - b'x)) -
    x'Ax / (sqrt(8) b'x) log((1 + (1 + sqrt 2) b'x) / (1 + (1 - sqrt 2) b'x))``."""
    RT = 8.314 * 273.0
    bx = jnp.dot(b, x)
    xAx = jnp.dot(x, A @ x)
    s2 = math.sqrt(2.0)
    term1 = RT * jnp.sum(x * jnp.log(x / (1.0 - bx)))
    term2 = xAx / (math.sqrt(8.0) * bx) * jnp.log((1.0 + (1.0 + s2) * bx) / (1.0 + (1.0 - s2) * bx))
    return term1 - term2


def _helmholtz_args(n: int, seed: int) -> tuple:
    rng = _rng(seed)
    x = rng.uniform(0.1, 1.0, n)
    b = rng.uniform(0.1, 1.0, n)
    x = x / (2.0 * float(b @ x))  # b'x = 0.5
    A = rng.uniform(0.0, 1.0, (n, n))
    return (_f32(x), _f32(b), _f32(0.5 * (A + A.T)))


def lighthouse(nu, gamma, omega, t1, t2, t3, t4):
    """The lighthouse example of Griewank & Walter (*Evaluating Derivatives*, ch. 2):
    where the beam of a lighthouse at distance nu from a straight quay wall of slope
    gamma, turning at rate omega, hits the wall, at four times."""
    out = []
    for t in (t1, t2, t3, t4):
        tan = jnp.tan(omega * t)
        y1 = nu * tan / (gamma - tan)
        y2 = gamma * nu * tan / (gamma - tan)
        out += [y1, y2]
    return tuple(out)


# ===========================================================================
# physics
# ===========================================================================


def kerr_metric(M, a, r, theta):
    """Non-zero Boyer-Lindquist components of the Kerr metric (Kerr 1963) and its
    Kretschmann invariant ``R_abcd R^abcd`` at (r, theta), mass M, spin a (G = c = 1)."""
    cos = jnp.cos(theta)
    sin2 = jnp.sin(theta) ** 2
    sigma = r**2 + a**2 * cos**2
    delta = r**2 - 2.0 * M * r + a**2
    g_tt = -(1.0 - 2.0 * M * r / sigma)
    g_tphi = -2.0 * M * a * r * sin2 / sigma
    g_rr = sigma / delta
    g_thth = sigma
    g_phph = (r**2 + a**2 + 2.0 * M * r * a**2 * sin2 / sigma) * sin2
    ac2 = a**2 * cos**2
    kretschmann = (
        48.0 * M**2 * (r**2 - ac2) * (r**4 - 14.0 * r**2 * ac2 + ac2**2) / sigma**6
    )
    return g_tt, g_tphi, g_rr, g_thth, g_phph, kretschmann


def pendulum_rk4(theta, omega, t, dt=0.05):
    """One RK4 step of the damped, driven pendulum
    ``theta'' = -(g/L) sin theta - gamma theta' + A cos(Omega t)``."""
    g_over_l, damping, amp, drive = 9.81, 0.3, 1.2, 2.0 / 3.0

    def f(s):
        th, om, tt = s
        acc = -g_over_l * jnp.sin(th) - damping * om + amp * jnp.cos(drive * tt)
        return om, acc, jnp.ones_like(tt)

    return _rk4(f, (theta, omega, t), dt)


def double_pendulum_rk4(theta1, theta2, omega1, omega2, dt=0.01):
    """One RK4 step of the planar double pendulum with equal point masses on equal
    massless rods (g / l = 9.81), equations of motion from its Lagrangian."""
    g = 9.81  # g / l

    def f(s):
        t1, t2, w1, w2 = s
        d = t1 - t2
        sd, cd = jnp.sin(d), jnp.cos(d)
        w1s, w2s = w1**2, w2**2
        den = 3.0 - jnp.cos(2.0 * d)
        a1 = (-3.0 * g * jnp.sin(t1) - g * jnp.sin(t1 - 2.0 * t2) - 2.0 * sd * (w2s + w1s * cd)) / den
        a2 = 2.0 * sd * (2.0 * w1s + 2.0 * g * jnp.cos(t1) + w2s * cd) / den
        return w1, w2, a1, a2

    return _rk4(f, (theta1, theta2, omega1, omega2), dt)


def nbody_rk4(x, v, m, dt=0.01, eps=0.1):
    """One RK4 step of a softened Newtonian N-body system (G = 1): positions and
    velocities (N, 3), masses (N,)."""

    def acc(x):
        d = x[None, :, :] - x[:, None, :]  # d[i, j] = x_j - x_i
        r2 = jnp.sum(d * d, axis=-1) + eps**2
        w = m[None, :] * r2 ** (-1.5)
        return jnp.einsum("ij,ijk->ik", w, d)

    def f(s):
        x, v = s
        return v, acc(x)

    return _rk4(f, (x, v), dt)


def _nbody_args(n: int, seed: int) -> tuple:
    rng = _rng(seed)
    return (_normal(rng, (n, 3)), _normal(rng, (n, 3), 0.3), _uniform(rng, (n,), 0.5, 1.5))


def shallow_water_rusanov(h, hu, g=9.81, dt=0.01, dx=0.1):
    """One finite-volume step of the 1-D shallow water equations with the Rusanov
    (local Lax-Friedrichs) flux and reflective walls."""
    # ghost cells: reflective walls (h mirrored, hu mirrored with a sign flip)
    H = jnp.concatenate([h[:1], h, h[-1:]])
    HU = jnp.concatenate([-hu[:1], hu, -hu[-1:]])
    u = HU / H
    f1 = HU
    f2 = HU * u + 0.5 * g * H**2
    c = jnp.abs(u) + jnp.sqrt(g * H)
    a = jnp.maximum(c[:-1], c[1:])
    F1 = 0.5 * (f1[:-1] + f1[1:]) - 0.5 * a * (H[1:] - H[:-1])
    F2 = 0.5 * (f2[:-1] + f2[1:]) - 0.5 * a * (HU[1:] - HU[:-1])
    h_new = h - dt / dx * (F1[1:] - F1[:-1])
    hu_new = hu - dt / dx * (F2[1:] - F2[:-1])
    return h_new, hu_new


def _shallow_water_args(n: int) -> tuple:
    x = np.linspace(0.0, 1.0, n)
    h = 1.0 + 0.5 * np.exp(-((x - 0.5) ** 2) / 0.01)
    hu = 0.1 * np.sin(2.0 * np.pi * x)
    return (_f32(h), _f32(hu))


def neo_hookean_energy(F, mu=1.0, lam=2.0):
    """Total compressible neo-Hookean strain energy of a batch of deformation
    gradients F (B, 3, 3): ``mu/2 (I1 - 3) - mu ln J + lam/2 (ln J)^2``."""
    f = [[F[:, i, j] for j in range(3)] for i in range(3)]
    J = (
        f[0][0] * (f[1][1] * f[2][2] - f[1][2] * f[2][1])
        - f[0][1] * (f[1][0] * f[2][2] - f[1][2] * f[2][0])
        + f[0][2] * (f[1][0] * f[2][1] - f[1][1] * f[2][0])
    )
    I1 = jnp.sum(F * F, axis=(1, 2))
    lnJ = jnp.log(J)
    return jnp.sum(0.5 * mu * (I1 - 3.0) - mu * lnJ + 0.5 * lam * lnJ**2)


def kepler_orbit(a, e, inc, raan, argp, M):
    """Position of a body on a Kepler orbit from its classical elements: Kepler's
    equation ``E - e sin E = M`` by six Newton steps, then the 3-1-3 rotation
    (argument of periapsis, inclination, node) of the perifocal position."""
    E = M + e * jnp.sin(M)
    for _ in range(6):
        E = E - (E - e * jnp.sin(E) - M) / (1.0 - e * jnp.cos(E))
    xp = a * (jnp.cos(E) - e)
    yp = a * jnp.sqrt(1.0 - e**2) * jnp.sin(E)
    cO, sO = jnp.cos(raan), jnp.sin(raan)
    cw, sw = jnp.cos(argp), jnp.sin(argp)
    ci, si = jnp.cos(inc), jnp.sin(inc)
    x = (cO * cw - sO * sw * ci) * xp + (-cO * sw - sO * cw * ci) * yp
    y = (sO * cw + cO * sw * ci) * xp + (-sO * sw + cO * cw * ci) * yp
    z = (sw * si) * xp + (cw * si) * yp
    return x, y, z


# ===========================================================================
# climate and ocean
# ===========================================================================


def kessler_microphysics(qv, qc, qr, T, dt=10.0, dz=250.0):
    """One step of Kessler (1969) warm-rain microphysics on a column: autoconversion
    ``k1 (qc - a)^+``, accretion ``k2 qc qr^0.875``, rain evaporation and terminal
    velocity after Klemp & Wilhelmson (1978) in the form of the DCMIP ``kessler``
    routine, and upwind rain sedimentation (explicit rates, no saturation adjustment)."""
    nz = qv.shape[0]
    z = (np.arange(nz) + 0.5) * dz
    rho = _f32(1.2 * np.exp(-z / 8000.0))  # air density profile, kg m^-3
    pc = _f32(3.8 / (1000.0 * np.exp(-z / 8000.0)))  # 3.8 / pressure in hPa
    r = 0.001 * rho  # density in g cm^-3
    qvs = pc * jnp.exp(17.27 * (T - 273.0) / (T - 36.0))  # saturation mixing ratio
    auto = 1e-3 * jnp.maximum(qc - 1e-3, 0.0)
    accr = 2.2 * qc * qr**0.875
    rq = r * qr
    vent = 1.6 + 124.9 * rq**0.2046
    evap = vent * rq**0.525 / (2.55e8 / (pc * qvs) + 5.4e5) * jnp.maximum(qvs - qv, 0.0) / (r * qvs)
    vt = 36.34 * rq**0.1364 * jnp.sqrt(rho[0] / rho)  # terminal velocity, m s^-1
    flux = rho * qr * vt
    # rain falls out of the column bottom; nothing enters at the top
    flux_above = jnp.concatenate([flux[1:], jnp.zeros((1,), _F32)])
    sed = (flux_above - flux) / (rho * dz)
    qc_new = qc - dt * (auto + accr)
    qr_new = qr + dt * (auto + accr - evap + sed)
    qv_new = qv + dt * evap
    T_new = T - dt * (2.5e6 / 1004.0) * evap
    return qv_new, qc_new, qr_new, T_new


def _kessler_args(nz: int, seed: int) -> tuple:
    rng = _rng(seed)
    z = (np.arange(nz) + 0.5) * 250.0
    T = 295.0 - 6.5e-3 * z
    qv = 0.012 * np.exp(-z / 3000.0) * rng.uniform(0.8, 1.0, nz)
    qc = rng.uniform(2e-4, 2e-3, nz)
    qr = rng.uniform(1e-5, 1e-3, nz)
    return (_f32(qv), _f32(qc), _f32(qr), _f32(T))


def seawater_density(S, T):
    """Density of seawater at one atmosphere, EOS-80 (UNESCO 1981; Millero & Poisson
    1981), in kg m^-3, for salinity S (psu) and temperature T (deg C)."""
    rho_w = (
        999.842594
        + 6.793952e-2 * T
        - 9.095290e-3 * T**2
        + 1.001685e-4 * T**3
        - 1.120083e-6 * T**4
        + 6.536332e-9 * T**5
    )
    A = 8.24493e-1 - 4.0899e-3 * T + 7.6438e-5 * T**2 - 8.2467e-7 * T**3 + 5.3875e-9 * T**4
    B = -5.72466e-3 + 1.0227e-4 * T - 1.6546e-6 * T**2
    C = 4.8314e-4
    return rho_w + A * S + B * S**1.5 + C * S**2


# ===========================================================================
# robotics
# ===========================================================================

# Denavit-Hartenberg tables (a, d, alpha) per joint.
# Elbow manipulator (Spong, Hutchinson & Vidyasagar, Robot Modeling and Control):
_DH_ELBOW = [(0.0, 0.4, math.pi / 2), (0.5, 0.0, 0.0), (0.4, 0.0, 0.0)]
# PUMA 560, first four joints (standard DH, Corke's parameters):
_DH_PUMA4 = [
    (0.0, 0.0, math.pi / 2),
    (0.4318, 0.0, 0.0),
    (0.0203, 0.15005, -math.pi / 2),
    (0.0, 0.4318, math.pi / 2),
]
# Franka Emika Panda (modified / Craig DH: a_{i-1}, d_i, alpha_{i-1}); flange d = 0.107.
_DH_PANDA = [
    (0.0, 0.333, 0.0),
    (0.0, 0.0, -math.pi / 2),
    (0.0, 0.316, math.pi / 2),
    (0.0825, 0.0, math.pi / 2),
    (-0.0825, 0.384, -math.pi / 2),
    (0.0, 0.0, math.pi / 2),
    (0.088, 0.0, math.pi / 2),
]


def _dh_matrices(a, d, alpha, modified: bool):
    """Constant matrices C, S, K with ``T(theta) = cos(theta) C + sin(theta) S + K``.

    Every entry of a DH link transform is linear in (cos theta, sin theta)."""
    ca, sa = math.cos(alpha), math.sin(alpha)
    C = np.zeros((4, 4)); S = np.zeros((4, 4)); K = np.zeros((4, 4))
    if not modified:  # Rz(theta) Tz(d) Tx(a) Rx(alpha)
        C[0, 0], S[0, 1], S[0, 2], C[0, 3] = 1.0, -ca, sa, a
        S[1, 0], C[1, 1], C[1, 2], S[1, 3] = 1.0, ca, -sa, a
        K[2, 1], K[2, 2], K[2, 3] = sa, ca, d
    else:  # Rx(alpha) Tx(a) Rz(theta) Tz(d)
        C[0, 0], S[0, 1], K[0, 3] = 1.0, -1.0, a
        S[1, 0], C[1, 1], K[1, 2], K[1, 3] = ca, ca, -sa, -d * sa
        S[2, 0], C[2, 1], K[2, 2], K[2, 3] = sa, sa, ca, d * ca
    K[3, 3] = 1.0
    return tuple(np.asarray(m, np.float32) for m in (C, S, K))


def _dh_arm(table, modified: bool, flange: float = 0.0):
    consts = [_dh_matrices(a, d, alpha, modified) for a, d, alpha in table]

    def fk(*thetas):
        T = None
        for th, (C, S, K) in zip(thetas, consts):
            A = jnp.cos(th) * C + jnp.sin(th) * S + K
            T = A if T is None else T @ A
        if flange:
            T = T @ jnp.asarray(np.array(
                [[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, flange], [0, 0, 0, 1]], np.float32))
        return T[:3, 3], T[:3, :3]

    return fk


dh_arm_3 = _dh_arm(_DH_ELBOW, modified=False)
dh_arm_4 = _dh_arm(_DH_PUMA4, modified=False)
dh_arm_7 = _dh_arm(_DH_PANDA, modified=True, flange=0.107)


def _quaternion_rate_tensor() -> np.ndarray:
    """E with ``(q (x) (0, w))_i = sum_jk E[i, j, k] q_j w_k`` (Hamilton product)."""
    E = np.zeros((4, 4, 3), np.float32)
    for k in range(3):
        E[0, k + 1, k] = -1.0  # -q_v . w
        E[k + 1, 0, k] = 1.0  # q0 w
    for i, j, k in ((0, 1, 2), (1, 2, 0), (2, 0, 1)):  # q_v x w
        E[i + 1, j + 1, k] = 1.0
        E[i + 1, k + 1, j] = -1.0
    return E


def rigid_body_quaternion_rk4(q, w, dt=0.01):
    """One RK4 step of a torque-free rigid body: Euler's equations for the body rates
    w (3,) and unit-quaternion kinematics ``q' = q (x) (0, w) / 2`` for q (4,), then
    renormalisation."""
    inertia = np.array([1.0, 2.0, 3.0], np.float32)
    coef = (np.roll(inertia, -1) - np.roll(inertia, -2)) / inertia  # (I2 - I3) / I1, ...
    E = _quaternion_rate_tensor()

    def f(s):
        q, w = s
        dq = 0.5 * jnp.einsum("ijk,j,k->i", E, q, w)
        dw = coef * jnp.roll(w, -1) * jnp.roll(w, -2)  # Euler's equations
        return dq, dw

    q, w = _rk4(f, (q, w), dt)
    return q / jnp.sqrt(jnp.sum(q * q)), w


# ===========================================================================
# control
# ===========================================================================


def _inv2(S):
    """Inverse of a 2x2 matrix by cofactors."""
    a, b, c, d = S[0, 0], S[0, 1], S[1, 0], S[1, 1]
    det = a * d - b * c
    return _stack([_stack([d, -b]), _stack([-c, a])]) / det


def _inv3(S):
    """Inverse of a 3x3 matrix by cofactors (adjugate over determinant)."""
    s = [[S[i, j] for j in range(3)] for i in range(3)]

    def cof(i, j):
        r = [k for k in range(3) if k != i]
        c = [k for k in range(3) if k != j]
        minor = s[r[0]][c[0]] * s[r[1]][c[1]] - s[r[0]][c[1]] * s[r[1]][c[0]]
        return minor if (i + j) % 2 == 0 else -minor

    C = [[cof(i, j) for j in range(3)] for i in range(3)]
    det = s[0][0] * C[0][0] + s[0][1] * C[0][1] + s[0][2] * C[0][2]
    adj = _stack([_stack([C[j][i] for j in range(3)]) for i in range(3)])  # transpose
    return adj / det


def _kalman_step(x, P, z, F, Q, H, R, inv):
    x = F @ x
    P = F @ P @ F.T + Q
    S = H @ P @ H.T + R
    K = P @ H.T @ inv(S)
    x = x + K @ (z - H @ x)
    P = (jnp.eye(P.shape[0], dtype=_F32) - K @ H) @ P
    return x, P


def _cv_model(dim: int, dt=0.1, q=0.01, r=0.1):
    """Constant-velocity model in ``dim`` dimensions, position measurements."""
    n = 2 * dim
    F = np.eye(n); F[:dim, dim:] = dt * np.eye(dim)
    G = np.vstack([0.5 * dt**2 * np.eye(dim), dt * np.eye(dim)])
    Q = q * G @ G.T
    H = np.hstack([np.eye(dim), np.zeros((dim, dim))])
    R = r * np.eye(dim)
    return tuple(jnp.asarray(m, _F32) for m in (F, Q, H, R))


def kalman_cv2d(x, P, z):
    """One predict-update step of a Kalman filter (Kalman 1960) for a 2-D
    constant-velocity target with position measurements (2x2 innovation inverse)."""
    F, Q, H, R = _cv_model(2)
    return _kalman_step(x, P, z, F, Q, H, R, _inv2)


def kalman_cv3d(x, P, z):
    """One predict-update step of a Kalman filter for a 3-D constant-velocity target
    with position measurements (3x3 innovation inverse by cofactors)."""
    F, Q, H, R = _cv_model(3)
    return _kalman_step(x, P, z, F, Q, H, R, _inv3)


def _kalman_args(dim: int, seed: int) -> tuple:
    rng = _rng(seed)
    n = 2 * dim
    L = rng.standard_normal((n, n)) * 0.3
    P = L @ L.T + np.eye(n)
    return (_normal(rng, (n,)), _f32(P), _normal(rng, (dim,)))


def cartpole_rk4(x, x_dot, theta, theta_dot, force, dt=0.02):
    """One RK4 step of the cart-pole (Barto, Sutton & Anderson 1983; equations as in
    OpenAI Gym's CartPole) under a constant horizontal force."""
    g, m_cart, m_pole, half_len = 9.8, 1.0, 0.1, 0.5
    m_total = m_cart + m_pole

    def f(s):
        _x, xd, th, thd = s
        cos, sin = jnp.cos(th), jnp.sin(th)
        temp = (force + m_pole * half_len * thd**2 * sin) / m_total
        th_acc = (g * sin - cos * temp) / (half_len * (4.0 / 3.0 - m_pole * cos**2 / m_total))
        x_acc = temp - m_pole * half_len * th_acc * cos / m_total
        return xd, x_acc, thd, th_acc

    return _rk4(f, (x, x_dot, theta, theta_dot), dt)


# ===========================================================================
# neuroscience
# ===========================================================================


def lif_network(v, W, I, beta=0.9, threshold=1.0, steepness=5.0):
    """Leaky integrate-and-fire network, T steps unrolled (I has shape (T, n)):
    ``v <- beta v + (1 - beta)(W s + I_t) - threshold s`` (soft reset) with smooth
    spikes ``s = sigmoid(k (v - threshold))``. Returns the final potential and spike counts."""
    s = _sigmoid(v - threshold, steepness)
    count = s
    for t in range(I.shape[0]):
        v = beta * v + (1.0 - beta) * (W @ s + I[t]) - threshold * s
        s = _sigmoid(v - threshold, steepness)
        count = count + s
    return v, count


def alif_network(v, a, W, I, beta=0.9, rho=0.95, b_adapt=0.5, threshold=1.0, steepness=5.0):
    """Adaptive LIF network (Bellec et al., "Long short-term memory and learning-to-learn
    in networks of spiking neurons", 2018): the threshold ``threshold + b a`` rises with
    each spike, ``a <- rho a + s``; smooth spikes as in :func:`lif_network`."""
    A = threshold + b_adapt * a
    s = _sigmoid(v - A, steepness)
    count = s
    for t in range(I.shape[0]):
        a = rho * a + (1.0 - rho) * s
        v = beta * v + (1.0 - beta) * (W @ s + I[t]) - A * s
        A = threshold + b_adapt * a
        s = _sigmoid(v - A, steepness)
        count = count + s
    return v, a, count


def _lif_args(n: int, steps: int, seed: int, adaptive: bool) -> tuple:
    rng = _rng(seed)
    v = _uniform(rng, (n,), 0.0, 1.2)
    W = _normal(rng, (n, n), 1.0 / math.sqrt(n))
    I = _uniform(rng, (steps, n), 0.5, 2.0)
    if adaptive:
        return (v, _uniform(rng, (n,), 0.0, 0.5), W, I)
    return (v, W, I)


# ===========================================================================
# machine learning
# ===========================================================================


def lstm(xs, h, c, W, U, b):
    """An LSTM (Hochreiter & Schmidhuber 1997, with forget gate) over T steps; gates
    i, f, g, o from ``W x_t + U h + b`` (W: (4H, D), U: (4H, H))."""
    H = h.shape[0]
    for t in range(xs.shape[0]):
        z = W @ xs[t] + U @ h + b
        i = jax.nn.sigmoid(z[:H])
        f = jax.nn.sigmoid(z[H : 2 * H])
        g = jnp.tanh(z[2 * H : 3 * H])
        o = jax.nn.sigmoid(z[3 * H :])
        c = f * c + i * g
        h = o * jnp.tanh(c)
    return h, c


def gru(xs, h, W, U, b):
    """A GRU (Cho et al. 2014) over T steps: update z, reset r, candidate n
    (W: (3H, D), U: (3H, H), b: (3H,))."""
    H = h.shape[0]
    for t in range(xs.shape[0]):
        wx = W @ xs[t] + b
        uh = U[: 2 * H] @ h
        z = jax.nn.sigmoid(wx[:H] + uh[:H])
        r = jax.nn.sigmoid(wx[H : 2 * H] + uh[H:])
        n = jnp.tanh(wx[2 * H :] + U[2 * H :] @ (r * h))
        h = (1.0 - z) * n + z * h
    return h


def _rnn_args(kind: str, hidden: int, inputs: int, steps: int, seed: int) -> tuple:
    rng = _rng(seed)
    gates = 4 if kind == "lstm" else 3
    s = 1.0 / math.sqrt(hidden)
    xs = _normal(rng, (steps, inputs))
    h = _normal(rng, (hidden,), 0.5)
    W = _normal(rng, (gates * hidden, inputs), s)
    U = _normal(rng, (gates * hidden, hidden), s)
    b = _normal(rng, (gates * hidden,), 0.1)
    if kind == "lstm":
        return (xs, h, _normal(rng, (hidden,), 0.5), W, U, b)
    return (xs, h, W, U, b)


def _make_mha(heads: int):
    def multi_head_attention(X, Wq, Wk, Wv, Wo):
        """Causal multi-head self-attention (Vaswani et al. 2017) on a sequence
        X (T, d): per-head scaled dot products, softmax, output projection."""
        T, d = X.shape
        dh = d // heads

        def split(M):  # (T, d) -> (heads, T, dh)
            return jnp.transpose(M.reshape(T, heads, dh), (1, 0, 2))

        Q, K, V = split(X @ Wq), split(X @ Wk), split(X @ Wv)
        scores = jnp.einsum("htd,hsd->hts", Q, K) / math.sqrt(dh)
        mask = np.tril(np.ones((T, T), bool))
        scores = jnp.where(mask, scores, -1e9)
        m = lax.stop_gradient(jnp.max(scores, axis=-1, keepdims=True))
        e = jnp.exp(scores - m)
        P = e / jnp.sum(e, axis=-1, keepdims=True)
        out = jnp.einsum("hts,hsd->htd", P, V)
        return jnp.transpose(out, (1, 0, 2)).reshape(T, d) @ Wo

    return multi_head_attention


def _mha_args(T: int, d: int, seed: int) -> tuple:
    rng = _rng(seed)
    s = 1.0 / math.sqrt(d)
    return (_normal(rng, (T, d)),) + tuple(_normal(rng, (d, d), s) for _ in range(4))


def layer_norm(x, gamma, beta, eps=1e-5):
    """Layer normalisation (Ba, Kiros & Hinton 2016) over the feature axis of x (B, d)."""
    d = x.shape[-1]
    mu = jnp.sum(x, axis=-1, keepdims=True) / d
    xc = x - mu
    var = jnp.sum(xc * xc, axis=-1, keepdims=True) / d
    return xc * lax.rsqrt(var + eps) * gamma + beta


def softmax_cross_entropy(X, W, b, labels, smoothing=0.1):
    """Mean softmax cross-entropy with label smoothing (Szegedy et al. 2016) of a
    linear classifier (multinomial logistic regression) on a batch X (B, D)."""
    logits = X @ W + b
    k = logits.shape[-1]
    m = lax.stop_gradient(jnp.max(logits, axis=-1, keepdims=True))
    lse = jnp.log(jnp.sum(jnp.exp(logits - m), axis=-1, keepdims=True)) + m
    logp = logits - lse
    target = (1.0 - smoothing) * labels + smoothing / k
    return -jnp.sum(target * logp) / X.shape[0]


def conv_layer(x, w, b):
    """A CNN layer: 3x3 'same' convolution written as nine shifted slices times weights,
    bias, ReLU and 2x2 average pooling. x: (C_in, H, W), w: (C_out, C_in, 3, 3)."""
    _cin, H, W_ = x.shape
    cout = w.shape[0]
    p = jnp.pad(x, ((0, 0), (1, 1), (1, 1)))
    y = None
    for di in range(3):
        for dj in range(3):
            patch = p[:, di : di + H, dj : dj + W_]  # (C_in, H, W)
            tap = lax.dot_general(w[:, :, di, dj], patch, (((1,), (0,)), ((), ())))
            y = tap if y is None else y + tap
    y = jax.nn.relu(y + b[:, None, None])
    return jnp.sum(y.reshape(cout, H // 2, 2, W_ // 2, 2), axis=(2, 4)) / 4.0


def _conv_args(cin: int, cout: int, size: int, seed: int) -> tuple:
    rng = _rng(seed)
    return (
        _normal(rng, (cin, size, size)),
        _normal(rng, (cout, cin, 3, 3), 1.0 / math.sqrt(9 * cin)),
        _normal(rng, (cout,), 0.1),
    )


def gaussian_mixture_nll(X, means, log_sigma, logits):
    """Negative log-likelihood of data X (N, D) under an isotropic Gaussian mixture
    with K components (means (K, D), log standard deviations and mixture logits (K,))."""
    D = X.shape[1]
    log_w = logits - jnp.log(jnp.sum(jnp.exp(logits)))
    d2 = jnp.sum((X[:, None, :] - means[None, :, :]) ** 2, axis=-1)  # (N, K)
    log_comp = (
        log_w
        - 0.5 * D * math.log(2.0 * math.pi)
        - D * log_sigma
        - 0.5 * d2 * jnp.exp(-2.0 * log_sigma)
    )
    m = lax.stop_gradient(jnp.max(log_comp, axis=1, keepdims=True))
    ll = jnp.log(jnp.sum(jnp.exp(log_comp - m), axis=1)) + m[:, 0]
    return -jnp.sum(ll)


def _gmm_args(n: int, k: int, seed: int) -> tuple:
    rng = _rng(seed)
    return (
        _normal(rng, (n, 2), 2.0),
        _normal(rng, (k, 2), 2.0),
        _uniform(rng, (k,), -0.5, 0.5),
        _normal(rng, (k,), 0.3),
    )


# ===========================================================================
# finance
# ===========================================================================


def black76(F, K, sigma, T, r):
    """Black (1976) prices of European calls and puts on futures, vectorised over
    options: ``e^{-rT} (F Phi(d1) - K Phi(d2))`` and the put by its own formula."""
    sq = jnp.sqrt(T)
    d1 = (jnp.log(F / K) + 0.5 * sigma**2 * T) / (sigma * sq)
    d2 = d1 - sigma * sq
    disc = jnp.exp(-r * T)
    call = disc * (F * _phi(d1) - K * _phi(d2))
    put = disc * (K * _phi(-d2) - F * _phi(-d1))
    return call, put


def _black76_args(n: int, seed: int) -> tuple:
    rng = _rng(seed)
    return (
        _uniform(rng, (n,), 80.0, 120.0),
        _uniform(rng, (n,), 80.0, 120.0),
        _uniform(rng, (n,), 0.1, 0.5),
        _uniform(rng, (n,), 0.1, 2.0),
        _uniform(rng, (n,), 0.0, 0.05),
    )


def sabr_implied_vol(F, K, T, alpha, beta, rho, nu):
    """Hagan et al. (2002) "Managing smile risk" lognormal implied volatility of the
    SABR model, vectorised over strikes/forwards/expiries (F != K)."""
    omb = 1.0 - beta
    log_fk = jnp.log(F / K)
    fk_b = (F * K) ** (0.5 * omb)
    z = nu / alpha * fk_b * log_fk
    x = jnp.log((jnp.sqrt(1.0 - 2.0 * rho * z + z**2) + z - rho) / (1.0 - rho))
    denom = fk_b * (1.0 + omb**2 / 24.0 * log_fk**2 + omb**4 / 1920.0 * log_fk**4)
    corr = 1.0 + (
        omb**2 / 24.0 * alpha**2 / fk_b**2
        + 0.25 * rho * beta * nu * alpha / fk_b
        + (2.0 - 3.0 * rho**2) / 24.0 * nu**2
    ) * T
    return alpha / denom * (z / x) * corr


def _sabr_args(n: int, seed: int) -> tuple:
    rng = _rng(seed)
    F = rng.uniform(0.02, 0.05, n)
    K = F * np.where(rng.uniform(size=n) < 0.5, 0.8, 1.25) * rng.uniform(0.95, 1.05, n)
    return (_f32(F), _f32(K), _uniform(rng, (n,), 0.5, 5.0)) + _scalars(0.03, 0.5, -0.3, 0.4)


# ===========================================================================
# graphics
# ===========================================================================


def ray_sphere_shading(dirs, center, radius, light):
    """Lambertian shading of a sphere by ray casting: rays from the origin with unit
    directions dirs (P, 3) hit the sphere where ``|t d - c| = r``; misses are black."""
    oc = -center
    b = dirs @ oc
    c = jnp.dot(oc, oc) - radius**2
    disc = b**2 - c
    hit = disc > 0.0
    t = -b - jnp.sqrt(jnp.where(hit, disc, 1.0))
    p = t[:, None] * dirs
    n = (p - center) / radius
    lam = jnp.maximum(n @ (light / jnp.sqrt(jnp.dot(light, light))), 0.0)
    return jnp.where(hit, lam, 0.0)


def _ray_args(side: int) -> tuple:
    u = np.linspace(-0.5, 0.5, side)
    gx, gy = np.meshgrid(u, u, indexing="ij")
    d = np.stack([gx.ravel(), gy.ravel(), np.ones(side * side)], axis=1)
    d = d / np.linalg.norm(d, axis=1, keepdims=True)
    return (_f32(d), _f32([0.05, -0.03, 3.0]), _scalar(1.0), _f32([1.0, 1.0, -1.0]))


# ===========================================================================
# the entries
# ===========================================================================


def _science(add) -> None:
    """The zoo's MINPACK-2, numerics, physics and chemistry, climate and ocean."""
    # --- MINPACK-2 ---
    for n in (4, 8):
        add(f"DrivenCavity_{n}", driven_cavity, (_normal(_rng(10 + n), (n, n), 0.01),), "minpack",
            f"Residual of the flow in a driven cavity (stream function, Reynolds 100) on a {n}x{n} "
            "interior grid, after MINPACK-2 dfdcfj (Averick, Carter, More & Xue 1992).")
    for n in (4, 16):
        add(f"SolidFuelIgnition_{n}", solid_fuel_ignition, (_uniform(_rng(20 + n), (n, n), 0.0, 0.5),),
            "minpack",
            f"Bratu solid fuel ignition objective (lambda = 5) on a {n}x{n} grid with linear "
            "elements on lower and upper triangles, after MINPACK-2 dsfifg.")
    add("ElasticPlasticTorsion_8", elastic_plastic_torsion, (_uniform(_rng(31), (8, 8), 0.0, 0.3),),
        "minpack",
        "Quadratic objective of the elastic-plastic torsion problem (c = 5) on an 8x8 grid, "
        "after MINPACK-2 dtorfg (bound constraints left to the optimiser).")
    add("MinimalSurface_8", minimal_surface, (_uniform(_rng(32), (8, 8), 0.0, 1.0),), "minpack",
        "Area of a piecewise linear surface over an 8x8 interior grid with fixed boundary "
        "data, the minimal surface problem of MINPACK-2 dmsafg.")
    for n in (5, 13):
        add(f"LennardJones_{n}", lennard_jones_cluster, (_lj_positions(n, 40 + n),), "minpack",
            f"Lennard-Jones energy of a cluster of {n} atoms (r^-12 - 2 r^-6), MINPACK-2 dljcfg, "
            "all pairs at once.")

    # --- numerics ---
    for n in (8, 16):
        add(f"ChandrasekharH_{n}", chandrasekhar_h, (_uniform(_rng(50 + n), (n,), 1.0, 1.5),),
            "numerics",
            f"Residual of Chandrasekhar's H-equation (c = 0.9) by the midpoint rule on {n} nodes, "
            "the nonlinear-equation test of C. T. Kelley, Iterative Methods for Linear and "
            "Nonlinear Equations (SIAM 1995).")
    add("Lorenz63_RK4", lorenz63_rk4, _scalars(1.0, 1.5, 20.0), "numerics",
        "One classical Runge-Kutta step of the Lorenz (1963) convection model.")
    for n in (10, 40):
        add(f"Lorenz96_RK4_{n}", lorenz96_rk4, (_normal(_rng(60 + n), (n,), 1.0) + 8.0,), "numerics",
            f"One RK4 step of the Lorenz (1996) atmospheric toy model on a ring of {n} variables "
            "(periodic shifts by jnp.roll).")
    for n in (8, 32):
        add(f"HeatFTCS_{n}", heat_equation_ftcs, (_uniform(_rng(70 + n), (n, n), 0.0, 1.0),), "numerics",
            f"Three explicit forward-time centred-space steps of the 2-D heat equation "
            f"(5-point Laplacian stencil) on a {n}x{n} grid.")
    add("Lighthouse", lighthouse, _scalars(3.7, 0.3, 0.8, 0.1, 0.2, 0.3, 0.4), "numerics",
        "The lighthouse example of Griewank & Walter, Evaluating Derivatives (2008), ch. 2: "
        "where a rotating beam meets a quay wall, at four times.")

    # --- physics / chemistry ---
    for n in (8, 32):
        add(f"HelmholtzEnergy_{n}", helmholtz_energy, _helmholtz_args(n, 80 + n), "chemistry",
            f"Helmholtz free energy of a mixed fluid with {n} components, the test function of Griewank & Walter, Evaluating Derivatives (2008).")
    add("KerrMetric", kerr_metric, _scalars(1.0, 0.7, 4.0, 1.1), "relativity",
        "Boyer-Lindquist components of the Kerr (1963) metric of a rotating black hole and "
        "its Kretschmann curvature invariant.")
    add("Pendulum_RK4", pendulum_rk4, _scalars(0.5, 0.1, 0.0), "physics",
        "One RK4 step of the damped, driven pendulum (a classic chaotic oscillator, e.g. "
        "Baker & Gollub, Chaotic Dynamics).")
    add("DoublePendulum_RK4", double_pendulum_rk4, _scalars(1.0, 0.5, 0.1, -0.2), "physics",
        "One RK4 step of the planar double pendulum from its Lagrangian equations of motion.")
    for n in (4, 8):
        add(f"NBody_RK4_{n}", nbody_rk4, _nbody_args(n, 90 + n), "physics",
            f"One RK4 step of a softened gravitational {n}-body system (G = 1).")
    for n in (16, 64):
        add(f"ShallowWater_{n}", shallow_water_rusanov, _shallow_water_args(n), "physics",
            f"One finite-volume step of the 1-D shallow water equations with the Rusanov "
            f"(local Lax-Friedrichs) flux on {n} cells with reflective walls.")
    F = np.eye(3) + 0.1 * _rng(100).standard_normal((8, 3, 3))
    add("NeoHookean_8", neo_hookean_energy, (_f32(F),), "mechanics",
        "Compressible neo-Hookean strain energy (Ogden, Non-linear Elastic Deformations) "
        "summed over 8 deformation gradients, determinants by cofactor expansion.")
    add("KeplerOrbit", kepler_orbit, _scalars(1.5, 0.3, 0.4, 1.0, 0.5, 2.0), "astrodynamics",
        "Position on a Kepler orbit from classical orbital elements: six Newton steps on "
        "Kepler's equation and the perifocal-to-inertial 3-1-3 rotation (Vallado, "
        "Fundamentals of Astrodynamics).")

    # --- climate / ocean ---
    for n in (16, 64):
        add(f"KesslerMicrophysics_{n}", kessler_microphysics, _kessler_args(n, 110 + n), "climate",
            f"One step of Kessler (1969) warm-rain microphysics (autoconversion, accretion, "
            f"Klemp-Wilhelmson 1978 evaporation and sedimentation) on a {n}-level column.")
    rng = _rng(120)
    add("SeawaterDensity_EOS80", seawater_density,
        (_uniform(rng, (32,), 30.0, 38.0), _uniform(rng, (32,), 0.0, 30.0)), "oceanography",
        "One-atmosphere density of seawater by the UNESCO EOS-80 polynomial "
        "(Millero & Poisson 1981) at 32 (salinity, temperature) points.")


def _engineering(add) -> None:
    """The zoo's robotics, control, neuroscience."""
    # --- robotics ---
    add("DHArm_3", dh_arm_3, _scalars(0.1, 0.2, 0.3), "robotics",
        "Forward kinematics (position and rotation) of the 3-joint elbow manipulator of "
        "Spong, Hutchinson & Vidyasagar, Robot Modeling and Control, by DH transforms.")
    add("DHArm_4", dh_arm_4, _scalars(0.1, 0.2, 0.3, 0.4), "robotics",
        "Forward kinematics of the first four joints of the PUMA 560 (standard DH "
        "parameters of Corke's Robotics Toolbox).")
    add("DHArm_7", dh_arm_7, _scalars(0.1, -0.3, 0.2, -1.5, 0.1, 1.2, 0.4), "robotics",
        "Forward kinematics of the 7-joint Franka Emika Panda arm (modified DH parameters "
        "of the manufacturer) to the flange.")
    q = np.array([0.9, 0.1, 0.3, 0.2])
    add("RigidBodyQuaternion_RK4", rigid_body_quaternion_rk4,
        (_f32(q / np.linalg.norm(q)), _f32([0.5, -1.0, 0.3])), "robotics",
        "One RK4 step of a torque-free rigid body: Euler's equations and unit-quaternion "
        "attitude kinematics, with renormalisation.")

    # --- control ---
    add("KalmanCV2D", kalman_cv2d, _kalman_args(2, 130), "control",
        "Predict-update step of the Kalman (1960) filter for a 2-D constant-velocity target "
        "(4 states, 2 measurements; 2x2 inverse by cofactors).")
    add("KalmanCV3D", kalman_cv3d, _kalman_args(3, 131), "control",
        "Predict-update step of the Kalman filter for a 3-D constant-velocity target "
        "(6 states, 3 measurements; 3x3 inverse by cofactors).")
    add("CartPole_RK4", cartpole_rk4, _scalars(0.0, 0.1, 0.05, -0.1, 1.0), "control",
        "One RK4 step of the cart-pole dynamics of Barto, Sutton & Anderson (1983), as in "
        "OpenAI Gym's CartPole.")

    # --- neuroscience ---
    for n in (8, 32):
        add(f"LIF_{n}", lif_network, _lif_args(n, 4, 140 + n, False), "neuro",
            f"Four steps of a recurrent network of {n} leaky integrate-and-fire neurons with "
            "soft reset and sigmoid (surrogate-free smooth) spikes.")
        add(f"ALIF_{n}", alif_network, _lif_args(n, 4, 150 + n, True), "neuro",
            f"Four steps of {n} adaptive LIF neurons with a spike-driven threshold, as in the "
            "LSNN of Bellec et al. (NeurIPS 2018), smooth sigmoid spikes.")


def _learning_finance_graphics(add) -> None:
    """The zoo's machine learning, finance, graphics."""
    # --- machine learning ---
    for h in (8, 32):
        add(f"LSTM_h{h}", lstm, _rnn_args("lstm", h, 4, 3, 160 + h), "ml",
            f"An LSTM cell (Hochreiter & Schmidhuber 1997, forget gate of Gers et al. 2000) run "
            f"for 3 steps, hidden width {h}.")
        add(f"GRU_h{h}", gru, _rnn_args("gru", h, 4, 3, 170 + h), "ml",
            f"A GRU cell (Cho et al. 2014) run for 3 steps, hidden width {h}.")
    add("MultiHeadAttention_h2", _make_mha(2), _mha_args(4, 16, 180), "ml",
        "Causal multi-head self-attention (Vaswani et al. 2017), 2 heads, d = 16, 4 tokens.")
    add("MultiHeadAttention_h4", _make_mha(4), _mha_args(8, 32, 181), "ml",
        "Causal multi-head self-attention (Vaswani et al. 2017), 4 heads, d = 32, 8 tokens.")
    for d in (16, 64):
        rng = _rng(190 + d)
        add(f"LayerNorm_d{d}", layer_norm,
            (_normal(rng, (8, d)), _uniform(rng, (d,), 0.5, 1.5), _normal(rng, (d,), 0.1)), "ml",
            f"Layer normalisation (Ba, Kiros & Hinton 2016) of a batch of 8 vectors of width {d}.")
    rng = _rng(200)
    labels = np.eye(10)[rng.integers(0, 10, 16)]
    add("SoftmaxCrossEntropy", softmax_cross_entropy,
        (_normal(rng, (16, 12)), _normal(rng, (12, 10), 0.3), _normal(rng, (10,), 0.1), _f32(labels)),
        "ml",
        "Mean softmax cross-entropy with label smoothing 0.1 (Szegedy et al. 2016) of a linear "
        "classifier, batch 16, 10 classes.")
    add("ConvLayer_8", conv_layer, _conv_args(3, 4, 8, 210), "ml",
        "A CNN layer (3x3 same convolution as shifted slices times weights, bias, ReLU, 2x2 "
        "average pooling), 3 -> 4 channels on 8x8 (LeCun et al. 1998 style).")
    add("ConvLayer_16", conv_layer, _conv_args(4, 8, 16, 211), "ml",
        "The same CNN layer, 4 -> 8 channels on 16x16.")
    add("GaussianMixtureNLL_16", gaussian_mixture_nll, _gmm_args(16, 3, 220), "statistics",
        "Negative log-likelihood of 16 points in 2-D under a 3-component isotropic Gaussian "
        "mixture (log-sum-exp over components).")
    add("GaussianMixtureNLL_64", gaussian_mixture_nll, _gmm_args(64, 4, 221), "statistics",
        "The Gaussian-mixture negative log-likelihood with 64 points and 4 components.")

    # --- finance ---
    for n in (16, 256):
        add(f"Black76_{n}", black76, _black76_args(n, 230 + n), "finance",
            f"Black (1976) call and put prices of {n} European options on futures.")
    add("SABR_16", sabr_implied_vol, _sabr_args(16, 240), "finance",
        "SABR implied volatilities of 16 options by the asymptotic formula of Hagan, Kumar, "
        "Lesniewski & Woodward, Managing Smile Risk (Wilmott 2002), beta = 0.5.")

    # --- graphics ---
    for side in (8, 32):
        add(f"RaySphere_{side}", ray_sphere_shading, _ray_args(side), "graphics",
            f"Ray casting and Lambertian shading of a sphere on a {side}x{side} image "
            "(ray-sphere intersection by the quadratic formula, misses masked).")


def _build() -> tuple[Example, ...]:
    ex = []

    def add(name, fn, args, family, description):
        ex.append(Example(name, fn, tuple(args), family, description))

    for section in (_science, _engineering, _learning_finance_graphics):
        section(add)
    return tuple(ex)


EXAMPLES: tuple[Example, ...] = _build()
