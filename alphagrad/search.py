"""Gumbel MuZero search over elimination orders with network-free priors (mctx): the
control that measures what a learned policy adds to the same search.

The game: a state is a partly eliminated graph (:class:`alphagrad.engine.GameState`), an
action eliminates one intermediate vertex, the reward is minus the multiplications that
costs divided by a per-graph scale (the best baseline's cost, so that graphs whose costs
differ by orders of magnitude share one reward range), and the game ends when every
intermediate is eliminated. Illegal actions (inputs, outputs, padding, eliminated
vertices) are masked out of the priors.

A *prior* gives the search its policy logits and value estimates: ``uniform`` or
``markowitz`` (logits from minus each vertex's current elimination cost), or the
policy-value network on the game it reads (:mod:`alphagrad.observe`:
:func:`make_network_recurrent_fn`, :func:`network_root`), as self-play trains it.

The search tree stores one embedding per node, so the embedding holds only what changes
during a game (edges, legal moves, cost so far); the rule tables and the vertex shapes,
which never change, travel once per graph with the parameters.
"""

from __future__ import annotations

import functools
from typing import Callable

import jax
import jax.numpy as jnp
import mctx
import numpy as np
from flax import struct

from alphagrad import checks, engine, observe, rules, scoring
from alphagrad.orders import classic
from alphagrad.evaluator import Evaluator
from alphagrad.graph import Graph

#: prior(params, state [B], scale [B]) -> (logits [B, V], value [B])
Prior = Callable

_NEG = -1e9
_STATIC = ("kinds", "compose", "join", "cost", "has_value", "sizes")


def uniform_prior(params, state: engine.GameState, scale):
    """Equal logits for every vertex and a value of 0."""
    B, V = state.eliminable.shape
    return jnp.zeros((B, V)), jnp.zeros((B,))


def markowitz_prior(params, state: engine.GameState, scale, temperature: float = 0.1):
    """Logits = minus each vertex's current elimination cost / (temperature * scale)."""
    costs = jax.vmap(engine.vertex_costs)(state).astype(jnp.float32)
    return -costs / (temperature * scale[:, None]), jnp.zeros(costs.shape[:1])


PRIORS = {"uniform": uniform_prior, "markowitz": markowitz_prior}


def _mask(logits, legal):
    return jnp.where(legal, logits, _NEG)


def _split(state: engine.GameState):
    """(what changes during a game, what never does)."""
    return state.replace(**{k: None for k in _STATIC}), {k: getattr(state, k) for k in _STATIC}


def _merge(dynamic: engine.GameState, static: dict) -> engine.GameState:
    return dynamic.replace(**static)


def make_recurrent_fn(prior: Prior):
    """The mctx ``recurrent_fn`` of the elimination game for a given prior. Its
    ``params`` are ``(prior_params, static)`` (see :func:`root_output`)."""

    def recurrent_fn(params, rng_key, action, embedding):
        prior_params, static = params
        dynamic, scale = embedding
        state = _merge(dynamic, static)
        done_before = ~state.eliminable.any(-1)
        state, mults = jax.vmap(engine.eliminate)(state, action)
        done = ~state.eliminable.any(-1)
        logits, value = prior(prior_params, state, scale)
        out = mctx.RecurrentFnOutput(
            reward=jnp.where(done_before, 0.0, -mults.astype(jnp.float32) / scale),
            discount=jnp.where(done, 0.0, 1.0),
            prior_logits=_mask(logits, state.eliminable),
            value=jnp.where(done, 0.0, value),
        )
        return out, (_split(state)[0], scale)

    return recurrent_fn


def root_output(prior: Prior, params, state: engine.GameState, scale) -> mctx.RootFnOutput:
    logits, value = prior(params, state, scale)
    return mctx.RootFnOutput(prior_logits=_mask(logits, state.eliminable), value=value,
                             embedding=(_split(state)[0], scale))


