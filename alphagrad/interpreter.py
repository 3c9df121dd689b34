"""Exact Jacobians by executing an elimination order on structured local Jacobians.

``jacobian(f, order)`` returns a function with the signature and output layout of
``jax.jacrev(f)``. It evaluates ``f``, builds every local partial Jacobian in its
structured form (a value tensor over the variables the structure keeps, or just a sign),
eliminates the intermediate vertices in ``order`` with exactly the products the cost model
counts (one einsum per product in which diagonal pairs share an index; factors without
value cost nothing), and expands the input->output Jacobians to JAX's dense layout only
at the end. It is plain JAX, so it composes with ``jax.jit`` and ``jax.vmap``.

What it emits is shaped by what XLA runs fast (issue 61): on a CPU each einsum is a dot in
the layout XLA:CPU's fast kernels take, or a fused broadcast product where none would
(:func:`_contract`), and in deep graphs a value several ops read is computed once only
when XLA would otherwise repeat many ops in each reader (:class:`_Fusion`). Where the order
follows an unrolled loop, the loop's iterations run as ``lax.scan``s (:data:`LOOP_SCAN`).
"""

from __future__ import annotations

import collections
import concurrent.futures
import functools
import os
from typing import Any, Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from alphagrad import primitives as prim
from alphagrad import rules
from alphagrad import structure as st
from alphagrad.scoring import resolve_order  # the one door, shared with alphagrad.cost
from alphagrad.graph import Graph
from alphagrad.trace import ConcreteValuesNeeded, trace

#: Graphs with more intermediates than this do not run as one jitted program: XLA's
#: compile of every local Jacobian and product in one program outgrows memory (RoeFlux_3d
#: x14, 2,219 intermediates: past 17 GB after 5 min; x3, 459: 0.3 GB above the process, 4 s).
CHUNK_ABOVE = 1000
#: How those graphs run. ``"chunks"``: as jitted chunks of at most ``CHUNK_PRODUCTS``
#: products (:class:`_Chunked`), each compiled chunk kept for later calls, so memory grows
#: with their number (RoeFlux_3d x14, 21 chunks: 1.2 GB peak, 32 s first call, 47 ms per
#: call; x36, 103 chunks: 3.5 GB, 308 s, 1.1 s). ``"eager"``: op by op on JAX's kernels
#: compiled per primitive and shapes, no program compiled (x14: 0.74 GB, 6.6 s, 4.2 s per
#: call; x36: 0.80 GB, 39 s, 14 s per call). ``"auto"``: chunks up to ``MAX_CHUNKS``
#: chunks, else eager. Peaks include the 0.5 GB of the process after ``import alphagrad``.
LARGE_GRAPHS = "auto"
#: Most chunks ``"auto"`` compiles and keeps (about 1.5 GB peak at 32 on RoeFlux_3d).
MAX_CHUNKS = 128
#: Products (einsums) per compiled chunk: bounds the size of each program XLA compiles.
CHUNK_PRODUCTS = 1000


def _abstract(args):
    return jax.tree_util.tree_map(lambda a: jax.ShapeDtypeStruct(jnp.shape(a), jnp.result_type(a)), args)


def _graph_at(f, args) -> Graph:
    """The graph of ``f`` at ``args``: from their shapes alone, or at their values where a
    lax.cond/lax.switch chooses its branch from them (the graph is the branch taken)."""
    try:
        return trace(f, *_abstract(args))
    except ConcreteValuesNeeded:
        return trace(f, *args)


def _takes_same_branches(graph: Graph, leaves) -> bool:
    """Whether the point ``leaves`` takes every argument-dependent branch ``graph`` took."""
    if not any(b.on_arguments for b in graph.branches):
        return True
    now = graph.program.branches_at(leaves)
    return all(t is None or t == b.taken for t, b in zip(now, graph.branches))


def _edge_values(graph: Graph, slots: dict, fusion):
    """Structure and value of every edge of ``graph`` at the evaluated ``slots``."""
    return {(e.src, e.dst): (e.structure, _local(graph, e, slots, fusion)) for e in graph.edges}


def _local(graph: Graph, e, slots: dict, fusion):
    """:func:`_edge_value`, recorded in ``fusion`` as computed from the slots it reads."""
    value = _edge_value(graph, e, slots)
    return fusion.made(value, [slots[r] for r in _edge_slots(graph, e)]) if fusion.on else value


def _edge_value(graph: Graph, e, slots: dict):
    """The value of the local Jacobian on edge ``e`` at the evaluated ``slots``."""
    program = graph.program
    read = lambda ref: ref[1] if isinstance(ref, tuple) else slots[ref]
    total = None
    for step_id, argnum, outnum in program.edge_sources.get((e.src, e.dst), ()):
        if step_id in program.digit_reshapes:  # a relabelling of digits: no value
            continue
        step = program.steps[step_id]
        s = prim.structures(step.equation, argnum)[outnum]
        if s.index_map:
            value = prim.map_value(step.equation, argnum, outnum, s)
        else:
            value = prim.local_value(step.equation, argnum, outnum, s, [read(r) for r in step.inputs])
        s, value = program.refined(s, value, e.src, e.dst)
        if e.structure.value_vars is not None:
            value = _embed_value(s, value, e.structure)
            total = value if total is None else _add_values(total, value)
    return total  # None for an output copy (identity) or a structure without value


def _edge_slots(graph: Graph, e) -> set:
    """The slots :func:`_edge_value` reads for edge ``e``."""
    program = graph.program
    return {r for step_id, _, _ in program.edge_sources.get((e.src, e.dst), ())
            for r in program.steps[step_id].inputs if not isinstance(r, tuple)}


def _evaluate(graph: Graph, leaves, fusion, primals=()) -> dict:
    """Every slot's value, running the traced program on the flattened inputs; the steps
    of each :class:`_Primal` in ``primals`` as a scan (their slots then rows of its
    stacked outputs, see :class:`_Rows`)."""
    program = graph.program
    slots = _Rows(zip(program.input_slots, leaves), fusion)
    for leaf in leaves:
        fusion.made(leaf, ())
    readers = collections.Counter()
    if fusion.on:
        readers.update(r for step in program.steps for r in step.inputs if not isinstance(r, tuple))
        readers.update(r for e in graph.edges for r in _edge_slots(graph, e))
    windows = {w.start: w for w in primals}
    k = 0
    while k < len(program.steps):
        if k in windows:
            _run_primal(graph, windows[k], slots, fusion)
            k = windows[k].stop
            continue
        _run_step(program.steps[k], slots, slots, fusion, readers)
        k += 1
    return slots


def _run_step(step, slots: dict, outer: dict, fusion, readers):
    """Runs one step of the program, reading ``slots`` (else ``outer``), writing ``slots``."""
    inputs = [r[1] if isinstance(r, tuple) else slots[r] if r in slots else outer[r] for r in step.inputs]
    own = step.equation.primitive.name in _OWN_KERNEL
    for o, v in zip(step.outputs, step.equation.bind(*inputs)):
        slots[o] = fusion.shared(fusion.made(v, inputs, own), readers[o])


def accumulate(graph: Graph, order: Sequence[int], leaves):
    """Eliminates ``order`` on the local Jacobians at ``leaves`` (flattened inputs).

    Returns ``(edges, outputs, multiplications)``: the remaining input->output edges as
    ``{(input, output): (structure, value)}``, the output values, and the scalar
    multiplications the products issued (counted from the einsums emitted).
    """
    fusion = _fusion(graph)
    slots = _evaluate(graph, leaves, fusion)
    edges, mults = _eliminate(graph, order, _edge_values(graph, slots, fusion), _join_values, fusion=fusion)
    outputs = []
    for v in graph.output_vertices:
        slot = graph.program.vertex_slot[v]
        outputs.append(None if slot is None else slots[slot])
    return edges, outputs, mults


def _join_values(so, vo, sp, vp, sj):
    """The value of an existing edge ``(so, vo)`` plus a new product ``(sp, vp)``, in the
    layout of their join ``sj`` (no multiplications)."""
    if sj.value_vars is None:
        return vp
    return _add_values(_embed_value(so, vo, sj), _embed_value(sp, vp, sj))


def _add_values(a, b):
    """``a + b`` in one layout, where an index map embedded by :func:`_embed_value` (a
    static array) is added at its nonzeros, not as a constant array. A value, never static:
    only an index map's value is."""
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        return jnp.asarray(a + b, jnp.float32)
    if isinstance(a, np.ndarray):
        a, b = b, a
    if isinstance(b, np.ndarray):
        where = np.nonzero(b)
        return a.at[where].add(jnp.asarray(b[where], a.dtype))
    return a + b


