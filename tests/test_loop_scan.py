"""A loop's eliminations as a lax.scan (issue 61): where the order follows an unrolled
loop the interpreter runs the iterations as one scanned body, with the same products
(the multiplications ``alphagrad.cost`` predicts) and the Jacobian of jax.jacrev; where
it does not, the unrolled program as before."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import alphagrad as ag
from alphagrad import interpreter, periodic
from alphagrad.canonical import canonical
from alphagrad.examples import real


def scan_xs(x, xs):
    def body(c, xi):
        c = jnp.sin(c) * xi + c
        return c, c * 2.0
    return jax.lax.scan(body, x, xs)


def fori(x, w, n=5):
    return jax.lax.fori_loop(0, n, lambda i, c: jnp.tanh(c * w + 0.1), x)


def invariant(x, w):
    """A loop-invariant value computed before the loop and read in every iteration."""
    v = jnp.sin(w) * 2.0
    return jax.lax.fori_loop(0, 6, lambda i, c: jnp.cos(c) * v + c, x)


def nested(x, w):
    inner = lambda c: jax.lax.fori_loop(0, 3, lambda j, d: jnp.sin(d) * w, c)
    return jax.lax.fori_loop(0, 4, lambda i, c: inner(c) + c, x)


def while_loop(x, w):
    return jax.lax.while_loop(lambda c: c[0] < 6, lambda c: (c[0] + 1, jnp.sin(c[1]) * w), (0, x))[1]


def two_carries(x, y):
    def body(i, c):
        a, b = c
        return jnp.tanh(a * b), a + jnp.sin(b)
    return jax.lax.fori_loop(0, 7, body, (x, y))


_X, _W = jnp.linspace(0.1, 0.5, 3), jnp.linspace(0.7, 0.9, 3)
_PENDULUM = real.make_pendulum_chain(n=4, steps=4)
CASES = {
    "fori": (fori, (_X, _W)),
    "fori_1": (functools.partial(fori, n=1), (_X, _W)),
    "fori_2": (functools.partial(fori, n=2), (_X, _W)),
    "invariant": (invariant, (_X, _W)),
    "nested": (nested, (_X, _W)),
    "two_carries": (two_carries, (_X, _W)),
    "while": (while_loop, (_X, _W)),
    "scan_xs": (scan_xs, (_X, jnp.linspace(0.0, 1.0, 12).reshape(4, 3))),
    "pendulum_chain": (_PENDULUM.fn, _PENDULUM.args),
}
#: Which cases run a scan in the forward and the reverse order (the others fall back).
SCANNED = {"fori", "invariant", "nested", "two_carries", "while", "pendulum_chain"}


def _close(got, want):
    assert jax.tree_util.tree_structure(got) == jax.tree_util.tree_structure(want)
    for a, b in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=2e-4, atol=2e-5)


#: The interpreter's own setting, before the fixture below replaces it.
_DEFAULT_LOOP_SCAN = interpreter.LOOP_SCAN


@pytest.fixture(autouse=True)
def _scan_small_graphs(monkeypatch):
    """These graphs are small: by default (``LOOP_SCAN = "large"``) they run unrolled."""
    monkeypatch.setattr(interpreter, "LOOP_SCAN", "always")


def _jacobian(f, order, args, scan: bool):
    old = interpreter.LOOP_SCAN
    interpreter.LOOP_SCAN = "always" if scan else "never"
    try:
        jac = interpreter.jacobian(f, order, argnums=tuple(range(len(args))))
        return jac(*args), jax.make_jaxpr(jac)(*args)
    finally:
        interpreter.LOOP_SCAN = old


def _scans(jaxpr) -> int:
    return str(jaxpr).count(" scan[")


def _executed(graph, order, args) -> int:
    """The multiplications the scan path issues (each scanned body counted per iteration)."""
    looped = interpreter._looped(graph, order)
    out = []
    jax.eval_shape(lambda leaves: out.append(looped(leaves)[2]) or 0,
                   [jnp.asarray(a) for a in jax.tree_util.tree_leaves(args)])
    return out[0]


@pytest.mark.parametrize("order", ["fwd", "rev"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_scanned_jacobian_equals_jacrev_and_the_unrolled_program(name, order):
    f, args = CASES[name]
    reference = jax.jacfwd if name == "while" else jax.jacrev  # jacrev refuses a while_loop
    want = reference(f, argnums=tuple(range(len(args))))(*args)
    got, jaxpr = _jacobian(f, order, args, scan=True)
    unrolled, plain = _jacobian(f, order, args, scan=False)
    _close(got, want)
    _close(unrolled, want)
    assert _scans(plain) == 0
    assert (_scans(jaxpr) > 0) == (name in SCANNED), jaxpr
    if name in SCANNED:
        graph = ag.trace(f, *args)
        resolved = ag.baselines.resolve_order(graph, order)
        assert _executed(graph, resolved, args) == ag.cost(graph, resolved)
        assert str(jaxpr).count("\n") <= str(plain).count("\n")  # no more equations (loops of 3-5 trips)


def test_an_order_that_does_not_follow_the_loop_stays_unrolled():
    f, args = CASES["two_carries"]
    graph = ag.trace(f, *args)
    order = [int(v) for v in np.random.default_rng(0).permutation(graph.intermediates)]
    assert interpreter._looped(graph, order) is None
    got, jaxpr = _jacobian(f, order, args, scan=True)
    assert _scans(jaxpr) == 0
    _close(got, jax.jacrev(f, argnums=tuple(range(len(args))))(*args))


@pytest.mark.parametrize("name", ["two_carries", "while", "nested"])
def test_the_primal_scan_computes_the_unrolled_values(name):
    f, args = CASES[name]
    graph = ag.trace(f, *args)
    windows = interpreter._primal_plan(graph)
    assert windows
    leaves = [jnp.asarray(a) for a in jax.tree_util.tree_leaves(args)]
    plain = interpreter._evaluate(graph, leaves, interpreter._Fusion(False, 0))
    scanned = interpreter._evaluate(graph, leaves, interpreter._Fusion(False, 0), windows)
    read = {r for e in graph.edges for r in interpreter._edge_slots(graph, e)} | set(graph.program.output_slots)
    assert read <= {s for s in plain if s in scanned}
    for slot in read:
        np.testing.assert_allclose(np.asarray(scanned[slot]), np.asarray(plain[slot]), rtol=1e-6, atol=1e-7)


def test_the_scan_runs_the_middle_iterations_and_peels_the_ends():
    """The first iteration reads the loop's initial values as local Jacobians, not as
    carried edges, and the last writes the outputs: peeled; the rest is one scan."""
    f, args = real.make_pendulum_chain(steps=16).fn, real.make_pendulum_chain(steps=16).args
    graph = ag.trace(f, *args)
    for order in ("fwd", "rev"):
        looped = interpreter._looped(graph, ag.baselines.resolve_order(graph, order))
        assert [(loop.first, loop.last) for loop in looped.loops] == [(1, 14)]
        assert looped.size < len(graph.intermediates) / 5


# Computed with the code before loops were recorded (Program.vertex_loops): the graph's
# identity (what the order cache keys on) must not change.
KNOWN = {
    "Pendulum_RK4": ("d23e50a610ac667f", "875ee7fb964a50b0889573ff8130658c"),
    "Lorenz96_RK4_10": ("758ca2dbd07d28ee", "8a2ebc923de8e6dbfecda66f62ad5083"),
    "KalmanFilter_Scan": ("dfdd049e61a2704a", "2c25d3b977a0a493861b8915f7901cb8"),
    "pendulum_chain_4": ("33ec9a99253e3353", "7ae9ec592ff5c189bb03c28a5f02ea79"),
    "scan_xs": ("9dc3e3724607c622", "01a0698b01c10dfa5bf923b552e4eea7"),
    "fori": ("369d71edbf655caa", "1bc0ed20e82ffdea58f16cd13fb723e0"),
}


@pytest.mark.parametrize("name", sorted(KNOWN))
def test_fingerprint_and_canonical_hash_unchanged(name):
    if name in ("Pendulum_RK4", "Lorenz96_RK4_10", "KalmanFilter_Scan"):
        ex = ag.examples.get(name)
        f, args = ex.fn, ex.args
    elif name == "pendulum_chain_4":
        ex = real.make_pendulum_chain(steps=4)
        f, args = ex.fn, ex.args
    else:
        f, args = {"scan_xs": (scan_xs, (jnp.ones(3), jnp.ones((4, 3)))), "fori": (fori, (jnp.ones(3), jnp.ones(3)))}[name]
    graph = ag.trace(f, *args)
    assert (graph.fingerprint, canonical(graph).hash) == KNOWN[name]
    # Pendulum_RK4 and Lorenz96_RK4_10 loop in Python: nothing for the tracer to unroll
    assert bool(graph.program.vertex_loops) == (name not in ("Pendulum_RK4", "Lorenz96_RK4_10"))


def test_by_default_a_small_graph_scans_the_loops_its_order_runs_backwards(monkeypatch):
    """By default (``LOOP_SCAN = "reverse"``), in a graph under CHUNK_ABOVE a loop that the
    order eliminates last iteration first runs as a scan (the unrolled program held every
    iteration's local Jacobians at once: NeuralCA_Conv's reverse order 4.8x the memory of
    jax.jacrev), one eliminated first to last stays unrolled; both equal jax.jacrev."""
    monkeypatch.setattr(interpreter, "LOOP_SCAN", _DEFAULT_LOOP_SCAN)  # the fixture's "always" undone
    argnums = tuple(range(len(_PENDULUM.args)))
    graph = ag.trace(_PENDULUM.fn, *_PENDULUM.args)
    assert len(graph.intermediates) <= interpreter.CHUNK_ABOVE
    want = jax.jit(jax.jacrev(_PENDULUM.fn, argnums=argnums))(*_PENDULUM.args)
    for order, scans in (("rev", True), ("fwd", False)):
        jac = interpreter.jacobian(_PENDULUM.fn, order, argnums=argnums)
        assert (_scans(jax.make_jaxpr(jac)(*_PENDULUM.args)) > 0) == scans, order
        _close(jac(*_PENDULUM.args), want)


def test_by_default_only_graphs_that_would_run_as_chunks_scan(monkeypatch):
    """``LOOP_SCAN = "large"``: a loop scans where the unrolled graph passes CHUNK_ABOVE
    (it would otherwise run as separately compiled chunks), not in a small graph whose
    unrolled program runs faster at a batch; the Jacobian is jax.jacrev's either way."""
    monkeypatch.setattr(interpreter, "LOOP_SCAN", "large")
    small = interpreter.jacobian(_PENDULUM.fn, "fwd", argnums=tuple(range(len(_PENDULUM.args))))
    assert _scans(jax.make_jaxpr(small)(*_PENDULUM.args)) == 0
    ex = real.make_nbody(steps=15)
    graph = ag.trace(ex.fn, *ex.args)
    assert len(graph.intermediates) > interpreter.CHUNK_ABOVE
    argnums = tuple(range(len(ex.args)))
    large = interpreter.jacobian(ex.fn, "fwd", argnums=argnums)
    assert _scans(jax.make_jaxpr(large)(*ex.args)) >= 1
    _close(jax.jit(large)(*ex.args), jax.jit(jax.jacrev(ex.fn, argnums=argnums))(*ex.args))
    monkeypatch.setattr(interpreter, "LOOP_SCAN", "sometimes")
    with pytest.raises(ValueError, match="LOOP_SCAN"):
        interpreter.jacobian(ex.fn, "fwd", argnums=argnums)(*ex.args)


