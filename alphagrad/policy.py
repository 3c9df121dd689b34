"""The policy network's side of the elimination game, on the sparse evaluator.

What the network sees of a graph comes in two parts (see :mod:`alphagrad.network`):

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

:func:`rollout` plays the network's policy on one graph in compiled code: the encoder ran
once (per stretch of moves, for a network of several encodings), each move re-scores
only the vertices within two hops of the eliminated one (its neighbours alone for a
model whose lookahead and pressure weights are zero) with the decoder's weights
(:func:`alphagrad.network.decoder_weights`; run only for a vertex whose raw numbers
changed), then takes the best (``temperature`` 0) or a Gumbel-perturbed best (a sample
of ``softmax(logits / T)``).
"""

from __future__ import annotations

import math

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
    (signed ``log1p / LOG_UNIT``). ``xp`` is numpy or jax.numpy; :func:`rollout` computes
    the same in compiled code."""
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
def _neighbours(state, v, out, k):
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
def _cost_after(state, v, u, before, compose, join, cost, mark, pos, stamp):
    """``v``'s :func:`vertex_cost` once its neighbour ``u`` is eliminated, read off the
    edges around them: eliminating ``u`` changes only the edges between ``v`` and ``u``'s
    neighbours on the far side (composed and joined by the rules of
    :func:`alphagrad.evaluator.eliminate`), so only those are counted again.
    ``mark[x] == stamp`` flags ``v``'s neighbours and ``pos[x]`` is the slot of their edge
    with ``v`` (:func:`_mark_neighbours`); ``before`` is ``v``'s cost now (saturated:
    then every edge of ``v`` is counted afresh)."""
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
def lookahead(state, v, alive, compose, join, cost, mark, pos, nb):
    """How much eliminating ``v`` changes what its alive neighbours would cost to
    eliminate (their :func:`vertex_cost` summed, after minus before): a free move that
    makes a neighbour dear shows here. Nothing is eliminated (:func:`_cost_after`);
    ``mark``/``pos`` are the evaluator's stamped scratch arrays, ``nb`` scratch of
    ``[V]``."""
    total = np.int64(0)
    for x in _neighbours(state, v, nb, 0):
        if alive[x]:
            stamp = _mark_neighbours(state, x, mark, pos)
            before = vertex_cost(state, x, cost)
            total += _cost_after(state, x, v, before, compose, join, cost, mark, pos, stamp) - before
    return total


@numba.njit(cache=True, nogil=True, _nrt=False)
def pressure(state, v, alive, compose, join, cost, mark, pos, nb):
    """How much eliminating each of ``v``'s alive neighbours would change what ``v``
    costs to eliminate (summed over them, each from the state as it is): a hub that
    every neighbour's elimination makes dearer shows here, before it is left for last.
    Arguments as for :func:`lookahead`."""
    stamp = _mark_neighbours(state, v, mark, pos)
    before = vertex_cost(state, v, cost)
    total = np.int64(0)
    for u in _neighbours(state, v, nb, 0):
        if alive[u]:
            total += _cost_after(state, v, u, before, compose, join, cost, mark, pos, stamp) - before
    return total


@numba.njit(cache=True, nogil=True, _nrt=False)
def growth(state, v, compose, join, entries, mark, pos):
    """How many more entries the graph's edges hold once ``v`` is eliminated (``entries``:
    :attr:`alphagrad.evaluator.Evaluator.entries` per structure): the edges its
    elimination composes or joins, less ``v``'s own. A free move that joins two sparse
    edges into a dense one (a stencil's shifted copies and its diagonal) shows here,
    though its cost and its lookahead are 0 and every later product through that edge is
    dense. ``mark``/``pos`` as for :func:`lookahead`."""
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
def _raw(state, v, alive, compose, join, cost, entries, mark, pos, nb, ahead, press, grow, recent, out):
    """Writes ``v``'s raw numbers of :func:`observe` into ``out`` (``[NUM_RAW]``),
    the lookahead, the pressure and the growth only where ``ahead`` / ``press`` / ``grow`` (0 otherwise); the
    last move touched ``v`` where ``recent[v]``. A neighbour not in ``alive`` is an input
    or an output (an eliminated vertex has no edges left)."""
    out[0] = vertex_cost(state, v, cost)
    out[1] = state[7][v]
    out[2] = state[1][v]
    out[3] = lookahead(state, v, alive, compose, join, cost, mark, pos, nb) if ahead else 0
    out[4] = pressure(state, v, alive, compose, join, cost, mark, pos, nb) if press else 0
    inputs = 0
    for a in range(state[7][v]):
        inputs += not alive[state[9][state[6][v] + a]]
    outputs = 0
    for b in range(state[1][v]):
        outputs += not alive[state[3][state[0][v] + b]]
    out[5] = inputs
    out[6] = outputs
    out[7] = recent[v]
    out[8] = growth(state, v, compose, join, entries, mark, pos) if grow else 0


@numba.njit(cache=True, nogil=True)
def observe(state, alive, compose, join, cost, entries, touched):
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
    mark = np.zeros(V + 1, np.int64)
    pos = np.zeros(V, np.int64)
    nb = np.zeros(V, np.int64)
    for v in alive:
        _raw(state, v, mask, compose, join, cost, entries, mark, pos, nb, True, True, True, recent, raw[v])
    return raw


@numba.njit(cache=True, nogil=True)
def observe_along(state0, order, positions, compose, join, cost, entries):
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
    mark = np.zeros(V + 1, np.int64)
    pos = np.zeros(V, np.int64)
    empty = np.zeros(0, np.int64)
    nb = np.zeros(V, np.int64)
    nt = 0  # the last move touched nb[:nt]
    r = 0
    for p in range(n + 1):
        while r < P and positions[r] == p:
            raw[r] = observe(work, order[p:], compose, join, cost, entries, nb[:nt])
            r += 1
        if p == n:
            break
        nt = _neighbours(work, order[p], nb, 0).shape[0]
        m = eliminate(work, order[p], compose, join, cost, mark, pos, empty)
        if m < 0:
            return raw, steps[:P], OVERFLOW
        steps[p] = m
    to_go = np.zeros(P, np.int64)
    for r in range(P):
        to_go[r] = steps[positions[r]:n].sum()
    return raw, to_go, np.int64(0)


#: tanh for the decoder's GELU: the odd rational of degrees 13/6 that Eigen and XLA use
#: for float32 tanh (within 3e-7 of it, float32's rounding), clamped where tanh rounds to
#: +-1. Plain arithmetic that inlines, where ``np.tanh`` is a libm call per value (~27 ns,
#: 128 a decoder call: 3.4 us a call in isolation with it, 2.5 us without, one run
#: each; a greedy order at 2,059 intermediates 0.24-0.27 s instead of 0.31-0.34 s, side
#: by side).
_TANH_CLAMP = 7.90531110763549805
_TANH_P = (-2.76076847742355e-16, 2.00018790482477e-13, -8.60467152213735e-11, 5.12229709037114e-08,
           1.48572235717979e-05, 6.37261928875436e-04, 4.89352455891786e-03)
_TANH_Q = (1.19825839466702e-06, 1.18534705686654e-04, 2.26843463243900e-03, 4.89352518554385e-03)


@numba.njit(cache=True, nogil=True, inline="always")
def _tanh(x):
    x = min(max(x, -_TANH_CLAMP), _TANH_CLAMP)
    x2 = x * x
    p = _TANH_P[0]
    for c in _TANH_P[1:]:
        p = p * x2 + c
    q = _TANH_Q[0]
    for c in _TANH_Q[1:]:
        q = q * x2 + c
    return x * p / q


@numba.njit(cache=True, nogil=True, inline="always")
def _gelu(x):
    return 0.5 * x * (1.0 + _tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))


@numba.njit(cache=True, nogil=True, inline="always")
def _signed_log1p(x, inv_scale):
    """``sign(x) * log1p(|x| * inv_scale)``, as :func:`dynamic_features` has it."""
    return np.sign(x) * np.log1p(abs(float(x)) * inv_scale)


@numba.njit(cache=True, nogil=True, _nrt=False)
def _logit(v, raw, inv_scale, H1, Wd, W2, b2, w3, b3, a1, a2, feats, static, beta):
    """The decoder's logit for vertex ``v`` with raw numbers ``raw`` (as :func:`observe`
    has them)."""
    c, i, o = float(raw[0]), float(raw[1]), float(raw[2])
    if H1.shape[1] == 0:  # a network-free prior
        return static[v] - beta * c * inv_scale
    feats[0] = np.log1p(c * inv_scale)
    feats[1] = np.log1p(i)
    feats[2] = np.log1p(o)
    feats[3] = np.log1p(i * o)
    feats[4] = 1.0 if c == 0 else 0.0
    if feats.shape[0] > LOOKAHEAD:
        feats[LOOKAHEAD] = _signed_log1p(raw[3], inv_scale)
    if feats.shape[0] > PRESSURE:
        feats[PRESSURE] = _signed_log1p(raw[4], inv_scale)
    if feats.shape[0] > FRONTIER + 1:
        feats[FRONTIER] = raw[5] / max(i, 1.0)
        feats[FRONTIER + 1] = raw[6] / max(o, 1.0)
    if feats.shape[0] > RECENT:
        feats[RECENT] = raw[7]
    if feats.shape[0] > ABSOLUTE + 2:
        feats[ABSOLUTE] = np.log1p(c) / LOG_UNIT
        feats[ABSOLUTE + 1] = _signed_log1p(raw[3], 1.0) / LOG_UNIT
        feats[ABSOLUTE + 2] = _signed_log1p(raw[4], 1.0) / LOG_UNIT
    if feats.shape[0] > GROWTH:
        feats[GROWTH] = _signed_log1p(raw[8], 1.0) / LOG_UNIT
    # row by row over the weights (contiguous, so the inner loops vectorise), each sum in
    # the order of a dot product: the same numbers as the network's column by column
    D = H1.shape[1]
    for d in range(D):
        a1[d] = H1[v, d]
    for f in range(feats.shape[0]):
        x = feats[f]
        for d in range(D):
            a1[d] += x * Wd[f, d]
    for d in range(D):
        a1[d] = _gelu(a1[d])
        a2[d] = b2[d]
    for e in range(D):
        x = a1[e]
        for d in range(D):
            a2[d] += x * W2[e, d]
    out = b3
    for d in range(D):
        out += _gelu(a2[d]) * w3[d]
    return out


@numba.njit(cache=True, nogil=True, inline="always")
def _score(state, v, alive, compose, join, cost, entries, mark, pos, nb, ahead, press, grow, recent, logits, last,
           now, inv_scale, H1, Wd, W2, b2, w3, b3, a1, a2, feats, static, beta):
    """Sets ``logits[v]`` to ``v``'s logit now (:func:`_raw` into the scratch ``now``),
    running the decoder only if ``v``'s raw numbers differ from those it last saw
    (``last[v]``, its rows -1 at first): within two hops of a move most are unchanged."""
    _raw(state, v, alive, compose, join, cost, entries, mark, pos, nb, ahead, press, grow, recent, now)
    same = True
    for f in range(NUM_RAW):
        same = same and last[v, f] == now[f]
        last[v, f] = now[f]
    if not same:
        logits[v] = _logit(v, now, inv_scale, H1, Wd, W2, b2, w3, b3, a1, a2, feats, static, beta)


@numba.njit(cache=True, nogil=True)
def rollout(state0, inter, compose, join, cost, entries, inv_scale, H1, Wd, W2, b2, w3, b3, temperature, seed,
            static, beta, moves, touched0):
    """Plays the policy from ``state0`` for ``moves`` moves (at most ``len(inter)``, the
    vertices left to eliminate, ascending): ``(order, touched, flag)``, ``touched`` the
    neighbours the last move's vertex had (``touched0``: the move before ``state0``'s),
    ``flag`` :data:`OVERFLOW` if a pool filled up. ``H1`` is the encoder's output through the decoder's first layer
    (``[V, D]``); the other arrays are the decoder's remaining weights. With ``D = 0``
    the policy is network-free: logit = ``static[v] - beta * cost(v) / scale`` (the
    controls of :class:`ControlPlayer`). ``temperature`` 0: the highest logit (the
    smallest id on ties); else a sample of ``softmax(logits / temperature)`` at every move
    (Gumbel-max, seeded)."""
    work = copy_state(state0)
    V = work[0].shape[0]
    n = min(inter.shape[0], moves)
    np.random.seed(seed)
    mark = np.zeros(V + 1, np.int64)
    pos = np.zeros(V, np.int64)
    empty = np.zeros(0, np.int64)
    alive = np.zeros(V, np.bool_)
    logits = np.full(V, -np.inf)
    last = np.full((V, NUM_RAW), -1, np.int64)  # the raw numbers each logit was scored on
    now = np.zeros(NUM_RAW, np.int64)
    a1 = np.zeros(H1.shape[1])
    a2 = np.zeros(H1.shape[1])
    feats = np.zeros(Wd.shape[0])
    for v in inter:
        alive[v] = True
    nb = np.zeros(V, np.int64)
    # the lookahead and the pressure are computed only for a decoder that reads them: not
    # for a network-free prior, nor for a model whose weight on one is zero (one trained
    # before it existed)
    ahead = Wd.shape[0] > LOOKAHEAD and H1.shape[1] > 0 and (
        np.any(Wd[LOOKAHEAD] != 0) or (Wd.shape[0] > ABSOLUTE + 1 and np.any(Wd[ABSOLUTE + 1] != 0)))
    press = Wd.shape[0] > PRESSURE and H1.shape[1] > 0 and (
        np.any(Wd[PRESSURE] != 0) or (Wd.shape[0] > ABSOLUTE + 2 and np.any(Wd[ABSOLUTE + 2] != 0)))
    # the growth likewise; all three change up to two hops from a move
    grow = Wd.shape[0] > GROWTH and H1.shape[1] > 0 and np.any(Wd[GROWTH] != 0)
    look = ahead or press or grow
    # likewise the last move's touch (for a model that reads it): its neighbours are flagged
    # until the next move, and re-scored when the flag goes
    track = Wd.shape[0] > RECENT and H1.shape[1] > 0 and np.any(Wd[RECENT] != 0)
    recent = np.zeros(V, np.int64)
    prev = np.empty(V, np.int64)
    nprev = touched0.shape[0]
    prev[:nprev] = touched0
    if track:
        for t in range(nprev):
            recent[prev[t]] = 1
    for v in inter:
        _score(work, v, alive, compose, join, cost, entries, mark, pos, nb, ahead, press, grow, recent, logits, last,
               now, inv_scale, H1, Wd, W2, b2, w3, b3, a1, a2, feats, static, beta)
    touched = np.empty(V, np.int64)
    spare = np.empty(V, np.int64)
    seen = np.zeros(V, np.int64)
    order = np.empty(n, np.int64)
    for step in range(n):
        best = -1
        best_score = -np.inf
        for v in inter:
            if alive[v]:
                s = logits[v]
                if temperature > 0:
                    s = s / temperature - np.log(-np.log(np.random.random() + 1e-300) + 1e-300)
                if best < 0 or s > best_score:
                    best = v
                    best_score = s
        nt = _neighbours(work, best, touched, 0).shape[0]
        n0 = nt
        if track:
            for t in range(nprev):
                recent[prev[t]] = 0
            for t in range(nt):
                recent[touched[t]] = 1
        m = eliminate(work, best, compose, join, cost, mark, pos, empty)
        if m < 0:
            return order, prev[:0], OVERFLOW
        alive[best] = False
        order[step] = best
        if look:  # these change up to two hops away: the neighbours' neighbours too
            stamp = step + 1
            for t in range(nt):
                seen[touched[t]] = stamp
            n1 = nt
            for t in range(n1):
                for w in _neighbours(work, touched[t], spare, 0):
                    if seen[w] != stamp:
                        seen[w] = stamp
                        touched[nt] = w
                        nt += 1
        for t in range(nt):
            u = touched[t]
            if alive[u]:
                _score(work, u, alive, compose, join, cost, entries, mark, pos, nb, ahead, press, grow, recent, logits,
                       last, now, inv_scale, H1, Wd, W2, b2, w3, b3, a1, a2, feats, static, beta)
        if track:
            for t in range(nprev):
                u = prev[t]
                if alive[u]:
                    _score(work, u, alive, compose, join, cost, entries, mark, pos, nb, ahead, press, grow, recent,
                           logits, last, now, inv_scale, H1, Wd, W2, b2, w3, b3, a1, a2, feats, static, beta)
        prev[:n0] = touched[:n0]
        nprev = n0
    return order, prev[:nprev].copy(), np.int64(0)


def moves_per_encoding(n: int, encodings: int) -> int:
    """The moves of a game of ``n`` between two encodings of its graph (the last stretch
    may be shorter): what :meth:`Player.play` plays and training's states are grouped by."""
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