#: Graphs at least this deep (longest path, in edges: ``Graph.depths``) compute a
#: shared value once (:func:`_shared`). Shallower ones leave fusion to XLA: on the six
#: published tasks ``eval.bench_jacobian`` times (depth 9-30, calls under a millisecond)
#: the extra kernels gained nothing and measured up to 1.3x slower at batch 512 in
#: side-by-side runs, while a 2-step PendulumChain_RK4 (depth 48) went from 8.8 to
#: 3.3 ms. (Of the published tasks only Encoder, depth 69, is deeper.)
SHARE_DEPTH = 40


def _shares(graph: Graph) -> bool:
    """Whether ``graph`` is deep enough to compute shared values once (:data:`SHARE_DEPTH`)."""
    return graph.depths[0].max(initial=0) >= SHARE_DEPTH


#: In graphs that share (:func:`_shares`), a value two or more ops read is computed once
#: when XLA would otherwise inline more than this many ops into each reader (its weight,
#: see :class:`_Fusion`). Reverse order against jax.jacrev, single calls side by side on
#: a shared 2-core CPU, limit 1 (a kernel for nearly every shared value, as before) / 16 /
#: 64 / 256: PendulumChain_RK4 at batch 1, 2.5x / 2.6x / 2.2x / 1.9x (1,655 / 1,076 /
#: 988 / 936 fusions); at batch 256, 1.14x / 0.61x / 0.56x / 0.59x; Encoder at batch
#: 256, 1.04x / 0.93x / 0.90x / 0.90x, never sharing 0.89x (but never sharing
#: PendulumChain_RK4: 1.9 s a call, its ops inlined again and again).
SHARE_WEIGHT = 64
#: Primitives XLA computes in a kernel of their own, never inlined into their readers.
_OWN_KERNEL = frozenset({"reduce_sum", "reduce_max", "reduce_min", "reduce_prod", "argmax", "argmin",
                         "dot_general", "conv_general_dilated", "cumsum", "cumprod", "cummax", "cummin",
                         "sort", "scatter-add", "scatter_add", "scatter"})


def _fusion(graph: Graph) -> "_Fusion":
    """What :class:`_Fusion` computes once in ``graph``: nothing in shallow graphs."""
    return _Fusion(_shares(graph), SHARE_WEIGHT)


def _own_kernel(p) -> bool:
    """Whether product ``p`` sums (a dot or a reduction: a kernel of its own in XLA)."""
    la, lb, lout = p.einsum
    if lout is None or any(p.maps):
        return False
    return bool((set(la or ()) | set(lb or ())) - set(lout))


def _shared(value, readers: int):
    """``value``, computed once if it is traced and ``readers`` >= 2 ops read it.

    XLA:CPU fuses a chain of elementwise ops, pads and slices into each of its consumers
    and computes it again there, chains within chains over a long program and its
    elimination, and drops ``optimization_barrier`` before fusing; it never fuses a
    reduction into its consumers. So a shared value is summed with zeros (one addition
    per entry, no multiplication). An annealed PendulumChain_RK4 order at batch 512:
    3.8 s a call and 274 s to compile without, 24 ms and 18 s with (jacrev: 31 ms).

    Which sum: XLA:CPU hands a plain sum of 4,096 entries or more (a stacked pair of
    2,048) to YNNPACK, as a kernel of its own after one that stacks the zeros, 14 ns
    per entry for a [1, 2, 65536] sum (0.9 ms; NeuralCA_Conv's reverse order at batch 1:
    2.1x jax.jacrev's time, 1.07x with :func:`_once`). :func:`_once` keeps it out (0.2 ms
    for 100 of them at [1, 65536], against 1.5 ms) but costs 0.3 us more than a small
    plain sum fused with its stacking (PendulumChain_RK4 at batch 1: 0.60 ms against
    0.47 ms). So on a CPU values of 2,048 entries or more (per sample) take
    :func:`_once`, smaller ones and other platforms the plain sum."""
    if readers < 2 or not isinstance(value, jax.core.Tracer) or value.dtype == bool:  # op by op, or static
        return value
    if value.size >= 2048 and jax.default_backend() == "cpu" and jnp.issubdtype(value.dtype, jnp.inexact):
        return _once(value)
    return jnp.sum(jnp.stack([value, jnp.zeros_like(value)]), axis=0, dtype=value.dtype)


def _keep_sum(a, b):
    """``a + b`` (``a`` where ``a`` is NaN, where the sum is NaN too), written so that
    XLA does not take it for a plain sum."""
    return jax.lax.select(a == a, a + b, a)


@jax.custom_jvp
def _once(value):
    """``value`` summed with zeros by a reduction that XLA:CPU computes itself, in one
    kernel with ``value``'s own ops (its reducer is no plain sum, so no YNNPACK)."""
    stacked = jnp.stack([value, jnp.zeros_like(value)])
    return jax.lax.reduce(stacked, np.zeros((), value.dtype), _keep_sum, (0,))


_once.defjvp(lambda primals, tangents: (_once(primals[0]), tangents[0]))


class _Fusion:
    """Which shared values to compute once (:func:`_shared`): those whose inlined
    expression XLA would repeat in every reader is longer than ``limit`` ops.

    Each traced value gets a weight, the ops XLA would inline into a reader: 1 for an
    input or a value XLA computes in a kernel of its own (a reduction, a dot, a shared
    value), else one more than the weights of the values it is computed from. Only a
    value read at least twice with a weight above ``limit`` costs a kernel, so what XLA
    computes again stays bounded (``limit`` ops per reader) without a kernel per shared
    value (PendulumChain_RK4 at batch 1: 1,647 of them, 0.8 us each). Unknown values
    weigh ``limit + 1``. ``on`` False: nothing is shared."""

    def __init__(self, on: bool, limit: int):
        self.on, self.limit = on, limit
        self.weights: dict = {}  # id(value) -> (value, weight); the value keeps the id

    def weight(self, value) -> int:
        """The ops XLA would inline into a reader of ``value`` (0 for a static value)."""
        if value is None or not isinstance(value, jax.core.Tracer):
            return 0
        got = self.weights.get(id(value))
        return self.limit + 1 if got is None else got[1]

    def made(self, value, sources, own_kernel: bool = False):
        """Records ``value``, computed from ``sources`` (in a kernel of its own or not)."""
        if self.on and isinstance(value, jax.core.Tracer):
            w = 1 if own_kernel else 1 + sum(self.weight(x) for x in sources)
            self.weights[id(value)] = (value, w)
        return value

    def shared(self, value, readers: int):
        """``value`` as ``readers`` ops read it: computed once if it weighs too much."""
        if not self.on or readers < 2 or self.weight(value) <= self.limit:
            return value
        return self.made(_shared(value, readers), (), own_kernel=True)


def _eliminate(graph: Graph, order: Sequence[int], edges: dict, join, product=None, on_vertex=None, fusion=None):
    """The elimination loop of :func:`accumulate` on ``edges`` (``{(src, dst): (structure,
    value)}``, consumed): every product through ``product`` (``structure.product_value``,
    the one function that emits, and counts, the einsums); ``join`` sums a product into an
    existing edge; ``on_vertex(j, products)`` is told each vertex before it goes. Returns
    the remaining edges and the multiplications issued."""
    tables = rules.tables(graph)
    product = product or _product
    preds: dict[int, set] = {v: set() for v in range(graph.num_vertices)}
    succs: dict[int, set] = {v: set() for v in range(graph.num_vertices)}
    for i, k in edges:
        preds[k].add(i)
        succs[i].add(k)
    mults = 0
    fusion = fusion or _Fusion(False, 0)
    for j in order:
        if on_vertex is not None:
            on_vertex(j, len(preds[j]) * len(succs[j]))
        if fusion.on:  # each (i, j) is read by a product per successor, each (j, k) per predecessor
            for i in preds[j]:
                s, v = edges[(i, j)]
                edges[(i, j)] = (s, fusion.shared(v, len(succs[j])))
            for k in succs[j]:
                s, v = edges[(j, k)]
                edges[(j, k)] = (s, fusion.shared(v, len(preds[j])))
        for i in sorted(preds[j]):
            sb, vb = edges.pop((i, j))
            for k in sorted(succs[j]):
                sa, va = edges[(j, k)]
                p = tables.products[(tables.index(sa), tables.index(sb))]
                value, m = product(p, va, vb)
                value = fusion.made(value, (va, vb), _own_kernel(p))
                mults += m
                if (i, k) in edges:
                    so, vo = edges[(i, k)]
                    sj = tables.structures[tables.join[tables.index(so), tables.index(p.result)]]
                    edges[(i, k)] = (sj, fusion.made(join(so, vo, p.result, value, sj), (vo, value)))
                else:
                    edges[(i, k)] = (p.result, value)
                    preds[k].add(i)
                    succs[i].add(k)
            succs[i].discard(j)
        for k in succs[j]:
            edges.pop((j, k))
            preds[k].discard(j)
        preds[j], succs[j] = set(), set()
    return edges, mults


