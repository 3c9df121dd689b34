"""Rule tables: every structure a graph's eliminations can produce, how they compose and
add, and what each product costs, generated from :mod:`alphagrad.structure`.

The elimination engine (JAX) and the compiled CPU evaluator both read these tables, so
they agree by construction (and ``tests/test_engine.py`` checks it). Id 0 stands for
"no edge": composing with it gives 0 at cost 0, adding it changes nothing, so the engine
needs no masks.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from alphagrad import structure as st

NO_EDGE = 0
#: A table entry for two structures that can never meet (incompatible shapes).
INVALID = -1


class TooManyStructuresError(RuntimeError):
    """The closure of a graph's structures under composition and addition is too large."""


@dataclasses.dataclass(frozen=True, eq=False)
class RuleTables:
    """Composition, addition and cost tables over a closed set of structures.

    Attributes:
      structures: the structures; index 0 is ``None`` (no edge).
      compose: ``[S, S]`` id of ``a . b`` for ``a = dk/dj``, ``b = dj/di``.
      join: ``[S, S]`` id of ``a + b``.
      cost: per convention, ``[S, S]`` multiplications of ``a . b`` (int64).
      products: ``(a, b) -> structure.Product`` for the interpreter.
    """

    structures: tuple
    compose: np.ndarray
    join: np.ndarray
    cost: dict
    products: dict

    @property
    def size(self) -> int:
        return len(self.structures)

    def index(self, s: st.Structure) -> int:
        return self._index[s]

    @functools.cached_property
    def _index(self) -> dict:
        return {s: k for k, s in enumerate(self.structures) if s is not None}


def build_tables(initial, max_structures: int = 4096) -> RuleTables:
    """Closes ``initial`` structures under composition and addition, and tabulates.

    Only shape-compatible pairs are combined (``a.in_shape == b.out_shape`` for
    composition, equal shapes for addition), which is all an elimination can meet.

    Raises:
      TooManyStructuresError: if more than ``max_structures`` structures arise.
    """
    structs: list = [None]
    index: dict = {}
    by_in: dict = {}
    by_out: dict = {}
    by_shapes: dict = {}
    compose: dict = {}
    join: dict = {}
    products: dict = {}
    queue: list = []

    def add(s):
        if s in index:
            return index[s]
        if len(structs) > max_structures:
            raise TooManyStructuresError(
                f"more than {max_structures} distinct Jacobian structures arise in this "
                f"graph's eliminations; raise `max_structures` or simplify the function"
            )
        k = len(structs)
        structs.append(s)
        index[s] = k
        by_in.setdefault(s.in_shape, []).append(k)
        by_out.setdefault(s.out_shape, []).append(k)
        by_shapes.setdefault((s.out_shape, s.in_shape), []).append(k)
        queue.append(k)
        return k

    for s in initial:
        add(s)
    while queue:
        k = queue.pop()
        s = structs[k]
        for t in list(by_out.get(s.in_shape, ())):  # s . t
            if (k, t) not in compose:
                p = st.compose(s, structs[t])
                products[(k, t)] = p
                compose[(k, t)] = add(p.result)
        for t in list(by_in.get(s.out_shape, ())):  # t . s
            if (t, k) not in compose:
                p = st.compose(structs[t], s)
                products[(t, k)] = p
                compose[(t, k)] = add(p.result)
        for t in list(by_shapes.get((s.out_shape, s.in_shape), ())):
            if (k, t) not in join:
                j = add(st.join(s, structs[t]))
                join[(k, t)] = join[(t, k)] = j
    n = len(structs)
    comp = np.full((n, n), INVALID, np.int32)
    comp[0, :] = comp[:, 0] = NO_EDGE
    jn = np.full((n, n), INVALID, np.int32)
    jn[0, :] = np.arange(n)
    jn[:, 0] = np.arange(n)
    costs = {c: np.zeros((n, n), np.int64) for c in st.CONVENTIONS}
    for (a, b), p in products.items():
        comp[a, b] = compose[(a, b)]
        for c in st.CONVENTIONS:
            costs[c][a, b] = p.cost[c]
    for (a, b), j in join.items():
        jn[a, b] = j
    return RuleTables(tuple(structs), comp, jn, costs, products)
