"""The computational graph of a JAX function: vertices, edges and their Jacobian structure."""

from __future__ import annotations

import collections
import collections.abc
import dataclasses
import functools
import hashlib
import json
from typing import Any

import numpy as np

from alphagrad import structure as st

INPUT, INTERMEDIATE, OUTPUT = 0, 1, 2
KIND_NAMES = {INPUT: "input", INTERMEDIATE: "intermediate", OUTPUT: "output"}


@dataclasses.dataclass(frozen=True)
class Edge:
    """The local partial Jacobian ``d dst / d src`` and its structure."""

    src: int
    dst: int
    structure: st.Structure


@dataclasses.dataclass(frozen=True)
class Branch:
    """Which branch of a ``lax.cond``/``lax.switch`` the traced graph contains.

    Attributes:
      primitive: the JAX primitive (``cond``; ``lax.switch`` is a ``cond`` too).
      source: the user's source line of the call (with the loop iteration, if any).
      taken: the index of the branch taken (for ``lax.cond``: 1 = ``true_fun``).
      count: how many branches there are.
      on_arguments: whether the choice depends on the function's argument values (so
        another point may take another branch); only these enter the fingerprint.
    """

    primitive: str
    source: str
    taken: int
    count: int
    on_arguments: bool

    def describe(self, taken: int | None = None) -> str:
        k = self.taken if taken is None else taken
        which = {0: " (false_fun of lax.cond)", 1: " (true_fun of lax.cond)"}.get(k, "") if self.count == 2 else ""
        return f"branch {k} of {self.count}{which} of the `{self.primitive}` at {self.source}"


