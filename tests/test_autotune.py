"""``alphagrad.jacobian(f)`` with no order (alphagrad.autotune), the canonical graph hash
(alphagrad.canonical) and the disk cache of orders (alphagrad.order_cache)."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import textwrap
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import alphagrad as ag
from alphagrad import autotune, order_cache
from alphagrad.autotune import AutoJacobian, AutoSettings, Budget, parse_budget
from alphagrad.canonical import canonical
from alphagrad.examples import get
from alphagrad.graph import Edge, Graph

FAST = AutoSettings(budget_s=0.1, repeats=2, timing_s=0.2)
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir))


def f(x, W):
    h = jnp.tanh(W @ jnp.sin(x))
    return jnp.exp(h) * jnp.log1p(x.sum() ** 2) + W.sum(1) * h


X, W = jnp.arange(1.0, 4.0), jnp.ones((4, 3))


def _close(got, want):
    for a, b in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("ALPHAGRAD_CACHE_DIR", str(tmp_path))
    return tmp_path / "orders"


class FakeTimer:
    """Stands in for :func:`autotune.sample_candidates`: every call's candidates (``seen``,
    name sets; ``fns``) and arguments (``args``) recorded, times from ``speeds``: name or
    (name, shape of the first argument leaf) -> seconds, 1 ms if not named."""

    def __init__(self):
        self.seen, self.fns, self.args, self.speeds = [], [], [], {}

    def __call__(self, fns, args, settings):
        self.seen.append(set(fns))
        self.fns.append(fns)
        self.args.append(args)
        shape = jax.tree_util.tree_leaves(args)[0].shape
        return {n: [self.speeds.get((n, shape), self.speeds.get(n, 1e-3))] * 3 for n in fns}


@pytest.fixture
def fake_timer(monkeypatch):
    """No ahead-of-time compiles; a :class:`FakeTimer` in place of the timer."""
    timer = FakeTimer()
    monkeypatch.setattr(autotune, "_compile", lambda fn, args: None)
    monkeypatch.setattr(autotune, "sample_candidates", timer)
    return timer


# ------------------------------------------------------------------------ auto's choice

@pytest.mark.parametrize("name", ["LennardJones_5", "Lighthouse", "HelmholtzEnergy_8"])
def test_auto_equals_jacrev_and_keeps_the_fastest_it_timed(name):
    ex = get(name)
    nums = tuple(range(len(ex.args)))
    J = ag.jacobian(ex.fn, argnums=nums, cache=False, settings=FAST)
    _close(J(*ex.args), jax.jacrev(ex.fn, argnums=nums)(*ex.args))
    [choice] = J.choices
    assert choice.name in {"jax.jacfwd", "jax.jacrev", "order", "order #2"}
    assert {"jax.jacfwd", "jax.jacrev", "order"} <= set(choice.times)
    fastest = min(choice.times, key=choice.times.__getitem__)
    jax_best = min(autotune.JAX_CANDIDATES, key=choice.times.__getitem__)
    assert choice.name == fastest or (choice.name == jax_best and "a tie goes to JAX" in choice.how)
    assert choice.name in J.explain() and "timed (median)" in J.explain()
    _close(J(*ex.args), jax.jacrev(ex.fn, argnums=nums)(*ex.args))  # the kept choice
    assert len(J.choices) == 1


@pytest.mark.parametrize("fastest", ["jax.jacfwd", "jax.jacrev", "order"])
def test_auto_picks_what_the_timer_says_is_fastest(fake_timer, fastest):
    seen, speeds = fake_timer.seen, fake_timer.speeds
    speeds[fastest] = 1e-6
    J = ag.jacobian(f, argnums=(0, 1), cache=False, settings=FAST)
    _close(J(X, W), jax.jacrev(f, argnums=(0, 1))(X, W))
    assert J.choices[0].name == fastest and fastest in J.explain()
    assert {"jax.jacfwd", "jax.jacrev", "order"} <= seen[0]
    assert "the optimum (10 intermediates" in J.explain()


def test_an_explicit_order_is_computed_as_given():
    J = ag.jacobian(f, "markowitz", argnums=(0, 1))
    assert not isinstance(J, AutoJacobian)
    _close(J(X, W), jax.jacrev(f, argnums=(0, 1))(X, W))
    with pytest.raises(TypeError, match="apply to order='auto' only"):
        ag.jacobian(f, "rev", budget=1)
    assert "not called yet" in ag.jacobian(f).explain()


def test_has_aux_and_argnums_as_jacrev(fake_timer):
    h = lambda x, w: (f(x, w), {"s": x.sum()})
    J = ag.jacobian(h, argnums=1, has_aux=True, cache=False, settings=FAST)
    _close(J(X, W), jax.jacrev(h, argnums=1, has_aux=True)(X, W))
    with pytest.raises(TypeError, match="real-valued inputs"):
        ag.jacobian(f, cache=False)(jnp.arange(3), W)
    with pytest.raises(ValueError, match="out of range"):
        ag.jacobian(f, argnums=2, cache=False)(X, W)


def test_inside_jit_the_cheapest_order_untimed_then_timed_outside():
    J = ag.jacobian(f, cache=False, settings=FAST)
    _close(jax.jit(J)(X, W), jax.jacrev(f)(X, W))
    assert not J.choices[0].timed and "not timed" in J.explain()
    assert J.choices[0].name == "order"
    _close(J(X, W), jax.jacrev(f)(X, W))
    assert J.choices[0].timed and len(J.choices) == 1
    xs, ws = jnp.ones((5, 3)) * jnp.arange(5.0)[:, None], jnp.ones((5, 4, 3))
    _close(jax.jit(jax.vmap(J))(xs, ws), jax.vmap(jax.jacrev(f))(xs, ws))
    assert J.choices[-1].batch == 5 and not J.choices[-1].timed  # no choice kept for batch 5


XS, WS = jnp.linspace(0.5, 2.0, 256 * 3).reshape(256, 3), jnp.ones((256, 4, 3))


def test_the_choice_is_made_for_the_batch_on_batched_inputs(cache_dir, fake_timer):
    timer = fake_timer
    timer.speeds.update({("order", (1, 3)): 1e-6, ("jax.jacrev", (256, 3)): 1e-6})  # the ranking flips
    want = jax.jacrev(f, argnums=(0, 1))(X, W)
    J1, J256 = (ag.jacobian(f, argnums=(0, 1), settings=FAST, batch=b) for b in (1, 256))
    _close(J1(X, W), want)
    _close(J256(X, W), want)
    assert (J1.choices[0].name, J256.choices[0].name) == ("order", "jax.jacrev")
    assert [[a.shape for a in args] for args in timer.args] == [[(1, 3), (1, 4, 3)], [(256, 3), (256, 4, 3)]]
    np.testing.assert_array_equal(timer.args[1][0], jnp.broadcast_to(X, (256, 3)))  # the call's, repeated
    assert timer.fns[1]["jax.jacrev"](*timer.args[1])[1].shape == (256, 4, 4, 3)  # timed as jit(vmap(.))
    entries = {e.spec: e for _, e in order_cache.entries(str(cache_dir))}
    assert {s.rsplit(" ", 1)[1]: e.choice for s, e in entries.items()} == {"1": "order", "256": "jax.jacrev"}
    assert len({e.key for e in entries.values()}) == 2
    n = len(timer.seen)
    _close(jax.jit(jax.vmap(J256))(XS, WS), jax.jit(jax.vmap(jax.jacrev(f, argnums=(0, 1))))(XS, WS))  # kept
    J = ag.jacobian(f, argnums=(0, 1), settings=FAST, batch=256)  # a new one reads batch 256's entry
    J(X, W)
    assert J.choices[0].name == "jax.jacrev" and "from the cache" in J.explain()
    assert len(timer.seen) == n and len(J256.choices) == 1


def test_under_vmap_the_batch_is_read_from_the_vmap(fake_timer):
    timer = fake_timer
    J = ag.jacobian(f, cache=False, settings=FAST)
    want = jax.jit(jax.vmap(jax.jacrev(f)))
    _close(jax.vmap(J, in_axes=(0, None))(XS[:4], W), want(XS[:4], jnp.broadcast_to(W, (4, 4, 3))))
    assert [c.batch for c in J.choices] == [None, 4] and J.choices[1].timed
    np.testing.assert_array_equal(timer.args[-1][0], XS[:4])  # the vmap's own values, W not batched
    assert timer.args[-1][1].shape == (4, 3) and len(timer.seen) == 1
    assert "the order found for (f32[3], f32[4,3]) d/d args 0" in J.choices[1].how  # no second search
    _close(jax.jit(jax.vmap(J))(XS[:8], WS[:8]), want(XS[:8], WS[:8]))
    assert J.choices[-1].batch == 8 and not J.choices[-1].timed and len(timer.seen) == 1
    assert "not timed at batch 8" in J.explain() and "batch=8" in J.explain()
    hessian = jax.jit(jax.jacrev(lambda x: J(x, W)))(X)  # reverse mode through the vmap rule's custom_jvp
    _close(hessian, jax.jit(jax.jacrev(jax.jacrev(f)))(X, W))


def test_a_tie_goes_to_jax(fake_timer):
    fake_timer.speeds.update({"order": 0.98e-3, "jax.jacfwd": 2e-3})  # 2% faster: within min_gain
    J = ag.jacobian(f, cache=False, settings=FAST)
    J(X, W)
    assert J.choices[0].name == "jax.jacrev" and "a tie goes to JAX" in J.explain()


def _cycling(clock: list, seconds_ms):
    """A candidate whose calls advance the fake ``clock`` by ``seconds_ms`` in turn."""
    durations = iter(seconds_ms * 1000)

    def fn(*args):
        clock[0] += next(durations) * 1e-3

    return fn


@pytest.mark.parametrize("order_ms, rounds, kept", [([0.7, 0.9, 1.1], 25, "jax.jacrev"),  # 10% faster, noisy
                                                    ([0.45, 0.5, 0.55], 5, "order")])  # 50% faster
def test_more_rounds_while_within_noise_then_a_tie_goes_to_jax(order_ms, rounds, kept):
    clock = [0.0]
    fns = {"jax.jacrev": _cycling(clock, [1.0]), "order": _cycling(clock, order_ms)}
    settings = AutoSettings(sample_s=0.0, spread_s=0.0)  # one call a sample, rounds as the noise asks
    samples = autotune.sample_candidates(fns, (), settings, clock=lambda: clock[0])
    assert [len(s) for s in samples.values()] == [rounds, rounds]
    assert rounds == settings.repeats + (settings.noise_repeats if kept != "order" else 0)
    name, note = autotune.verdict(samples, settings)
    assert name == kept and ("tie goes to JAX" in note) == (kept != "order")


def test_each_branch_path_gets_its_choice(fake_timer):
    def branchy(x):
        return jax.lax.cond(x.sum() > 0, lambda v: jnp.sin(v) * v, lambda v: jnp.exp(v).sum() * v, x)

    J = ag.jacobian(branchy, cache=False, settings=FAST)
    for x in (jnp.ones(3), -jnp.ones(3)):
        _close(J(x), jax.jacrev(branchy)(x))
    assert len(J.choices) == 2


def test_budget_rules_search_a_larger_graph(fake_timer):
    ex = get("MLP")
    want = jax.jacrev(ex.fn)(*ex.args)
    for budget, said in [(0, "no search"), (0.2, "annealed for 0.2 s"), ("patience:2", "found nothing cheaper"),
                         ("rate:1000", "saved less than it cost")]:
        J = ag.jacobian(ex.fn, budget=budget, cache=False, settings=FAST)
        _close(J(*ex.args), want)
        assert said in J.choices[0].how, J.explain()
    g = ag.trace(ex.fn, *ex.args)
    assert J.choices[0].cost <= ag.cost(g, "markowitz")


def test_a_start_order_is_checked_and_used(fake_timer):
    ex = get("MLP")
    g = ag.trace(ex.fn, *ex.args)
    mine = list(reversed(ag.baselines.markowitz(g)))
    J = ag.jacobian(ex.fn, start=mine, budget=0, cache=False, settings=FAST)
    J(*ex.args)
    assert "your start" in J.choices[0].how
    with pytest.raises(ValueError, match="not intermediates"):
        ag.jacobian(ex.fn, start=[0, 1, 2], cache=False)(*ex.args)
    with pytest.raises(ValueError, match="unknown order"):
        ag.jacobian(ex.fn, start="sideways")
    with pytest.raises(TypeError, match="no order|not a set"):
        ag.jacobian(ex.fn, start={1, 2})


@pytest.mark.parametrize("bad, error", [(-1, ValueError), (float("nan"), ValueError), (float("inf"), ValueError),
                                        ("fast", ValueError), ("rate:", ValueError), ("rate:-2", ValueError),
                                        ("rate:nan", ValueError), ("patience:0", ValueError),
                                        ("patience:1.5", ValueError), ("seconds:3", ValueError),
                                        (True, TypeError), ([1], TypeError)])
def test_bad_budgets_fail_before_any_work(bad, error):
    with pytest.raises(error, match="budget"):
        ag.jacobian(f, budget=bad)
    with pytest.raises(TypeError, match="refine must be True or False"):
        ag.jacobian(f, refine="yes")


@pytest.mark.parametrize("bad, error", [(0, ValueError), (-3, ValueError), (float("nan"), TypeError),
                                        (2.0, TypeError), (True, TypeError), ("256", TypeError)])
def test_bad_batches_fail_before_any_work(bad, error):
    with pytest.raises(error, match="batch is the jax.vmap batch size"):
        ag.jacobian(f, batch=bad)
    with pytest.raises(TypeError, match="apply to order='auto' only"):
        ag.jacobian(f, "rev", batch=4)
    assert ag.jacobian(f, batch=np.int64(4)).batch == 4


def test_budget_rules_parse():
    assert parse_budget(None) == Budget("seconds", AutoSettings().budget_s)
    assert parse_budget(0) == Budget("seconds", 0.0)
    assert parse_budget("rate:1e6") == Budget("rate", 1e6)
    assert parse_budget("patience:3") == Budget("patience", 3.0)


# ---------------------------------------------------------------------- canonical hash

def renumbered(graph: Graph, seed: int) -> tuple[Graph, dict]:
    """``graph`` with its non-input vertices renumbered in another topological order (and
    renamed sources' functions kept): the same function, traced another way."""
    rng = random.Random(seed)
    succs = [[] for _ in range(graph.num_vertices)]
    indeg = [0] * graph.num_vertices
    for e in graph.edges:
        succs[e.src].append(e.dst)
        indeg[e.dst] += 1
    new = list(graph.inputs)
    ready = [v for v in range(graph.num_vertices) if indeg[v] == 0 and v not in new]
    for v in new:
        for w in succs[v]:
            indeg[w] -= 1
            if indeg[w] == 0:
                ready.append(w)
    while ready:
        v = ready.pop(rng.randrange(len(ready)))
        new.append(v)
        for w in succs[v]:
            indeg[w] -= 1
            if indeg[w] == 0:
                ready.append(w)
    pos = {v: k for k, v in enumerate(new)}
    perm = lambda values: tuple(values[v] for v in new)
    edges = sorted((Edge(pos[e.src], pos[e.dst], e.structure) for e in graph.edges), key=lambda e: (e.dst, e.src))
    copy = Graph(shapes=perm(graph.shapes), dtypes=perm(graph.dtypes), kinds=perm(graph.kinds), edges=tuple(edges),
                 sources=tuple(s.replace("_roe_flux_3d_sample", "renamed") for s in perm(graph.sources)),
                 input_vertices=tuple(pos[v] if v >= 0 else -1 for v in graph.input_vertices),
                 output_vertices=tuple(pos[v] for v in graph.output_vertices),
                 in_tree=graph.in_tree, out_tree=graph.out_tree, branches=graph.branches)
    return copy, pos


@pytest.mark.parametrize("name", ["RoeFlux_3d", "LSTM_h8", "LennardJones_5"])
def test_the_cache_key_survives_renumbering_and_orders_map_back(name):
    ex = get(name)
    graph = ag.trace(ex.fn, *ex.args)
    copy, _ = renumbered(graph, 1)
    assert copy.fingerprint != graph.fingerprint or len(graph.intermediates) < 20
    a, b = canonical(graph), canonical(copy)
    assert a.hash == b.hash and a.exact and b.exact
    spec = "(f32[3],) d/d args 0"
    assert order_cache.key(a.hash, spec, "cpu:cpu") == order_cache.key(b.hash, spec, "cpu:cpu")
    order = ag.baselines.markowitz(graph)
    mapped = b.from_labels(a.to_labels(order))
    assert ag.cost(copy, mapped) == ag.cost(graph, order)


def test_the_cache_key_differs_for_another_shape_or_device():
    g3 = ag.trace(f, jnp.ones(3), jnp.ones((4, 3)))
    g5 = ag.trace(f, jnp.ones(5), jnp.ones((4, 5)))
    assert canonical(g3).hash != canonical(g5).hash
    spec = order_cache.spec_of((jax.ShapeDtypeStruct((3,), jnp.float32), jax.ShapeDtypeStruct((4, 3), jnp.float32)),
                               (0,))
    assert spec == "(f32[3], f32[4,3]) d/d args 0"
    k = order_cache.key(canonical(g3).hash, spec, "cpu:cpu")
    assert k != order_cache.key(canonical(g5).hash, spec, "cpu:cpu")
    assert k != order_cache.key(canonical(g3).hash, spec, "tpu:TPU v5 lite")
    assert k != order_cache.key(canonical(g3).hash, spec.replace("args 0", "args 0,1"), "cpu:cpu")
    one = (jax.ShapeDtypeStruct((3,), jnp.float32),)
    specs = {order_cache.spec_of(one, (0,), batch) for batch in (None, 1, 256)}
    assert len({order_cache.key(canonical(g3).hash, s, "cpu:cpu") for s in specs}) == 3  # one per batch


# ------------------------------------------------------------------------ the disk cache

def test_a_new_jacobian_reuses_the_kept_choice(cache_dir, fake_timer):
    seen, speeds = fake_timer.seen, fake_timer.speeds
    speeds["jax.jacrev"] = 1e-6
    ag.jacobian(f, argnums=(0, 1), settings=FAST)(X, W)
    [entry] = [e for _, e in order_cache.entries(str(cache_dir))]
    assert entry.choice == "jax.jacrev" and entry.function == "f" and entry.timed
    J = ag.jacobian(f, argnums=(0, 1), settings=FAST)
    _close(J(X, W), jax.jacrev(f, argnums=(0, 1))(X, W))
    assert len(seen) == 1 and "from the cache" in J.explain() and J.choices[0].name == "jax.jacrev"
    J = ag.jacobian(f, argnums=(0, 1), settings=FAST, cache=False)  # cache=False: searched and timed again
    J(X, W)
    assert len(seen) == 2


def test_refine_continues_from_the_kept_order_and_keeps_only_cheaper(cache_dir, fake_timer):
    ex = get("RoeFlux_3d")
    g = ag.trace(ex.fn, *ex.args)
    ag.jacobian(ex.fn, budget=0, settings=FAST)(*ex.args)
    [first] = [e for _, e in order_cache.entries(str(cache_dir))]
    assert first.cost == min(ag.cost(g, o) for o in ("fwd", "rev", "markowitz"))
    J = ag.jacobian(ex.fn, budget="patience:3", refine=True, settings=FAST)
    J(*ex.args)
    [second] = [e for _, e in order_cache.entries(str(cache_dir))]
    assert "from the cached order" in J.choices[0].how
    assert second.cost < first.cost and second.search_s > first.search_s
    assert not order_cache.store(str(cache_dir), first, only_if_cheaper=True)  # dearer: not kept
    assert order_cache.load(str(cache_dir), first.key).cost == second.cost


def test_a_damaged_entry_is_rebuilt_with_a_warning(cache_dir, fake_timer):
    ag.jacobian(f, settings=FAST)(X, W)
    [path] = cache_dir.glob("*.json")
    path.write_text('{"format": 1, "key": ')
    J = ag.jacobian(f, settings=FAST)
    with pytest.warns(UserWarning, match="damaged"):
        _close(J(X, W), jax.jacrev(f)(X, W))
    assert order_cache.Entry.from_json(json.loads(path.read_text())).key == path.stem


def test_an_order_that_no_longer_fits_is_searched_again(cache_dir, fake_timer):
    ag.jacobian(f, settings=FAST)(X, W)
    [path] = cache_dir.glob("*.json")
    data = json.loads(path.read_text())
    data["order"] = data["order"][:-1]  # e.g. a graph traced by another JAX version
    path.write_text(json.dumps(data))
    with pytest.warns(UserWarning, match="does not fit this graph"):
        _close(ag.jacobian(f, settings=FAST)(X, W), jax.jacrev(f)(X, W))
    assert len(json.loads(path.read_text())["order"]) == len(data["order"]) + 1


def test_an_unwritable_or_full_cache_is_a_warning_never_a_failure(tmp_path, monkeypatch, fake_timer):
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    monkeypatch.setenv("ALPHAGRAD_CACHE_DIR", str(blocked))  # orders/ cannot be read or made under a file
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        _close(ag.jacobian(f, settings=FAST)(X, W), jax.jacrev(f)(X, W))
    said = " ".join(str(w.message) for w in said)
    assert "order cache: cannot read" in said and "order cache: cannot write" in said
    monkeypatch.setenv("ALPHAGRAD_CACHE_DIR", str(tmp_path / "full"))

    def full(folder, entry):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(order_cache, "_write", full)
    with pytest.warns(UserWarning, match="No space left"):
        _close(ag.jacobian(f, settings=FAST)(X, W), jax.jacrev(f)(X, W))
    monkeypatch.setenv("ALPHAGRAD_CACHE_DIR", "")  # off
    assert order_cache.directory() is None


def _entry(k: int, cost: int) -> order_cache.Entry:
    return order_cache.Entry(key=f"k{k}", graph="g", spec="(f32[3],) d/d args 0", device="cpu:cpu",
                             order=(2, 1), cost=cost, choice="order", times={"order": 1e-5}, search_s=0.1)


WRITER = """
import sys
from alphagrad.order_cache import Entry, store
folder, base = sys.argv[1], int(sys.argv[2])
entry = lambda k, cost: Entry(key=f"k{k}", graph="g", spec="(f32[3],) d/d args 0", device="cpu:cpu",
                              order=(2, 1), cost=cost, choice="order", times={"order": 1e-5}, search_s=0.1)
for i in range(150):
    store(folder, entry(i % 10, base + i), only_if_cheaper=True)
    store(folder, entry(100 + i, 7))
"""


def test_two_processes_writing_at_once_leave_a_valid_cache(tmp_path):
    folder = str(tmp_path / "orders")
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, folder, str(base)], cwd=ROOT) for base in (1000, 10)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    found = order_cache.entries(folder)
    assert len(found) == 160 and all(isinstance(e, order_cache.Entry) for _, e in found)
    costs = {e.key: e.cost for _, e in found}
    assert [costs[f"k{i}"] for i in range(10)] == [10 + i for i in range(10)]  # the cheapest of each key
    assert not [n for n in os.listdir(folder) if n.endswith(".tmp")]


