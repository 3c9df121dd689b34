"""alphagrad.trace: the graph a JAX function becomes, and clear errors for what it cannot be.

Graph sizes below were produced with jax 0.10.2 (the version range pinned in
pyproject.toml); jaxprs change between JAX releases.
"""

import jax
import jax.numpy as jnp
import pytest

import alphagrad as ag
from alphagrad.graph import INPUT, INTERMEDIATE, OUTPUT


def test_scalar_function_vertices_and_edges():
    def f(x, y):
        a = jnp.sin(x)
        b = a * y
        return b + a, jnp.cos(b)

    g = ag.trace(f, 1.0, 2.0)
    assert g.inputs == (0, 1)
    # sin, mul are intermediates; add and cos are outputs
    assert [g.kinds[v] for v in range(g.num_vertices)] == [INPUT, INPUT, INTERMEDIATE, INTERMEDIATE, OUTPUT, OUTPUT]
    assert {(e.src, e.dst) for e in g.edges} == {(0, 2), (2, 3), (1, 3), (3, 4), (2, 4), (3, 5)}
    assert g.output_vertices == (4, 5)


def test_pytrees_several_args_and_any_rank():
    def f(params, x):
        h = jnp.tanh(params["W"] @ x + params["b"])
        return {"h": h, "s": (h**2).sum()}, jnp.einsum("ijk->k", params["T"]) * x.sum()

    params = {"W": jnp.ones((3, 2)), "b": jnp.ones(3), "T": jnp.ones((2, 3, 4))}
    g = ag.trace(f, params, jnp.ones(2))
    leaves = jax.tree_util.tree_leaves((params, jnp.ones(2)))
    assert len(g.input_vertices) == len(leaves) == 4
    assert [g.shapes[v] for v in g.input_vertices] == [tuple(l.shape) for l in leaves]
    out_leaves = jax.tree_util.tree_leaves(jax.eval_shape(f, params, jnp.ones(2)))
    assert [g.shapes[v] for v in g.output_vertices] == [tuple(l.shape) for l in out_leaves]
    assert (2, 3, 4) in g.shapes


def test_sub_jaxprs_are_inlined():
    @jax.jit
    def inner(x):
        return jnp.sin(x) * 2.0

    @jax.checkpoint
    def remat(x):
        return jnp.exp(x)

    def f(x):
        return jax.nn.relu(inner(x)) + remat(x) + jax.nn.softplus(x)

    g = ag.trace(f, jnp.ones(3))
    prims = {g.sources[v].split(" ")[0] for v in g.intermediates}
    assert {"sin", "mul", "exp", "select_n"} <= prims  # select_n: relu's custom rule, not max
    assert not prims & {"jit", "pjit", "custom_jvp_call", "remat2", "checkpoint"}


def test_dead_code_constants_and_noops_are_not_vertices():
    def f(x):
        _ = jnp.exp(x) * 3.0  # dead code
        c = jnp.arange(3.0) * 2.0 + 1.0  # constant: folded
        y = x.astype(jnp.float32)  # same dtype: merged
        z = jax.lax.stop_gradient(x) * x  # stop_gradient: no edge through the first factor
        return jnp.sin(y) * c + z

    g = ag.trace(f, jnp.ones(3, jnp.float32))
    prims = [g.sources[v].split(" ")[0] for v in range(g.num_vertices)]
    assert "exp" not in prims and "convert_element_type" not in prims and "stop_gradient" not in prims
    # sin, sin*c and x*sg(x) are intermediates, their sum the output
    assert sorted(prims) == sorted(["input", "sin", "mul", "mul", "add"])


def test_outputs_that_are_inputs_reused_or_repeated_get_copy_vertices():
    def f(x):
        y = jnp.sin(x)
        return x, y, y, jnp.cos(y)

    g = ag.trace(f, jnp.ones(2))
    outs = g.output_vertices
    assert len(set(outs)) == 4
    for v in outs:
        assert g.kinds[v] == OUTPUT and not g.successors[v]


def test_numbering_is_topological_and_deterministic():
    ex = ag.examples.get("RoeFlux_1d")
    g1, g2 = ag.trace(ex.fn, *ex.args), ag.trace(ex.fn, *ex.args)
    assert g1.fingerprint == g2.fingerprint
    assert all(e.src < e.dst for e in g1.edges)


