"""Rule tables: every structure a graph's eliminations can produce, how they compose and
add, and what each product costs, generated from :mod:`alphagrad.structure`.

The elimination engine (JAX) and the compiled CPU evaluator both read these tables, so
they agree by construction (and ``tests/test_engine.py`` checks it). Id 0 stands for
"no edge": composing with it gives 0 at cost 0, adding it changes nothing, so the engine
needs no masks.

The closure follows the graph: two structures are combined only where some elimination
of this graph can meet them (see :func:`build_tables`: a superset of what orders meet,
never less), but a single product can still be enormous (a 2**21-square matmul's factor:
2**63 multiplications). ``cost`` holds each product's exact count as int64, saturated at
:data:`COST_CAP`, :meth:`RuleTables.exact_cost` gives the exact Python integer of any
product, and :meth:`RuleTables.float_cost` the float64 table the JAX engine counts with.
"""

from __future__ import annotations

import collections
import collections.abc
import dataclasses
import functools
import hashlib
import json
import os
import sys
import tempfile
import warnings

import numpy as np

from alphagrad import structure as st

NO_EDGE = 0
#: A table entry for two structures that can never meet (incompatible shapes).
INVALID = -1
#: :attr:`RuleTables.entries` stop here (2**40, about 1e12: a dense Jacobian of two
#: million-entry vertices holds 1e12 entries), so that the policy's sums of them over a
#: vertex's edges stay within int64.
ENTRIES_CAP = 2**40
#: int64 cost entries and the compiled evaluator's sums saturate here (2**62 - 1, about
#: 4.6e18): the sum of two saturated values still fits in int64, so nothing ever wraps,
#: and a count that reaches the cap is recounted exactly (arbitrary-precision integers)
#: or refused with an error, never returned as a number.
COST_CAP = 2**62 - 1


def check_convention(convention, time: bool = False) -> str:
    """Returns ``convention`` if it names a cost model, else raises ValueError saying which
    do; with ``time``, also the time model (``"time"`` or ``"time:PLATFORM"``, see
    :mod:`alphagrad.time_model`)."""
    if time and isinstance(convention, str) and (convention == "time" or convention.startswith("time:")):
        return convention
    if not isinstance(convention, str) or convention not in st.CONVENTIONS:
        also = "; or \"time\": modelled seconds on this platform, alphagrad.time_model" if time else ""
        raise ValueError(
            f"unknown cost convention {convention!r}; use one of {list(st.CONVENTIONS)} "
            f"(\"exact\": what alphagrad.jacobian executes, \"published\": the published "
            f"AlphaGrad cost model{also})"
        )
    return convention


class TooManyStructuresError(RuntimeError):
    """The closure of a graph's structures under composition and addition is too large."""