class _Chunk(NamedTuple):
    order: tuple  # the vertices this chunk eliminates, in order
    carried: dict  # {edge: structure} read from earlier chunks' results, in order of first read
    initial: tuple  # edges (graph.Edge) whose local Jacobian this chunk evaluates
    slots: tuple  # the slots those local Jacobians read
    results: dict  # {edge: structure} this chunk creates or updates that later chunks or the layout read


def _plan(graph: Graph, order: Sequence[int], max_products: int, starts=None):
    """Splits ``order`` into chunks of at most ``max_products`` products (or one vertex),
    or, given ``starts``, at those positions of ``order`` (a new chunk at each).

    Runs :func:`_eliminate` itself on structures alone (no values, no products computed),
    on an edge map that records what each chunk reads first and what it writes.
    Returns ``(chunks, remaining)``: the :class:`_Chunk` list and ``{edge: structure}``
    of the edges left at the end, which are carried or still initial."""
    pending = {(e.src, e.dst): e for e in graph.edges}  # local Jacobians not yet evaluated
    chunks: list = []
    part: dict = {}

    def start():
        part.update(order=[], carried={}, initial=[], fresh=set(), written={}, products=0)

    def read(key):  # the first read of ``key`` in this chunk, at its structure then
        if key in part["written"] or key in part["carried"] or key in part["fresh"]:
            return
        if key in pending:
            part["initial"].append(pending.pop(key))
            part["fresh"].add(key)
        else:
            part["carried"][key] = dict.__getitem__(edges, key)[0]

    def close():
        slots = set()
        for e in part["initial"]:
            slots |= _edge_slots(graph, e)
        results = {k: dict.__getitem__(edges, k)[0] for k in part["written"] if k in edges}
        chunks.append(_Chunk(tuple(part["order"]), dict(part["carried"]), tuple(part["initial"]),
                             tuple(sorted(slots)), results))

    class Recorded(dict):
        def __getitem__(self, key):
            read(key)
            return dict.__getitem__(self, key)

        def pop(self, key):
            read(key)
            return dict.pop(self, key)

        def __setitem__(self, key, value):
            part["written"][key] = None
            dict.__setitem__(self, key, value)

    def on_vertex(j, products):
        full = part["products"] + products > max_products if starts is None else len(done) in starts
        if part["order"] and full:
            close()
            start()
        part["order"].append(j)
        part["products"] += products
        done.append(j)

    done: list = []
    start()
    edges = Recorded({(e.src, e.dst): (e.structure, None) for e in graph.edges})
    _eliminate(graph, order, edges, lambda *a: None, lambda p, va, vb: (None, 0), on_vertex)
    if part["order"]:
        close()
    return chunks, {key: s for key, (s, _) in dict.items(edges)}


def _forward(graph: Graph, needed: tuple, leaves):
    """The slots ``needed`` (and the output values) of the traced program at ``leaves``."""
    slots = _evaluate(graph, leaves, _fusion(graph))
    outputs = [None if s is None else slots[s] for s in (graph.program.vertex_slot[v] for v in graph.output_vertices)]
    return {s: slots[s] for s in needed}, outputs


def _run_chunk(graph: Graph, chunk: _Chunk, counts: list, statics: dict, c: int, carried: list, slots: list):
    """Eliminates ``chunk.order`` on the carried values (in ``chunk.carried``'s order) and
    the local Jacobians it evaluates from ``slots`` (in ``chunk.slots``' order); returns
    the values of ``chunk.results``. Records the multiplications the products issued
    (known when traced) in ``counts[c]``. Index maps' static tables pass between chunks
    in ``statics`` (by edge; None in their place among the values)."""
    edges = {key: (s, statics[key] if s.index_map else v) for (key, s), v in zip(chunk.carried.items(), carried)}
    slots = dict(zip(chunk.slots, slots))
    fusion = _fusion(graph)
    for e in chunk.initial:
        edges[(e.src, e.dst)] = (e.structure, _local(graph, e, slots, fusion))
    edges, mults = _eliminate(graph, chunk.order, edges, _join_values, fusion=fusion)
    counts[c] = mults
    results = []
    for key in chunk.results:
        value = edges[key][1]
        if isinstance(value, np.ndarray):
            statics[key], value = value, None
        results.append(value)
    return results


