"""Gumbel MuZero search over elimination orders, on the elimination engine (mctx).

The game: a state is a partly eliminated graph (:class:`alphagrad.engine.GameState`), an
action eliminates one intermediate vertex, the reward is minus the multiplications that
costs divided by a per-graph scale (the best baseline's cost, so that graphs whose costs
differ by orders of magnitude share one reward range), and the game ends when every
intermediate is eliminated. Illegal actions (inputs, outputs, padding, eliminated
vertices) are masked out of the priors.

A *prior* gives the search its policy logits and value estimates: the policy-value
network (:func:`network_prior`) or a network-free one, ``uniform`` or ``markowitz``
(logits from minus each vertex's current elimination cost), so we can measure what
learning adds.

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

from alphagrad import baselines, engine, rules
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


@functools.lru_cache(maxsize=None)
def network_prior(net) -> Prior:
    """The prior of a policy-value network (:class:`alphagrad.network.PolicyValueNet`);
    its ``params`` are the network's variables."""
    from alphagrad.network import observe

    def prior(params, state, scale):
        obs = jax.vmap(observe)(state, scale)
        return jax.vmap(net.apply, in_axes=(None, 0, 0, 0))(params, *obs)

    return prior


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


@struct.dataclass
class Trajectory:
    """Whole games for a batch of graphs, move by move (``[T, B, ...]``, ``T`` = padded
    vertex count; moves after a game ended have ``active`` False and cost 0).

    Attributes:
      actions: ``[T, B]`` the vertex eliminated at each move.
      weights: ``[T, B, V]`` the search's improved policy (the policy training target).
      mults: ``[T, B]`` each move's multiplications (float32, as the engine counts;
        exact costs come from :func:`alphagrad.cost`).
      active: ``[T, B]`` whether the game was still running.
      tokens, edges, mask: ``[T, B, ...]`` the network's input before each move
        (:func:`alphagrad.network.observe`), when recorded; else None.
    """

    actions: jax.Array
    weights: jax.Array
    mults: jax.Array
    active: jax.Array
    tokens: jax.Array | None = None
    edges: jax.Array | None = None
    mask: jax.Array | None = None


