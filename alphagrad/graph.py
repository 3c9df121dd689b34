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
    def structures(self) -> tuple:
        """The distinct edge structures, in order of first appearance."""
        return tuple(dict.fromkeys(e.structure for e in self.edges))

    @functools.cached_property
    def fingerprint(self) -> str:
        """A hash of everything that determines elimination costs (shapes, kinds, edges).

        Two graphs with the same fingerprint accept the same orders at the same costs.
        """
        payload = {
            "shapes": [list(s) for s in self.shapes],
            "kinds": list(self.kinds),
            "edges": [
                [e.src, e.dst, list(e.structure.out_vars), list(e.structure.in_vars),
                 None if e.structure.value_vars is None else list(e.structure.value_vars),
                 e.structure.sign]
                for e in self.edges
            ],
        }
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
                f" (was the order computed for another graph? this graph is {self.fingerprint}); "
                f"{how}"
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

    # ---------------------------------------------------------------- serialization
    def to_arrays(self) -> dict:
        """The graph as plain arrays (what the dataset stores and the engine reads)."""
        structs = self.structures
        index = {s: k for k, s in enumerate(structs)}
        return {
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
                )
            )
        shapes = tuple(tuple(int(n) for n in s) for s in arrays["shapes"])
        kinds = tuple(int(k) for k in arrays["kinds"])
        edges = tuple(Edge(int(a), int(b), structs[int(s)]) for a, b, s in np.asarray(arrays["edges"]).reshape(-1, 3))
        return cls(
            shapes=shapes, dtypes=("float32",) * len(shapes), kinds=kinds, edges=edges,
            sources=("",) * len(shapes), input_vertices=tuple(v for v, k in enumerate(kinds) if k == INPUT),
            output_vertices=tuple(v for v, k in enumerate(kinds) if k == OUTPUT),
        )
