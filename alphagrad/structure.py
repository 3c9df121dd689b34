"""Structured Jacobians: what a local partial Jacobian looks like, how two compose and add.

A local partial Jacobian ``dv/du`` of a vertex ``v`` (shape ``out_shape``) with respect
to ``u`` (shape ``in_shape``) is a tensor of shape ``out_shape + in_shape``. We never
store it densely. A :class:`Structure` labels every axis of ``v`` and of ``u`` with an
index *variable*:

* an output axis and an input axis with the same variable are **diagonal** (a Kronecker
  delta: elementwise ops, batch axes of ``dot_general``, broadcasts, transposes);
* a variable on one side only is **replicated**: the Jacobian does not change along it
  (new axes of a broadcast, summed axes of a reduction);
* the Jacobian's values, if any, form a *value tensor* over a subset of the variables
  (``value_vars``); ``value_vars is None`` means there is no value at all, only
  ``sign`` (+1 or -1) times the 0/1 pattern of the deltas (add, sub, neg, copies,
  transposes, broadcasts, reductions).

Size-1 axes carry no information: each gets its own variable, never in a value.

Composition ``dk/dj . dj/di`` unifies the variables of the two factors on ``j``'s axes
and is one einsum in which diagonal pairs share an index (Griewank & Walter,
*Evaluating Derivatives*, 2nd ed., ch. 9-10, for the elimination it serves). Its
multiplication count:

* ``"exact"`` (what the interpreter executes): 0 if either factor has no value (a sign
  and an index relabelling, or a sum that needs only additions); otherwise the product of
  the sizes of all variables in the einsum. Summing over a variable that neither factor
  depends on multiplies by its size, counted as one multiplication per result entry.
* ``"published"`` (the published AlphaGrad cost model): every product costs its
  multiplications by shape and sparsity, whatever the values: value x value as above,
  value x no-value = the size of the value factor, no-value x no-value = 1. On graphs of
  scalars every product costs 1.

Addition onto an existing edge keeps every delta the two summands share and turns the
others into value entries: exact, never approximate, but the result can be less sparse
than either summand (so the state after eliminating a set of vertices can depend on the
order in which they were eliminated; see ``tests/test_engine.py``).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Hashable, Sequence

import numpy as np

CONVENTIONS = ("exact", "published")
#: Kinds of index map (``Structure.index_map``) and what each guarantees: at most one
#: entry per output row, at most one per input column. "" is no map.
MAP_KINDS = {"": (False, False), "row": (True, False), "col": (False, True), "perm": (True, True)}


@dataclasses.dataclass(frozen=True)
class Structure:
    """The static structure of one local partial Jacobian ``dv/du``.

    Attributes:
      out_shape: shape of ``v``.
      in_shape: shape of ``u``.
      out_vars: one variable id per axis of ``v``.
      in_vars: one variable id per axis of ``u``.
      value_vars: sorted variable ids the value tensor is indexed by (its axis order), or
        ``None`` when the Jacobian is ``sign`` times its delta pattern (no values).
      sign: +1 or -1; only meaningful when ``value_vars is None`` or ``index_map``.
      index_map: ``""``, or the kind of static 0/1 map the value is (its entries times
        ``sign``): ``"row"``, every output entry is at most one input entry (a gather:
        tile, gather with constant indices); ``"col"``, every input entry goes to at most
        one output entry (a scatter-add with constant indices); ``"perm"``, both (slice,
        pad, concatenate, reverse, ...). A product with a map is a gather or a
        scatter-add of the other factor (no multiplication); two maps of a kind compose
        into one (see :data:`MAP_KINDS`).

    Build instances with :func:`make`, which puts them in canonical form, so that two
    equal Jacobian structures compare and hash equal.
    """

    out_shape: tuple[int, ...]
    in_shape: tuple[int, ...]
    out_vars: tuple[int, ...]
    in_vars: tuple[int, ...]
    value_vars: tuple[int, ...] | None
    sign: int = 1
    index_map: str = ""

    @property
    def has_value(self) -> bool:
        return self.value_vars is not None

    def var_sizes(self) -> dict[int, int]:
        return dict(self._axes)

    @functools.cached_property
    def _axes(self) -> tuple:
        """``(variable, size)`` of every axis, outputs first (kept: composing reads it)."""
        return tuple(zip(self.out_vars + self.in_vars, self.out_shape + self.in_shape))

    @functools.cached_property
    def _num_vars(self) -> int:
        """One more than the largest variable id."""
        return max(self.out_vars + self.in_vars, default=-1) + 1

    @property
    def value_shape(self) -> tuple[int, ...] | None:
        """Shape of the value tensor, or None if there is none."""
        if self.value_vars is None:
            return None
        sizes = self.var_sizes()
        return tuple(sizes[v] for v in self.value_vars)

    @property
    def value_size(self) -> int:
        shape = self.value_shape
        return 0 if shape is None else math.prod(shape)

    @property
    def entries(self) -> int:
        """How many entries of the Jacobian can be nonzero: the product of its distinct
        variables' sizes, and for an index map at most one per output row (``row``), per
        input column (``col``) or both (``perm``). A sum of two sparse structures that no
        structure holds is dense: this is what such a join costs in memory and in every
        later product, though the join itself multiplies nothing."""
        full = math.prod(self.var_sizes().values())
        rows, cols = MAP_KINDS[self.index_map]
        if rows:
            full = min(full, math.prod(self.out_shape))
        if cols:
            full = min(full, math.prod(self.in_shape))
        return full

    def describe(self) -> str:
        """A short human-readable form, e.g. ``diag[3] x2 value(0)``."""
        names = "abcdefghijklmnopqrstuvwxyz"
        name = lambda v: names[v % 26] + ("" if v < 26 else str(v // 26))
        out = "".join(name(v) for v in self.out_vars)
        inn = "".join(name(v) for v in self.in_vars)
        if self.value_vars is None:
            val = "+1" if self.sign > 0 else "-1"
        else:
            kind = ("-" if self.sign < 0 else "") + ("M" if self.index_map else "V")
            val = kind + "[" + "".join(name(v) for v in self.value_vars) + "]"
        return f"{out}<-{inn}:{val}"


def make(
    out_shape: Sequence[int],
    in_shape: Sequence[int],
    out_vars: Sequence[Hashable],
    in_vars: Sequence[Hashable],
    value_vars: Sequence[Hashable] | None,
    sign: int = 1,
    index_map: str = "",
) -> Structure:
    """Builds a canonical :class:`Structure` from variables of any hashable type.

    Variables are renumbered by first appearance (output axes, then input axes); each
    size-1 axis gets a fresh variable that no value depends on; ``value_vars`` are
    sorted; ``index_map`` (a kind of map, see :class:`Structure`) needs a value and keeps
    its ``sign``. Raises ValueError if an axis shared by a variable has a different size.
    """
    out_shape, in_shape = tuple(int(n) for n in out_shape), tuple(int(n) for n in in_shape)
    if len(out_vars) != len(out_shape) or len(in_vars) != len(in_shape):
        raise ValueError("one variable per axis is required")
    if sign not in (1, -1):
        raise ValueError("sign must be +1 or -1")
    if index_map not in MAP_KINDS:
        raise ValueError(f"index_map must be one of {sorted(MAP_KINDS)}, not {index_map!r}")
    if value_vars is None:
        if index_map:
            raise ValueError("an index map needs its value variables")
    else:
        on_axes = set(out_vars) | set(in_vars)
        missing = [v for v in value_vars if v not in on_axes]
        if missing:
            raise ValueError(f"value variables {missing} are on no axis")
    return _build(out_shape, in_shape, out_vars, in_vars, value_vars, sign, index_map)


def _build(out_shape, in_shape, out_vars, in_vars, value_vars, sign, index_map) -> Structure:
    """:func:`make` on checked arguments (int shapes, one variable per axis, value
    variables on axes): the canonical form, shared with the hot path of :func:`compose`."""
    canon, ids = _canonical(out_shape, in_shape, out_vars, in_vars)
    k = len(out_shape)
    if value_vars is None:
        values = None
    else:
        values = tuple(sorted({ids[v] for v in value_vars if v in ids}))
        sign = sign if index_map else 1
    return Structure(out_shape, in_shape, tuple(canon[:k]), tuple(canon[k:]), values, sign, index_map)


def _canonical(out_shape, in_shape, out_vars, in_vars) -> tuple[list, dict]:
    """``(canonical id of each axis, id of each variable label)``: ids by first appearance,
    a fresh one for every size-1 axis (whose labels are not in the dict)."""
    ids: dict[Hashable, int] = {}
    sizes: dict[Hashable, int] = {}
    canon = []
    fresh = 0
    for var, n in zip((*out_vars, *in_vars), out_shape + in_shape):
        if n == 1:
            canon.append(fresh)
            fresh += 1
            continue
        k = ids.get(var)
        if k is None:
            ids[var] = k = fresh
            sizes[var] = n
            fresh += 1
        elif sizes[var] != n:
            raise ValueError(f"variable {var!r} has sizes {sizes[var]} and {n}")
        canon.append(k)
    return canon, ids


def canonical_ids(out_shape, in_shape, out_vars, in_vars) -> dict:
    """The canonical id :func:`make` gives each variable label (size-1 axes excluded)."""
    return _canonical(tuple(out_shape), tuple(in_shape), out_vars, in_vars)[1]


def diagonal(shape: Sequence[int], value: bool = True, sign: int = 1) -> Structure:
    """The structure of an elementwise map on ``shape``: diagonal in every axis."""
    axes = list(range(len(shape)))
    return make(shape, shape, axes, axes, axes if value else None, sign)


# --------------------------------------------------------------------------------------
# Mixed-radix digits. A reshape that merges or splits axes relates the digits of their
# flattened index one to one: with every axis of the graph split into the digits its
# reshapes need (``trace`` finds them), such a reshape is a relabelling without value, and
# every other structure is the same Jacobian on the split axes.


def refine(s: Structure, out_digits: Sequence[Sequence[int]], in_digits: Sequence[Sequence[int]]) -> Structure:
    """``s`` with each axis split into mixed-radix digits (major first): ``out_digits[d]``
    are the digit sizes of output axis ``d`` (their product is its size), ``in_digits``
    those of the input axes. Every variable becomes one variable per digit and a value over
    it a value over its digits (the same numbers, reshaped to :attr:`value_shape`).

    Raises ValueError if two axes of one variable split differently.
    """
    out_digits = [tuple(int(n) for n in d) for d in out_digits]
    in_digits = [tuple(int(n) for n in d) for d in in_digits]
    split: dict = {}
    for var, n, dg in zip(s.out_vars + s.in_vars, s.out_shape + s.in_shape, out_digits + in_digits):
        if math.prod(dg) != n:
            raise ValueError(f"digits {dg} do not multiply to the axis size {n}")
        if n != 1 and split.setdefault(var, dg) != dg:
            raise ValueError(f"the axes of one variable split differently: {split[var]} and {dg}")

    def labels(vars_, shape, digits, side):
        out = []
        for ax, (var, n, dg) in enumerate(zip(vars_, shape, digits)):
            out += [(side, ax)] if n == 1 else [(var, k) for k in range(len(dg))]
        return out

    values = None if s.value_vars is None else [(v, k) for v in s.value_vars for k in range(len(split[v]))]
    return make([n for dg in out_digits for n in dg], [n for dg in in_digits for n in dg],
                labels(s.out_vars, s.out_shape, out_digits, "o"), labels(s.in_vars, s.in_shape, in_digits, "i"),
                values, s.sign, s.index_map)


def relabel_digits(out_digits: Sequence[Sequence[int]], in_digits: Sequence[Sequence[int]]) -> Structure:
    """A reshape on split axes: the k-th digit of the output's flattened index is the
    k-th of the input's (the digit sizes, flattened, must agree), no value."""
    flat_out = [int(n) for dg in out_digits for n in dg]
    flat_in = [int(n) for dg in in_digits for n in dg]
    if [n for n in flat_out if n != 1] != [n for n in flat_in if n != 1]:
        raise ValueError(f"the digits {flat_out} and {flat_in} of a reshape do not match")

    def labels(flat, side):
        k, out = 0, []
        for t, n in enumerate(flat):
            out.append((side, t) if n == 1 else k)
            k += n != 1
        return out

    return make(flat_out, flat_in, labels(flat_out, "o"), labels(flat_in, "i"), None)


