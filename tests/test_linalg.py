"""Linear algebra as vertices (custom_linear_solve, cholesky, lu, triangular_solve): local
Jacobians from JAX's own JVP rules, dense over the matrix axes. Every function below,
composed with elementwise work so the orders differ, gives jax.jacrev's Jacobian in
forward, reverse, Markowitz and random orders, with executed == predicted multiplications."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
import pytest
from jax import lax

import alphagrad as ag
from alphagrad import baselines
from alphagrad.interpreter import accumulate, executed_multiplications, jacobian

_rng = np.random.default_rng(0)
A3 = jnp.asarray(_rng.normal(size=(3, 3)), jnp.float32) + 3.0 * jnp.eye(3)
A4 = jnp.asarray(_rng.normal(size=(4, 4)), jnp.float32) + 3.0 * jnp.eye(4)
B = jnp.asarray(_rng.normal(size=(3, 2)), jnp.float32)
v3 = jnp.linspace(0.1, 0.9, 3)
S4 = jnp.asarray(_rng.normal(size=(2, 4, 4)), jnp.float32)  # a batch of two


def spd(m):
    return m @ m.T + jnp.eye(m.shape[-1])


CASES = {
    "solve": (lambda a, b: jnp.sin(jnp.linalg.solve(a * 1.5, jnp.exp(b))) * b, (A3, v3)),
    "solve_matrix": (lambda a, b: jnp.tanh(jnp.linalg.solve(jnp.cos(a) + 3.0 * jnp.eye(3), b * b)), (A3, B)),
    "inv": (lambda a: jnp.linalg.inv(jnp.exp(a * 0.2) + jnp.eye(4)).sum(0) * a[0], (A4,)),
    "det": (lambda a: jnp.linalg.det(jnp.sin(a) + 2.0 * jnp.eye(4)) * a.sum(), (A4,)),
    "slogdet": (lambda a: jnp.linalg.slogdet(spd(jnp.tanh(a)))[1] + jnp.sin(a).sum(), (A3,)),
    "cholesky": (lambda a: jnp.sin(jnp.linalg.cholesky(spd(a * 0.3))), (A4,)),
    "cholesky_batched": (lambda s: jnp.exp(jnp.linalg.cholesky(jax.vmap(spd)(s * 0.3)) * 0.1), (S4,)),
    "solve_triangular": (lambda a, b: jsl.solve_triangular(jnp.tril(a) * 1.2, jnp.sin(b), lower=True) ** 2,
                         (A3, B)),
    "solve_triangular_upper_transposed": (
        lambda a, b: jnp.cos(jsl.solve_triangular(jnp.triu(a) + jnp.eye(3), b * a[0], trans=1)), (A3, v3)),
    "cho_solve": (lambda a, b: jnp.sin(jsl.cho_solve(jsl.cho_factor(spd(a * 0.4)), b * 2.0)), (A3, v3)),
    "lu": (lambda a: jnp.tanh(jax.lax.linalg.lu(jnp.exp(a * 0.3))[0]), (A4,)),
}


def _close(got, expected):
    for g, e in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(expected), strict=True):
        np.testing.assert_allclose(g, e, rtol=2e-4, atol=2e-5)


def _orders(graph):
    inter = list(graph.intermediates)
    rng = np.random.default_rng(1)
    randoms = [list(rng.permutation(inter)) for _ in range(2)]
    return ["fwd", "rev", "markowitz"] + randoms


@pytest.mark.parametrize("name", sorted(CASES))
def test_jacobian_equals_jacrev_with_predicted_multiplications(name):
    f, args = CASES[name]
    nums = tuple(range(len(args)))
    graph = ag.trace(f, *args)
    assert len(graph.intermediates) >= 3
    expected = jax.jacrev(f, argnums=nums)(*args)
    for order in _orders(graph):
        _close(jacobian(f, order, argnums=nums)(*args), expected)
        assert executed_multiplications(f, order, *args) == ag.cost(graph, order) == _issued(graph, order, args)


def _issued(graph, order, args):
    """Multiplications the full interpreter issues on the local values at ``args``."""
    order = baselines.resolve_order(graph, order)
    out = []
    jax.eval_shape(lambda leaves: out.append(accumulate(graph, order, leaves)[2]) or 0, list(args))
    return out[0]


def _linalg_edges(graph, name):
    return [e for e in graph.edges if e.structure is not None and name in graph.sources[e.dst]]


def test_linalg_vertices_are_dense_over_matrix_axes_and_diagonal_over_batch_axes():
    """Costed honestly: a cholesky of 4x4 matrices is dense (16x16 values per matrix),
    a batch of two is block diagonal (not 32x32), and lu's integer pivots get no vertex."""
    f, args = CASES["cholesky_batched"]
    graph = ag.trace(f, *args)
    (edge,) = _linalg_edges(graph, "cholesky at")
    assert edge.structure.value_shape == (2, 4, 4, 4, 4)
    f, args = CASES["cholesky"]
    (edge,) = _linalg_edges(ag.trace(f, *args), "cholesky at")
    assert edge.structure.value_shape == (4, 4, 4, 4)
    lu_graph = ag.trace(lambda a: jax.lax.linalg.lu(jnp.exp(a))[0].sum() * 1.0, A4)
    lu_vertices = [v for v, s in enumerate(lu_graph.sources) if s.startswith("lu at")]
    assert len(lu_vertices) == 1 and lu_graph.shapes[lu_vertices[0]] == (4, 4)


def test_solve_is_one_vertex_not_its_inlined_jaxprs():
    """custom_linear_solve carries jaxprs (matvec, solve); it is one primitive whose
    Jacobian comes from JAX's rule, and the LU factors (computed under stop_gradient)
    are constants with no vertex."""
    graph = ag.trace(lambda a, b: jnp.linalg.solve(a, b), A3, v3)
    assert [graph.sources[v].split(" ")[0] for v in graph.intermediates] == []
    assert len(graph.edges) == 2 and all(e.structure.value_vars is not None for e in graph.edges)
    _close(jacobian(lambda a, b: jnp.linalg.solve(a, b), "rev", argnums=(0, 1))(A3, v3),
           jax.jacrev(lambda a, b: jnp.linalg.solve(a, b), argnums=(0, 1))(A3, v3))


def test_custom_linear_solve_consts_of_the_solver_have_no_edge():
    """JAX's rule gives the consts of ``solve``/``transpose_solve`` no derivative (here a
    deliberately inexact solver ``r / c``); the registry gives them no edge."""
    def f(a, c, b):
        return lax.custom_linear_solve(lambda x: a @ x, b, lambda mv, r: r / c, lambda vm, r: r / c)

    graph = ag.trace(f, A3, jnp.diag(A3), v3)
    assert {e.src for e in graph.edges} == {graph.input_vertices[0], graph.input_vertices[2]}
    _close(jacobian(f, "rev", argnums=(0, 1, 2))(A3, jnp.diag(A3), v3),
           jax.jacrev(f, argnums=(0, 1, 2))(A3, jnp.diag(A3), v3))

