"""The compiled evaluator of elimination orders: sparse, incremental, exact.

It reads the same rule tables as the JAX engine (:mod:`alphagrad.rules`) and applies the
same step (``tests/test_engine.py`` checks them against each other on every benchmark
graph and on random programs and orders), on adjacency lists instead of ``V x V``
matrices, so memory grows with the edges and eliminating a vertex touches only its
neighbours. Every classic search runs on it: the cost of an order (the door behind
``alphagrad.cost``), Markowitz, exact search and annealing.

A state is a tuple of int64 arrays (numba-friendly, owned by the caller):

* ``out_start, out_len, out_cap [V]``, ``out_dst, out_sid, out_twin [P]``: each vertex's
  successors, the structure id of the edge to each, and where the edge sits in the
  successor's predecessor list; a segment of a shared pool (a full segment moves to the
  pool's end with twice the room);
* ``in_start, in_len, in_cap [V]``, ``in_src, in_twin [P]``: each vertex's predecessors
  and where the edge sits in the predecessor's successor list;
* ``meta [3]``: the pool tops and the state's hash:
  the wrapping sum of a 64-bit mix of every edge ``(src, dst, structure)``, updated by
  every change, so two states with the same edges have the same hash whatever built them.

Counts are int64 sums that saturate at :data:`alphagrad.rules.COST_CAP` (2**62 - 1)
instead of wrapping; :class:`Evaluator` recounts a saturated result with Python integers,
so no path returns a wrapped or capped number.

Annealing scores a move (which changes an order only between positions ``lo <= hi``) on
one working state that follows a cursor through the order: every write an elimination
makes is recorded in an undo log, so the state goes back to position ``lo`` by undoing
what came after it (work proportional to what changed, never a copy of the whole state).
Scoring stops as soon as the running cost exceeds what the Metropolis rule could accept,
or once, past ``hi``, the state's hash equals the current order's at the same position:
the same edges remain, so the rest of the order costs what it cost before. The descent
that ends annealing (:func:`descend`) rests on the same fact: it scores every later
position of one vertex in a single walk of the rest of the order. Hashes only steer the
search: every order a search returns is re-scored from scratch.

Kernels that allocate nothing (eliminating, undoing, seeking, scoring) compile with
``_nrt=False``, without numba's reference counting: unpacking the state's 12 arrays cost
about 40 atomic increments per elimination, most of annealing's time. They report a full
undo log (:data:`LOG_FULL`) to a caller that can allocate a larger one.
"""

from __future__ import annotations

import numba
import numpy as np

from alphagrad import rules as rl
from alphagrad import time_model
from alphagrad.graph import Graph

#: Costs and their sums saturate here (:data:`alphagrad.rules.COST_CAP`, as int64; see
#: :func:`saturating_add`): a saturated total is recounted exactly, never returned.
CAP = np.int64(rl.COST_CAP)
#: A pool is full: grow the pools and start again.
OVERFLOW = np.int64(-1)
#: An undo log is full: grow it and eliminate again (nothing was changed).
LOG_FULL = np.int64(-2)
# indices into a state tuple
_OS, _OL, _OC, _OD, _OSID, _OTW, _IS, _IL, _IC, _ISRC, _ITW, _META = range(12)


@numba.njit(cache=True, nogil=True, inline="always")
def saturating_add(a, b):
    """``min(a + b, COST_CAP)`` for ``0 <= a, b <= COST_CAP`` (never wraps)."""
    s = a + b
    return s if s < CAP else CAP


@numba.njit(cache=True, nogil=True, inline="always")
def _mix(i, k, s, V):
    """A 64-bit mix (splitmix64) of the edge ``i -> k`` with structure ``s``."""
    z = np.uint64((i * V + k) * 1048576 + s) + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return np.int64(z ^ (z >> np.uint64(31)))


@numba.njit(cache=True, nogil=True)
def new_state(V, src, dst, sid, pool):
    """The state of a graph of ``V`` vertices with edges ``src -> dst`` of structures
    ``sid``, with pools of at least ``pool`` entries."""
    out_len = np.zeros(V, np.int64)
    in_len = np.zeros(V, np.int64)
    for e in range(src.shape[0]):
        out_len[src[e]] += 1
        in_len[dst[e]] += 1
    out_start = np.zeros(V, np.int64)
    in_start = np.zeros(V, np.int64)
    out_cap = out_len + 2  # room for a few fill-ins before the first move
    in_cap = in_len + 2
    top_o = 0
    top_i = 0
    for v in range(V):
        out_start[v] = top_o
        top_o += out_cap[v]
        in_start[v] = top_i
        top_i += in_cap[v]
    size = max(pool, 2 * max(top_o, top_i))
    out_dst = np.zeros(size, np.int64)
    out_sid = np.zeros(size, np.int64)
    out_twin = np.zeros(size, np.int64)
    in_src = np.zeros(size, np.int64)
    in_twin = np.zeros(size, np.int64)
    meta = np.zeros(3, np.int64)
    meta[0], meta[1] = top_o, top_i
    out_len[:] = 0
    in_len[:] = 0
    state = (out_start, out_len, out_cap, out_dst, out_sid, out_twin,
             in_start, in_len, in_cap, in_src, in_twin, meta)
    for e in range(src.shape[0]):
        _append(state, src[e], dst[e], sid[e], V, np.zeros(0, np.int64))
    return state


@numba.njit(cache=True, nogil=True, inline="always")
def _rec(log, a, idx, old):
    """Records that ``state[a][idx]`` held ``old`` (nothing if ``log`` is empty)."""
    if log.shape[0] > 0:
        n = log[0]
        log[n + 1] = a
        log[n + 2] = idx
        log[n + 3] = old
        log[0] = n + 3


@numba.njit(cache=True, nogil=True, _nrt=False)
def undo(state, log, to):
    """Undoes the writes :func:`eliminate` recorded in ``log`` after entry ``to``: the
    state is again, to the byte, what it was when the log held ``to`` entries."""
    n = log[0]
    while n > to:
        state[log[n - 2]][log[n - 1]] = log[n]
        n -= 3
    log[0] = n


@numba.njit(cache=True, nogil=True)
def new_log(entries):
    """An empty undo log for :func:`eliminate` with room for ``entries`` writes (it grows
    with :func:`grow_log`)."""
    return np.zeros(1 + 3 * entries, np.int64)


@numba.njit(cache=True, nogil=True)
def grow_log(log):
    """``log`` with twice the room, same entries."""
    out = np.zeros(2 * log.shape[0], np.int64)
    out[: log[0] + 1] = log[: log[0] + 1]
    return out