# --------------------------------------------------------------------------------------
# Composition and addition.


def _merged(a: Structure, b: Structure) -> tuple[list, int]:
    """The variables of ``a`` (ids ``0..na-1``) and ``b`` (ids ``na + v``) after
    identifying ``a``'s input axes with ``b``'s output axes: ``(representative of each,
    na)`` (a union-find over plain integers: the hot path of building rule tables)."""
    na = a._num_vars
    parent = list(range(na + b._num_vars))
    for ra, rb in zip(a.in_vars, b.out_vars):  # (chains stay short: a few axes each)
        rb += na
        while parent[ra] != ra:
            ra = parent[ra]
        while parent[rb] != rb:
            rb = parent[rb]
        if ra != rb:
            parent[rb] = ra
    roots = []
    for r in parent:
        while parent[r] != r:
            r = parent[r]
        roots.append(r)
    return roots, na


@dataclasses.dataclass(frozen=True)
class Product:
    """The result of composing two structures, and what the product costs.

    Attributes:
      result: structure of the product ``dk/di``.
      cost: scalar multiplications, per convention (``{"exact": .., "published": ..}``).
      einsum: the product as an einsum over the two value tensors, used by the
        interpreter: ``(a_labels, b_labels, out_labels)`` with labels as ints, where a
        factor without value has ``None`` labels. ``scale`` multiplies the result (the
        size of summed variables that no factor depends on, times the signs).
      maps: whether each factor is an index map (its value a static 0/1 table).
    """

    result: Structure
    cost: dict
    einsum: tuple
    scale: int
    maps: tuple = (False, False)


