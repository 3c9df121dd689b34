"""From a JAX function to its :class:`~alphagrad.graph.Graph`.

``trace(f, *args)`` runs ``jax.make_jaxpr``, inlines sub-jaxprs (jit, closed_call,
remat), drops what does not depend on an input or does not reach an output, merges no-op
values into their operand, and gives every remaining value a vertex and every
differentiable dependency an edge with its Jacobian structure (one rule per primitive, in
:mod:`alphagrad.primitives`).

Axes are split into mixed-radix digits where reshapes need it (:func:`split_axes`): a
reshape that merges or splits axes (flattening ``(4, 6)`` into ``(24,)``, attention heads
``(T, H*Dh) <-> (T, H, Dh)``) then relabels digits, with no value and no multiplication,
and every other edge holds the same Jacobian on the split axes. The structures' shapes are
the split ones; ``Graph.shapes`` keeps the values' own.

A call with a custom derivative rule (``jax.custom_jvp``, ``jax.custom_vjp``: relu,
softplus, logsumexp, a user's straight-through estimator) is not differentiated through
its implementation: its edges come from the rule itself. The rule's linear map from
input tangents to output tangents (the JVP rule; for ``custom_vjp`` the transpose of the
VJP rule, as ``jax.linear_transpose`` gives it) is traced and inlined, with everything it
computes from the primal values held constant. So the Jacobian is the one ``jax.jacrev``
gives, with the sparsity of the rule.

Control flow with live (differentiated) operands is resolved at trace time:

* ``lax.scan`` (and ``fori_loop`` with Python-int bounds, which JAX writes as a scan) is
  unrolled: each iteration's equations are inlined, ``xs[i]`` taken with ``slice`` +
  ``squeeze`` and the ``ys`` stacked with ``broadcast_in_dim`` + ``concatenate``;
  vertex sources say which iteration (``sin at f.py:12 (step) [iteration 3 of 5, scan at
  f.py:20]``). ``reverse`` and ``length`` are honoured, ``unroll`` is irrelevant.
* ``lax.while_loop`` is unrolled when its predicate depends on constants only (a counter
  from literal bounds): the predicate is evaluated on concrete values each iteration.
  A predicate that depends on an argument (a traced trip count) is refused.
* ``lax.cond``/``lax.switch``: the graph is the branch taken at the example arguments;
  the index is computed from the concrete arguments (only the equations it depends on are
  evaluated) and recorded in :attr:`Graph.branches`, which the fingerprint includes.

Concrete values are used for nothing else: without control flow only shapes and dtypes
matter. Unrolling stops with a :class:`TraceError` once the program exceeds
``max_equations`` (default :data:`MAX_EQUATIONS`).
"""

from __future__ import annotations

import dataclasses
import os
import sys

import jax
import jax.extend as jex
import jax.numpy as jnp
import numpy as np
from jax._src import source_info_util

from alphagrad import primitives as prim
from alphagrad import structure as st
from alphagrad.graph import INPUT, INTERMEDIATE, OUTPUT, Branch, Edge, Graph

#: Default limit on the equations of a traced program with unrolled loops (see ``trace``'s
#: ``max_equations``): about 20x the largest graphs the search is measured on, and some
#: seconds of tracing. Checked while unrolling, so programs without loops are not limited.
MAX_EQUATIONS = 100_000

#: Primitives whose sub-jaxpr is inlined, with the parameter that holds it.
_INLINE = {
    "pjit": "jaxpr",
    "jit": "jaxpr",
    "closed_call": "call_jaxpr",
    "core_call": "call_jaxpr",
    "remat": "jaxpr",
    "remat2": "jaxpr",
    "checkpoint": "jaxpr",
}

#: Calls whose derivative is a user-given rule, not that of their implementation.
_CUSTOM_RULE = ("custom_jvp_call", "custom_vjp_call")

#: Primitives linear in each operand separately (so in at most one tangent operand).
_BILINEAR = {"mul": (0, 1), "dot_general": (0, 1), "conv_general_dilated": (0, 1), "div": (0,)}

#: Control flow resolved at trace time when an operand is differentiated (see the module doc).
_CONTROL_FLOW = ("scan", "while", "cond")


_COMPLEX = (
    "{what} is {dtype}: alphagrad computes Jacobians of real functions through real values "
    "only (jax.jacrev's complex conventions are not supported); {fix}"
)


class TraceError(ValueError):
    """The function or its arguments cannot be turned into a graph."""


class ConcreteValuesNeeded(TraceError):
    """A ``lax.cond``/``lax.switch`` chooses its branch from argument values, and the
    arguments were given as shapes only (``jax.ShapeDtypeStruct``, or tracers under
    ``jax.jit``/``jax.vmap``): trace again at concrete example values."""


@dataclasses.dataclass
class Step:
    """One primitive application of the program: reads slots, writes slots."""

    equation: prim.Equation
    inputs: tuple  # slot id per operand, or ("literal", value)
    outputs: tuple  # slot id per result


