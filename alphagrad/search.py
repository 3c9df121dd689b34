"""Gumbel MuZero search over elimination orders, on the elimination engine (mctx).

The game: a state is a partly eliminated graph (:class:`alphagrad.engine.GameState`), an
action eliminates one intermediate vertex, the reward is minus the multiplications that
costs divided by a per-graph scale (the best baseline's cost, so that graphs whose costs
differ by orders of magnitude share one reward range), and the game ends when every
intermediate is eliminated. Illegal actions (inputs, outputs, padding, eliminated
vertices) are masked out of the priors.

A *prior* gives the search its policy logits and value estimates: a network (the training
issue) or, here, a network-free one, ``uniform`` or ``markowitz`` (logits from minus each
vertex's current elimination cost), so we can measure what learning adds.
"""

from __future__ import annotations

import functools
from typing import Callable

import jax
import jax.numpy as jnp
import mctx
import numpy as np

from alphagrad import baselines, engine
from alphagrad.evaluator import Evaluator
from alphagrad.graph import Graph

#: prior(params, state [B], scale [B]) -> (logits [B, V], value [B])
Prior = Callable

_NEG = -1e9


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


def make_recurrent_fn(prior: Prior):
    """The mctx ``recurrent_fn`` of the elimination game for a given prior."""

    def recurrent_fn(params, rng_key, action, embedding):
        state, scale = embedding
        done_before = ~state.eliminable.any(-1)
        state, mults = jax.vmap(engine.eliminate)(state, action)
        done = ~state.eliminable.any(-1)
        logits, value = prior(params, state, scale)
        out = mctx.RecurrentFnOutput(
            reward=jnp.where(done_before, 0.0, -mults.astype(jnp.float32) / scale),
            discount=jnp.where(done, 0.0, 1.0),
            prior_logits=_mask(logits, state.eliminable),
            value=jnp.where(done, 0.0, value),
        )
        return out, (state, scale)

    return recurrent_fn


def root_output(prior: Prior, params, state: engine.GameState, scale) -> mctx.RootFnOutput:
    logits, value = prior(params, state, scale)
    return mctx.RootFnOutput(prior_logits=_mask(logits, state.eliminable), value=value,
                             embedding=(state, scale))


@functools.partial(jax.jit, static_argnames=("prior", "simulations", "max_considered"))
def play(params, key, state: engine.GameState, scale, *, prior: Prior, simulations: int,
         max_considered: int = 16):
    """Plays whole games for a batch of states, one search per move.

    Args:
      params: the prior's parameters (None for network-free priors).
      key: a PRNG key.
      state: ``[B]`` batched initial states (padded to the same size).
      scale: ``[B]`` reward scale per graph.
      prior: see :data:`PRIORS`.
      simulations: simulations per move.
      max_considered: actions Gumbel MuZero considers at the root.

    Returns:
      ``(actions [V, B], action_weights [V, B, V], mults [V, B])``: the vertex eliminated at
      each move (moves past the end of a game are no-ops costing 0), the search's improved
      policy (the training target) and each move's cost.
    """
    recurrent_fn = make_recurrent_fn(prior)
    V = state.eliminable.shape[-1]

    def move(carry, key):
        state = carry
        out = mctx.gumbel_muzero_policy(
            params, key, root_output(prior, params, state, scale), recurrent_fn,
            num_simulations=simulations, invalid_actions=~state.eliminable,
            max_num_considered_actions=max_considered,
        )
        state, mults = jax.vmap(engine.eliminate)(state, out.action)
        return state, (out.action, out.action_weights, mults)

    _, outs = jax.lax.scan(move, state, jax.random.split(key, V))
    return outs


def search_order(graph: Graph, simulations: int = 32, prior: str = "markowitz", seed: int = 0,
                 convention: str = "exact", max_considered: int = 16) -> list[int]:
    """An order found by Gumbel MuZero search with a network-free prior.

    Returns the searched order, or the best baseline's if that is cheaper, so the result is
    never worse than forward, reverse and Markowitz.
    """
    if prior not in PRIORS:
        raise ValueError(f"unknown prior {prior!r}; use one of {sorted(PRIORS)}")
    ev = Evaluator(graph, convention)
    starts = [baselines.forward(graph), baselines.reverse(graph), baselines.markowitz(graph, convention)]
    best = min(starts, key=ev.cost)
    if not graph.intermediates:
        return []
    scale = jnp.asarray([max(ev.cost(best), 1)], jnp.float32)
    state = jax.tree_util.tree_map(lambda x: x[None], engine.encode(graph, convention))
    actions, _, _ = play(None, jax.random.key(seed), state, scale, prior=PRIORS[prior],
                         simulations=simulations, max_considered=max_considered)
    inter = set(graph.intermediates)
    order = [int(a) for a in np.asarray(actions[:, 0]) if int(a) in inter]
    order = list(dict.fromkeys(order))
    if sorted(order) != sorted(inter):  # pragma: no cover - the masks forbid this
        raise RuntimeError("search produced an incomplete order")
    return order if ev.cost(order) < ev.cost(best) else best