def _num_carry(fn, *args) -> list:
    """The ``num_carry`` of each scan in ``fn``'s jaxpr."""
    return [e.params["num_carry"] for e in jax.make_jaxpr(fn)(*args).jaxpr.eqns if e.primitive.name == "scan"]


def test_a_value_carried_under_several_edges_is_carried_once():
    """The scan carries a value once where the body returns it under several carried
    edges and they start from one value (XLA copies every carried slot each trip); slots
    that start from different values stay apart. Either way the result is lax.scan's."""
    def body(c, x):
        y = c[0] * x + c[2]
        return [y, y, 0.5 * c[2]], c[1] - c[0]

    xs = jnp.arange(12.0).reshape(4, 3)
    a, b = jnp.ones(3), jnp.full(3, 2.0)
    for init, carried in (([a, a, b], 2), ([a, b, b], 3)):
        got = interpreter._scan_once_per_value(body, init, xs)
        want = jax.lax.scan(body, init, xs)
        _close(got, want)
        assert _num_carry(lambda x: interpreter._scan_once_per_value(body, init, x), xs) == [carried]


def test_a_forward_order_carries_each_stage_jacobian_once():
    """A pendulum chain's RK4 stages all read the state: in the forward order its
    Jacobian to the inputs is carried under each of their edges, but the scan carries
    each value once (56 carried edges, 28 values), and the Jacobian is jax.jacrev's."""
    import re

    argnums = tuple(range(len(_PENDULUM.args)))
    graph = ag.trace(_PENDULUM.fn, *_PENDULUM.args)
    looped = interpreter._looped(graph, ag.baselines.resolve_order(graph, "fwd"))
    edges = max(len(loop.carry) for loop in looped.loops)
    jac = interpreter.jacobian(_PENDULUM.fn, "fwd", argnums=argnums)
    carried = max(int(n) for n in re.findall(r"num_carry=(\d+)", str(jax.make_jaxpr(jac)(*_PENDULUM.args))))
    assert carried <= edges // 2
    _close(jac(*_PENDULUM.args), jax.jacrev(_PENDULUM.fn, argnums=argnums)(*_PENDULUM.args))


