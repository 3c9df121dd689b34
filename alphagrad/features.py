"""What the policy network sees of a graph and of a state (its feature schema).

Two parts (see :mod:`alphagrad.network`):

* :func:`graph_inputs`, computed once per graph (or on the graph left after some moves,
  for a network that encodes it again during a game): per-vertex features (kind, value
  size, degrees, what eliminating it costs now, depth from the inputs and to the
  outputs) and per-edge features (whether the edge carries values, the multiplications
  it takes part in when its source or its destination is eliminated), read by the
  encoder;
* :func:`observe`, at every state: per-vertex ``(elimination cost, predecessors,
  successors, lookahead, pressure)`` now, read by the per-move decoder; the lookahead is
  how eliminating the vertex would change its neighbours' elimination costs (a free move
  that makes a neighbour dear looks free without it), the pressure how eliminating its
  neighbours would change its own (a hub left for the end gathers every Jacobian around
  it and costs most there). Both are read off the edges around the vertex, by the
  evaluator's compose/join rules, without eliminating anything. Eliminating a vertex
  changes these only within two hops of it, so a move costs the decoder a few vertices,
  not the graph. Beside them, whether the last move touched the vertex (it was the
  eliminated vertex's neighbour): in 36% of the labelled states that have a single good
  move, that move is next to the last one (measured on chained and random training
  graphs), where the other numbers may not tell it from a vertex of the same local shape
  elsewhere. And the growth: how many more Jacobian entries the graph's edges hold once
  the vertex is eliminated (:func:`growth`): a free move that joins two sparse edges
  into a dense one costs nothing and changes no neighbour's cost, yet makes every later
  product through that edge dense (the moves that ruined the network's games on its
  stencil training graphs, HeatFTCS and DrivenCavity, were such moves).

The compiled kernels take the graph's rule tables as one :class:`Tables` and their
working arrays as one :class:`Scratch`. :mod:`alphagrad.player` plays the network on
these features.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numba
import numpy as np

from alphagrad.evaluator import (CAP, OVERFLOW, Evaluator, after, copy_state, eliminate, order_cost, saturating_add,
                                 vertex_cost)
from alphagrad.graph import INPUT, INTERMEDIATE, OUTPUT, Graph, longest_paths


#: Per-vertex features of :func:`graph_inputs`.
NUM_STATIC = 15
#: The first of :func:`graph_inputs`' static columns that models saved before them lack
#: (forward's and reverse's cost relative to the scale, the same on every vertex, then the
#: cost in multiplications): such a model is widened with zero weights on them.
MODES, STATIC_ABSOLUTE = 12, 14
#: Per-edge features of :func:`graph_inputs`.
NUM_EDGE = 5
#: The first of the edge columns that models saved before them lack (the multiplications
#: the edge takes part in, counted as such, not relative to the scale): messages carry
#: them after the edge's direction (:data:`alphagrad.network.DIRECTION_AT`), so such a
#: model is widened with zero weights on them.
EDGE_ABSOLUTE = 3
#: Raw per-vertex numbers of :func:`observe`: elimination cost, predecessors, successors,
#: lookahead, pressure, predecessors and successors that are inputs or outputs (not to be
#: eliminated), whether the last move touched it (it was the eliminated vertex's neighbour),
#: the growth (:func:`growth`).
NUM_RAW = 9
#: Features the decoder reads per vertex (:func:`dynamic_features` of the raw numbers).
NUM_DYNAMIC = 14
#: Columns of :func:`dynamic_features` that models saved before them lack (the lookahead,
#: the pressure, then the two frontier shares, then the last move's touch, then the cost,
#: lookahead and pressure in multiplications): such a model is widened with zero weights
#: on them; then the growth.
LOOKAHEAD, PRESSURE, FRONTIER, RECENT, ABSOLUTE, GROWTH = 5, 6, 7, 9, 10, 13
#: The absolute columns are ``log1p`` of multiplications over this (about 2 at 5e8).
LOG_UNIT = 10.0


class Tables(NamedTuple):
    """A graph's rule tables as the compiled kernels read them (one argument, not four)."""

    compose: np.ndarray  # [S, S] int64: the structure of a . b
    join: np.ndarray  # [S, S] int64: the structure of a + b
    cost: np.ndarray  # [S, S] int64: multiplications of a . b (the evaluator's convention)
    entries: np.ndarray  # [S] int64: the entries each structure holds (for the growth)

    @classmethod
    def of(cls, ev: Evaluator) -> "Tables":
        """The tables of an :class:`~alphagrad.evaluator.Evaluator`."""
        return cls(ev.compose, ev.join, ev.cost_table, ev.entries)