@dataclasses.dataclass
class Program:
    """What the interpreter needs to evaluate a traced function.

    ``steps`` compute every slot from the input slots; ``slot_vertex`` maps slots that
    are vertices to their vertex id; ``edge_sources`` lists, per edge ``(src, dst)``, the
    (step, operand, result) local Jacobians summed into it (several when an operand is
    used twice, as in ``x * x``); ``output_copies`` maps output vertices that copy another
    vertex (an output that is also an input or used further) to that vertex.
    """

    num_slots: int
    input_slots: tuple
    steps: list
    slot_vertex: dict
    vertex_slot: dict
    edge_sources: dict
    output_copies: dict
    output_slots: tuple
    #: per entry of ``Graph.branches``: ``(slot of its branch index, number of branches)``
    #: if the index depends on the argument values, else None; and the steps computing them.
    branch_slots: tuple = ()
    branch_steps: tuple = ()
    #: per vertex whose axes split into mixed-radix digits (see :func:`split_axes`): the
    #: digit sizes of each axis; and the reshape steps that became relabellings of them.
    vertex_digits: dict = dataclasses.field(default_factory=dict)
    digit_reshapes: frozenset = frozenset()
    #: per vertex made inside unrolled loops: ``((loop, iteration), ...)``, outermost loop
    #: first (``loop`` numbers each unrolled scan/while instance), so the interpreter can
    #: run a loop's eliminations as a ``lax.scan``; not part of the graph's identity.
    vertex_loops: dict = dataclasses.field(default_factory=dict)
    #: the same per step (``()`` outside loops), so it can run the loop's primal steps as a scan.
    step_loops: tuple = ()

    def refined(self, s: st.Structure, value, src: int, dst: int):
        """A local Jacobian ``(s, value)`` of edge ``src -> dst`` on the split axes."""
        r = refine_edge(self.vertex_digits, s, src, dst)
        if r is s or value is None or r.value_vars is None:
            return r, None if r.value_vars is None else value
        reshape = np.reshape if isinstance(value, np.ndarray) else jnp.reshape  # an index map's table stays static
        return r, reshape(value, r.value_shape)

    def branches_at(self, leaves) -> tuple:
        """Per ``Graph.branches`` entry, the branch index taken at ``leaves`` (the
        flattened arguments) where the choice depends on the arguments, else None.
        Evaluates only the steps those indices need (compare with ``Branch.taken``, in
        order: an entry after the first that differs may lie in a branch not taken)."""
        if any(isinstance(l, (jax.ShapeDtypeStruct, jax.core.Tracer)) for l in leaves):
            raise ConcreteValuesNeeded(
                "this function takes a lax.cond/lax.switch branch chosen by its argument values, "
                "so its graph depends on those values; call it at concrete arguments (not under "
                "jax.jit, jax.vmap or with ShapeDtypeStructs)")
        slots = dict(zip(self.input_slots, map(jnp.asarray, leaves)))
        read = lambda ref: ref[1] if isinstance(ref, tuple) else slots[ref]
        for k in self.branch_steps:
            step = self.steps[k]
            for o, v in zip(step.outputs, step.equation.bind(*[read(r) for r in step.inputs])):
                slots[o] = v
        return tuple(None if b is None else _clamp(read(b[0]), b[1]) for b in self.branch_slots)


def _clamp(index, count) -> int:
    """The branch ``lax.cond`` takes for ``index`` (clamped into range, as JAX does)."""
    return min(max(int(np.asarray(index)), 0), count - 1)


def _source(eqn, fallback: str = "an unknown place") -> str:
    """The user's source line of ``eqn`` (that of the enclosing call if it has none)."""
    try:
        where = source_info_util.summarize(eqn.source_info)
    except Exception:  # no user frame: an equation inside a library's jitted function
        where = ""
    return where or fallback


def _call_site(f) -> str:
    """Where an equation with no line of the user's code came from (``f`` is a library
    function, such as ``jax.scipy.linalg.expm``, traced directly): ``f`` and the user's
    line that called alphagrad on it (the innermost frame outside alphagrad and JAX)."""
    inner = getattr(f, "func", f)  # a functools.partial: the function it wraps
    name = getattr(inner, "__qualname__", None) or getattr(inner, "__name__", None) or type(inner).__name__
    library = tuple(os.path.dirname(m.__file__) + os.sep for m in (prim, jax))
    frame = sys._getframe()
    while frame is not None:  # innermost first
        code = frame.f_code
        if not os.path.abspath(code.co_filename).startswith(library):
            return f"a line inside `{name}`, called at {code.co_filename}:{frame.f_lineno} ({code.co_name})"
        frame = frame.f_back
    return f"a line inside `{name}`"


def _check_args(f, args):
    if not callable(f):
        raise TypeError(f"alphagrad.trace expects a callable function, got {type(f).__name__}")
    leaves, _ = jax.tree_util.tree_flatten(args)
    for path, leaf in jax.tree_util.tree_flatten_with_path(args)[0]:
        if not isinstance(leaf, (jax.Array, jax.ShapeDtypeStruct, np.ndarray, np.generic, float, int, bool)):
            raise TypeError(
                f"argument {jax.tree_util.keystr(path)} is a {type(leaf).__name__}; "
                f"alphagrad traces functions of arrays (or pytrees of arrays): pass example "
                f"values such as jnp.zeros(shape)"
            )
    if not leaves:
        raise TypeError("alphagrad.trace needs at least one example argument")
    dtypes = [jnp.result_type(leaf) for leaf in leaves]
    if not any(jnp.issubdtype(d, jnp.inexact) for d in dtypes):
        raise TraceError(
            f"no argument is a float array (got {', '.join(sorted({str(d) for d in dtypes}))}): a "
            f"Jacobian is taken with respect to float inputs, as jax.jacrev takes it; pass the "
            f"arguments to differentiate as floats")
    for path, leaf in jax.tree_util.tree_flatten_with_path(args)[0]:
        if jnp.issubdtype(jnp.result_type(leaf), jnp.complexfloating):
            raise TraceError(_COMPLEX.format(
                what=f"argument {jax.tree_util.keystr(path)}", dtype=jnp.result_type(leaf),
                fix="pass its real and imaginary parts as separate real arrays and compute with "
                    "them in real arithmetic (|z| as jnp.hypot(re, im), z * w as (a*c - b*d, "
                    "a*d + b*c)): no value that depends on an input may be complex"))


