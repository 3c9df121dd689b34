"""Tests of the random JAX program generator (data_gen.random_programs)."""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import alphagrad
from alphagrad.primitives import RULES
from data_gen import random_programs as rp
from data_gen.random_programs import CATEGORIES, ProgramSpec, build, describe, generate

SMALL = ProgramSpec(num_inputs=2, num_outputs=2, num_ops=12, max_rank=2, max_dim=3, fan_in=3, width=4)


def _primitives(f, args) -> collections.Counter:
    """Primitive names of ``f``'s jaxpr, sub-jaxprs (einsum's pjit, ...) inlined."""
    counts: collections.Counter = collections.Counter()

    def walk(jaxpr):
        for eqn in jaxpr.eqns:
            subs = [p for p in eqn.params.values() if hasattr(p, "eqns") or hasattr(p, "jaxpr")]
            if subs:
                for sub in subs:
                    walk(sub.jaxpr if hasattr(sub, "jaxpr") else sub)
            else:
                counts[eqn.primitive.name] += 1

    walk(jax.make_jaxpr(f)(*args).jaxpr)
    return counts


def _all_finite(tree) -> bool:
    return all(bool(jnp.all(jnp.isfinite(x))) for x in jax.tree_util.tree_leaves(tree))


@st.composite
def small_specs(draw):
    num_inputs = draw(st.integers(1, 3))
    num_ops = draw(st.integers(1, 15))
    return ProgramSpec(
        num_inputs=num_inputs,
        num_outputs=draw(st.integers(1, min(3, num_inputs + num_ops))),
        num_ops=num_ops,
        max_rank=draw(st.integers(0, 3)),
        max_dim=draw(st.integers(1, 4)),
        fan_in=draw(st.integers(1, 4)),
        width=draw(st.integers(1, 8)),
    )


# ---------------------------------------------------------------------------
# determinism
# ---------------------------------------------------------------------------


def test_same_spec_and_seed_give_the_same_program():
    f1, args1 = generate(SMALL, 7)
    f2, args2 = generate(SMALL, 7)
    assert str(jax.make_jaxpr(f1)(*args1)) == str(jax.make_jaxpr(f2)(*args2))
    for a, b in zip(args1, args2):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    out1, out2 = jax.jit(f1)(*args1), jax.jit(f2)(*args2)
    for a, b in zip(out1, out2):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert build(SMALL, 7).ops == build(SMALL, 7).ops


def test_determinism_does_not_depend_on_the_process():
    code = (
        "from data_gen.random_programs import ProgramSpec, build;"
        "p = build(ProgramSpec(num_inputs=3, num_ops=60, max_rank=3, max_dim=5, fan_in=4, width=9), 11);"
        "print(repr((p.input_shapes, p.ops, p.outputs, [a.tolist() for a in p.arg_values])))"
    )
    env = dict(os.environ, PYTHONHASHSEED="12345", JAX_PLATFORMS="cpu")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=root, capture_output=True,
                         text=True, check=True)
    p = build(ProgramSpec(num_inputs=3, num_ops=60, max_rank=3, max_dim=5, fan_in=4, width=9), 11)
    here = repr((p.input_shapes, p.ops, p.outputs, [a.tolist() for a in p.arg_values]))
    assert out.stdout == here + "\n"


def test_different_seeds_give_different_programs():
    texts = set()
    for seed in range(8):
        f, args = generate(SMALL, seed)
        texts.add(str(jax.make_jaxpr(f)(*args)))
    assert len(texts) == 8


# ---------------------------------------------------------------------------
# every program runs, is finite, differentiates and traces
# ---------------------------------------------------------------------------


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
@given(spec=small_specs(), seed=st.integers(0, 2**32 - 1))
def test_programs_run_differentiate_and_trace(spec, seed):
    f, args = generate(spec, seed)
    assert len(args) == spec.num_inputs
    for a in args:
        assert a.dtype == jnp.float32
        assert a.ndim <= spec.max_rank and all(1 <= n <= spec.max_dim for n in a.shape)
        assert bool(jnp.all((a >= rp.INPUT_LOW) & (a <= rp.INPUT_HIGH)))

    argnums = tuple(range(len(args)))
    out, jac = jax.jit(lambda *a: (f(*a), jax.jacrev(f, argnums=argnums)(*a)))(*args)
    assert isinstance(out, tuple) and len(out) == spec.num_outputs
    for o in out:
        assert o.dtype == jnp.float32
        assert o.ndim <= spec.max_rank and all(1 <= n <= spec.max_dim for n in o.shape)
    assert _all_finite(out)
    assert _all_finite(jac)

    graph = alphagrad.trace(f, *args)
    assert len(graph.inputs) == spec.num_inputs
    assert len(graph.output_vertices) == spec.num_outputs
    if spec.num_ops >= 5:
        assert len(graph.intermediates) >= 1