def compose(a: Structure, b: Structure) -> Product:
    """Composes ``a = dk/dj`` with ``b = dj/di`` into ``dk/di`` (chain rule)."""
    result, cost, (out_roots, in_roots, a_vals, b_vals, scale) = _compose(a, b)
    # Express the einsum in the result's canonical variable ids where possible.
    label = _Labeller(result, out_roots, in_roots)
    einsum = (
        None if a_vals is None else tuple(label(r) for r in a_vals),
        None if b_vals is None else tuple(label(r) for r in b_vals),
        result.value_vars,
    )
    # A result with no value but a non-unit constant keeps it in `scale`.
    return Product(result, cost, einsum, a.sign * b.sign * scale, (bool(a.index_map), bool(b.index_map)))


def compose_result(a: Structure, b: Structure) -> tuple[Structure, dict]:
    """The structure and the cost of ``a . b``, without the einsum that computes it: all
    that closing a graph's structures under composition needs (see
    :func:`alphagrad.rules.build_tables`; :func:`compose` gives the whole product)."""
    return _compose(a, b)[:2]


def _compose(a: Structure, b: Structure):
    """``(result, cost, (out_roots, in_roots, a_vals, b_vals, scale))`` of ``a . b``: the
    rules of :func:`compose`, with the union-find roots its einsum is written in."""
    if a.in_shape != b.out_shape:
        raise ValueError(f"cannot compose: {a.in_shape} != {b.out_shape}")
    roots, shift = _merged(a, b)  # b's variable v is roots[shift + v]
    out_roots = [roots[v] for v in a.out_vars]
    in_roots = [roots[shift + v] for v in b.in_vars]
    sizes = {}
    for v, n in a._axes:
        sizes[roots[v]] = n
    for v, n in b._axes:
        sizes[roots[shift + v]] = n
    on_result = {*out_roots, *in_roots}
    a_vals = None if a.value_vars is None else [roots[v] for v in a.value_vars]
    b_vals = None if b.value_vars is None else [roots[shift + v] for v in b.value_vars]
    in_values = {*(a_vals or ()), *(b_vals or ())}
    scale = 1
    for r, n in sizes.items():  # variables summed over that no factor depends on
        if r not in on_result and r not in in_values:
            scale *= n
    sign = a.sign * b.sign
    if a_vals is None and b_vals is None:
        const = sign * scale
        if abs(const) == 1:
            result = _build(a.out_shape, b.in_shape, out_roots, in_roots, None, const, "")
        else:
            result = _build(a.out_shape, b.in_shape, out_roots, in_roots, (), 1, "")
        cost = {"exact": 0, "published": 1}
    elif a.index_map or b.index_map:
        # A gather or scatter-add of the other factor: no multiplication (but a constant
        # scale of the result, if any). Two maps of a kind give one; else a value.
        (row_a, col_a), (row_b, col_b) = _map_kind(a), _map_kind(b)
        kind = {(True, True): "perm", (True, False): "row", (False, True): "col"}.get(
            (row_a and row_b, col_a and col_b), "") if scale == 1 else ""
        res_vals = in_values & on_result
        result = _build(a.out_shape, b.in_shape, out_roots, in_roots, res_vals, sign if kind else 1, kind)
        scaling = math.prod([sizes[r] for r in res_vals]) if scale != 1 else 0  # the result's value size
        cost = {"exact": scaling, "published": scaling}
    else:
        res_vals = in_values & on_result
        result = _build(a.out_shape, b.in_shape, out_roots, in_roots, res_vals, 1, "")
        scaling = math.prod([sizes[r] for r in res_vals]) if scale != 1 else 0
        if a_vals is not None and b_vals is not None:
            einsum_size = math.prod([sizes[r] for r in in_values])
            cost = {"exact": einsum_size + scaling, "published": einsum_size}
        else:
            cost = {"exact": scaling,
                    "published": math.prod([sizes[r] for r in (a_vals if a_vals is not None else b_vals)])}
    return result, cost, (out_roots, in_roots, a_vals, b_vals, scale)


