"""The one registry from JAX primitives to the structure of their local partial Jacobians.

For every supported primitive, :data:`RULES` maps its name to a function that, given an
:class:`Equation` (the primitive's static parameters and operand shapes) and an operand
index, returns one :class:`~alphagrad.structure.Structure` per result (``None`` where the
result does not depend differentiably on that operand). :func:`local_value` computes the
value tensor of such a structure at concrete operands, from JAX's own JVP rules, so every
local Jacobian agrees with ``jax.jacfwd`` of the primitive by construction (and a test
checks it for every rule).

Primitives outside the registry raise :class:`UnsupportedPrimitiveError` at trace time.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from alphagrad import structure as st


class UnsupportedPrimitiveError(NotImplementedError):
    """A JAX primitive alphagrad has no Jacobian structure for."""


@dataclasses.dataclass(frozen=True, eq=False)
class Equation:
    """One primitive application, as the rules see it.

    Attributes:
      primitive: the JAX primitive (``.bind`` evaluates it).
      params: its static parameters.
      in_shapes, in_dtypes: operand shapes and dtypes.
      in_literals: the value of each operand that is a literal constant, else None.
      out_shapes, out_dtypes: result shapes and dtypes.
      source: where the user's code created it (``file:line (function)``).
    """

    primitive: Any
    params: dict
    in_shapes: tuple
    in_dtypes: tuple
    in_literals: tuple
    out_shapes: tuple
    out_dtypes: tuple
    source: str = ""

    @property
    def name(self) -> str:
        return self.primitive.name

    def bind(self, *operands):
        out = self.primitive.bind(*operands, **self.params)
        return out if self.primitive.multiple_results else [out]


Rule = Callable[[Equation, int], list]


def is_float(dtype) -> bool:
    return jnp.issubdtype(dtype, jnp.inexact)


# --------------------------------------------------------------------------------------
# Rules.


def _broadcast_in_vars(out_shape, in_shape):
    """Variables of an operand broadcast numpy-style (right-aligned) to ``out_shape``."""
    offset = len(out_shape) - len(in_shape)
    return [offset + t if n == out_shape[offset + t] else ("bcast", t) for t, n in enumerate(in_shape)]


def _elementwise(value=True, signs=None):
    """Elementwise ops; operands may be broadcast from rank 0 or size-1 axes."""

    def rule(eqn, argnum):
        out = eqn.out_shapes[0]
        in_vars = _broadcast_in_vars(out, eqn.in_shapes[argnum])
        out_vars = list(range(len(out)))
        if signs is not None:
            return [st.make(out, eqn.in_shapes[argnum], out_vars, in_vars, None, signs[argnum])]
        return [st.make(out, eqn.in_shapes[argnum], out_vars, in_vars, out_vars if value else None)]

    return rule


def _mul(eqn, argnum):
    other = eqn.in_literals[1 - argnum]
    if other is not None and np.ndim(other) == 0 and float(other) in (1.0, -1.0):
        return _elementwise(signs={argnum: int(float(other))})(eqn, argnum)
    return _elementwise()(eqn, argnum)


def _no_derivative(eqn, argnum):
    return [None] * len(eqn.out_shapes)


def _identity(eqn, argnum):
    return _elementwise(signs={argnum: 1})(eqn, argnum)


def _broadcast_in_dim(eqn, argnum):
    if argnum != 0:
        return [None]
    out, inn = eqn.out_shapes[0], eqn.in_shapes[0]
    dims = eqn.params["broadcast_dimensions"]
    in_vars = [dims[t] if n == out[dims[t]] else ("bcast", t) for t, n in enumerate(inn)]
    return [st.make(out, inn, range(len(out)), in_vars, None)]


def _transpose(eqn, argnum):
    perm = eqn.params["permutation"]
    return [st.make(eqn.out_shapes[0], eqn.in_shapes[0], perm, range(len(perm)), None)]


def _squeeze(eqn, argnum):
    inn = eqn.in_shapes[0]
    dims = {d % len(inn) for d in eqn.params["dimensions"]}
    kept = [t for t in range(len(inn)) if t not in dims]
    return [st.make(eqn.out_shapes[0], inn, kept, range(len(inn)), None)]


def _reshape(eqn, argnum):
    if argnum != 0:
        return [None]
    if eqn.params.get("dimensions") is not None:
        raise UnsupportedPrimitiveError("reshape with `dimensions` (a fused transpose)")
    out, inn = eqn.out_shapes[0], eqn.in_shapes[0]
    out_ax = [d for d, n in enumerate(out) if n != 1]
    in_ax = [t for t, n in enumerate(inn) if n != 1]
    out_vars: dict[int, Any] = {d: ("o1", d) for d, n in enumerate(out) if n == 1}
    in_vars: dict[int, Any] = {t: ("i1", t) for t, n in enumerate(inn) if n == 1}
    values = []
    i = j = 0
    while i < len(out_ax) or j < len(in_ax):
        go, gi = [out_ax[i]], [in_ax[j]]
        po, pi = out[out_ax[i]], inn[in_ax[j]]
        i, j = i + 1, j + 1
        while po != pi:
            if po < pi:
                go.append(out_ax[i]); po *= out[out_ax[i]]; i += 1
            else:
                gi.append(in_ax[j]); pi *= inn[in_ax[j]]; j += 1
        if len(go) == 1 and len(gi) == 1:  # one axis onto one axis: a plain delta
            out_vars[go[0]] = in_vars[gi[0]] = ("g", go[0])
        else:  # axes merged or split: a 0/1 value over the group
            for d in go:
                out_vars[d] = ("o", d); values.append(("o", d))
            for t in gi:
                in_vars[t] = ("i", t); values.append(("i", t))
    return [
        st.make(
            out, inn, [out_vars[d] for d in range(len(out))], [in_vars[t] for t in range(len(inn))],
            values if values else None, index_map="perm" if values else "",
        )
    ]


def _reduce_sum(eqn, argnum):
    inn = eqn.in_shapes[0]
    axes = set(eqn.params["axes"])
    kept = [t for t in range(len(inn)) if t not in axes]
    in_vars = [t if t not in axes else ("red", t) for t in range(len(inn))]
    return [st.make(eqn.out_shapes[0], inn, kept, in_vars, None)]


def _reduce_choose(eqn, argnum):
    inn = eqn.in_shapes[0]
    axes = set(eqn.params["axes"])
    kept = [t for t in range(len(inn)) if t not in axes]
    return [st.make(eqn.out_shapes[0], inn, kept, range(len(inn)), range(len(inn)))]


def _axiswise(axes_of: Callable[[Equation, int], set], index_map: str = "perm"):
    """Ops that map an operand to the result with a 0/1 index map on some axis pairs and a
    delta on all others (slice, pad, concatenate, rev, ...): a map of the kind
    ``index_map`` (see ``Structure.index_map``), or a value where it is "" (cumulative
    ops)."""

    def rule(eqn, argnum):
        results = []
        for outnum, out in enumerate(eqn.out_shapes):
            inn = eqn.in_shapes[argnum]
            axes = axes_of(eqn, argnum)
            out_vars = [("o", d) if d in axes else d for d in range(len(out))]
            in_vars = [("i", t) if t in axes else t for t in range(len(inn))]
            vals = [("o", d) for d in axes] + [("i", t) for t in axes]
            results.append(st.make(out, inn, out_vars, in_vars, vals if vals else None,
                                   index_map=index_map if vals else ""))
        return results

    return rule


def _changed_axes(eqn, argnum):
    """Axes whose extent differs between operand and result."""
    out, inn = eqn.out_shapes[0], eqn.in_shapes[argnum]
    return {t for t in range(len(inn)) if inn[t] != out[t] or inn[t] == 0}


def _slice_axes(eqn, argnum):
    inn, out = eqn.in_shapes[0], eqn.out_shapes[0]
    strides = eqn.params.get("strides") or (1,) * len(inn)
    starts = eqn.params["start_indices"]
    return {t for t in range(len(inn)) if inn[t] != out[t] or starts[t] != 0 or strides[t] != 1}


def _operand_only(rule):
    def wrapped(eqn, argnum):
        return rule(eqn, argnum) if argnum == 0 else [None] * len(eqn.out_shapes)

    return wrapped


def _pad_axes(eqn, argnum):
    config = eqn.params["padding_config"]
    return {t for t, (lo, hi, interior) in enumerate(config) if (lo, hi, interior) != (0, 0, 0)}


def _pad(eqn, argnum):
    if argnum == 0:
        return _axiswise(_pad_axes)(eqn, 0)
    # the padding value: its Jacobian is 0/1 on the padded cells
    out = eqn.out_shapes[0]
    return [st.make(out, (), range(len(out)), (), range(len(out)), index_map="row")]


def _concatenate(eqn, argnum):
    return _axiswise(lambda e, a: {e.params["dimension"]})(eqn, argnum)


def _stack(eqn, argnum):
    """Operand ``argnum`` lands at index ``argnum`` of a new axis: a one-hot value on it."""
    axis = eqn.params["axis"] % len(eqn.out_shapes[0])
    out = eqn.out_shapes[0]
    in_vars = [d for d in range(len(out)) if d != axis]
    return [st.make(out, eqn.in_shapes[argnum], range(len(out)), in_vars, [axis], index_map="perm")]


def _split(eqn, argnum):
    axis = eqn.params["axis"]
    inn = eqn.in_shapes[0]
    results = []
    for out in eqn.out_shapes:
        out_vars = [("o", d) if d == axis else d for d in range(len(out))]
        in_vars = [("i", t) if t == axis else t for t in range(len(inn))]
        results.append(st.make(out, inn, out_vars, in_vars, [("o", axis), ("i", axis)], index_map="perm"))
    return results


def _cumulative(eqn, argnum):
    return _axiswise(lambda e, a: {e.params["axis"]}, index_map="")(eqn, argnum)


#: The index operands of indexing ops: an op whose indices are constants of the trace
#: (``trace`` evaluates those computed from constants) is an index map.
INDEX_OPERANDS = {"gather": slice(1, None), "dynamic_slice": slice(1, None), "dynamic_update_slice": slice(2, None),
                  "scatter-add": slice(1, 2), "scatter_add": slice(1, 2)}


def _literal_indices(eqn) -> bool:
    """Whether the index operands of ``eqn`` are all constants of the trace."""
    return all(lit is not None for lit in eqn.in_literals[INDEX_OPERANDS[eqn.name]])


def _dynamic_slice(eqn, argnum):
    if argnum != 0:
        return [None]
    return _axiswise(_changed_axes, "perm" if _literal_indices(eqn) else "")(eqn, argnum)


def _dynamic_update_slice(eqn, argnum):
    if argnum == 0:  # the operand survives outside the updated window: a 0/1 diagonal
        return _elementwise()(eqn, argnum)
    if argnum == 1:
        return _axiswise(_changed_axes, "perm" if _literal_indices(eqn) else "")(eqn, argnum)
    return [None]


def _dense(eqn, argnum, index_map=""):
    """A dense value over every axis: gather/scatter whose index structure is static."""
    out, inn = eqn.out_shapes[0], eqn.in_shapes[argnum]
    ov, iv = [("o", d) for d in range(len(out))], [("i", t) for t in range(len(inn))]
    return [st.make(out, inn, ov, iv, ov + iv, index_map=index_map)]


def _gather(eqn, argnum):
    return _dense(eqn, argnum, "row" if _literal_indices(eqn) else "") if argnum == 0 else [None]


def _scatter_add(eqn, argnum):
    if argnum == 0:
        return _identity(eqn, 0)
    if argnum == 2:
        return _dense(eqn, argnum, "col" if _literal_indices(eqn) else "")
    return [None]


def _linalg(matrix_rank: dict):
    """Linear algebra (cholesky, lu, triangular_solve): every entry of a matrix result
    depends on every entry of the operand's matrix, so the value is dense over those axes;
    leading batch axes (shared by operands and results) are diagonal. ``matrix_rank``: the
    trailing matrix axes per operand (default 2); results' are their rank minus the batch
    axes. Integer results (lu's pivots, permutation) get no edge (``structures`` drops them)."""

    def rule(eqn, argnum):
        inn = eqn.in_shapes[argnum]
        nb = len(inn) - matrix_rank.get(argnum, 2)
        iv = [("b", t) for t in range(nb)] + [("i", t) for t in range(nb, len(inn))]
        results = []
        for out in eqn.out_shapes:
            ov = [("b", d) for d in range(nb)] + [("o", d) for d in range(nb, len(out))]
            results.append(st.make(out, inn, ov, iv, ov + [v for v in iv if v[0] == "i"]))
        return results

    return rule


def _custom_linear_solve(eqn, argnum):
    """``lax.custom_linear_solve`` (``jnp.linalg.solve``, ``inv``): ``x = A^{-1} b``, one
    primitive (its jaxprs are not inlined: JAX's JVP rule differentiates it as a whole).
    Dense in ``b`` and in the consts of the ``matvec`` that defines ``A``; JAX's rule
    gives the consts of ``vecmat``/``solve``/``transpose_solve`` no derivative."""
    lengths = eqn.params["const_lengths"]
    consts = lengths.matvec + lengths.vecmat + lengths.solve + lengths.transpose_solve
    if lengths.matvec <= argnum < consts:
        return [None] * len(eqn.out_shapes)
    inn = eqn.in_shapes[argnum]
    iv = [("i", t) for t in range(len(inn))]
    results = []
    for out in eqn.out_shapes:
        ov = [("o", d) for d in range(len(out))]
        results.append(st.make(out, inn, ov, iv, ov + iv))
    return results


def _select_n(eqn, argnum):
    return [None] if argnum == 0 else _elementwise()(eqn, argnum)


def _dot_general_labels(eqn):
    """Variable labels of the result and both operands of a dot_general."""
    (lc, rc), (lb, rb) = eqn.params["dimension_numbers"]
    lhs, rhs = eqn.in_shapes[0], eqn.in_shapes[1]
    lfree = [t for t in range(len(lhs)) if t not in lc and t not in lb]
    rfree = [t for t in range(len(rhs)) if t not in rc and t not in rb]
    lvar, rvar = {}, {}
    for k, (a, b) in enumerate(zip(lb, rb)):
        lvar[a] = rvar[b] = ("b", k)
    for k, (a, b) in enumerate(zip(lc, rc)):
        lvar[a] = rvar[b] = ("c", k)
    for k, a in enumerate(lfree):
        lvar[a] = ("l", k)
    for k, b in enumerate(rfree):
        rvar[b] = ("r", k)
    out = [("b", k) for k in range(len(lb))] + [("l", k) for k in range(len(lfree))]
    out += [("r", k) for k in range(len(rfree))]
    return out, [lvar[t] for t in range(len(lhs))], [rvar[t] for t in range(len(rhs))]


def _dot_general(eqn, argnum):
    out_labels, *operand_labels = _dot_general_labels(eqn)
    mine, other = operand_labels[argnum], operand_labels[1 - argnum]
    return [st.make(eqn.out_shapes[0], eqn.in_shapes[argnum], out_labels, mine, other)]


def _dot_general_value(eqn, argnum, s, operands):
    """The value of a dot_general edge is the other operand, laid out by variable."""
    out_labels, *operand_labels = _dot_general_labels(eqn)
    ids = st.canonical_ids(eqn.out_shapes[0], eqn.in_shapes[argnum], out_labels, operand_labels[argnum])
    other, shape = operands[1 - argnum], eqn.in_shapes[1 - argnum]
    axes = [t for t in range(len(shape)) if shape[t] != 1]
    order = sorted(range(len(axes)), key=lambda k: ids[operand_labels[1 - argnum][axes[k]]])
    return jnp.transpose(jnp.reshape(other, [shape[t] for t in axes]), order)


_ELEMENTWISE_VALUE = """
mul div max min pow integer_pow square sqrt rsqrt cbrt exp exp2 log log1p expm1 sin cos tan
asin acos atan atan2 sinh cosh tanh asinh acosh atanh logistic erf erfc erf_inv lgamma
digamma abs clamp rem
""".split()

_NO_DERIVATIVE = """
sign floor ceil round stop_gradient argmax argmin eq ne lt le gt ge and or not xor is_finite
iota nextafter population_count clz shift_left shift_right_logical shift_right_arithmetic
random_bits random_seed random_wrap random_unwrap threefry2x32
""".split()

RULES: dict[str, Rule] = {}
for _name in _ELEMENTWISE_VALUE:
    RULES[_name] = _elementwise()
for _name in _NO_DERIVATIVE:
    RULES[_name] = _no_derivative
RULES.update(
    {
        "mul": _mul,
        "add": _elementwise(signs={0: 1, 1: 1}),
        "add_any": _elementwise(signs={0: 1, 1: 1}),
        "sub": _elementwise(signs={0: 1, 1: -1}),
        "neg": _elementwise(signs={0: -1}),
        "convert_element_type": _identity,
        "reduce_precision": _identity,
        "copy": _identity,
        "copy_p": _identity,
        "select_n": _select_n,
        "broadcast_in_dim": _broadcast_in_dim,
        "reshape": _reshape,
        "transpose": _transpose,
        "squeeze": _squeeze,
        "reduce_sum": _reduce_sum,
        "reduce_max": _reduce_choose,
        "reduce_min": _reduce_choose,
        "reduce_prod": _reduce_choose,
        "cumsum": _cumulative,
        "cumprod": _cumulative,
        "cummax": _cumulative,
        "cummin": _cumulative,
        "concatenate": _concatenate,
        "split": _split,
        "stack": _stack,
        "slice": _operand_only(_axiswise(_slice_axes)),
        "pad": _pad,
        "rev": _axiswise(lambda e, a: set(e.params["dimensions"])),
        "tile": _axiswise(lambda e, a: {t for t, r in enumerate(e.params["reps"]) if r != 1}, "row"),
        "dynamic_slice": _dynamic_slice,
        "dynamic_update_slice": _dynamic_update_slice,
        "gather": _gather,
        "scatter-add": _scatter_add,
        "scatter_add": _scatter_add,
        "dot_general": _dot_general,
        "custom_linear_solve": _custom_linear_solve,
        "cholesky": _linalg({}),
        "lu": _linalg({}),
        "triangular_solve": _linalg({}),
    }
)
#: Primitives whose value has a faster formula than probing JAX's JVP.
VALUE_RULES = {"dot_general": _dot_general_value}


def structures(eqn: Equation, argnum: int) -> list:
    """One structure (or None) per result of ``eqn`` for its operand ``argnum``. A
    primitive with no float result (a comparison, an index search) has no derivative,
    whatever it is: it needs no rule."""
    if not is_float(eqn.in_dtypes[argnum]) or not any(is_float(dt) for dt in eqn.out_dtypes):
        return [None] * len(eqn.out_shapes)
    rule = RULES.get(eqn.name)
    if rule is None:
        raise UnsupportedPrimitiveError(
            f"alphagrad has no Jacobian rule for the JAX primitive `{eqn.name}` "
            f"(created at {eqn.source}). Rewrite that line with "
            f"supported operations, or open an issue naming the primitive."
        )
    out = rule(eqn, argnum)
    return [s if s is not None and is_float(dt) else None for s, dt in zip(out, eqn.out_dtypes)]


# --------------------------------------------------------------------------------------
# Values.


def map_value(eqn: Equation, argnum: int, outnum: int, s: st.Structure) -> np.ndarray:
    """The 0/1 table of an index-map structure (``s.index_map``) over ``s.value_vars``:
    static (shapes, parameters and constant indices only). A row map applies the
    primitive to the operand's element numbers, with -1 in every other differentiable
    operand; a column map (a scatter-add) probes the linear primitive at zeros."""
    inn = eqn.in_shapes[argnum]
    if not st.MAP_KINDS[s.index_map][0]:
        zeros = [np.zeros(shape, dtype) if lit is None else np.asarray(lit)
                 for shape, dtype, lit in zip(eqn.in_shapes, eqn.in_dtypes, eqn.in_literals)]
        with jax.ensure_compile_time_eval():
            return np.asarray(local_value(eqn, argnum, outnum, s, zeros)).astype(np.int8)
    operands = []
    for k, (shape, dtype) in enumerate(zip(eqn.in_shapes, eqn.in_dtypes)):
        if k == argnum:
            operands.append(np.arange(int(np.prod(inn)), dtype=np.int32).reshape(inn))
        elif is_float(dtype) or eqn.in_literals[k] is None:
            operands.append(np.full(shape, -1, np.int32))
        else:
            operands.append(np.asarray(eqn.in_literals[k]))
    with jax.ensure_compile_time_eval():
        source = np.asarray(eqn.bind(*operands)[outnum])  # input element of each output, or not one
    sizes = s.var_sizes()
    grid = np.indices([sizes[v] for v in s.value_vars], sparse=True) if s.value_vars else []
    at = lambda var, n: grid[s.value_vars.index(var)] if n != 1 and var in s.value_vars else 0
    picked = source[tuple(at(v, n) for v, n in zip(s.out_vars, s.out_shape))]
    flat, stride = 0, 1
    for v, n in reversed(list(zip(s.in_vars, s.in_shape))):
        flat, stride = flat + at(v, n) * stride, stride * n
    return np.broadcast_to(picked == flat, s.value_shape).astype(np.int8)


def local_value(eqn: Equation, argnum: int, outnum: int, s: st.Structure, operands: list):
    """The value tensor of the local Jacobian ``d out[outnum] / d operands[argnum]``.

    Computed with JAX's JVP of the primitive, probing only the entries the structure
    keeps: one tangent per entry of the variables the value depends on that sit on the
    operand's axes only (batched with vmap); diagonal variables are probed all at once.
    Returns None for a structure without value.
    """
    if s.value_vars is None:
        return None
    custom = VALUE_RULES.get(eqn.name)
    if custom is not None:
        return custom(eqn, argnum, s, operands)
    x = operands[argnum]
    sizes = s.var_sizes()
    out_set = set(s.out_vars)
    in_only = [v for v in s.value_vars if v not in out_set]
    diag_vals = [v for v in s.value_vars if v in out_set and v in set(s.in_vars)]

    def f(xi):
        args = list(operands)
        args[argnum] = xi
        return eqn.bind(*args)[outnum]

    # Tangent for one assignment of the in-only value variables.
    in_grid = np.indices(s.in_shape, sparse=True) if s.in_shape else []

    def tangent(coords):
        mask = jnp.ones(s.in_shape, dtype=bool)
        for ax, v in enumerate(s.in_vars):
            if s.in_shape[ax] == 1:
                continue
            if v in in_only:
                mask = mask & (in_grid[ax] == coords[in_only.index(v)])
            elif v not in diag_vals:
                mask = mask & (in_grid[ax] == 0)
        return mask.astype(x.dtype)

    shape_in_only = tuple(sizes[v] for v in in_only)
    jvp = lambda t: jax.jvp(f, (x,), (t,))[1]
    if in_only:
        coords = jnp.stack([jnp.asarray(c).reshape(-1) for c in np.indices(shape_in_only)], axis=-1)
        outs = jax.vmap(jvp)(jax.vmap(tangent)(coords))  # [P, *out_shape]
    else:  # one tangent (elementwise and broadcast partials, most edges): no vmap to trace
        probe = all(n == 1 or v in diag_vals for v, n in zip(s.in_vars, s.in_shape))
        outs = jvp(jnp.ones(s.in_shape, x.dtype) if probe else tangent(()))[None]
    # Read the value entries: value variables on output axes span their range, others 0.
    out_vals = [v for v in s.value_vars if v in out_set]
    idx = [slice(None)]
    kept_axes = []
    seen = set()
    for ax, v in enumerate(s.out_vars):
        if s.out_shape[ax] == 1:
            idx.append(0)
        elif v in out_vals and v not in seen:
            idx.append(slice(None))
            kept_axes.append(v)
            seen.add(v)
        else:
            idx.append(0)
    read = outs[tuple(idx)]  # [P, *sizes of kept out vars]
    read = jnp.reshape(read, shape_in_only + read.shape[1:])
    current = in_only + kept_axes
    perm = [current.index(v) for v in s.value_vars]
    return jnp.transpose(read, perm)
