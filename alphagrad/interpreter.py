"""Exact Jacobians by executing an elimination order on structured local Jacobians.

``jacobian(f, order)`` returns a function with the signature and output layout of
``jax.jacrev(f)``. It evaluates ``f``, builds every local partial Jacobian in its
structured form (a value tensor over the variables the structure keeps, or just a sign),
eliminates the intermediate vertices in ``order`` with exactly the products the cost model
counts (one einsum per product in which diagonal pairs share an index; factors without
value cost nothing), and expands the input->output Jacobians to JAX's dense layout only
at the end. It is plain JAX, so it composes with ``jax.jit`` and ``jax.vmap``.
"""

from __future__ import annotations

import collections
import functools
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
MAX_CHUNKS = 32
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


def _edge_values(graph: Graph, slots: dict):
    """Structure and value of every edge of ``graph`` at the evaluated ``slots``."""
    return {(e.src, e.dst): (e.structure, _edge_value(graph, e, slots)) for e in graph.edges}


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


def _evaluate(graph: Graph, leaves) -> dict:
    """Every slot's value, running the traced program on the flattened inputs."""
    program = graph.program
    slots = dict(zip(program.input_slots, leaves))
    read = lambda ref: ref[1] if isinstance(ref, tuple) else slots[ref]
    readers = collections.Counter()
    if _shares(graph):
        readers.update(r for step in program.steps for r in step.inputs if not isinstance(r, tuple))
        readers.update(r for e in graph.edges for r in _edge_slots(graph, e))
    for step in program.steps:
        for o, v in zip(step.outputs, step.equation.bind(*[read(r) for r in step.inputs])):
            slots[o] = _shared(v, readers[o])
    return slots


def accumulate(graph: Graph, order: Sequence[int], leaves):
    """Eliminates ``order`` on the local Jacobians at ``leaves`` (flattened inputs).

    Returns ``(edges, outputs, multiplications)``: the remaining input->output edges as
    ``{(input, output): (structure, value)}``, the output values, and the scalar
    multiplications the products issued (counted from the einsums emitted).
    """
    slots = _evaluate(graph, leaves)
    edges, mults = _eliminate(graph, order, _edge_values(graph, slots), _join_values)
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


def _shared(value, readers: int):
    """``value``, computed once if it is traced and ``readers`` >= 2 ops read it.

    XLA:CPU fuses a chain of elementwise ops, pads and slices into each of its consumers
    and computes it again there, chains within chains over a long program and its
    elimination, and drops ``optimization_barrier`` before fusing; it never fuses a
    reduction into its consumers. So a shared value is summed with zeros (one addition
    per entry, no multiplication). An annealed PendulumChain_RK4 order at batch 512:
    3.8 s a call and 274 s to compile without, 24 ms and 18 s with (jacrev: 31 ms)."""
    if readers < 2 or not isinstance(value, jax.core.Tracer):  # op by op, or static
        return value
    return jnp.sum(jnp.stack([value, jnp.zeros_like(value)]), axis=0)


def _eliminate(graph: Graph, order: Sequence[int], edges: dict, join, product=st.product_value, on_vertex=None):
    """The elimination loop of :func:`accumulate` on ``edges`` (``{(src, dst): (structure,
    value)}``, consumed): every product through ``product`` (``structure.product_value``,
    the one function that emits, and counts, the einsums); ``join`` sums a product into an
    existing edge; ``on_vertex(j, products)`` is told each vertex before it goes. Returns
    the remaining edges and the multiplications issued."""
    tables = rules.tables(graph)
    preds: dict[int, set] = {v: set() for v in range(graph.num_vertices)}
    succs: dict[int, set] = {v: set() for v in range(graph.num_vertices)}
    for i, k in edges:
        preds[k].add(i)
        succs[i].add(k)
    mults = 0
    deep = _shares(graph)
    for j in order:
        if on_vertex is not None:
            on_vertex(j, len(preds[j]) * len(succs[j]))
        if deep:  # each (i, j) is read by a product per successor, each (j, k) per predecessor
            for i in preds[j]:
                s, v = edges[(i, j)]
                edges[(i, j)] = (s, _shared(v, len(succs[j])))
            for k in succs[j]:
                s, v = edges[(j, k)]
                edges[(j, k)] = (s, _shared(v, len(preds[j])))
        for i in sorted(preds[j]):
            sb, vb = edges.pop((i, j))
            for k in sorted(succs[j]):
                sa, va = edges[(j, k)]
                p = tables.products[(tables.index(sa), tables.index(sb))]
                value, m = product(p, va, vb)
                mults += m
                if (i, k) in edges:
                    so, vo = edges[(i, k)]
                    sj = tables.structures[tables.join[tables.index(so), tables.index(p.result)]]
                    edges[(i, k)] = (sj, join(so, vo, p.result, value, sj))
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
    carried: dict  # {edge: structure} read from earlier chunks' results
    initial: tuple  # edges (graph.Edge) whose local Jacobian this chunk evaluates
    slots: tuple  # the slots those local Jacobians read
    results: tuple  # edges this chunk creates or updates that later chunks or the layout read