ENCODER_ARGS = ("static", "src", "dst", "edge_features", "num_edges", "vmask")

_ENCODERS: dict = {}


def embed(net, params, inputs: dict) -> tuple[np.ndarray, float]:
    """The encoder's vertex embeddings ``[V, D]`` for one graph's :func:`graph_inputs`, and
    the seconds spent compiling (0 when this padded size was compiled before; compiled
    encoders are kept per network and padded size for the process)."""
    import time

    import jax

    from alphagrad.network import PolicyNet

    n = inputs["static"].shape[0]
    args = pad_inputs(inputs, padded(n, 64), padded(inputs["src"].shape[0], 128))
    args = tuple(args[k] for k in ENCODER_ARGS)
    key = (net, args[0].shape, args[1].shape)
    seconds = 0.0
    if key not in _ENCODERS:
        t = time.perf_counter()
        fn = jax.jit(lambda p, *a: net.apply(p, *a, method=PolicyNet.encode))
        _ENCODERS[key] = fn.lower(params, *args).compile()
        seconds = time.perf_counter() - t
    return np.asarray(_ENCODERS[key](params, *args))[:n], seconds


class Player:
    """The network's policy on one graph: the encoder runs once (:func:`embed`), then every
    order is played in compiled code (:func:`rollout`), re-scoring only the neighbours of
    each eliminated vertex; a network of ``encodings`` > 1 also encodes the graph left
    every ``ceil(n / encodings)`` moves (:class:`alphagrad.network.NetworkConfig`).

    Args:
      net, params: a :class:`alphagrad.network.PolicyNet` and its variables.
      graph: the graph; ``ev`` its evaluator (built if None).
      scale: the graph's cost scale (the best baseline's cost), which the network's cost
        features are relative to.
      encode: False skips the encoder (zero embeddings): the player then runs the same
        compiled features and rollout, without the network's knowledge (a warm-up).
    """

    def __init__(self, net, params, graph: Graph, scale: float, ev: Evaluator | None = None, encode: bool = True):
        from alphagrad.network import decoder_weights

        self._bind(graph, scale, ev)
        self.net, self.params, self.encode = net, params, encode
        self.encodings = net.config.encodings
        self.compile_seconds = 0.0
        inputs = graph_inputs(graph, self.ev, self.scale)
        if encode:
            self.weights = self._weights(inputs)
        else:  # zero embeddings: plays the same compiled code (to compile it), not the network's orders
            self.weights = decoder_weights(params, np.zeros((graph.num_vertices, net.config.dim), np.float32))

    def _bind(self, graph: Graph, scale: float, ev: Evaluator | None):
        """What every player keeps of its graph: the graph, its evaluator, the cost scale
        and the intermediates."""
        self.graph = graph
        self.ev = ev if ev is not None else Evaluator(graph, "exact")
        self.scale = float(max(scale, 1))
        self.inter = np.asarray(graph.intermediates, np.int64)

    static = np.zeros(0)
    beta = 0.0
    encodings = 1

    def play(self, temperature: float = 0.0, seed: int = 0) -> list[int]:
        """One order: greedy (``temperature`` 0) or sampled at ``temperature``."""
        n = len(self.inter)
        if n == 0:
            return []
        ev = self.ev
        step = moves_per_encoding(n, self.encodings)
        order: list[int] = []
        touched = np.zeros(0, np.int64)
        weights = self.weights
        for start in range(0, n, step):
            done = np.asarray(order, np.int64)
            play = rollout
            if start:  # from the state after the moves so far, on the graph left encoded anew
                if self.encode:
                    weights = self._weights(graph_inputs(self.graph, ev, self.scale, done))

                def play(state0, *args):
                    state, flag = after(state0, done, ev.compose, ev.join, ev.cost_table)
                    return (None, None, flag) if flag == OVERFLOW else rollout(state, *args)

            moves, touched, _ = ev.run(play, np.setdiff1d(self.inter, done), ev.compose, ev.join, ev.cost_table,
                                       ev.entries, 1.0 / self.scale, *weights, float(temperature), int(seed) + start,
                                       self.static, float(self.beta), step, touched)
            order += [int(v) for v in moves]
        return order

    def play_from(self, prefix, temperature: float = 0.0, seed: int = 0, moves: int | None = None) -> list[int]:
        """The moves the policy plays after ``prefix`` (``moves`` of them, default all that
        are left), from the state the prefix leaves, the last move's touch included: what
        :meth:`play` would go on with had it played ``prefix``. Encodes the graph once
        (a network of one encoding)."""
        if self.encodings != 1:
            raise ValueError(f"play_from plays a network of one encoding, this one encodes {self.encodings} times")
        ev, prefix = self.ev, np.asarray(prefix, np.int64)
        left = np.setdiff1d(self.inter, prefix)
        count = len(left) if moves is None else min(int(moves), len(left))
        if count == 0:
            return []

        def play(state0, *args):
            touched = np.zeros(0, np.int64)
            if len(prefix):
                before, flag = after(state0, prefix[:-1], ev.compose, ev.join, ev.cost_table)
                if flag == OVERFLOW:
                    return None, None, flag
                touched = _neighbours(before, prefix[-1], np.empty(state0[0].shape[0], np.int64), 0).copy()
                state0, flag = after(before, prefix[-1:], ev.compose, ev.join, ev.cost_table)
                if flag == OVERFLOW:
                    return None, None, flag
            return rollout(state0, *args, touched)

        out, _, _ = ev.run(play, left, ev.compose, ev.join, ev.cost_table, ev.entries, 1.0 / self.scale,
                           *self.weights, float(temperature), int(seed), self.static, float(self.beta), count)
        return [int(v) for v in out]

    def _weights(self, inputs: dict) -> tuple:
        """The decoder's weights (:func:`alphagrad.network.decoder_weights`) on the
        embeddings of ``inputs`` (:func:`graph_inputs`); adds the encoder's compile time
        to ``compile_seconds``."""
        from alphagrad.network import decoder_weights

        h, seconds = embed(self.net, self.params, inputs)
        self.compile_seconds += seconds
        return decoder_weights(self.params, h)