def trace(f, *args, max_equations: int | None = None) -> Graph:
    """Traces ``f(*args)`` into its computational graph.

    Args:
      f: a JAX function of arrays (pytrees allowed, several positional arguments).
      *args: example arguments; only their shapes and dtypes matter, except where a
        ``lax.cond``/``lax.switch`` chooses its branch from their values: the graph is
        then the branch taken at these values (see :attr:`Graph.branches`).
      max_equations: the most equations the program may reach while loops are unrolled
        (default :data:`MAX_EQUATIONS`, read at call time).

    Returns:
      The :class:`Graph`: every float array the function computes from its inputs and
      that reaches an output is a vertex; each edge carries the structure of its local
      Jacobian.

    Raises:
      TypeError: ``f`` is not callable or an argument is not an array.
      TraceError: no argument is a float array, or an output is an integer. (Outputs
        that depend on no input at these arguments are fine: their Jacobian is zero.)
        Also: a loop whose trip count depends on an argument, a loop unrolled past
        ``max_equations``, a branch chosen by arguments given as shapes only
        (:class:`ConcreteValuesNeeded`).
      alphagrad.primitives.UnsupportedPrimitiveError: a primitive without a Jacobian
        rule (named, with the source line).
    """
    _check_args(f, args)
    closed, out_shape = jax.make_jaxpr(f, return_shape=True)(*args)
    in_paths, in_tree = jax.tree_util.tree_flatten_with_path(args)
    _out_leaves, out_tree = jax.tree_util.tree_flatten(out_shape)
    builder = _Builder(MAX_EQUATIONS if max_equations is None else int(max_equations))
    input_slots = []
    for (path, leaf), var in zip(in_paths, closed.jaxpr.invars):
        slot = builder.new_slot(var.aval)
        input_slots.append(slot)
        builder.arg_name[slot] = f"argument {jax.tree_util.keystr(path)}"
        abstract = isinstance(leaf, (jax.ShapeDtypeStruct, jax.core.Tracer))
        builder.known[slot] = (None if abstract else jnp.asarray(leaf, var.aval.dtype), frozenset([slot]))
        if prim.is_float(var.aval.dtype):
            builder.vertex_of[slot] = builder.new_vertex(slot, INPUT, "input")
    out_slots = builder.inline(closed.jaxpr, list(closed.consts), input_slots, _call_site(f))
    return builder.finish(tuple(input_slots), out_slots, in_tree, out_tree)


def _bound(eqn):
    """``eqn``'s primitive as a function of its operands (as ``jax.core.eval_jaxpr`` binds it)."""
    params = eqn.primitive.get_bind_params(eqn.params)
    return lambda *args: eqn.primitive.bind(*args, **params)


def _call_name(eqn) -> str:
    """The name of the function a custom-rule call wraps (``relu``, a user's function)."""
    info = eqn.params["call_jaxpr"].jaxpr.debug_info
    where = getattr(info, "func_src_info", None) or eqn.primitive.name
    return where.split(" ")[0]


def _tangent_map(eqn, live_args, name, source):
    """``(primals, tangents) -> (outputs, output tangents)`` of a custom-rule call, the
    tangents given for the operands ``live_args`` only, with JAX applying the rule."""
    call = _bound(eqn)

    def of_live(primals):
        def fn(*xs):
            args = list(primals)
            for k, x in zip(live_args, xs):
                args[k] = x
            return list(call(*args))
        return fn

    if eqn.primitive.name == "custom_jvp_call":
        def tangent_map(primals, tangents):
            outs, t_outs = jax.jvp(of_live(primals), [primals[k] for k in live_args], tangents)
            return outs, t_outs
        return tangent_map

    def tangent_map(primals, tangents):
        outs, vjp = jax.vjp(of_live(primals), *[primals[k] for k in live_args])
        try:
            (t_outs,) = jax.linear_transpose(vjp, outs)(tuple(tangents))
        except (NotImplementedError, ValueError, TypeError) as err:
            raise TraceError(
                f"the custom_vjp rule of `{name}` (called at {source}) is not a linear map of "
                f"the cotangent ({err.__class__.__name__}: {str(err).splitlines()[0]}), so it "
                f"has no Jacobian alphagrad can eliminate; make the backward rule linear in "
                f"its cotangent, or define the derivative with jax.custom_jvp"
            ) from None
        return outs, t_outs

    return tangent_map


def _check_linear(e: prim.Equation, argnums, rule_source):
    """Inside a custom rule's tangent map, ``e`` must be linear in its tangent operands."""
    from jax._src.interpreters import ad

    name = e.name
    if name in _BILINEAR:
        ok = len(argnums) == 1 and argnums[0] in _BILINEAR[name]
    else:
        ok = e.primitive in ad.primitive_transposes or e.primitive in ad.fancy_transposes
    if not ok:
        raise TraceError(
            f"{rule_source} applies `{name}` to the tangent non-linearly (at "
            f"{e.source}), so it defines no Jacobian; jax.jacrev rejects it too. Make the "
            f"rule linear in its tangents"
        )