def _release_memory():
    """Hands the C heap's free pages back to the system (glibc's ``malloc_trim``): XLA's
    compiler frees most of what it allocates for a chunk, but glibc keeps it resident
    (RoeFlux_3d x14 in chunks: 0.86 GB -> 0.58 GB once executables and caches are freed)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: nothing to do
        pass


class _Chunked:
    """The Jacobian of a large graph as a sequence of jitted programs of bounded size.

    One jitted forward pass gives the slots that local Jacobians read; then each chunk of
    the order (at most ``max_products`` products) is one jitted program that evaluates
    the local Jacobians it first reads, eliminates its vertices and returns only the edge
    values later chunks or the layout read; a last one lays the Jacobian out. The
    products, and so the multiplications, are those of :func:`accumulate`: its loop
    (:func:`_eliminate`) runs on each chunk's edges. Calls ``layout(edges, outputs,
    leaves)`` at the end (under jit) when given, else returns what accumulate returns.
    """

    def __init__(self, graph: Graph, order: Sequence[int], max_products: int, layout=None):
        self.chunks, self.remaining = _plan(graph, order, max_products)
        self.counts = [None] * len(self.chunks)
        self.statics: dict = {}
        self.compiled = [None] * len(self.chunks)
        pending = {(e.src, e.dst): e for e in graph.edges}
        for chunk in self.chunks:
            for e in chunk.initial:
                pending.pop((e.src, e.dst))
        self.last = tuple(pending[k] for k in self.remaining if k in pending)
        self.last_slots = tuple(sorted(set().union(*[_edge_slots(graph, e) for e in self.last])))
        needed = set(self.last_slots).union(*[c.slots for c in self.chunks])
        # the plain functions run inline under a caller's jit or vmap (a nested jit there
        # would be traced once, then traced again by vmap's batching); jitted when called eagerly
        self.plain = (functools.partial(_forward, graph, tuple(sorted(needed))),
                      [functools.partial(_run_chunk, graph, chunk, self.counts, self.statics, c)
                       for c, chunk in enumerate(self.chunks)],
                      functools.partial(self._finish, graph, layout))
        self.forward = jax.jit(self.plain[0])
        self.steps = [jax.jit(step) for step in self.plain[1]]
        self.layout = layout
        self.finish = jax.jit(self.plain[2])

    def _finish(self, graph, layout, carried, slots, outputs, leaves):
        edges = {key: (s, self.statics[key] if s.index_map else carried[key])
                 for key, s in self.remaining.items() if key in carried}
        for e in self.last:
            edges[(e.src, e.dst)] = (e.structure, _edge_value(graph, e, slots))
        if layout is None:
            return {key: v for key, (_, v) in edges.items()}, outputs
        return layout(edges, outputs, leaves)

    def _compile(self, slots):
        """Compiles every chunk ahead of its first run, keeping only the executables.

        The chunks are lowered one after the other on abstract values (each reads the
        shapes of earlier chunks' results, and index maps' tables pass between them),
        then compiled side by side on a pool of threads, as XLA's compiler runs without
        the GIL. A 2,798-intermediate N-body Jacobian (11 chunks) on 2 cores: XLA's
        compiles 65 s one after the other (``python -m eval.bench_scale`` measures the pool)."""
        abstract = lambda x: None if x is None else jax.ShapeDtypeStruct(x.shape, x.dtype)
        env, lowered = {}, []
        for c, chunk in enumerate(self.chunks):
            args = ([env.pop(k) for k in chunk.carried], [abstract(slots[s]) for s in chunk.slots])
            lowered.append(self.steps[c].lower(*args))
            env.update(zip(chunk.results, map(abstract, lowered[-1].out_info)))
        workers = max(1, min(len(lowered), os.cpu_count() or 1))
        with concurrent.futures.ThreadPoolExecutor(workers) as pool:
            self.compiled = list(pool.map(lambda low: low.compile(), lowered))
        del lowered
        _release_memory()

    @property
    def multiplications(self) -> int:
        """The multiplications the chunks issued (after the first call)."""
        return sum(self.counts)

    def __call__(self, leaves):
        traced = any(isinstance(l, jax.core.Tracer) for l in leaves)  # under jit/vmap
        forward, steps, finish = self.plain if traced else (self.forward, self.compiled, self.finish)
        slots, outputs = forward(leaves)
        if not traced and self.compiled[0] is None:
            self._compile(slots)
            steps = self.compiled
        env = {}
        for c, chunk in enumerate(self.chunks):
            args = ([env.pop(k) for k in chunk.carried], [slots[s] for s in chunk.slots])
            env.update(zip(chunk.results, steps[c](*args)))
        result = finish(env, {s: slots[s] for s in self.last_slots}, outputs, leaves)
        if self.layout is not None:
            return result
        values, outputs = result
        return ({key: (s, self.statics[key] if s.index_map else values[key]) for key, s in self.remaining.items()},
                outputs, self.multiplications)


def _large(graph: Graph, order: Sequence[int], layout):
    """How a graph above ``CHUNK_ABOVE`` runs (see ``LARGE_GRAPHS``): a :class:`_Chunked`
    or a function running :func:`accumulate` and ``layout`` op by op."""
    if LARGE_GRAPHS not in ("auto", "chunks", "eager"):
        raise ValueError(f"interpreter.LARGE_GRAPHS must be 'auto', 'chunks' or 'eager', not {LARGE_GRAPHS!r}")
    if LARGE_GRAPHS != "eager":
        chunked = _Chunked(graph, order, CHUNK_PRODUCTS, layout)
        if LARGE_GRAPHS == "chunks" or len(chunked.chunks) <= MAX_CHUNKS:
            return chunked
    return lambda leaves: layout(*accumulate(graph, order, leaves)[:2], leaves)


def executed_multiplications(f: Callable, order, *args) -> int:
    """Scalar multiplications :func:`jacobian` issues for ``order`` on ``f(*args)``.

    Runs the interpreter's elimination loop (:func:`_eliminate`, the same einsums through
    ``structure.product_value``) under ``jax.eval_shape`` on placeholder values of each
    structure's value shape, so it counts from shapes without computing or allocating
    anything of the values' size (the local Jacobians are not evaluated, no index masks
    are built), independently of the cost model's tables of costs. ``args`` may be arrays
    or ``jax.ShapeDtypeStruct`` (unless a branch depends on their values).
    """
    graph = _graph_at(f, args)
    order = resolve_order(graph, order)
    count = []

    def placeholder(s):
        if s.index_map:  # a table of zeros: the products' shapes, nothing gathered
            return np.zeros(s.value_shape, np.int8)
        return None if s.value_vars is None else jnp.zeros(s.value_shape, jnp.float32)

    def join(so, vo, sp, vp, sj):  # the join's value shape, nothing computed
        return placeholder(sj) if sj.value_vars is not None else vp

    def run():
        edges = {(e.src, e.dst): (e.structure, placeholder(e.structure)) for e in graph.edges}
        count.append(_eliminate(graph, order, edges, join)[1])
        return 0

    jax.eval_shape(run)
    return count[0]



def jacobian(f: Callable, order: Any = "rev", argnums: int | Sequence[int] = 0, has_aux: bool = False):
    """The Jacobian of ``f`` by cross-country elimination in ``order``.

    Args:
      f: a JAX function (pytrees of float arrays in and out).
      order: ``"fwd"``, ``"rev"``, ``"markowitz"``, a sequence of vertex ids of
        ``alphagrad.trace(f, *args)``, or a result object with ``.order``.
      argnums: which positional arguments to differentiate with respect to.
      has_aux: ``f`` returns ``(output, aux)``; aux is returned unchanged.

    Returns:
      A function with the signature and output layout of
      ``jax.jacrev(f, argnums=argnums, has_aux=has_aux)``. The graph is traced, the order
      resolved and the computation jitted once per argument shapes and dtypes (cached), so
      calls outside ``jax.jit`` run compiled too; inside ``jax.jit``/``jax.vmap`` it
      composes as any JAX function. Graphs of more than ``CHUNK_ABOVE`` intermediates
      run as jitted chunks or op by op instead of one program (see ``LARGE_GRAPHS``): the
      same products, a bounded compile.
    """
    cache: dict = {}
    main = (lambda *a: f(*a)[0]) if has_aux else f

    def prepare(args, nums):
        """The graph, order and jitted Jacobian for these argument shapes (cached), and
        for the branches these argument values take where a branch depends on them."""
        abstract = _abstract(args)
        leaves, tree = jax.tree_util.tree_flatten(abstract)
        key = (tree, tuple((l.shape, str(l.dtype)) for l in leaves), nums)
        entries = cache.setdefault(key, [])
        values = jax.tree_util.tree_leaves(args)
        for entry in entries:
            if _takes_same_branches(entry[0], values):
                return entry
        graph = _graph_at(main, args)
        if entries and not isinstance(order, str):  # an explicit order fits one graph only
            why = entries[0][0].branch_mismatch(graph)
            if why:
                raise ValueError(why)
        ord_ = resolve_order(graph, order)
        arg_trees = [jax.tree_util.tree_structure(a) for a in abstract]
        offsets = np.cumsum([0] + [t.num_leaves for t in arg_trees])
        layout = functools.partial(_layout, graph, nums, arg_trees, offsets, isinstance(argnums, int))
        looped = _looped(graph, ord_)
        if looped is not None and looped.size <= CHUNK_ABOVE:
            compute = jax.jit(lambda leaves: layout(*looped(leaves)[:2], leaves))
        elif len(graph.intermediates) > CHUNK_ABOVE:
            compute = _large(graph, ord_, layout)
        else:
            compute = jax.jit(lambda leaves: layout(*accumulate(graph, ord_, leaves)[:2], leaves))
        entries.append((graph, ord_, compute))
        return entries[-1]

    @functools.wraps(f)
    def jac(*args):
        nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
        for n in nums:
            if not -len(args) <= n < len(args):
                raise ValueError(
                    f"argnums {argnums!r} is out of range for {len(args)} positional arguments"
                )
        nums = tuple(n % len(args) for n in nums)
        for n in nums:
            for leaf in jax.tree_util.tree_leaves(args[n]):
                dtype = jnp.result_type(leaf)
                if not jnp.issubdtype(dtype, jnp.inexact):
                    raise TypeError(
                        f"alphagrad.jacobian requires real-valued inputs (a sub-dtype of "
                        f"np.inexact) for the arguments it differentiates, but argument {n} "
                        f"has dtype {dtype}"
                    )
        _, _, compute = prepare(args, nums)
        result = compute([jnp.asarray(l) for l in jax.tree_util.tree_leaves(args)])
        if has_aux:
            return result, f(*args)[1]
        return result

    return jac


def _layout(graph, nums, arg_trees, offsets, single, edges, outputs, leaves):
    """Lays the input->output Jacobians ``edges`` out as jax.jacrev does."""
    blocks_per_output = []
    for o, ov in zip(graph.output_vertices, outputs):
        per_arg = []
        for n in nums:
            arg_leaves = []
            for leaf_id in range(offsets[n], offsets[n + 1]):
                iv = graph.input_vertices[leaf_id]
                dtype = _out_dtype(ov, leaves[leaf_id])
                if iv >= 0 and (iv, o) in edges:
                    s, v = edges[(iv, o)]
                    block = _to_dense(s, v).astype(dtype)  # on split axes: back to the shapes
                    block = jnp.reshape(block, tuple(graph.shapes[o]) + tuple(jnp.shape(leaves[leaf_id])))
                else:
                    block = jnp.zeros(tuple(graph.shapes[o]) + tuple(jnp.shape(leaves[leaf_id])), dtype)
                arg_leaves.append(block)
            per_arg.append(jax.tree_util.tree_unflatten(arg_trees[n], arg_leaves))
        blocks_per_output.append(per_arg[0] if single else tuple(per_arg))
    return jax.tree_util.tree_unflatten(graph.out_tree, blocks_per_output)


def _out_dtype(out_value, in_leaf):
    dtypes = [jnp.result_type(in_leaf)]
    if out_value is not None:
        dtypes.append(out_value.dtype)
    return jnp.result_type(*dtypes)


# --------------------------------------------------------------------------------------
# Products as XLA runs them fast.


class _Kernels:
    """``jax.numpy`` for ``structure.product_value``, whose einsums of two value tensors
    become what XLA:CPU runs fast (see :func:`_contract`); elsewhere (a TPU, a GPU)
    jnp's einsum as it is."""

    def __getattr__(self, name):
        return getattr(jnp, name)

    @staticmethod
    def einsum(*operands):
        if len(operands) == 3 and len(set(operands[1])) == len(operands[1]):
            return _rearranged(*operands)
        if len(operands) != 5 or jax.default_backend() != "cpu":
            return jnp.einsum(*operands)
        return _contract(*operands)


_KERNELS = _Kernels()


def _product(p, a_value, b_value):
    """``structure.product_value`` with its einsums emitted by :class:`_Kernels`."""
    return st.product_value(p, a_value, b_value, xp=_KERNELS)


