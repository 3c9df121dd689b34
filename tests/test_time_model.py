"""The time model (convention "time"): what it sums, that searches minimise it, its
fallback, its fit and the refit's failure modes."""
from __future__ import annotations

import json
import os
import warnings

import jax.numpy as jnp
import numpy as np
import pytest

import alphagrad as ag
from alphagrad import cli, engine, orders, rules, scoring, time_fit, time_model as tm
from alphagrad.anneal import anneal
from alphagrad.evaluator import Evaluator

COEFS = {"kernel_op_s": 3e-6, "fused_op_s": 1e-7, "map_op_s": 5e-7, "kernel_mult_s": 2e-10, "fused_mult_s": 1e-10,
         "kernel_written_s": 3e-10, "fused_written_s": 4e-10, "map_written_s": 7e-10, "kernel_read_s": 1e-11,
         "fused_read_s": 2e-11, "map_read_s": 5e-11}


def f(x, W):
    h = jnp.tanh(W @ x)  # a dot, elementwise ops
    y = h[:3] * x[1:4] + jnp.concatenate([h[3:], x[:1]])  # slices and a concatenate: index maps
    return jnp.sum(y * y) + jnp.sin(W).sum(), y


@pytest.fixture()
def graph():
    return ag.trace(f, jnp.ones(5), jnp.ones((5, 5)))


@pytest.fixture()
def model_dir(tmp_path, monkeypatch):
    """A user model for the fake platform "testplat" (cache dir under tmp_path)."""
    monkeypatch.setenv(rules.CACHE_ENV, str(tmp_path))
    tm.save(tm.TimeModel("testplat", 8, COEFS), tm.user_path("testplat"))
    return tmp_path


def _product_ps(T, a, b, batch):
    """One product's modelled picoseconds, from what the interpreter emits for it
    (``structure.product_value``'s branches), independently of the vectorised table."""
    p = T.products[(a, b)]
    la, lb, lout = p.einsum
    sa, sb = T.structures[a], T.structures[b]
    if lout is None:
        return 0
    if any(p.maps):
        others = [s for s, lab, m in ((sa, la, p.maps[0]), (sb, lb, p.maps[1])) if lab is not None and not m]
        if p.result.index_map or sum(p.maps) == 2 or not others:
            return 0  # a static table, computed while tracing
        kind, read = "map", others[0].value_size
    else:
        labels = [lab for lab in (la, lb) if lab is not None]
        if not labels:
            return 0  # a constant
        kind = "kernel" if set().union(*map(set, labels)) - set(lout) else "fused"
        read = sum(s.value_size for s, lab in ((sa, la), (sb, lb)) if lab is not None)
    mults = p.cost["exact"]
    seconds = COEFS[f"{kind}_op_s"] + batch * (COEFS["kernel_mult_s" if kind == "kernel" else "fused_mult_s"] * mults
                                               + COEFS[f"{kind}_written_s"] * p.result.value_size
                                               + COEFS[f"{kind}_read_s"] * read)
    return round(seconds / tm.UNIT_S)


def _python_time(graph, order, batch):
    T = rules.tables(graph)
    E = Evaluator(graph)._exact_state()
    total = 0
    for j in order:
        preds = [(i, s) for (i, k), s in E.items() if k == j]
        succs = [(k, s) for (i, k), s in E.items() if i == j]
        for i, b in preds:
            for k, a in succs:
                total += _product_ps(T, a, b, batch)
                E[(i, k)] = int(T.join[E.get((i, k), 0), T.compose[a, b]])
        for key in [e for e in E if j in e]:
            del E[key]
    return total * tm.UNIT_S


def test_time_is_the_sum_of_its_products(graph, model_dir):
    kinds = set()
    for order in ("fwd", "rev", "markowitz", list(np.random.default_rng(0).permutation(graph.intermediates))):
        got = ag.cost(graph, order, convention="time", platform="testplat")
        resolved = scoring.resolve_order(graph, order, "time:testplat")
        assert got == pytest.approx(_python_time(graph, resolved, 8), rel=1e-12, abs=1e-15)
        kinds |= {k for k in tm.KINDS if tm.order_features(graph, resolved)[tm.FEATURES.index(f"{k}_op_s")] > 0}
    assert kinds == set(tm.KINDS)  # the graph exercises every kind of op
    assert isinstance(got, float) and got > 0


