"""The scoring door (issue 16, "unclear today"): every wrong argument to ``alphagrad.cost``
(and to ``alphagrad.jacobian``, which resolves orders through the same
``baselines.resolve_order``) gets an error that says what to pass instead, and every
reasonable spelling of an order is accepted."""

import types

import jax.numpy as jnp
import numpy as np
import pytest

import alphagrad as ag
from alphagrad import baselines, interpreter, orders


def f(x, W):
    return jnp.tanh(W @ jnp.sin(x)).sum()


ARGS = (jnp.linspace(0.1, 0.3, 3), jnp.arange(12.0).reshape(4, 3) / 10)
WHAT_TO_DO = r"pass the intermediates of this graph in elimination order, e.g\. list\(graph\.intermediates\)"


@pytest.fixture(scope="module")
def graph():
    return ag.trace(f, *ARGS)


def _order_result(graph, order, fingerprint=None):
    from alphagrad.agent import OrderResult

    return OrderResult(order=list(order), cost=ag.cost(graph, order), baselines={}, method="test",
                       network_cost=None, seconds=0.0, compile_seconds=0.0, history=[],
                       fingerprint=fingerprint or graph.fingerprint)


def test_unknown_convention_names_the_conventions(graph):
    with pytest.raises(ValueError, match=r"unknown cost convention 'foo'; use one of \['exact', 'published'\]"):
        ag.cost(graph, "rev", convention="foo")


def test_a_function_instead_of_a_graph_is_told_to_trace_it_first():
    with pytest.raises(TypeError, match=r"not a function: trace it first: "
                                        r"alphagrad\.cost\(alphagrad\.trace\(f, \*args\), order\)"):
        ag.cost(f, "rev")


def test_something_else_instead_of_a_graph_is_told_to_trace_it_first():
    with pytest.raises(TypeError, match=r"not a ndarray: trace it first: alphagrad\.cost\(alphagrad\.trace"):
        ag.cost(np.eye(3), "rev")


def test_float_vertex_ids_are_refused(graph):
    with pytest.raises(TypeError, match=r"vertex ids are ints, but the order contains 2\.0 \(float\); " + WHAT_TO_DO):
        ag.cost(graph, [float(v) for v in graph.intermediates])


def test_a_float_array_is_refused(graph):
    with pytest.raises(TypeError, match=r"1-D array of integer vertex ids, got a 1-D array of float64; " + WHAT_TO_DO):
        ag.cost(graph, np.asarray(graph.intermediates, np.float64))


def test_bool_vertex_ids_are_refused(graph):
    with pytest.raises(TypeError, match=r"vertex ids are ints, but the order contains True"):
        ag.cost(graph, [True] + list(graph.intermediates[1:]))


def test_an_unknown_name_lists_the_names(graph):
    with pytest.raises(ValueError, match=r"unknown order 'sideways'; use one of \['forward', 'fwd', 'markowitz', "
                                         r"'rev', 'reverse'\] or a list of vertex ids"):
        ag.cost(graph, "sideways")


def test_string_vertex_ids_are_refused(graph):
    with pytest.raises(TypeError, match=r"vertex ids are ints, but the order contains '\d+' \(str\); " + WHAT_TO_DO):
        ag.cost(graph, [str(v) for v in graph.intermediates])


def test_bytes_are_refused(graph):
    with pytest.raises(TypeError, match=r"an order is a sequence of vertex ids, not bytes"):
        ag.cost(graph, bytes(graph.intermediates))


@pytest.mark.parametrize("kind", [set, frozenset, dict.fromkeys])
def test_an_unordered_collection_is_refused(graph, kind):
    with pytest.raises(TypeError, match=r"has no order; " + WHAT_TO_DO):
        ag.cost(graph, kind(graph.intermediates))


def test_a_repeated_vertex_is_named(graph):
    inter = list(graph.intermediates)
    with pytest.raises(ValueError, match=rf"more than once: \[{inter[0]}\]; eliminate each intermediate exactly once"):
        ag.cost(graph, inter[:-1] + [inter[0]])


def test_a_missing_vertex_is_named(graph):
    inter = list(graph.intermediates)
    with pytest.raises(ValueError, match=rf"missing 1 intermediate vertices, e\.g\. \[{inter[-1]}\]; eliminate each"):
        ag.cost(graph, inter[:-1])


@pytest.mark.parametrize("foreign", [0, -1, 10_000])
def test_a_foreign_vertex_is_named(graph, foreign):
    inter = list(graph.intermediates)
    kind = "input" if foreign == 0 else "not a vertex"
    with pytest.raises(ValueError, match=rf"not intermediates of this graph: \{{{foreign}: '{kind}'\}}.*" + WHAT_TO_DO):
        ag.cost(graph, inter[:-1] + [foreign])


def test_not_an_order_at_all_is_refused(graph):
    with pytest.raises(TypeError, match=r"an order is a sequence of vertex ids, got NoneType None; " + WHAT_TO_DO):
        ag.cost(graph, None)
    with pytest.raises(TypeError, match=r"1-D array of integer vertex ids, got a 2-D array"):
        ag.cost(graph, np.asarray([graph.intermediates]))


def test_every_reasonable_spelling_of_an_order_is_accepted(graph):
    inter = list(graph.intermediates)
    want = ag.cost(graph, inter)
    spellings = [tuple(inter), np.asarray(inter, np.int32), np.asarray(inter, np.uint64), jnp.asarray(inter),
                 [np.int64(v) for v in inter], iter(inter), range(inter[0], inter[-1] + 1)]
    assert inter == list(range(inter[0], inter[-1] + 1))
    for order in spellings:
        assert ag.cost(graph, order) == want


def test_named_orders_match_the_baselines(graph):
    for name, fn in orders.BASELINES.items():
        assert ag.cost(graph, name) == ag.cost(graph, fn(graph))
    # "markowitz" is computed in the cost model it is scored in
    assert ag.cost(graph, "markowitz", convention="published") == \
        ag.cost(graph, baselines.markowitz(graph, "published"), convention="published")


def test_cost_accepts_an_order_result_as_jacobian_does(graph):
    order = baselines.markowitz(graph)
    result = _order_result(graph, order)
    assert ag.cost(graph, result) == ag.cost(graph, order) == result.cost
    np.testing.assert_allclose(np.asarray(ag.jacobian(f, result, argnums=1)(*ARGS)),
                               np.asarray(ag.jacobian(f, order, argnums=1)(*ARGS)))
    duck = types.SimpleNamespace(order=np.asarray(order))  # anything with .order
    assert ag.cost(graph, duck) == result.cost


def test_an_order_result_for_another_graph_is_refused_by_cost_and_jacobian(graph):
    other = ag.trace(f, jnp.ones(5), jnp.ones((4, 5)))
    result = _order_result(other, baselines.reverse(other))
    for call in (lambda: ag.cost(graph, result), lambda: ag.jacobian(f, result)(*ARGS)):
        with pytest.raises(ValueError, match=rf"computed for graph {other.fingerprint}.*compute the order for "
                                             r"these shapes"):
            call()


def test_cost_and_jacobian_resolve_orders_through_one_door(graph):
    assert interpreter.resolve_order is baselines.resolve_order
    for bad, error in (({*graph.intermediates}, TypeError), ([1.5], TypeError), ("up", ValueError)):
        with pytest.raises(error) as from_cost:
            ag.cost(graph, bad)
        with pytest.raises(error) as from_jacobian:
            ag.jacobian(f, bad)(*ARGS)
        assert str(from_cost.value) == str(from_jacobian.value)