@numba.njit(cache=True, nogil=True, inline="always")
def _append(state, i, k, s, V, log):
    """Adds the edge ``i -> k`` of structure ``s``; False if a pool is full. A segment
    moved to the pool's end is not logged (undoing the tops frees that space again)."""
    out_start, out_len, out_cap, out_dst, out_sid, out_twin, in_start, in_len, in_cap, in_src, in_twin, meta = state
    if out_len[i] == out_cap[i]:
        cap = 2 * out_cap[i] + 2
        if meta[0] + cap > out_dst.shape[0]:
            return False
        start = meta[0]
        old = out_start[i]
        _rec(log, _OS, i, old)
        _rec(log, _OC, i, out_cap[i])
        for t in range(out_len[i]):
            out_dst[start + t] = out_dst[old + t]
            out_sid[start + t] = out_sid[old + t]
            out_twin[start + t] = out_twin[old + t]
        out_start[i] = start
        out_cap[i] = cap
        meta[0] += cap
    if in_len[k] == in_cap[k]:
        cap = 2 * in_cap[k] + 2
        if meta[1] + cap > in_src.shape[0]:
            return False
        start = meta[1]
        old = in_start[k]
        _rec(log, _IS, k, old)
        _rec(log, _IC, k, in_cap[k])
        for t in range(in_len[k]):
            in_src[start + t] = in_src[old + t]
            in_twin[start + t] = in_twin[old + t]
        in_start[k] = start
        in_cap[k] = cap
        meta[1] += cap
    p = out_len[i]
    q = in_len[k]
    at = out_start[i] + p  # past the length, but it may hold an entry a removal left for undo
    _rec(log, _OD, at, out_dst[at])
    _rec(log, _OSID, at, out_sid[at])
    _rec(log, _OTW, at, out_twin[at])
    at = in_start[k] + q
    _rec(log, _ISRC, at, in_src[at])
    _rec(log, _ITW, at, in_twin[at])
    out_dst[out_start[i] + p] = k
    out_sid[out_start[i] + p] = s
    out_twin[out_start[i] + p] = q
    in_src[in_start[k] + q] = i
    in_twin[in_start[k] + q] = p
    _rec(log, _OL, i, p)
    _rec(log, _IL, k, q)
    out_len[i] = p + 1
    in_len[k] = q + 1
    meta[2] += _mix(i, k, s, V)
    return True


@numba.njit(cache=True, nogil=True, _nrt=False)
def eliminate(state, v, compose, join, cost, mark, pos, log):
    """Eliminates ``v`` in place; returns its multiplications (saturated int64),
    :data:`OVERFLOW` (the state is then unusable: grow the pools and start again), or
    :data:`LOG_FULL` (nothing done: grow ``log`` and call again).

    ``mark`` (``[V + 1]``, its last entry the stamp counter) and ``pos`` (``[V]``) are
    int64 scratch arrays, stamped, never cleared: share them only with states that also
    leave the counter alone. Every write that matters is recorded in ``log`` (see
    :func:`undo`) unless it is empty (``np.zeros(0, np.int64)``)."""
    out_start, out_len, out_cap, out_dst, out_sid, out_twin, in_start, in_len, in_cap, in_src, in_twin, meta = state
    V = out_start.shape[0]
    total = np.int64(0)
    ns = out_len[v]
    if log.shape[0] > 0:  # room for the most this elimination can write
        need = 3 * (11 * in_len[v] * ns + 5 * (in_len[v] + ns) + 8)
        if log.shape[0] - 1 - log[0] < need:
            return LOG_FULL
        _rec(log, _META, 0, meta[0])
        _rec(log, _META, 1, meta[1])
        _rec(log, _META, 2, meta[2])
    succ_in = 0  # what finding i among the successors' predecessors would scan
    for b in range(ns):
        succ_in += in_len[out_dst[out_start[v] + b]]
    for a in range(in_len[v]):
        i = in_src[in_start[v] + a]
        pv = in_twin[in_start[v] + a]
        b_id = out_sid[out_start[i] + pv]
        by_marks = out_len[i] <= succ_in
        if by_marks:  # mark i's successors once
            mark[V] += 1
            stamp = mark[V]
            for t in range(out_len[i]):
                k = out_dst[out_start[i] + t]
                mark[k] = stamp
                pos[k] = t
        for b in range(ns):
            s0 = out_start[v]
            k = out_dst[s0 + b]
            a_id = out_sid[s0 + b]
            total = saturating_add(total, cost[a_id, b_id])
            c = compose[a_id, b_id]
            p = -1
            if by_marks:
                if mark[k] == stamp:
                    p = pos[k]
            else:
                for t in range(in_len[k]):
                    if in_src[in_start[k] + t] == i:
                        p = in_twin[in_start[k] + t]
                        break
            if p >= 0:
                at = out_start[i] + p
                old = out_sid[at]
                new = join[old, c]
                if new != old:
                    _rec(log, _OSID, at, old)
                    out_sid[at] = new
                    meta[2] += _mix(i, k, new, V) - _mix(i, k, old, V)
            elif not _append(state, i, k, c, V, log):
                return OVERFLOW
        # drop i -> v: the last successor of i takes its place
        base = out_start[i]
        last = out_len[i] - 1
        if pv != last:
            k2 = out_dst[base + last]
            _rec(log, _OD, base + pv, out_dst[base + pv])
            _rec(log, _OSID, base + pv, out_sid[base + pv])
            _rec(log, _OTW, base + pv, out_twin[base + pv])
            out_dst[base + pv] = k2
            out_sid[base + pv] = out_sid[base + last]
            out_twin[base + pv] = out_twin[base + last]
            at = in_start[k2] + out_twin[base + pv]
            _rec(log, _ITW, at, in_twin[at])
            in_twin[at] = pv
        _rec(log, _OL, i, last + 1)
        out_len[i] = last
        meta[2] -= _mix(i, v, b_id, V)
    for b in range(ns):  # drop v -> k: the last predecessor of k takes its place
        s0 = out_start[v]
        k = out_dst[s0 + b]
        q = out_twin[s0 + b]
        base = in_start[k]
        last = in_len[k] - 1
        if q != last:
            i2 = in_src[base + last]
            _rec(log, _ISRC, base + q, in_src[base + q])
            _rec(log, _ITW, base + q, in_twin[base + q])
            in_src[base + q] = i2
            in_twin[base + q] = in_twin[base + last]
            at = out_start[i2] + in_twin[base + q]
            _rec(log, _OTW, at, out_twin[at])
            out_twin[at] = q
        _rec(log, _IL, k, last + 1)
        in_len[k] = last
        meta[2] -= _mix(v, k, out_sid[s0 + b], V)
    _rec(log, _OL, v, out_len[v])
    _rec(log, _IL, v, in_len[v])
    out_len[v] = 0
    in_len[v] = 0
    return total


@numba.njit(cache=True, nogil=True, _nrt=False)
def vertex_cost(state, v, cost):
    """Multiplications of eliminating ``v`` now (its Markowitz degree in the cost model)."""
    out_start, out_len, out_cap, out_dst, out_sid, out_twin, in_start, in_len, in_cap, in_src, in_twin, meta = state
    total = np.int64(0)
    for a in range(in_len[v]):
        i = in_src[in_start[v] + a]
        b_id = out_sid[out_start[i] + in_twin[in_start[v] + a]]
        for b in range(out_len[v]):
            total = saturating_add(total, cost[out_sid[out_start[v] + b], b_id])
    return total


