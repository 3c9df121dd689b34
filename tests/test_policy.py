"""The network's side of the sparse elimination game: what it observes of a graph and of
a state (alphagrad.features), and the compiled rollout that plays its policy
(alphagrad.player).

* the compiled greedy rollout (re-scoring only the neighbours of each eliminated vertex)
  plays exactly the argmax of the JAX decoder recomputed on every whole state;
* sampled orders are valid, seeded, and follow ``softmax(logits / temperature)``;
* ``observe``/``observe_along`` report what the evaluator says of each state;
* ``graph_inputs`` has the documented shapes and contents, and the encoder + decoder are
  equivariant to renumbering the vertices and blind to padding.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import alphagrad as ag
from alphagrad import features
from alphagrad.evaluator import Evaluator
from alphagrad.graph import INPUT, INTERMEDIATE, OUTPUT
from alphagrad.hub.format import init_params
from alphagrad.network import NetworkConfig, PolicyNet
from alphagrad.player import Player, _gelu, _tanh, embed, rollout
from data_gen import random_programs as rp

NET = PolicyNet(NetworkConfig(dim=32, heads=4, layers=2))


@pytest.fixture(scope="module")
def params():
    return init_params(NET, jax.random.key(3))


def _zoo(name):
    ex = ag.examples.get(name)
    return ag.trace(ex.fn, *ex.args)


def _program(seed, ops=40, **kw):
    spec = rp.ProgramSpec(**{**dict(num_inputs=3, num_outputs=2, num_ops=ops, max_rank=2, max_dim=3, width=5),
                             **kw})
    f, args = rp.generate(spec, seed)
    return ag.trace(f, *args)


GRAPHS = {
    "RoeFlux_1d": lambda: _zoo("RoeFlux_1d"),
    "BlackScholes_Jacobian": lambda: _zoo("BlackScholes_Jacobian"),
    "random_0": lambda: _program(0),
    "random_1": lambda: _program(1),
    "random_2": lambda: _program(2, ops=60),
}


def _scale(g, ev):
    inter = list(g.intermediates)
    return float(max(min(ev.cost(inter), ev.cost(inter[::-1]), ev.cost(ev.markowitz())), 1))


_encoder = jax.jit(lambda p, *a: NET.apply(p, *a, method=PolicyNet.encode))


def _encode(params, inputs):
    """The encoder on one graph's unpadded inputs (not through player.embed)."""
    m = inputs["src"].shape[0]
    return _encoder(params, inputs["static"], inputs["src"], inputs["dst"], inputs["edge_features"],
                    jnp.int32(m), jnp.asarray(inputs["mask"]))


_decode = jax.jit(lambda p, h, dyn, legal, progress: NET.apply(p, h, dyn, legal, progress, method=PolicyNet.decode))