def split_game(game: observe.Game):
    """An :class:`alphagrad.observe.Game` as (what changes during a game, what never
    does): the search tree stores the first per node."""
    dynamic, static = _split(game.state)
    return game.replace(state=dynamic, entries=None), (static, game.entries)


def merge_game(dynamic: observe.Game, static) -> observe.Game:
    tables, entries = static
    return dynamic.replace(state=_merge(dynamic.state, tables), entries=entries)


def network_prior(net, params, h, game: observe.Game, scale):
    """The network on a batch of games: ``(raw [B, V, NUM_RAW], logits [B, V] masked to
    the legal moves, value [B])``, the value as mctx wants it: minus the predicted cost
    still to come over the scale (the network predicts that cost)."""
    raw = jax.vmap(observe.observe)(game)
    logits, value = jax.vmap(lambda h, g, r, s: observe.decode(net, params, h, g, r, s))(h, game, raw, scale)
    return raw, _mask(logits, game.state.eliminable), -value


def network_root(net, params, h, game: observe.Game, scale) -> tuple[mctx.RootFnOutput, jax.Array]:
    """The mctx root of a batch of games under the network, and the raw observation."""
    raw, logits, value = network_prior(net, params, h, game, scale)
    return mctx.RootFnOutput(prior_logits=logits, value=value, embedding=split_game(game)[0]), raw


def make_network_recurrent_fn(net):
    """The mctx ``recurrent_fn`` of the elimination game with the network as prior: the
    JAX game (:func:`alphagrad.observe.play`) steps, the decoder scores the new state.
    Its ``params`` are ``(network params, h [B, V, D], static, scale [B])``, ``static``
    from :func:`split_game`; the reward is minus the step's multiplications over the scale."""

    def recurrent_fn(params, rng_key, action, embedding):
        net_params, h, static, scale = params
        game = merge_game(embedding, static)
        done_before = ~game.state.eliminable.any(-1)
        game, mults = jax.vmap(observe.play)(game, action)
        done = ~game.state.eliminable.any(-1)
        _, logits, value = network_prior(net, net_params, h, game, scale)
        out = mctx.RecurrentFnOutput(
            reward=jnp.where(done_before, 0.0, -mults.astype(jnp.float32) / scale),
            discount=jnp.where(done, 0.0, 1.0),
            prior_logits=logits,
            value=jnp.where(done, 0.0, value),
        )
        return out, split_game(game)[0]

    return recurrent_fn


@struct.dataclass
class Trajectory:
    """Whole games for a batch of graphs, move by move (``[T, B, ...]``, ``T`` = padded
    vertex count; moves after a game ended have ``active`` False and cost 0).

    Attributes:
      actions: ``[T, B]`` the vertex eliminated at each move.
      weights: ``[T, B, V]`` the search's improved policy.
      mults: ``[T, B]`` each move's multiplications (float32, as the engine counts;
        exact costs come from :func:`alphagrad.cost`).
      active: ``[T, B]`` whether the game was still running.
    """

    actions: jax.Array
    weights: jax.Array
    mults: jax.Array
    active: jax.Array


def _run_games(state, choose, key):
    """Plays until every game of the batch has ended; ``choose(state, key) -> (action,
    weights)`` picks each move."""
    B, V = state.eliminable.shape
    buf = Trajectory(
        actions=jnp.zeros((V, B), jnp.int32), weights=jnp.zeros((V, B, V), jnp.float32),
        mults=jnp.zeros((V, B), engine.COST_DTYPE), active=jnp.zeros((V, B), bool),
    )

    def cond(carry):
        t, state, _, _ = carry
        return (t < V) & state.eliminable.any()

    def body(carry):
        t, state, key, buf = carry
        key, sub = jax.random.split(key)
        active = state.eliminable.any(-1)
        action, weights = choose(state, sub)
        new = dict(actions=action, weights=weights, active=active)
        state, mults = jax.vmap(engine.eliminate)(state, action)
        new["mults"] = mults
        buf = buf.replace(**{k: getattr(buf, k).at[t].set(v) for k, v in new.items()})
        return t + 1, state, key, buf

    _, _, _, buf = jax.lax.while_loop(cond, body, (0, state, key, buf))
    return buf