@numba.njit(cache=True, nogil=True)
def copy_state(state):
    out = (state[0].copy(), state[1].copy(), state[2].copy(), state[3].copy(), state[4].copy(),
           state[5].copy(), state[6].copy(), state[7].copy(), state[8].copy(), state[9].copy(),
           state[10].copy(), state[11].copy())
    return out


@numba.njit(cache=True, nogil=True)
def step_costs(state0, order, compose, join, cost):
    """The multiplications of each elimination of ``order`` from ``state0`` (left
    unchanged), and a flag: :data:`OVERFLOW` if a pool filled up."""
    work = copy_state(state0)
    V = work[0].shape[0]
    mark = np.zeros(V + 1, np.int64)
    pos = np.zeros(V, np.int64)
    nolog = np.zeros(0, np.int64)
    steps = np.zeros(order.shape[0], np.int64)
    for p in range(order.shape[0]):
        m = eliminate(work, order[p], compose, join, cost, mark, pos, nolog)
        if m < 0:
            return steps, OVERFLOW
        steps[p] = m
    return steps, np.int64(0)


@numba.njit(cache=True, nogil=True)
def order_cost(state0, order, compose, join, cost):
    """Multiplications of eliminating ``order`` from ``state0`` (left unchanged),
    saturated at ``COST_CAP``; or :data:`OVERFLOW`."""
    steps, flag = step_costs(state0, order, compose, join, cost)
    if flag == OVERFLOW:
        return OVERFLOW
    total = np.int64(0)
    for m in steps:
        total = saturating_add(total, m)
    return total


@numba.njit(cache=True, nogil=True)
def after(state0, prefix, compose, join, cost):
    """The state after eliminating ``prefix`` from ``state0`` (left unchanged), and a flag:
    :data:`OVERFLOW` if a pool filled up."""
    work = copy_state(state0)
    V = work[0].shape[0]
    mark = np.zeros(V + 1, np.int64)
    pos = np.zeros(V, np.int64)
    nolog = np.zeros(0, np.int64)
    for v in prefix:
        if eliminate(work, v, compose, join, cost, mark, pos, nolog) < 0:
            return work, OVERFLOW
    return work, np.int64(0)


@numba.njit(cache=True, nogil=True)
def markowitz(state0, inter, compose, join, cost):
    """Greedy minimal elimination cost, the smallest id on ties (``inter`` ascending).

    Returns ``(order, total)``; ``total`` is :data:`OVERFLOW` if a pool filled up, and
    ``COST_CAP`` if some choice may have been a tie between saturated costs."""
    work = copy_state(state0)
    V = work[0].shape[0]
    n = inter.shape[0]
    mark = np.zeros(V + 1, np.int64)
    pos = np.zeros(V, np.int64)
    nolog = np.zeros(0, np.int64)
    alive = np.zeros(V, np.bool_)
    costs = np.zeros(V, np.int64)
    for v in inter:
        alive[v] = True
        costs[v] = vertex_cost(work, v, cost)
    touched = np.empty(V, np.int64)
    order = np.empty(n, np.int64)
    total = np.int64(0)
    for step in range(n):
        best = -1
        best_cost = np.int64(0)
        for v in inter:
            if alive[v] and (best < 0 or costs[v] < best_cost):
                best = v
                best_cost = costs[v]
        nt = 0
        for a in range(work[_IL][best]):
            touched[nt] = work[_ISRC][work[_IS][best] + a]
            nt += 1
        for b in range(work[_OL][best]):
            touched[nt] = work[_OD][work[_OS][best] + b]
            nt += 1
        m = eliminate(work, best, compose, join, cost, mark, pos, nolog)
        if m < 0:
            return order, OVERFLOW
        total = saturating_add(total, m)
        alive[best] = False
        order[step] = best
        for t in range(nt):  # only the neighbours' costs changed
            u = touched[t]
            if alive[u]:
                costs[u] = vertex_cost(work, u, cost)
    return order, total


@numba.njit(cache=True, nogil=True)
def _solve(state, inter, remaining, memo, compose, join, cost, mark, pos):
    """Cheapest cost of eliminating the ``remaining`` intermediates from ``state``,
    memoised by the state's hash (or :data:`OVERFLOW`)."""
    key = state[_META][2]
    if key in memo:
        return memo[key]
    best = np.int64(-1)
    for idx in range(inter.shape[0]):
        if not remaining[idx]:
            continue
        nxt = copy_state(state)
        c = eliminate(nxt, inter[idx], compose, join, cost, mark, pos, np.zeros(0, np.int64))
        if c < 0:
            return OVERFLOW
        remaining[idx] = False
        rest = _solve(nxt, inter, remaining, memo, compose, join, cost, mark, pos)
        remaining[idx] = True
        if rest < 0:
            return OVERFLOW
        r = saturating_add(c, rest)
        if best < 0 or r < best:
            best = r
    if best < 0:
        best = 0
    memo[key] = best
    return best


@numba.njit(cache=True, nogil=True)
def optimal(state0, inter, compose, join, cost):
    """The cheapest order, by dynamic programming over elimination states keyed by
    their hash: ``(order, total)``, ``total`` :data:`OVERFLOW` if a pool filled up."""
    n = inter.shape[0]
    V = state0[0].shape[0]
    mark = np.zeros(V + 1, np.int64)
    pos = np.zeros(V, np.int64)
    memo = dict()
    memo[np.int64(0)] = np.int64(0)
    del memo[np.int64(0)]
    remaining = np.ones(n, np.bool_)
    order = np.empty(n, np.int64)
    total = _solve(copy_state(state0), inter, remaining, memo, compose, join, cost, mark, pos)
    if total < 0:
        return order, OVERFLOW
    state = copy_state(state0)
    target = total
    for step in range(n):
        for idx in range(n):
            if not remaining[idx]:
                continue
            nxt = copy_state(state)
            c = eliminate(nxt, inter[idx], compose, join, cost, mark, pos, np.zeros(0, np.int64))
            rest = memo[nxt[_META][2]] if step < n - 1 else np.int64(0)
            if saturating_add(c, rest) == target:
                order[step] = inter[idx]
                remaining[idx] = False
                state = nxt
                target = rest
                break
    return order, total


# ------------------------------------------------------------------------ annealing
@numba.njit(cache=True, nogil=True, _nrt=False)
def _eliminate_unit(work, v, gstart, gmem, compose, join, cost, mark, pos, log):
    """Eliminates the unit ``v`` stands for in an annealed order, ``gmem[gstart[v]:gstart[v
    + 1]]`` (``v`` alone, or its group of false twins), one after another: the sum of
    their multiplications, or the first negative flag (undo the log to retry)."""
    total = np.int64(0)
    for t in range(gstart[v], gstart[v + 1]):
        m = eliminate(work, gmem[t], compose, join, cost, mark, pos, log)
        if m < 0:
            return m
        total = saturating_add(total, m)
    return total


