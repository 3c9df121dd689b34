"""A model of a Jacobian's wall time per platform: the cost convention ``"time"``.

Multiplications do not rank orders by time (issue 61: orders within 1.2-2x in
multiplications are not ranked by the clock). What the interpreter
(:mod:`alphagrad.interpreter`) emits per product decides more: an op (a dot or a
reduction, which XLA runs as a kernel of its own; a fusible elementwise product; a
gather or scatter of an index map; or nothing, for products without value), the entries
it writes and reads and its multiplications. The model prices each product as

    seconds = op_s[kind] + batch * (mult_s[kind] * mults + written_s * written + read_s * read)

(:data:`FEATURES`; the per-op overhead does not grow with the batch, the entries do),
with nonnegative coefficients per platform fitted to measured calls
(:func:`fit`, measured by :mod:`alphagrad.time_fit`), and the sum of its products'
prices is an order's modelled time. It is the same per-product table the compiled
evaluator counts multiplications with (:func:`product_table`, int64 picoseconds), so
``cost``, ``anneal`` and Markowitz minimise it at their usual speed. A product summed
into an existing edge (a join: one addition per entry, which XLA fuses into the product)
is not charged: fitted with a join term (ops and entries added) on the first CPU
measurements (7 programs, 82 orders), the fit gave it zero weight, so the evaluator's
kernels stay as they are.

The time a model gives is the order-dependent part of one call of the Jacobian
``jax.jit(jax.vmap(J))`` at the model's batch: evaluating ``f`` and its local partials
and expanding to JAX's layout cost every order alike and are left out.

Models: ``alphagrad/time_models/<platform>.json`` in the package, overridden by a refit
on the user's machine (``alphagrad timemodel fit``) kept under the cache directory
(:func:`user_path`). A platform with neither: a warning, and the multiplication model
(:func:`fallback`: 1 ns per multiplication, so the ranking is by multiplications).
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
import warnings

import numpy as np

from alphagrad import rules as rl

#: The convention name; ``"time:PLATFORM"`` names a platform (``"time"``: JAX's default backend).
TIME = "time"
#: Picoseconds per unit of the int64 tables the evaluator sums.
UNIT_S = 1e-12
#: The model's coefficients, in seconds: per op of each kind (per call, at any batch), and
#: per entry of one sample (times the batch).
KINDS = ("kernel", "fused", "map")
FEATURES = tuple(f"{k}_op_s" for k in KINDS) + ("kernel_mult_s", "fused_mult_s") + tuple(
    f"{k}_{what}_s" for what in ("written", "read") for k in KINDS)
#: Which coefficients scale with the batch.
PER_SAMPLE = frozenset(f for f in FEATURES if not f.endswith("_op_s"))


@dataclasses.dataclass(frozen=True)
class TimeModel:
    """The time model of one platform.

    Attributes:
      platform: JAX's backend name (``"cpu"``, ``"tpu"``, ``"gpu"``).
      batch: the batch a call is modelled at (the per-sample terms are multiplied by it).
      coefficients: :data:`FEATURES` -> seconds (>= 0; missing ones are 0).
      source: where it was read from (a path, or ``"fallback"``).
      fit: what the fit reported (programs, errors, rank correlations), for the record.
    """

    platform: str
    batch: int
    coefficients: dict
    source: str = ""
    fit: dict = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        unknown = set(self.coefficients) - set(FEATURES)
        bad = {k: v for k, v in self.coefficients.items() if not (float(v) >= 0 and np.isfinite(float(v)))}
        if unknown or bad or not (isinstance(self.batch, int) and self.batch >= 1):
            raise ValueError(f"not a time model: unknown coefficients {sorted(unknown)}, negative or "
                             f"non-finite {bad}, batch {self.batch!r}")

    def weights(self) -> np.ndarray:
        """The coefficients in :data:`FEATURES` order, the per-sample ones times the batch."""
        return np.asarray([float(self.coefficients.get(k, 0.0)) * (self.batch if k in PER_SAMPLE else 1)
                           for k in FEATURES])

    def to_json(self) -> dict:
        return {"platform": self.platform, "batch": self.batch, "unit": "seconds",
                "coefficients": {k: float(self.coefficients.get(k, 0.0)) for k in FEATURES}, "fit": self.fit}

    @classmethod
    def from_json(cls, data: dict, source: str = "") -> "TimeModel":
        return cls(str(data["platform"]), int(data["batch"]), dict(data["coefficients"]), source,
                   dict(data.get("fit", {})))


def fallback(platform: str) -> TimeModel:
    """The multiplication model: 1 ns per multiplication, nothing else (what a platform
    without a fitted model gets, with a warning)."""
    return TimeModel(platform, 1, {"kernel_mult_s": 1e-9, "fused_mult_s": 1e-9}, "fallback")


# ------------------------------------------------------------------ features and tables


def _structure_arrays(tables) -> tuple:
    """``(value entries, has value, is an index map)`` per structure id (0: no edge)."""
    S = tables.structures
    has = np.asarray([s is not None and s.value_vars is not None for s in S])
    size = np.asarray([s.value_size if h else 0 for s, h in zip(S, has)], np.float64)
    is_map = np.asarray([s is not None and bool(s.index_map) for s in S])
    return size, has, is_map


def product_features(tables) -> np.ndarray:
    """``[S, S, F]`` float64: each product ``a . b``'s :data:`FEATURES` (ops 0/1,
    entries per sample), 0 where the pair never meets.

    The kinds follow :func:`alphagrad.structure.product_value`: a product whose result
    has no value, or is a static map, or whose factors have no value (a constant) emits
    nothing; with an index map it is a gather/scatter of the other factor (``map``); else
    an einsum, a ``kernel`` if it sums a variable (its operands span more entries than its
    result: ``published`` cost > result entries) and ``fused`` (elementwise) if not."""
    size, has, is_map = _structure_arrays(tables)
    n = tables.size
    a, b = np.nonzero(tables.compose != rl.INVALID)
    keep = (a > 0) & (b > 0)
    a, b = a[keep], b[keep]
    r = tables.compose[a, b]
    operands = has[a] | has[b]
    either_map = is_map[a] | is_map[b]
    static = is_map[r] | (is_map[a] | ~has[a]) & (is_map[b] | ~has[b])  # nothing computed at run time
    op = has[r] & operands & ~(either_map & static)
    mapped = op & either_map
    span = tables.cost["published"][a, b].astype(np.float64)
    kernel = op & ~mapped & (span > size[r])
    fused = op & ~mapped & ~kernel
    mults = tables.cost["exact"][a, b].astype(np.float64)
    read = np.where(is_map[a], 0.0, size[a]) + np.where(is_map[b], 0.0, size[b])
    cols = {"kernel_mult_s": np.where(kernel, mults, 0.0), "fused_mult_s": np.where(kernel, 0.0, mults)}
    for kind, where in zip(KINDS, (kernel, fused, mapped)):
        cols.update({f"{kind}_op_s": where, f"{kind}_written_s": np.where(where, size[r], 0.0),
                     f"{kind}_read_s": np.where(where, read, 0.0)})
    out = np.zeros((n, n, len(FEATURES)))
    for f, name in enumerate(FEATURES):
        out[a, b, f] = cols[name]
    return out


def product_table(tables, model: TimeModel) -> np.ndarray:
    """``[S, S]`` int64: each product's modelled time in picoseconds (:data:`UNIT_S`),
    saturated at :data:`alphagrad.rules.COST_CAP`: what the evaluator sums."""
    seconds = product_features(tables) @ model.weights()
    return np.minimum(np.rint(seconds / UNIT_S), float(rl.COST_CAP)).astype(np.int64)


_TABLES: dict = {}


def convention_table(tables, convention: str) -> np.ndarray:
    """The evaluator's table for a time ``convention`` (:func:`product_table` of the
    platform's model, :func:`load`), kept per tables and model (annealing's chains share it)."""
    model = load(platform_of(convention))
    key = (id(tables), id(model))
    found = _TABLES.get(key)
    if found is None or found[0] is not tables or found[1] is not model:
        if len(_TABLES) >= 32:
            _TABLES.clear()
        found = _TABLES[key] = (tables, model, product_table(tables, model))
    return found[2]


def order_features(graph, order) -> np.ndarray:
    """``[F]``: the :data:`FEATURES` summed over the products of eliminating ``order``
    from ``graph``, walked in Python (what :func:`fit` regresses on)."""
    tables = rl.tables(graph)
    feats = product_features(tables)
    E = {(e.src, e.dst): tables.index(e.structure) for e in graph.edges}
    total = np.zeros(len(FEATURES))
    for j in order:
        for a, b in rl.eliminate_edges(E, j, tables.compose, tables.join):
            total += feats[a, b]
    return total


# ------------------------------------------------------------------ conventions and files


def is_time(convention) -> bool:
    """Whether ``convention`` names the time model (``"time"`` or ``"time:PLATFORM"``)."""
    return isinstance(convention, str) and (convention == TIME or convention.startswith(TIME + ":"))


def platform_of(convention: str, platform: str | None = None) -> str:
    """The platform a time convention models: ``platform``, the one it names, or JAX's
    default backend."""
    if platform is None and convention != TIME:
        platform = convention.partition(":")[2]
    if platform is None:
        import jax

        platform = jax.default_backend()
    if not isinstance(platform, str) or not platform.isidentifier():
        raise ValueError(f"platform must be a JAX backend name such as 'cpu' or 'tpu', got {platform!r}")
    return platform


def packaged_path(platform: str) -> str:
    """The model shipped with the package for ``platform``."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "time_models", f"{platform}.json")


