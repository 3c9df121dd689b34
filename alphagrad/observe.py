"""What the decoder reads per move, in JAX: the engine's game with the numba player's observation.

The numba player (:mod:`alphagrad.player`) reads, at every state, the raw numbers of
:func:`alphagrad.features.observe` (elimination cost, predecessors, successors, lookahead,
pressure, the frontier, the last move's touch, the growth) and scores each vertex with the
decoder. Self-play on an accelerator needs the same game under ``vmap``: this module
computes the same numbers, in the same columns, on the engine's dense state
(:class:`alphagrad.engine.GameState`), pure and jit/vmap-able, and runs the flax decoder
(:meth:`alphagrad.network.PolicyNet.decode`) on them. ``tests/test_game_conformance.py``
holds the two implementations equal move by move.

    game = start(graph)
    game, mults = play(game, vertex)          # the engine's step and the last move's touch
    raw = observe(game)                       # [V, NUM_RAW] float32
    logits, value = decode(net, params, h, game, raw, scale)

How one observation is computed (the whole graph, every vertex; a move changes a
vertex's numbers within two hops of it, but under ``vmap`` a full pass over fixed
shapes is what an accelerator runs well). Eliminating ``u`` replaces, for every
predecessor ``x`` and successor ``k`` of ``u``, the edge ``x -> k`` by
``J = join[E[x, k], compose[E[u, k], E[x, u]]]``; everything but the cost and the degrees
is a sum over those ``(x, u, k)`` paths of two hops:

* ``D[v, u]``, what eliminating ``u`` changes in its neighbour ``v``'s cost, is minus
  ``v``'s share of cost on its edge with ``u`` plus, over the edges ``v`` gains or that
  change, ``v``'s share on the new structure minus that on the old. A share is a row of
  ``Sin [V, S]`` (what an edge of structure ``s`` into ``v`` adds to ``v``'s cost: its
  product with each edge out of ``v``) or ``Sout [V, S]``, sums of a cost-table row per
  edge;
* the lookahead of ``u`` sums ``D[x, u]`` over its alive neighbours ``x``, the pressure of
  ``v`` sums ``D[v, u]`` over its alive neighbours ``u``, the growth of ``u`` the entries
  of the new edges less those of the old ones and of ``u``'s own.

The paths are visited as a work list of blocks (``block`` predecessors by ``block``
successors of one vertex, ``chunk`` blocks per loop step), and the edges likewise for
the shares, so the work grows with the two-hop paths through the alive vertices and with
the edges times the structures, not with ``V**3`` or ``V S**2``; the rest is a few passes
over the ``[V, V]`` edge matrix (neighbour lists, the shares on each edge). Counts are float32 like the engine's (exact while
a sum stays below 2**24; the evaluator counts int64, saturating at 2**62).
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from alphagrad import engine
from alphagrad.features import dynamic_features
from alphagrad.graph import INTERMEDIATE, Graph


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Game:
    """One graph in the middle of a game, as the decoder sees it (a JAX pytree).

    Attributes:
      state: the engine's :class:`~alphagrad.engine.GameState`.
      touched: ``[V]`` bool, the neighbours the last eliminated vertex had (none at the
        start): the raw number ``features.observe`` calls the last move's touch.
      entries: ``[S]`` float32, the entries each structure holds (for the growth).
    """

    state: engine.GameState
    touched: jax.Array
    entries: jax.Array

    def replace(self, **changes) -> "Game":
        return dataclasses.replace(self, **changes)


@dataclasses.dataclass(frozen=True)
class ObserveSettings:
    """How :func:`observe` walks the edges and the two-hop paths: blocks of ``block``
    neighbours (predecessors by successors for a path) of one vertex, ``chunk`` blocks per
    loop step (a loop runs ``ceil(blocks / chunk)`` steps; under ``vmap``, the batch's
    largest count)."""

    block: int = 4
    chunk: int = 64


def start(graph: Graph, convention: str = "exact", num_vertices: int | None = None,
          num_structures: int | None = None, max_vertices: int = engine.MAX_VERTICES, rule_tables=None) -> Game:
    """The initial :class:`Game` of ``graph`` (arguments as :func:`alphagrad.engine.encode`)."""
    T = rule_tables if rule_tables is not None else engine.tables(graph)
    state = engine.encode(graph, convention, num_vertices, num_structures, max_vertices, T)
    entries = np.zeros(state.cost.shape[0], np.float32)
    entries[: T.size] = T.entries
    return Game(state, jnp.zeros(state.eliminable.shape, bool), jnp.asarray(entries))


def play(game: Game, vertex) -> tuple[Game, jax.Array]:
    """Eliminates ``vertex`` (:func:`alphagrad.engine.eliminate`) and records its
    neighbours as the last move's touch; returns the new game and the multiplications.
    An illegal move changes nothing and costs 0."""
    E = game.state.edges
    near = (E[:, vertex] != 0) | (E[vertex, :] != 0)
    touched = jnp.where(game.state.eliminable[vertex], near, game.touched)
    state, mults = engine.eliminate(game.state, vertex)
    return game.replace(state=state, touched=touched), mults


def _loop(body, count, init, *operands):
    """``fori_loop(0, count, lambda c, carry: body(c, carry, *operands), init)``. Under
    ``vmap`` the loop runs to the batch's largest ``count`` with the body vmapped, as the
    engine's pair loop does (:func:`alphagrad.engine._pairs_fn`): a batched trip count
    would otherwise select every row's whole carry at every step. ``body`` must leave the
    carry unchanged at steps ``c >= count``; it is a static function (operands are passed,
    not closed over)."""
    leaves, tree = jax.tree_util.tree_flatten(init)
    n = len(leaves)

    def flat_body(c, carry, *ops):
        return jax.tree_util.tree_leaves(body(c, jax.tree_util.tree_unflatten(tree, carry), *ops))

    def single(count, *args):
        return jax.lax.fori_loop(0, count, lambda c, x: flat_body(c, x, *args[n:]), list(args[:n]))

    run = jax.custom_batching.custom_vmap(single)

    @run.def_vmap
    def batched(axis_size, in_batched, count, *args):
        rows = [x if b else jnp.broadcast_to(x, (axis_size,) + x.shape) for x, b in zip(args[:n], in_batched[1:])]
        axes = (None, 0) + tuple(0 if b else None for b in in_batched[1 + n:])
        step = jax.vmap(flat_body, in_axes=axes)
        out = jax.lax.fori_loop(0, count.max() if in_batched[0] else count,
                                lambda c, x: step(c, x, *args[n:]), rows)
        return out, [True] * n

    return jax.tree_util.tree_unflatten(tree, run(count, *leaves, *operands))


def _ranks(m, tile: int = 32):
    """``[V, V]`` int32: the running count of ``m`` along each row (inclusive), as two
    small matrix products (within tiles of ``tile``, then over the tiles): exact for 0/1
    inputs at any matmul precision, and several times faster than XLA's cumsum on the CPU."""
    V = m.shape[-1]
    t = tile if V % tile == 0 else V
    inner = m.astype(jnp.float32).reshape(V, V // t, t) @ jnp.triu(jnp.ones((t, t), jnp.float32))
    n = V // t
    offsets = inner[..., -1] @ jnp.triu(jnp.ones((n, n), jnp.float32), 1)
    return (inner + offsets[..., None]).reshape(V, V).astype(jnp.int32)


def _lists(nz):
    """``[V, V]`` int32: row ``v`` lists the columns where ``nz[v]`` is set, ascending,
    padded with ``V`` (a scatter of ranks)."""
    V = nz.shape[0]
    idx = jnp.arange(V, dtype=jnp.int32)
    at = jnp.where(nz, idx[:, None] * V + _ranks(nz) - 1, V * V).reshape(-1)
    return jnp.full(V * V, V, jnp.int32).at[at].set(jnp.tile(idx, V), mode="drop").reshape(V, V)


def _get(a, *idx):
    return a.at[idx].get(mode="fill", fill_value=0)


def _items(c, ends, blocks, chunk):
    """Step ``c``'s ``chunk`` items of a work list of ``blocks[v]`` blocks per vertex
    (``ends`` their running sum): ``(vertex, its block, valid)``."""
    t = c * chunk + jnp.arange(chunk)
    v = jnp.minimum(jnp.searchsorted(ends, t, side="right"), ends.shape[0] - 1)
    return v, t - (ends[v] - blocks[v]), t < ends[-1]


def _listed(lists, v, at, block, valid):
    """``[chunk, block]``: block ``at`` of the rows ``v`` of ``lists``, ``V`` where invalid."""
    V = lists.shape[0]
    got = lists.at[v[:, None], at[:, None] * block + jnp.arange(block)].get(mode="fill", fill_value=V)
    return jnp.where(valid[:, None], got, V)


def _edge_rows(c, acc, lists, ends, blocks, ids, table, block, chunk):
    """One step of :func:`_shares`: adds ``table[ids[v, w]]`` over a block of ``v``'s listed
    neighbours ``w`` onto ``acc[v]``."""
    v, at, valid = _items(c, ends, blocks, chunk)
    s = _get(ids, v[:, None], _listed(lists, v, at, block, valid))  # [chunk, block] structures (0: none)
    return acc.at[v].add(jnp.where(valid[:, None], table[s].sum(1), 0.0))


def _shares(E, preds, succs, cost, settings: ObserveSettings):
    """``(Sin, Sout)`` ``[V, S]``: what an edge of structure ``s`` into ``v`` adds to ``v``'s
    elimination cost (``sum_k cost[E[v, k], s]``) and what one out of ``v`` adds
    (``sum_i cost[s, E[i, v]]``): a row of the cost table per edge, summed (work in the
    edges times the structures, where a histogram times the table would cost ``V S**2``)."""
    V, S = E.shape[0], cost.shape[0]
    B, Ch = settings.block, settings.chunk
    step = functools.partial(_edge_rows, block=B, chunk=Ch)
    out = []
    for lists, ids, table in ((succs, E, cost), (preds, E.T, cost.T)):
        blocks = ((lists < V).sum(1) + B - 1) // B
        ends = jnp.cumsum(blocks)
        count = (ends[-1] + Ch - 1) // Ch
        out.append(_loop(step, count, jnp.zeros((V, S), jnp.float32), lists, ends, blocks, ids, table))
    return tuple(out)


def _path_step(c, carry, E, compose, join, entries, Sin, Sout, live, preds, succs, ends, blocks, ns, block, chunk):
    """One step of :func:`_path_sums`: ``chunk`` blocks of two-hop paths."""
    ahead, press, grow = carry
    V = E.shape[0]
    u, r, valid = _items(c, ends, blocks, chunk)
    n = jnp.maximum(ns[u], 1)
    P = _listed(preds, u, r // n, block, valid)  # [chunk, block] predecessors x
    K = _listed(succs, u, r % n, block, valid)  # [chunk, block] successors k
    old = _get(E, P[:, :, None], K[:, None, :])  # [chunk, block, block]: x -> k now
    made = compose[_get(E, u[:, None], K)[:, None, :], _get(E, P, u[:, None])[:, :, None]]
    pair = (P < V)[:, :, None] & (K < V)[:, None, :]
    new = jnp.where(pair, join[old, jnp.where(pair, made, 0)], 0)
    g = (entries[new] - entries[old]).sum((1, 2))
    dk = (_get(Sin, K[:, None, :], new) - _get(Sin, K[:, None, :], old)).sum(1)  # [chunk, block] per successor
    dx = (_get(Sout, P[:, :, None], new) - _get(Sout, P[:, :, None], old)).sum(2)  # per predecessor
    look = (_get(live, P) * dx).sum(1) + (_get(live, K) * dk).sum(1)
    mid = (live[u] * valid)[:, None]
    ahead = ahead.at[u].add(jnp.where(valid, look, 0.0))
    grow = grow.at[u].add(jnp.where(valid, g, 0.0))
    press = press.at[P].add(mid * dx, mode="drop").at[K].add(mid * dk, mode="drop")
    return ahead, press, grow


def _path_sums(state: engine.GameState, entries, Sin, Sout, preds, succs, settings: ObserveSettings):
    """Over the two-hop paths ``x -> u -> k`` through each alive ``u``, the parts of the
    lookahead, the pressure and the growth that the new edges ``J`` make (``[V]`` float32
    each; see the module docstring)."""
    E, alive = state.edges, state.eliminable
    V, B, Ch = E.shape[0], settings.block, settings.chunk
    ns = ((succs < V).sum(1) + B - 1) // B  # successor blocks
    blocks = jnp.where(alive, ((preds < V).sum(1) + B - 1) // B * ns, 0)
    ends = jnp.cumsum(blocks)
    zero = jnp.zeros(V, jnp.float32)
    step = functools.partial(_path_step, block=B, chunk=Ch)
    return _loop(step, (ends[-1] + Ch - 1) // Ch, (zero, zero, zero), E, state.compose, state.join, entries,
                 Sin, Sout, alive.astype(jnp.float32), preds, succs, ends, blocks, ns)


def observe(game: Game, settings: ObserveSettings = ObserveSettings()) -> jax.Array:
    """``[V, NUM_RAW]`` float32: :func:`alphagrad.features.observe`'s raw numbers of every
    legal vertex (zeros elsewhere), same columns: elimination cost, predecessors,
    successors, lookahead, pressure, predecessors that are not alive (inputs),
    successors that are not alive (outputs), the last move's touch, growth."""
    state = game.state
    E, alive = state.edges, state.eliminable
    nz = E != 0
    preds, succs = _lists(nz.T), _lists(nz)  # each vertex's predecessors, successors
    Sin, Sout = _shares(E, preds, succs, state.cost, settings)
    # v's share of cost on its edge with u: out[v, u] (u a successor) and back[u, v] (u a
    # predecessor), flat gathers without a transpose, each summed by matrix products (so
    # that XLA gathers once, not once per sum)
    V, S = Sin.shape
    at = jnp.arange(V) * S
    out = Sout.reshape(-1)[at[:, None] + E]
    back = Sin.reshape(-1)[at[None, :] + E]
    ahead, press, grow = _path_sums(state, game.entries, Sin, Sout, preds, succs, settings)
    live = alive.astype(jnp.float32)
    both = jnp.stack([jnp.ones_like(live), live])  # [2, V]
    dot = functools.partial(jnp.matmul, precision=jax.lax.Precision.HIGHEST)
    (cost, back_live), out_live = dot(both, back), dot(live, out)
    ahead = ahead - out_live - dot(back, live)
    press = press - dot(out, live) - back_live
    held = game.entries[E]
    grow = grow - dot(jnp.ones_like(live), held) - dot(held, jnp.ones_like(live))
    dead = nz & ~alive[None, :]
    raw = jnp.stack([cost, nz.sum(0), nz.sum(1), ahead, press, (nz & ~alive[:, None]).sum(0), dead.sum(1),
                     game.touched, grow], -1).astype(jnp.float32)
    return raw * live[:, None]


def progress(game: Game) -> jax.Array:
    """The share of the game's moves made (the decoder's value input, as training has it)."""
    total = (game.state.kinds == INTERMEDIATE).sum()
    return 1.0 - game.state.eliminable.sum() / jnp.maximum(total, 1)


def decode(net, params, h, game: Game, raw, scale) -> tuple[jax.Array, jax.Array]:
    """The flax decoder (:meth:`alphagrad.network.PolicyNet.decode`) on ``raw``
    (:func:`observe`): ``(logits [V], value [])``, the logits those of
    :func:`alphagrad.player._logit` (illegal vertices unmasked). ``h``: the encoder's
    embeddings ``[V, D]`` padded to the game's size (:func:`alphagrad.player.embed`);
    ``scale``: the graph's cost scale (the best baseline's cost, at least 1)."""
    dynamic = dynamic_features(raw, jnp.maximum(scale, 1.0), jnp)
    return net.apply(params, h, dynamic, game.state.eliminable, progress(game), method="decode")