class Scratch(NamedTuple):
    """Working arrays of the feature kernels, allocated once per game or observation."""

    mark: np.ndarray  # [V + 1] int64: stamps (the last slot holds the current stamp)
    pos: np.ndarray  # [V] int64: the slot of a stamped neighbour's edge
    nb: np.ndarray  # [V] int64: a vertex's neighbours


class Reads(NamedTuple):
    """Which of the dearer raw numbers a decoder reads (0 where it does not)."""

    lookahead: bool
    pressure: bool
    growth: bool


@numba.njit(cache=True, nogil=True)
def new_scratch(V):
    """Zeroed :class:`Scratch` for a graph of ``V`` vertices."""
    return Scratch(np.zeros(V + 1, np.int64), np.zeros(V, np.int64), np.zeros(V, np.int64))


def dynamic_features(raw, scale, xp=np):
    """``[..., NUM_RAW]`` raw numbers of :func:`observe` -> ``[..., NUM_DYNAMIC]`` features:
    log1p of the cost relative to the graph's scale, of the degrees and of their product
    (the most fill-in eliminating the vertex can make), whether it is free, the signed
    log1p of the lookahead and of the pressure relative to the scale, and the frontier:
    the share of its predecessors and of its successors that are inputs or outputs (1 on
    the vertex a forward, resp. reverse, sweep eliminates next), whether the last move
    touched it (a sweep goes on next to where it last eliminated), and the cost, the
    lookahead and the pressure again in multiplications, not relative to the scale (signed
    ``log1p / LOG_UNIT``): on a graph whose best order costs 1e8, the relative ones of
    costs 8 and 32,768 are both about 0, and the choice between such moves decided a
    quarter of the cost of sweep-regime training graphs; and the growth in entries
    (signed ``log1p / LOG_UNIT``). ``xp`` is numpy or jax.numpy;
    :func:`alphagrad.player.rollout` computes the same in compiled code."""
    raw = raw.astype(xp.float32)
    c, i, o, d, q, a, b, r, g = (raw[..., k] for k in range(NUM_RAW))
    s = xp.asarray(scale, xp.float32)[..., None]
    return xp.stack([xp.log1p(c / s), xp.log1p(i), xp.log1p(o), xp.log1p(i * o), (c == 0).astype(xp.float32),
                     xp.sign(d) * xp.log1p(xp.abs(d) / s), xp.sign(q) * xp.log1p(xp.abs(q) / s),
                     a / xp.maximum(i, 1), b / xp.maximum(o, 1), r, xp.log1p(c) / LOG_UNIT,
                     xp.sign(d) * xp.log1p(xp.abs(d)) / LOG_UNIT, xp.sign(q) * xp.log1p(xp.abs(q)) / LOG_UNIT,
                     xp.sign(g) * xp.log1p(xp.abs(g)) / LOG_UNIT], -1)