def _map_kind(s: Structure) -> tuple:
    """``(row, col)``: whether every output entry of ``s`` is +-1 times at most one input
    entry, and every input entry reaches at most one output entry. An index map says so;
    a pattern without value is a row map unless it sums (an input-only variable) and a
    column map unless it broadcasts (an output-only variable); a value is neither."""
    if s.index_map:
        return MAP_KINDS[s.index_map]
    if s.value_vars is not None:
        return False, False
    only = lambda these, those: any(n != 1 and v not in set(those) for v, n in these)
    return (not only(zip(s.in_vars, s.in_shape), s.out_vars),
            not only(zip(s.out_vars, s.out_shape), s.in_vars))


class _Labeller:
    """Maps union-find roots to the result's canonical ids (fresh ids for summed ones)."""

    def __init__(self, result: Structure, out_roots, in_roots):
        self.ids = {}
        for r, v, n in zip(
            list(out_roots) + list(in_roots),
            result.out_vars + result.in_vars,
            result.out_shape + result.in_shape,
        ):
            if n != 1:
                self.ids[r] = v
        self.next = max(result.out_vars + result.in_vars, default=-1) + 1

    def __call__(self, r):
        if r not in self.ids:
            self.ids[r] = self.next
            self.next += 1
        return self.ids[r]