def _run_games(state, scale, choose, record: bool, key):
    """Plays until every game of the batch has ended; ``choose(state, key) -> (action,
    weights)`` picks each move."""
    from alphagrad.network import observe

    B, V = state.eliminable.shape
    obs = jax.vmap(observe)(state, scale) if record else None
    buf = Trajectory(
        actions=jnp.zeros((V, B), jnp.int32), weights=jnp.zeros((V, B, V), jnp.float32),
        mults=jnp.zeros((V, B), engine.COST_DTYPE), active=jnp.zeros((V, B), bool),
        **({} if not record else dict(zip(("tokens", "edges", "mask"),
                                          (jnp.zeros((V,) + x.shape, x.dtype) for x in obs)))),
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
        if record:
            new.update(zip(("tokens", "edges", "mask"), jax.vmap(observe)(state, scale)))
        state, mults = jax.vmap(engine.eliminate)(state, action)
        new["mults"] = mults
        buf = buf.replace(**{k: getattr(buf, k).at[t].set(v) for k, v in new.items()})
        return t + 1, state, key, buf

    _, _, _, buf = jax.lax.while_loop(cond, body, (0, state, key, buf))
    return buf


@functools.partial(jax.jit, static_argnames=("prior", "simulations", "max_considered", "record"))
def play(params, key, state: engine.GameState, scale, *, prior: Prior, simulations: int,
         max_considered: int = 16, record: bool = False) -> Trajectory:
    """Plays whole games for a batch of states, one Gumbel MuZero search per move.

    Args:
      params: the prior's parameters (None for network-free priors).
      key: a PRNG key.
      state: ``[B]`` batched initial states (padded to the same size).
      scale: ``[B]`` reward scale per graph.
      prior: see :data:`PRIORS` and :func:`network_prior`.
      simulations: simulations per move.
      max_considered: actions Gumbel MuZero considers at the root.
      record: also return the network's input before each move (for training).
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

    return _run_games(state, scale, choose, record, key)


@functools.partial(jax.jit, static_argnames=("prior", "record"))
def rollout(params, key, state: engine.GameState, scale, temperature=0.0, *, prior: Prior,
            record: bool = False) -> Trajectory:
    """Plays whole games by the prior's policy alone (no search): the most likely legal
    vertex at each move where ``temperature`` (a scalar or one per game) is 0, else a
    sample from ``softmax(logits / temperature)``. ``weights`` are the policy's
    probabilities."""
    temperature = jnp.broadcast_to(jnp.asarray(temperature, jnp.float32), state.eliminable.shape[:1])

    def choose(state, key):
        logits, _ = prior(params, state, scale)
        logits = _mask(logits, state.eliminable)
        t = jnp.maximum(temperature, 1e-6)[:, None]
        probs = jax.nn.softmax(logits / t, axis=-1)
        sampled = jax.random.categorical(key, logits / t)
        greedy = jnp.argmax(logits, axis=-1)
        return jnp.where(temperature > 0, sampled, greedy).astype(jnp.int32), probs

    return _run_games(state, scale, choose, record, key)


def samples(traj: Trajectory, scale) -> dict:
    """Training samples of every move of every game of a recorded trajectory, as numpy
    arrays: the network input (``tokens``, ``edges``, ``mask``), the policy target
    (``policy``: the search's improved policy, or the move taken) and the value target
    (``value``: minus the cost still to come, divided by the graph's scale)."""
    active = np.asarray(traj.active)
    mults = np.asarray(traj.mults, np.float64) * active
    to_go = np.cumsum(mults[::-1], axis=0)[::-1] / np.asarray(scale, np.float64)[None, :]
    t, b = np.nonzero(active)
    return {
        "tokens": np.asarray(traj.tokens)[t, b], "edges": np.asarray(traj.edges)[t, b],
        "mask": np.asarray(traj.mask)[t, b], "policy": np.asarray(traj.weights, np.float32)[t, b],
        "value": (-to_go[t, b]).astype(np.float32),
    }


@jax.jit
def follow(state: engine.GameState, scale, order) -> Trajectory:
    """Plays given orders (``[T, B]``; a vertex that is not eliminable is a no-op) and
    records the network input before each move; the policy target is the move taken."""
    from alphagrad.network import observe

    def step(state, action):
        obs = jax.vmap(observe)(state, scale)
        active = state.eliminable.any(-1)
        new, mults = jax.vmap(engine.eliminate)(state, action)
        onehot = jax.nn.one_hot(action, state.eliminable.shape[-1])
        return new, (action, onehot, mults, active) + obs

    _, (actions, weights, mults, active, tokens, edges, mask) = jax.lax.scan(step, state, order)
    return Trajectory(actions, weights, mults, active, tokens, edges, mask)


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

    baselines.check_graph(graph, "search.search_order")
    simulations = baselines.check_int(simulations, "simulations", 1)
    if not isinstance(prior, str) or prior not in PRIORS:
        raise ValueError(f"unknown prior {prior!r}; use one of {sorted(PRIORS)}")
    seed = baselines.check_seed(seed)
    rules.check_convention(convention)
    max_considered = baselines.check_int(max_considered, "max_considered", 1)
    budget_s = baselines.check_budget(budget_s, allow_none=True)
    games = baselines.check_int(games, "games", 1)
    t0 = time.perf_counter()
    ev = Evaluator(graph, convention)
    starts = [baselines.forward(graph), baselines.reverse(graph), baselines.markowitz(graph, convention)]
    best = min(starts, key=ev.cost)
    if not graph.intermediates:
        return []
    scale = jnp.full((games,), max(ev.cost(best), 1), jnp.float32)
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