@settings(max_examples=100, deadline=None)
@given(
    num_inputs=st.integers(1, 16),
    num_ops=st.integers(1, 80),
    max_rank=st.integers(0, 3),
    max_dim=st.integers(1, 16),
    fan_in=st.integers(1, 4),
    width=st.integers(1, 64),
    seed=st.integers(0, 2**32 - 1),
)
def test_programs_trace_within_the_spec(num_inputs, num_ops, max_rank, max_dim, fan_in, width, seed):
    """Without running them (fast): shapes respect the spec, every primitive has a rule,
    the description agrees with JAX's shapes, and tracing succeeds."""
    spec = ProgramSpec(num_inputs=num_inputs, num_outputs=min(3, num_inputs + num_ops),
                       num_ops=num_ops, max_rank=max_rank, max_dim=max_dim, fan_in=fan_in,
                       width=width)
    program = build(spec, seed)
    f, args = program.function(), program.example_args()
    assert len(program.ops) == num_ops
    for shape in program.shapes:
        assert len(shape) <= max_rank and all(1 <= n <= max_dim for n in shape)
    for op in program.ops:
        assert 1 <= len(set(op.args)) <= fan_in
    out = jax.eval_shape(f, *args)
    assert [o.shape for o in out] == [program.shapes[v] for v in program.outputs]
    assert set(_primitives(f, args)) <= set(RULES)
    graph = alphagrad.trace(f, *args)
    if num_ops >= 2:
        assert len(graph.intermediates) >= 1
    if num_ops > num_inputs:  # every input is read
        assert set(range(num_inputs)) <= {a for op in program.ops for a in op.args}


def test_a_large_program_traces():
    spec = ProgramSpec(num_inputs=4, num_outputs=3, num_ops=300, max_rank=3, max_dim=8, fan_in=3, width=16)
    program = build(spec, 3)
    graph = alphagrad.trace(program.function(), *program.example_args())
    assert len(graph.intermediates) > 200
    assert len(program.live_ops()) > 0.6 * spec.num_ops


# ---------------------------------------------------------------------------
# outputs and liveness
# ---------------------------------------------------------------------------


def test_outputs_prefer_sinks_and_most_of_the_program_is_live():
    live = []
    for seed in range(10):
        spec = ProgramSpec(num_inputs=3, num_outputs=2, num_ops=60, max_rank=2, max_dim=4, width=6)
        program = build(spec, seed)
        read = {a for op in program.ops for a in op.args}
        sinks = [v for v in range(spec.num_inputs, len(program.shapes)) if v not in read]
        assert len(program.outputs) == spec.num_outputs == len(set(program.outputs))
        if len(sinks) >= spec.num_outputs:
            assert set(program.outputs) <= set(sinks)
        live.append(len(program.live_ops()) / spec.num_ops)
    assert np.mean(live) > 0.7


def test_more_outputs_than_sinks_are_filled_with_other_values():
    spec = ProgramSpec(num_inputs=2, num_outputs=5, num_ops=3, width=1)
    program = build(spec, 0)
    assert len(set(program.outputs)) == 5  # every value of the program
    f, args = program.function(), program.example_args()
    assert len(f(*args)) == 5
    alphagrad.trace(f, *args)


def test_width_one_gives_a_chain():
    spec = ProgramSpec(num_inputs=1, num_ops=30, width=1, fan_in=1)
    program = build(spec, 5)
    for k, op in enumerate(program.ops):
        assert set(op.args) == {k}  # each op reads the previous value only
    assert len(program.live_ops()) == 30


# ---------------------------------------------------------------------------
# the op mix
# ---------------------------------------------------------------------------


def _program_primitives(mix, seeds=range(6), **kw):
    counts = collections.Counter()
    kw = {"num_inputs": 3, "num_ops": 25, "max_rank": 2, "max_dim": 4, **kw}
    for seed in seeds:
        f, args = generate(ProgramSpec(mix=mix, **kw), seed)
        counts.update(_primitives(f, args))
    return counts


def test_dot_only_mix_gives_dots():
    counts = _program_primitives({"dot": 1.0})
    assert counts["dot_general"] >= 25
    for seed in range(6):
        program = build(ProgramSpec(num_inputs=3, num_ops=25, max_rank=2, max_dim=4, mix={"dot": 1}), seed)
        if any(len(s) > 0 for s in program.input_shapes):
            assert program.ops[0].category == "dot"
            assert program.ops[0].name == "dot"