def join(a: Structure, b: Structure) -> Structure:
    """The structure of ``a + b`` (two paths into the same edge), exactly.

    Two axes share a variable in the sum iff they share one in both summands; a summand's
    delta that the other does not have becomes part of the value.
    """
    if (a.out_shape, a.in_shape) != (b.out_shape, b.in_shape):
        raise ValueError("cannot add Jacobians of different shapes")
    axes_a = a.out_vars + a.in_vars
    axes_b = b.out_vars + b.in_vars
    pair = list(zip(axes_a, axes_b))
    k = len(a.out_shape)
    values = set()
    split_any = False
    for side, s, vars_ in ((0, a, axes_a), (1, b, axes_b)):
        parts: dict[int, set] = {}
        for p in pair:
            parts.setdefault(p[side], set()).add(p)
        for v, ps in parts.items():
            split = len(ps) > 1
            split_any |= split
            if split or (s.value_vars is not None and v in s.value_vars):
                values |= ps
    shape_all = a.out_shape + a.in_shape
    # size-1 axes never carry a value
    values = {p for p in values if any(q == p and n != 1 for q, n in zip(pair, shape_all))}
    if a.value_vars is None and b.value_vars is None and not split_any:
        return make(a.out_shape, a.in_shape, pair[:k], pair[k:], ())
    return make(a.out_shape, a.in_shape, pair[:k], pair[k:], sorted(values))


def embed_index(src: Structure, dst: Structure):
    """How to re-express a value of ``src`` in the (less sparse) layout of ``dst``.

    ``dst`` must be at most as sparse as ``src`` (``join(src, dst) == dst``). Returns
    ``(gather, mask)``: for every variable of ``src.value_vars`` the ``dst`` value axis
    that indexes it (``gather``), and for every group of ``dst`` value axes that ``src``
    ties together with a delta (``mask``), so the interpreter can expand without any
    multiplication.
    """
    axes_s = src.out_vars + src.in_vars
    axes_d = dst.out_vars + dst.in_vars
    shape = src.out_shape + src.in_shape
    dvals = dst.value_vars or ()
    rep: dict[int, int] = {}
    groups: dict[int, set] = {}
    for vs, vd, n in zip(axes_s, axes_d, shape):
        if n == 1:
            continue
        groups.setdefault(vs, set()).add(vd)
        rep.setdefault(vs, vd)
    gather = tuple(dvals.index(rep[v]) for v in (src.value_vars or ()))
    mask = tuple(
        tuple(sorted(dvals.index(d) for d in g)) for g in groups.values() if len(g) > 1
    )
    return gather, mask


# --------------------------------------------------------------------------------------
# Dense expansion (for tests and for building values of small index maps).