@functools.partial(jax.jit, static_argnames=("prior", "simulations", "max_considered"))
def play(params, key, state: engine.GameState, scale, *, prior: Prior, simulations: int,
         max_considered: int = 16) -> Trajectory:
    """Plays whole games for a batch of states, one Gumbel MuZero search per move.

    Args:
      params: the prior's parameters (None for the network-free priors).
      key: a PRNG key.
      state: ``[B]`` batched initial states (padded to the same size).
      scale: ``[B]`` reward scale per graph.
      prior: see :data:`PRIORS`.
      simulations: simulations per move.
      max_considered: actions Gumbel MuZero considers at the root.
    """
    recurrent_fn = make_recurrent_fn(prior)
    static = _split(state)[1]

    def choose(state, key):
        out = mctx.gumbel_muzero_policy(
            (params, static), key, root_output(prior, params, state, scale), recurrent_fn,
            num_simulations=simulations, invalid_actions=~state.eliminable,
            max_num_considered_actions=max_considered,
        )
        return out.action, out.action_weights

    return _run_games(state, choose, key)


def orders(traj: Trajectory) -> list[list[int]]:
    """The elimination order of each game of a trajectory."""
    actions, active = np.asarray(traj.actions), np.asarray(traj.active)
    return [[int(a) for a, on in zip(actions[:, b], active[:, b]) if on] for b in range(actions.shape[1])]


def batch_states(states: list) -> engine.GameState:
    """Stacks states of the same padded size into one batch."""
    return jax.tree_util.tree_map(lambda *x: jnp.stack(x), *states)


def search_order(graph: Graph, simulations: int = 32, prior: str = "markowitz", seed: int = 0,
                 convention: str = "exact", max_considered: int = 16, budget_s: float | None = None,
                 games: int = 4) -> list[int]:
    """An order found by Gumbel MuZero search with a network-free prior: what the
    pretrained agent's pipeline does without a network, for comparisons at equal budgets.

    Plays one batch of ``games`` games, or, with ``budget_s``, batches until that many
    seconds have passed (compilation included), and returns the cheapest order played,
    or the best baseline's if that is cheaper, so the result is never worse than forward,
    reverse and Markowitz.

    Raises:
      TypeError, ValueError: ``simulations``, ``max_considered`` or ``games`` is not an
        int >= 1, ``seed`` not an int in ``[0, 2**32)``, ``budget_s`` not None or a
        finite number of seconds > 0, or ``prior``/``convention`` unknown.
    """
    import time

    checks.check_graph(graph, "search.search_order")
    simulations = checks.check_int(simulations, "simulations", 1)
    if not isinstance(prior, str) or prior not in PRIORS:
        raise ValueError(f"unknown prior {prior!r}; use one of {sorted(PRIORS)}")
    seed = checks.check_seed(seed)
    rules.check_convention(convention)
    max_considered = checks.check_int(max_considered, "max_considered", 1)
    budget_s = checks.check_budget(budget_s, allow_none=True)
    games = checks.check_int(games, "games", 1)
    t0 = time.perf_counter()
    ev = Evaluator(graph, convention)
    best = min(classic(graph, convention, ev).values(), key=ev.cost)  # unless a game beats it
    if not graph.intermediates:
        return []
    scale = jnp.full((games,), max(scoring.best_baseline(graph, convention, ev), 1), jnp.float32)
    state = batch_states([engine.encode(graph, convention)] * games)
    key = jax.random.key(seed)
    while True:
        key, sub = jax.random.split(key)
        traj = play(None, sub, state, scale, prior=PRIORS[prior], simulations=simulations,
                    max_considered=max_considered)
        for order in orders(traj):
            if ev.cost(order) < ev.cost(best):
                best = order
        if budget_s is None or time.perf_counter() - t0 >= budget_s:
            return best