def _plan(graph: Graph, order: Sequence[int], max_products: int):
    """Splits ``order`` into chunks of at most ``max_products`` products (or one vertex).

    Runs :func:`_eliminate` itself on structures alone (no values, no products computed),
    on an edge map that records what each chunk reads first and what it writes.
    Returns ``(chunks, remaining)``: the :class:`_Chunk` list and ``{edge: structure}``
    of the edges left at the end, which are carried or still initial."""
    pending = {(e.src, e.dst): e for e in graph.edges}  # local Jacobians not yet evaluated
    chunks: list = []
    part: dict = {}

    def start():
        part.update(order=[], carried={}, initial=[], fresh=set(), written=set(), products=0)

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
        results = tuple(sorted(k for k in part["written"] if k in edges))
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
            part["written"].add(key)
            dict.__setitem__(self, key, value)

    def on_vertex(j, products):
        if part["order"] and part["products"] + products > max_products:
            close()
            start()
        part["order"].append(j)
        part["products"] += products

    start()
    edges = Recorded({(e.src, e.dst): (e.structure, None) for e in graph.edges})
    _eliminate(graph, order, edges, lambda *a: None, lambda p, va, vb: (None, 0), on_vertex)
    if part["order"]:
        close()
    return chunks, {key: s for key, (s, _) in dict.items(edges)}


def _forward(graph: Graph, needed: tuple, leaves):
    """The slots ``needed`` (and the output values) of the traced program at ``leaves``."""
    slots = _evaluate(graph, leaves)
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
    for e in chunk.initial:
        edges[(e.src, e.dst)] = (e.structure, _edge_value(graph, e, slots))
    edges, mults = _eliminate(graph, chunk.order, edges, _join_values)
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
        self.forward = jax.jit(functools.partial(_forward, graph, tuple(sorted(needed))))
        self.steps = [jax.jit(functools.partial(_run_chunk, graph, chunk, self.counts, self.statics, c))
                      for c, chunk in enumerate(self.chunks)]
        self.layout = layout
        self.finish = jax.jit(functools.partial(self._finish, graph, layout))

    def _finish(self, graph, layout, carried, slots, outputs, leaves):
        edges = {key: (s, self.statics[key] if s.index_map else carried[key])
                 for key, s in self.remaining.items() if key in carried}
        for e in self.last:
            edges[(e.src, e.dst)] = (e.structure, _edge_value(graph, e, slots))
        if layout is None:
            return {key: v for key, (_, v) in edges.items()}, outputs
        return layout(edges, outputs, leaves)

    @property
    def multiplications(self) -> int:
        """The multiplications the chunks issued (after the first call)."""
        return sum(self.counts)

    def __call__(self, leaves):
        traced = any(isinstance(l, jax.core.Tracer) for l in leaves)  # under jit/vmap
        slots, outputs = self.forward(leaves)
        env = {}
        for c, chunk in enumerate(self.chunks):
            args = ([env.pop(k) for k in chunk.carried], [slots[s] for s in chunk.slots])
            if traced:
                step = self.steps[c]
            else:  # compiled ahead of time: only the executable is kept, not its HLO
                if self.compiled[c] is None:
                    self.compiled[c] = self.steps[c].lower(*args).compile()
                    _release_memory()
                step = self.compiled[c]
            env.update(zip(chunk.results, step(*args)))
        result = self.finish(env, {s: slots[s] for s in self.last_slots}, outputs, leaves)
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
        if len(graph.intermediates) > CHUNK_ABOVE:
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
# Layout changes. The same values as ``structure.embed_value`` and ``structure.to_dense``
# (no multiplications), emitted as transpose + reshape + broadcast + select instead of a
# gather with constant index arrays: XLA fuses these into their consumers (measured:
# RoeFlux_3d and MLP a few percent to ~20% faster at batch 512, none slower). Small
# contractions stay einsums: emitting them as multiply + sum instead was measured slower
# on CPU (RoeFlux_3d rev 0.51x -> 0.62x of jacrev), so products still go through
# ``structure.product_value``.


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