@numba.njit(cache=True, nogil=True)
def expand(order, gstart, gmem):
    """The vertex order an order of units stands for (see :func:`_eliminate_unit`)."""
    out = np.empty(gstart[-1], np.int64)
    k = 0
    for v in order:
        for t in range(gstart[v], gstart[v + 1]):
            out[k] = gmem[t]
            k += 1
    return out[:k]


@numba.njit(cache=True, nogil=True)
def eliminate_logged(work, v, compose, join, cost, mark, pos, log):
    """:func:`eliminate` recording into ``log``, grown as needed: ``(multiplications, log)``
    (the log may be a new, larger array)."""
    while True:
        m = eliminate(work, v, compose, join, cost, mark, pos, log)
        if m != LOG_FULL:
            return m, log
        log = grow_log(log)


@numba.njit(cache=True, nogil=True, _nrt=False)
def _seek(work, log, lpos, pcost, phash, fresh, order, cursor, target, gstart, gmem, compose, join, cost,
          mark, pos):
    """Brings ``work`` from the state after ``cursor`` eliminations of ``order`` to the
    state after ``target``: undoing the log back, or eliminating forward (logged, and
    refreshing the prefix costs and hashes it passes). Returns 0, :data:`OVERFLOW`, or
    :data:`LOG_FULL` (``work`` is then back at ``cursor``: grow the log and call again)."""
    if target <= cursor:
        undo(work, log, lpos[target])
        return np.int64(0)
    meta = work[_META]
    for p in range(cursor, target):
        lpos[p] = log[0]
        m = _eliminate_unit(work, order[p], gstart, gmem, compose, join, cost, mark, pos, log)
        if m == LOG_FULL:
            undo(work, log, lpos[cursor])
            return LOG_FULL
        if m < 0:
            return OVERFLOW
        pcost[p + 1] = saturating_add(pcost[p], m)
        phash[p + 1] = meta[2]
        fresh[p + 1] = True
    lpos[target] = log[0]
    return np.int64(0)


@numba.njit(cache=True, nogil=True, _nrt=False)
def _apart(state, x, order, a, b, mark):
    """Whether ``x`` shares no edge in ``state`` with any of ``order[a:b]`` (``mark``:
    :func:`eliminate`'s stamp scratch)."""
    out_start, out_len, out_cap, out_dst, out_sid, out_twin, in_start, in_len, in_cap, in_src, in_twin, meta = state
    V = out_start.shape[0]
    mark[V] += 1
    stamp = mark[V]
    for t in range(out_len[x]):
        mark[out_dst[out_start[x] + t]] = stamp
    for t in range(in_len[x]):
        mark[in_src[in_start[x] + t]] = stamp
    for p in range(a, b):
        if mark[order[p]] == stamp:
            return False
    return True


@numba.njit(cache=True, nogil=True, _nrt=False)
def _unchanged(state, order, i, j, swap, mark):
    """Whether swapping positions ``i`` and ``j`` of ``order`` (``swap``), or moving
    ``order[i]`` to position ``j``, provably changes neither the cost nor the state after
    both positions, ``state`` being the state at the first of them: the moved vertices
    share no edge there with the vertices they pass. (Eliminating a vertex changes only
    the edges of its neighbours, so a vertex that none of the passed vertices touches
    keeps its edges, hence its cost, and commutes with each of them, given that the
    rule tables' joins commute: ``RuleTables.joins_commute``.)"""
    lo, hi = min(i, j), max(i, j)
    if swap:
        return (_apart(state, order[lo], order, lo + 1, hi + 1, mark)
                and _apart(state, order[hi], order, lo + 1, hi, mark))
    if i < j:
        return _apart(state, order[i], order, i + 1, j + 1, mark)
    return _apart(state, order[i], order, j, i, mark)


@numba.njit(cache=True, nogil=True, _nrt=False)
def _score(work, log, cand, lo, hi, pcost, phash, fresh, threshold, gstart, gmem, compose, join, cost,
           mark, pos, tmp_cost, tmp_hash, tmp_lpos):
    """Eliminates ``cand`` (the current order with positions ``lo..hi`` changed) from
    ``work``, the current order's state after ``lo`` eliminations, logging every write.
    Returns ``(cost, stop)``: the candidate's cost, or any number above ``threshold``
    once it is sure to exceed it; ``stop``, the position after which the state equals the
    current order's (``n`` if it never did). Prefix costs, hashes and log positions of
    ``cand`` up to ``stop`` go to the ``tmp_*`` arrays; only positions marked ``fresh``
    have a known prefix cost and hash in ``pcost``/``phash``. ``cost`` is :data:`OVERFLOW` if a
    pool filled up, or :data:`LOG_FULL` (``work`` is then back at ``lo``: grow the log
    and score again)."""
    n = cand.shape[0]
    run = pcost[lo]
    meta = work[_META]
    for p in range(lo, n):
        tmp_lpos[p] = log[0]
        m = _eliminate_unit(work, cand[p], gstart, gmem, compose, join, cost, mark, pos, log)
        if m == LOG_FULL:
            undo(work, log, tmp_lpos[lo])
            return LOG_FULL, 0
        if m < 0:
            return OVERFLOW, 0
        run = saturating_add(run, m)
        if run > threshold:
            return run, p + 1
        h = meta[2]
        tmp_cost[p + 1] = run
        tmp_hash[p + 1] = h
        if p >= hi and h == phash[p + 1] and fresh[p + 1]:
            tmp_lpos[p + 1] = log[0]
            return saturating_add(run, pcost[n] - pcost[p + 1]), p + 1
    tmp_lpos[n] = log[0]
    return run, n