def _contract(a, la, b, lb, lout):
    """``jnp.einsum(a, la, b, lb, lout)`` (distinct labels per operand) the way XLA:CPU
    runs it fast, with the same multiplications.

    Per sample the product is ``[M, K] x [K, N]`` after its batch axes (labels of both
    factors and the result). XLA:CPU runs a dot in one of four ways: YNNPACK where the
    left operand is laid out ``[batch, M, K]``, M, N > 1 and max(M, K, N) >= 8; a
    matrix-vector kernel where M or N is 1; a loop nest where both operands have a side
    of at most 3; else one call into Eigen per sample of a vmapped batch, about 0.5 us
    each (130 us for 256 samples of a 4 x 4 x 4 product). jnp.einsum's layout sends all
    of the Encoder's products there: its reverse order took 2.1x jax.jacrev's time at
    batch 256 (0.8x now). So a product one of the fast kernels takes is a dot laid out
    for it (transposing the fewest entries), and the others a broadcast multiply summed
    over the contracted axes, one fusion with the factors' own ops. Not every small
    product: summed, a matrix-vector product of 4,096 entries or more (a vmapped batch)
    becomes a YNNPACK reduction, about 20 us of thread wake-up each in a single call
    (MLP's reverse order: 1.22x jacrev's time at batch 256, 0.99x as a dot)."""
    la, lb, lout = list(la), list(lb), list(lout)
    a, la = _sum_alone(a, la, lb, lout)
    b, lb = _sum_alone(b, lb, la, lout)
    size = dict(zip(la, jnp.shape(a)))
    size.update(zip(lb, jnp.shape(b)))
    con = [l for l in la if l in lb and l not in lout]
    plan = _dot_layout(la, lb, lout, con, size) if con else None
    if plan is None:
        full = lout + con
        value = st._aligned(a, la, full, jnp) * st._aligned(b, lb, full, jnp)
        return jnp.sum(value, axis=tuple(range(len(lout), len(full)))) if con else value
    swap, lead, lhs, rhs, out = plan
    (x, lx), (y, ly) = ((b, lb), (a, la)) if swap else ((a, la), (b, lb))
    dims = ((tuple(lhs.index(l) for l in con), tuple(rhs.index(l) for l in con)),
            (tuple(range(len(lead))), tuple(range(len(lead)))))
    dtype = jnp.result_type(x, y)  # as jnp.einsum promotes
    value = jax.lax.dot_general(_placed(x, lx, lhs, size).astype(dtype), _placed(y, ly, rhs, size).astype(dtype), dims)
    return _permuted(value, out, lout)


def _fast_dot(m: int, k: int, n: int) -> bool:
    """Whether XLA:CPU runs an ``[M, K] x [K, N]`` dot (per batch entry, the left operand
    ``[batch, M, K]``) in a fast kernel: YNNPACK, matrix-vector or a small loop nest."""
    return min(m, n) == 1 or max(m, k, n) >= 8 or (min(m, k) <= 3 and min(k, n) <= 3)


def _dot_layout(la, lb, lout, con, size):
    """How :func:`_contract` lays a product out as a dot XLA:CPU runs fast, moving the
    fewest entries; None if no layout gets a fast kernel.

    Batch axes lead the dot: the labels of both factors and the result, and possibly a
    leading run of the result's labels that only one factor has (the other factor is
    broadcast along them, which costs no multiplication): a product contracting an
    axis in the middle of the larger factor then needs no transpose of it
    (NeuralCA_Conv's reverse order at batch 1: 1.14x jax.jacrev's time without, 0.91x
    with; each of 15 products transposed 262,144 entries in and 196,608 out). Returns
    ``(swap, batch, lhs, rhs, out)``: whether ``b`` is the left operand, the batch
    labels, the two operands' and the dot result's label orders."""
    total = lambda labels: int(np.prod([size[l] for l in labels]))
    grows = lambda to, mine, other: len(to) > len(mine) and total(to) > total(other)
    batch = [l for l in lout if l in la and l in lb]
    best = None
    for j in range(len(lout) + 1):
        lead = lout[:j] + [l for l in batch if l not in lout[:j]]
        for swap, (lx, ly) in enumerate(((la, lb), (lb, la))):
            xf = [l for l in lx if l not in lead and l not in con]
            yf = [l for l in ly if l not in lead and l not in con]
            lhs, out = lead + xf + con, lead + xf + yf
            if not _fast_dot(total(xf), total(con), total(yf)):
                continue
            if grows(lhs, lx, ly) or grows(lead + con + yf, ly, lx):
                continue  # a factor is broadcast to no more entries than the other has
            for rhs in (lead + con + yf, lead + yf + con):  # XLA's fast dots take either
                moved = (lhs != lx) * total(lhs) + (rhs != ly) * total(rhs) + (out != lout) * total(lout)
                if best is None or (moved, j) < best[0]:
                    best = ((moved, j), (bool(swap), lead, lhs, rhs, out))
    return None if best is None else best[1]


def _placed(x, labels, to, size):
    """``x`` (axes ``labels``) with its axes in the order ``to``, broadcast along the
    labels of ``to`` it lacks."""
    x = _permuted(x, labels, [l for l in to if l in labels])
    if len(to) == len(labels):
        return x
    x = jnp.reshape(x, [size[l] if l in labels else 1 for l in to])
    return jnp.broadcast_to(x, [size[l] for l in to])


def _rearranged(x, labels, lout):
    """``jnp.einsum(x, labels, lout)`` for distinct ``labels``: a sum over the labels that
    leave, then a transpose (no multiplication). The same program as jnp.einsum's, traced
    in a tenth of the time (jnp.einsum plans and jits each call: 1.6 ms of Python, 5 of
    the 19 s of tracing a 2,798-intermediate N-body Jacobian)."""
    x, labels = _sum_alone(x, list(labels), [], list(lout))
    return _permuted(x, labels, list(lout))


def _sum_alone(x, lx, other, lout):
    """``x`` summed over its labels in neither ``other`` nor ``lout`` (no multiplication)."""
    gone = [i for i, l in enumerate(lx) if l not in other and l not in lout]
    if not gone:
        return x, lx
    return jnp.sum(x, axis=tuple(gone)), [l for l in lx if l in other or l in lout]


def _permuted(x, labels, to):
    """``x`` (axes ``labels``) with its axes in the order ``to``."""
    return x if labels == to else jnp.transpose(x, [labels.index(l) for l in to])


# --------------------------------------------------------------------------------------
# Layout changes. The same values as ``structure.embed_value`` and ``structure.to_dense``
# (no multiplications), emitted as transpose + reshape + broadcast + select instead of a
# gather with constant index arrays: XLA fuses these into their consumers (measured:
# RoeFlux_3d and MLP a few percent to ~20% faster at batch 512, none slower).


def _spread(value, positions, shape, mask):
    """An array of ``shape`` whose axis ``positions[i]`` indexes axis ``i`` of ``value``
    (positions distinct; broadcast along the other axes), zero where the constant
    boolean ``mask`` is False: ``value[grid[positions]]`` without a gather."""
    value = jnp.asarray(value)
    perm = sorted(range(len(positions)), key=positions.__getitem__)
    if perm != list(range(len(perm))):
        value = jnp.transpose(value, perm)
    sizes = [1] * len(shape)
    for i, pos in enumerate(positions):
        sizes[pos] = shape[pos]
    out = jnp.broadcast_to(jnp.reshape(value, sizes), shape)
    if not mask.all():
        out = jnp.where(jnp.asarray(mask), out, jnp.zeros((), out.dtype))
    return out


def _embed_value(src: st.Structure, value, dst: st.Structure):
    """``structure.embed_value(src, value, dst)`` without a gather (an index map's table:
    statically, with its sign)."""
    if src == dst:
        return value
    if isinstance(value, np.ndarray):
        return st.embed_value(src, value.astype(np.int64), dst, xp=np)
    shape = dst.value_shape
    gather, masks = st.embed_index(src, dst)
    grid = np.indices(shape, sparse=True) if shape else []
    mask = np.ones(shape, dtype=bool)
    for group in masks:
        for other in group[1:]:
            mask = mask & (grid[group[0]] == grid[other])
    if src.value_vars is None:
        vals = jnp.broadcast_to(jnp.asarray(float(src.sign)), shape)
        return jnp.where(jnp.asarray(mask), vals, jnp.zeros((), vals.dtype)) if not mask.all() else vals
    return _spread(value, gather, shape, mask)


def _to_dense(s: st.Structure, value=None):
    """``structure.to_dense(s, value)`` without a gather."""
    shape = s.out_shape + s.in_shape
    _, mask, first = st.dense_layout(s)
    if s.value_vars is None:
        return jnp.where(jnp.asarray(mask), float(s.sign), 0.0)
    value = jnp.asarray(st.signed(s, value))
    if tuple(value.shape) != s.value_shape:
        raise ValueError(f"value has shape {value.shape}, structure needs {s.value_shape}")
    return _spread(value, [first[v] for v in s.value_vars], shape, mask)


# --------------------------------------------------------------------------------------
# A loop's eliminations as a lax.scan.