def graph_inputs(graph: Graph, ev: Evaluator, scale: float, prefix=()) -> dict:
    """The encoder's input for ``graph`` after eliminating ``prefix`` (none: the graph as
    traced): ``static [V, NUM_STATIC]`` and ``edge_features [E, NUM_EDGE]`` float32,
    ``src``/``dst [E]`` int32 (the edges left, fill-in included), ``kinds [V]`` and
    ``mask [V]`` (False on the eliminated vertices, whose rows are zero); costs relative
    to ``scale`` (the best baseline's cost), forward's and reverse's of what is left, and
    again in multiplications (``log1p / LOG_UNIT``: on a graph whose best order costs 1e8
    the relative ones of most vertices and edges are about 0)."""
    V = graph.num_vertices
    kinds = np.asarray(graph.kinds, np.int64)
    prefix = np.asarray(prefix, np.int64)
    mask = np.ones(V, bool)
    mask[prefix] = False
    rest = [v for v in graph.intermediates if mask[v]]
    if len(prefix):
        state = ev.run(after, prefix, ev.compose, ev.join, ev.cost_table)[0]
        src, dst, sid = edges_of(state)
    else:
        state = ev.initial
        src, dst, sid = ev.edge_arrays
    T = ev.tables
    has_value = np.asarray([s is not None and s.value_vars is not None for s in T.structures], bool)
    sizes = np.asarray([float(math.prod(s)) for s in graph.shapes], np.float64)
    ndim = np.asarray([len(s) for s in graph.shapes], np.float64)
    ind = np.bincount(dst, minlength=V).astype(np.float64)
    outd = np.bincount(src, minlength=V).astype(np.float64)
    unit = ~has_value[sid]
    unit_in = np.bincount(dst, weights=unit, minlength=V)
    unit_out = np.bincount(src, weights=unit, minlength=V)
    costs = np.zeros(V)  # observe's first column, without its lookahead, pressure and growth
    for v in rest:
        costs[v] = vertex_cost(state, v, ev.cost_table)
    down, up = depths(V, src, dst)
    depth = max(int(down.max(initial=0)), 1)
    s = float(max(scale, 1))
    # which side a sweep of what is left would start from: its forward and reverse costs
    modes = [math.log1p(_rest_cost(ev, state, prefix, o) / s) for o in (rest, rest[::-1])]
    static = np.stack([
        kinds == INPUT, kinds == INTERMEDIATE, kinds == OUTPUT,
        np.log1p(sizes), np.log1p(ndim), np.log1p(ind), np.log1p(outd), np.log1p(unit_in), np.log1p(unit_out),
        np.log1p(costs / s), down / depth, up / depth, np.full(V, modes[0]), np.full(V, modes[1]),
        np.log1p(costs) / LOG_UNIT,
    ], -1).astype(np.float32) * mask[:, None]
    # the multiplications each edge takes part in when its source / its destination goes
    in_cost, out_cost = edge_costs(V, src, dst, sid, ev.cost_table)
    edge = np.stack([has_value[sid], np.log1p(in_cost / s), np.log1p(out_cost / s),
                     np.log1p(in_cost) / LOG_UNIT, np.log1p(out_cost) / LOG_UNIT], -1).astype(np.float32)
    return {"static": static, "edge_features": edge, "src": src.astype(np.int32), "dst": dst.astype(np.int32),
            "kinds": kinds.astype(np.int8), "mask": mask}


def _rest_cost(ev: Evaluator, state, prefix, rest) -> int:
    """Multiplications of eliminating ``rest`` from ``state`` (the state after ``prefix``),
    without eliminating the prefix again; exactly, through whole orders, past the cap or
    where a pool would fill up."""
    c = int(order_cost(state, np.asarray(rest, np.int64), ev.compose, ev.join, ev.cost_table))
    if c == OVERFLOW or c >= CAP:
        return ev.cost([*prefix, *rest]) - ev.cost(prefix)
    return c


@numba.njit(cache=True, nogil=True)
def edges_of(state):
    """``(src, dst, structure id)`` int64 arrays of the edges of ``state``."""
    V = state[0].shape[0]
    m = state[1].sum()
    src = np.empty(m, np.int64)
    dst = np.empty(m, np.int64)
    sid = np.empty(m, np.int64)
    k = 0
    for v in range(V):
        for b in range(state[1][v]):
            src[k] = v
            dst[k] = state[3][state[0][v] + b]
            sid[k] = state[4][state[0][v] + b]
            k += 1
    return src, dst, sid


#: :func:`alphagrad.graph.longest_paths` compiled: the depths of the graph left after a prefix.
depths = numba.njit(cache=True, nogil=True)(longest_paths)


@numba.njit(cache=True, nogil=True)
def edge_costs(V, src, dst, sid, cost):
    """Per edge, the multiplications it takes part in when its source is eliminated (its
    products with the edges into the source) and when its destination is (with the edges
    out of it), as float64."""
    E = src.shape[0]
    by_dst = np.argsort(dst, kind="mergesort")
    by_src = np.argsort(src, kind="mergesort")
    first_in = np.zeros(V + 1, np.int64)
    first_out = np.zeros(V + 1, np.int64)
    for e in range(E):
        first_in[dst[e] + 1] += 1
        first_out[src[e] + 1] += 1
    first_in = np.cumsum(first_in)
    first_out = np.cumsum(first_out)
    in_cost = np.zeros(E, np.float64)
    out_cost = np.zeros(E, np.float64)
    for e in range(E):
        for k in range(first_in[src[e]], first_in[src[e] + 1]):
            in_cost[e] += cost[sid[e], sid[by_dst[k]]]
        for k in range(first_out[dst[e]], first_out[dst[e] + 1]):
            out_cost[e] += cost[sid[by_src[k]], sid[e]]
    return in_cost, out_cost