@numba.njit(cache=True, nogil=True)
def anneal(state0, compose, join, cost, order, best_order, best, iters, t0, t1, seed, window, log_entries,
           commute, gstart, gmem):
    """``iters`` Metropolis moves on ``order`` (updated in place) at a temperature that
    decays geometrically from ``t0`` to ``t1``; an order seen cheaper than ``best`` (the
    cost of ``best_order``) goes to ``best_order``.

    One working state follows a cursor through the order, with an undo log of every write
    since the start: a move's first changed position is drawn just ahead of the cursor
    (so the cursor sweeps the order, about one position a move), the state is brought
    there by eliminating forward (or undoing, when a sweep starts again), the candidate is
    eliminated from there, and a rejected one is undone. A move swaps two positions or
    moves one vertex to another position, forwards or backwards, the two at most
    ``window`` apart (one move in sixteen anywhere).

    ``order`` may be an order of units (:func:`_eliminate_unit`): groups of false twins
    move as one.

    With ``commute`` (the rule tables' joins commute: ``RuleTables.joins_commute``), a
    move that provably changes nothing (:func:`_unchanged`) is accepted unscored; the
    prefix costs it moves are marked stale and refreshed as the cursor passes them again.

    Returns ``(current cost, best cost, moves scored)``; the first is :data:`OVERFLOW`
    if a pool filled up (``order`` is then the last accepted order).
    """
    np.random.seed(seed)
    n = order.shape[0]
    V = state0[0].shape[0]
    mark = np.zeros(V + 1, np.int64)
    pos = np.zeros(V, np.int64)
    work = copy_state(state0)
    log = new_log(log_entries)  # grows as needed
    pcost = np.zeros(n + 1, np.int64)
    phash = np.zeros(n + 1, np.int64)
    lpos = np.zeros(n + 1, np.int64)
    tmp_cost = np.zeros(n + 1, np.int64)
    tmp_hash = np.zeros(n + 1, np.int64)
    tmp_lpos = np.zeros(n + 1, np.int64)
    fresh = np.ones(n + 1, np.bool_)  # pcost/phash known at this position
    phash[0] = state0[_META][2]
    # the first pass scores the order itself as a change of every position (stop = n)
    while True:
        cur, stop = _score(work, log, order, 0, n, pcost, phash, fresh, CAP, gstart, gmem, compose, join,
                           cost, mark, pos, tmp_cost, tmp_hash, tmp_lpos)
        if cur != LOG_FULL:
            break
        log = grow_log(log)
    if cur < 0:
        return OVERFLOW, OVERFLOW, np.int64(0)
    pcost[1:] = tmp_cost[1:]
    phash[1:] = tmp_hash[1:]
    lpos[:] = tmp_lpos
    cursor = n
    if cur < best:
        best = cur
        best_order[:] = order
    cand = order.copy()
    scored = np.int64(0)
    cool = (t1 / t0) ** (1.0 / max(iters - 1, 1))  # the temperature's factor per move
    temp = t0 / cool
    for it in range(iters):
        temp *= cool
        lo = cursor + np.random.randint(3)  # the cursor sweeps the order, about one position a move
        if lo >= n - 1:
            lo = np.random.randint(3) if n > 3 else 0
        if np.random.random() < 0.0625:
            hi = lo + 1 + np.random.randint(n - 1 - lo)
        else:
            hi = min(lo + 1 + np.random.randint(window), n - 1)
        i, j = (lo, hi) if np.random.random() < 0.5 else (hi, lo)
        swap = np.random.random() < 0.5
        if swap:
            cand[i], cand[j] = order[j], order[i]
        elif i < j:  # move order[i] to position j
            for p in range(i, j):
                cand[p] = order[p + 1]
            cand[j] = order[i]
        else:
            for p in range(i, j, -1):
                cand[p] = order[p - 1]
            cand[j] = order[i]
        while True:
            flag = _seek(work, log, lpos, pcost, phash, fresh, order, cursor, lo, gstart, gmem, compose,
                         join, cost, mark, pos)
            if flag != LOG_FULL:
                break
            log = grow_log(log)
        if flag < 0:
            return OVERFLOW, best, scored
        cursor = lo
        if commute and _unchanged(work, order, i, j, swap, mark):
            for q in range(lo, hi + 1):  # the same cost, the same state after hi
                order[q] = cand[q]
            for q in range(lo + 1, hi + 1):
                fresh[q] = False
            scored += 1
            continue
        threshold = cur - temp * np.log(1.0 - np.random.random())
        while True:
            c, stop = _score(work, log, cand, lo, hi, pcost, phash, fresh, threshold, gstart, gmem,
                             compose, join, cost, mark, pos, tmp_cost, tmp_hash, tmp_lpos)
            if c != LOG_FULL:
                break
            log = grow_log(log)
        scored += 1
        if c < 0:
            return OVERFLOW, best, scored
        if c <= threshold:  # (loops, not slices: a slice is a view, reference-counted)
            for q in range(lo, hi + 1):
                order[q] = cand[q]
            delta = tmp_cost[stop] - pcost[stop]
            lpos[lo] = tmp_lpos[lo]
            for q in range(lo + 1, stop + 1):
                pcost[q] = tmp_cost[q]
                phash[q] = tmp_hash[q]
                lpos[q] = tmp_lpos[q]
                fresh[q] = True
            for q in range(stop + 1, n + 1):  # the same states from here: costs shift by delta
                pcost[q] = min(max(pcost[q] + delta, 0), CAP)
            cursor = stop
            cur = c
            if cur < best:
                best = cur
                best_order[:] = order
        else:
            undo(work, log, lpos[lo])
            for q in range(lo, hi + 1):
                cand[q] = order[q]
    return cur, best, scored


@numba.njit(cache=True, nogil=True)
def _unit_logged(work, v, gstart, gmem, compose, join, cost, mark, pos, log):
    """:func:`_eliminate_unit` recording into ``log``, grown as needed: ``(multiplications,
    log)``."""
    while True:
        at = log[0]
        m = _eliminate_unit(work, v, gstart, gmem, compose, join, cost, mark, pos, log)
        if m != LOG_FULL:
            return m, log
        undo(work, log, at)
        log = grow_log(log)


