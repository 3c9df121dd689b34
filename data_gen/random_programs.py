"""Random but real JAX programs, for property tests and for training data.

Vertex elimination has to work on any program JAX can trace, not only on the handful of
published benchmarks, and the learned elimination policy needs many varied graphs to
train on. This module writes such programs: :func:`generate` turns a
:class:`ProgramSpec` (how many inputs, outputs and operations, how large the arrays may
be, how deep or wide the data flow is, which kinds of operations to use) and a seed into a
plain Python function of JAX arrays together with example arguments::

    spec = ProgramSpec(num_inputs=3, num_ops=50, max_rank=2, max_dim=8)
    f, args = generate(spec, seed=0)
    graph = alphagrad.trace(f, *args)

How a program is made. A seeded ``numpy.random.default_rng(seed)`` first writes a static
description (:class:`Program`: input shapes, a list of :class:`Op`, the output values);
:meth:`Program.function` then closes over it with ``jnp``/``lax`` calls, so the same
``(spec, seed)`` always gives the same jaxpr (for a given JAX version) and the same
values, and the description itself is independent of JAX. Operations come from six
categories, drawn with the weights of ``spec.mix``:

* ``elementwise_unary``: sin, cos, tanh, exp of a tanh, log(1 + x^2), sqrt(1 + x^2),
  logistic, square, abs, neg, asinh, atan, erf, x * logistic(x), a * x + b;
* ``elementwise_binary``: add, sub, mul, x / (1 + y^2), maximum, minimum,
  atan2(x, 1 + y^2), (1 + x^2) ** tanh(y), and sums of up to ``fan_in`` values; the
  operands have the same shape or broadcast against each other (numpy rules);
* ``dot``: ``jnp.dot``/``jnp.matmul``/``jnp.einsum`` contracting one matching axis, with
  batch axes where the result would otherwise exceed ``max_rank``;
* ``reduction``: sum, mean, max, min over some axes (sometimes with ``keepdims``);
* ``broadcast``: to a new leading axis, ``expand_dims``, or stretching a size-1 axis;
* ``reshape``: reshape, transpose, squeeze, slice, concatenate.

Every value stays an array of rank ``<= max_rank`` with axes ``<= max_dim``; an operation
that cannot apply to the values at hand (a dot without a matching axis, a binary op
without a partner of compatible shape, ...) falls back to a unary one. Operands come from
the ``width`` most recent values (small width: deep chains; large width: wide, bushy
graphs), preferring values no operation has read yet, so that most of the program ends
up live; inputs not yet read are always eligible, and are forced in while there are
still enough operations left to read them all. Axis sizes are drawn from a small
per-program set of sizes so that shapes match often enough for binary ops and dots.

Everything stays finite: the arguments are uniform in [0.5, 1.5], exp only sees a tanh,
log/sqrt/pow only see 1 + x^2, denominators are 1 + y^2, and a static worst-case bound on
every value's magnitude is tracked; an operation whose result could exceed
:data:`BOUND_LIMIT` first squashes its largest operands with tanh (or a sum reduction
becomes a mean). One operation may therefore lower to a few primitives (``log1p(x * x)``
is ``mul`` then ``log1p``; a squash adds a ``tanh``).

The outputs are ``num_outputs`` values chosen greedily among the sinks (values no
operation read) to cover as many operations as possible; the last operation always reads
an earlier operation's result, so programs of two or more operations have at least one
intermediate vertex. :func:`describe` gives the generator parameters (and seed) as a
JSON-serialisable dict for a dataset's source column; :meth:`ProgramSpec.from_dict`
reads them back.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import itertools
import math
import numbers
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

#: Bumped whenever the program generated for some (spec, seed) changes.
GENERATOR_VERSION = 1

#: The operation categories a :class:`ProgramSpec` mix weighs.
CATEGORIES = (
    "elementwise_unary",
    "elementwise_binary",
    "dot",
    "reduction",
    "broadcast",
    "reshape",
)

#: Default category weights: mostly elementwise work, some linear algebra and reductions,
#: a little shape manipulation.
DEFAULT_MIX = (
    ("elementwise_unary", 0.30),
    ("elementwise_binary", 0.30),
    ("dot", 0.10),
    ("reduction", 0.10),
    ("broadcast", 0.08),
    ("reshape", 0.12),
)

#: Allowed (inclusive) range of each integer field of :class:`ProgramSpec`.
RANGES = {
    "num_inputs": (1, 16),
    "num_outputs": (1, 16),
    "num_ops": (1, 3000),
    "max_rank": (0, 3),
    "max_dim": (1, 16),
    "fan_in": (1, 4),
    "width": (1, 64),
}

#: The example arguments are uniform in this interval.
INPUT_LOW, INPUT_HIGH = 0.5, 1.5

#: Largest worst-case magnitude a value may have; operations squash operands with tanh
#: so that their result stays below it.
BOUND_LIMIT = 32.0

#: Probability of drawing an operand among the values no operation has read yet.
P_FRESH = 0.6


# --------------------------------------------------------------------------------------
# The specification.


def _normalise_mix(mix) -> tuple:
    """``mix`` as a tuple of (category, float weight) in :data:`CATEGORIES` order."""
    if isinstance(mix, Mapping):
        pairs = list(mix.items())
    else:
        try:
            pairs = [tuple(p) for p in mix]
        except TypeError:
            raise ValueError(
                f"ProgramSpec.mix = {mix!r} must be a mapping (or pairs) from categories "
                f"{list(CATEGORIES)} to non-negative weights"
            ) from None
        if any(len(p) != 2 for p in pairs):
            raise ValueError(f"ProgramSpec.mix = {mix!r} must consist of (category, weight) pairs")
    weights: dict[str, float] = {}
    for key, w in pairs:
        if key not in CATEGORIES:
            raise ValueError(
                f"ProgramSpec.mix has unknown category {key!r}; allowed categories are "
                f"{list(CATEGORIES)}"
            )
        if key in weights:
            raise ValueError(f"ProgramSpec.mix names category {key!r} twice")
        if isinstance(w, bool) or not isinstance(w, numbers.Real) or not math.isfinite(w) or w < 0:
            raise ValueError(
                f"ProgramSpec.mix[{key!r}] = {w!r} is not allowed: weights must be finite "
                f"numbers >= 0"
            )
        weights[key] = float(w)
    if sum(weights.values()) <= 0:
        raise ValueError(
            f"ProgramSpec.mix = {dict(weights)!r} has no positive weight: give at least one "
            f"of {list(CATEGORIES)} a weight > 0"
        )
    return tuple((c, weights.get(c, 0.0)) for c in CATEGORIES)


@dataclasses.dataclass(frozen=True)
class ProgramSpec:
    """Parameters of a random program (see the module docstring).

    Attributes:
      num_inputs: number of array arguments (1..16).
      num_outputs: number of returned arrays (1..16, at most num_inputs + num_ops).
      num_ops: number of operations to emit (1..3000); one operation lowers to one to a
        few primitives.
      max_rank: largest rank of any value (0..3).
      max_dim: largest axis size of any value (1..16).
      fan_in: most distinct values one operation reads (1..4): variadic sums and
        concatenates read up to ``fan_in`` values; with 1, binary ops and dots read one
        value twice (``x * x``, ``x @ x.T``), so every operation has one predecessor.
      width: how many of the most recent values an operation may read (1..64): small
        widths give deep chains, large widths wide graphs.
      mix: weights of the operation categories :data:`CATEGORIES` (a dict or pairs;
        stored as a tuple of (category, weight) pairs in that order, missing ones 0).
    """

    num_inputs: int = 2
    num_outputs: int = 1
    num_ops: int = 20
    max_rank: int = 2
    max_dim: int = 4
    fan_in: int = 2
    width: int = 8
    mix: Any = DEFAULT_MIX

    def __post_init__(self):
        for name in RANGES:
            value = getattr(self, name)
            if isinstance(value, numbers.Integral) and not isinstance(value, bool):
                object.__setattr__(self, name, int(value))
        object.__setattr__(self, "mix", _normalise_mix(self.mix))
        self.validate()

    def validate(self) -> None:
        """Raises ValueError naming the first bad field, its value and the allowed range."""
        for name, (lo, hi) in RANGES.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not lo <= value <= hi:
                raise ValueError(
                    f"ProgramSpec.{name} = {value!r} is out of range: it must be an integer "
                    f"in [{lo}, {hi}]"
                )
        if self.num_outputs > self.num_inputs + self.num_ops:
            raise ValueError(
                f"ProgramSpec.num_outputs = {self.num_outputs} is out of range: a program "
                f"with num_inputs = {self.num_inputs} and num_ops = {self.num_ops} has only "
                f"{self.num_inputs + self.num_ops} values to return, so num_outputs must be "
                f"in [1, {min(RANGES['num_outputs'][1], self.num_inputs + self.num_ops)}]"
            )
        if _normalise_mix(self.mix) != self.mix:
            raise ValueError(f"ProgramSpec.mix = {self.mix!r} is not in normal form")

    @property
    def mix_dict(self) -> dict:
        """The category weights as a dict (every category, zero where not used)."""
        return dict(self.mix)

    def to_dict(self) -> dict:
        """The parameters as a JSON-serialisable dict (``mix`` as a dict)."""
        d = {name: getattr(self, name) for name in RANGES}
        d["mix"] = self.mix_dict
        return d

    @classmethod
    def from_dict(cls, d: Mapping) -> "ProgramSpec":
        """The spec of :meth:`to_dict` (or of :func:`describe`, which nests it)."""
        if not isinstance(d, Mapping):
            raise ValueError(f"ProgramSpec.from_dict expects a dict, got {type(d).__name__}")
        if "spec" in d and isinstance(d["spec"], Mapping):
            d = d["spec"]
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - fields)
        if unknown:
            raise ValueError(
                f"ProgramSpec.from_dict got unknown fields {unknown}; fields are {sorted(fields)}"
            )
        return cls(**dict(d))


def describe(spec: ProgramSpec, seed: int | None = None) -> dict:
    """The generator parameters as a JSON-serialisable dict (a dataset's source column).

    ``ProgramSpec.from_dict(describe(spec, seed))`` gives ``spec`` back; together with
    ``seed`` and :data:`GENERATOR_VERSION` it reproduces the program.
    """
    d = {
        "generator": "data_gen.random_programs",
        "version": GENERATOR_VERSION,
        "spec": spec.to_dict(),
    }
    if seed is not None:
        d["seed"] = _check_seed(seed)
    return d


def _check_seed(seed) -> int:
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise ValueError(f"seed = {seed!r} is not allowed: it must be an integer >= 0")
    return int(seed)


# --------------------------------------------------------------------------------------
# The operations: how to run each, and a bound on the magnitude of its result.

_UNARY = {
    # name: (function, result bound from operand bound, weight)
    "sin": (lambda x, p: jnp.sin(x), lambda b, p: min(b, 1.0), 1.0),
    "cos": (lambda x, p: jnp.cos(x), lambda b, p: 1.0, 1.0),
    "tanh": (lambda x, p: jnp.tanh(x), lambda b, p: min(b, 1.0), 1.5),
    "exp_tanh": (lambda x, p: jnp.exp(jnp.tanh(x)), lambda b, p: math.e, 0.7),
    "log1p_square": (lambda x, p: jnp.log1p(x * x), lambda b, p: math.log1p(b * b), 0.7),
    "sqrt_1p_square": (lambda x, p: jnp.sqrt(1.0 + x * x), lambda b, p: math.sqrt(1.0 + b * b), 0.5),
    "logistic": (lambda x, p: jax.nn.sigmoid(x), lambda b, p: 1.0, 1.0),
    "square": (lambda x, p: jnp.square(x), lambda b, p: b * b, 0.7),
    "abs": (lambda x, p: jnp.abs(x), lambda b, p: b, 0.5),
    "neg": (lambda x, p: -x, lambda b, p: b, 0.5),
    "asinh": (lambda x, p: jnp.arcsinh(x), lambda b, p: math.asinh(b), 0.5),
    "atan": (lambda x, p: jnp.arctan(x), lambda b, p: min(b, math.pi / 2), 0.5),
    "erf": (lambda x, p: jax.scipy.special.erf(x), lambda b, p: 1.0, 0.5),
    "silu": (lambda x, p: x * jax.nn.sigmoid(x), lambda b, p: b, 0.5),
    "affine": (
        lambda x, p: p["a"] * x + p["b"],
        lambda b, p: abs(p["a"]) * b + abs(p["b"]),
        1.0,
    ),
}

_BINARY = {
    # name: (function, result bound, weight, needs two distinct values)
    "add": (lambda x, y: x + y, lambda b1, b2: b1 + b2, 3.0, False),
    "sub": (lambda x, y: x - y, lambda b1, b2: b1 + b2, 2.0, True),
    "mul": (lambda x, y: x * y, lambda b1, b2: b1 * b2, 3.0, False),
    "div": (lambda x, y: x / (1.0 + y * y), lambda b1, b2: b1, 1.5, False),
    "maximum": (jnp.maximum, max, 1.0, True),
    "minimum": (jnp.minimum, max, 1.0, True),
    "atan2": (lambda x, y: jnp.arctan2(x, 1.0 + y * y), lambda b1, b2: math.pi / 2, 0.5, False),
    "pow": (lambda x, y: jnp.power(1.0 + x * x, jnp.tanh(y)), lambda b1, b2: 1.0 + b1 * b1, 0.5, False),
}


def _run_add_n(xs, p):
    out = xs[0]
    for x in xs[1:]:
        out = out + x
    return out


def _run_einsum(xs, p):
    x, y = xs
    if p["style"] == "dot":
        return jnp.dot(x, y)
    if p["style"] == "matmul":
        return jnp.matmul(x, y)
    return jnp.einsum(p["subscripts"], x, y)


_REDUCE = {"sum": jnp.sum, "mean": jnp.mean, "max": jnp.max, "min": jnp.min}


def _run_reduce(xs, p):
    return _REDUCE[p["fn"]](xs[0], axis=p["axes"], keepdims=p["keepdims"])


def _run_slice(xs, p):
    return lax.slice_in_dim(xs[0], p["start"], p["stop"], p["stride"], p["axis"])


_RUN = {
    **{name: (lambda fn: lambda xs, p: fn(xs[0], p))(v[0]) for name, v in _UNARY.items()},
    **{name: (lambda fn: lambda xs, p: fn(xs[0], xs[1]))(v[0]) for name, v in _BINARY.items()},
    "add_n": _run_add_n,
    "dot": _run_einsum,
    "reduce": _run_reduce,
    "broadcast_to": lambda xs, p: jnp.broadcast_to(xs[0], p["shape"]),
    "expand_dims": lambda xs, p: jnp.expand_dims(xs[0], p["axis"]),
    "reshape": lambda xs, p: jnp.reshape(xs[0], p["shape"]),
    "transpose": lambda xs, p: jnp.transpose(xs[0], p["perm"]),
    "squeeze": lambda xs, p: jnp.squeeze(xs[0], p["axes"]),
    "slice": _run_slice,
    "concatenate": lambda xs, p: jnp.concatenate(xs, axis=p["axis"]),
}


# --------------------------------------------------------------------------------------
# The static description.


@dataclasses.dataclass(frozen=True)
class Op:
    """One operation of a program.

    Attributes:
      name: what it computes (a key of the runners: "sin", "add", "dot", "reduce", ...).
      category: the category it was drawn for (a fallback is "elementwise_unary").
      args: the values it reads (indices: inputs first, then one value per operation).
      params: its static parameters, as sorted (key, value) pairs.
      squash: per operand, whether tanh is applied to it first (to bound magnitudes).
      shape: the shape of its result.
    """

    name: str
    category: str
    args: tuple
    params: tuple
    squash: tuple
    shape: tuple


@dataclasses.dataclass(frozen=True, eq=False)
class Program:
    """A generated program: input shapes, operations and outputs, plus example values."""

    spec: ProgramSpec
    seed: int
    input_shapes: tuple
    ops: tuple
    outputs: tuple
    arg_values: tuple  # numpy float32 arrays, one per input

    @property
    def shapes(self) -> tuple:
        """The shape of every value: inputs first, then one per operation."""
        return self.input_shapes + tuple(op.shape for op in self.ops)

    def live_ops(self) -> tuple:
        """Indices of the operations some output depends on."""
        n_in = len(self.input_shapes)
        live = set(self.outputs)
        for k in range(len(self.ops) - 1, -1, -1):
            if n_in + k in live:
                live.update(self.ops[k].args)
        return tuple(k for k in range(len(self.ops)) if n_in + k in live)

    def function(self) -> Callable:
        """A plain JAX function ``f(*args)`` returning the tuple of outputs."""
        n_in = len(self.input_shapes)
        steps = [
            (_RUN[op.name], op.args, op.squash, dict(op.params)) for op in self.ops
        ]
        outputs = self.outputs

        def random_program(*args):
            if len(args) != n_in:
                raise TypeError(f"this program takes {n_in} arguments, got {len(args)}")
            values = list(args)
            for run, arg_ids, squash, params in steps:
                squashed: dict = {}
                xs = []
                for i, s in zip(arg_ids, squash):
                    if s:
                        if i not in squashed:
                            squashed[i] = jnp.tanh(values[i])
                        xs.append(squashed[i])
                    else:
                        xs.append(values[i])
                values.append(run(xs, params))
            return tuple(values[i] for i in outputs)

        random_program.__qualname__ = random_program.__name__ = f"random_program_{self.seed}"
        return random_program

    def example_args(self) -> tuple:
        """The example arguments as float32 JAX arrays."""
        return tuple(jnp.asarray(a, dtype=jnp.float32) for a in self.arg_values)


def generate(spec: ProgramSpec, seed: int) -> tuple[Callable, tuple]:
    """A random JAX function and example arguments, deterministic given (spec, seed).

    Returns ``(f, args)``: ``f(*args)`` returns a tuple of ``spec.num_outputs`` float32
    arrays; ``args`` are float32 arrays uniform in [0.5, 1.5].
    """
    program = build(spec, seed)
    return program.function(), program.example_args()


def build(spec: ProgramSpec, seed: int) -> Program:
    """The static description of the program ``generate(spec, seed)`` runs."""
    if not isinstance(spec, ProgramSpec):
        raise TypeError(f"build expects a ProgramSpec, got {type(spec).__name__}")
    return _Builder(spec, _check_seed(seed)).build()


# --------------------------------------------------------------------------------------
# The builder.


@functools.lru_cache(maxsize=None)
def _reshapes(size: int, max_rank: int, max_dim: int) -> tuple:
    """Every shape of ``size`` elements with rank <= max_rank and axes <= max_dim."""
    divisors = [d for d in range(1, min(size, max_dim) + 1) if size % d == 0]
    shapes = []
    for rank in range(max_rank + 1):
        for shape in itertools.product(divisors, repeat=rank):
            if math.prod(shape) == size:
                shapes.append(shape)
    return tuple(shapes)


def _squash_for(bounds, result_bound) -> tuple | None:
    """Which operands to squash (tanh) so that ``result_bound(bounds) <= BOUND_LIMIT``;
    None when even squashing all of them is not enough."""
    eff = list(bounds)
    squash = [False] * len(eff)
    while result_bound(eff) > BOUND_LIMIT:
        order = [k for k in range(len(eff)) if not squash[k] and eff[k] > 1.0]
        if not order:
            return None
        k = max(order, key=lambda k: eff[k])
        squash[k] = True
        eff[k] = min(eff[k], 1.0)
    return tuple(squash)


def _squashed(bounds, squash):
    return [min(b, 1.0) if s else b for b, s in zip(bounds, squash)]


def _broadcastable(a: tuple, b: tuple):
    """The numpy broadcast shape of ``a`` and ``b``, or None."""
    out = []
    for k in range(1, max(len(a), len(b)) + 1):
        x = a[-k] if k <= len(a) else 1
        y = b[-k] if k <= len(b) else 1
        if x != y and x != 1 and y != 1:
            return None
        out.append(max(x, y))
    return tuple(reversed(out))


class _Builder:
    def __init__(self, spec: ProgramSpec, seed: int):
        self.spec = spec
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self.shapes: list[tuple] = []
        self.bounds: list[float] = []
        self.consumed: list[bool] = []
        self.ops: list[Op] = []
        self.window: list[int] = []

    # ------------------------------------------------------------------ randomness
    def random(self) -> float:
        return float(self.rng.random())

    def integer(self, lo: int, hi: int) -> int:
        """Uniform in [lo, hi] (inclusive)."""
        return int(self.rng.integers(lo, hi + 1))

    def choice(self, items, weights=None):
        items = list(items)
        if weights is None:
            return items[self.integer(0, len(items) - 1)]
        total = float(sum(weights))
        r = self.random() * total
        acc = 0.0
        for item, w in zip(items, weights):
            acc += w
            if r < acc and w > 0:
                return item
        return [i for i, w in zip(items, weights) if w > 0][-1]

    def pick(self, candidates):
        """A value among ``candidates``, preferring ones no operation has read yet."""
        fresh = [v for v in candidates if not self.consumed[v]]
        if fresh and self.random() < P_FRESH:
            return self.choice(fresh)
        return self.choice(candidates)

    def pick_partner(self, candidates, shape):
        same = [v for v in candidates if self.shapes[v] == shape]
        if same and len(same) < len(candidates) and self.random() < 0.7:
            candidates = same
        return self.pick(candidates)

    # ------------------------------------------------------------------ values
    def add_value(self, shape, bound) -> int:
        self.shapes.append(tuple(shape))
        self.bounds.append(float(bound))
        self.consumed.append(False)
        return len(self.shapes) - 1

    def candidates(self) -> list[int]:
        """The values an operation may read: the ``width`` most recent ones and every
        input not read yet."""
        n = len(self.shapes)
        recent = range(max(0, n - self.spec.width), n)
        extra = [i for i in range(min(self.spec.num_inputs, n - len(recent))) if not self.consumed[i]]
        return extra + list(recent)

    def random_shape(self, sizes) -> tuple:
        rank = self.integer(0, self.spec.max_rank)
        return tuple(self.choice(sizes) for _ in range(rank))

    # ------------------------------------------------------------------ the program
    def build(self) -> Program:
        spec = self.spec
        n_sizes = self.integer(1, min(3, spec.max_dim))
        # Axis sizes come from a few per-program sizes, so that shapes often match.
        sizes = sorted(int(s) for s in self.rng.choice(np.arange(1, spec.max_dim + 1), n_sizes, replace=False))
        input_shapes = tuple(self.random_shape(sizes) for _ in range(spec.num_inputs))
        for shape in input_shapes:
            self.add_value(shape, INPUT_HIGH)
        categories = [c for c, w in spec.mix if w > 0]
        weights = [w for c, w in spec.mix if w > 0]
        makers = {
            "elementwise_unary": self.make_unary,
            "elementwise_binary": self.make_binary,
            "dot": self.make_dot,
            "reduction": self.make_reduction,
            "broadcast": self.make_broadcast,
            "reshape": self.make_reshape,
        }
        for step in range(spec.num_ops):
            category = self.choice(categories, weights)
            maker = makers[category]
            last = step == spec.num_ops - 1 and step > 0
            unread = [i for i in range(spec.num_inputs) if not self.consumed[i]]
            left = spec.num_ops - step - 1  # operations after this one (the last is kept)
            op = None
            if unread and not last and self.random() < len(unread) / max(left, 1):
                x = unread[0]  # an input that must be read while there is time
                op = maker(x, category)
            else:
                readable = self.candidates()
                if last:  # the last op reads an op result: at least one intermediate
                    readable = [v for v in readable if v >= spec.num_inputs]
                cands = [v for v in readable if self.eligible(category, self.shapes[v])]
                for _ in range(4):  # a few tries before falling back to a unary op
                    if not cands:
                        break
                    x = self.pick(cands)
                    op = maker(x, category)
                    if op is not None:
                        break
                    cands = [v for v in cands if v != x]
                if op is None:
                    x = self.pick(readable)
            if op is None:
                op = self.make_unary(x, "elementwise_unary")
            self.record(op)
        outputs = self.choose_outputs()
        arg_values = tuple(
            self.rng.uniform(INPUT_LOW, INPUT_HIGH, size=shape).astype(np.float32)
            for shape in input_shapes
        )
        return Program(spec, self.seed, input_shapes, tuple(self.ops), outputs, arg_values)

    def record(self, made: tuple) -> None:
        op, bound = made
        for i in op.args:
            self.consumed[i] = True
        self.add_value(op.shape, bound)
        self.ops.append(op)

    @staticmethod
    def op(name, category, args, params, squash, shape, bound) -> tuple:
        """An operation and the bound on its result's magnitude (what makers return)."""
        op = Op(
            name=name,
            category=category,
            args=tuple(int(a) for a in args),
            params=tuple(sorted(params.items())),
            squash=tuple(bool(s) for s in squash),
            shape=tuple(int(n) for n in shape),
        )
        return op, float(bound)

    def choose_outputs(self) -> tuple:
        """``num_outputs`` values: sinks first, greedily covering the most operations,
        then other operation results (latest first), then inputs."""
        n_in = self.spec.num_inputs
        ancestors: list[int] = [0] * n_in
        for k, op in enumerate(self.ops):
            mask = 1 << k
            for a in op.args:
                mask |= ancestors[a]
            ancestors.append(mask)
        results = list(range(n_in, len(self.shapes)))
        sinks = [v for v in results if not self.consumed[v]]
        chosen: list[int] = []
        covered = 0
        pool = list(sinks)
        while pool and len(chosen) < self.spec.num_outputs:
            best = max(pool, key=lambda v: ((ancestors[v] & ~covered).bit_count(), v))
            chosen.append(best)
            covered |= ancestors[best]
            pool.remove(best)
        rest = [v for v in reversed(results) if v not in chosen] + list(range(n_in))
        chosen += rest[: self.spec.num_outputs - len(chosen)]
        return tuple(sorted(chosen))

    # ------------------------------------------------------------------ categories
    def eligible(self, category: str, shape: tuple) -> bool:
        """Whether an operation of ``category`` may read a value of ``shape`` (a cheap
        necessary condition; the maker may still find no partner)."""
        if category in ("dot", "reduction"):
            return len(shape) >= 1
        if category == "broadcast":
            return len(shape) < self.spec.max_rank or (1 in shape and self.spec.max_dim >= 2)
        if category == "reshape":
            return self.spec.max_rank >= 1
        return True

    def make_unary(self, x, category):
        names = list(_UNARY)
        name = self.choice(names, [_UNARY[n][2] for n in names])
        params = {}
        if name == "affine":
            params = {
                "a": float(self.choice([-1, 1]) * round(0.5 + 1.5 * self.random(), 2)),
                "b": float(round(2.0 * self.random() - 1.0, 2)),
            }
        bound_fn = lambda bs: _UNARY[name][1](bs[0], params)
        squash = _squash_for([self.bounds[x]], bound_fn)
        if squash is None:  # cannot happen: every unary op is bounded on [-1, 1]
            squash = (True,)
        bound = bound_fn(_squashed([self.bounds[x]], squash))
        return self.op(name, category, [x], params, squash, self.shapes[x], bound)

    def make_binary(self, x, category):
        spec = self.spec
        shape = self.shapes[x]
        if spec.fan_in == 1:
            names = [n for n in _BINARY if not _BINARY[n][3]]
            name = self.choice(names, [_BINARY[n][2] for n in names])
            args = [x, x]
        else:
            compatible = [
                v for v in self.candidates() if v != x and _broadcastable(shape, self.shapes[v]) is not None
            ]
            if not compatible:
                return None
            names = list(_BINARY) + (["add_n"] if spec.fan_in >= 3 else [])
            weights = [_BINARY[n][2] for n in _BINARY] + ([1.5] if spec.fan_in >= 3 else [])
            name = self.choice(names, weights)
            args = [x, self.pick_partner(compatible, shape)]
            if name == "add_n":
                k = self.integer(3, spec.fan_in)
                while len(args) < k:
                    out = _broadcastable(shape, self.shapes[args[-1]])
                    more = [
                        v for v in self.candidates()
                        if v not in args and _broadcastable(out, self.shapes[v]) is not None
                    ]
                    if not more:
                        break
                    shape = out
                    args.append(self.pick_partner(more, shape))
                if len(args) == 2:
                    name = "add"
        out = self.shapes[args[0]]
        for a in args[1:]:
            out = _broadcastable(out, self.shapes[a])
        if name == "add_n":
            bound_fn = lambda bs: sum(bs)
        else:
            f = _BINARY[name][1]
            bound_fn = lambda bs: f(bs[0], bs[1])
        bounds = [self.bounds[a] for a in args]
        squash = _squash_for(bounds, bound_fn)
        if squash is None:
            return None
        bound = bound_fn(_squashed(bounds, squash))
        return self.op(name, category, args, {}, squash, out, bound)

    def _dot_plans(self, a, b):
        """(contracted axis of a, of b, fewest batch pairs, most batch pairs) options."""
        plans = []
        for i, j in itertools.product(range(len(a)), range(len(b))):
            if a[i] != b[j]:
                continue
            rest_a = collections.Counter(a[k] for k in range(len(a)) if k != i)
            rest_b = collections.Counter(b[k] for k in range(len(b)) if k != j)
            most = sum(min(n, rest_b[s]) for s, n in rest_a.items())
            need = max(0, len(a) + len(b) - 2 - self.spec.max_rank)
            if most >= need:
                plans.append((i, j, need, most))
        return plans

    def make_dot(self, x, category):
        spec = self.spec
        a = self.shapes[x]
        if len(a) == 0:
            return None
        if spec.fan_in == 1:
            partners = [x]
        else:
            partners = [
                v for v in self.candidates()
                if v != x and self.shapes[v] and self._dot_plans(a, self.shapes[v])
            ]
            if not partners:
                partners = [x] if self._dot_plans(a, a) else []
        if not partners:
            return None
        # Prefer partners that keep a non-scalar result, so dots do not collapse to scalars.
        keeping = [v for v in partners if len(a) + len(self.shapes[v]) - 2 > 0]
        if keeping and len(keeping) < len(partners) and self.random() < 0.8:
            partners = keeping
        y = self.pick(partners)
        b = self.shapes[y]
        plans = self._dot_plans(a, b)
        if not plans:
            return None
        i, j, need, most = self.choice(plans)
        nb = need + (1 if need < most and self.random() < 0.3 else 0)
        # Batch pairs: equal-size free axes of a and b.
        rest_a = [k for k in range(len(a)) if k != i]
        rest_b = [k for k in range(len(b)) if k != j]
        order = [rest_a[k] for k in self.rng.permutation(len(rest_a))]
        pairs = {}
        used_b: set = set()
        for ka in order:
            if len(pairs) == nb:
                break
            options = [kb for kb in rest_b if kb not in used_b and b[kb] == a[ka]]
            if options:
                kb = self.choice(options)
                pairs[ka] = kb
                used_b.add(kb)
        letters = iter("abcdefghijklmnopqrstuvwxyz")
        la = [next(letters) for _ in a]
        lb = [None] * len(b)
        lb[j] = la[i]
        for ka, kb in pairs.items():
            lb[kb] = la[ka]
        lb = [c if c is not None else next(letters) for c in lb]
        batch = [la[k] for k in range(len(a)) if k in pairs]
        free_a = [la[k] for k in range(len(a)) if k != i and k not in pairs]
        free_b = [lb[k] for k in range(len(b)) if k != j and k not in pairs.values()]
        out_letters = batch + free_a + free_b
        if len(out_letters) >= 2 and self.random() < 0.2:
            out_letters = [out_letters[k] for k in self.rng.permutation(len(out_letters))]
        size = dict(zip(la, a)) | dict(zip(lb, b))
        out = tuple(size[c] for c in out_letters)
        subscripts = f"{''.join(la)},{''.join(lb)}->{''.join(out_letters)}"
        style = "einsum"
        natural = out_letters == batch + free_a + free_b
        if natural and not pairs and len(a) <= 2 and len(b) <= 2 and i == len(a) - 1 and j == max(0, len(b) - 2):
            style = "dot"
        elif (
            natural and len(a) == len(b) == 3 and i == 2 and j == 1
            and pairs == {0: 0}
        ):
            style = "matmul"
        k = a[i]
        bound_fn = lambda bs: bs[0] * bs[1] * k
        bounds = [self.bounds[x], self.bounds[y]]
        squash = _squash_for(bounds, bound_fn)
        if squash is None:
            return None
        bound = bound_fn(_squashed(bounds, squash))
        params = {"subscripts": subscripts, "style": style}
        return self.op("dot", category, [x, y], params, squash, out, bound)

    def make_reduction(self, x, category):
        shape = self.shapes[x]
        rank = len(shape)
        if rank == 0:
            return None
        fn = self.choice(["sum", "mean", "max", "min"], [3.0, 2.0, 1.5, 1.0])
        if self.random() < 0.3:
            axes = tuple(range(rank))
        else:
            count = self.integer(1, rank)
            axes = tuple(sorted(int(t) for t in self.rng.choice(rank, count, replace=False)))
        keepdims = self.random() < 0.2
        reduced = math.prod(shape[t] for t in axes)
        out = tuple(1 if t in axes else n for t, n in enumerate(shape)) if keepdims else tuple(
            n for t, n in enumerate(shape) if t not in axes
        )
        bound_fn = (lambda bs: bs[0] * reduced) if fn == "sum" else (lambda bs: bs[0])
        squash = _squash_for([self.bounds[x]], bound_fn)
        if squash is None:  # a sum of too many elements: take the mean instead
            fn, bound_fn, squash = "mean", (lambda bs: bs[0]), (False,)
        bound = bound_fn(_squashed([self.bounds[x]], squash))
        params = {"fn": fn, "axes": axes, "keepdims": keepdims}
        return self.op("reduce", category, [x], params, squash, out, bound)

    def make_broadcast(self, x, category):
        spec = self.spec
        shape = self.shapes[x]
        options, weights = [], []
        if len(shape) < spec.max_rank:
            options += ["leading", "expand_dims"]
            weights += [2.0, 1.0]
        ones = [t for t, n in enumerate(shape) if n == 1]
        if ones and spec.max_dim >= 2:
            options.append("stretch")
            weights.append(2.0)
        if not options:
            return None
        kind = self.choice(options, weights)
        if kind == "leading":
            n = self.integer(2, spec.max_dim) if spec.max_dim >= 2 else 1
            return self.op("broadcast_to", category, [x], {"shape": (n,) + shape}, [False],
                           (n,) + shape, self.bounds[x])
        if kind == "expand_dims":
            axis = self.integer(0, len(shape))
            out = shape[:axis] + (1,) + shape[axis:]
            return self.op("expand_dims", category, [x], {"axis": axis}, [False], out, self.bounds[x])
        t = self.choice(ones)
        out = shape[:t] + (self.integer(2, spec.max_dim),) + shape[t + 1:]
        return self.op("broadcast_to", category, [x], {"shape": out}, [False], out, self.bounds[x])

    def make_reshape(self, x, category):
        spec = self.spec
        shape = self.shapes[x]
        options, weights = [], []
        alternatives = [s for s in _reshapes(math.prod(shape), spec.max_rank, spec.max_dim) if s != shape]
        if alternatives:
            options.append("reshape")
            weights.append(1.0)
        if len(shape) >= 2:
            options.append("transpose")
            weights.append(1.5)
        if any(n == 1 for n in shape):
            options.append("squeeze")
            weights.append(0.5)
        if any(n >= 2 for n in shape):
            options.append("slice")
            weights.append(1.5)
        if shape:
            options.append("concatenate")
            weights.append(1.5)
        while options:
            kind = self.choice(options, weights)
            op = getattr(self, f"_make_{kind}")(x, category, alternatives)
            if op is not None:
                return op
            k = options.index(kind)
            del options[k], weights[k]
        return None

    def _make_reshape(self, x, category, alternatives):
        clean = [s for s in alternatives if 1 not in s and s]
        pool = clean if clean and self.random() < 0.8 else alternatives
        out = self.choice(pool)
        return self.op("reshape", category, [x], {"shape": out}, [False], out, self.bounds[x])

    def _make_transpose(self, x, category, alternatives):
        rank = len(self.shapes[x])
        perm = tuple(range(rank))
        while perm == tuple(range(rank)):
            perm = tuple(int(t) for t in self.rng.permutation(rank))
        out = tuple(self.shapes[x][t] for t in perm)
        return self.op("transpose", category, [x], {"perm": perm}, [False], out, self.bounds[x])

    def _make_squeeze(self, x, category, alternatives):
        shape = self.shapes[x]
        ones = [t for t, n in enumerate(shape) if n == 1]
        count = self.integer(1, len(ones))
        axes = tuple(sorted(int(t) for t in self.rng.choice(ones, count, replace=False)))
        out = tuple(n for t, n in enumerate(shape) if t not in axes)
        return self.op("squeeze", category, [x], {"axes": axes}, [False], out, self.bounds[x])

    def _make_slice(self, x, category, alternatives):
        shape = self.shapes[x]
        axis = self.choice([t for t, n in enumerate(shape) if n >= 2])
        n = shape[axis]
        length = self.integer(1, n - 1)
        start = self.integer(0, n - length)
        stride = 2 if length >= 3 and self.random() < 0.2 else 1
        out = shape[:axis] + (-(-length // stride),) + shape[axis + 1:]
        params = {"axis": axis, "start": start, "stop": start + length, "stride": stride}
        return self.op("slice", category, [x], params, [False], out, self.bounds[x])

    def _make_concatenate(self, x, category, alternatives):
        spec = self.spec
        shape = self.shapes[x]
        axes = list(range(len(shape)))
        order = [axes[k] for k in self.rng.permutation(len(axes))]
        for axis in order:
            room = spec.max_dim - shape[axis]
            if room <= 0:
                continue

            def fits(v, room):
                s = self.shapes[v]
                return (
                    len(s) == len(shape)
                    and all(s[t] == shape[t] for t in range(len(shape)) if t != axis)
                    and s[axis] <= room
                )

            k = self.integer(2, max(2, spec.fan_in))
            args = [x]
            while len(args) < k:
                if spec.fan_in == 1:
                    more = [x] if shape[axis] <= room else []
                else:
                    more = [v for v in self.candidates() if v not in args and fits(v, room)]
                    if not more and len(args) == 1 and shape[axis] <= room:
                        more = [x]  # no other value fits: repeat x
                if not more:
                    break
                v = self.pick(more)
                args.append(v)
                room -= self.shapes[v][axis]
            if len(args) < 2:
                continue
            out = shape[:axis] + (sum(self.shapes[v][axis] for v in args),) + shape[axis + 1:]
            bound = max(self.bounds[v] for v in args)
            return self.op("concatenate", category, args, {"axis": axis}, [False] * len(args), out, bound)
        return None
