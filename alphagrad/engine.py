"""The elimination game in JAX: vertex elimination on padded arrays, pure, jit- and vmap-able.

Eliminating vertex ``j`` (Griewank & Walter, *Evaluating Derivatives*, 2nd ed., sec.
9.2) composes, for every predecessor ``i`` and successor ``k``, ``dk/dj . dj/di`` and
adds it onto the edge ``i -> k``; then ``j`` and its edges are gone. The cost of an order
is the sum of the multiplications of all those products. Structures are table ids (see
:mod:`alphagrad.rules`), so one step is a handful of gathers:

    state, mults = eliminate(state, j)

This is one of the game's two implementations, over the same rule tables. This one plays
many games at once on an accelerator: the network-free control
:func:`alphagrad.search.search_order` plays it, and it is meant for batched self-play.
The product (the classic orders and annealing, the pretrained agent's player) plays the
compiled CPU evaluator (:mod:`alphagrad.evaluator`), which scores orders one by one at
microsecond rates; ``tests/test_engine.py`` holds the two equal.

Costs. The engine counts multiplications in float32, under JAX's default 32-bit types:
a step's count is exact while its products sum to less than 2**24 (every benchmark
graph) and is otherwise the exact count rounded to float32 (relative error about 1e-7
per addition); it never wraps, at any size, which an int32 count would past 2**31 (a
1000x1000 matmul layer has steps of 2e9). That is what rewards and priors need. Exact
integer costs come from :func:`alphagrad.cost` (:mod:`alphagrad.scoring`, the one door
for scoring an order), which counts with the evaluator in int64 and with Python integers
beyond.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from alphagrad import rules as rl
from alphagrad import time_model
from alphagrad.checks import check_graph
from alphagrad.graph import INTERMEDIATE, Graph

#: Default padded vertex limit. Graphs are padded to a multiple of 32 up to it.
MAX_VERTICES = 1024

#: The dtype of the engine's multiplication counts (see the module docstring).
COST_DTYPE = jnp.float32


class GraphTooLargeError(ValueError):
    """The graph has more vertices than the padded limit."""


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class GameState:
    """One graph in the middle of an elimination (a JAX pytree: every field is a leaf).

    Attributes:
      edges: ``[V, V]`` int32 structure id of edge ``i -> k`` (0: no edge).
      eliminable: ``[V]`` bool, intermediates not yet eliminated (the legal actions).
      kinds: ``[V]`` int8, INPUT/INTERMEDIATE/OUTPUT; -1 for padding.
      compose: ``[S, S]`` int32 rule table (see :mod:`alphagrad.rules`).
      join: ``[S, S]`` int32 rule table.
      cost: ``[S, S]`` float32 multiplications per product, in the chosen convention
        (the exact count rounded to float32).
      has_value: ``[S]`` bool, whether a structure carries values (False: a +-1 pattern).
      sizes: ``[V, 4]`` int32 the vertex shapes (leading axes, 1-padded; 0 for padding).
      mults: ``[]`` float32 multiplications spent so far.
    """

    edges: jax.Array
    eliminable: jax.Array
    kinds: jax.Array
    compose: jax.Array
    join: jax.Array
    cost: jax.Array
    has_value: jax.Array
    sizes: jax.Array
    mults: jax.Array

    def replace(self, **changes) -> "GameState":
        """A copy with ``changes`` (fields may be set to None to leave them out of a pytree)."""
        return dataclasses.replace(self, **changes)


def padded_size(n: int, multiple: int = 32) -> int:
    return -(-n // multiple) * multiple


#: The rule tables of a graph (built once per graph and cached): :func:`alphagrad.rules.tables`.
tables = rl.tables


def encode(
    graph: Graph,
    convention: str = "exact",
    num_vertices: int | None = None,
    num_structures: int | None = None,
    max_vertices: int = MAX_VERTICES,
    rule_tables: rl.RuleTables | None = None,
) -> GameState:
    """The initial :class:`GameState` of ``graph``, padded.

    Args:
      graph: a traced graph.
      convention: ``"exact"`` or ``"published"`` cost model (see :mod:`alphagrad.structure`),
        or the time model (``"time"``, ``"time:PLATFORM"``: modelled picoseconds per
        product, :mod:`alphagrad.time_model`, the evaluator's table in float32).
      num_vertices: pad to this many vertices (default: next multiple of 32).
      num_structures: pad the rule tables to this many structures (to batch graphs).
      max_vertices: the limit; larger graphs raise :class:`GraphTooLargeError`.
      rule_tables: the graph's rule tables, if the caller keeps them (default: built
        once and cached here).
    """
    check_graph(graph, "engine.encode")
    rl.check_convention(convention, time=True)
    V = graph.num_vertices
    if V > max_vertices:
        raise GraphTooLargeError(
            f"the graph has {V} vertices, more than the limit of {max_vertices}; pass "
            f"max_vertices={padded_size(V)} (memory grows as its square) or split the function"
        )
    P = num_vertices or padded_size(V)
    if P < V:
        raise ValueError(f"num_vertices={P} is smaller than the graph ({V} vertices)")
    T = rule_tables if rule_tables is not None else tables(graph)
    S = num_structures or padded_size(T.size, 64)  # few distinct shapes: few compiles
    if S < T.size:
        raise ValueError(f"num_structures={S} is smaller than the graph's {T.size} structures")
    # float32 of the exact counts: never wraps (an int32 table would past 2**31, which the
    # closure's unused products of a 40x40 matmul already exceed)
    costs = (time_model.convention_table(T, convention) if time_model.is_time(convention)
             else T.float_cost[convention]).astype(np.float32)
    edges = np.zeros((P, P), np.int32)
    for e in graph.edges:
        edges[e.src, e.dst] = T.index(e.structure)
    sizes = np.zeros((P, 4), np.int32)
    for v, shape in enumerate(graph.shapes):
        dims = list(shape[:3]) + [int(np.prod(shape[3:], dtype=np.int64))]
        sizes[v] = dims + [1] * (4 - len(dims)) if len(shape) < 4 else dims
    kinds = np.full(P, -1, np.int8)
    kinds[:V] = graph.kinds
    pad = lambda a, fill: np.pad(a, ((0, S - a.shape[0]), (0, S - a.shape[1])), constant_values=fill)
    return GameState(
        edges=jnp.asarray(edges),
        eliminable=jnp.asarray(kinds == INTERMEDIATE),
        kinds=jnp.asarray(kinds),
        compose=jnp.asarray(pad(T.compose, rl.INVALID)),
        join=jnp.asarray(pad(T.join, rl.INVALID)),
        cost=jnp.asarray(pad(costs, 0), COST_DTYPE),
        has_value=jnp.asarray(np.pad([s is not None and s.value_vars is not None for s in T.structures], (0, S - T.size))),
        sizes=jnp.asarray(sizes),
        mults=jnp.zeros((), COST_DTYPE),
    )


#: Predecessors and successors are processed in blocks of this many (any degree works;
#: a block costs BLOCK**2 table look-ups, a vertex of degree d costs ceil(d/BLOCK) blocks).
BLOCK = 16


def _blocks(mask: jax.Array, block: int):
    """Indices of the set entries of ``mask``, as ``ceil(count/block)`` blocks of ``block``.

    Returns ``(count_blocks, take)`` where ``take(c)`` gives block ``c``'s indices padded
    with ``len(mask)`` (an out-of-range index: gathers fill 0, scatters drop). A scatter
    of ranks, which is much faster under vmap than ``jnp.nonzero``.
    """
    n = mask.shape[0]
    rank = jnp.cumsum(mask) - 1

    def take(c):
        pos = rank - c * block
        slot = jnp.where(mask & (pos >= 0) & (pos < block), pos, block)
        idx = jnp.full((block + 1,), n, jnp.int32)
        return idx.at[slot].set(jnp.arange(n, dtype=jnp.int32))[:block]

    return (mask.sum() + block - 1) // block, take


def _get(a: jax.Array, idx: jax.Array) -> jax.Array:
    return a.at[idx].get(mode="fill", fill_value=0)


def _block_step(c, carry, into, out_of, compose, join, cost, block):
    """Adds the products of block ``c`` of (predecessor, successor) pairs (onto ``E``
    unless it is None: then only their multiplications are counted)."""
    E, total = carry
    _n_pred, take_pred = _blocks(into != 0, block)
    n_succ, take_succ = _blocks(out_of != 0, block)
    n_succ = jnp.maximum(n_succ, 1)
    p = take_pred(c // n_succ)
    s = take_succ(c % n_succ)
    a = _get(out_of, s)  # [D] structure of vertex -> k
    b = _get(into, p)  # [D] structure of i -> vertex
    total = total + cost[a[None, :], b[:, None]].sum()
    if E is not None:
        prod = compose[a[None, :], b[:, None]]
        old = E.at[p[:, None], s[None, :]].get(mode="fill", fill_value=0)
        E = E.at[p[:, None], s[None, :]].set(join[old, prod], mode="drop")
    return E, total


def _num_blocks(into, out_of, block):
    return _blocks(into != 0, block)[0] * _blocks(out_of != 0, block)[0]


@functools.lru_cache(maxsize=None)
def _pairs_fn(block: int, update: bool):
    """Visits all (predecessor, successor) pairs in blocks.

    ``(E, into, out_of, compose, join, cost) -> (E, mults)`` if ``update``, else
    ``(into, out_of, compose, join, cost) -> mults``.

    One block (``block`` predecessors x ``block`` successors) covers almost every
    elimination; larger degrees take more blocks in a loop. Under ``vmap`` a loop with a
    per-element trip count would select the whole batch of edge matrices element by
    element on every step, so the batching rule loops to the largest block count of the
    batch (blocks past an element's own count select no pair and change nothing). Rule
    tables that are shared by the batch stay shared (not copied per row).
    """
    n_state = 3 if update else 2  # per-row arguments: (E,) into, out_of

    def run(E, rest, blocks, body, total):
        out = jax.lax.fori_loop(1, blocks, body, body(0, (E, total)))
        return out if update else out[1]

    def single(*args):
        E, rest = (args[0], args[1:]) if update else (None, args)
        body = lambda c, carry: _block_step(c, carry, *rest, block)
        return run(E, rest, _num_blocks(rest[0], rest[1], block), body, jnp.zeros((), rest[-1].dtype))

    f = jax.custom_batching.custom_vmap(single)

    @f.def_vmap
    def batched(axis_size, in_batched, *args):
        per_row = lambda x, b: x if b else jnp.broadcast_to(x, (axis_size,) + x.shape)
        args = [per_row(x, b) if k < n_state else x for k, (x, b) in enumerate(zip(args, in_batched))]
        axes = tuple(0 if k < n_state or b else None for k, b in enumerate(in_batched))
        E, rest, rest_axes = (args[0], args[1:], axes[1:]) if update else (None, args, axes)
        step = lambda c, carry, *a: _block_step(c, carry, *a, block)
        body = lambda c, carry: jax.vmap(step, in_axes=(None, 0) + rest_axes)(c, carry, *rest)
        blocks = jax.vmap(lambda i, o: _num_blocks(i, o, block))(rest[0], rest[1]).max()
        out = run(E, rest, blocks, body, jnp.zeros((axis_size,), rest[-1].dtype))
        return out, ((True, True) if update else True)

    return f


def _pairs(state: GameState, into, out_of, block: int, update: bool):
    """Visits every (predecessor, successor) pair of a vertex with edges ``into`` and
    ``out_of``; returns ``(edges, mults)``, the edge matrix with every product added onto
    its edge, if ``update``, else only ``mults``."""
    tables = (state.compose, state.join, state.cost)
    if update:
        return _pairs_fn(block, True)(state.edges, into, out_of, *tables)
    return _pairs_fn(block, False)(into, out_of, *tables)


def vertex_cost(state: GameState, vertex, block: int = BLOCK) -> jax.Array:
    """float32: the multiplications of eliminating ``vertex`` now (its Markowitz degree in
    the cost model); 0 if it is not eliminable."""
    E = state.edges
    into = jnp.where(state.eliminable[vertex], E[:, vertex], 0)
    return _pairs(state, into, E[vertex, :], block, update=False)


def vertex_costs(state: GameState, block: int = BLOCK) -> jax.Array:
    """``[V]`` float32: :func:`vertex_cost` of every vertex."""
    return jax.vmap(lambda j: vertex_cost(state, j, block))(jnp.arange(state.edges.shape[0]))


def eliminate(state: GameState, vertex: jax.Array, block: int = BLOCK) -> tuple[GameState, jax.Array]:
    """Eliminates ``vertex``; returns the new state and the multiplications it cost
    (float32, see the module docstring).

    Work grows with in-degree x out-degree of ``vertex`` (in blocks of ``block``), not
    with the square of the graph size. Eliminating a vertex that is not eliminable (an
    input, an output, padding or an eliminated vertex) changes nothing and costs 0.
    """
    E = state.edges
    legal = state.eliminable[vertex]
    into = jnp.where(legal, E[:, vertex], 0)  # [V] structure of i -> vertex
    out_of = E[vertex, :]  # [V] structure of vertex -> k
    E, mults = _pairs(state, into, out_of, block, update=True)
    E = E.at[vertex, :].set(jnp.where(legal, 0, out_of))
    E = E.at[:, vertex].set(jnp.where(legal, 0, E[:, vertex]))
    state = state.replace(
        edges=E,
        eliminable=state.eliminable.at[vertex].set(False),
        mults=state.mults + mults.astype(state.mults.dtype),
    )
    return state, mults


def eliminate_all(state: GameState, order: jax.Array) -> tuple[GameState, jax.Array]:
    """Eliminates ``order`` (``[N]`` int32) in turn; returns the state and ``[N]`` costs."""
    return jax.lax.scan(eliminate, state, order)