def test_summary_says_counts_and_where_vertices_come_from():
    def f(x):
        return jnp.sin(x) * 2.0

    g = ag.trace(f, jnp.ones(3))
    text = g.summary()
    assert "1 inputs, 1 intermediates, 1 outputs, 2 edges" in text
    assert "test_trace.py" in text and "sin" in text
    assert "intermediates=1" in repr(g)


def test_published_graph_sizes_jax_0_10_2():
    # Published intermediates: RoeFlux_1d 98, RobotArm 108, HHD 78, Propane 51, g 85.
    # Our tracer folds constants and merges no-ops, so graphs with those are smaller.
    sizes = {e.name: len(ag.trace(e.fn, *e.args).intermediates) for e in ag.examples.all_examples()}
    assert sizes["RoeFlux_1d"] == 98
    assert sizes["RobotArm_6DOF"] == 108
    assert sizes["HumanHeartDipole"] == 78
    assert sizes["PropaneCombustion"] == 51
    assert sizes["RandomG"] == 85


@pytest.mark.parametrize(
    "f,args,err,match",
    [
        (42, (jnp.ones(2),), TypeError, "callable"),
        (jnp.sin, ("abc",), TypeError, r"argument \[0\] is a str"),
        (lambda n: n * 1.0, (jnp.arange(2),), ag.TraceError, "no argument is a float array"),
        (lambda x: jnp.argmax(x), (jnp.ones(2),), ag.TraceError, "int32"),
        (lambda x: x.sum(), (), TypeError, "at least one"),
    ],
)
def test_bad_input_gets_a_clear_error(f, args, err, match):
    with pytest.raises(err, match=match):
        ag.trace(f, *args)


def test_integer_arguments_are_not_vertices():
    def f(x, n):
        return x * n

    g = ag.trace(f, jnp.ones(2), jnp.arange(2))
    assert g.input_vertices[1] == -1 and len(g.inputs) == 1


def test_complex_inputs_and_intermediates_are_refused_clearly():
    """jnp.abs(z) on complex z used to lose the imaginary part of the derivative."""
    with pytest.raises(ag.TraceError, match=r"argument \[0\] is complex64.*real and imaginary parts"):
        ag.trace(jnp.abs, jnp.ones(3, jnp.complex64))
    with pytest.raises(ag.TraceError, match=r"argument \[1\]\['z'\] is complex64"):
        ag.trace(lambda x, d: x * jnp.abs(d["z"]), jnp.ones(3), {"z": jnp.ones(3, jnp.complex64)})
    with pytest.raises(ag.TraceError, match="depends on an input and is complex64.*real arithmetic"):
        ag.trace(lambda x: jnp.abs(jnp.fft.fft(x)), jnp.ones(4))
    with pytest.raises(ag.TraceError, match="complex64"):
        ag.jacobian(lambda x: jnp.abs(x * (1 + 1j)))(jnp.ones(3))
    # A complex constant that never meets an input is fine.
    g = ag.trace(lambda x: x * jnp.abs(jnp.fft.fft(jnp.arange(3.0))), jnp.ones(3))
    assert g.num_vertices == 2


def test_constant_outputs_have_zero_jacobian():
    """A function returning a literal constant beside a real output (used to crash on the
    removed jax.core.get_aval)."""
    f = lambda x: (jnp.sin(x).sum(), 0.0, jnp.ones(2))
    g = ag.trace(f, jnp.ones(3))
    assert [g.shapes[v] for v in g.output_vertices] == [(), (), (2,)]
    got = ag.jacobian(f)(jnp.arange(3.0))
    want = jax.jacrev(f)(jnp.arange(3.0))
    for a, b in zip(got, want):
        assert a.shape == b.shape
        assert jnp.allclose(a, b)


def test_loop_free_programs_are_not_limited_and_record_no_branches():
    """max_equations bounds unrolling only; a graph without lax.cond has no branches and
    its fingerprint hashes exactly what it did before branches existed."""
    ex = ag.examples.get("RoeFlux_1d")
    g = ag.trace(ex.fn, *ex.args, max_equations=10)
    assert len(g.intermediates) == 98 and g.branches == ()
    assert g.fingerprint == ag.trace(ex.fn, *ex.args).fingerprint
    assert "branches" not in g.to_arrays()
    assert ag.Graph.from_arrays(g.to_arrays()).fingerprint == g.fingerprint