def test_annealing_and_markowitz_minimise_time(graph, model_dir):
    start = ag.cost(graph, "fwd", convention="time", platform="testplat")
    order = anneal(graph, convention="time:testplat", iterations=3000, start="fwd", threads=1, seed=1)
    assert ag.cost(graph, order, convention="time", platform="testplat") <= start
    assert graph.check_order(orders.markowitz(graph, "time:testplat"))


def test_unknown_platform_warns_and_counts_multiplications(graph, tmp_path, monkeypatch):
    monkeypatch.setenv(rules.CACHE_ENV, str(tmp_path))
    with pytest.warns(UserWarning, match="no time model is fitted for platform 'nosuchplatform'"):
        got = ag.cost(graph, "rev", convention="time", platform="nosuchplatform")
    assert got == pytest.approx(ag.cost(graph, "rev") * 1e-9)
    with pytest.raises(ValueError, match="platform= is for convention='time'"):
        ag.cost(graph, "rev", platform="cpu")
    with pytest.raises(ValueError, match="unknown cost convention"):
        engine.encode(graph, "seconds")
    with pytest.warns(UserWarning, match="no time model is fitted for platform 'otherplatform'"):
        state = engine.encode(graph, "time:otherplatform")  # the JAX game: the same fallback
    np.testing.assert_allclose(np.asarray(state.cost), np.asarray(engine.encode(graph).cost) * 1e-9 * 1e12, rtol=1e-6)


def test_packaged_cpu_model_loads(tmp_path, monkeypatch):
    monkeypatch.setenv(rules.CACHE_ENV, str(tmp_path))  # no user model
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = tm.load("cpu")
    assert model.source == tm.packaged_path("cpu") and model.batch >= 1
    assert any(v > 0 for v in model.coefficients.values())


def test_failed_refit_leaves_the_stored_model_untouched(model_dir, monkeypatch):
    path = tm.user_path("testplat")
    before = open(path, "rb").read()
    with pytest.raises(time_fit.FitError, match="no 'testplat' device"):
        time_fit.refit(time_fit.FitSettings.quick(), "testplat")

    def broken(*args, **kwargs):
        raise time_fit.FitError("cannot compile the Jacobian in order 'forward' (XlaRuntimeError: boom)")
    monkeypatch.setattr(time_fit, "time_orders", broken)
    with pytest.raises(time_fit.FitError, match="cannot compile"):
        time_fit.refit(time_fit.FitSettings(programs=("MLP",), anneal_s=0.05), "cpu", path)
    assert open(path, "rb").read() == before
    assert cli.main(["timemodel", "fit", "--platform", "testplat", "--out", path]) == 1
    assert open(path, "rb").read() == before


def test_fit_recovers_known_coefficients():
    rng = np.random.default_rng(0)
    truth = np.asarray([COEFS[k] for k in tm.FEATURES])
    batch, n = 16, 400
    X = rng.uniform(0, 1, (n, len(tm.FEATURES))) * np.asarray(
        [50 if k.endswith("_op_s") else 1e5 for k in tm.FEATURES])
    groups = [f"p{i % 10}" for i in range(n)]
    intercepts = {f"p{i}": 1e-4 * (i + 1) for i in range(10)}
    model = tm.TimeModel("x", batch, dict(zip(tm.FEATURES, truth)))
    seconds = X @ model.weights() + np.asarray([intercepts[g] for g in groups])
    got = tm.fit(X, seconds, groups, batch)
    assert np.allclose([got[k] for k in tm.FEATURES], truth, rtol=1e-6)
    noisy = tm.fit(X, seconds * rng.lognormal(0, 0.01, n), groups, batch)
    assert all(v >= 0 for v in noisy.values())
    big = [k for k in tm.FEATURES if not k.endswith("_read_s")]
    assert np.allclose([noisy[k] for k in big], [COEFS[k] for k in big], rtol=0.2)


def test_model_file_round_trip(tmp_path):
    model = tm.TimeModel("cpu", 4, COEFS, fit={"orders": 3})
    tm.save(model, str(tmp_path / "m.json"))
    back = tm.TimeModel.from_json(json.load(open(tmp_path / "m.json")))
    assert back.coefficients == COEFS and back.batch == 4 and back.fit == {"orders": 3}
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]
    with pytest.raises(ValueError, match="not a time model"):
        tm.TimeModel("cpu", 4, {"kernel_op_s": -1.0})