def dense_layout(s: Structure):
    """``(grid, mask, first)`` of the dense ``out_shape + in_shape`` array: sparse index
    grids, where axes sharing a variable agree (the diagonals), and each variable's first
    axis."""
    shape = s.out_shape + s.in_shape
    grid = np.indices(shape, sparse=True) if shape else []
    mask = np.ones(shape, dtype=bool)
    first: dict[int, int] = {}
    for ax, v in enumerate(s.out_vars + s.in_vars):
        if v in first:
            mask = mask & (grid[ax] == grid[first[v]])
        else:
            first[v] = ax
    return grid, mask, first


def to_dense(s: Structure, value=None, xp=np):
    """Expands a structured Jacobian to its dense ``out_shape + in_shape`` array."""
    shape = s.out_shape + s.in_shape
    grid, mask, first = dense_layout(s)
    if s.value_vars is None:
        return xp.where(xp.asarray(mask), float(s.sign), 0.0)
    value = xp.asarray(signed(s, value))
    if tuple(value.shape) != s.value_shape:
        raise ValueError(f"value has shape {value.shape}, structure needs {s.value_shape}")
    idx = tuple(grid[first[v]] for v in s.value_vars)
    vals = value[idx] if idx else xp.broadcast_to(value, shape)
    return xp.where(xp.asarray(mask), vals, xp.zeros((), value.dtype))


# --------------------------------------------------------------------------------------
# Values: what the interpreter executes for a product and a sum. An index map's value is
# its static 0/1 table (a NumPy array; the structure holds the sign); every other value
# is an array of the computation.


def signed(s: Structure, value):
    """The entries of ``s``'s Jacobian that ``value`` holds: an index map's table times
    its sign, any other value as it is."""
    return -value if s.index_map and s.sign < 0 else value


def product_value(p: Product, a_value, b_value, xp=None):
    """The value tensor of a product ``a . b`` (see :func:`compose`), or None.

    Args:
      p: the product (from :func:`compose` or the rule tables).
      a_value, b_value: the factors' value tensors (None for a factor without value).

    Returns:
      ``(value, multiplications)``: the result's value tensor (None if it has none) and
      the scalar multiplications this function issued, counted from the operand shapes
      of the einsum it emitted (plus one per entry when it scales by a constant).
    """
    import jax.numpy as jnp

    xp = xp or jnp
    la, lb, lout = p.einsum
    if lout is None:
        return None, 0
    if any(p.maps):
        return _map_product(p, a_value, b_value, xp)
    sizes: dict = {}
    mults = 0
    operands = [(v, l) for v, l in ((a_value, la), (b_value, lb)) if l is not None]
    for v, labels in operands:
        for n, lab in zip(v.shape, labels):
            sizes[lab] = n
    if len(operands) == 2:
        if set(la) | set(lb) == set(lout):  # nothing contracted: a broadcast product,
            value = _aligned(a_value, la, lout, xp) * _aligned(b_value, lb, lout, xp)  # fusible
        else:
            value = xp.einsum(a_value, list(la), b_value, list(lb), list(lout))
        mults += math.prod(sizes.values())
    elif len(operands) == 1:
        v, labels = operands[0]
        value = xp.einsum(v, list(labels), list(lout))
    else:
        value = xp.asarray(float(p.scale))
        return value, 0
    if abs(p.scale) != 1:
        value = value * float(abs(p.scale))
        mults += math.prod(value.shape)
    if p.scale < 0:
        value = -value
    return value, mults


def _map_product(p: Product, a_value, b_value, xp):
    """:func:`product_value` where a factor is an index map (a static 0/1 table): the
    other factor gathered at the table's nonzeros and added into place (no
    multiplication, except the constant ``scale`` of a result that is no map)."""
    la, lb, lout = p.einsum
    factors = list(zip((a_value, b_value), (la, lb), p.maps))
    static = [(np.asarray(v), l) for v, l, m in factors if m]
    other = [(v, l) for v, l, m in factors if l is not None and not m]
    if len(static) == 2:
        table = np.einsum(static[0][0], list(static[0][1]), static[1][0], list(static[1][1]), list(lout))
    elif not other:
        table = np.einsum(static[0][0], list(static[0][1]), list(lout))
    else:
        table = None
    if p.result.index_map:  # two maps of a kind compose into one: 0/1, the sign in the structure
        if table is None or table.max(initial=0) > 1:
            raise AssertionError("a product of two maps of a kind must be a 0/1 map")
        return table.astype(np.int8), 0
    if table is not None:
        value = xp.asarray(table, np.float32)
    else:
        value = _gather_add(other[0][0], other[0][1], static[0][0], static[0][1], lout, xp)
    mults = 0
    if abs(p.scale) != 1:
        value = value * float(abs(p.scale))
        mults = math.prod(value.shape)
    return (-value if p.scale < 0 else value), mults