@numba.njit(cache=True, nogil=True, inline="always")
def neighbours(state, v, out, k):
    """Writes ``v``'s predecessors then successors into ``out`` from index ``k``; returns
    them (a view of ``out``; disjoint lists, as the graph is acyclic)."""
    start = k
    for a in range(state[7][v]):
        out[k] = state[9][state[6][v] + a]
        k += 1
    for b in range(state[1][v]):
        out[k] = state[3][state[0][v] + b]
        k += 1
    return out[start:k]


@numba.njit(cache=True, nogil=True, _nrt=False, inline="always")
def _slot(state, v, p):
    """The neighbour in slot ``p`` of ``v`` and the structure of their edge: ``p >= 0``
    is a predecessor, ``-1 - p`` a successor (the evaluator's list positions)."""
    if p >= 0:
        i = state[9][state[6][v] + p]
        return i, state[4][state[0][i] + state[10][state[6][v] + p]]
    return state[3][state[0][v] - 1 - p], state[4][state[0][v] - 1 - p]


@numba.njit(cache=True, nogil=True, _nrt=False, inline="always")
def _share(state, v, s, into, cost):
    """What one edge of structure ``s`` into ``v`` (``into``) or out of it adds to ``v``'s
    :func:`vertex_cost`: its product with each edge on the other side."""
    total = np.int64(0)
    if into:
        for t in range(state[1][v]):
            total = saturating_add(total, cost[state[4][state[0][v] + t], s])
    else:
        for t in range(state[7][v]):
            total = saturating_add(total, cost[s, _slot(state, v, t)[1]])
    return total


@numba.njit(cache=True, nogil=True, _nrt=False, inline="always")
def _adjacent(state, i, k):
    """Whether the edge ``i -> k`` is there."""
    for t in range(state[7][k]):
        if state[9][state[6][k] + t] == i:
            return True
    return False


@numba.njit(cache=True, nogil=True, _nrt=False)
def _cost_after(state, v, u, before, tables, scratch, stamp):
    """``v``'s :func:`vertex_cost` once its neighbour ``u`` is eliminated, read off the
    edges around them: eliminating ``u`` changes only the edges between ``v`` and ``u``'s
    neighbours on the far side (composed and joined by the rules of
    :func:`alphagrad.evaluator.eliminate`), so only those are counted again.
    ``scratch.mark[x] == stamp`` flags ``v``'s neighbours and ``scratch.pos[x]`` is the
    slot of their edge with ``v`` (:func:`_mark_neighbours`); ``before`` is ``v``'s cost
    now (saturated: then every edge of ``v`` is counted afresh)."""
    compose, join, cost = tables.compose, tables.join, tables.cost
    mark, pos = scratch.mark, scratch.pos
    into = pos[u] >= 0  # u -> v goes and each i -> u composes into i -> v; else v -> u and u -> k
    e = _slot(state, v, pos[u])[1]
    gone = _share(state, v, e, into, cost)  # what the edges that change count now ...
    added = np.int64(0)  # ... and afterwards
    for t in range(state[7][u] if into else state[1][u]):
        x, s = _slot(state, u, t if into else -1 - t)
        c = compose[e, s] if into else compose[s, e]
        if mark[x] == stamp:  # the edge between x and v is there: joined
            old = _slot(state, v, pos[x])[1]
            gone += _share(state, v, old, into, cost)
            c = join[old, c]
        added = saturating_add(added, _share(state, v, c, into, cost))
    if before < CAP:  # what changes was counted in ``before``, exactly
        return saturating_add(before - gone, added)
    total = added  # ``before`` saturated: add the edges on u's side that stay
    for t in range(state[7][v] if into else state[1][v]):
        x, s = _slot(state, v, t if into else -1 - t)
        if x != u and not (_adjacent(state, x, u) if into else _adjacent(state, u, x)):
            total = saturating_add(total, _share(state, v, s, into, cost))
    return total


