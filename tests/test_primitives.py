"""Every primitive rule gives the local Jacobian JAX itself computes: the structure,
expanded with the value alphagrad computes for it, equals ``jax.jacfwd`` of the primitive
at the same operands."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import alphagrad as ag
from alphagrad import primitives as prim
from alphagrad import structure as st

# The primitives the core issue asks us to cover (JAX names).
REQUIRED = """add sub mul div neg abs sign max min pow integer_pow square sqrt rsqrt cbrt exp
exp2 log log1p expm1 sin cos tan asin acos atan atan2 sinh cosh tanh asinh acosh atanh
logistic erf erf_inv select_n clamp dot_general reduce_sum reduce_max reduce_min argmax
cumsum broadcast_in_dim reshape transpose squeeze concatenate slice dynamic_slice gather
scatter-add pad rev convert_element_type stop_gradient""".split()


def test_registry_covers_the_required_primitives():
    missing = [p for p in REQUIRED if p not in prim.RULES]
    assert not missing


def _check_all_local_jacobians(f, *args):
    """Compares every edge's structured local Jacobian with jax.jacfwd, in one jit."""
    graph = ag.trace(f, *args)
    program = graph.program
    cases = []  # (step, argnum, outnum, structure)
    for step in program.steps:
        e = step.equation
        for argnum, ref in enumerate(step.inputs):
            if isinstance(ref, tuple) or not prim.is_float(e.in_dtypes[argnum]):
                continue
            for outnum, s in enumerate(prim.structures(e, argnum)):
                if s is not None:
                    cases.append((step, argnum, outnum, s))

    @jax.jit
    def compute(leaves):
        vals = dict(zip(program.input_slots, leaves))
        read = lambda i: i[1] if isinstance(i, tuple) else vals[i]
        for step in program.steps:
            for o, v in zip(step.outputs, step.equation.bind(*[read(i) for i in step.inputs])):
                vals[o] = v
        results = []
        for step, argnum, outnum, s in cases:
            ops = [read(i) for i in step.inputs]

            def fn(x, ops=ops, step=step, argnum=argnum, outnum=outnum):
                a = list(ops)
                a[argnum] = x
                return step.equation.bind(*a)[outnum]

            if s.index_map:  # its static table, as the interpreter reads it
                value = prim.map_value(step.equation, argnum, outnum, s)
            else:
                value = prim.local_value(step.equation, argnum, outnum, s, ops)
            results.append((value, jax.jacfwd(fn)(ops[argnum])))
        return results

    results = compute([jnp.asarray(a) for a in jax.tree_util.tree_leaves(args)])
    seen = set()
    for (step, argnum, outnum, s), (value, want) in zip(cases, results):
        value = None if value is None else np.asarray(value)
        got = st.to_dense(s, value)
        where = f"{step.equation.name} operand {argnum}: {s.describe()} {step.equation.params}"
        np.testing.assert_allclose(got, np.asarray(want), rtol=1e-5, atol=1e-6, err_msg=where)
        _check_tight(step.equation.name, s, value, np.asarray(want), where)
        seen.add(step.equation.name)
    return seen


#: Primitives whose local Jacobian picks one entry of several by value (the others are
#: zero at these operands and not at others): their structure allows every candidate.
CHOICE = {"reduce_max", "reduce_min", "cummax", "cummin"}


def _check_tight(name, s, value, want, where):
    """The structure allows no more entries than the Jacobian needs: where ``jax.jacfwd``
    has at most one nonzero per row and per column (elementwise ops, selections, index
    maps), so does the structure's pattern (an index map: its 0/1 table). Values are
    right either way; what a loose structure breaks is the cost, which every later
    product pays (a diagonal stored as dense costs n times more per product)."""
    if name in CHOICE:
        return
    n_out, n_in = int(np.prod(s.out_shape)), int(np.prod(s.in_shape))
    nonzero = (want != 0).reshape(n_out, n_in)
    if nonzero.sum(0).max(initial=0) > 1 or nonzero.sum(1).max(initial=0) > 1:
        return
    table = value if s.index_map else (None if value is None else np.ones(s.value_shape))
    allowed = (st.to_dense(s, table) != 0).reshape(n_out, n_in)
    assert allowed.sum(0).max(initial=0) <= 1 and allowed.sum(1).max(initial=0) <= 1, \
        f"{where}: allows {allowed.sum()} entries where jacfwd has at most one per row and column"


RNG = np.random.default_rng(0)
X = jnp.asarray(RNG.random((3, 4)) + 0.5, jnp.float32)
Y = jnp.asarray(RNG.random((4, 5)) + 0.5, jnp.float32)
Z = jnp.asarray(RNG.random((2, 3, 4)) + 0.5, jnp.float32)