class _Builder:
    def __init__(self, max_equations: int = MAX_EQUATIONS):
        self.max_equations = max_equations
        self.avals: list = []  # per slot
        self.steps: list[Step] = []
        self.producer: dict[int, int] = {}  # slot -> the step that writes it
        # slot -> (its value at the example arguments, or None where an argument it needs
        # was given as a shape only; the input slots it depends on). Filled on demand.
        self.known: dict[int, tuple] = {}
        self.arg_name: dict[int, str] = {}  # input slot -> "argument [0]['W']"
        self.context: list[str] = []  # enclosing loop iterations and branches, outermost first
        self.loops: list[tuple] = []  # enclosing unrolled loops: (loop instance, iteration)
        self.num_loops = 0
        self.vertex_loops: list[tuple] = []  # per provisional vertex: self.loops when made
        self.step_loops: list[tuple] = []  # per step: self.loops when added
        self.branches: list[Branch] = []
        self.branch_slots: list = []  # per branch: (index slot, count) if it depends on arguments
        self.vertex_of: dict[int, int] = {}  # slot -> provisional vertex
        self.vertex_slot: list[int] = []
        self.vertex_kind: list[int] = []
        self.vertex_source: list[str] = []
        self.edges: dict[tuple, list] = {}  # (src, dst) -> [(structure, step, argnum, outnum)]

    def new_slot(self, aval) -> int:
        self.avals.append(aval)
        return len(self.avals) - 1

    def aval(self, ref):
        """The abstract value of a slot or a literal ``("literal", value)``."""
        return jax.typeof(ref[1]) if isinstance(ref, tuple) else self.avals[ref]

    def new_vertex(self, slot, kind, source) -> int:
        self.vertex_slot.append(slot)
        self.vertex_kind.append(kind)
        self.vertex_source.append(source)
        self.vertex_loops.append(tuple(self.loops))
        return len(self.vertex_slot) - 1

    # ------------------------------------------------------------------ inlining
    def inline(self, jaxpr, consts, in_slots, source: str = "an unknown place", live=None) -> list:
        """Adds the steps (and vertices) of ``jaxpr`` applied to ``in_slots``.

        ``live`` maps the slots that are differentiated (carry a vertex) in this context
        to their vertex: the whole program's map by default; inside a custom rule's
        linear map, only the tangents (see :meth:`custom_rule`).
        """
        live = self.vertex_of if live is None else live
        env: dict = {}
        for var, c in zip(jaxpr.constvars, consts):
            env[var] = ("literal", c)
        for var, slot in zip(jaxpr.invars, in_slots):
            env[var] = slot

        def read(atom):
            if isinstance(atom, jex.core.Literal):
                return ("literal", atom.val)
            return env[atom]

        for eqn in jaxpr.eqns:
            name = eqn.primitive.name
            ins = [read(a) for a in eqn.invars]
            where = _source(eqn, source)
            if name in _CUSTOM_RULE and any(self._live(i, live) for i in ins):
                outs = self.custom_rule(eqn, ins, where, live)
            elif name in _CONTROL_FLOW and any(self._live(i, live) for i in ins):
                outs = getattr(self, f"_{name}")(eqn, ins, where, live)
            elif name in _INLINE or name in _CUSTOM_RULE:
                sub = eqn.params[_INLINE.get(name, "call_jaxpr")]
                if isinstance(sub, jex.core.ClosedJaxpr):
                    outs = self.inline(sub.jaxpr, list(sub.consts), ins, where, live)
                else:
                    outs = self.inline(sub, [], ins, where, live)
            else:
                outs = self.apply(eqn, ins, source, live)
            for var, o in zip(eqn.outvars, outs):
                env[var] = o
        return [read(a) for a in jaxpr.outvars]

    @staticmethod
    def _live(ref, live) -> bool:
        return not isinstance(ref, tuple) and ref in live

    def _step(self, primitive, params, ins, out_avals, source) -> list:
        """Adds a step that computes values only (no vertex, no edge)."""
        in_avals = [self.aval(i) for i in ins]
        e = prim.Equation(
            primitive=primitive, params=params,
            in_shapes=tuple(tuple(a.shape) for a in in_avals),
            in_dtypes=tuple(a.dtype for a in in_avals),
            in_literals=tuple(i[1] if isinstance(i, tuple) else None for i in ins),
            out_shapes=tuple(tuple(a.shape) for a in out_avals),
            out_dtypes=tuple(a.dtype for a in out_avals),
            source=source + self._suffix(),
        )
        return self._append(e, ins, out_avals)

    def _append(self, e: prim.Equation, ins, out_avals) -> list:
        outs = [self.new_slot(a) for a in out_avals]
        for o in outs:
            self.producer[o] = len(self.steps)
        self.steps.append(Step(e, tuple(ins), tuple(outs)))
        self.step_loops.append(tuple(self.loops))
        return outs

    def _suffix(self) -> str:
        """Where in the unrolled loops and branches the equations being added are."""
        return "".join(f" [{c}]" for c in self.context)

    def custom_rule(self, eqn, ins, source, live) -> list:
        """A ``custom_jvp``/``custom_vjp`` call, differentiated by its own rule.

        Traces ``(primals, tangents) -> (outputs, output tangents)`` with JAX applying the
        rule, and inlines it: primal-side values become constant steps; the tangents of
        the differentiated operands start at those operands' vertices, and each output
        takes the vertex its tangent ends at.
        """
        name = eqn.params.get("name") or _call_name(eqn)
        live_args = [k for k, i in enumerate(ins) if self._live(i, live)]
        tangent_map = _tangent_map(eqn, live_args, name, source)
        in_avals = [v.aval for v in eqn.invars]
        try:
            closed = jax.make_jaxpr(tangent_map)(
                [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in in_avals],
                [jax.ShapeDtypeStruct(in_avals[k].shape, in_avals[k].dtype) for k in live_args],
            )
            leaked = any(isinstance(c, jax.core.Tracer) for c in closed.consts)
        except jax.errors.UnexpectedTracerError:
            leaked = True
        if leaked:
            raise TraceError(
                f"the custom derivative rule of `{name}` (called at {source}) closes over a "
                f"traced value of the function (typically an array passed through "
                f"`nondiff_argnums`), so alphagrad cannot run the rule on its own; pass that "
                f"argument as a Python or NumPy constant, or as a differentiable argument"
            ) from None
        tangents: dict = {}
        tangent_slots = []
        for k in live_args:
            # The tangent's slot holds a copy of the primal value: the rule is linear in
            # it, so its local Jacobians never depend on what it holds.
            (slot,) = self._step(jax.lax.copy_p, {}, [ins[k]], [in_avals[k]], source)
            tangents[slot] = live[ins[k]]
            tangent_slots.append(slot)
        refs = self.inline(closed.jaxpr, list(closed.consts), list(ins) + tangent_slots,
                           f"the {name} rule at {source}", tangents)
        n = len(eqn.outvars)
        outs = []
        for var, primal, tangent in zip(eqn.outvars, refs[:n], refs[n:]):
            if isinstance(primal, tuple):  # a constant primal output: give it a slot
                (primal,) = self._step(jax.lax.copy_p, {}, [primal], [var.aval], source)
            if self._live(tangent, tangents):
                v = tangents[tangent]
                if self.vertex_slot[v] == tangent:  # made inside the rule: it is this output
                    self.vertex_slot[v] = primal
                    self.vertex_source[v] = f"{self.vertex_source[v]} ({name} output)"
                live[primal] = v
            outs.append(primal)
        return outs

    def apply(self, eqn, ins, outer_source, live=None) -> list:
        """Adds ``eqn`` applied to ``ins``: a step, and a vertex per result that depends
        on a live operand, with an edge per live operand and its Jacobian structure."""
        return self._add(eqn.primitive, dict(eqn.params), ins, [v.aval for v in eqn.outvars],
                         _source(eqn, outer_source) + self._suffix(), live,
                         [a.aval for a in eqn.invars], outer_source)

    def _add(self, primitive, params, ins, out_avals, source, live=None, in_avals=None,
             outer_source=None) -> list:
        """Adds ``primitive`` applied to ``ins`` (see :meth:`apply`); ``outer_source``
        names the custom rule being inlined, for its linearity check."""
        live = self.vertex_of if live is None else live
        name = primitive.name
        in_avals = [self.aval(i) for i in ins] if in_avals is None else in_avals
        literals = [i[1] if isinstance(i, tuple) else None for i in ins]
        for k in range(len(ins))[prim.INDEX_OPERANDS.get(name, slice(0))]:
            if literals[k] is None and not self._live(ins[k], live):  # indices computed from constants
                with jax.ensure_compile_time_eval():  # also when traced under jax.jit
                    value, deps = self._concrete(ins[k])
                static = not deps and value is not None and not isinstance(value, jax.core.Tracer)
                literals[k] = np.asarray(value) if static else None
        e = prim.Equation(
            primitive=primitive,
            params=params,
            in_shapes=tuple(tuple(a.shape) for a in in_avals),
            in_dtypes=tuple(a.dtype for a in in_avals),
            in_literals=tuple(literals),
            out_shapes=tuple(tuple(a.shape) for a in out_avals),
            out_dtypes=tuple(a.dtype for a in out_avals),
            source=source,
        )
        # A no-op (same-dtype conversion, copy, same-shape reshape) is its operand.
        if len(ins) >= 1 and len(out_avals) == 1 and self._is_noop(e):
            return [ins[0]]
        step = len(self.steps)
        outs = self._append(e, ins, out_avals)
        live_args = [(k, live[i]) for k, i in enumerate(ins) if self._live(i, live)]
        if not live_args:
            return outs  # constant: folded, no vertex
        for dtype in e.out_dtypes:
            if jnp.issubdtype(dtype, jnp.complexfloating):
                raise TraceError(_COMPLEX.format(
                    what=f"`{name}` at {source} makes a value that depends on an input and",
                    dtype=dtype, fix="write that computation in real arithmetic (real and "
                    "imaginary parts as separate real arrays)"))
        if live is not self.vertex_of:
            _check_linear(e, [k for k, _ in live_args], outer_source or source)
        per_out: dict[int, list] = {}
        for argnum, src in live_args:
            for outnum, s in enumerate(prim.structures(e, argnum)):
                if s is not None:
                    per_out.setdefault(outnum, []).append((src, s, argnum))
        for outnum, incoming in per_out.items():
            v = self.new_vertex(outs[outnum], INTERMEDIATE, f"{name} at {source}")
            live[outs[outnum]] = v
            for src, s, argnum in incoming:
                self.edges.setdefault((src, v), []).append((s, step, argnum, outnum))
        return outs

    # ------------------------------------------------------------------ control flow
    def _concrete(self, ref) -> tuple:
        """``(value, inputs)`` of a slot or literal: its value at the example arguments
        (None where an argument it needs was given as a shape only) and the input slots
        it depends on. Evaluates, once each, only the steps it needs."""
        if isinstance(ref, tuple):
            return ref[1], frozenset()
        need, stack = set(), [ref]
        while stack:
            slot = stack.pop()
            if slot in self.known or self.producer[slot] in need:
                continue
            need.add(self.producer[slot])
            stack.extend(r for r in self.steps[self.producer[slot]].inputs if not isinstance(r, tuple))
        for k in sorted(need):  # steps are in program order, so operands come first
            step = self.steps[k]
            got = [(r[1], frozenset()) if isinstance(r, tuple) else self.known[r] for r in step.inputs]
            deps = frozenset().union(*(d for _, d in got))
            if any(v is None for v, _ in got):
                values = [None] * len(step.outputs)
            else:
                values = step.equation.bind(*[v for v, _ in got])
            for o, v in zip(step.outputs, values):
                self.known[o] = (v, deps)
        return self.known[ref]

    def _names(self, inputs) -> str:
        return ", ".join(sorted(self.arg_name[s] for s in inputs))

    def _check_size(self, name, where, done, total, start):
        """Refuses to unroll further once the program passes ``max_equations`` (for a
        scan, as soon as its remaining iterations at the pace so far would pass it)."""
        n = len(self.steps)
        projected = n if total is None else n + (n - start) * (total - done) // max(done, 1)
        if projected <= self.max_equations:
            return
        iterations = "" if total is None else f" ({total} iterations)"
        reach = (f"makes the program {n:,} equations" if projected == n else
                 f"would make the program about {projected:,} equations ({n:,} after {done} of them)")
        raise TraceError(
            f"unrolling the `{name}` at {where}{self._suffix()}{iterations} {reach}, over the "
            f"limit of {self.max_equations:,} ({len(self.vertex_slot):,} vertices so far): alphagrad "
            f"unrolls loops into the graph, and a graph this size is slow to trace, search and "
            f"differentiate. Differentiate fewer iterations (e.g. one step, chaining the step "
            f"Jacobians yourself), or raise the limit: alphagrad.trace(f, *args, max_equations=N) "
            f"(alphagrad.jacobian uses the default, MAX_EQUATIONS in the module alphagrad.trace)"
        )

    def _scan(self, eqn, ins, where, live) -> list:
        """``lax.scan`` (``fori_loop`` with static bounds), unrolled: one inlined body per
        iteration, ``xs[i]`` by slice + squeeze, ``ys`` stacked by concatenate."""
        p = eqn.params
        body, length, n_consts, n_carry = p["jaxpr"], p["length"], p["num_consts"], p["num_carry"]
        consts, carry = list(ins[:n_consts]), list(ins[n_consts:n_consts + n_carry])
        xs = list(ins[n_consts + n_carry:])
        ys_avals = [v.aval for v in eqn.outvars[n_carry:]]
        ys = [[None] * length for _ in ys_avals]
        start, loop = len(self.steps), self._new_loop()
        for it in range(length):
            i = length - 1 - it if p["reverse"] else it
            self.context.append(f"iteration {it} of {length}, scan at {where}")
            self.loops.append((loop, it))
            source = where + self._suffix()
            x_i = [self._row(x, i, source, live) for x in xs]
            outs = self.inline(body.jaxpr, list(body.consts), consts + carry + x_i, where, live)
            carry = outs[:n_carry]
            for k, y in enumerate(outs[n_carry:]):
                ys[k][i] = y
            self.context.pop()
            self.loops.pop()
            self._check_size("scan", where, it + 1, length, start)
        source = f"stacking the ys of the scan at {where}{self._suffix()}"
        return carry + [self._stack(pieces, aval, source, live) for pieces, aval in zip(ys, ys_avals)]

    def _new_loop(self) -> int:
        """A number for the loop instance about to be unrolled (see ``Program.vertex_loops``)."""
        self.num_loops += 1
        return self.num_loops - 1

    def _row(self, x, i, source, live):
        """``x[i]`` along the leading axis."""
        if isinstance(x, tuple):
            return ("literal", x[1][i])
        aval = self.aval(x)
        rest = tuple(aval.shape[1:])
        if aval.shape[0] != 1:
            (x,) = self._add(jax.lax.slice_p, {"start_indices": (i,) + (0,) * len(rest),
                                               "limit_indices": (i + 1,) + rest,
                                               "strides": (1,) * (len(rest) + 1)},
                             [x], [jax.ShapeDtypeStruct((1,) + rest, aval.dtype)], source, live)
        (x,) = self._add(jax.lax.squeeze_p, {"dimensions": (0,)}, [x],
                         [jax.ShapeDtypeStruct(rest, aval.dtype)], source, live)
        return x

    def _stack(self, pieces, aval, source, live):
        """The per-iteration ``pieces`` stacked along a new leading axis (``aval``)."""
        shape, dtype = tuple(aval.shape), aval.dtype
        one = (1,) + shape[1:]
        rows = []
        for y in pieces:
            if isinstance(y, tuple):
                rows.append(("literal", np.asarray(y[1], dtype).reshape(one)))
            else:
                rows += self._add(jax.lax.broadcast_in_dim_p,
                                  {"shape": one, "broadcast_dimensions": tuple(range(1, len(shape))),
                                   "sharding": None},
                                  [y], [jax.ShapeDtypeStruct(one, dtype)], source, live)
        if not rows:
            return ("literal", np.zeros(shape, dtype))
        if all(isinstance(r, tuple) for r in rows):
            return ("literal", np.concatenate([r[1] for r in rows]))
        if len(rows) == 1:
            return rows[0]
        (out,) = self._add(jax.lax.concatenate_p, {"dimension": 0}, rows,
                           [jax.ShapeDtypeStruct(shape, dtype)], source, live)
        return out

    def _while(self, eqn, ins, where, live) -> list:
        """``lax.while_loop`` whose predicate depends on constants only, unrolled: the
        predicate is evaluated on concrete values before each iteration."""
        p = eqn.params
        cond, body = p["cond_jaxpr"], p["body_jaxpr"]
        nc, nb = p["cond_nconsts"], p["body_nconsts"]
        cond_consts, body_consts, carry = list(ins[:nc]), list(ins[nc:nc + nb]), list(ins[nc + nb:])
        start, it, loop = len(self.steps), 0, self._new_loop()
        while True:
            self.context.append(f"iteration {it}, while at {where}")
            self.loops.append((loop, it))
            # The predicate is not differentiated: its steps are values only.
            (pred,) = self.inline(cond.jaxpr, list(cond.consts), cond_consts + carry, where, {})
            value, deps = self._concrete(pred)
            self.context.pop()
            self.loops.pop()
            if deps:
                raise TraceError(
                    f"`while` at {where}{self._suffix()}: its trip count depends on "
                    f"{self._names(deps)} (a loop with a traced trip count), so the graph would "
                    f"change with its value and cannot be unrolled (jax.jacrev cannot "
                    f"differentiate such a loop either); make the trip count static: Python-int "
                    f"bounds for lax.fori_loop (constants or a closure, not arguments: e.g. "
                    f"functools.partial(f, n=10)), or lax.scan with a fixed length"
                )
            if not bool(np.asarray(value)):
                return carry
            self.context.append(f"iteration {it}, while at {where}")
            self.loops.append((loop, it))
            carry = self.inline(body.jaxpr, list(body.consts), body_consts + carry, where, live)
            self.context.pop()
            self.loops.pop()
            it += 1
            self._check_size("while", where, it, None, start)

    def _cond(self, eqn, ins, where, live) -> list:
        """``lax.cond``/``lax.switch``: the branch taken at the example arguments, recorded
        in ``Graph.branches``."""
        branches = eqn.params["branches"]
        index, ops = ins[0], list(ins[1:])
        value, deps = self._concrete(index)
        if value is None:
            raise ConcreteValuesNeeded(
                f"`cond` (lax.cond/lax.switch) at {where}{self._suffix()}: which branch is taken "
                f"depends on {self._names(deps)}, given as a shape only (a jax.ShapeDtypeStruct, "
                f"or a tracer under jax.jit/jax.vmap), so it cannot be decided at trace time. "
                f"alphagrad's graph of a branch is the branch taken at the example point: trace "
                f"at concrete example values (and take Jacobians outside jax.jit), or compute "
                f"both branches and choose with jnp.where"
            )
        taken = _clamp(value, len(branches))
        self.branches.append(Branch("cond", where + self._suffix(), taken, len(branches), bool(deps)))
        self.branch_slots.append((index, len(branches)) if deps else None)
        self.context.append(f"branch {taken} of {len(branches)}, cond at {where}")
        sub = branches[taken]
        outs = self.inline(sub.jaxpr, list(sub.consts), ops, where, live)
        self.context.pop()
        return outs

    @staticmethod
    def _is_noop(e: prim.Equation) -> bool:
        same = e.in_shapes[0] == e.out_shapes[0] and e.in_dtypes[0] == e.out_dtypes[0]
        if e.name in ("copy", "copy_p", "convert_element_type"):
            return same
        if e.name in ("reshape", "squeeze") and len(e.in_shapes) == 1:
            return same
        if e.name == "broadcast_in_dim" and len(e.in_shapes) == 1:
            return same and tuple(e.params["broadcast_dimensions"]) == tuple(range(len(e.out_shapes[0])))
        if e.name == "transpose":
            return tuple(e.params["permutation"]) == tuple(range(len(e.in_shapes[0])))
        return False

    # ------------------------------------------------------------------ finishing
    def finish(self, input_slots, out_slots, in_tree, out_tree) -> Graph:
        """The graph: output vertices marked, what reaches no output dropped, vertices
        renumbered (inputs first), axes split where reshapes need it, edges joined."""
        output_vertex, copies = self._mark_outputs(out_slots)
        kept = self._alive(output_vertex)
        inputs = [v for v in kept if self.vertex_kind[v] == INPUT]
        order = inputs + [v for v in kept if self.vertex_kind[v] != INPUT]
        new_id = {v: k for k, v in enumerate(order)}
        shapes, dtypes = [], []
        for v in order:
            slot = self.vertex_slot[v]
            aval = self.aval(out_slots[output_vertex.index(v)]) if slot is None else self.avals[slot]
            shapes.append(tuple(aval.shape))  # slot None: a constant output of a literal
            dtypes.append(str(aval.dtype))
        edges, edge_sources, digits, relabelled = self._final_edges(new_id, dict(zip(order, shapes)))
        slot_vertex = {self.vertex_slot[v]: new_id[v] for v in kept if self.vertex_slot[v] is not None and v not in copies}
        program = Program(
            num_slots=len(self.avals),
            input_slots=input_slots,
            steps=self.steps,
            slot_vertex=slot_vertex,
            vertex_slot={new_id[v]: self.vertex_slot[v] for v in kept},
            edge_sources=edge_sources,
            output_copies={new_id[c]: new_id[v] for c, v in copies.items() if v in new_id},
            output_slots=tuple(out_slots),
            branch_slots=tuple(self.branch_slots),
            branch_steps=self._cone([b[0] for b in self.branch_slots if b is not None]),
            vertex_digits={new_id[v]: d for v, d in digits.items()},
            digit_reshapes=frozenset(step for _, _, step in relabelled),
            vertex_loops={new_id[v]: self.vertex_loops[v] for v in kept if self.vertex_loops[v]},
            step_loops=tuple(self.step_loops),
        )
        in_vertex = tuple(
            new_id[self.vertex_of[s]] if s in self.vertex_of and self.vertex_of[s] in new_id else -1
            for s in input_slots
        )
        return Graph(
            shapes=tuple(shapes),
            dtypes=tuple(dtypes),
            kinds=tuple(self.vertex_kind[v] for v in order),
            edges=tuple(edges),
            sources=tuple(self.vertex_source[v] for v in order),
            input_vertices=in_vertex,
            output_vertices=tuple(new_id[v] for v in output_vertex),
            in_tree=in_tree,
            out_tree=out_tree,
            branches=tuple(self.branches),
            program=program,
        )

    def _mark_outputs(self, out_slots) -> tuple[list[int], dict[int, int]]:
        """One output vertex per output (a copy where the value is an input, another
        output or read further on); the copies map each copy to its original."""
        succ: dict[int, set] = {}
        for (a, b) in self.edges:
            succ.setdefault(a, set()).add(b)
        output_vertex: list[int] = []
        copies: dict[int, int] = {}
        taken: set = set()
        for k, o in enumerate(out_slots):
            aval = self.aval(o)
            if not prim.is_float(aval.dtype):
                raise TraceError(
                    f"output {k} has dtype {aval.dtype}: Jacobians need float outputs "
                    f"(as for jax.jacrev); return floats or drop that output"
                )
            v = None if isinstance(o, tuple) else self.vertex_of.get(o)
            if v is None:  # a constant output: its Jacobian is zero
                slot = o if not isinstance(o, tuple) else None
                nv = self.new_vertex(slot, OUTPUT, "constant output")
                output_vertex.append(nv)
                continue
            if self.vertex_kind[v] == INPUT or v in taken or succ.get(v):
                nv = self.new_vertex(o, OUTPUT, f"copy of vertex for output {k}")
                shape = tuple(aval.shape)
                self.edges[(v, nv)] = [(st.diagonal(shape, value=False), None, None, None)]
                copies[nv] = v
                output_vertex.append(nv)
            else:
                self.vertex_kind[v] = OUTPUT
                output_vertex.append(v)
            taken.add(v)
        return output_vertex, copies

    def _alive(self, output_vertex) -> list[int]:
        """The vertices kept: inputs, and those that reach an output (none where no output
        depends on an input at this point, e.g. a ``lax.cond`` branch constant in them:
        the Jacobian is zero, as ``jax.jacrev`` gives it)."""
        outs = set(output_vertex)
        # Keep vertices that reach an output (inputs and outputs always stay).
        preds: dict[int, set] = {}
        for (a, b) in self.edges:
            preds.setdefault(b, set()).add(a)
        alive = set(outs)
        stack = list(outs)
        while stack:
            v = stack.pop()
            for p in preds.get(v, ()):
                if p not in alive:
                    alive.add(p)
                    stack.append(p)
        return [v for v in range(len(self.vertex_slot)) if self.vertex_kind[v] == INPUT or v in alive]

    def _final_edges(self, new_id, shape_of):
        """The kept edges in the new numbering (sorted by destination), their source
        steps, and the axis digits reshapes split (see :func:`split_axes`)."""
        live = {k: items for k, items in self.edges.items() if k[0] in new_id and k[1] in new_id}
        reshape = lambda step: step is not None and self.steps[step].equation.name == "reshape"  # noqa: E731
        digits, relabelled = split_axes(live, shape_of, reshape)
        if digits:
            split = lambda a, b, s, step: (  # noqa: E731
                st.relabel_digits(_digits(digits, b, s.out_shape), _digits(digits, a, s.in_shape))
                if (a, b, step) in relabelled else refine_edge(digits, s, a, b))
            live = {(a, b): [(split(a, b, s, step), step, arg, out) for s, step, arg, out in items]
                    for (a, b), items in live.items()}
        edges = []
        edge_sources = {}
        for (a, b), items in live.items():
            s = items[0][0]
            for other, *_ in items[1:]:
                s = st.join(s, other)
            edges.append(Edge(new_id[a], new_id[b], s))
            edge_sources[(new_id[a], new_id[b])] = tuple((i[1], i[2], i[3]) for i in items if i[1] is not None)
        edges.sort(key=lambda e: (e.dst, e.src))
        return edges, edge_sources, digits, relabelled

    def _cone(self, slots) -> tuple:
        """The steps (in program order) that compute ``slots`` from the inputs."""
        need, stack = set(), [s for s in slots if not isinstance(s, tuple)]
        while stack:
            slot = stack.pop()
            k = self.producer.get(slot)  # None: an input
            if k is None or k in need:
                continue
            need.add(k)
            stack.extend(r for r in self.steps[k].inputs if not isinstance(r, tuple))
        return tuple(sorted(need))