#: When :func:`jacobian` runs an unrolled loop as ``lax.scan``s where the order eliminates
#: it iteration after iteration with the same pattern (:func:`_looped`): the primal steps
#: of the repeating iterations as one scan (:func:`_primal_plan`), their eliminations as
#: another (:func:`_loop_plan`), with the same products; else, and wherever a condition
#: fails, the unrolled program. ``"reverse"`` (the default): loops whose iterations are
#: eliminated last to first, as a reverse order does, in every graph; loops eliminated
#: first to last only in graphs of more than ``CHUNK_ABOVE`` intermediates, which would
#: otherwise run as chunks (an N-body RK4 of 150 steps, 10,498 intermediates, forward
#: order: one program compiled in 3.2 s, 19.5 ms a call, against chunks compiled in 68 s
#: on 13 cores, 79 ms a call). Measured side by side on 2 cores (reverse order, scan /
#: unrolled / jax.jacrev): NeuralCA_Conv at batch 64 1.24 / 1.76 / 1.28 s a call, 291 /
#: 1,394 / 280 MiB, compiled in 2.2 / 4.8 / 0.7 s; PendulumChain_RK4 at batch 1 0.58 /
#: 0.89 / 0.56 ms, at 256 16.3 / 18.6 / 34.5 ms; NBodySolar_RK4 at 256 299 / 346 / 348
#: ms, compiled in 2.6 / 9.5 / 1.0 s. A forward order's scan wins at batch 1 and on
#: NeuralCA_Conv but loses at a batch (at 256, scan / unrolled: PendulumChain_RK4 21.2 /
#: 15.0 ms, NBodySolar_RK4 280 / 189 ms), so small graphs keep it unrolled.
#: ``"large"``: scans only in graphs of more than ``CHUNK_ABOVE`` intermediates;
#: ``"always"``; ``"never"``.
LOOP_SCAN = "reverse"
#: Iterations per trip of the emitted scans' loops (``lax.scan``'s ``unroll``): 1, since
#: 2 and 4 compiled 1.4x / 1.2x longer (PendulumChain_RK4 at batch 256) for calls within
#: the noise (12.7 / 18.0 ms against 14.3 ms, medians of 30 interleaved calls).
SCAN_UNROLL = 1
#: Fewest consecutive iterations run as one scan.
MIN_SCAN = 2
#: Most iterations peeled off either end of a run of iterations to find a window whose
#: iterations pass their state the same way (e.g. the first, which reads the loop's
#: initial values from elsewhere).
MAX_PEEL = 3


class _Loop(NamedTuple):
    """Chunks ``first..last`` (one loop iteration each) run as one ``lax.scan`` of the
    body of chunk ``first`` (the template), per iteration through ``maps[t]``."""

    first: int
    last: int
    maps: tuple  # per chunk: (vertex map, slot map) from the template's to that chunk's
    carry: tuple  # (carried key of the template, result key of the template that feeds it)
    outer: tuple  # carried keys of the template read from before the loop (stacked, per iteration)
    ys: tuple  # result keys of the template read after the loop (stacked, per iteration)


def _same(a, b) -> bool:
    """Whether two static values (parameters, literals) are equal, arrays included."""
    if isinstance(a, (np.ndarray, jax.Array)) or isinstance(b, (np.ndarray, jax.Array)):
        a, b = np.asarray(a), np.asarray(b)
        return a.shape == b.shape and a.dtype == b.dtype and bool(np.array_equal(a, b))
    if type(a) is not type(b):
        return False
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - values without a plain equality: not the same
        return a is b


def _same_equation(x, y) -> bool:
    """Whether two steps' equations compute the same function (their sources aside)."""
    return (x.primitive is y.primitive and x.in_shapes == y.in_shapes and x.in_dtypes == y.in_dtypes
            and x.out_shapes == y.out_shapes and x.out_dtypes == y.out_dtypes
            and _same(x.params, y.params) and _same(x.in_literals, y.in_literals))


class _Mapping:
    """A one-to-one map (vertices, or slots) built pair by pair; ``ok`` False once a pair
    contradicts it."""

    def __init__(self):
        self.to, self.back, self.ok = {}, {}, True

    def add(self, a, b):
        if self.to.setdefault(a, b) != b or self.back.setdefault(b, a) != a:
            self.ok = False

    def add_inputs(self, a: tuple, b: tuple) -> bool:
        """Pairs the slots two steps read (their ``inputs``); False where one reads a
        constant (a tuple) and the other a slot."""
        for ra, rb in zip(a, b):
            if isinstance(ra, tuple) != isinstance(rb, tuple):
                return False
            if not isinstance(ra, tuple):
                self.add(ra, rb)
        return True


def _chunk_map(graph: Graph, tmpl: _Chunk, chunk: _Chunk):
    """``(vertex map, slot map)`` under which ``chunk`` does what the template ``tmpl``
    does (the same eliminations on edges of the same structures, local Jacobians of the
    same equations on corresponding slots), or None."""
    if (len(tmpl.order), len(tmpl.carried), len(tmpl.initial), len(tmpl.results)) != (
            len(chunk.order), len(chunk.carried), len(chunk.initial), len(chunk.results)):
        return None
    vmap, smap = _Mapping(), _Mapping()
    for a, b in zip(tmpl.order, chunk.order):
        vmap.add(a, b)
    for d, c in ((tmpl.carried, chunk.carried), (tmpl.results, chunk.results)):
        for (ka, sa), (kb, sb) in zip(d.items(), c.items()):
            vmap.add(ka[0], kb[0]), vmap.add(ka[1], kb[1])
            if sa != sb or sa.index_map:
                return None
    program = graph.program
    for ea, eb in zip(tmpl.initial, chunk.initial):
        vmap.add(ea.src, eb.src), vmap.add(ea.dst, eb.dst)
        if ea.structure != eb.structure or any(program.vertex_digits.get(a) != program.vertex_digits.get(b)
                                               for a, b in ((ea.src, eb.src), (ea.dst, eb.dst))):
            return None
        fa, fb = program.edge_sources.get((ea.src, ea.dst), ()), program.edge_sources.get((eb.src, eb.dst), ())
        if len(fa) != len(fb):
            return None
        for (sa, arga, outa), (sb, argb, outb) in zip(fa, fb):
            xa, xb = program.steps[sa], program.steps[sb]
            if ((arga, outa) != (argb, outb) or (sa in program.digit_reshapes) != (sb in program.digit_reshapes)
                    or not _same_equation(xa.equation, xb.equation) or not smap.add_inputs(xa.inputs, xb.inputs)):
                return None
    return (vmap.to, smap.to) if vmap.ok and smap.ok else None


def _flows(chunks) -> tuple[list, list]:
    """Per chunk, the chunk that produced each carried edge, and the ``(chunk, key)`` that
    next reads each result (None: read by the layout at the end)."""
    producer, consumer, last = [], [dict() for _ in chunks], {}
    for c, chunk in enumerate(chunks):
        producer.append({key: last[key] for key in chunk.carried})
        for key in chunk.carried:
            consumer[last[key]][key] = (c, key)
        for key in chunk.results:
            last[key] = c
            consumer[c].setdefault(key, None)
    return producer, consumer


def _window(graph, chunks, flows, a: int, b: int):
    """The :class:`_Loop` running chunks ``a..b`` as a scan, or None where they do not
    pass their state from iteration to iteration the same way."""
    producer, consumer = flows
    maps = [_chunk_map(graph, chunks[a], chunks[t]) for t in range(a, b + 1)]
    if any(m is None for m in maps):
        return None
    back = [{v: k for k, v in m[0].items()} for m in maps]
    at = lambda t, key: (back[t - a][key[0]], back[t - a][key[1]])  # noqa: E731 - a key of chunk t, in the template
    kinds: dict = {}
    for t in range(a + 1, b + 1):
        for key, c in producer[t].items():
            kind = "carry" if c == t - 1 else "outer" if c < a else None
            if kind is None or kinds.setdefault(("in", at(t, key)), kind) != kind:
                return None
    for t in range(a, b):
        for key, nxt in consumer[t].items():
            kind = ("carry", at(t + 1, nxt[1])) if nxt is not None and nxt[0] == t + 1 else (
                "ys" if nxt is None or nxt[0] > b else None)
            if kind is None or kinds.setdefault(("out", at(t, key)), kind) != kind:
                return None
    carry = tuple((kind[1], key) for (side, key), kind in kinds.items() if side == "out" and kind != "ys")
    outer = tuple(key for (side, key), kind in kinds.items() if side == "in" and kind == "outer")
    ys = tuple(key for (side, key), kind in kinds.items() if side == "out" and kind == "ys")
    fed = sorted(key for (side, key), kind in kinds.items() if side == "in" and kind == "carry")
    if sorted(k for k, _ in carry) != fed:
        return None
    return _Loop(a, b, tuple(maps), carry, outer, ys)