@numba.njit(cache=True, nogil=True)
def descend(state0, compose, join, cost, order, first, limit, gstart, gmem, log_entries):
    """A descent over moves of one unit to a later position, on ``order`` (updated in
    place), from position ``first`` on until the end of the order or until ``limit``
    targets have been scored: at each position every later target is scored in one walk
    of the rest of the order without the unit, eliminating the unit after each step and
    undoing it (the state after the same set of eliminations is the same whatever their
    order, checked by hash, so what follows costs what it cost before): two eliminations
    a target. The cheapest target, if cheaper than the order, is applied and the unit
    now at that position is tried next. Annealing draws such long moves rarely, and on
    the published tasks an annealed order is often one of them from its plateau.

    Returns ``(cost, moves applied, next position, targets scored)``; the cost is
    :data:`OVERFLOW` if a pool filled up (``order`` is then a valid order no dearer than
    before)."""
    n = order.shape[0]
    V = state0[0].shape[0]
    mark = np.zeros(V + 1, np.int64)
    pos = np.zeros(V, np.int64)
    nolog = np.zeros(0, np.int64)
    pcost = np.zeros(n + 1, np.int64)
    phash = np.zeros(n + 1, np.int64)
    scan = copy_state(state0)
    work = scan  # becomes the state at position first
    phash[0] = scan[_META][2]
    for p in range(n):
        if p == first:
            work = copy_state(scan)
        m = _eliminate_unit(scan, order[p], gstart, gmem, compose, join, cost, mark, pos, nolog)
        if m < 0:
            return OVERFLOW, np.int64(0), np.int64(first), np.int64(0)
        pcost[p + 1] = saturating_add(pcost[p], m)
        phash[p + 1] = scan[_META][2]
    log = new_log(log_entries)
    moved = np.int64(0)
    scored = np.int64(0)
    p = first
    while p < n - 1 and scored < limit:
        x = order[p]
        run = pcost[p]
        best, target = pcost[n], -1
        for q in range(p + 1, n):
            m, log = _unit_logged(work, order[q], gstart, gmem, compose, join, cost, mark, pos, log)
            if m < 0:
                return OVERFLOW, moved, p, scored
            run = saturating_add(run, m)
            if run >= best:  # every later target costs at least this much
                break
            at = log[0]
            m, log = _unit_logged(work, x, gstart, gmem, compose, join, cost, mark, pos, log)
            scored += 1
            if m < 0:
                return OVERFLOW, moved, p, scored
            total = saturating_add(saturating_add(run, m), pcost[n] - pcost[q + 1])
            if work[_META][2] == phash[q + 1] and total < best:
                best, target = total, q
            undo(work, log, at)
        undo(work, log, 0)
        if target < 0:
            if _eliminate_unit(work, x, gstart, gmem, compose, join, cost, mark, pos, nolog) < 0:
                return OVERFLOW, moved, p, scored
            p += 1
            continue
        for r in range(p, target):
            order[r] = order[r + 1]
        order[target] = x
        old = pcost[target + 1]
        for r in range(p, target + 1):  # the new prefix costs, on the log, then back to p
            m, log = _unit_logged(work, order[r], gstart, gmem, compose, join, cost, mark, pos, log)
            if m < 0:
                return OVERFLOW, moved, p, scored
            pcost[r + 1] = saturating_add(pcost[r], m)
            phash[r + 1] = work[_META][2]
        undo(work, log, 0)
        delta = pcost[target + 1] - old
        for r in range(target + 2, n + 1):
            pcost[r] = min(max(pcost[r] + delta, 0), CAP)
        moved += 1
    return pcost[n], moved, np.int64(p), scored


# ------------------------------------------- the dense evaluator of release 0.1.0
@numba.njit(cache=True, nogil=True)
def move_deltas(state0, order, positions, horizon, compose, join, cost, slack=0):
    """How much moving one later vertex to position ``t`` changes the cost of ``order``,
    for each ``t`` in ``positions`` (ascending): the policy targets of training.

    For each ``t`` and each ``j`` in ``t .. min(n, t + horizon) - 1``, the order
    ``order[:t] + [order[j]] + order[t:j] + order[j + 1:]`` is scored: from position
    ``j + 1`` on it has eliminated the same vertices as ``order``, hence the same edges
    remain, so positions ``t .. j`` are re-eliminated (from the state after ``t``, through
    the undo log) and then later ones only until the state's hash equals the order's at
    the same position (edge structures can depend on the path: until they coincide, the
    rest may cost differently). Scoring stops once the variant is sure to cost more than
    ``slack`` above the order.

    Returns ``(deltas, flag)``: ``deltas[p, j - t]`` is the variant's cost minus the
    order's when it is <= ``slack``, else ``slack + 1`` (costs more), or 2 past the
    horizon or the order's end (``slack + 1`` where that is larger); ``flag`` is
    :data:`OVERFLOW` if a pool filled up, else 0."""
    n = order.shape[0]
    V = state0[0].shape[0]
    deltas = np.full((positions.shape[0], horizon), max(2, slack + 1), np.int64)
    work = copy_state(state0)
    mark = np.zeros(V + 1, np.int64)
    pos = np.zeros(V, np.int64)
    empty = np.zeros(0, np.int64)
    steps = np.zeros(n, np.int64)  # the order's cost of each position
    phash = np.zeros(n + 1, np.int64)  # the state's hash after each position
    phash[0] = work[_META][2]
    for p in range(n):
        m = eliminate(work, order[p], compose, join, cost, mark, pos, empty)
        if m < 0:
            return deltas, OVERFLOW
        steps[p] = m
        phash[p + 1] = work[_META][2]
    work = copy_state(state0)
    log = new_log(1024)
    done = 0
    for r in range(positions.shape[0]):
        t = positions[r]
        while done < t:
            m = eliminate(work, order[done], compose, join, cost, mark, pos, empty)
            if m < 0:
                return deltas, OVERFLOW
            done += 1
        deltas[r, 0] = 0
        segment = steps[t]  # what the order spends on positions t..j
        for j in range(t + 1, min(n, t + horizon)):
            segment += steps[j]
            log[0] = 0
            m, log = eliminate_logged(work, order[j], compose, join, cost, mark, pos, log)
            if m < 0:
                return deltas, OVERFLOW
            run = m
            p = t
            while p < j and run <= segment + slack:
                m, log = eliminate_logged(work, order[p], compose, join, cost, mark, pos, log)
                if m < 0:
                    return deltas, OVERFLOW
                run += m
                p += 1
            spent = segment  # what the order spends on the positions the variant re-eliminated
            q = j + 1
            while run <= spent + slack and q < n and work[_META][2] != phash[q]:
                m, log = eliminate_logged(work, order[q], compose, join, cost, mark, pos, log)
                if m < 0:
                    return deltas, OVERFLOW
                run += m
                spent += steps[q]
                q += 1
            deltas[r, j - t] = run - spent if run <= spent + slack else slack + 1
            undo(work, log, 0)
    return deltas, np.int64(0)


@numba.njit(cache=True, nogil=True, _nrt=False)
def _dense_eliminate(E, compose, join, cost, v, preds, succs):
    n = E.shape[0]
    np_ = 0
    ns = 0
    for i in range(n):
        if E[i, v] != 0:
            preds[np_] = i
            np_ += 1
        if E[v, i] != 0:
            succs[ns] = i
            ns += 1
    total = np.int64(0)
    for a in range(np_):
        i = preds[a]
        b_id = E[i, v]
        for b in range(ns):
            k = succs[b]
            a_id = E[v, k]
            total = saturating_add(total, cost[a_id, b_id])
            E[i, k] = join[E[i, k], compose[a_id, b_id]]
    for a in range(np_):
        E[preds[a], v] = 0
    for b in range(ns):
        E[v, succs[b]] = 0
    return total


@numba.njit(cache=True, nogil=True)
def dense_order_cost(E0, compose, join, cost, order):
    """The cost of ``order`` on a dense ``[V, V]`` matrix of structure ids, copied and
    scanned row and column per vertex: the evaluator of release 0.1.0, kept one release
    as the benchmark's comparison (see ``baselines.anneal_dense``)."""
    E = E0.copy()
    n = E.shape[0]
    preds = np.empty(n, np.int64)
    succs = np.empty(n, np.int64)
    total = np.int64(0)
    for v in order:
        total = saturating_add(total, _dense_eliminate(E, compose, join, cost, v, preds, succs))
    return total