@numba.njit(cache=True, nogil=True, _nrt=False, inline="always")
def _mark_neighbours(state, v, mark, pos):
    """Stamps ``v``'s neighbours in ``mark`` and writes the slot of each one's edge with
    ``v`` in ``pos`` (``p >= 0`` among ``v``'s predecessors, ``-1 - p`` among its
    successors), as :func:`_cost_after` reads them; returns the stamp."""
    V = state[0].shape[0]
    mark[V] += 1
    stamp = mark[V]
    for a in range(state[7][v]):
        i = state[9][state[6][v] + a]
        mark[i] = stamp
        pos[i] = a
    for b in range(state[1][v]):
        k = state[3][state[0][v] + b]
        mark[k] = stamp
        pos[k] = -1 - b
    return stamp


@numba.njit(cache=True, nogil=True, _nrt=False)
def lookahead(state, v, alive, tables, scratch):
    """How much eliminating ``v`` changes what its alive neighbours would cost to
    eliminate (their :func:`vertex_cost` summed, after minus before): a free move that
    makes a neighbour dear shows here. Nothing is eliminated (:func:`_cost_after`)."""
    total = np.int64(0)
    for x in neighbours(state, v, scratch.nb, 0):
        if alive[x]:
            stamp = _mark_neighbours(state, x, scratch.mark, scratch.pos)
            before = vertex_cost(state, x, tables.cost)
            total += _cost_after(state, x, v, before, tables, scratch, stamp) - before
    return total


@numba.njit(cache=True, nogil=True, _nrt=False)
def pressure(state, v, alive, tables, scratch):
    """How much eliminating each of ``v``'s alive neighbours would change what ``v``
    costs to eliminate (summed over them, each from the state as it is): a hub that
    every neighbour's elimination makes dearer shows here, before it is left for last."""
    stamp = _mark_neighbours(state, v, scratch.mark, scratch.pos)
    before = vertex_cost(state, v, tables.cost)
    total = np.int64(0)
    for u in neighbours(state, v, scratch.nb, 0):
        if alive[u]:
            total += _cost_after(state, v, u, before, tables, scratch, stamp) - before
    return total


@numba.njit(cache=True, nogil=True, _nrt=False)
def growth(state, v, tables, scratch):
    """How many more entries the graph's edges hold once ``v`` is eliminated (by
    ``tables.entries`` per structure): the edges its elimination composes or joins, less
    ``v``'s own. A free move that joins two sparse edges into a dense one (a stencil's
    shifted copies and its diagonal) shows here, though its cost and its lookahead are 0
    and every later product through that edge is dense."""
    compose, join, entries = tables.compose, tables.join, tables.entries
    mark, pos = scratch.mark, scratch.pos
    total = np.int64(0)
    for b in range(state[1][v]):
        total -= entries[state[4][state[0][v] + b]]
    for a in range(state[7][v]):
        i, into = _slot(state, v, a)
        total -= entries[into]
        stamp = _mark_neighbours(state, i, mark, pos)
        for b in range(state[1][v]):
            k = state[3][state[0][v] + b]
            c = compose[state[4][state[0][v] + b], into]
            old = 0
            if mark[k] == stamp:  # the edge i -> k is there: joined
                old = _slot(state, i, pos[k])[1]
                c = join[old, c]
            total += entries[c] - entries[old]
    return total


@numba.njit(cache=True, nogil=True, inline="always")
def raw_numbers(state, v, alive, tables, scratch, reads, recent, out):
    """Writes ``v``'s raw numbers of :func:`observe` into ``out`` (``[NUM_RAW]``), the
    lookahead, the pressure and the growth only where ``reads`` says so (0 otherwise);
    the last move touched ``v`` where ``recent[v]``. A neighbour not in ``alive`` is an
    input or an output (an eliminated vertex has no edges left)."""
    out[0] = vertex_cost(state, v, tables.cost)
    out[1] = state[7][v]
    out[2] = state[1][v]
    out[3] = lookahead(state, v, alive, tables, scratch) if reads.lookahead else 0
    out[4] = pressure(state, v, alive, tables, scratch) if reads.pressure else 0
    inputs = 0
    for a in range(state[7][v]):
        inputs += not alive[state[9][state[6][v] + a]]
    outputs = 0
    for b in range(state[1][v]):
        outputs += not alive[state[3][state[0][v] + b]]
    out[5] = inputs
    out[6] = outputs
    out[7] = recent[v]
    out[8] = growth(state, v, tables, scratch) if reads.growth else 0


