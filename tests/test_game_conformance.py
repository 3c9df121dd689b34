"""One game, two implementations (pgx-style conformance): the JAX game of
:mod:`alphagrad.observe` (the engine's state, its observation, the flax decoder) and the
numba player's (:mod:`alphagrad.evaluator` moves, :func:`alphagrad.features.observe`,
:func:`alphagrad.player._logit`) play the same random legal moves on the zoo and on random
programs and agree move by move: the legal moves, every raw feature of every vertex, the
step's cost, the shipped model's logits, and the final cost."""

import collections
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import alphagrad as ag
from alphagrad import engine, features, observe
from alphagrad.evaluator import Evaluator
from alphagrad.graph import INPUT
from alphagrad.network import decoder_weights
from alphagrad.player import Decoder, _Layers, _logit, embed
from alphagrad.scoring import best_baseline
from data_gen import random_programs as rp

#: Moves per jitted call (one compile per padded size, whatever a game's length).
STRETCH = 16
#: Padded vertices and structures of the zoo's small graphs and random programs (the
#: smallest that fits: each size compiles once), and of the real-sized programs.
SMALL, LARGE = ((64, 192), (256,)), ((1024,), (256,))
#: Moves played on a real-sized program (each state observes all of its ~1,000 vertices).
LARGE_MOVES = 3
#: The real-sized programs played (those of at most 256 structures: one compile; the
#: others differ only in size, and their tables make each observation slower).
LARGE_ZOO = ["NBodySolar_RK4", "KalmanFilter_Scan", "BurgersRusanov"]


@pytest.fixture(scope="module")
def agent():
    return ag.from_pretrained()


#: Traces of each padded size's jitted stretch (one each: a step compiles once per padded size).
TRACES: collections.Counter = collections.Counter()


@functools.lru_cache(maxsize=None)
def _stretch_fn(net, size):
    """``(params, h, game, moves [STRETCH], scale) -> (game, (raw, logits, legal, mults))``
    per move, the numbers before each move; traced once per padded ``size``."""

    @jax.jit
    def run(params, h, game, moves, scale):
        TRACES[size] += 1

        def step(game, v):
            raw = observe.observe(game)
            logits, _ = observe.decode(net, params, h, game, raw, scale)
            legal = game.state.eliminable
            game, mults = observe.play(game, v)
            return game, (raw, logits, legal, mults)

        return jax.lax.scan(step, game, moves)

    return run


def _reference_logits(decoder, raw, alive):
    """The numba decoder's logit of each alive vertex (:func:`alphagrad.player._logit`)."""
    D = decoder.H1.shape[1]
    layers = _Layers(np.zeros(decoder.Wd.shape[0]), np.zeros(D), np.zeros(D))
    return np.asarray([_logit(int(v), raw[v], decoder, layers) for v in alive])