def user_path(platform: str) -> str | None:
    """Where a refit on this machine is kept: ``$ALPHAGRAD_CACHE_DIR/time_models``, or
    ``~/.cache/alphagrad/time_models`` (``$XDG_CACHE_HOME`` for ``~/.cache``) where the
    variable is unset; None where it is empty (no cache)."""
    root = os.environ.get(rl.CACHE_ENV)
    if root is None:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        root = os.path.join(base, "alphagrad")
    return os.path.join(root, "time_models", f"{platform}.json") if root else None


def stored(platform: str) -> bool:
    """Whether a model of ``platform`` is stored (the user's or the packaged one)."""
    return any(p is not None and os.path.exists(p) for p in (user_path(platform), packaged_path(platform)))


_LOADED: dict = {}


def load(platform: str) -> TimeModel:
    """The model of ``platform``: the user's refit if there is one, else the packaged one,
    else (with a warning saying so and how to fit one) :func:`fallback`. Read once per
    process and file version."""
    for path in (user_path(platform), packaged_path(platform)):
        if path is None or not os.path.exists(path):
            continue
        key = (path, os.stat(path).st_mtime_ns)
        if key not in _LOADED:
            try:
                with open(path) as f:
                    _LOADED[key] = TimeModel.from_json(json.load(f), path)
            except (OSError, ValueError, KeyError, TypeError) as e:
                warnings.warn(f"alphagrad: ignoring the time model in {path} ({type(e).__name__}: {e})",
                              stacklevel=3)
                continue
        return _LOADED[key]
    warnings.warn(f"alphagrad: no time model is fitted for platform {platform!r}; convention 'time' counts "
                  f"multiplications instead (1 ns each). Fit one on this machine with `alphagrad timemodel fit`.",
                  stacklevel=3)
    return fallback(platform)


