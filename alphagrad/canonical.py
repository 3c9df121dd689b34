"""A canonical form of a graph: a numbering of its vertices that does not depend on how
they were numbered, and a hash of the graph in that numbering.

Two traces of one function (renamed, or with its intermediates computed in another
valid order) give the same :attr:`Canonical.hash`, and an elimination order written in
canonical labels (:meth:`Canonical.to_labels`) maps back onto either
(:meth:`Canonical.from_labels`) at the same cost: what a disk cache of orders needs
(:mod:`alphagrad.order_cache`). :attr:`Graph.fingerprint` hashes the vertex ids as
they are, so it changes under renumbering.

How: colour refinement (1-dimensional Weisfeiler-Lehman) from vertex labels (kind,
shape, dtype, the primitive that made it, and the positions of an input or output among
the flattened arguments or results) over edges labelled by their Jacobian structure.
Each round hashes a vertex's colour with the multiset of (edge label, value) of its
predecessors, their values computed first in one pass in topological order, and likewise
of its successors in one pass in reverse, so that a round carries colours along whole
paths (plain rounds would need one per edge of the longest path); rounds repeat until no
colour class splits. Classes left with several vertices are then
split one at a time (individualisation and refinement, as graph-isomorphism tools do):
a class of false twins (same labelled neighbours: exchangeable) at once, any other by
singling out its first vertex and refining again. Where a class is not an orbit of the
graph's automorphisms (rare: the input positions break most symmetry) the labels, and
so the hash, may differ between numberings; a cache then misses, it never maps an order
wrongly, since the hash covers the whole graph in canonical labels.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json

from alphagrad.graph import INPUT, Graph

#: Refinements by singling out one vertex before the rest of the ties are broken by
#: vertex id (each refinement is a few passes over the edges).
MAX_INDIVIDUALISED = 64


@dataclasses.dataclass(frozen=True)
class Canonical:
    """A graph's canonical labels and hash.

    Attributes:
      labels: per vertex id, its canonical label (a permutation of ``range(V)``).
      hash: a hex hash of the graph in canonical labels.
      exact: whether every tie was broken by the graph's structure (else by vertex id,
        after :data:`MAX_INDIVIDUALISED` refinements: the hash may then depend on the
        numbering).
    """

    labels: tuple
    hash: str
    exact: bool

    def to_labels(self, order) -> list[int]:
        """An order of vertex ids as canonical labels."""
        return [self.labels[v] for v in order]

    def from_labels(self, labels) -> list[int]:
        """Canonical labels back to this graph's vertex ids (ValueError for a label it
        does not have)."""
        inverse = {lab: v for v, lab in enumerate(self.labels)}
        try:
            return [inverse[int(lab)] for lab in labels]
        except KeyError as e:
            raise ValueError(f"canonical label {e.args[0]} is not a vertex of this graph") from None


def _h(obj) -> int:
    """A 64-bit hash of a small Python value (ints, strings, tuples), the same in every
    process (unlike ``hash`` of a string)."""
    return int.from_bytes(hashlib.blake2b(repr(obj).encode(), digest_size=8).digest(), "little")


def _structure_fields(s) -> tuple:
    return (s.out_shape, s.in_shape, s.out_vars, s.in_vars, s.value_vars, s.sign, s.index_map)


def _vertex_labels(graph: Graph) -> list[tuple]:
    """What a vertex is, whatever its id: kind, shape, dtype, primitive, and its
    positions among the flattened inputs and outputs."""
    ins = {}
    for pos, v in enumerate(graph.input_vertices):
        if v >= 0:
            ins.setdefault(v, []).append(pos)
    outs = {}
    for pos, v in enumerate(graph.output_vertices):
        outs.setdefault(v, []).append(pos)
    return [(graph.kinds[v], tuple(graph.shapes[v]), str(graph.dtypes[v]),
             "input" if graph.kinds[v] == INPUT else graph.sources[v].split(" ")[0],
             tuple(ins.get(v, ())), tuple(outs.get(v, ())))
            for v in range(graph.num_vertices)]


class _Refiner:
    """Colour refinement on one graph (see the module docstring)."""

    def __init__(self, graph: Graph):
        V = graph.num_vertices
        self.V = V
        structure_ids = {s: _h(_structure_fields(s)) for s in graph.structures}
        self.preds = [[] for _ in range(V)]
        self.succs = [[] for _ in range(V)]
        for e in graph.edges:
            label = structure_ids[e.structure]
            self.preds[e.dst].append((e.src, label))
            self.succs[e.src].append((e.dst, label))
        self.topo = self._topological()

    def _topological(self) -> list[int]:
        """A topological order (Kahn's): the passes only read colours already computed."""
        indeg = [len(p) for p in self.preds]
        ready = [v for v in range(self.V) if indeg[v] == 0]
        out = []
        while ready:
            v = ready.pop()
            out.append(v)
            for w, _ in self.succs[v]:
                indeg[w] -= 1
                if indeg[w] == 0:
                    ready.append(w)
        if len(out) != self.V:
            raise ValueError("the graph has a cycle: it is not a computational graph")
        return out

    def refine(self, colours: list[int]) -> list[int]:
        """Colours refined until no class splits."""
        classes = len(set(colours))
        while True:
            down = [0] * self.V
            for v in self.topo:
                down[v] = hash((colours[v], tuple(sorted([(lab, down[u]) for u, lab in self.preds[v]]))))
            up = [0] * self.V
            for v in reversed(self.topo):
                up[v] = hash((colours[v], tuple(sorted([(lab, up[w]) for w, lab in self.succs[v]]))))
            colours = [hash((colours[v], down[v], up[v])) for v in range(self.V)]
            now = len(set(colours))
            if now == classes:
                return colours
            classes = now

    def twins(self, members: list[int]) -> bool:
        """Whether ``members`` all have the same labelled predecessors and successors."""
        first = (sorted(self.preds[members[0]]), sorted(self.succs[members[0]]))
        return all((sorted(self.preds[v]), sorted(self.succs[v])) == first for v in members[1:])

    def discrete(self, colours: list[int]) -> tuple[list[int], bool]:
        """Colours with every class split to one vertex, and whether each split came
        from the structure (see :data:`MAX_INDIVIDUALISED`)."""
        individualised, exact = 0, True
        while True:
            classes: dict = {}
            for v, c in enumerate(colours):
                classes.setdefault(c, []).append(v)
            tied = sorted((c, members) for c, members in classes.items() if len(members) > 1)
            if not tied:
                return colours, exact
            c, members = tied[0]
            if self.twins(members):  # exchangeable: any numbering gives the same graph
                for k, v in enumerate(members):
                    colours[v] = hash((c, 1, k))
            elif individualised < MAX_INDIVIDUALISED:
                colours[members[0]] = hash((c, 2))
                colours = self.refine(colours)
                individualised += 1
            else:
                for c, members in tied:
                    for k, v in enumerate(members):
                        colours[v] = hash((c, 3, k))
                exact = False


@functools.lru_cache(maxsize=64)
def canonical(graph: Graph) -> Canonical:
    """The canonical labels and hash of ``graph`` (kept for the graph's lifetime in
    this process, up to 64 graphs)."""
    vertex_labels = _vertex_labels(graph)
    refiner = _Refiner(graph)
    colours, exact = refiner.discrete(refiner.refine([_h(lab) for lab in vertex_labels]))
    rank = {c: k for k, c in enumerate(sorted(colours))}
    labels = tuple(rank[c] for c in colours)
    by_label = sorted(range(graph.num_vertices), key=labels.__getitem__)
    payload = {
        "vertices": [list(vertex_labels[v]) for v in by_label],
        "edges": sorted([labels[e.src], labels[e.dst], repr(_structure_fields(e.structure))] for e in graph.edges),
        "branches": [[b.taken, b.count] for b in graph.branches if b.on_arguments],
    }
    digest = hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:32]
    return Canonical(labels, digest, exact)