def _replayed_logits(params, g, ev, scale, order, encodings=1):
    """The JAX decoder's logits ``[n, V]`` (illegal moves at -inf) at every state along
    ``order``, each state observed from scratch; with ``encodings`` > 1, each on the
    embeddings of the graph left at the start of its stretch of ``ceil(n / encodings)``
    moves."""
    n, V = len(order), g.num_vertices
    step = -(-n // encodings)
    h = np.stack([np.asarray(_encode(params, features.graph_inputs(g, ev, scale, order[:(t // step) * step])))
                  for t in range(n)])
    raw, _, flag = features.observe_along(ev.initial, np.asarray(order, np.int64), np.arange(n),
                                          features.Tables.of(ev))
    assert flag == 0
    legal = np.zeros((n, V), bool)
    for t in range(n):
        legal[t, order[t:]] = True
    dyn = features.dynamic_features(jnp.asarray(raw), jnp.full(n, scale), jnp)
    logits, value = _decode(params, h, dyn, jnp.asarray(legal), jnp.arange(n, dtype=jnp.float32) / n)
    assert logits.shape == (n, V) and value.shape == (n,)
    return np.where(legal, np.asarray(logits, np.float64), -np.inf)


# ----------------------------------------------------------------------------------
# the compiled rollout


@pytest.mark.parametrize("name,encodings", [*((name, 1) for name in GRAPHS), ("RoeFlux_1d", 4), ("random_2", 3)])
def test_greedy_rollout_is_the_decoders_argmax_at_every_state(params, name, encodings):
    """Every move of the compiled greedy rollout is the highest logit of the JAX decoder
    on that whole state (the smallest id on ties), on the embeddings of the graph left at
    the start of the move's stretch where the network encodes it ``encodings`` times a
    game; rounding (float64 in the rollout, float32 in JAX) may only decide between
    logits within 1e-4 of each other."""
    g = GRAPHS[name]()
    ev = Evaluator(g)
    scale = _scale(g, ev)
    net = PolicyNet(dataclasses.replace(NET.config, encodings=encodings))
    player = Player(net, params, g, scale, ev)
    order = player.play()
    assert sorted(order) == sorted(g.intermediates)
    assert player.play(temperature=0.0, seed=123) == order  # greedy ignores the seed
    logits = _replayed_logits(params, g, ev, scale, order, encodings)
    assert np.ptp(logits[0][np.isfinite(logits[0])]) > 0.05  # a network whose choice matters
    near_ties = 0
    for t, v in enumerate(order):
        best = int(np.argmax(logits[t]))  # the first maximum: the smallest id
        if best != v:
            assert logits[t, v] >= logits[t, best] - 1e-4, (
                f"step {t}: the rollout took {v} (logit {logits[t, v]:.6f}), the decoder's argmax is "
                f"{best} (logit {logits[t, best]:.6f})")
            near_ties += 1
    assert near_ties <= max(1, len(order) // 20)
    # the order is the network's, not a fixed rule: another network plays another order
    other = Player(net, init_params(NET, jax.random.key(11)), g, scale, ev).play()
    assert other != order
    if encodings > 1:  # the graph encoded anew is what the network plays on
        assert Player(NET, params, g, scale, ev).play() != order


def test_greedy_order_breaks_exact_ties_by_the_smallest_id(params):
    """Vertices with equal inputs (here: a graph of identical independent chains) get
    equal logits; the greedy order takes the smallest id among them."""
    f = lambda a, b, c: (jnp.sin(jnp.cos(a)), jnp.sin(jnp.cos(b)), jnp.sin(jnp.cos(c)))
    g = ag.trace(f, 0.1, 0.2, 0.3)
    ev = Evaluator(g)
    order = Player(NET, params, g, 10.0, ev).play()
    logits = _replayed_logits(params, g, ev, 10.0, order)
    for t, v in enumerate(order):
        top = np.flatnonzero(logits[t] == logits[t].max())
        assert v == min(top)
    assert np.sum(logits[0] == logits[0].max()) >= 3  # the ties are real


def test_sampled_orders_are_valid_seeded_and_differ_across_seeds(params):
    g = GRAPHS["RoeFlux_1d"]()
    player = Player(NET, params, g, 100.0)
    orders = [player.play(temperature=1.0, seed=s) for s in range(5)]
    for o in orders:
        assert sorted(o) == sorted(g.intermediates) and len(set(o)) == len(o)
    assert [player.play(temperature=1.0, seed=s) for s in range(5)] == orders  # deterministic per seed
    assert len({tuple(o) for o in orders}) == 5
    assert player.play(temperature=1.0, seed=0) != player.play()


@pytest.mark.parametrize("name", ["RoeFlux_1d", "random_2"])
def test_play_from_a_prefix_goes_on_as_the_whole_game_would(params, name):
    """``play_from(order[:t])`` is the rest of the greedy order (the state after the prefix,
    the last move's touch included), for any ``t``; after a prefix the policy would not
    play it is a valid completion; ``moves`` plays that many."""
    g = GRAPHS[name]()
    ev = Evaluator(g, "exact")
    player = Player(NET, params, g, _scale(g, ev), ev)
    order = player.play()
    for t in (0, 1, 2, len(order) // 2, len(order) - 1, len(order)):
        assert order[:t] + player.play_from(order[:t]) == order
    assert player.play_from(order[:3], moves=2) == order[3:5]
    other = [v for v in g.intermediates if v != order[0]][:2]
    rest = player.play_from(other)
    assert sorted(other + rest) == sorted(g.intermediates)
    assert player.play_from(other, temperature=1.0, seed=4) == player.play_from(other, temperature=1.0, seed=4)
    many = Player(PolicyNet(NetworkConfig(dim=32, heads=4, layers=2, encodings=2)), params, g, 1.0, ev)
    with pytest.raises(ValueError, match="one encoding"):
        many.play_from(order[:2])


@pytest.mark.parametrize("temperature", [1.0, 0.4])
def test_sampled_first_moves_follow_the_softmax_of_the_logits(params, temperature):
    """The first move of a sampled order, over 3000 seeds, is distributed as
    ``softmax(logits / temperature)`` of the decoder (within 4.5 standard errors per
    vertex)."""
    g = _program(3, ops=12, num_inputs=2, num_outputs=2, max_rank=1, max_dim=3, width=4)
    ev = Evaluator(g)
    # a freshly initialised network's logits are nearly equal; spread them (a logit range
    # of about 8: they scale with the last layer's kernel), so that the temperature matters
    raw = _replayed_logits(params, g, ev, 10.0, Player(NET, params, g, 10.0, ev).play())[0]
    sharp = jax.tree_util.tree_map(lambda x: x, params)
    sharp["params"]["logit"]["kernel"] = params["params"]["logit"]["kernel"] * (8.0 / np.ptp(raw[np.isfinite(raw)]))
    player = Player(NET, sharp, g, 10.0, ev)
    n = len(g.intermediates)
    assert n >= 8
    logits = _replayed_logits(sharp, g, ev, 10.0, player.play())[0]
    assert 2.0 < np.ptp(logits[np.isfinite(logits)]) < 20.0
    p = np.exp((logits - logits.max()) / temperature)
    p /= p.sum()
    assert 1.5 / n < p.max() < 0.9  # neither uniform nor a foregone conclusion
    N = 3000
    counts = np.bincount([player.play(temperature=temperature, seed=s)[0] for s in range(N)],
                         minlength=g.num_vertices)
    freq = counts / N
    np.testing.assert_array_less(np.abs(freq - p), 4.5 * np.sqrt(p * (1 - p) / N) + 2e-3)


@pytest.mark.parametrize("first", [features.MODES, features.STATIC_ABSOLUTE])
def test_a_model_saved_before_the_sweep_or_absolute_costs_encodes_as_it_did(params, first):
    """An encoder of ``first`` static inputs (a model trained before the forward and
    reverse costs were inputs, or before the costs in multiplications) and of messages
    without the edge costs in multiplications is widened with zero weights on them: its
    embeddings, and so its orders, do not depend on them."""
    from alphagrad import network
    from alphagrad.hub.format import widen

    assert network.DIRECTION_AT == features.EDGE_ABSOLUTE  # messages: old edge features, direction, new ones
    dim = NET.config.dim
    narrow = jax.tree_util.tree_map(np.asarray, params)
    narrow["params"]["embed"]["kernel"] = narrow["params"]["embed"]["kernel"][:first]
    blocks = [k for k in narrow["params"] if k.startswith("blocks_")]
    assert blocks
    for b in blocks:
        for layer in ("ek", "ev"):
            narrow["params"][b][layer]["kernel"] = narrow["params"][b][layer]["kernel"][:features.EDGE_ABSOLUTE + 3]
    wide = widen(narrow, dim)
    assert wide["params"]["embed"]["kernel"].shape == (features.NUM_STATIC, dim)
    assert not wide["params"]["embed"]["kernel"][first:].any() and widen(wide, dim) is wide
    for b in blocks:
        for layer in ("ek", "ev"):
            kernel = wide["params"][b][layer]["kernel"]
            assert kernel.shape[0] == features.NUM_EDGE + 3 and not kernel[features.EDGE_ABSOLUTE + 3:].any()
    g = GRAPHS["RoeFlux_1d"]()
    ev = Evaluator(g)
    x = features.graph_inputs(g, ev, _scale(g, ev))
    moved = {**x, "static": x["static"].copy(), "edge_features": x["edge_features"].copy()}
    moved["static"][:, first:] += 3.0
    moved["edge_features"][:, features.EDGE_ABSOLUTE:] += 3.0
    np.testing.assert_allclose(embed(NET, wide, x)[0], embed(NET, wide, moved)[0], rtol=1e-5)
    assert not np.allclose(embed(NET, params, x)[0], embed(NET, params, moved)[0])


@pytest.mark.parametrize("name,missing", [("RoeFlux_1d", 1), ("RoeFlux_1d", 4), ("RoeFlux_1d", 7), ("random_2", 1),
                                          ("random_2", 4), ("random_2", 5), ("random_2", 7), ("random_2", 8),
                                          ("random_2", 9)])
def test_a_model_saved_before_the_lookahead_pressure_frontier_touch_absolute_costs_or_growth_plays_as_it_did(
        params, name, missing):
    """A decoder of ``NUM_DYNAMIC - missing`` inputs (a model trained before the growth,
    or before the costs in multiplications too, or the last move's touch too, or the
    frontier features too, or the pressure too, or the lookahead too) is widened with
    zero weights on them: the same logits, hence the same orders, as the narrow decoder,
    whose rollout never computes the lookahead, pressure, touch or growth it lacks."""
    from alphagrad.hub.format import widen

    dim = NET.config.dim
    narrow = jax.tree_util.tree_map(np.asarray, params)
    narrow["params"]["first"]["kernel"] = narrow["params"]["first"]["kernel"][:-missing]
    wide = widen(narrow, dim)
    assert wide["params"]["first"]["kernel"].shape == (dim + features.NUM_DYNAMIC, dim)
    assert not wide["params"]["first"]["kernel"][-missing:].any()
    assert widen(wide, dim) is wide  # already wide: unchanged
    too_narrow = {"params": {**narrow["params"], "first": {**narrow["params"]["first"], "kernel": np.zeros((dim, dim))}}}
    assert widen(too_narrow, dim) is too_narrow  # not a decoder this code knows: left to the shape check
    g = GRAPHS[name]()
    ev = Evaluator(g)
    scale = _scale(g, ev)
    player = Player(NET, wide, g, scale, ev)
    order = player.play()
    Wd = player.weights[1]
    assert Wd.shape[0] == features.NUM_DYNAMIC
    decoder = player.decoder()._replace(Wd=Wd[:-missing])  # the narrow decoder's weights
    narrow_order, _, flag = ev.run(rollout, player.inter, player.tables, decoder, 0.0, 0, len(player.inter),
                                   np.zeros(0, np.int64))
    assert flag == 0 and [int(v) for v in narrow_order] == order
    # the features are what a trained weight reads: a non-zero one changes the play
    for row in range(-missing, 0):
        strong = jax.tree_util.tree_map(np.asarray, wide)
        strong["params"]["first"]["kernel"][row] = 50.0 * np.asarray(params["params"]["first"]["kernel"][0])
        assert Player(NET, strong, g, scale, ev).play() != order, row


def test_player_on_a_graph_without_intermediates(params):
    g = ag.trace(lambda x: 2.0 * x, 1.0)
    if g.intermediates:
        pytest.skip("the graph has intermediates")
    assert Player(NET, params, g, 1.0).play() == []


# ----------------------------------------------------------------------------------
# observations


def _direct_raw(ev, state, alive, V, touched=()):
    """(cost, predecessors, successors, lookahead, pressure, predecessors and successors
    that are inputs or outputs, whether it is in ``touched``, growth) of each alive
    vertex, from the evaluator's own vertex cost, the state's edge list, the graph's
    vertex kinds, and eliminating it (for the lookahead and the growth: the entries all
    the graph's edges hold, by each structure's ``Structure.entries``, after less
    before) or each of its alive neighbours (for the pressure) in a copy."""
    from alphagrad.evaluator import State, copy_state

    edges = state.edges()
    live = set(int(v) for v in alive)
    kept = np.asarray(ev.graph.kinds) != INTERMEDIATE
    raw = np.zeros((V, features.NUM_RAW), np.int64)

    def after(u):
        s = State(copy_state(state.arrays))
        ev.step(s, int(u))
        return s

    def held(s):
        return sum(ev.tables.structures[k].entries for k in s.edges().values())

    for v in alive:
        nb = {i for (i, k) in edges if k == v} | {k for (i, k) in edges if i == v}
        nb = [u for u in nb if u in live]
        before = sum(ev.vertex_cost(state, u) for u in nb)
        lookahead = sum(ev.vertex_cost(after(v), u) for u in nb) - before
        pressure = sum(ev.vertex_cost(after(u), v) - ev.vertex_cost(state, v) for u in nb)
        raw[v] = (ev.vertex_cost(state, v), sum(1 for (_, k) in edges if k == v),
                  sum(1 for (i, _) in edges if i == v), lookahead, pressure,
                  sum(1 for (i, k) in edges if k == v and kept[i]), sum(1 for (i, k) in edges if i == v and kept[k]),
                  v in touched, held(after(v)) - held(state))
    return raw


@pytest.mark.parametrize("name", ["RoeFlux_1d", "random_0", "random_2"])
def test_observe_equals_a_direct_computation_along_a_random_order(name):
    g = GRAPHS[name]()
    ev = Evaluator(g)
    V = g.num_vertices
    order = np.asarray(np.random.default_rng(7).permutation(g.intermediates), np.int64)
    n = len(order)
    positions = np.unique(np.r_[0, np.random.default_rng(8).choice(n, 10), n - 1, n])
    along, to_go, flag = features.observe_along(ev.initial, order, positions, features.Tables.of(ev))
    assert flag == 0 and along.shape == (len(positions), V, features.NUM_RAW) and to_go.shape == (len(positions),)
    state = ev.new_state()
    steps = []
    expected = {}
    touched = set()  # the last eliminated vertex's neighbours, before it went
    for t in range(n + 1):
        if t in positions:
            raw = features.observe(state.arrays, order[t:], features.Tables.of(ev),
                                   np.asarray(sorted(touched), np.int64))
            direct = _direct_raw(ev, state, order[t:], V, touched)
            np.testing.assert_array_equal(raw, direct, err_msg=f"position {t}")
            expected[t] = direct
        if t < n:
            v = int(order[t])
            touched = {i for (i, k) in state.edges() if k == v} | {k for (i, k) in state.edges() if i == v}
            steps.append(ev.step(state, v))
    assert sum(steps) == ev.cost(order)
    for r, t in enumerate(positions):
        np.testing.assert_array_equal(along[r], expected[t], err_msg=f"observe_along at position {t}")
        assert to_go[r] == sum(steps[t:])
    assert to_go[0] == ev.cost(order) and to_go[-1] == 0 and not along[-1].any()
    assert along[0][:, 0].any() and (along != 0).any(axis=(0, 1)).all()  # no column trivially zero


def test_observe_is_exact_where_costs_saturate():
    """n = 2**21: eliminating a matmul costs past int64, so counts saturate at COST_CAP.
    The lookahead and the pressure, read off the edges without eliminating, still equal
    eliminating in a copy and recounting with the same saturated sums."""
    from alphagrad import rules
    from alphagrad.evaluator import copy_state, eliminate, vertex_cost

    n = 2**21
    f = lambda A, B: jnp.tanh(jnp.sin(A @ B)) * jnp.cos(A @ B) + (A @ B) @ B
    g = ag.trace(f, *[jax.ShapeDtypeStruct((n, n), jnp.float32)] * 2)
    ev = Evaluator(g)
    V, C = g.num_vertices, ev.cost_table

    def cost(state, x, gone=None):  # x's saturated cost now, or once ``gone`` is eliminated
        if gone is not None:
            state = copy_state(state)
            eliminate(state, gone, ev.compose, ev.join, C, np.zeros(V + 1, np.int64), np.zeros(V, np.int64),
                      np.zeros(0, np.int64))
        return vertex_cost(state, x, C)

    saturated = 0
    for seed in range(3):
        order = np.random.default_rng(seed).permutation(g.intermediates).astype(np.int64)
        state = ev.new_state()
        for t in range(len(order)):
            s, alive = state.arrays, set(order[t:].tolist())
            raw = features.observe(s, order[t:], features.Tables.of(ev), np.zeros(0, np.int64))
            for v in order[t:]:
                preds, succs = ev._neighbours(s, int(v))
                nb = [u for u, _ in preds + succs if u in alive]
                assert raw[v, 3] == sum(cost(s, u, v) - cost(s, u) for u in nb)
                assert raw[v, 4] == sum(cost(s, v, u) - cost(s, v) for u in nb)
                saturated += cost(s, v) == rules.COST_CAP
            ev.step(state, int(order[t]))
    assert saturated  # the saturated path was taken


def test_growth_shows_a_free_move_that_makes_an_edge_dense():
    """A stencil's two shifted copies of ``u``: once the first slice is eliminated, the
    second one costs nothing and changes no neighbour's cost (cost and lookahead 0), but
    it joins two shifted 0/1 maps of ``u`` into one edge no sparse structure holds, a
    dense 64 x 64 Jacobian, through which every later product is dense (the forward
    order costs 4,096, reverse 64). Only the growth shows it."""
    from alphagrad.evaluator import State, copy_state

    def f(u):
        p = jnp.pad(u, 1)
        return u + 0.2 * (p[2:, 1:-1] + p[:-2, 1:-1] - 2.0 * u)

    g = ag.trace(f, jnp.ones((8, 8)))
    ev = Evaluator(g)
    order = np.asarray(g.intermediates, np.int64)
    assert ev.cost(order) == 4096 and ev.cost(order[::-1]) == 64
    state = ev.new_state()
    for v in order[:2]:
        ev.step(state, int(v))
    v = int(order[2])
    raw = features.observe(state.arrays, order[2:], features.Tables.of(ev), np.zeros(0, np.int64))
    assert raw[v, 0] == 0 and raw[v, 3] == 0 and raw[v, 8] > 0
    after = State(copy_state(state.arrays))
    ev.step(after, v)
    held = {e: ev.tables.structures[k].entries for e, k in after.edges().items()}
    assert max(held.values()) == 64 * 64
    assert raw[v, 8] == sum(held.values()) - sum(ev.tables.structures[k].entries for k in state.edges().values())


def test_the_rollouts_gelu_is_the_networks():
    """The compiled decoder's GELU (a rational tanh, no libm call) is the network's
    tanh-GELU to float32's precision (relative to the input's size), far out in both
    tails and at 0, and so within float32 rounding of ``jax.nn.gelu`` itself."""
    x = np.concatenate([np.linspace(-40.0, 40.0, 8001), [0.0, 1e-12, -1e-12, 7.9, 8.0, -8.0]])
    ours = np.array([_gelu(v) for v in x])
    exact = 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))
    assert np.all(np.abs(ours - exact) <= 2e-7 * np.maximum(1.0, np.abs(x)))
    network = np.asarray(jax.nn.gelu(jnp.asarray(x, jnp.float32), approximate=True), np.float64)
    assert np.all(np.abs(ours - network) <= 4e-7 * np.maximum(1.0, np.abs(x)))
    t = np.array([_tanh(v) for v in x])
    assert np.abs(t - np.tanh(x)).max() < 5e-7 and _tanh(0.0) == 0.0


def test_dynamic_features_are_the_same_in_numpy_and_jax():
    raw = np.asarray([[[0, 1, 2, 0, 4, 1, 0, 0, 0], [5, 3, 1, -3, 0, 0, 1, 1, -2048],
                       [1000, 7, 9, 90, -20, 2, 3, 1, 1045504]],
                      [[2, 0, 0, 0, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0, 0, 0, 0], [3, 1, 1, 5, 7, 1, 1, 0, 3]]], np.int64)
    scale = np.asarray([10.0, 100.0])
    a = features.dynamic_features(raw, scale)
    b = np.asarray(features.dynamic_features(jnp.asarray(raw), jnp.asarray(scale), jnp))
    assert a.shape == (2, 3, features.NUM_DYNAMIC) and a.dtype == np.float32
    np.testing.assert_allclose(a, b, rtol=1e-6)
    u = features.LOG_UNIT
    np.testing.assert_allclose(a[0, 2], [np.log1p(100.0), np.log1p(7), np.log1p(9), np.log1p(63), 0.0, np.log1p(9.0),
                                         -np.log1p(2.0), 2 / 7, 3 / 9, 1.0, np.log1p(1000) / u, np.log1p(90) / u,
                                         -np.log1p(20) / u, np.log1p(1045504) / u], rtol=1e-6)
    assert a[0, 1, features.GROWTH] == pytest.approx(-np.log1p(2048) / u)  # the growth keeps its sign
    # the same costs on another scale: the relative columns change, the absolute ones do not
    absolute = features.ABSOLUTE
    np.testing.assert_allclose(features.dynamic_features(raw, scale * 1e6)[..., absolute:], a[..., absolute:])
    assert list(a[0, 1, 7:9]) == [0.0, 1.0] and list(a[1, 0, 7:9]) == [0.0, 0.0]  # shares of inputs and outputs
    assert list(a[..., features.RECENT].ravel()) == [0.0, 1.0, 1.0, 0.0, 0.0, 0.0]  # the last move touched it
    assert a[0, 1, 5] == pytest.approx(-np.log1p(0.3))  # the lookahead keeps its sign
    assert a[0, 0, 6] == pytest.approx(np.log1p(0.4)) and a[1, 2, 6] == pytest.approx(np.log1p(7 / 100))
    assert a[0, 0, 4] == 1.0 and a[1, 1, 4] == 1.0 and a[0, 1, 4] == 0.0  # free moves flagged


@pytest.mark.parametrize("name,done", [("BlackScholes_Jacobian", 0), ("random_1", 0), ("BlackScholes_Jacobian", 0.4),
                                       ("random_1", 0.3), ("random_1", 0.8)])
def test_graph_inputs_shapes_and_contents(name, done):
    """The encoder's inputs of the traced graph (``done`` 0), and of the graph left after
    eliminating a share ``done`` of a random order: its edges (fill-in included) as the
    evaluator's state has them, the eliminated vertices masked with zero rows, each
    vertex's cost and degrees now, the forward and reverse costs of what is left."""
    g = GRAPHS[name]()
    ev = Evaluator(g)
    scale = _scale(g, ev)
    inter = list(g.intermediates)
    order = [int(v) for v in np.random.default_rng(4).permutation(inter)]
    prefix, rest = order[:int(done * len(order))], sorted(order[int(done * len(order)):])
    x = features.graph_inputs(g, ev, scale, prefix)
    state = ev.new_state()
    for v in prefix:
        ev.step(state, v)
    edges = sorted(state.edges())  # (src, dst) pairs
    V, E = g.num_vertices, len(edges)
    assert x["static"].shape == (V, features.NUM_STATIC) and x["static"].dtype == np.float32
    assert x["edge_features"].shape == (E, features.NUM_EDGE) and x["edge_features"].dtype == np.float32
    assert x["src"].dtype == x["dst"].dtype == np.int32
    if not prefix:  # the traced graph's edges, in its order
        assert x["src"].tolist() == [e.src for e in g.edges] and x["dst"].tolist() == [e.dst for e in g.edges]
    assert sorted(zip(x["src"].tolist(), x["dst"].tolist())) == edges
    assert x["kinds"].tolist() == list(g.kinds)
    alive = np.ones(V, bool)
    alive[prefix] = False
    np.testing.assert_array_equal(x["mask"], alive)
    s, kinds = x["static"], np.asarray(g.kinds)
    assert not s[~alive].any()
    assert np.isfinite(s).all() and np.isfinite(x["edge_features"]).all()
    np.testing.assert_array_equal(s[alive, :3], np.stack([kinds == INPUT, kinds == INTERMEDIATE,
                                                          kinds == OUTPUT], -1)[alive])
    direct = _direct_raw(ev, state, rest, V)
    np.testing.assert_allclose(s[:, 9], np.log1p(direct[:, 0] / scale), rtol=1e-5)  # cost now
    spent = ev.cost(prefix)  # the forward and reverse costs of what is left, the same on every vertex
    np.testing.assert_allclose(s[alive, features.MODES:features.STATIC_ABSOLUTE], np.broadcast_to(
        np.log1p([(ag.cost(g, prefix + rest) - spent) / scale, (ag.cost(g, prefix + rest[::-1]) - spent) / scale]),
        (alive.sum(), 2)), rtol=1e-6)
    np.testing.assert_allclose(s[:, 5], np.log1p(np.bincount(x["dst"], minlength=V)), rtol=1e-6)
    np.testing.assert_allclose(s[:, 6], np.log1p(np.bincount(x["src"], minlength=V)), rtol=1e-6)
    assert (s[:, 10:features.MODES] >= 0).all() and (s[:, 10:features.MODES] <= 1).all()  # depths, normalised
    assert (s[kinds == INPUT, 10] == 0).all() and (s[kinds == OUTPUT, 11] == 0).all()
    assert s[:, 10].max() == 1.0
    if not prefix:  # the traced graph's depths
        down, up = g.depths
        np.testing.assert_allclose(s[:, 10:12], np.stack([down, up], -1) / down.max(), rtol=1e-6)
    for (i, k) in edges:  # longest paths: an edge's head is deeper than its tail, from either side
        assert s[k, 10] > s[i, 10] and s[i, 11] > s[k, 11]
    # an edge's "multiplications when its source / destination is eliminated" add up, over
    # a vertex's out-edges / in-edges, to the vertex's elimination cost
    edge = x["edge_features"].astype(np.float64)
    assert set(np.unique(edge[:, 0])) <= {0.0, 1.0}
    u = features.LOG_UNIT  # and the same in multiplications
    np.testing.assert_allclose(s[:, features.STATIC_ABSOLUTE], np.log1p(direct[:, 0]) / u, rtol=1e-5)
    np.testing.assert_allclose(np.expm1(edge[:, 3] * u), np.expm1(edge[:, 1]) * scale, rtol=1e-3, atol=1e-2)
    np.testing.assert_allclose(np.expm1(edge[:, 4] * u), np.expm1(edge[:, 2]) * scale, rtol=1e-3, atol=1e-2)
    for v in rest:
        out_e, in_e = x["src"] == v, x["dst"] == v
        np.testing.assert_allclose(np.expm1(edge[out_e, 1]).sum() * scale, direct[v, 0], rtol=1e-4, atol=1e-3)
        np.testing.assert_allclose(np.expm1(edge[in_e, 2]).sum() * scale, direct[v, 0], rtol=1e-4, atol=1e-3)


# ----------------------------------------------------------------------------------
# encoder + decoder: renumbering and padding


def _state_features(g, ev, scale, k):
    """Decoder inputs of the state after the first ``k`` moves of the forward order."""
    order = np.asarray(g.intermediates, np.int64)
    raw, _, flag = features.observe_along(ev.initial, order, np.asarray([k]), features.Tables.of(ev))
    legal = np.zeros(g.num_vertices, bool)
    legal[order[k:]] = True
    return features.dynamic_features(raw[0], scale), legal, np.float32(k / len(order))


def _outputs(params, inputs, num_edges, vmask, dyn, legal, progress):
    h = _encoder(params, inputs["static"], inputs["src"], inputs["dst"], inputs["edge_features"],
                 jnp.int32(num_edges), jnp.asarray(vmask))
    logits, value = _decode(params, h, dyn, legal, progress)
    return np.asarray(h), np.asarray(logits), float(value)


def test_encoder_and_decoder_are_equivariant_to_renumbering_and_blind_to_padding(params):
    g = _zoo("HumanHeartDipole")
    ev = Evaluator(g)
    scale = _scale(g, ev)
    x = features.graph_inputs(g, ev, scale)
    V, E = g.num_vertices, len(g.edges)
    dyn, legal, progress = _state_features(g, ev, scale, 10)
    h, logits, value = _outputs(params, x, E, np.ones(V, bool), dyn, legal, progress)
    assert h.shape == (V, NET.config.dim) and logits.shape == (V,)
    # not constant: embeddings and logits differ between vertices
    assert len(np.unique(np.round(h[:, 0], 3))) >= 10
    real = logits[legal]
    assert len(np.unique(np.round(real, 3))) >= 10 and real.std() > 1e-2

    # renumbering: vertex v becomes perm[v], and the edges come in another order
    rng = np.random.default_rng(0)
    perm = rng.permutation(V)
    inv = np.argsort(perm)
    eperm = rng.permutation(E)
    xp = {"static": x["static"][inv], "src": perm[x["src"]][eperm].astype(np.int32),
          "dst": perm[x["dst"]][eperm].astype(np.int32), "edge_features": x["edge_features"][eperm]}
    h_p, logits_p, value_p = _outputs(params, xp, E, np.ones(V, bool), dyn[inv], legal[inv], progress)
    np.testing.assert_allclose(h_p[perm], h, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(logits_p[perm], logits, rtol=1e-4, atol=1e-4)
    assert value_p == pytest.approx(value, rel=1e-4, abs=1e-5)

    # padding (as pad_inputs writes it, and with garbage in the padded slots) changes
    # nothing for the real vertices
    Vp, Ep = V + 40, E + 90
    padded = features.pad_inputs(x, Vp, Ep)
    assert padded["vmask"].sum() == V and padded["num_edges"] == E
    dyn_p = np.zeros((Vp, features.NUM_DYNAMIC), np.float32)
    dyn_p[:V] = dyn
    legal_p = np.zeros(Vp, bool)
    legal_p[:V] = legal
    h_b, logits_b, value_b = _outputs(params, padded, E, padded["vmask"], dyn_p, legal_p, progress)
    np.testing.assert_allclose(h_b[:V], h, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(logits_b[:V], logits, rtol=1e-4, atol=1e-4)
    assert value_b == pytest.approx(value, rel=1e-4, abs=1e-5)
    garbage = {k: np.array(v) for k, v in padded.items()}
    garbage["static"][V:] = rng.normal(size=(Vp - V, features.NUM_STATIC))
    garbage["src"][E:] = rng.integers(0, Vp, Ep - E)
    garbage["dst"][E:] = rng.integers(0, Vp, Ep - E)
    garbage["edge_features"][E:] = rng.normal(size=(Ep - E, features.NUM_EDGE))
    dyn_g = dyn_p.copy()
    dyn_g[V:] = rng.normal(size=(Vp - V, features.NUM_DYNAMIC))
    h_g, logits_g, value_g = _outputs(params, garbage, E, padded["vmask"], dyn_g, legal_p, progress)
    np.testing.assert_allclose(h_g[:V], h, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(logits_g[:V], logits, rtol=1e-4, atol=1e-4)
    assert value_g == pytest.approx(value, rel=1e-4, abs=1e-5)
    # the padded encoder of player.embed (what Player uses) gives the same embeddings
    np.testing.assert_allclose(embed(NET, params, x)[0], h, rtol=1e-4, atol=1e-4)

    # the outputs depend on the graph and on the state
    _, logits_s, value_s = _outputs(params, x, E, np.ones(V, bool), *_state_features(g, ev, scale, 30))
    assert abs(value_s - value) > 1e-4
    assert np.abs(logits_s[legal] - logits[legal]).max() > 1e-3
    dropped = dict(xp, src=xp["src"][: E // 2], dst=xp["dst"][: E // 2], edge_features=xp["edge_features"][: E // 2])
    h_d, _, _ = _outputs(params, dropped, E // 2, np.ones(V, bool), dyn[inv], legal[inv], progress)
    assert np.abs(h_d[perm] - h).max() > 1e-2  # the encoder reads the edges


def test_padded_sizes_and_pad_inputs_refuses_what_does_not_fit():
    assert [features.padded(n, 64) for n in (1, 64, 65, 128, 129, 1000)] == [64, 64, 128, 128, 256, 1024]
    assert features.padded(0, 128) == 128
    g = _zoo("RoeFlux_1d")
    ev = Evaluator(g)
    x = features.graph_inputs(g, ev, 100.0)
    with pytest.raises(ValueError, match="does not fit"):
        features.pad_inputs(x, 64, 1024)
    with pytest.raises(ValueError, match="does not fit"):
        features.pad_inputs(x, 128, 128)
    p = features.pad_inputs(x, 128, 256)
    assert p["static"].shape == (128, features.NUM_STATIC) and p["src"].shape == (256,)
    np.testing.assert_array_equal(p["static"][: g.num_vertices], x["static"])
    assert not p["static"][g.num_vertices:].any() and p["vmask"].tolist() == [True] * 107 + [False] * 21