def save(model: TimeModel, path: str) -> None:
    """Writes ``model`` to ``path`` whole, then renames it into place (a reader or a
    failed write never sees half a file, and an old model stays until then)."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(model.to_json(), f, indent=1)
            f.write("\n")
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide a shared or packaged model from others
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


# ------------------------------------------------------------------ fitting


def fit(features: np.ndarray, seconds: np.ndarray, groups, batch: int) -> dict:
    """Coefficients (:data:`FEATURES` -> seconds, >= 0) from measured calls.

    ``features[i]`` (``[N, F]``, :func:`order_features`) are the summed features of the
    order timed in call ``i`` at ``batch``, ``seconds[i]`` its measured time, and
    ``groups[i]`` its program. Each program gets its own free intercept (what every order
    of it pays alike: evaluating ``f``, its local partials, the layout), so the
    coefficients are fitted to the differences between orders of one program, which is
    what ranking them needs. Least squares on the relative error ``(model - measured) /
    measured`` (bounded: coefficients >= 0): each call counts alike whatever its size
    (a 10 us and a 10 ms program weigh the same), and unlike a log error it stays linear
    in the coefficients, so the fit is one convex problem with an exact optimum."""
    X = np.asarray(features, np.float64) * np.asarray(
        [batch if k in PER_SAMPLE else 1 for k in FEATURES], np.float64)
    return {k: float(v) for k, v in zip(FEATURES, relative_fit(X, seconds, groups))}


def relative_fit(X: np.ndarray, seconds, groups) -> np.ndarray:
    """The solve of :func:`fit` for any features ``X`` (``[N, F]``): coefficients >= 0 of
    its columns, a free intercept per group, least squares on the relative error."""
    from scipy.optimize import lsq_linear

    X = np.asarray(X, np.float64)
    t = np.asarray(seconds, np.float64)
    names = sorted(set(groups))
    G = np.asarray([[g == n for n in names] for g in groups], np.float64)
    A = np.hstack([X, G]) / t[:, None]
    scale = np.maximum(np.abs(A).max(axis=0), 1e-30)  # columns of unit size: a well-posed solve
    lower = np.r_[np.zeros(X.shape[1]), np.full(len(names), -np.inf)]
    sol = lsq_linear(A / scale, np.ones(len(t)), bounds=(lower, np.inf), method="bvls").x / scale
    return sol[:X.shape[1]]