def _iteration_runs(labels: list, steps=(1, -1)) -> list[tuple[int, int]]:
    """Runs ``(first, last)`` of at least :data:`MIN_SCAN` consecutive ``labels``
    ``(loop, iteration)`` of one loop whose iterations go in one of ``steps``."""
    def continues(first, c):
        (loop, it), (_, before) = labels[c], labels[c - 1]
        if loop is None or loop != labels[first][0]:
            return False
        step = labels[first + 1][1] - labels[first][1] if c > first + 1 else it - before
        return step in steps and it - before == step

    runs, first = [], 0
    for c in range(1, len(labels) + 1):
        if c < len(labels) and continues(first, c):
            continue
        if labels[first][0] is not None and c - first >= MIN_SCAN:
            runs.append((first, c - 1))
        first = c
    return runs


def _peeled(first: int, last: int, window) -> list:
    """The windows ``window(a, b)`` (None where ``a..b`` does not qualify) that run a
    run ``first..last`` of iterations: from its start, each the longest left after
    peeling up to :data:`MAX_PEEL` iterations off either end."""
    tries = sorted(((i, j) for i in range(MAX_PEEL + 1) for j in range(MAX_PEEL + 1)), key=sum)
    found, a = [], first
    while last - a + 1 >= MIN_SCAN:
        got = next(((w, last - j) for i, j in tries if last - j - (a + i) + 1 >= MIN_SCAN
                    for w in [window(a + i, last - j)] if w is not None), None)
        if got is None:
            break
        found.append(got[0])
        a = got[1] + 1
    return found


def _loop_plan(graph: Graph, order: Sequence[int]):
    """``(chunks, remaining, loops)``: ``order`` in chunks (one per loop iteration and
    per stretch outside loops, see :func:`_plan`) and the :class:`_Loop` windows that run
    as scans (in a forward or a reverse order); None where no window qualifies."""
    loops = graph.program.vertex_loops
    label = lambda v: loops.get(v, ((None, None),))[0]  # noqa: E731 - outermost loop iteration
    starts = frozenset(k for k in range(1, len(order)) if label(order[k]) != label(order[k - 1]))
    chunks, remaining = _plan(graph, order, 0, starts)
    labels = []
    for chunk in chunks:
        got = {label(v) for v in chunk.order}
        labels.append(got.pop() if len(got) == 1 else (None, None))
    flows, found = _flows(chunks), []
    for first, last in _iteration_runs(labels):
        found += _peeled(first, last, lambda a, b: _window(graph, chunks, flows, a, b))
    return (chunks, remaining, found) if found else None


def _stacked(values):
    """Per-iteration values stacked on a new leading axis (None for values without one)."""
    if all(v is None for v in values):
        return None
    return jnp.stack([jnp.asarray(v) for v in values])


def _run_chunk_in(graph, chunk: _Chunk, env: dict, slots: dict, fusion) -> int:
    """Eliminates ``chunk`` on the values in ``env`` (consumed) and the local Jacobians it
    evaluates from ``slots``; its results go to ``env``. Returns its multiplications."""
    edges = {key: (s, env.pop(key)) for key, s in chunk.carried.items()}
    for e in chunk.initial:
        edges[(e.src, e.dst)] = (e.structure, _local(graph, e, slots, fusion))
    edges, mults = _eliminate(graph, chunk.order, edges, _join_values, fusion=fusion)
    env.update((key, edges[key][1]) for key in chunk.results)
    return mults


def _run_loop(graph, chunks, loop: _Loop, env: dict, slots: dict, fusion) -> int:
    """Chunks ``loop.first..loop.last`` as one ``lax.scan``: the template's eliminations
    on each iteration's carried edges, edges from before the loop and slots (the primal
    values its local Jacobians read). Results go to ``env``; returns the multiplications."""
    tmpl = chunks[loop.first]
    span = range(loop.first, loop.last + 1)
    key_at = lambda t, key: tuple(loop.maps[t - loop.first][0][v] for v in key)  # noqa: E731
    same = {s for s in tmpl.slots if all(m[1][s] == s for m in loop.maps)}  # read by every iteration
    tmpl_slots = [s for s in tmpl.slots if s not in same]
    init = [env.pop(p) for p, _ in loop.carry]
    outer = [_stacked([env.pop(key_at(t, k)) for t in span]) for k in loop.outer]
    xs_slots = [slots.stacked([loop.maps[t - loop.first][1][s] for t in span]) for s in tmpl_slots]
    fixed = {s: slots[s] for s in same}
    count = []

    def body(carry, x):
        outer_t, slots_t = x
        inner = _fusion(graph)
        local = {s: inner.made(v, ()) for s, v in list(zip(tmpl_slots, slots_t)) + list(fixed.items())}
        edges = {p: (tmpl.carried[p], inner.made(v, ())) for (p, _), v in zip(loop.carry, carry)}
        edges.update((k, (tmpl.carried[k], inner.made(v, ()))) for k, v in zip(loop.outer, outer_t))
        for e in tmpl.initial:
            edges[(e.src, e.dst)] = (e.structure, _local(graph, e, local, inner))
        edges, mults = _eliminate(graph, tmpl.order, edges, _join_values, fusion=inner)
        count.append(mults)
        new = [_like(edges[q][1], c) for (_, q), c in zip(loop.carry, carry)]
        return new, [edges[q][1] for q in loop.ys]

    carry, ys = _scan_once_per_value(body, [None if v is None else jnp.asarray(v) for v in init], (outer, xs_slots))
    last = loop.last
    for (_, q), v in zip(loop.carry, carry):
        env[key_at(last, q)] = fusion.made(v, (), True)
    for q, stacked in zip(loop.ys, ys):
        for t in span:
            env[key_at(t, q)] = None if stacked is None else fusion.made(stacked[t - loop.first], (), True)
    return count[0] * len(span)


def _scan_once_per_value(body, init, xs):
    """``jax.lax.scan(body, init, xs)`` carrying each value once: where the body returns one
    value under several carried edges (a forward order's stages of an RK4 step all read
    the state, so its Jacobian to the inputs is carried under each of their edges) and
    they start from one value too, the scan carries it once. XLA copies every carried
    slot on each trip: PendulumChain_RK4's forward order at batch 256 copied 676,000
    floats a trip, most of them a few values 3-4 times over."""
    leaves, tree = jax.tree_util.tree_flatten(init)
    x0 = jax.tree_util.tree_map(lambda a: jax.ShapeDtypeStruct(a.shape[1:], a.dtype), xs)  # one trip's, abstract
    closed, shapes = jax.make_jaxpr(body, return_shape=True)(init, x0)
    out_tree = jax.tree_util.tree_structure(shapes)
    n = len(leaves)
    outvars = closed.jaxpr.outvars[:n]
    rep = list(range(n))  # each carried leaf's representative: the first leaf equal to it
    for i in range(n):
        rep[i] = next((j for j in range(i) if rep[j] == j and leaves[j] is leaves[i]
                       and outvars[j] is outvars[i]), i)
    keep = [i for i in range(n) if rep[i] == i]
    slot = {i: keep.index(rep[i]) for i in range(n)}

    def once(carried, x):
        outs = jax.core.eval_jaxpr(closed.jaxpr, closed.consts, *[carried[slot[i]] for i in range(n)],
                                   *jax.tree_util.tree_leaves(x))
        new, ys = jax.tree_util.tree_unflatten(out_tree, outs)
        new = jax.tree_util.tree_leaves(new)
        return [new[i] for i in keep], ys

    carried, ys = jax.lax.scan(once, [leaves[i] for i in keep], xs, unroll=SCAN_UNROLL)
    return jax.tree_util.tree_unflatten(tree, [carried[slot[i]] for i in range(n)]), ys


def _like(value, carried):
    """``value`` as the scan carries it: the type of ``carried`` (its dtype, not weak)."""
    return value if value is None else jnp.asarray(value, carried.dtype)


class _Looped:
    """The Jacobian of a graph whose order follows its loops: the primal program as it
    is, then the order's chunks (:func:`_loop_plan`), those of each :class:`_Loop` as a
    ``lax.scan``, the others as :func:`accumulate` runs them. Called like
    ``accumulate(graph, order, leaves)``, it returns the same."""

    def __init__(self, graph: Graph, plan):
        self.graph = graph
        self.chunks, self.remaining, self.loops = plan
        self.primals = _primal_plan(graph)

    def __call__(self, leaves):
        graph, fusion = self.graph, _fusion(self.graph)
        slots = _evaluate(graph, leaves, fusion, self.primals)
        env: dict = {}
        mults, c, loops = 0, 0, {loop.first: loop for loop in self.loops}
        while c < len(self.chunks):
            if c in loops:
                mults += _run_loop(graph, self.chunks, loops[c], env, slots, fusion)
                c = loops[c].last + 1
            else:
                mults += _run_chunk_in(graph, self.chunks[c], env, slots, fusion)
                c += 1
        pending = {(e.src, e.dst): e for e in graph.edges}
        edges = {key: (s, env[key]) if key in env else (s, _local(graph, pending[key], slots, fusion))
                 for key, s in self.remaining.items()}
        outputs = [None if s is None else slots[s]
                   for s in (graph.program.vertex_slot[v] for v in graph.output_vertices)]
        return edges, outputs, mults

    @property
    def size(self) -> int:
        """Intermediates eliminated in the program as emitted (one iteration per scan)."""
        return len(self.graph.intermediates) - sum(
            len(self.chunks[t].order) for loop in self.loops for t in range(loop.first + 1, loop.last + 1))


