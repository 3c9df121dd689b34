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
import math
from typing import Hashable, Sequence

import numpy as np

CONVENTIONS = ("exact", "published")


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
      sign: +1 or -1; only meaningful when ``value_vars is None``.

    Build instances with :func:`make`, which puts them in canonical form, so that two
    equal Jacobian structures compare and hash equal.
    """

    out_shape: tuple[int, ...]
    in_shape: tuple[int, ...]
    out_vars: tuple[int, ...]
    in_vars: tuple[int, ...]
    value_vars: tuple[int, ...] | None
    sign: int = 1

    @property
    def has_value(self) -> bool:
        return self.value_vars is not None

    def var_sizes(self) -> dict[int, int]:
        sizes = {}
        for var, n in zip(self.out_vars + self.in_vars, self.out_shape + self.in_shape):
            sizes[var] = n
        return sizes

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

    def describe(self) -> str:
        """A short human-readable form, e.g. ``diag[3] x2 value(0)``."""
        names = "abcdefghijklmnopqrstuvwxyz"
        name = lambda v: names[v % 26] + ("" if v < 26 else str(v // 26))
        out = "".join(name(v) for v in self.out_vars)
        inn = "".join(name(v) for v in self.in_vars)
        if self.value_vars is None:
            val = "+1" if self.sign > 0 else "-1"
        else:
            val = "V[" + "".join(name(v) for v in self.value_vars) + "]"
        return f"{out}<-{inn}:{val}"


def make(
    out_shape: Sequence[int],
    in_shape: Sequence[int],
    out_vars: Sequence[Hashable],
    in_vars: Sequence[Hashable],
    value_vars: Sequence[Hashable] | None,
    sign: int = 1,
) -> Structure:
    """Builds a canonical :class:`Structure` from variables of any hashable type.

    Variables are renumbered by first appearance (output axes, then input axes); each
    size-1 axis gets a fresh variable that no value depends on; ``value_vars`` are
    sorted. Raises ValueError if an axis shared by a variable has a different size.
    """
    out_shape, in_shape = tuple(int(n) for n in out_shape), tuple(int(n) for n in in_shape)
    if len(out_vars) != len(out_shape) or len(in_vars) != len(in_shape):
        raise ValueError("one variable per axis is required")
    labels, ids, sizes = _canonical(out_shape, in_shape, out_vars, in_vars)
    canon = [ids[lab] for lab in labels]
    k = len(out_shape)
    if value_vars is None:
        values = None
        if sign not in (1, -1):
            raise ValueError("sign must be +1 or -1")
    else:
        on_axes = set(out_vars) | set(in_vars)
        missing = [v for v in value_vars if v not in on_axes]
        if missing:
            raise ValueError(f"value variables {missing} are on no axis")
        values = tuple(sorted({ids[v] for v in value_vars if v in sizes}))
        sign = 1
    return Structure(out_shape, in_shape, tuple(canon[:k]), tuple(canon[k:]), values, sign)


def _canonical(out_shape, in_shape, out_vars, in_vars):
    sizes: dict[Hashable, int] = {}
    fresh = 0
    labels = []
    for var, n in zip(list(out_vars) + list(in_vars), tuple(out_shape) + tuple(in_shape)):
        if n == 1:
            labels.append(("__one__", fresh))
            fresh += 1
            continue
        if sizes.setdefault(var, n) != n:
            raise ValueError(f"variable {var!r} has sizes {sizes[var]} and {n}")
        labels.append(var)
    ids: dict[Hashable, int] = {}
    for lab in labels:
        ids.setdefault(lab, len(ids))
    return labels, ids, sizes


def canonical_ids(out_shape, in_shape, out_vars, in_vars) -> dict:
    """The canonical id :func:`make` gives each variable label (size-1 axes excluded)."""
    return _canonical(out_shape, in_shape, out_vars, in_vars)[1]


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
                values, s.sign)


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


class _UnionFind:
    def __init__(self):
        self.parent: dict = {}

    def find(self, x):
        self.parent.setdefault(x, x)
        while self.parent[x] != x:
            self.parent[x] = self.parent[self.parent[x]]
            x = self.parent[x]
        return x

    def union(self, a, b):
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[rb] = ra


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
    """

    result: Structure
    cost: dict
    einsum: tuple
    scale: int