#: The network-free priors of :class:`ControlPlayer`: what learning is measured against.
CONTROLS = ("uniform", "markowitz", "random")
#: The Markowitz prior's one parameter: logits are ``-cost / (MARKOWITZ_T * scale)``.
MARKOWITZ_T = 0.1


class ControlPlayer(Player):
    """A :class:`Player` without a network, for controls in the same schedule:
    ``uniform`` (equal logits: greedy is the smallest id first, samples are uniformly
    random orders), ``markowitz`` (logits ``-cost / (MARKOWITZ_T * scale)``: greedy is the
    Markowitz order), ``random`` (a fixed random score per vertex, drawn from ``seed``)."""

    def __init__(self, kind: str, graph: Graph, scale: float, ev: Evaluator | None = None, seed: int = 0):
        if kind not in CONTROLS:
            raise ValueError(f"unknown control {kind!r}; use one of {list(CONTROLS)}")
        self._bind(graph, scale, ev)
        self.compile_seconds = 0.0
        V = graph.num_vertices
        z = np.zeros((0, 0))
        self.weights = (np.zeros((V, 0)), np.zeros((NUM_DYNAMIC, 0)), z, np.zeros(0), np.zeros(0), 0.0)
        self.static = np.random.default_rng(seed).standard_normal(V) if kind == "random" else np.zeros(V)
        self.beta = 1.0 / MARKOWITZ_T if kind == "markowitz" else 0.0
