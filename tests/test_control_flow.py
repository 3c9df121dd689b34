"""Control flow in alphagrad.trace (issue 15, items 2 and 3): loops unrolled into the graph,
the branch taken at the example point, and clear errors for what cannot be resolved at
trace time. Every loop's Jacobian equals jax.jacrev's in forward, reverse, Markowitz and
a random order, with executed == predicted multiplications."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import alphagrad as ag
from alphagrad import baselines
from alphagrad import structure as st
from alphagrad.interpreter import accumulate, executed_multiplications, jacobian
from alphagrad.trace import ConcreteValuesNeeded

ORDERS = ("fwd", "rev", "markowitz", "random")
TOL = dict(rtol=2e-4, atol=2e-5)


def _orders(graph):
    rng = np.random.default_rng(0)
    return [list(rng.permutation(graph.intermediates)) if o == "random" else o for o in ORDERS]


def _check_loop(f, args, argnums=0, reference=jax.jacrev):
    """ag.jacobian(f, order) == jax.jacrev(f) and executed == predicted multiplications,
    for every order of ORDERS; returns the graph."""
    g = ag.trace(f, *args)
    want = reference(f, argnums=argnums)(*args)
    for order in _orders(g):
        got = jacobian(f, order, argnums=argnums)(*args)
        assert jax.tree_util.tree_structure(got) == jax.tree_util.tree_structure(want)
        for a, b in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
            assert a.shape == b.shape
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), **TOL)
        assert executed_multiplications(f, order, *args) == ag.cost(g, order)
    return g


def _check_at(f, x):
    """For a function of one array with one output whose graph depends on the point (a
    branch chosen by x): the graph traced at x, eliminated in every order, equals
    jax.jacrev at x, with the multiplications ag.cost predicts."""
    g = ag.trace(f, x)
    want = np.asarray(jax.jacrev(f)(x))
    for order in _orders(g):
        edges, _, mults = accumulate(g, baselines.resolve_order(g, order), [x])
        s, value = edges[(g.inputs[0], g.output_vertices[0])]
        np.testing.assert_allclose(np.asarray(st.to_dense(s, value, xp=jnp)), want, **TOL)
        assert mults == ag.cost(g, order)
    return g


X = jnp.linspace(0.2, 0.9, 3)
W = jnp.linspace(-0.5, 0.5, 9).reshape(3, 3)


# ---------------------------------------------------------------------------- loops
@pytest.mark.parametrize("unroll", [1, True])
def test_fori_loop_with_static_bounds(unroll):
    def f(x, w):
        return lax.fori_loop(0, 3, lambda i, c: jnp.tanh(w @ c) * (i + 1.0), x, unroll=unroll)

    g = _check_loop(f, (X, W), argnums=(0, 1))
    assert sum("tanh" in s for s in g.sources) == 3  # one per iteration


def test_scan_with_carry_xs_ys_and_a_closed_over_argument():
    def f(c0, xs, w):
        def step(c, x):
            c = jnp.sin(c * x) + w @ c
            return c, (c.sum(), jnp.cos(x) * c)

        return lax.scan(step, c0, xs)

    xs = jnp.linspace(0.1, 1.2, 12).reshape(4, 3)
    g = _check_loop(f, (X, xs, W), argnums=(0, 1, 2))
    assert [g.shapes[v] for v in g.output_vertices] == [(3,), (4,), (4, 3)]


def test_reverse_scan_stacks_ys_in_index_order():
    def f(c0, xs):
        return lax.scan(lambda c, x: (c * x + 1.0, jnp.sin(c) * x), c0, xs, reverse=True, unroll=2)

    xs = jnp.linspace(0.3, 1.4, 6).reshape(3, 2)
    _check_loop(f, (X[:2], xs), argnums=(0, 1))


def test_scan_with_length_and_no_xs():
    def f(c0):
        c, ys = lax.scan(lambda c, _: (jnp.sin(c) * 1.5, c**2), c0, None, length=4)
        return c, ys

    g = _check_loop(f, (X,))
    assert g.shapes[g.output_vertices[1]] == (4, 3)


def test_nested_loops_name_both_iterations():
    def f(x):
        def outer(c, k):
            inner = lax.fori_loop(0, 2, lambda i, d: jnp.sin(d) * k, c)
            return inner + c, None

        return lax.scan(outer, x, jnp.array([0.5, 1.5]))[0]

    g = _check_loop(f, (X,))
    sins = [s for s in g.sources if s.startswith("sin")]
    assert len(sins) == 4
    # the inner loop's iteration inside the outer one's, each with the user's line
    assert "[iteration 1 of 2, scan at" in sins[3] and sins[3].count("[iteration ") == 2
    assert "test_control_flow.py" in sins[3]


def test_loop_inside_jit_and_jit_inside_loop():
    @jax.jit
    def body(i, c):
        return jnp.cos(c) * c + i

    @jax.jit
    def f(x):
        return lax.fori_loop(0, 3, body, x).sum()

    _check_loop(f, (X,))


def test_while_loop_with_a_trip_count_known_at_trace_time():
    def f(x, w):
        def body(state):
            k, c = state
            return k + 1, jnp.tanh(w @ c) + 0.1 * k

        return lax.while_loop(lambda s: s[0] < 4, body, (0, x))[1]

    # jax.jacrev refuses while loops (JAX cannot reverse them); alphagrad's unrolled graph
    # has them in every order, so the reference is forward mode
    g = _check_loop(f, (X, W), argnums=(0, 1), reference=jax.jacfwd)
    tanhs = [s for s in g.sources if s.startswith("tanh")]
    assert len(tanhs) == 4 and "[iteration 3, while at" in tanhs[3]


def test_rk4_integrator_over_a_fori_loop():
    """A damped pendulum, two RK4 steps (a random order on more takes seconds to
    compile): the Jacobian of the final state with respect to the initial state and the
    parameters."""

    def rk4(state, params, dt=0.1, steps=2):
        def rhs(s):
            theta, omega = s[0], s[1]
            return jnp.stack([omega, -params[0] * jnp.sin(theta) - params[1] * omega])

        def step(_, s):
            k1 = rhs(s)
            k2 = rhs(s + dt / 2 * k1)
            k3 = rhs(s + dt / 2 * k2)
            k4 = rhs(s + dt * k3)
            return s + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)

        return lax.fori_loop(0, steps, step, state)

    g = _check_loop(rk4, (jnp.array([0.8, -0.3]), jnp.array([9.81, 0.2])), argnums=(0, 1))
    assert len(g.intermediates) > 100 and sum("sin" in s for s in g.sources) == 8


def test_vertex_sources_and_errors_name_the_iteration():
    def f(x):
        return lax.fori_loop(0, 3, lambda i, c: jnp.sin(c) + i, x)

    g = ag.trace(f, X)
    line = f.__code__.co_firstlineno + 1  # the body's line
    sins = [s for s in g.sources if s.startswith("sin")]
    assert len(sins) == 3
    for k, s in enumerate(sins):
        assert s.startswith("sin at ") and f"test_control_flow.py:{line}:" in s.split(" [")[0]
        assert f"[iteration {k} of 3, scan at" in s
    assert "iteration 2 of 3" in g.summary()

    def sorts(x):
        return lax.fori_loop(0, 3, lambda i, c: jnp.sort(c) * 2.0, x)

    with pytest.raises(ag.UnsupportedPrimitiveError,
                       match=r"`sort`.*test_control_flow.py:\d+.*\[iteration 0 of 3, scan at"):
        ag.trace(sorts, X)


def test_constant_loops_stay_one_step_and_counters_do_not_become_vertices():
    """A loop no differentiated value enters is a constant (not unrolled), and the int
    counter of an unrolled loop gets no vertex."""

    def f(x):
        table = lax.fori_loop(0, 1000, lambda i, c: c * 1.001, jnp.ones(3))
        return lax.fori_loop(0, 2, lambda i, c: c * table + i, x)

    g = ag.trace(f, X)
    assert len(g.program.steps) < 20
    assert all(g.dtypes[v] == "float32" for v in range(g.num_vertices))
    np.testing.assert_allclose(jacobian(f)(X), jax.jacrev(f)(X), **TOL)


# ---------------------------------------------------------------------------- branches
def branchy(x):
    return lax.cond(x.sum() > 0, jnp.sin, jnp.cos, x) * 2.0


def uneven(x):
    return lax.cond(x.sum() > 0, lambda y: jnp.sin(jnp.exp(y) * y), jnp.tanh, x) * 2.0


def test_cond_is_the_branch_taken_at_each_point():
    for x, prim, taken in [(X, "sin", 1), (-X, "cos", 0)]:
        g = _check_at(branchy, x)
        assert [g.sources[v].split(" ")[0] for v in g.intermediates] == [prim]
        (b,) = g.branches
        assert (b.primitive, b.taken, b.count, b.on_arguments) == ("cond", taken, 2, True)
        assert "test_control_flow.py" in b.source and f"branch {taken} of 2" in g.summary()
        assert g.program.branches_at([x]) == (taken,) and g.program.branches_at([-x]) == (1 - taken,)
    _check_at(uneven, X)
    _check_at(uneven, -X)


def test_a_branch_constant_in_the_inputs_has_the_zero_jacobian_jax_gives():
    """Where the branch taken does not depend on the inputs (a ReLU written with lax.cond,
    at a negative point), no output depends on them there: the Jacobian is zero, as
    jax.jacrev gives it, and the graph has nothing to eliminate (cost 0, empty order)."""
    relu = lambda x: lax.cond(x > 0, lambda y: y, jnp.zeros_like, x)  # noqa: E731
    gated = lambda x: lax.cond(x.sum() > 0, jnp.sin, jnp.zeros_like, x)  # noqa: E731
    for f, points in [(relu, (jnp.float32(2.0), jnp.float32(-2.0))), (gated, (X, -X))]:
        jac = jacobian(f, "markowitz")
        for x in points:
            want = jax.jacrev(f)(x)
            np.testing.assert_array_equal(jac(x), want)
            for order in ("fwd", "rev"):
                np.testing.assert_array_equal(jacobian(f, order)(x), want)
    g = ag.trace(gated, -X)
    assert (len(g.inputs), len(g.intermediates), len(g.edges)) == (1, 0, 0)
    assert [ag.cost(g, o) for o in ("fwd", "rev", "markowitz", [])] == [0, 0, 0, 0]
    np.testing.assert_array_equal(jacobian(gated, [])(-X), np.zeros((3, 3)))
    assert baselines.optimal(g) == baselines.anneal(g, iterations=10) == []
    assert "0 edges" in g.summary() and "branch 0 of 2" in g.summary()
    # an output constant everywhere, alone or beside one that is not
    np.testing.assert_array_equal(jacobian(lambda x: jnp.zeros(2))(X), np.zeros((2, 3)))
    both = lambda x, y: (jnp.ones(2), jnp.sin(y))  # noqa: E731
    for got, want in zip(jacobian(both, argnums=(0, 1))(X, X), jax.jacrev(both, argnums=(0, 1))(X, X)):
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a, b)
    with pytest.raises(ag.TraceError, match=r"no argument is a float array \(got int32\)"):
        ag.trace(lambda n: n * 1.0, jnp.arange(3))


def test_branches_on_carried_values_inside_a_loop_with_a_custom_rule():
    """Each iteration's cond is decided from the values the loop carries at the point
    (evaluated from the example argument), with relu differentiated by its rule."""

    def f(x):
        def body(i, c):
            c = jax.nn.relu(c) * 1.2 - 0.2
            return lax.cond(c.sum() > 0, lambda y: y * jnp.cos(y), jnp.sin, c)

        return lax.fori_loop(0, 3, body, x)

    def taken_in_python(c):  # the same loop, run eagerly: which branch each iteration takes
        taken = []
        for _ in range(3):
            c = jax.nn.relu(c) * 1.2 - 0.2
            taken.append(int(c.sum() > 0))
            c = c * jnp.cos(c) if taken[-1] else jnp.sin(c)
        return taken

    x = jnp.linspace(-0.5, 0.9, 4)
    assert [taken_in_python(p) for p in (x, -x, 2 * x)] == [[1, 1, 0], [0, 0, 0], [1, 0, 0]]
    for point in (x, -x, 2 * x):
        g = _check_at(f, point)
        taken = taken_in_python(point)
        assert [b.taken for b in g.branches] == taken and all(b.on_arguments for b in g.branches)
        assert "[iteration 2 of 3, scan at" in g.branches[2].source
        assert g.program.branches_at([point]) == tuple(taken)


def test_switch_takes_the_indexed_branch_clamped_as_jax_does():
    def f(x):
        k = jnp.floor(x[0] * 4).astype(jnp.int32)  # 0.2 -> 0, 0.6 -> 2, 1.5 -> 6 (clamped to 3)
        return lax.switch(k, [jnp.sin, jnp.cos, lambda y: y**3, jnp.tanh], x) * 2.0

    for x0, prim, taken in [(0.2, "sin", 0), (0.6, "integer_pow", 2), (1.5, "tanh", 3)]:
        x = X.at[0].set(x0)
        g = _check_at(f, x)
        assert [g.sources[v].split(" ")[0] for v in g.intermediates] == [prim]
        assert g.branches[0].taken == taken and g.branches[0].count == 4


def test_branches_on_a_loop_counter_need_no_values_and_work_end_to_end():
    """A switch on the counter of an unrolled loop is decided from constants: it works
    from shapes alone (as alphagrad.jacobian traces) and is not in the fingerprint."""

    def f(x):
        return lax.fori_loop(0, 4, lambda i, c: lax.switch(i % 3, [jnp.sin, jnp.cos, jnp.tanh], c) * 1.1, x)

    g = _check_loop(f, (X,))
    assert [b.taken for b in g.branches] == [0, 1, 2, 0]
    assert not any(b.on_arguments for b in g.branches)
    assert "[iteration 3 of 4, scan at" in g.branches[3].source
    abstract = ag.trace(f, jax.ShapeDtypeStruct(X.shape, X.dtype))
    assert abstract.fingerprint == g.fingerprint


def test_fingerprint_includes_the_branch_taken():
    pos, neg = ag.trace(branchy, X), ag.trace(branchy, -X)
    # the two branches' graphs are alike (one elementwise vertex): only the branch differs
    assert pos.shapes == neg.shapes and pos.edges == neg.edges
    assert pos.fingerprint != neg.fingerprint
    assert ag.trace(branchy, 2 * X).fingerprint == pos.fingerprint
    # a graph rebuilt from its arrays (the dataset's form) keeps the fingerprint
    assert ag.Graph.from_arrays(neg.to_arrays()).fingerprint == neg.fingerprint
    # graphs without argument-dependent branches hash as before (no 'branches' key)
    assert "branches" not in ag.trace(jnp.sin, X).to_arrays()


def test_an_order_for_one_branch_is_refused_at_a_point_taking_the_other():
    pos, neg = ag.trace(uneven, X), ag.trace(uneven, -X)

    class Result:  # what agent.order returns: an order with its graph's fingerprint
        order = baselines.markowitz(pos)
        fingerprint = pos.fingerprint

    with pytest.raises(ValueError, match=f"computed for graph {pos.fingerprint}.*traced at a point that takes "
                                         r"branch 0 of 2 \(false_fun of lax.cond\).*compute one at these arguments"):
        ag.cost(neg, Result())
    # a bare list of vertex ids that does not fit says which branch this graph took
    with pytest.raises(ValueError, match=r"not intermediates of this graph.*traced at a point that takes "
                                         r"branch 0 of 2 \(false_fun of lax.cond\) of the `cond` at "
                                         r".*test_control_flow.py:\d+.*compute one at these arguments"):
        ag.cost(neg, list(pos.intermediates))
    msg = pos.branch_mismatch(neg)
    assert msg.startswith("this order was made for branch 1 of 2 (true_fun of lax.cond) of the `cond` at ")
    assert "; at these arguments branch 0 of 2 (false_fun of lax.cond)" in msg
    assert msg.endswith("is taken: compute an order for them (e.g. alphagrad.trace(f, *args) at these arguments)")
    assert pos.branch_mismatch(ag.trace(uneven, 2 * X)) is None


def test_jacobian_follows_the_branch_taken_at_each_call():
    """alphagrad.jacobian traces at the values where a branch depends on them, and keeps
    one compiled Jacobian per branch path (interpreter.prepare)."""
    jac = jacobian(uneven, "markowitz")
    for x in (X, -X, 2 * X, -2 * X):
        np.testing.assert_allclose(jac(x), jax.jacrev(uneven)(x), rtol=2e-4, atol=2e-5)
        g = ag.trace(uneven, x)
        for order in ("fwd", "rev", "markowitz"):
            assert executed_multiplications(uneven, order, x) == ag.cost(g, order)


def test_an_explicit_order_is_refused_at_a_point_taking_another_branch():
    pos = ag.trace(uneven, X)
    jac = jacobian(uneven, baselines.markowitz(pos))
    jac(X)
    jac(3 * X)
    with pytest.raises(ValueError, match=r"this order was made for branch 1 of 2 \(true_fun of lax.cond\) of the `cond` at "
                                         r".*; at these arguments branch 0 of 2 \(false_fun of lax.cond\) .* is taken: compute an order for them"):
        jac(-X)


# ---------------------------------------------------------------------------- bad input
def test_a_loop_with_a_traced_trip_count_is_refused():
    def f(x, n):
        return lax.fori_loop(0, n, lambda i, c: jnp.sin(c), x)

    with pytest.raises(ag.TraceError, match=r"`while` at .*test_control_flow.py:\d+:\d+ \(.*f\): its trip count "
                                            r"depends on argument \[1\] \(a loop with a traced trip count\).*"
                                            r"make the trip count static: Python-int bounds for lax.fori_loop"):
        ag.trace(f, X, 3)

    def g(x):  # a trip count that depends on the differentiated values
        return lax.while_loop(lambda c: c.sum() < 10.0, lambda c: c * 2.0, x)

    with pytest.raises(ag.TraceError, match=r"`while` at .*test_control_flow.py:\d+:\d+ \(.*g\): .*argument \[0\]"):
        ag.trace(g, X)


def test_a_branch_on_values_given_as_shapes_only_is_refused():
    what_to_do = r"trace at concrete example values.*or compute both branches and choose with jnp.where"
    with pytest.raises(ConcreteValuesNeeded, match=r"`cond` \(lax.cond/lax.switch\) at .*test_control_flow.py:\d+:\d+ "
                                                   r"\(branchy\): which branch is taken depends on argument \[0\], "
                                                   r"given as a shape only.*" + what_to_do):
        ag.trace(branchy, jax.ShapeDtypeStruct((3,), jnp.float32))
    with pytest.raises(ConcreteValuesNeeded, match=what_to_do):  # under jax.jit: a tracer
        jax.jit(lambda x: ag.trace(branchy, x).num_vertices)(X)
    with pytest.raises(ConcreteValuesNeeded, match=what_to_do):  # alphagrad.jacobian under jax.jit
        jax.jit(jacobian(branchy))(X)
    assert issubclass(ConcreteValuesNeeded, ag.TraceError)


def test_an_unrolled_graph_over_the_limit_is_refused():
    def f(x):
        return lax.fori_loop(0, 50, lambda i, c: jnp.sin(c) * 2.0, x)

    with pytest.raises(ag.TraceError, match=r"unrolling the `scan` at .*test_control_flow.py:\d+:\d+ \(.*f\) \(50 "
                                            r"iterations\) would make the program about \d+ equations.*over the "
                                            r"limit of 60 .*max_equations=N"):
        ag.trace(f, X, max_equations=60)
    assert len(ag.trace(f, X, max_equations=200).intermediates) == 99

    def forever(x):
        return lax.while_loop(lambda s: s[0] >= 0, lambda s: (s[0] + 1, jnp.sin(s[1])), (0, x))[1]

    with pytest.raises(ag.TraceError, match=r"unrolling the `while` at .*test_control_flow.py:\d+:\d+ \(.*forever\) "
                                            r"makes the program \d+ equations, over the limit of 300"):
        ag.trace(forever, X, max_equations=300)


def test_the_default_limit_is_stated_and_used(monkeypatch):
    import sys

    module = sys.modules["alphagrad.trace"]
    assert module.MAX_EQUATIONS == 100_000
    monkeypatch.setattr(module, "MAX_EQUATIONS", 40)
    with pytest.raises(ag.TraceError, match="over the limit of 40"):
        ag.trace(lambda x: lax.fori_loop(0, 30, lambda i, c: jnp.sin(c), x), X)