def compose(a: Structure, b: Structure) -> Product:
    """Composes ``a = dk/dj`` with ``b = dj/di`` into ``dk/di`` (chain rule)."""
    if a.in_shape != b.out_shape:
        raise ValueError(f"cannot compose: {a.in_shape} != {b.out_shape}")
    uf = _UnionFind()
    for va, vb in zip(a.in_vars, b.out_vars):
        uf.union(("a", va), ("b", vb))
    root = lambda side, v: uf.find((side, v))
    out_roots = [root("a", v) for v in a.out_vars]
    in_roots = [root("b", v) for v in b.in_vars]
    sizes = {}
    for side, s in (("a", a), ("b", b)):
        for v, n in s.var_sizes().items():
            sizes[root(side, v)] = n
    on_result = set(out_roots) | set(in_roots)
    a_vals = None if a.value_vars is None else [root("a", v) for v in a.value_vars]
    b_vals = None if b.value_vars is None else [root("b", v) for v in b.value_vars]
    in_values = set(a_vals or ()) | set(b_vals or ())
    all_roots = set(sizes)
    free_summed = [r for r in all_roots if r not in on_result and r not in in_values]
    scale = math.prod(sizes[r] for r in free_summed)
    sign = a.sign * b.sign
    if a_vals is None and b_vals is None:
        const = sign * scale
        if abs(const) == 1:
            result = make(a.out_shape, b.in_shape, out_roots, in_roots, None, const)
        else:
            result = make(a.out_shape, b.in_shape, out_roots, in_roots, ())
        cost = {"exact": 0, "published": 1}
    else:
        res_vals = sorted((in_values & on_result), key=repr)
        result = make(a.out_shape, b.in_shape, out_roots, in_roots, res_vals)
        result_size = result.value_size
        einsum_size = math.prod(sizes[r] for r in in_values)
        scaling = result_size if scale != 1 else 0
        if a_vals is not None and b_vals is not None:
            exact = einsum_size + scaling
            published = einsum_size
        else:
            exact = scaling
            published = math.prod(sizes[r] for r in (a_vals if a_vals is not None else b_vals))
        cost = {"exact": exact, "published": published}
    # Express the einsum in the result's canonical variable ids where possible.
    label = _Labeller(result, out_roots, in_roots)
    einsum = (
        None if a_vals is None else tuple(label(r) for r in a_vals),
        None if b_vals is None else tuple(label(r) for r in b_vals),
        result.value_vars,
    )
    # A result with no value but a non-unit constant keeps it in `scale`.
    return Product(result, cost, einsum, sign * scale)


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
    value = xp.asarray(value)
    if tuple(value.shape) != s.value_shape:
        raise ValueError(f"value has shape {value.shape}, structure needs {s.value_shape}")
    idx = tuple(grid[first[v]] for v in s.value_vars)
    vals = value[idx] if idx else xp.broadcast_to(value, shape)
    return xp.where(xp.asarray(mask), vals, xp.zeros((), value.dtype))


# --------------------------------------------------------------------------------------
# Values: what the interpreter executes for a product and a sum.


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
        vals = value[tuple(grid[g] for g in gather)] if gather else value
    mask = np.ones(shape, dtype=bool)
    for group in masks:
        for other in group[1:]:
            mask = mask & (grid[group[0]] == grid[other])
    dtype = vals.dtype if hasattr(vals, "dtype") else None
    return xp.where(xp.asarray(mask), xp.broadcast_to(vals, shape), xp.zeros((), dtype))