@dataclasses.dataclass(frozen=True, eq=False)
class RuleTables:
    """Composition, addition and cost tables over a closed set of structures.

    Attributes:
      structures: the structures; index 0 is ``None`` (no edge).
      compose: ``[S, S]`` id of ``a . b`` for ``a = dk/dj``, ``b = dj/di``.
      join: ``[S, S]`` id of ``a + b``.
      cost: per convention, ``[S, S]`` int64 multiplications of ``a . b``, saturated at
        :data:`COST_CAP` (see :meth:`exact_cost` for the exact count).
    """

    structures: tuple
    compose: np.ndarray
    join: np.ndarray
    cost: dict

    @functools.cached_property
    def products(self) -> collections.abc.Mapping:
        """``(a, b) -> structure.Product`` for every pair in :attr:`compose` (how the
        interpreter computes it; ``Product.cost`` holds the exact counts as Python
        integers), each composed when first asked for: an order meets a few percent of
        the pairs a graph's closure holds."""
        return _Products(self)

    @property
    def size(self) -> int:
        return len(self.structures)

    @functools.cached_property
    def entries(self) -> np.ndarray:
        """``[S]`` int64: :attr:`alphagrad.structure.Structure.entries` of each structure
        (0 for no edge), at most :data:`ENTRIES_CAP`."""
        return np.asarray([0 if s is None else min(s.entries, ENTRIES_CAP) for s in self.structures], np.int64)

    def index(self, s: st.Structure) -> int:
        return self._index[s]

    @functools.cached_property
    def _index(self) -> dict:
        return {s: k for k, s in enumerate(self.structures) if s is not None}

    def exact_cost(self, convention: str, a: int, b: int) -> int:
        """The exact multiplications of ``a . b`` (a Python integer, never saturated)."""
        if convention not in self.cost:  # the time model: picoseconds have no exact recount
            raise OverflowError("a modelled time reached 2**62 picoseconds (53 days), beyond what the "
                                "evaluator's int64 sums hold")
        c = int(self.cost[convention][a, b])
        return c if c < COST_CAP else self.products[(int(a), int(b))].cost[convention]

    @functools.cached_property
    def joins_commute(self) -> bool:
        """Whether ``join`` is commutative and associative wherever both sides are in the
        table. Then eliminating two vertices that share no edge gives the same costs and
        the same state in either order (each only adds into edges the other never reads),
        which lets the annealer accept such moves without scoring them."""
        J = self.join
        valid = J != INVALID
        if np.any(valid & valid.T & (J != J.T)):
            return False
        for b in range(self.size):  # (a + b) + c == a + (b + c) for every a, c that meet b
            a = np.flatnonzero(valid[:, b])
            c = np.flatnonzero(valid[b, :])
            if a.size == 0 or c.size == 0:
                continue
            bc = J[b, c]
            step = max(1, 2**22 // c.size)  # blocks of a few million triples
            for lo in range(0, a.size, step):
                ai = a[lo:lo + step]
                left = J[J[ai, b][:, None], c[None, :]]
                right = J[ai[:, None], bc[None, :]]
                if np.any((left != INVALID) & (right != INVALID) & (left != right)):
                    return False
        return True

    @functools.cached_property
    def float_cost(self) -> dict:
        """Per convention, ``[S, S]`` float64 multiplications of ``a . b``: the exact count
        rounded to float64 (not saturated), for the JAX engine."""
        out = {}
        for c in st.CONVENTIONS:
            out[c] = self.cost[c].astype(np.float64)
            for a, b in zip(*np.nonzero(self.cost[c] >= COST_CAP)):
                exact = self.products[(int(a), int(b))].cost[c]
                out[c][a, b] = float(exact) if exact < 2**1023 else np.inf
        return out


def eliminate_edges(E: dict, v: int, compose, join) -> list[tuple[int, int]]:
    """Eliminates ``v`` from ``E`` (``{(src, dst): structure id}``, updated in place) by the
    rule tables ``compose``/``join``, in plain Python; returns the ``(a, b)`` structure ids
    of its products (``a``: the edge out of ``v``, ``b``: the edge into it), one per
    predecessor-successor pair. The one slow, exact walk that scoring past the int64 cap
    and the time model's features share."""
    preds = [(i, s) for (i, k), s in E.items() if k == v]
    succs = [(k, s) for (i, k), s in E.items() if i == v]
    products = []
    for i, b in preds:
        for k, a in succs:
            products.append((a, b))
            E[(i, k)] = int(join[E.get((i, k), 0), compose[a, b]])
    for i, _ in preds:
        del E[(i, v)]
    for k, _ in succs:
        del E[(v, k)]
    return products


class _Products(collections.abc.Mapping):
    """The products of a :class:`RuleTables`, composed on first access and kept."""

    def __init__(self, tables: RuleTables):
        self._tables = tables
        self._done: dict = {}

    def __getitem__(self, pair):
        p = self._done.get(pair)
        if p is None:
            a, b = pair
            T = self._tables
            if not (0 < a < T.size and 0 < b < T.size) or T.compose[a, b] == INVALID:
                raise KeyError(pair)
            p = self._done[pair] = st.compose(T.structures[a], T.structures[b])
        return p

    def __iter__(self):
        a, b = np.nonzero(self._tables.compose[1:, 1:] != INVALID)
        return ((int(i) + 1, int(j) + 1) for i, j in zip(a, b))

    def __len__(self):
        return int(np.count_nonzero(self._tables.compose[1:, 1:] != INVALID))


def build_tables(graph, max_structures: int = 4096) -> RuleTables:
    """Closes ``graph``'s edge structures under the compositions and sums its
    eliminations can perform, and tabulates them.

    Every structure keeps the vertices it can sit on as a source and as a destination
    (bit sets over vertex ids, which are topological). Eliminating ``j`` composes an edge
    ``j -> k`` with an edge ``i -> j`` and adds the product onto ``i -> k``, so two
    structures are composed only through a vertex ``j`` that is a source of the first and
    a destination of the second, with a source ``i < j`` and a destination ``k > j`` left
    to the product, which sits on those; two are summed only when they can share an edge.
    This is what any order of this graph can meet (a superset, never less), and far
    smaller than pairing every structure with every shape-compatible one: index maps with
    distinct offsets would otherwise combine without end. Keeping ``i < j < k`` matters:
    without it, sets merged across edges look like cycles and compose without end.

    Raises:
      TooManyStructuresError: if more than ``max_structures`` structures arise.
    """
    structs: list = [None]
    srcs: list = [0]  # bit sets of vertices each structure can leave / enter
    dsts: list = [0]
    index: dict = {}
    by_in: dict = {}
    by_out: dict = {}
    by_shapes: dict = {}
    compose: dict = {}
    join: dict = {}
    costs: dict = {}
    queue: collections.deque = collections.deque()
    queued: set = set()

    def add(s, src_bits=0, dst_bits=0):
        k = index.get(s)
        if k is None:
            if len(structs) > max_structures:
                raise TooManyStructuresError(
                    f"more than {max_structures} distinct Jacobian structures arise in this "
                    f"graph's eliminations; raise `max_structures` or simplify the function"
                )
            k = len(structs)
            structs.append(s)
            srcs.append(0)
            dsts.append(0)
            index[s] = k
            by_in.setdefault(s.in_shape, []).append(k)
            by_out.setdefault(s.out_shape, []).append(k)
            by_shapes.setdefault((s.out_shape, s.in_shape), []).append(k)
        grow(k, src_bits, dst_bits)
        return k

    def grow(k, src_bits, dst_bits):  # structure k can also sit on these vertices
        if (src_bits & ~srcs[k]) or (dst_bits & ~dsts[k]):
            srcs[k] |= src_bits
            dsts[k] |= dst_bits
            if k not in queued:
                queued.add(k)
                queue.append(k)

    for s in graph.structures:  # ids in order of first appearance, as the graph lists them
        add(s)
    for e in graph.edges:
        add(e.structure, 1 << e.src, 1 << e.dst)
    while queue:
        k = queue.popleft()
        queued.discard(k)
        s = structs[k]
        for a, b in [(k, t) for t in by_out.get(s.in_shape, ())] + [(t, k) for t in by_in.get(s.out_shape, ())]:
            through = srcs[a] & dsts[b]  # a . b: b enters j, a leaves it
            if not through:
                continue
            above = (through & -through).bit_length()  # bits above the lowest j
            outer_src = srcs[b] & ((1 << (through.bit_length() - 1)) - 1)  # i below the highest j
            outer_dst = dsts[a] >> above << above  # k above the lowest j
            if outer_src and outer_dst:
                r = compose.get((a, b))
                if r is None:
                    result, costs[(a, b)] = st.compose_result(structs[a], structs[b])
                    r = compose[(a, b)] = add(result)
                grow(r, outer_src, outer_dst)
        for t in list(by_shapes.get((s.out_shape, s.in_shape), ())):  # s + t on a shared edge
            both_src, both_dst = srcs[k] & srcs[t], dsts[k] & dsts[t]
            if both_src and both_dst:
                if (k, t) not in join:
                    join[(k, t)] = join[(t, k)] = add(st.join(s, structs[t]))
                grow(join[(k, t)], both_src, both_dst)
    n = len(structs)
    comp = np.full((n, n), INVALID, np.int32)
    comp[0, :] = comp[:, 0] = NO_EDGE
    jn = np.full((n, n), INVALID, np.int32)
    jn[0, :] = np.arange(n)
    jn[:, 0] = np.arange(n)
    cost = {c: np.zeros((n, n), np.int64) for c in st.CONVENTIONS}
    for (a, b), r in compose.items():
        comp[a, b] = r
        for c in st.CONVENTIONS:
            cost[c][a, b] = min(costs[(a, b)][c], COST_CAP)
    for (a, b), j in join.items():
        jn[a, b] = j
    return RuleTables(tuple(structs), comp, jn, cost)


#: The environment variable naming a directory where rule tables are kept between
#: processes (``alphagrad order`` and ``alphagrad demo`` default it to
#: ``~/.cache/alphagrad``); unset: tables are kept in memory only.
CACHE_ENV = "ALPHAGRAD_CACHE_DIR"


@functools.lru_cache(maxsize=64)
def _tables_cached(graph) -> RuleTables:
    root = os.environ.get(CACHE_ENV)
    if not root:
        return build_tables(graph)
    path = os.path.join(root, "tables", _disk_key(graph) + ".npz")
    found = _load(path, graph)
    if found is not None:
        return found
    built = build_tables(graph)
    _save(path, built)
    return built


def tables(graph) -> RuleTables:
    """The rule tables of ``graph``: built once per graph and kept in memory, and on disk
    for later processes where ``$ALPHAGRAD_CACHE_DIR`` names a directory (a large graph's
    take seconds to build; loading them, a tenth of a second)."""
    return _tables_cached(graph)


@functools.lru_cache(maxsize=1)
def _code_hash() -> str:
    """A hash of the code the tables are generated by: a file written by other code is
    never read."""
    h = hashlib.sha256()
    for module in (st, sys.modules[__name__]):
        with open(module.__file__, "rb") as f:
            h.update(f.read())
    return h.hexdigest()


def _structure_fields(s: st.Structure) -> list:
    return [s.out_shape, s.in_shape, s.out_vars, s.in_vars, s.value_vars, s.sign, s.index_map]


def _disk_key(graph) -> str:
    listed = json.dumps([_structure_fields(s) for s in graph.structures])
    return hashlib.sha256(f"{_code_hash()} {graph.fingerprint} {listed}".encode()).hexdigest()[:32]


def _load(path: str, graph) -> RuleTables | None:
    """The tables kept at ``path`` if they are there, whole, and ``graph``'s (its
    structures first, as :func:`build_tables` numbers them); else None."""
    if not os.path.exists(path):
        return None
    try:
        with np.load(path, allow_pickle=False) as z:
            listed = json.loads(bytes(z["structures"]).decode())
            structs = (None,) + tuple(
                st.Structure(tuple(o), tuple(i), tuple(ov), tuple(iv), None if v is None else tuple(v), sign, kind)
                for o, i, ov, iv, v, sign, kind in listed)
            n = len(structs)
            found = RuleTables(structs, z["compose"], z["join"], {c: z[f"cost_{c}"] for c in st.CONVENTIONS})
        if structs[1:1 + len(graph.structures)] != tuple(graph.structures) or any(
                a.shape != (n, n) for a in (found.compose, found.join, *found.cost.values())):
            raise ValueError("not this graph's tables")
        return found
    except Exception as e:  # noqa: BLE001 - a damaged file is rebuilt, whatever broke it
        warnings.warn(f"alphagrad: rebuilding the rule tables kept in {path} ({type(e).__name__}: {e})",
                      stacklevel=4)
        return None


def _save(path: str, tables: RuleTables) -> None:
    """Keeps ``tables`` at ``path`` (written whole, then renamed: a reader never sees half
    a file); a directory that cannot be written gives a warning, and the tables stay in
    memory."""
    listed = json.dumps([_structure_fields(s) for s in tables.structures[1:]]).encode()
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                np.savez_compressed(f, structures=np.frombuffer(listed, np.uint8), compose=tables.compose,
                                    join=tables.join, **{f"cost_{c}": tables.cost[c] for c in st.CONVENTIONS})
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)
    except OSError as e:
        warnings.warn(f"alphagrad: cannot keep rule tables in {os.path.dirname(path)} ({e}); set "
                      f"${CACHE_ENV} to a writable directory, or unset it", stacklevel=4)