# ------------------------------------------------------------------ mixed-radix digits
def _chain(points) -> bool:
    """Whether sorted ``points`` each divide the next (a mixed-radix refinement)."""
    p = sorted(points)
    return all(q % r == 0 for r, q in zip(p, p[1:]))


def split_axes(edges: dict, shape_of: dict, is_reshape) -> tuple[dict, set]:
    """The mixed-radix digits every axis splits into so that reshapes which merge or split
    axes become relabellings (:func:`alphagrad.structure.relabel_digits`).

    ``edges`` maps ``(src, dst)`` to ``[(structure, step, argnum, outnum), ...]``. Axes
    that share a variable in a structure must split alike; a reshape relates the
    breakpoints of its operand's flattened index (the sizes of its trailing axes and
    digits) to its result's, and both sides take their union when it is a chain of
    divisors. A reshape whose sides have no common refinement (``(4, 6) -> (6, 4)``) keeps
    its 0/1 value and relates nothing. Returns ``({vertex: [digits per axis]}, {(src, dst,
    step) of the reshapes that became relabellings})``: empty when nothing splits.
    """
    excluded: set = set()
    while True:
        parent: dict = {}

        def find(x):
            parent.setdefault(x, x)
            while parent[x] != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x

        relations = []
        for (a, b), items in edges.items():
            for s, step, _, _ in items:
                if is_reshape(step) and s.value_vars is not None and (a, b, step) not in excluded:
                    relations.append((a, b, step))
                    continue
                first: dict = {}
                k = len(s.out_shape)
                for ax, (var, n) in enumerate(zip(s.out_vars + s.in_vars, s.out_shape + s.in_shape)):
                    if n == 1:
                        continue
                    node = (b, ax) if ax < k else (a, ax - k)
                    if var in first:
                        parent[find(node)] = find(first[var])
                    else:
                        first[var] = node
        if not relations:
            return {}, set()
        points: dict = {}  # class root -> breakpoints inside its axes (digit boundaries)

        def spans(v):
            """(class, size, size of the axes after it) of each axis of ``v`` longer than 1."""
            out, size = [], 1
            for ax in reversed(range(len(shape_of[v]))):
                n = shape_of[v][ax]
                if n > 1:
                    out.append((find((v, ax)), n, size))
                size *= n
            return out

        def relate(a, b):
            """Gives both sides of reshape ``a -> b`` the union of their flattened index's
            breakpoints: whether a class gained one, or None if they do not chain."""
            sides = spans(a) + spans(b)
            flat = {1} | {size * n for _, n, size in sides}
            flat |= {size * q for root, _, size in sides for q in points.get(root, ())}
            if not _chain(flat):
                return None
            changed = False
            for root, n, size in sides:
                new = {q // size for q in flat if size < q < size * n}
                have = points.setdefault(root, set())
                if not new <= have:
                    if not _chain(have | new | {1, n}):
                        return None
                    have |= new
                    changed = True
            return changed

        bad = None
        changed = True
        while changed and bad is None:
            changed = False
            for relation in relations:
                gained = relate(*relation[:2])
                if gained is None:
                    bad = relation
                    break
                changed |= gained
        if bad is not None:
            excluded.add(bad)
            continue
        digits = {}
        for v, shape in shape_of.items():
            per_axis = []
            for ax, n in enumerate(shape):
                cuts = sorted({1, n} | (points.get(find((v, ax)), set()) if n > 1 else set()))
                per_axis.append(tuple(hi // lo for lo, hi in zip(cuts[-2::-1], cuts[:0:-1])) if n > 1 else (1,))
            if any(len(d) > 1 for d in per_axis):
                digits[v] = per_axis
        return digits, set(relations)


def refine_edge(digits: dict, s: st.Structure, src: int, dst: int) -> st.Structure:
    """Edge ``src -> dst``'s structure ``s`` on the axes ``digits`` (``{vertex: digit
    sizes per axis}``, :func:`split_axes`) splits; ``s`` itself where neither end splits."""
    if src not in digits and dst not in digits:
        return s
    return st.refine(s, _digits(digits, dst, s.out_shape), _digits(digits, src, s.in_shape))


def _digits(digits: dict, vertex: int, shape) -> list:
    """The digit sizes of each axis of ``vertex`` (one digit per axis if it does not split)."""
    return digits.get(vertex, [(n,) for n in shape])