@numba.njit(cache=True, nogil=True)
def dense_anneal(E0, compose, join, cost, order, cur, best_order, best, t0, t1, iters, seed):
    """The annealing moves of release 0.1.0: every move re-scores the whole order with
    :func:`dense_order_cost`. Returns ``(current, best)``."""
    np.random.seed(seed)
    n = order.shape[0]
    cand = order.copy()
    cool = (t1 / t0) ** (1.0 / max(iters - 1, 1))  # the temperature's factor per move
    temp = t0 / cool
    for it in range(iters):
        temp *= cool
        cand[:] = order
        i = np.random.randint(n)
        j = np.random.randint(n)
        if i == j:
            continue
        if np.random.random() < 0.5:
            cand[i], cand[j] = order[j], order[i]
        else:  # move element i to position j
            x = order[i]
            if i < j:
                cand[i:j] = order[i + 1:j + 1]
            else:
                cand[j + 1:i + 1] = order[j:i]
            cand[j] = x
        c = dense_order_cost(E0, compose, join, cost, cand)
        if c <= cur or np.random.random() < np.exp((cur - c) / max(temp, 1e-9)):
            order[:] = cand
            cur = c
            if c < best:
                best = c
                best_order[:] = cand
    return cur, best


@numba.njit(cache=True, nogil=True)
def regrow(state, pool):
    """The same edges in a new state with pools of ``pool`` entries."""
    out_start, out_len, out_cap, out_dst, out_sid = state[0], state[1], state[2], state[3], state[4]
    V = out_start.shape[0]
    m = out_len.sum()
    src = np.empty(m, np.int64)
    dst = np.empty(m, np.int64)
    sid = np.empty(m, np.int64)
    e = 0
    for i in range(V):
        for t in range(out_len[i]):
            src[e] = i
            dst[e] = out_dst[out_start[i] + t]
            sid[e] = out_sid[out_start[i] + t]
            e += 1
    return new_state(V, src, dst, sid, pool)


# ------------------------------------------------------------------------ the door
class State:
    """A graph in the middle of an elimination (:meth:`Evaluator.new_state`): the arrays
    of the module docstring, replaced by bigger ones when a step fills a pool."""

    def __init__(self, arrays):
        self.arrays = arrays

    @property
    def key(self) -> int:
        """A 64-bit hash of the remaining edges and their structures."""
        return int(self.arrays[_META][2])

    def edges(self) -> dict:
        """The remaining edges, ``{(src, dst): structure id}``."""
        start, length, _, dst, sid = self.arrays[:5]
        return {(i, int(dst[start[i] + t])): int(sid[start[i] + t])
                for i in range(len(start)) for t in range(length[i])}

    def __eq__(self, other) -> bool:
        return isinstance(other, State) and self.edges() == other.edges()

    __hash__ = None