def longest_paths(V: int, src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(down, up)`` of the edges ``src -> dst`` over vertices numbered topologically: per
    vertex, the edges on the longest path from a vertex without predecessors, and to one
    without successors. Plain numpy, so that :mod:`alphagrad.features` compiles the same
    function for the graph left after some moves."""
    down = np.zeros(V, np.int64)
    up = np.zeros(V, np.int64)
    for e in np.argsort(dst, kind="mergesort"):
        down[dst[e]] = max(down[dst[e]], down[src[e]] + 1)
    for e in np.argsort(-src, kind="mergesort"):
        up[src[e]] = max(up[src[e]], up[dst[e]] + 1)
    return down, up


@dataclasses.dataclass(frozen=True, eq=False)
class Graph:
    """A traced function as a graph of vertices (values) and edges (local Jacobians).

    Vertices are numbered in a deterministic topological order: the inputs first (in the
    order of the flattened arguments), then every other vertex in the order the function
    computes it. An elimination order is a list of intermediate vertex ids.

    Attributes:
      shapes: shape of each vertex's value.
      dtypes: dtype name of each vertex's value.
      kinds: INPUT, INTERMEDIATE or OUTPUT per vertex.
      edges: every edge with its structure, sorted by (dst, src).
      sources: per vertex, the primitive that made it and the user's source line.
      input_vertices: per flattened input leaf, its vertex (-1 for a leaf that is not a
        float array, so not differentiable).
      output_vertices: per flattened output leaf, its vertex.
      in_tree, out_tree: the pytree structures of the arguments and the outputs.
      branches: per ``lax.cond``/``lax.switch`` met while tracing, in program order, the
        :class:`Branch` the graph contains (the one taken at the traced point).
      program: what the interpreter needs to evaluate the function and its local
        Jacobians (see ``alphagrad.trace``); not part of the graph's identity.
    """

    shapes: tuple
    dtypes: tuple
    kinds: tuple
    edges: tuple
    sources: tuple
    input_vertices: tuple
    output_vertices: tuple
    in_tree: Any = None
    out_tree: Any = None
    branches: tuple = ()
    program: Any = dataclasses.field(default=None, repr=False)

    # ---------------------------------------------------------------- basic facts
    @property
    def num_vertices(self) -> int:
        return len(self.shapes)

    @functools.cached_property
    def inputs(self) -> tuple:
        return tuple(v for v, k in enumerate(self.kinds) if k == INPUT)

    @functools.cached_property
    def intermediates(self) -> tuple:
        return tuple(v for v, k in enumerate(self.kinds) if k == INTERMEDIATE)

    @functools.cached_property
    def outputs(self) -> tuple:
        return tuple(v for v, k in enumerate(self.kinds) if k == OUTPUT)

    @functools.cached_property
    def predecessors(self) -> tuple:
        preds = [[] for _ in self.shapes]
        for e in self.edges:
            preds[e.dst].append(e.src)
        return tuple(tuple(p) for p in preds)

    @functools.cached_property
    def successors(self) -> tuple:
        succs = [[] for _ in self.shapes]
        for e in self.edges:
            succs[e.src].append(e.dst)
        return tuple(tuple(s) for s in succs)

    @functools.cached_property
    def depths(self) -> tuple[np.ndarray, np.ndarray]:
        """``(down, up)``: per vertex, the number of edges on the longest path from any
        input to it, and from it to any output (vertices are numbered topologically)."""
        return longest_paths(self.num_vertices, np.asarray([e.src for e in self.edges], np.int64),
                             np.asarray([e.dst for e in self.edges], np.int64))

    @functools.cached_property
    def false_twins(self) -> tuple:
        """Groups (ascending ids) of two or more intermediates with the same predecessors
        and successors over edges of the same structures. Such twins never share an edge
        and stay twins whatever else is eliminated; some cheapest order eliminates each
        group consecutively (Bentert et al., 2025), so annealing moves a group as one."""
        ins = collections.defaultdict(set)
        outs = collections.defaultdict(set)
        for e in self.edges:
            ins[e.dst].add((e.src, e.structure))
            outs[e.src].add((e.dst, e.structure))
        groups = collections.defaultdict(list)
        for v in self.intermediates:
            groups[(frozenset(ins[v]), frozenset(outs[v]))].append(v)
        return tuple(tuple(g) for g in groups.values() if len(g) > 1)

    @functools.cached_property
    def structures(self) -> tuple:
        """The distinct edge structures, in order of first appearance."""
        return tuple(dict.fromkeys(e.structure for e in self.edges))

    @functools.cached_property
    def fingerprint(self) -> str:
        """A hash of everything that determines elimination costs (shapes, kinds, edges),
        and of the branches taken where that choice depends on the argument values.

        Two graphs with the same fingerprint accept the same orders at the same costs;
        two points of a function that take different branches of a ``lax.cond`` give
        different fingerprints even where the branches' graphs look alike.
        """
        payload = {
            "shapes": [list(s) for s in self.shapes],
            "kinds": list(self.kinds),
            "edges": [
                [e.src, e.dst, list(e.structure.out_vars), list(e.structure.in_vars),
                 None if e.structure.value_vars is None else list(e.structure.value_vars),
                 e.structure.sign] + ([e.structure.index_map] if e.structure.index_map else [])
                for e in self.edges
            ],
        }
        chosen = [[b.taken, b.count] for b in self.branches if b.on_arguments]
        if chosen:  # absent otherwise, so graphs without such branches keep their hashes
            payload["branches"] = chosen
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]

    # ---------------------------------------------------------------- display
    def summary(self, max_rows: int = 40) -> str:
        """Counts of vertices and edges, and where each vertex came from in user code."""
        counts = collections.Counter(self.kinds)
        prims = collections.Counter(
            self.sources[v].split(" ")[0] for v in self.intermediates
        )
        lines = [
            f"Graph {self.fingerprint}: {counts[INPUT]} inputs, {counts[INTERMEDIATE]} "
            f"intermediates, {counts[OUTPUT]} outputs, {len(self.edges)} edges",
            "intermediate primitives: "
            + ", ".join(f"{n} {p}" for p, n in prims.most_common()),
        ]
        for b in self.branches:
            lines.append(f"takes {b.describe()}" + (" (chosen by the argument values)" if b.on_arguments else ""))
        for v in range(min(self.num_vertices, max_rows)):
            shape = "x".join(map(str, self.shapes[v])) or "scalar"
            lines.append(
                f"  {v:4d} {KIND_NAMES[self.kinds[v]]:12s} {self.dtypes[v]}[{shape}] "
                f"<- {list(self.predecessors[v])}  {self.sources[v]}"
            )
        if self.num_vertices > max_rows:
            lines.append(f"  ... {self.num_vertices - max_rows} more vertices")
        return "\n".join(lines)

    def __repr__(self) -> str:
        counts = collections.Counter(self.kinds)
        return (
            f"Graph(inputs={counts[INPUT]}, intermediates={counts[INTERMEDIATE]}, "
            f"outputs={counts[OUTPUT]}, edges={len(self.edges)}, fingerprint={self.fingerprint})"
        )

    # ---------------------------------------------------------------- orders
    def check_order(self, order) -> list[int]:
        """Returns ``order`` as a list of ints if it eliminates every intermediate once.

        An order is a sequence of vertex ids: a list, tuple, range, iterator or 1-D
        integer array (numpy or JAX) of Python or numpy integers. Raises TypeError for
        anything else (a set or dict, which have no order; a string; floats or bools,
        which are not ids) and ValueError for a repeated, missing or foreign vertex, each
        saying what to pass instead.
        """
        how = (f"pass the intermediates of this graph in elimination order, e.g. "
               f"list(graph.intermediates), or a name: 'fwd', 'rev', 'markowitz'")
        if isinstance(order, (str, bytes, bytearray)):
            raise TypeError(f"an order is a sequence of vertex ids, not {type(order).__name__} "
                            f"{order!r}; {how}")
        if isinstance(order, (set, frozenset, dict, collections.abc.Mapping, collections.abc.Set)):
            raise TypeError(f"an order is a sequence of vertex ids, but a {type(order).__name__} has "
                            f"no order; {how}")
        if hasattr(order, "dtype") and hasattr(order, "ndim"):  # numpy / JAX arrays
            if order.ndim != 1 or np.dtype(order.dtype).kind not in "iu":
                raise TypeError(f"an order is a 1-D array of integer vertex ids, got a "
                                f"{order.ndim}-D array of {order.dtype}; {how}")
            order = np.asarray(order).tolist()
        try:
            items = list(order)
        except TypeError:
            raise TypeError(f"an order is a sequence of vertex ids, got {type(order).__name__} "
                            f"{order!r}; {how}") from None
        ids = []
        for v in items:
            if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
                raise TypeError(f"vertex ids are ints, but the order contains {v!r} "
                                f"({type(v).__name__}); {how}")
            ids.append(int(v))
        order = ids
        inter = set(self.intermediates)
        bad = [v for v in order if v not in inter]
        if bad:
            kinds = {
                v: (KIND_NAMES[self.kinds[v]] if 0 <= v < self.num_vertices else "not a vertex")
                for v in bad[:5]
            }
            raise ValueError(
                f"the order contains vertices that are not intermediates of this graph: "
                f"{kinds}; intermediates are {self.intermediates[:3]}...{self.intermediates[-3:]}"
                f" (was the order computed for another graph? this graph is {self.fingerprint}"
                f"{self.branch_note()}); {how}"
            )
        counts = collections.Counter(order)
        dups = sorted(v for v, n in counts.items() if n > 1)
        if dups:
            raise ValueError(f"the order eliminates these vertices more than once: {dups[:10]}; "
                             f"eliminate each intermediate exactly once ({how})")
        missing = sorted(inter - set(order))
        if missing:
            raise ValueError(
                f"the order is missing {len(missing)} intermediate vertices, e.g. {missing[:10]}; "
                f"eliminate each intermediate exactly once ({how})"
            )
        return order

    def branch_note(self) -> str:
        """``", traced at a point that takes branch k of the cond at ...: ..."`` for a graph
        with argument-dependent branches (else ""), to append to an order-mismatch error."""
        chosen = [b for b in self.branches if b.on_arguments]
        if not chosen:
            return ""
        return (f", traced at a point that takes {chosen[0].describe()}"
                + (f" and {len(chosen) - 1} more argument-dependent branches" if len(chosen) > 1 else "")
                + ": an order made at a point that takes another branch does not fit, compute one "
                  "at these arguments")

    def branch_mismatch(self, other: "Graph") -> str | None:
        """Why an order made for this graph does not fit ``other``, a graph of the same
        function traced at a point that takes another branch (None if none differs).

        For the caller that holds both graphs (e.g. a Jacobian re-traced at new arguments).
        """
        for mine, theirs in zip(self.branches, other.branches):
            if mine.source != theirs.source:
                break
            if mine.taken != theirs.taken:
                return (f"this order was made for {mine.describe()}; at these arguments "
                        f"{theirs.describe()} is taken: compute an order for them "
                        f"(e.g. alphagrad.trace(f, *args) at these arguments)")
        return None

    # ---------------------------------------------------------------- serialization
    def to_arrays(self) -> dict:
        """The graph as plain arrays (what the dataset stores and the engine reads)."""
        structs = self.structures
        index = {s: k for k, s in enumerate(structs)}
        chosen = [[b.taken, b.count] for b in self.branches if b.on_arguments]
        extra = {"branches": chosen} if chosen else {}  # what the fingerprint hashes of them
        return {**extra,
            "shapes": [list(s) for s in self.shapes],
            "kinds": np.asarray(self.kinds, np.int8),
            "edges": np.asarray(
                [(e.src, e.dst, index[e.structure]) for e in self.edges], np.int32
            ).reshape(-1, 3),
            "structures": [dataclasses.asdict(s) for s in structs],
        }

    @classmethod
    def from_arrays(cls, arrays: dict) -> "Graph":
        """Rebuilds a graph (without its program) from :meth:`to_arrays`."""
        structs = []
        for d in arrays["structures"]:
            vv = d["value_vars"]
            structs.append(
                st.Structure(
                    tuple(d["out_shape"]), tuple(d["in_shape"]), tuple(d["out_vars"]),
                    tuple(d["in_vars"]), None if vv is None else tuple(vv), int(d["sign"]),
                    d.get("index_map") or "",  # absent in datasets made before index maps
                )
            )
        shapes = tuple(tuple(int(n) for n in s) for s in arrays["shapes"])
        kinds = tuple(int(k) for k in arrays["kinds"])
        edges = tuple(Edge(int(a), int(b), structs[int(s)]) for a, b, s in np.asarray(arrays["edges"]).reshape(-1, 3))
        branches = tuple(Branch("cond", "", int(t), int(n), True) for t, n in arrays.get("branches", ()))
        return cls(branches=branches,
            shapes=shapes, dtypes=("float32",) * len(shapes), kinds=kinds, edges=edges,
            sources=("",) * len(shapes), input_vertices=tuple(v for v, k in enumerate(kinds) if k == INPUT),
            output_vertices=tuple(v for v, k in enumerate(kinds) if k == OUTPUT),
        )
