"""Tests of the extended benchmark zoo (alphagrad.examples.zoo).

Compilation dominates on CPU. alphagrad's Jacobian of every entry is checked in the
default run by one compiled function per entry under JAX's default XLA settings (a
separate process, since ``conftest.py`` turns XLA's optimisations down for everything
else): it is finite, and contracted with random tangents it equals ``jax.jvp`` (a wrong
entry changes the product almost surely). The full comparison with ``jax.jacrev`` and the
engine cost of every entry run under ``-m slow``.
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import alphagrad as ag
from alphagrad import engine
from alphagrad.evaluator import Evaluator
from alphagrad.examples import Example, all_examples, get, published, real, zoo
from alphagrad.interpreter import jacobian

ZOO = {e.name: e for e in zoo.EXAMPLES}
NAMES = list(ZOO)

_SIZE_SUFFIX = re.compile(r"_[a-z]?\d+$")  # "_8", "_h32", "_d64"


def base_name(name: str) -> str:
    """The computation an entry belongs to: its name without the size suffix."""
    return _SIZE_SUFFIX.sub("", name)


def _computations() -> dict:
    """(family, base name) -> entry names, in zoo order."""
    out: dict = {}
    for e in zoo.EXAMPLES:
        out.setdefault((e.family, base_name(e.name)), []).append(e.name)
    return out


COMPUTATIONS = _computations()
# a few small graphs for the cost and interpreter checks (each compiles afresh)
QUICK_COST = ["Lorenz63_RK4", "DHArm_3"]
QUICK_JACOBIAN = ["Pendulum_RK4", "HeatFTCS_8", "DHArm_4"]


def _leaves(tree):
    return jax.tree_util.tree_leaves(tree)


def _all_finite(tree) -> bool:
    leaves = _leaves(tree)
    return bool(leaves) and all(np.all(np.isfinite(np.asarray(x))) for x in leaves)


@functools.lru_cache(maxsize=None)
def _graph(name):
    e = ZOO[name]
    return ag.trace(e.fn, *e.args)


def _argnums(e: Example) -> tuple:
    return tuple(range(len(e.args)))


# ---------------------------------------------------------------------------
# registry
# ---------------------------------------------------------------------------


def test_names_unique_and_valid():
    names = [e.name for e in all_examples()]
    assert len(set(names)) == len(names)
    assert all(n.isidentifier() for n in names)
    assert len(NAMES) >= 20


def test_all_examples_lists_published_then_zoo_then_real():
    listed, want = all_examples(), list(published.EXAMPLES) + list(zoo.EXAMPLES) + list(real.EXAMPLES)
    assert len(listed) == len(want) and all(a is b for a, b in zip(listed, want))
    assert get("LSTM_h8") is ZOO["LSTM_h8"]


def test_metadata():
    for e in zoo.EXAMPLES:
        assert isinstance(e, Example)
        assert e.family and e.family.isidentifier() and e.family != "published", e.name
        assert isinstance(e.description, str) and len(e.description) > 20, e.name
        assert isinstance(e.args, tuple) and e.args, e.name
        for a in _leaves(e.args):
            assert isinstance(a, jax.Array), e.name
            assert a.dtype == jnp.float32, e.name


def test_at_least_20_distinct_computations():
    assert len(COMPUTATIONS) >= 20, sorted(COMPUTATIONS)
    assert len({family for family, _ in COMPUTATIONS}) >= 8


def test_sizes_share_a_base_name_and_family():
    assert base_name("LSTM_h32") == "LSTM" and base_name("Lorenz63_RK4") == "Lorenz63_RK4"
    for (family, base), names in COMPUTATIONS.items():
        assert all(ZOO[n].family == family for n in names)


# ---------------------------------------------------------------------------
# every entry traces and runs; Jacobians are finite
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_traces(name):
    g = _graph(name)
    assert 1 <= len(g.intermediates) <= 500, len(g.intermediates)
    # the engine can encode it: under its vertex limit, no single product over 2**31
    # multiplications (a 128-point mixture had one)
    engine.encode(g)


@pytest.mark.parametrize("name", NAMES)
def test_runs_with_finite_outputs(name):
    # finite Jacobians: every entry's, in test_every_jacobian_under_default_xla_settings
    e = ZOO[name]
    assert _all_finite(jax.jit(e.fn)(*e.args)), name


@pytest.mark.parametrize("name", NAMES)
def test_reverse_cost_is_positive(name):
    # the compiled CPU evaluator (the same rule tables as alphagrad.cost; tests/
    # test_engine.py checks they agree): no compilation per graph
    g = _graph(name)
    c = Evaluator(g).cost(ag.baselines.reverse(g))
    assert isinstance(c, int) and c > 0


@pytest.mark.parametrize("name", QUICK_COST)
def test_alphagrad_cost_is_a_positive_int(name):
    g = _graph(name)
    c = ag.cost(g, "rev")
    assert isinstance(c, int) and c > 0
    assert c == Evaluator(g).cost(ag.baselines.reverse(g))


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_alphagrad_cost_is_a_positive_int_everywhere(name):
    c = ag.cost(_graph(name), "rev")
    assert isinstance(c, int) and c > 0


def _check_against_jacrev(name):
    # jacrev op by op: with jax/jaxlib 0.10.2 on CPU, jax.jit(jax.jacrev(f)) of a layer
    # norm over (8, 64) returns wrong entries (LayerNorm_d64; eager jacrev, jacfwd and
    # float64 agree with each other and with alphagrad)
    e = ZOO[name]
    want = jax.jacrev(e.fn, argnums=_argnums(e))(*e.args)
    got = jacobian(e.fn, "rev", argnums=_argnums(e))(*e.args)
    assert jax.tree_util.tree_structure(got) == jax.tree_util.tree_structure(want)
    for g, w in zip(_leaves(got), _leaves(want)):
        w = np.asarray(w, np.float64)
        scale = max(1.0, float(np.abs(w).max()))
        # float32 rounding: RaySphere_32 has grazing rays (1/sqrt of a small discriminant)
        np.testing.assert_allclose(np.asarray(g, np.float64) / scale, w / scale, atol=5e-4)


@pytest.mark.parametrize("name", QUICK_JACOBIAN)
def test_alphagrad_jacobian_matches_jacrev(name):
    _check_against_jacrev(name)


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_alphagrad_jacobian_matches_jacrev_everywhere(name):
    _check_against_jacrev(name)


# ---------------------------------------------------------------------------
# every entry's Jacobian under JAX's default XLA settings (in a separate process)
# ---------------------------------------------------------------------------

#: Largest error of a projection, relative to max(1, largest entry of the reference).
PROJECTION_TOL = 1e-3


def _projection(e: Example, order="rev", seed=0):
    """alphagrad's Jacobian of ``e`` in ``order`` and, in the same compiled function,
    ``jax.jvp`` along random tangents ``u``. Returns ``(J, u, Ju)``."""
    rng = np.random.default_rng(seed)
    u = jax.tree_util.tree_map(lambda a: rng.standard_normal(a.shape).astype(np.float32), e.args)
    J = jacobian(e.fn, order, argnums=_argnums(e))
    jac, Ju = jax.jit(lambda *args: (J(*args), jax.jvp(e.fn, args, u)[1]))(*e.args)
    return jac, u, Ju


def _projection_error(jac, u, Ju) -> float:
    """Largest difference between ``jac`` contracted with ``u`` and ``Ju``, relative to
    max(1, largest entry of ``Ju``), per output leaf. ``jac`` is in jacrev's layout: one
    block per (output leaf, argument leaf), output-major, of shape output shape +
    argument shape."""
    f64 = lambda t: [np.asarray(x, np.float64) for x in jax.tree_util.tree_leaves(t)]
    J, U, JU = f64(jac), f64(u), f64(Ju)
    assert len(J) == len(JU) * len(U)
    err = 0.0
    for o, ref in enumerate(JU):
        blocks = J[o * len(U):(o + 1) * len(U)]
        assert [b.shape for b in blocks] == [ref.shape + ui.shape for ui in U], o
        got = sum(np.tensordot(b, ui, axes=ui.ndim) for b, ui in zip(blocks, U))
        err = max(err, float(np.abs(got - ref).max(initial=0.0)) / max(1.0, float(np.abs(ref).max(initial=0.0))))
    return err


def default_xla_main() -> None:
    """Run in a fresh process (no conftest.py): every zoo entry's projection check,
    one JSON line each."""
    print(json.dumps({"disable_most_optimizations": bool(jax.config.read("jax_disable_most_optimizations"))}),
          flush=True)
    for e in zoo.EXAMPLES:
        try:
            jac, u, Ju = _projection(e)
            print(json.dumps({"name": e.name, "finite": _all_finite((jac, Ju)),
                              "error": _projection_error(jac, u, Ju)}), flush=True)
        except Exception as exc:  # noqa: BLE001 - reported per entry
            print(json.dumps({"name": e.name, "exception": f"{type(exc).__name__}: {exc}"[:500]}), flush=True)


DEFAULT_XLA_TEST = "test_every_jacobian_under_default_xla_settings"


@pytest.fixture(scope="module", autouse=True)
def default_xla_process(request, tmp_path_factory):
    """Starts the default-XLA check when the module starts (it runs beside the other tests
    of this module, on the second core) if its test is selected."""
    if not any(item.name == DEFAULT_XLA_TEST for item in request.session.items):
        yield None
        return
    out = tmp_path_factory.mktemp("default_xla")
    env = {k: v for k, v in os.environ.items() if k not in ("JAX_DISABLE_MOST_OPTIMIZATIONS", "XLA_FLAGS")}
    env["JAX_PLATFORMS"] = "cpu"
    here = os.path.dirname(os.path.abspath(__file__))
    code = f"import sys; sys.path.insert(0, {here!r}); import test_zoo; test_zoo.default_xla_main()"
    with open(out / "stdout", "w") as stdout, open(out / "stderr", "w") as stderr:
        proc = subprocess.Popen([sys.executable, "-c", code], cwd=os.path.dirname(here), env=env,
                                stdout=stdout, stderr=stderr)
    try:
        yield proc, out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_every_jacobian_under_default_xla_settings(default_xla_process):
    proc, out = default_xla_process
    rc = proc.wait(timeout=900)
    assert rc == 0, (out / "stderr").read_text()[-3000:]
    lines = [json.loads(line) for line in (out / "stdout").read_text().splitlines()]
    assert lines[0] == {"disable_most_optimizations": False}
    results = {r["name"]: r for r in lines[1:]}
    assert list(results) == NAMES
    failed = {n: r.get("exception", r.get("error")) for n, r in results.items()
              if "exception" in r or not r["finite"] or not r["error"] <= PROJECTION_TOL}
    assert not failed, failed


@pytest.mark.parametrize("name", QUICK_JACOBIAN)
def test_projection_check_sees_a_wrong_entry(name):
    """The projection check (in this process) passes, and fails when one entry of the
    Jacobian is off by 1% of the largest."""
    jac, u, Ju = _projection(ZOO[name])
    assert _projection_error(jac, u, Ju) <= PROJECTION_TOL
    leaves, tree = jax.tree_util.tree_flatten(jac)
    rng = np.random.default_rng(1)
    k = max(range(len(leaves)), key=lambda i: np.abs(np.asarray(leaves[i])).max(initial=0))
    bad = np.array(leaves[k], np.float64)
    idx = tuple(rng.integers(0, n) for n in bad.shape)
    bad[idx] += 0.01 * max(1.0, np.abs(bad).max())
    leaves = leaves[:k] + [bad] + leaves[k + 1:]
    assert _projection_error(jax.tree_util.tree_unflatten(tree, leaves), u, Ju) > PROJECTION_TOL


# ---------------------------------------------------------------------------
# the computations are what they say (cheap independent references)
# ---------------------------------------------------------------------------


def _dh_standard(theta, a, d, alpha):
    ct, st, ca, sa = math.cos(theta), math.sin(theta), math.cos(alpha), math.sin(alpha)
    return np.array(
        [[ct, -st * ca, st * sa, a * ct], [st, ct * ca, -ct * sa, a * st], [0, sa, ca, d], [0, 0, 0, 1]]
    )


def _dh_modified(theta, a, d, alpha):
    ct, st, ca, sa = math.cos(theta), math.sin(theta), math.cos(alpha), math.sin(alpha)
    return np.array(
        [[ct, -st, 0, a], [st * ca, ct * ca, -sa, -d * sa], [st * sa, ct * sa, ca, d * ca], [0, 0, 0, 1]]
    )


@pytest.mark.parametrize(
    "name,table,modified",
    [("DHArm_3", zoo._DH_ELBOW, False), ("DHArm_4", zoo._DH_PUMA4, False), ("DHArm_7", zoo._DH_PANDA, True)],
)
def test_dh_arms_match_the_dh_product(name, table, modified):
    e = ZOO[name]
    T = np.eye(4)
    for th, (a, d, alpha) in zip(e.args, table):
        T = T @ (_dh_modified if modified else _dh_standard)(float(th), a, d, alpha)
    if modified:
        T = T @ np.array([[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0.107], [0, 0, 0, 1]])
    pos, rot = e.fn(*e.args)
    np.testing.assert_allclose(np.asarray(pos), T[:3, 3], atol=1e-5)
    np.testing.assert_allclose(np.asarray(rot), T[:3, :3], atol=1e-5)


def test_cofactor_inverses():
    rng = np.random.default_rng(0)
    for n, inv in ((2, zoo._inv2), (3, zoo._inv3)):
        S = rng.standard_normal((n, n)) + 3 * np.eye(n)
        np.testing.assert_allclose(np.asarray(inv(jnp.asarray(S, jnp.float32))), np.linalg.inv(S), rtol=1e-4, atol=1e-5)


def test_quaternion_rate_tensor_is_the_hamilton_product():
    q0, q1, q2, q3, wx, wy, wz = 0.9, 0.1, 0.3, 0.2, 0.5, -1.0, 0.3
    want = [
        -(q1 * wx + q2 * wy + q3 * wz),
        q0 * wx + q2 * wz - q3 * wy,
        q0 * wy - q1 * wz + q3 * wx,
        q0 * wz + q1 * wy - q2 * wx,
    ]
    E = zoo._quaternion_rate_tensor()
    got = np.einsum("ijk,j,k->i", E, [q0, q1, q2, q3], [wx, wy, wz])
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_lennard_jones_matches_the_pair_loop():
    x = np.asarray(ZOO["LennardJones_5"].args[0], np.float64)
    want = 0.0
    for i in range(len(x)):
        for j in range(i + 1, len(x)):
            r2 = np.sum((x[i] - x[j]) ** 2)
            want += r2**-6 - 2 * r2**-3
    np.testing.assert_allclose(float(zoo.lennard_jones_cluster(jnp.asarray(x, jnp.float32))), want, rtol=1e-4)


def test_conv_layer_matches_lax_conv():
    x, w, b = ZOO["ConvLayer_8"].args
    y = jax.lax.conv_general_dilated(x[None], w, (1, 1), "SAME")[0]
    y = jnp.maximum(y + b[:, None, None], 0.0)
    want = y.reshape(y.shape[0], 4, 2, 4, 2).mean(axis=(2, 4))
    np.testing.assert_allclose(np.asarray(zoo.conv_layer(x, w, b)), np.asarray(want), rtol=1e-4, atol=1e-5)


def test_kerr_reduces_to_schwarzschild():
    M, r, th = 1.0, 5.0, 0.7
    g_tt, g_tphi, g_rr, g_thth, g_phph, K = (
        float(v) for v in zoo.kerr_metric(*(jnp.float32(v) for v in (M, 0.0, r, th)))
    )
    np.testing.assert_allclose([g_tt, g_tphi, g_rr, g_thth], [-(1 - 2 * M / r), 0.0, 1 / (1 - 2 * M / r), r**2], rtol=1e-5)
    np.testing.assert_allclose(g_phph, r**2 * math.sin(th) ** 2, rtol=1e-5)
    np.testing.assert_allclose(K, 48 * M**2 / r**6, rtol=1e-4)


def test_black76_put_call_parity():
    F, K, sigma, T, r = ZOO["Black76_16"].args
    call, put = zoo.black76(F, K, sigma, T, r)
    np.testing.assert_allclose(np.asarray(call - put), np.asarray(jnp.exp(-r * T) * (F - K)), atol=2e-3)


def test_seawater_density_check_value():
    # EOS-80 check value: rho(S = 35, T = 25 C, p = 0) = 1023.343 kg m^-3
    rho = zoo.seawater_density(jnp.float32(35.0), jnp.float32(25.0))
    np.testing.assert_allclose(float(rho), 1023.343, atol=2e-3)


def test_kepler_orbit_solves_keplers_equation():
    a, e, _inc, _raan, _argp, M = (float(v) for v in ZOO["KeplerOrbit"].args)
    x, y, z = (float(v) for v in zoo.kepler_orbit(*ZOO["KeplerOrbit"].args))
    E = M
    for _ in range(50):
        E = E - (E - e * math.sin(E) - M) / (1 - e * math.cos(E))
    np.testing.assert_allclose(math.sqrt(x * x + y * y + z * z), a * (1 - e * math.cos(E)), rtol=1e-5)