def _conform(agent, label, graph, sizes, moves=None, seed=0):
    """Plays ``moves`` random legal moves of ``graph`` (default: the whole game) in both
    implementations and asserts they agree after every move; the game padded to the
    smallest of ``sizes`` (vertices, structures) that fits."""
    n = graph.num_vertices
    ev = Evaluator(graph, "exact")
    size = V, S = tuple(min(p for p in options if p >= need) for options, need in zip(sizes, (n, ev.tables.size)))
    T = features.Tables.of(ev)
    scale = float(max(best_baseline(graph, evaluator=ev), 1))
    h = np.zeros((V, agent.net.config.dim), np.float32)
    h[:n] = embed(agent.net, agent.params, features.graph_inputs(graph, ev, scale))[0]
    decoder = Decoder(*decoder_weights(agent.params, h[:n]), np.zeros(0), 0.0, 1.0 / scale)  # as Player.decoder
    order = list(np.random.default_rng(seed).permutation(graph.intermediates))[:moves]
    noop = int(np.flatnonzero(np.asarray(graph.kinds) == INPUT)[0])  # an input: eliminating it changes nothing
    padded = np.full(-(-len(order) // STRETCH) * STRETCH, noop, np.int32)
    padded[:len(order)] = order
    run = _stretch_fn(agent.net, size)
    game = observe.start(graph, num_vertices=V, num_structures=S, rule_tables=ev.tables)
    outs = []
    for at in range(0, len(padded), STRETCH):
        game, out = run(agent.params, jnp.asarray(h), game, jnp.asarray(padded[at:at + STRETCH]), jnp.float32(scale))
        outs.append(jax.tree.map(np.asarray, out))
    raw, logits, legal, mults = (np.concatenate(x)[:len(order)] for x in zip(*outs))
    state, alive, touched, total = ev.new_state(), set(graph.intermediates), np.zeros(0, np.int64), 0
    for t, v in enumerate(order):
        where = f"{label}, move {t} (vertex {v})"
        live = np.asarray(sorted(alive), np.int64)
        assert set(np.flatnonzero(legal[t])) == alive, where
        want = features.observe(state.arrays, live, T, touched)
        np.testing.assert_allclose(raw[t][:n], want, rtol=1e-5, atol=1e-3, err_msg=where)
        assert not raw[t][n:].any(), where
        np.testing.assert_allclose(logits[t][live], _reference_logits(decoder, want, live), rtol=1e-4, atol=1e-4,
                                   err_msg=where)
        touched = features.neighbours(state.arrays, v, np.empty(n, np.int64), 0).copy()
        cost = ev.step(state, v)
        np.testing.assert_allclose(mults[t], cost, rtol=1e-6, err_msg=where)
        alive.discard(v)
        total += cost
    np.testing.assert_allclose(float(game.state.mults), total, rtol=1e-6)
    assert TRACES[size] == 1
    if moves is None:
        assert total == ag.cost(graph, order) and not np.asarray(game.state.eliminable).any()


def _trace(name):
    ex = ag.examples.get(name)
    return ag.trace(ex.fn, *ex.args)


SMALL_ZOO = [e.name for e in ag.examples.all_examples() if e.family != "large_real"]


@pytest.mark.parametrize("half", [0, pytest.param(1, marks=pytest.mark.slow)])
def test_the_zoo_plays_the_same_game_in_both_implementations(agent, half):
    """Every other zoo graph by default (all families and padded sizes play), the rest
    with ``-m slow``: CI's time on 2 cores."""
    for name in SMALL_ZOO[half::2]:
        _conform(agent, name, _trace(name), SMALL)


@pytest.mark.parametrize("seed, ops", [(0, 30), (1, 60), (2, 50), (3, 70), (6, 40)])
def test_random_programs_play_the_same_game_in_both_implementations(agent, seed, ops):
    spec = rp.ProgramSpec(num_inputs=3, num_outputs=2, num_ops=ops, max_rank=2, max_dim=3, width=5)
    f, args = rp.generate(spec, seed)
    graph = ag.trace(f, *args)
    assert graph.num_vertices <= SMALL[0][-1]
    _conform(agent, f"random program {seed}", graph, SMALL, seed=seed)


@pytest.mark.parametrize("name", LARGE_ZOO[:1] + [pytest.param(n, marks=pytest.mark.slow) for n in LARGE_ZOO[1:]])
def test_real_sized_programs_agree_on_their_first_moves(agent, name):
    _conform(agent, name, _trace(name), LARGE, moves=LARGE_MOVES)


def test_a_batch_of_games_under_vmap_plays_each_game():
    """Rows of a batch are independent games: each agrees with the numba player's."""
    graphs = [_trace(n) for n in ("MLP", "LSTM_h8", "KalmanCV2D")]
    evs = [Evaluator(g, "exact") for g in graphs]
    states = [ev.new_state() for ev in evs]
    batch = jax.tree.map(lambda *x: jnp.stack(x), *[observe.start(g, num_vertices=64, num_structures=256)
                                                     for g in graphs])
    step = jax.jit(jax.vmap(lambda game, v: (observe.observe(game), observe.play(game, v))))
    rng = np.random.default_rng(0)
    alive = [set(g.intermediates) for g in graphs]
    touched = [np.zeros(0, np.int64)] * len(graphs)
    for _ in range(8):
        moves = [int(rng.choice(sorted(a))) for a in alive]
        raw, (batch, mults) = step(batch, jnp.asarray(moves, jnp.int32))
        for k, (g, ev, state, v) in enumerate(zip(graphs, evs, states, moves)):
            n = g.num_vertices
            want = features.observe(state.arrays, np.asarray(sorted(alive[k]), np.int64), features.Tables.of(ev),
                                    touched[k])
            np.testing.assert_allclose(np.asarray(raw[k])[:n], want, rtol=1e-5, atol=1e-3)
            touched[k] = features.neighbours(state.arrays, v, np.empty(n, np.int64), 0).copy()
            assert float(mults[k]) == ev.step(state, v)
            alive[k].discard(v)


def test_engine_padding_limits_apply_to_the_game():
    with pytest.raises(engine.GraphTooLargeError):
        observe.start(_trace("RoeFlux_1d"), max_vertices=64)