def tensor_ops(x, y, z):
    outs = [
        x @ y,
        jnp.einsum("bij,jk->bik", z, y),
        jnp.max(x, axis=1) + jnp.min(z, axis=(0, 2)),
        jnp.cumsum(x, axis=1)[:, 1:3],
        jnp.concatenate([x, jnp.flip(x, 0)], axis=0),
        jnp.pad(x, ((1, 0), (0, 2))),
        x.reshape(12).reshape(2, 6),
        jnp.where(x > 1.0, x**2, jnp.sin(x)),
        jax.lax.clamp(0.7, x, 1.2) * jnp.arctan2(x, x + 1),
        jax.nn.logsumexp(z, axis=-1),
        jnp.transpose(z, (2, 0, 1)).sum(0),
        x[1] * x[:, 2].sum() + x[0, 0],
        jax.lax.dynamic_slice(x, (1, 1), (2, 2)),
        jnp.prod(x, axis=0),
        jnp.split(x, 2, axis=1)[0] * jnp.split(x, 2, axis=1)[1],
        x.at[0, :].add(y[0, :4]),
        jnp.take(x, jnp.array([2, 0]), axis=1),
        jnp.argmax(x, axis=0) * x[0],
        jnp.squeeze(z[:1], 0) + jnp.expand_dims(x, 0)[0],
        x.astype(jnp.float16).astype(jnp.float32),
        jnp.stack([x, 2 * x, x * x], axis=1),
    ]
    return sum(o.sum() for o in outs)


def unary_ops(x):
    return (
        jnp.exp2(x) + jnp.log1p(x) + jnp.expm1(x) + jnp.tan(x) + jnp.arcsin(x / 3)
        + jnp.arccos(x / 3) + jnp.sinh(x) + jnp.cosh(x) + jnp.tanh(x) + jnp.arcsinh(x)
        + jnp.arccosh(x + 1) + jnp.arctanh(x / 3) + jax.nn.sigmoid(x)
        + jax.scipy.special.erf(x) + jax.scipy.special.erfinv(x / 3) + jnp.cbrt(x)
        + jax.lax.rsqrt(x) + jnp.abs(x) + jnp.sign(x) * x + jnp.maximum(x, 1.0)
        + jnp.minimum(x, x * x) + x**x + x / (x + 1) - x + jnp.sqrt(x) + jnp.log(x)
        + jnp.exp(x) + jnp.cos(x) + jnp.arctan(x) + jnp.square(x) + x**3
        + jax.lax.stop_gradient(x) * x
    )


def test_tensor_rules_match_jacfwd():
    seen = _check_all_local_jacobians(tensor_ops, X, Y, Z)
    for name in ["dot_general", "reduce_max", "reduce_min", "cumsum", "slice", "concatenate",
                 "pad", "reshape", "select_n", "clamp", "dynamic_slice", "reduce_prod",
                 "split", "scatter-add", "gather", "transpose", "broadcast_in_dim", "rev",
                 "squeeze", "convert_element_type", "stack"]:
        assert name in seen, name


def test_elementwise_rules_match_jacfwd():
    seen = _check_all_local_jacobians(unary_ops, X)
    assert {"exp2", "erf_inv", "acosh", "atanh", "integer_pow", "pow", "square"} <= seen


def test_unsupported_primitive_names_it_and_the_source_line():
    def f(x):
        return jnp.sort(x)  # sort has no rule

    with pytest.raises(ag.UnsupportedPrimitiveError, match=r"`sort`.*test_primitives.py:\d+"):
        ag.trace(f, X[0])


def test_a_library_function_traced_directly_is_named_with_the_users_line():
    """An equation with no line of the user's code (inside a JAX function passed as it is)
    is placed at the user's call of alphagrad, not at "an unknown place"."""
    with pytest.raises(ag.UnsupportedPrimitiveError,
                       match=r"`sort` \(created at a line inside `sort`, called at .*test_primitives.py:\d+ \(test_"):
        ag.trace(jnp.sort, X[0])
    with pytest.raises(ag.UnsupportedPrimitiveError, match=r"inside `sort`, called at .*test_primitives.py:\d+"):
        ag.jacobian(jnp.sort)(X[0])


def test_primitives_without_a_float_result_need_no_rule():
    """A comparison or an index search has no derivative, whatever the primitive: JAX's
    expm compares the input's norm with ``lt_to`` (no rule) to choose its branch."""
    from alphagrad.interpreter import executed_multiplications

    expm = jax.scipy.linalg.expm
    for a in (X[:, :3] / 4, X[:, :3] * 2):  # two different branches of expm's degree
        g = ag.trace(expm, a)
        want = jax.jacrev(expm)(a)
        np.testing.assert_allclose(ag.jacobian(expm, "rev")(a), want, rtol=1e-4, atol=1e-5)
        assert executed_multiplications(expm, "rev", a) == ag.cost(g, "rev")


# Control flow (scan, while, cond) is unrolled or resolved by alphagrad.trace; what it
# still refuses (traced trip counts, branches given shapes only, unrolled size) is tested
# in tests/test_control_flow.py.