def _gather_add(x, lx, table, lt, lout, xp):
    """``einsum(x, lx, table, lt, lout)`` for a static 0/1 ``table``: ``x`` read at the
    table's nonzeros, summed over its labels that leave, and put (added where two land on
    one place) at the nonzeros' coordinates of the labels that stay. Where the nonzeros
    run through a strided window of either side's axes (slices, pads, reverses,
    concatenates), reading is a strided slice and putting a pad with zeros, which XLA
    fuses; elsewhere a gather and a scatter."""
    if not lt:  # a 0-d table: the other factor, or nothing
        summed = xp.einsum(x, list(lx), list(lout))
        return summed if table else xp.zeros_like(summed)
    nz = dict(zip(lt, np.nonzero(table)))
    size = dict(zip(lt, table.shape))
    size.update(zip(lx, x.shape))
    shared = [l for l in lx if l in nz]
    free = [l for l in lx if l not in nz]
    x = xp.transpose(x, [lx.index(l) for l in shared + free])
    count = len(next(iter(nz.values())))
    read = _window([nz[l] for l in shared])
    if not shared:
        got = xp.broadcast_to(x, (count,) + x.shape)
    elif read is not None:
        got = xp.reshape(x[tuple(slice(a, a + k * d if a + k * d >= 0 else None, d) for a, k, d in read)],
                         (count,) + x.shape[len(shared):])
    else:
        got = x[tuple(nz[l] for l in shared)]
    gone = [1 + k for k, l in enumerate(free) if l not in lout]
    if gone:
        got = xp.sum(got, axis=tuple(gone))
    kept = [l for l in free if l in lout]
    placed = [l for l in lout if l not in kept]
    put = _window([nz[l] for l in placed])
    spread = None if put is not None else _spread_window(placed, nz, size, count)
    if put is not None:
        out = _pad_window(xp.reshape(got, [k for _, k, _ in put] + list(got.shape[1:])), put,
                          [size[l] for l in placed], xp)
    elif spread is not None:  # a window of some placed labels, the others follow them
        window, runs, rest, mask = spread
        mask = mask(xp)
        v = _pad_window(xp.reshape(got, [k for _, k, _ in runs] + list(got.shape[1:])), runs,
                        [size[l] for l in window], xp)
        v = xp.reshape(v, v.shape[:len(window)] + (1,) * len(rest) + v.shape[len(window):])
        mask = mask.reshape(mask.shape + (1,) * (v.ndim - mask.ndim))
        out = xp.where(mask, v, xp.zeros((), v.dtype))
        placed = window + rest
    else:
        n = math.prod(size[l] for l in placed)
        flat = np.ravel_multi_index([nz[l] for l in placed], [size[l] for l in placed]) if placed else np.zeros(count, np.int64)
        alone = len(np.unique(flat)) == count
        if alone and 2 * count >= n:  # each lands alone, most places filled: a gather from a zero-padded copy
            where = np.full(n, count)
            where[flat] = np.arange(count)
            padded = xp.concatenate([got, xp.zeros((1,) + got.shape[1:], got.dtype)])
            out = padded[where]
        else:  # few places filled, or several per place
            out = xp.zeros((n,) + got.shape[1:], got.dtype)
            if xp is np:
                np.add.at(out, flat, got)
            else:
                out = out.at[flat].set(got, unique_indices=True) if alone else out.at[flat].add(got)
        out = xp.reshape(out, [size[l] for l in placed] + list(got.shape[1:]))
    current = placed + kept
    return xp.transpose(out, [current.index(l) for l in lout])


def _window(coords: list) -> list | None:
    """``[(start, count, step)]`` per axis if the coordinate arrays ``coords`` enumerate a
    strided window of those axes in row-major order (each axis an arithmetic
    progression, possibly descending), else None."""
    if not coords or len(coords[0]) == 0:
        return None
    runs, axes = [], []
    for c in coords:
        first = np.sort(np.unique(c, return_index=True)[1])
        vals = c[first]  # in order of appearance
        step = int(vals[1] - vals[0]) if len(vals) > 1 else 1
        if np.any(np.diff(vals) != step):
            return None
        runs.append((int(vals[0]), len(vals), step))
        axes.append(vals)
    grid = np.meshgrid(*axes, indexing="ij")
    if grid[0].size != len(coords[0]) or any(np.any(g.ravel() != c) for g, c in zip(grid, coords)):
        return None
    return runs