def _looped(graph: Graph, order: Sequence[int]):
    """A :class:`_Looped` for ``order`` on ``graph``, or None where no loop runs as a scan."""
    if LOOP_SCAN not in ("reverse", "large", "always", "never"):
        raise ValueError(
            f"interpreter.LOOP_SCAN must be 'reverse', 'large', 'always' or 'never', not {LOOP_SCAN!r}")
    if LOOP_SCAN == "never" or not graph.program.vertex_loops:
        return None
    small = len(graph.intermediates) <= CHUNK_ABOVE
    if LOOP_SCAN == "large" and small:
        return None
    plan = _loop_plan(graph, order)
    if plan is not None and LOOP_SCAN == "reverse" and small:
        chunks, remaining, loops = plan
        loops = [loop for loop in loops if _backwards(graph, chunks, loop)]
        plan = (chunks, remaining, loops) if loops else None
    return None if plan is None else _Looped(graph, plan)


def _backwards(graph: Graph, chunks, loop: _Loop) -> bool:
    """Whether ``loop``'s chunks eliminate its iterations last to first."""
    label = lambda c: graph.program.vertex_loops[chunks[c].order[0]][0][1]  # noqa: E731 - the iteration
    return label(loop.first + 1) < label(loop.first)


class _Rows(dict):
    """Slot values, those a scan computed held as ``rows[slot] = (stacked, index)`` and
    sliced when first read (so a scan over the same iterations reads them stacked)."""

    def __init__(self, items, fusion):
        super().__init__(items)
        self.rows: dict = {}
        self.fusion = fusion

    def __missing__(self, slot):
        stacked, i = self.rows[slot]
        self[slot] = self.fusion.made(stacked[i], (), True)
        return self[slot]

    def __contains__(self, slot):
        return dict.__contains__(self, slot) or slot in self.rows

    def stacked(self, slots: list):
        """The values of ``slots`` (one per iteration) stacked, each run of consecutive
        rows of one scan's stacked output as a slice of it (reversed for a reverse order)."""
        pieces, k = [], 0
        while k < len(slots):
            row = self.rows.get(slots[k])
            n, step = 1, 0
            if row is not None and k + 1 < len(slots):
                nxt = self.rows.get(slots[k + 1])
                step = nxt[1] - row[1] if nxt is not None and nxt[0] is row[0] else 0
            while step in (1, -1) and k + n < len(slots) and _follows(self.rows.get(slots[k + n]), row, step * n):
                n += 1
            if n == 1:
                pieces.append(jnp.asarray(self[slots[k]])[None])
            else:
                lo = min(row[1], row[1] + step * (n - 1))
                block = jax.lax.slice_in_dim(row[0], lo, lo + n)
                pieces.append(block if step == 1 else jnp.flip(block, 0))
            k += n
        return pieces[0] if len(pieces) == 1 else jnp.concatenate(pieces)


def _follows(row, first, offset: int) -> bool:
    """Whether ``row`` is row ``first``'s index plus ``offset`` of the same stacked output."""
    return row is not None and row[0] is first[0] and row[1] == first[1] + offset


class _Primal(NamedTuple):
    """Steps ``start..stop - 1`` (consecutive iterations of a loop) run as a ``lax.scan``
    of the first iteration's steps, ``steps`` (the template)."""

    start: int
    stop: int
    steps: tuple
    maps: tuple  # per iteration: {template slot: that iteration's slot}
    carry: tuple  # (template slot read from before the iteration, template slot that feeds it next)
    ys: tuple  # template slots read outside the loop's steps, stacked per iteration


def _step_blocks(program) -> tuple[list, list]:
    """The steps in blocks of one outermost loop iteration (or a stretch outside loops),
    and per block its label ``(loop, iteration)`` (``(None, None)`` outside loops)."""
    labels = [(loops[0] if loops else (None, None)) for loops in program.step_loops]
    blocks, names = [], []
    for k, label in enumerate(labels):
        if not blocks or label != names[-1]:
            blocks.append([])
            names.append(label)
        blocks[-1].append(k)
    return blocks, names


def _block_map(program, tmpl: list, block: list):
    """``{template slot: slot}`` under which ``block`` runs the template's steps, or None."""
    if len(tmpl) != len(block):
        return None
    smap = _Mapping()
    for ka, kb in zip(tmpl, block):
        a, b = program.steps[ka], program.steps[kb]
        if (not _same_equation(a.equation, b.equation) or len(a.inputs) != len(b.inputs)
                or not smap.add_inputs(a.inputs, b.inputs)):
            return None
        for oa, ob in zip(a.outputs, b.outputs):
            smap.add(oa, ob)
    return smap.to if smap.ok else None


def _primal_window(program, blocks, owner, needed, a: int, b: int):
    """The :class:`_Primal` running blocks ``a..b`` as a scan, or None where an iteration
    reads anything but its own values, the previous iteration's and the same values from
    before the loop."""
    maps = [_block_map(program, blocks[a], blocks[t]) for t in range(a, b + 1)]
    if any(m is None for m in maps):
        return None
    made = {o for k in blocks[a] for o in program.steps[k].outputs}
    reads = [r for k in blocks[a] for r in program.steps[k].inputs if not isinstance(r, tuple) and r not in made]
    carry: dict = {}
    for s in dict.fromkeys(reads):
        for t in range(a + 1, b + 1):
            slot, back = maps[t - a][s], {v: k for k, v in maps[t - a - 1].items()}
            kind = ("const",) if slot == s and owner.get(s, -1) < a else (
                ("carry", back.get(slot)) if owner.get(slot) == t - 1 else None)
            if kind is None or kind[-1] is None or carry.setdefault(s, kind) != kind:
                return None
    outs = [o for k in blocks[a] for o in program.steps[k].outputs]
    ys = tuple(o for o in outs if any(m[o] in needed for m in maps))
    pairs = tuple((s, kind[1]) for s, kind in carry.items() if kind[0] == "carry")
    return _Primal(blocks[a][0], blocks[b][-1] + 1, tuple(blocks[a]), tuple(maps), pairs, ys)


def _primal_plan(graph: Graph) -> tuple:
    """The :class:`_Primal` windows of the traced program: in each run of iterations of
    an outermost loop, those whose steps repeat (see :func:`_peeled`)."""
    program = graph.program
    blocks, names = _step_blocks(program)
    owner = {o: b for b, block in enumerate(blocks) for k in block for o in program.steps[k].outputs}
    needed = set(program.output_slots) | {r for e in graph.edges for r in _edge_slots(graph, e)}
    needed |= {s for s, _ in filter(None, program.branch_slots)}

    def window(a, b):
        return _primal_window(program, blocks, owner, needed | _read_outside(program, blocks, a, b), a, b)

    return tuple(w for first, last in _iteration_runs(names, (1,)) for w in _peeled(first, last, window))


def _read_outside(program, blocks, a: int, b: int) -> set:
    """The slots read by steps outside blocks ``a..b``."""
    inside = set(range(blocks[a][0], blocks[b][-1] + 1))
    return {r for k, step in enumerate(program.steps) if k not in inside
            for r in step.inputs if not isinstance(r, tuple)}


def _run_primal(graph: Graph, w: _Primal, slots: _Rows, fusion):
    """The steps of ``w`` as one ``lax.scan``: each iteration the template's steps on the
    previous iteration's values (``w.carry``) and values from before the loop; the slots
    read outside the loop become rows of its stacked outputs in ``slots``."""
    program = graph.program
    readers = collections.Counter(r for k in w.steps for r in program.steps[k].inputs if not isinstance(r, tuple))
    readers.update(w.ys)

    def body(carry, _):
        inner = _fusion(graph)
        local = {s: inner.made(v, ()) for (s, _), v in zip(w.carry, carry)}
        for k in w.steps:
            _run_step(program.steps[k], local, slots, inner, readers)
        return [_like(local[o], c) for (_, o), c in zip(w.carry, carry)], [local[o] for o in w.ys]

    init = [jnp.asarray(slots[s]) for s, _ in w.carry]
    _, ys = jax.lax.scan(body, init, None, length=len(w.maps), unroll=SCAN_UNROLL)
    for o, stacked in zip(w.ys, ys):
        fusion.made(stacked, (), True)
        for t, m in enumerate(w.maps):
            slots.rows[m[o]] = (stacked, t)