def test_unary_only_mix_gives_no_dots_and_keeps_shapes():
    counts = _program_primitives({"elementwise_unary": 1.0})
    assert counts["dot_general"] == 0
    assert not {"broadcast_in_dim", "reshape", "concatenate", "reduce_sum"} & set(counts)
    program = build(ProgramSpec(num_inputs=2, num_ops=40, mix={"elementwise_unary": 1}), 1)
    assert {op.category for op in program.ops} == {"elementwise_unary"}


@pytest.mark.parametrize(
    "category, primitives",
    [
        ("elementwise_binary", {"add", "sub", "mul", "div", "max", "min", "atan2", "pow"}),
        ("reduction", {"reduce_sum", "reduce_max", "reduce_min"}),
        ("broadcast", {"broadcast_in_dim"}),
        ("reshape", {"reshape", "transpose", "slice", "concatenate", "squeeze"}),
    ],
)
def test_single_category_mixes(category, primitives):
    counts = _program_primitives({category: 1.0}, seeds=range(3), max_rank=3)
    assert sum(counts[p] for p in primitives) >= 10


def test_default_mix_is_honoured_roughly():
    spec = ProgramSpec(num_inputs=3, num_ops=600, max_rank=3, max_dim=8)
    program = build(spec, 0)
    got = collections.Counter(op.category for op in program.ops)
    for category, weight in spec.mix:
        share = got[category] / spec.num_ops
        assert abs(share - weight) < 0.06, (category, share, weight)


# ---------------------------------------------------------------------------
# parameters
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"num_inputs": 0}, "num_inputs"),
        ({"num_inputs": 17}, "num_inputs"),
        ({"num_outputs": 0}, "num_outputs"),
        ({"num_outputs": 4, "num_inputs": 1, "num_ops": 2}, "num_outputs"),
        ({"num_ops": 0}, "num_ops"),
        ({"num_ops": 3001}, "num_ops"),
        ({"num_ops": 2.5}, "num_ops"),
        ({"max_rank": 5}, "max_rank"),
        ({"max_rank": -1}, "max_rank"),
        ({"max_dim": 0}, "max_dim"),
        ({"max_dim": 17}, "max_dim"),
        ({"fan_in": 0}, "fan_in"),
        ({"fan_in": 5}, "fan_in"),
        ({"width": 0}, "width"),
        ({"width": True}, "width"),
        ({"mix": {"convolution": 1.0}}, "mix"),
        ({"mix": {"dot": -1.0}}, "mix"),
        ({"mix": {"dot": float("nan")}}, "mix"),
        ({"mix": {"dot": 0.0}}, "mix"),
        ({"mix": 3}, "mix"),
    ],
)
def test_bad_parameters_raise_naming_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        ProgramSpec(**kwargs)


def test_bad_parameter_messages_give_value_and_range():
    with pytest.raises(ValueError, match=r"max_rank = 5 .*\[0, 3\]"):
        ProgramSpec(max_rank=5)
    with pytest.raises(ValueError, match="convolution"):
        ProgramSpec(mix={"convolution": 1.0})
    with pytest.raises(ValueError, match="seed"):
        build(ProgramSpec(), -1)


def test_mix_is_normalised_and_hashable():
    a = ProgramSpec(mix={"dot": 1, "reduction": 0})
    b = ProgramSpec(mix=(("dot", 1.0),))
    assert a == b and hash(a) == hash(b)
    assert a.mix_dict == {c: (1.0 if c == "dot" else 0.0) for c in CATEGORIES}
    assert [c for c, _ in ProgramSpec().mix] == list(CATEGORIES)
    assert np.isclose(sum(ProgramSpec().mix_dict.values()), 1.0)
    assert ProgramSpec(num_ops=np.int64(5)).num_ops == 5


def test_to_dict_from_dict_and_describe_round_trip():
    spec = ProgramSpec(num_inputs=4, num_outputs=3, num_ops=77, max_rank=3, max_dim=9, fan_in=4,
                       width=33, mix={"dot": 2.0, "elementwise_binary": 0.5})
    d = json.loads(json.dumps(spec.to_dict()))
    assert ProgramSpec.from_dict(d) == spec
    source = json.loads(json.dumps(describe(spec, seed=5)))
    assert source["seed"] == 5 and source["version"] == rp.GENERATOR_VERSION
    assert ProgramSpec.from_dict(source) == spec
    assert ProgramSpec.from_dict({}) == ProgramSpec()
    with pytest.raises(ValueError, match="unknown"):
        ProgramSpec.from_dict({"num_layers": 3})
