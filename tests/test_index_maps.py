"""Index maps (slices, pads, concatenates, reverses, tiles, stacks, splits, gathers and
scatter-adds with constant indices, reshapes without a common refinement) are 0/1 maps:
every output entry is at most one input entry, or every input entry reaches at most one
output entry. A product with one is a gather or a scatter-add of the other factor, so it
costs no multiplication; their Jacobians are exact in every order, the
interpreter executes exactly the multiplications the cost model counts, and it never
multiplies by a 0/1 matrix."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import alphagrad as ag
from alphagrad import structure as st
from alphagrad.interpreter import executed_multiplications, jacobian

X = jnp.asarray(np.random.default_rng(0).random((4, 6)) + 0.5, jnp.float32)
V = jnp.asarray(np.random.default_rng(1).random(7) + 0.5, jnp.float32)

CASES = {
    "slice": (lambda x: jnp.sin(x)[1:3, 2:] * 2.0, X),
    "strided_slice": (lambda x: jnp.sin(x[::2, 1::3]) * x[1::2, ::3], X),
    "dynamic_slice": (lambda x: jax.lax.dynamic_slice(jnp.sin(x), (1, 2), (2, 3)) ** 2, X),
    "dynamic_update_slice": (lambda x: jax.lax.dynamic_update_slice(jnp.cos(x), jnp.sin(x[:2, :3]), (1, 2)) ** 2, X),
    "concatenate": (lambda x: jnp.concatenate([jnp.sin(x[:2]), x[2:] * x[1:3]], axis=0) ** 2, X),
    "pad": (lambda x: jnp.exp(jax.lax.pad(jnp.sin(x), 0.0, ((1, -1, 1), (-2, 2, 0)))), X),
    "pad_value": (lambda v: jnp.sin(jax.lax.pad(jnp.cos(v), v[0] * 2, ((2, 1, 0),))), V),
    "rev": (lambda v: jnp.sin(v)[::-1] * v, V),
    "tile": (lambda v: jnp.tile(jnp.sin(v), 3) * jnp.arange(21.0), V),
    "roll": (lambda v: jnp.roll(jnp.sin(v), 2) * v, V),
    "stack": (lambda v: jnp.stack([jnp.sin(v), -v[::-1]]) * jnp.cos(v), V),
    "split": (lambda x: jnp.prod(jnp.stack(jnp.split(jnp.sin(x), 3, axis=1)), axis=0), X),
    "reshape_incompatible": (lambda x: jnp.sin(x).reshape(6, 4) ** 2, X),
    "transpose_slice": (lambda x: jnp.sin(x).T[1:] * 2.0, X),
    "gather": (lambda v: jnp.sin(v)[np.array([4, 0, 2])] * v[:3], V),
    "gather_repeated": (lambda v: jnp.sin(v[np.array([1, 1, 6, 1])]) ** 2, V),
    "scatter_add": (lambda v: jnp.sin(jnp.zeros(5).at[np.array([3, 0, 3])].add(jnp.cos(v[:3]))) * 2.0, V),
    "stencil": (lambda v: jnp.tanh(v[:-2] - 2 * v[1:-1] + v[2:]) * v[1:-1], V),
    "slice_after_slice": (lambda v: jnp.sin(v)[1:6][::2][1:] * jnp.cos(v)[3:5][::-1], V),
}


def _orders(g, seed=0, count=3):
    rng = np.random.default_rng(seed)
    return ["fwd", "rev", "markowitz"] + [[int(v) for v in rng.permutation(g.intermediates)] for _ in range(count)]


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_order_gives_jacrev_and_executes_the_predicted_cost(name):
    f, x = CASES[name]
    g = ag.trace(f, x)
    want = np.asarray(jax.jacrev(f)(x))
    for order in _orders(g):
        got = np.asarray(jax.jit(jacobian(f, order))(x))
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-6, err_msg=f"{name} {order}")
        assert executed_multiplications(f, order, x) == ag.cost(g, order), (name, order)


def moves_only(v):
    """A chain of element moves and a sign: reverse, slice, negate, pad, tile, stack, split."""
    a = jnp.tile(jnp.pad(-v[::-1][1:], (1, 2)), 2)[3:11]
    return jnp.split(jnp.stack([a[::2]]), 2, axis=1)[0][:, ::-1]


def test_index_maps_have_their_kind_and_moves_cost_nothing():
    moves = {"slice": "perm", "pad": "perm", "rev": "perm", "tile": "row", "concatenate": "perm",
             "dynamic_slice": "perm", "gather": "row", "stack": "perm", "split": "perm", "scatter-add": "col"}
    for name in ("slice", "pad", "rev", "tile", "concatenate", "dynamic_slice", "gather", "stack", "split", "scatter_add"):
        f, x = CASES[name]
        g = ag.trace(f, x)
        kinds = {(g.sources[e.dst].split(" ")[0], e.structure.index_map) for e in g.edges}
        moved = {(k, m) for k, m in kinds if k in moves}
        assert moved and all(m == moves[k] for k, m in moved), (name, kinds)
    g = ag.trace(moves_only, V)
    assert len(g.intermediates) >= 8
    for order in _orders(g, count=8):
        assert ag.cost(g, order) == 0
        assert executed_multiplications(moves_only, order, V) == 0
    np.testing.assert_array_equal(np.asarray(jacobian(moves_only, "markowitz")(V)), np.asarray(jax.jacrev(moves_only)(V)))


def test_two_maps_summed_onto_one_edge_are_a_value():
    """A roll is two slices concatenated: eliminating both slices sums two maps onto one
    edge, which is exact as a value (the rule tables do not see the maps' entries)."""
    f, v = CASES["roll"]
    g = ag.trace(f, v)
    rev = ag.baselines.resolve_order(g, "rev")
    assert ag.cost(g, "fwd") > 0 and executed_multiplications(f, "fwd", v) == ag.cost(g, "fwd")
    np.testing.assert_allclose(np.asarray(jacobian(f, rev)(v)), np.asarray(jax.jacrev(f)(v)), rtol=1e-6)


@pytest.mark.parametrize("op", ["gather", "scatter-add"])
def test_indices_computed_from_the_input_keep_an_exact_value(op):
    """Where the indices depend on the argument the map is not static: the Jacobian is a
    value computed at the point (exact, not free), and is still jacrev's."""
    at = lambda v: jnp.arange(3) + jnp.argmax(v) % 3
    f = {"gather": lambda v: jnp.sin(v)[at(v)] * 2.0,
         "scatter-add": lambda v: jnp.sin(jnp.zeros(5).at[at(v)].add(jnp.cos(v[:3]))) * 2.0}[op]
    g = ag.trace(f, V)
    edges = [e.structure for e in g.edges if g.sources[e.dst].startswith(op)]
    assert edges and not any(s.index_map for s in edges)
    for order in ("fwd", "rev"):
        np.testing.assert_allclose(np.asarray(jacobian(f, order)(V)), np.asarray(jax.jacrev(f)(V)), rtol=1e-6)
        assert executed_multiplications(f, order, V) == ag.cost(g, order)


def _constant_sizes(hlo: str) -> list:
    """Element counts of the array constants in a lowered module."""
    sizes = []
    for dims in re.findall(r"stablehlo\.constant dense<.*?> : tensor<([0-9x]+)x[a-z0-9]+>", hlo):
        sizes.append(int(np.prod([int(d) for d in dims.split("x")])))
    return sizes


def test_no_dense_index_matrix_reaches_the_program():
    n = 300
    v = jnp.linspace(0.5, 1.5, n)
    f = lambda v: jnp.tanh(v[2:]) * jnp.concatenate([jnp.sin(v[1:-2]), v[:1]])
    for order in ("fwd", "rev", "markowitz"):
        hlo = jax.jit(jacobian(f, order)).lower(v).as_text()
        assert max(_constant_sizes(hlo), default=0) < n * 10, order
        np.testing.assert_allclose(np.asarray(jacobian(f, order)(v)), np.asarray(jax.jacrev(f)(v)), rtol=1e-5, atol=1e-6)