class Evaluator:
    """Scores orders of one graph with the compiled evaluator (exact integers).

    Args:
      graph: the graph.
      convention: the cost convention (``"time"``: the time model's picoseconds, see
        :mod:`alphagrad.time_model`).
      rule_tables: the graph's rule tables if the caller keeps them (default: built once
        and cached by :func:`alphagrad.rules.tables`).
    """

    def __init__(self, graph: Graph, convention: str = "exact", rule_tables=None):
        if not isinstance(graph, Graph):
            raise TypeError(f"Evaluator needs an alphagrad.Graph (alphagrad.trace(f, *args)), got "
                            f"{type(graph).__name__}")
        self.graph = graph
        self.convention = rl.check_convention(convention, time=True)
        T = rule_tables if rule_tables is not None else rl.tables(graph)
        self.tables = T
        self.compose = np.ascontiguousarray(T.compose, np.int64)
        self.join = np.ascontiguousarray(T.join, np.int64)
        self.cost_table = np.ascontiguousarray(T.cost[convention] if convention in T.cost
                                               else time_model.convention_table(T, convention), np.int64)
        self.entries = T.entries  # what each structure holds: the policy's fill-in feature
        self._edges = (
            np.asarray([e.src for e in graph.edges], np.int64),
            np.asarray([e.dst for e in graph.edges], np.int64),
            np.asarray([T.index(e.structure) for e in graph.edges], np.int64),
        )
        self._pool = 4 * len(graph.edges) + 8 * graph.num_vertices + 64
        self._log_entries = None  # an annealing undo log's first room (tests shrink it)
        self._state = None
        self._singles = None  # units(): each vertex alone

    @property
    def edge_arrays(self) -> tuple:
        """``(src, dst, structure id)`` int64 arrays of the graph's edges."""
        return self._edges

    @property
    def initial(self):
        """The graph's state before any elimination (do not modify; see :meth:`new_state`)."""
        if self._state is None:
            self._state = new_state(self.graph.num_vertices, *self._edges, self._pool)
        return self._state

    def grow(self):
        """Doubles the pools (after an :data:`OVERFLOW`)."""
        self._pool *= 2
        self._state = None

    def run(self, fn, *args):
        """``fn(self.initial, *args)`` for a compiled kernel that returns :data:`OVERFLOW`
        (alone, or as the last item of a tuple) when a pool fills up: the pools are grown
        and the kernel runs again until it does not overflow."""
        while True:
            out = fn(self.initial, *args)
            flag = out[-1] if isinstance(out, tuple) else out
            if flag != OVERFLOW:
                return out
            self.grow()

    def cost(self, order) -> int:
        """Multiplications of a full order (not validated: see ``Graph.check_order``),
        exact: int64 arithmetic, recounted with Python integers past ``COST_CAP``."""
        order = np.asarray(order, np.int64)
        total = int(self.run(order_cost, order, self.compose, self.join, self.cost_table))
        if total >= rl.COST_CAP:
            E = self._exact_state()
            total = sum(self._exact_step(E, int(v)) for v in order)
        return total

    def new_state(self) -> "State":
        """A fresh state to eliminate from, one vertex at a time, with :meth:`step`."""
        return State(copy_state(self.initial))

    def step(self, state: "State", v: int) -> int:
        """Eliminates ``v`` from ``state`` in place; returns its exact cost."""
        v = int(v)
        preds, succs = self._neighbours(state.arrays, v)
        V = self.graph.num_vertices
        while True:  # on a copy, so that a full pool costs a regrow, not the state
            arrays = copy_state(state.arrays)
            c = int(eliminate(arrays, v, self.compose, self.join, self.cost_table,
                              np.zeros(V + 1, np.int64), np.zeros(V, np.int64), np.zeros(0, np.int64)))
            if c != OVERFLOW:
                break
            state.arrays = regrow(state.arrays, 2 * state.arrays[_OD].shape[0])
        state.arrays = arrays
        if c >= rl.COST_CAP:  # the same fill-in; recount the products exactly
            T, conv = self.tables, self.convention
            c = sum(T.exact_cost(conv, a, b) for _, b in preds for _, a in succs)
        return c

    def vertex_cost(self, state: "State", v: int) -> int:
        """The exact cost of eliminating ``v`` from ``state`` now (0 if it has no edges)."""
        c = int(vertex_cost(state.arrays, int(v), self.cost_table))
        if c < rl.COST_CAP:
            return c
        preds, succs = self._neighbours(state.arrays, int(v))
        return sum(self.tables.exact_cost(self.convention, a, b) for _, b in preds for _, a in succs)

    def markowitz(self) -> list[int]:
        """The order of :func:`alphagrad.baselines.markowitz`: repeatedly the vertex that is
        cheapest to eliminate now, the smallest id on ties (compiled; exact integers)."""
        inter = np.asarray(self.graph.intermediates, np.int64)
        if len(inter) == 0:
            return []
        order, total = self.run(markowitz, inter, self.compose, self.join, self.cost_table)
        if total >= rl.COST_CAP:  # a choice may have compared saturated costs: redo exactly
            return self._exact_markowitz()
        return [int(v) for v in order]

    def optimal(self) -> tuple[list[int], int]:
        """The cheapest order and its cost (saturated at ``COST_CAP``), by exhaustive
        dynamic programming over elimination states: time and memory grow as 2^n."""
        inter = np.asarray(self.graph.intermediates, np.int64)
        order, total = self.run(optimal, inter, self.compose, self.join, self.cost_table)
        return [int(v) for v in order], int(total)

    def units(self, groups=()) -> tuple[np.ndarray, np.ndarray]:
        """``(gstart, gmem)``: each vertex its own unit, except that the first vertex of each
        group in ``groups`` (e.g. ``graph.false_twins``) stands for the whole group, eliminated
        in the group's order (:func:`anneal` then moves the group as one)."""
        V = self.graph.num_vertices
        if not groups:
            if self._singles is None:
                self._singles = (np.arange(V + 1, dtype=np.int64), np.arange(V, dtype=np.int64))
            return self._singles
        members = [[v] for v in range(V)]
        for g in groups:
            members[g[0]] = list(g)
            for v in g[1:]:
                members[v] = []
        gstart = np.zeros(V + 1, np.int64)
        gstart[1:] = np.cumsum([len(m) for m in members])
        gmem = np.asarray([v for m in members for v in m], np.int64)
        return gstart, gmem

    def anneal(self, order: np.ndarray, best_order: np.ndarray, moves: int, t0: float, t1: float,
               seed: int, window: int = 32, prefix=None, units=None) -> tuple[int, int, int]:
        """:func:`anneal` moves on ``order`` (int64, updated in place; an order seen cheaper
        than ``best_order`` replaces it), growing the pools as needed. With ``prefix`` (the
        vertices eliminated first, kept fixed), ``order`` and ``best_order`` are orders of
        the rest, and costs count the rest only; with ``units`` (:meth:`units`), they are
        orders of units. Returns ``(current cost, best cost, moves scored)``, costs
        saturated at ``COST_CAP``."""
        gstart, gmem = units if units is not None else self.units()

        def run(start):
            best_in = order_cost(start, expand(best_order, gstart, gmem), self.compose, self.join, self.cost_table)
            if best_in == OVERFLOW:
                return None
            cur, best, scored = anneal(start, self.compose, self.join, self.cost_table, order, best_order,
                                       min(best_in, CAP), int(moves), float(t0), float(max(t1, 1e-9)), int(seed),
                                       int(window), self._log_room(len(order)), self.tables.joins_commute,
                                       gstart, gmem)
            return None if cur == OVERFLOW else (int(cur), int(best), int(scored))
        return self._after(prefix, run)

    def descend(self, order: np.ndarray, first: int = 0, limit: int | None = None, prefix=None,
                units=None) -> tuple[int, int, int, int]:
        """:func:`descend` on ``order`` (int64, updated in place) from position ``first``
        until the end of the order or ``limit`` targets scored (default: no limit), after
        ``prefix`` and with ``units`` as in :meth:`anneal`. Returns ``(cost, moves
        applied, next position, targets scored)``, the cost saturated at ``COST_CAP``."""
        gstart, gmem = units if units is not None else self.units()
        limit = 2**62 if limit is None else limit

        def run(start):
            c, moved, nxt, scored = descend(start, self.compose, self.join, self.cost_table, order, int(first),
                                            int(limit), gstart, gmem, self._log_room(len(order)))
            return None if c == OVERFLOW else (int(c), int(moved), int(nxt), int(scored))
        return self._after(prefix, run)

    def _after(self, prefix, run):
        """``run(state)`` on the state after eliminating ``prefix`` (default: none), the pools
        grown and both run again while either overflows (``run`` returns None then)."""
        prefix = np.zeros(0, np.int64) if prefix is None else np.asarray(prefix, np.int64)
        while True:
            start, flag = after(self.initial, prefix, self.compose, self.join, self.cost_table)
            out = run(start) if flag != OVERFLOW else None
            if out is not None:
                return out
            self.grow()

    def _log_room(self, n: int) -> int:
        """An undo log's first room for a search over ``n`` positions (tests shrink it)."""
        return int(self._log_entries or 16 * n + 1024)

    def dense_matrix(self) -> np.ndarray:
        """The ``[V, V]`` structure-id matrix of release 0.1.0's dense evaluator."""
        E = np.zeros((self.graph.num_vertices,) * 2, np.int64)
        E[self._edges[0], self._edges[1]] = self._edges[2]
        return E

    @staticmethod
    def _neighbours(state, v):
        """``([(pred, sid of pred -> v)], [(succ, sid of v -> succ)])`` of ``v`` in ``state``."""
        os_, _, _, od, osid, _, is_, il, _, isrc, itw, _ = state
        preds = [(int(isrc[is_[v] + a]), int(osid[os_[isrc[is_[v] + a]] + itw[is_[v] + a]]))
                 for a in range(il[v])]
        succs = [(int(od[os_[v] + b]), int(osid[os_[v] + b])) for b in range(state[_OL][v])]
        return preds, succs

    # -------------------------------------------------- exact paths past COST_CAP (Python)
    def _exact_state(self) -> dict:
        """The graph as ``{(src, dst): structure id}`` for the pure-Python paths."""
        return {(int(i), int(k)): int(s) for i, k, s in zip(*self._edges)}

    def _exact_step(self, E: dict, v: int) -> int:
        T, conv = self.tables, self.convention
        return sum(T.exact_cost(conv, a, b) for a, b in rl.eliminate_edges(E, v, self.compose, self.join))

    def _exact_vertex_cost(self, E: dict, v: int) -> int:
        T, conv = self.tables, self.convention
        preds = [s for (i, k), s in E.items() if k == v]
        succs = [s for (i, k), s in E.items() if i == v]
        return sum(T.exact_cost(conv, a, b) for b in preds for a in succs)

    def _exact_markowitz(self) -> list[int]:
        E = self._exact_state()
        remaining = set(self.graph.intermediates)
        order = []
        while remaining:
            v = min(remaining, key=lambda u: (self._exact_vertex_cost(E, u), u))
            self._exact_step(E, v)
            remaining.remove(v)
            order.append(int(v))
        return order