def test_a_new_process_gets_the_kept_order_at_once(cache_dir, fake_timer):
    ex = get("RoeFlux_3d")
    ag.jacobian(ex.fn, budget=0, settings=FAST)(*ex.args)
    script = textwrap.dedent("""
        import json, time
        import alphagrad as ag
        from alphagrad.examples import get
        ex = get("RoeFlux_3d")
        J = ag.jacobian(ex.fn)
        t = time.perf_counter()
        choice = J.choose(ex.args, (0,))
        print(json.dumps({"seconds": time.perf_counter() - t, "how": choice.how}))
    """)
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "ALPHAGRAD_CACHE_DIR": str(cache_dir.parent)})
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    print(f"a new process got RoeFlux_3d's kept choice in {result['seconds']:.3f} s")
    assert "from the cache" in result["how"] and result["seconds"] < 1.0


def test_export_and_import_ship_orders(tmp_path, cache_dir):
    folder = str(cache_dir)
    for k in range(3):
        assert order_cache.store(folder, _entry(k, 50))
    bundle = str(tmp_path / "orders.json")
    assert order_cache.export(folder, bundle) == 3
    assert order_cache.clear(folder) == 3 and order_cache.entries(folder) == []
    assert order_cache.import_bundle(folder, bundle) == (3, 0)
    assert order_cache.import_bundle(folder, bundle) == (0, 3)
    (tmp_path / "bad.json").write_text('{"format": "x"}')
    with pytest.raises(ValueError, match="not an alphagrad order bundle"):
        order_cache.import_bundle(folder, str(tmp_path / "bad.json"))