@pytest.mark.parametrize("name", ["two_carries", "pendulum_chain"])
def test_a_periodic_order_is_scanned_exact_and_no_dearer_than_forward_or_reverse(name):
    """baselines.periodic: one pattern for every iteration of the loop. It starts from
    forward and reverse mode (both periodic), so it never costs more than either; the
    interpreter runs it as a scan with the multiplications alphagrad.cost predicts and
    the Jacobian of jax.jacrev; and a fixed number of moves gives the same order twice."""
    f, args = CASES[name]
    graph = ag.trace(f, *args)
    order = ag.baselines.periodic(graph, moves=300, seed=0)
    assert sorted(order) == sorted(graph.intermediates)
    assert order == ag.baselines.periodic(graph, moves=300, seed=0)
    cost = ag.cost(graph, order)
    assert cost <= min(ag.cost(graph, "fwd"), ag.cost(graph, "rev"))
    its = periodic.iterations(graph)
    assert len(its.blocks) >= 2
    got, jaxpr = _jacobian(f, order, args, scan=True)
    assert _scans(jaxpr) > 0
    assert _executed(graph, order, args) == cost
    _close(got, jax.jacrev(f, argnums=tuple(range(len(args))))(*args))


def test_the_periodic_pattern_is_searched():
    """On the pendulum chain, annealing the pattern finds an order cheaper than both
    forward and reverse mode (it would not if the search were broken)."""
    f, args = CASES["pendulum_chain"]
    graph = ag.trace(f, *args)
    cost = ag.cost(graph, ag.baselines.periodic(graph, moves=2000, seed=0))
    assert cost < min(ag.cost(graph, "fwd"), ag.cost(graph, "rev"))


def test_periodic_needs_a_loop_and_a_budget():
    graph = ag.trace(lambda x: jnp.sin(x) * jnp.cos(x), _X)
    with pytest.raises(ValueError, match="no loop of two or more iterations"):
        ag.baselines.periodic(graph)
    f, args = CASES["fori"]
    loop = ag.trace(f, *args)
    with pytest.raises(ValueError, match="budget_s > 0 or moves"):
        ag.baselines.periodic(loop, budget_s=0)
    with pytest.raises(ValueError, match="moves must be an integer"):
        ag.baselines.periodic(loop, moves=-1)