@numba.njit(cache=True, nogil=True)
def observe(state, alive, tables, touched):
    """``[V, NUM_RAW]`` int64: ``(elimination cost, predecessors, successors,``
    :func:`lookahead`, :func:`pressure`, ``predecessors and successors that are inputs or
    outputs, whether it is in touched,`` :func:`growth` ``)`` of each vertex in ``alive`` in ``state`` (zeros
    elsewhere); ``touched``: the neighbours the last eliminated vertex had (none at the
    start)."""
    V = state[0].shape[0]
    raw = np.zeros((V, NUM_RAW), np.int64)
    mask = np.zeros(V, np.bool_)
    for v in alive:
        mask[v] = True
    recent = np.zeros(V, np.int64)
    for v in touched:
        recent[v] = 1
    scratch = new_scratch(V)
    reads = Reads(True, True, True)
    for v in alive:
        raw_numbers(state, v, mask, tables, scratch, reads, recent, raw[v])
    return raw


@numba.njit(cache=True, nogil=True)
def observe_along(state0, order, positions, tables):
    """:func:`observe` at the states after ``positions`` (ascending) eliminations of
    ``order``, for the vertices not yet eliminated: ``(raw [P, V, NUM_RAW], costs_to_go
    [P], flag)``; ``costs_to_go`` is what the rest of ``order`` costs from each state
    (plain int64 sums) and ``flag`` is :data:`OVERFLOW` if a pool filled up."""
    n = order.shape[0]
    V = state0[0].shape[0]
    P = positions.shape[0]
    raw = np.zeros((P, V, NUM_RAW), np.int64)
    steps = np.zeros(n + 1, np.int64)
    work = copy_state(state0)
    scratch = new_scratch(V)
    empty = np.zeros(0, np.int64)
    nt = 0  # the last move touched scratch.nb[:nt]
    r = 0
    for p in range(n + 1):
        while r < P and positions[r] == p:
            raw[r] = observe(work, order[p:], tables, scratch.nb[:nt])
            r += 1
        if p == n:
            break
        nt = neighbours(work, order[p], scratch.nb, 0).shape[0]
        m = eliminate(work, order[p], tables.compose, tables.join, tables.cost, scratch.mark, scratch.pos, empty)
        if m < 0:
            return raw, steps[:P], OVERFLOW
        steps[p] = m
    to_go = np.zeros(P, np.int64)
    for r in range(P):
        to_go[r] = steps[positions[r]:n].sum()
    return raw, to_go, np.int64(0)


def moves_per_encoding(n: int, encodings: int) -> int:
    """The moves of a game of ``n`` between two encodings of its graph (the last stretch
    may be shorter): the states of a stretch see the graph left at its start
    (:func:`graph_inputs`); what :meth:`alphagrad.player.Player.play` plays and
    training's states are grouped by."""
    return -(-n // encodings)


def padded(n: int, minimum: int) -> int:
    """The padded size of ``n`` (a power of two, at least ``minimum``): few distinct
    shapes, so the encoder compiles a few times, not once per graph."""
    return max(minimum, 1 << max(0, int(n) - 1).bit_length())


def pad_inputs(inputs: dict, V: int, E: int) -> dict:
    """:func:`graph_inputs` padded to ``V`` vertices and ``E`` edges, with ``vmask`` and
    ``num_edges``: the encoder's arguments."""
    n, m = inputs["static"].shape[0], inputs["src"].shape[0]
    if n > V or m > E:
        raise ValueError(f"a graph of {n} vertices and {m} edges does not fit {V} x {E}")
    out = {"static": np.zeros((V, NUM_STATIC), np.float32), "src": np.zeros(E, np.int32),
           "dst": np.zeros(E, np.int32), "edge_features": np.zeros((E, NUM_EDGE), np.float32),
           "num_edges": np.int32(m), "vmask": np.arange(V) < n}
    out["vmask"][:n] &= inputs.get("mask", True)
    out["static"][:n] = inputs["static"]
    out["src"][:m] = inputs["src"]
    out["dst"][:m] = inputs["dst"]
    out["edge_features"][:m] = inputs["edge_features"]
    return out


#: :func:`pad_inputs`' arrays in the order the encoder takes them.
ENCODER_ARGS = ("static", "src", "dst", "edge_features", "num_edges", "vmask")