def _spread_window(placed, nz, size, count):
    """For placing values at the nonzeros' coordinates of ``placed`` labels without a
    gather: ``(window, runs, rest, mask)`` where the coordinates of the ``window`` labels
    run through a strided window one nonzero per place (``runs``, see :func:`_window`),
    the ``rest`` labels' coordinates follow from theirs, and ``mask(xp)`` (over ``window +
    rest``, see :func:`_follow`) marks the nonzeros; None if no such split exists."""
    import itertools

    for k in range(1, len(placed)):
        for window in itertools.combinations(placed, k):
            runs = _window([nz[l] for l in window])
            if runs is None or math.prod(c for _, c, _ in runs) != count:
                continue
            rest = [l for l in placed if l not in window]
            return list(window), runs, rest, _follow(list(window), rest, nz, size)
    return None


def _follow(window, rest, nz, size):
    """The static mask over ``window + rest`` labels marking the nonzeros: from iotas
    where each ``rest`` coordinate is an affine function of one window coordinate (a
    shifted or strided diagonal), else as a constant array."""
    labels = window + rest
    rules = []
    for r in rest:
        for w in window:
            c, x = nz[r], nz[w]
            b = (c[-1] - c[0]) // (x[-1] - x[0]) if x[-1] != x[0] else 0
            if np.array_equal(c, c[0] + b * (x - x[0])):
                rules.append((labels.index(r), labels.index(w), int(c[0] - b * x[0]), int(b)))
                break
        else:
            mask = np.zeros([size[l] for l in labels], bool)
            mask[tuple(nz[l] for l in labels)] = True
            return lambda xp: mask
    shape = [size[l] for l in labels]

    def mask(xp):
        iota = lambda k: xp.reshape(xp.arange(shape[k]), [n if j == k else 1 for j, n in enumerate(shape)])
        out = None
        for r, w, a, b in rules:
            m = iota(r) == a + b * iota(w)
            out = m if out is None else out & m
        return xp.broadcast_to(out, shape)
    return mask


def _pad_window(v, runs, sizes, xp):
    """Zeros of shape ``sizes + v.shape[len(runs):]`` with ``v`` in the strided window
    ``runs`` (see :func:`_window`) of its leading axes: a pad (with interior zeros for
    strides)."""
    config = []
    for axis, ((start, count, step), n) in enumerate(zip(runs, sizes)):
        if step < 0:  # descending: reverse it
            v = xp.flip(v, axis)
            start, step = start + (count - 1) * step, -step
        last = start + (count - 1) * step
        config.append((start, n - 1 - last, step - 1))
    config += [(0, 0, 0)] * (v.ndim - len(runs))
    if xp is np:
        out = np.zeros([n for n in sizes] + list(v.shape[len(runs):]), v.dtype)
        out[tuple(slice(lo, lo + (k - 1) * (i + 1) + 1, i + 1) for (lo, _, i), k in zip(config, v.shape))] = v
        return out
    import jax

    return jax.lax.pad(v, xp.zeros((), v.dtype), config)


def _aligned(value, labels, out, xp):
    """``value`` (axes ``labels``, all in ``out``) transposed to ``out``'s order, with
    size-1 axes where it lacks a label, ready to broadcast."""
    present = [lab for lab in out if lab in labels]
    value = xp.transpose(value, [list(labels).index(lab) for lab in present]) if len(present) > 1 else value
    return xp.reshape(value, [value.shape[present.index(lab)] if lab in labels else 1 for lab in out])


def embed_value(src: Structure, value, dst: Structure, xp=None):
    """``value`` of ``src`` re-expressed in the layout of the less sparse ``dst``.

    Deltas of ``src`` that ``dst`` does not have become 0/1 entries; replicated
    variables are broadcast. No multiplications.
    """
    import jax.numpy as jnp

    xp = xp or jnp
    if src == dst:
        return value
    shape = dst.value_shape
    gather, masks = embed_index(src, dst)
    grid = np.indices(shape, sparse=True) if shape else []
    if src.value_vars is None:
        vals = xp.asarray(float(src.sign))
    else:
        value = signed(src, value)
        vals = value[tuple(grid[g] for g in gather)] if gather else value
    mask = np.ones(shape, dtype=bool)
    for group in masks:
        for other in group[1:]:
            mask = mask & (grid[group[0]] == grid[other])
    dtype = vals.dtype if hasattr(vals, "dtype") else None
    return xp.where(xp.asarray(mask), xp.broadcast_to(vals, shape), xp.zeros((), dtype))
