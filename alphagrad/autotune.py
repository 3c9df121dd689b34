"""``alphagrad.jacobian(f)`` with no order: a drop-in for ``jax.jacrev`` that chooses.

Per argument shapes and dtypes (and branch path), the first call traces ``f``, finds a
cheap elimination order (the optimum of a graph of at most
:attr:`AutoSettings.exact_limit` intermediates; else annealing from forward, reverse and
Markowitz under the ``budget`` rule, :func:`parse_budget`), then compiles the cheapest
orders found together with ``jax.jacfwd`` and ``jax.jacrev`` (side by side, JAX's two
while the search runs) and times each at the call's arguments (:func:`sample_candidates`:
round robin, medians). The fastest computes the Jacobian, except that an alphagrad order
must beat JAX's best by a margin its measured spread justifies (more rounds while they
are within noise; a tie goes to JAX, :func:`verdict`): auto is never slower than JAX's
best as measured. ``.explain()`` says what was chosen and the times; the ``alphagrad``
logger says it at level INFO.

The ranking depends on the batch: a Jacobian run under ``jax.vmap`` at batch 256 may
prefer an order where one sample prefers ``jax.jacrev``. So a choice is made per batch:
``batch=B`` (the vmap batch size you will run at) times the candidates as
``jax.jit(jax.vmap(candidate))`` on your arguments repeated ``B`` times at a call outside a
trace; under ``jax.vmap`` the batch size is read from a
:func:`jax.custom_batching.custom_vmap` rule (public API), and an eager ``jax.vmap(J)``
times the candidates on its own batched values. A choice made for one batch is not used
for another.

The choice is kept in memory and, keyed by the graph's canonical form, the shapes, the
batch and the device, on disk (:mod:`alphagrad.order_cache`): a new process reuses it at
once. A later ``budget=`` or ``refine=True`` continues the search from the kept order and
keeps the result only if cheaper; ``start=`` adds an order of the user's as a start.

Inside ``jax.jit`` (tracers: nothing can be timed) the kept choice for the batch is used;
without one, the cheapest order found, untimed (``.explain()`` says so); a later call
outside a trace (or an eager ``jax.vmap`` at that batch) times it. Reverse-mode
differentiation of the Jacobian goes through a :func:`jax.custom_jvp` around the rule
(``custom_vmap`` alone has none).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import functools
import logging
import math
import numbers
import statistics
import time
import warnings
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.custom_batching import custom_vmap

from alphagrad import interpreter, order_cache, orders
from alphagrad.anneal import AnnealSettings, anneal
from alphagrad.canonical import canonical
from alphagrad.checks import check_batch, check_int
from alphagrad.graph import Graph
from alphagrad.scoring import cost as cost_of, resolve_order

logger = logging.getLogger("alphagrad")

JAX_CANDIDATES = ("jax.jacfwd", "jax.jacrev")


@dataclasses.dataclass(frozen=True)
class AutoSettings:
    """How auto searches and times. The defaults keep a first call to a few seconds:
    RoeFlux_3d (139 intermediates, all six arguments) took 4.7 s to search, compile and
    time against ``jax.jacrev``'s 2.3 s to compile on a 13-core CPU (3.7 s against 1.3 s
    on a TPU v5e); a new process found the kept choice in 0.05 s."""

    #: Seconds of search when ``budget`` is not given.
    budget_s: float = 1.0
    #: Graphs of at most this many intermediates get the optimum (exact search).
    exact_limit: int = AnnealSettings().exact_limit
    #: Orders timed beside ``jax.jacfwd`` and ``jax.jacrev``, at most, each costing at
    #: most ``within`` times the cheapest (the cost model counts multiplications, not time).
    candidates: int = 2
    within: float = 1.25
    #: Timed rounds (round robin over the candidates; the median counts), and more while
    #: they span less than ``spread_s`` seconds (up to ``repeats + noise_repeats``): on a
    #: shared CPU a burst of other load lasts a few tenths of a second and slows a large
    #: multithreaded Jacobian far more than a small one, so rounds spread over time let it
    #: hit every candidate alike.
    repeats: int = 5
    spread_s: float = 0.5
    #: A tie goes to JAX: an alphagrad order is kept only if its median beats JAX's best
    #: median by more than ``min_gain`` of it and by more than ``noise`` standard errors of
    #: the difference (each median's error from its median absolute deviation). While it
    #: looks faster by more than ``min_gain`` but within that noise, up to
    #: ``noise_repeats`` more rounds are timed (within ``timing_s``). Sub-millisecond
    #: Jacobians on a shared CPU move by 10-30% between runs: a gain of a few percent is
    #: no reason to leave JAX's own.
    min_gain: float = 0.05
    noise: float = 2.0
    noise_repeats: int = 20
    #: A timed sample runs at least this long (several calls of a fast Jacobian).
    sample_s: float = 0.005
    #: Timing stops after this many seconds (after one round), and a candidate this many
    #: times slower than the fastest after a round is timed no more.
    timing_s: float = 2.0
    drop: float = 3.0
    #: ``"rate:R"``: the first round's seconds (then doubling), and the value of a
    #: multiplication where nothing can be timed (inside a trace).
    round_s: float = 0.1
    multiplication_s: float = 1e-9
    #: ``"patience:N"``: annealing moves per round, per intermediate (at least 200).
    round_moves: int = 20
    #: ``"rate:R"`` and ``"patience:N"`` stop here at the latest.
    max_search_s: float = 60.0
    seed: int = 0

    def __post_init__(self):
        for name in ("budget_s", "within", "sample_s", "timing_s", "drop", "round_s", "multiplication_s",
                     "max_search_s", "min_gain", "noise", "spread_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) or value < 0:
                raise ValueError(f"AutoSettings.{name} must be a finite number >= 0, got {value!r}")
        for name, low in (("exact_limit", 0), ("candidates", 1), ("repeats", 1), ("noise_repeats", 0),
                          ("round_moves", 1), ("seed", 0)):
            check_int(getattr(self, name), f"AutoSettings.{name}", low)
        if self.within < 1 or self.drop < 1:
            raise ValueError(f"AutoSettings.within and drop are ratios >= 1, got {self.within!r} and {self.drop!r}")


@dataclasses.dataclass(frozen=True)
class Budget:
    """A stopping rule for the search: ``"seconds"`` (``value`` seconds; 0: the classic
    orders only), ``"rate"`` (search while a round saves more than it costs, ``value``
    the expected calls) or ``"patience"`` (stop after ``value`` rounds without a cheaper
    order)."""

    rule: str
    value: float

    def __str__(self) -> str:
        return f"{self.value:g} s" if self.rule == "seconds" else f"{self.rule}:{self.value:g}"


def parse_budget(budget, settings: AutoSettings = AutoSettings()) -> Budget:
    """The :class:`Budget` that ``budget`` names (checked before any work).

    Args:
      budget: None (``settings.budget_s`` seconds); a number of seconds >= 0 (0: no
        search, the cheapest of forward, reverse and Markowitz); ``"rate:R"``: search in
        rounds while the last round saved at least its time, a multiplication saved
        being worth the measured time of ``jax.jacrev`` per multiplication of the reverse
        order, times ``R`` expected calls (R > 0); ``"patience:N"``: rounds of annealing
        until ``N`` (an int >= 1) in a row find nothing cheaper.

    Raises:
      TypeError: not a number or a string.
      ValueError: a negative, NaN or infinite number; an unknown rule; a bad value.
    """
    forms = "a number of seconds >= 0, 'rate:R' (R expected calls > 0) or 'patience:N' (N rounds >= 1)"
    if budget is None:
        return Budget("seconds", settings.budget_s)
    if isinstance(budget, (bool, np.bool_)) or not isinstance(budget, (numbers.Real, str)):
        raise TypeError(f"budget must be {forms}, not {budget!r} of type {type(budget).__name__}")
    if not isinstance(budget, str):
        if not math.isfinite(budget) or budget < 0:
            raise ValueError(f"budget must be {forms}; got {budget!r}")
        return Budget("seconds", float(budget))
    rule, sep, text = budget.partition(":")
    if not sep or rule not in ("rate", "patience"):
        raise ValueError(f"unknown budget rule {budget!r}: budget must be {forms}")
    try:
        value = float(text) if rule == "rate" else int(text)
    except ValueError:
        raise ValueError(f"cannot read the value of budget {budget!r}: budget must be {forms}") from None
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"budget {budget!r}: the value must be finite and > 0 ({forms})")
    return Budget(rule, float(value))


@dataclasses.dataclass(frozen=True)
class Choice:
    """What computes the Jacobian at one argument spec (see :meth:`AutoJacobian.explain`).

    Attributes:
      spec: one sample's shapes and dtypes, the arguments differentiated and the batch.
      name: what was chosen: ``"jax.jacfwd"``, ``"jax.jacrev"`` or an order (``"order"``
        for the cheapest found, ``"order #2"`` for the next that was timed, ...).
      order: the cheapest order found (the one timed and chosen, where an order was).
      cost: its multiplications.
      times: seconds per call of each candidate timed (empty: chosen untimed).
      how: how the order was found, and where the choice came from.
      fn: the function that computes the Jacobian.
      graph: the traced graph.
      batch: the ``jax.vmap`` batch size it was chosen for (None: unbatched calls).
    """

    spec: str
    name: str
    order: tuple
    cost: int
    times: dict
    how: str
    fn: Callable = dataclasses.field(repr=False)
    graph: Graph = dataclasses.field(repr=False)
    batch: int | None = None

    @property
    def timed(self) -> bool:
        return bool(self.times)

    @functools.cached_property
    def baselines(self) -> dict:
        """The costs of forward, reverse and Markowitz (computed when asked: a cached
        choice needs no evaluator)."""
        return {k: cost_of(self.graph, o) for k, o in orders.classic(self.graph).items()}

    def explain(self) -> str:
        label = f"alphagrad {self.name} ({self.cost} multiplications)" if self.name.startswith("order") else self.name
        lines = [f"at {self.spec}: {label}" + (f", {_us(self.times[self.name])} a call" if self.timed else "")]
        if self.timed:
            lines.append("  timed (median): " + ", ".join(f"{n} {_us(t)}" for n, t in
                                                           sorted(self.times.items(), key=lambda kv: kv[1])))
        elif self.batch is None:
            lines.append("  not timed: chosen inside a jax trace (jit/vmap) by its cost; a call outside a "
                         "trace times it against jax.jacfwd and jax.jacrev")
        else:
            lines.append(f"  not timed at batch {self.batch}: chosen inside jax.jit by its cost, no choice was kept "
                         f"for this batch; an eager jax.vmap(J) at this batch, or a call of "
                         f"alphagrad.jacobian(f, batch={self.batch}) outside a trace, times it against jax.jacfwd "
                         f"and jax.jacrev")
        lines.append(f"  order: {self.cost} multiplications (forward {self.baselines['forward']}, reverse "
                     f"{self.baselines['reverse']}, Markowitz {self.baselines['markowitz']}); {self.how}")
        return "\n".join(lines)


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:.1f} us" if seconds < 1e-3 else f"{seconds * 1e3:.2f} ms"


def sample_candidates(fns: dict, args, settings: AutoSettings, clock: Callable = time.perf_counter) -> dict:
    """Seconds per call of each compiled function in ``fns`` (name -> function) at
    ``args``: name -> the samples of round-robin rounds (``block_until_ready``; a sample
    repeats a fast call for ``sample_s``). ``settings.repeats`` rounds, and up to
    ``noise_repeats`` more while they span less than ``spread_s`` or alphagrad's best and
    JAX's best are within noise (:func:`contest`). A candidate ``drop`` times slower than the fastest after a round is
    timed no more; timing ends after ``timing_s`` (after one round). ``clock``: seconds."""
    per_call = {}
    for name, fn in fns.items():  # the warm-up call also sizes the samples
        t = clock()
        jax.block_until_ready(fn(*args))
        per_call[name] = max(clock() - t, 1e-9)
    calls = {name: max(1, min(1000, math.ceil(settings.sample_s / t))) for name, t in per_call.items()}
    samples: dict = {name: [] for name in fns}
    active = list(fns)
    t_start = clock()
    for rounds in range(1, settings.repeats + settings.noise_repeats + 1):
        for name in active:
            fn, n = fns[name], calls[name]
            t = clock()
            for _ in range(n):
                out = fn(*args)
            jax.block_until_ready(out)
            samples[name].append((clock() - t) / n)
        best = min(statistics.median(samples[n]) for n in active)
        active = [n for n in active if statistics.median(samples[n]) <= settings.drop * best]
        if clock() - t_start > settings.timing_s:
            break
        close = contest(samples, settings)
        undecided = close is not None and settings.min_gain < close[2] <= close[3]
        if rounds >= settings.repeats and clock() - t_start >= settings.spread_s and not undecided:
            break
    return samples


def time_candidates(fns: dict, args, settings: AutoSettings) -> dict:
    """Median seconds per call of each compiled function in ``fns`` (name -> function) at
    ``args`` (:func:`sample_candidates`)."""
    return {name: statistics.median(s) for name, s in sample_candidates(fns, args, settings).items()}


def _median_error(samples) -> float:
    """The standard error of the median of ``samples``, from their median absolute
    deviation (1.4826 MAD estimates a normal sigma; a median's error is 1.2533 sigma /
    sqrt(n)). One sample: 0 (no spread measured; ``min_gain`` alone then decides)."""
    med = statistics.median(samples)
    mad = statistics.median(abs(s - med) for s in samples)
    return 1.2533 * 1.4826 * mad / math.sqrt(len(samples))


def contest(samples: dict, settings: AutoSettings):
    """``(JAX's best, alphagrad's best, its gain, the gain needed)`` from timed ``samples``
    (name -> seconds): the fastest median of each side, the gain ``1 - ours / JAX's``, and
    the gain needed to keep ours: ``min_gain``, or ``noise`` standard errors of the
    difference of the medians over JAX's, whichever is larger. None where a side has
    nothing timed."""
    medians = {n: statistics.median(s) for n, s in samples.items() if s}
    jax_best = min((n for n in medians if n in JAX_CANDIDATES), key=medians.__getitem__, default=None)
    ours = min((n for n in medians if n not in JAX_CANDIDATES), key=medians.__getitem__, default=None)
    if jax_best is None or ours is None:
        return None
    m = medians[jax_best]
    noise = settings.noise * math.hypot(_median_error(samples[ours]), _median_error(samples[jax_best])) / m
    return jax_best, ours, 1 - medians[ours] / m, max(settings.min_gain, noise)


def verdict(samples: dict, settings: AutoSettings) -> tuple[str, str]:
    """The candidate to keep from timed ``samples`` (name -> seconds per call), and a note
    where a tie went to JAX: the fastest median, but an alphagrad order only if it beats
    JAX's best by the gain :func:`contest` asks."""
    fastest = min((n for n in samples if samples[n]), key=lambda n: statistics.median(samples[n]))
    close = contest(samples, settings)
    if close is None or fastest in JAX_CANDIDATES or close[2] > close[3]:
        return fastest, ""
    jax_best, ours, gain, need = close
    return jax_best, (f"; {ours} ran {gain:.1%} faster than {jax_best}, within noise ({need:.1%} needed, "
                      f"{len(samples[ours])} rounds): a tie goes to JAX")


def _check_call(args, argnums):
    """The arguments differentiated, as ``jax.jacrev`` checks them (range, real dtypes)."""
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    for n in nums:
        if not -len(args) <= n < len(args):
            raise ValueError(f"argnums {argnums!r} is out of range for {len(args)} positional arguments")
    nums = tuple(n % len(args) for n in nums)
    for n in nums:
        for leaf in jax.tree_util.tree_leaves(args[n]):
            dtype = jnp.result_type(leaf)
            if not jnp.issubdtype(dtype, jnp.inexact):
                raise TypeError(f"alphagrad.jacobian requires real-valued inputs (a sub-dtype of np.inexact) "
                                f"for the arguments it differentiates, but argument {n} has dtype {dtype}")
    return nums


def _traced(values) -> bool:
    return any(isinstance(v, jax.core.Tracer) for v in jax.tree_util.tree_leaves(values))


@dataclasses.dataclass
class _Call:
    """A call to choose for: one sample's ``abstract`` arguments and the arguments
    differentiated ``nums``, at ``batch`` (None: unbatched; else under ``jax.vmap`` of that
    size, ``axes`` its in_axes, None for one sample's ``args`` repeated ``batch`` times);
    ``args``: the values (one sample, or the batch where ``axes`` is given); ``traced``:
    tracers among them (nothing can be timed)."""

    args: tuple
    abstract: Any
    nums: tuple
    traced: bool
    batch: int | None = None
    axes: tuple | None = None

    @functools.cached_property
    def key(self) -> tuple:
        """The key of its choices in memory."""
        leaves, tree = jax.tree_util.tree_flatten(self.abstract)
        return tree, tuple((l.shape, str(l.dtype)) for l in leaves), self.nums, self.batch

    @functools.cached_property
    def spec(self) -> str:
        return order_cache.spec_of(self.abstract, self.nums, self.batch)

    @functools.cached_property
    def at(self) -> tuple:
        """The arguments to time at: the call's, or one sample's repeated ``batch`` times."""
        if self.batch is None or self.axes is not None:
            return self.args
        return jax.tree_util.tree_map(lambda a: jnp.broadcast_to(a, (self.batch,) + jnp.shape(a)), self.args)

    def timed(self, fn: Callable) -> Callable:
        """What to time of a per-sample Jacobian ``fn`` (jitted where it can be): itself, or
        ``jax.jit(jax.vmap(fn))`` at the batch."""
        return fn if self.batch is None else jax.jit(jax.vmap(fn, in_axes=self.axes if self.axes else 0))


class AutoJacobian:
    """The function :func:`jacobian` returns for ``order="auto"``: ``jax.jacrev``'s
    signature and output layout, choosing per argument spec and batch (see the module
    docstring).

    Attributes:
      choices: every :class:`Choice` made so far, one per argument spec, batch (and branch
        path).
      batch: the ``jax.vmap`` batch size a call outside a trace tunes for (None: one sample).
    """

    def __init__(self, f, argnums, has_aux, budget, refine, cache, start, settings, batch=None):
        functools.update_wrapper(self, f)
        self.f, self.argnums, self.has_aux = f, argnums if isinstance(argnums, int) else tuple(argnums), has_aux
        self.main = (lambda *a: f(*a)[0]) if has_aux else f
        self.budget, self.explicit = parse_budget(budget, settings), budget is not None
        self.refine, self.cache, self.start, self.settings, self.batch = refine, cache, start, settings, batch
        self.memory: dict = {}
        self.choices: list = []

    def __call__(self, *args):
        nums = _check_call(args, self.argnums)
        if _traced(args):
            return self._under_trace(args, nums)
        return self.choose(args, nums).fn(*args)

    def explain(self) -> str:
        """What was chosen at each argument spec so far, with the measured times."""
        name = getattr(self.f, "__name__", "f")
        if not self.choices:
            at = "" if self.batch is None else f" (timed under jax.vmap at batch {self.batch})"
            return (f"alphagrad.jacobian({name}): not called yet; the first call at each argument shapes "
                    f"chooses between jax.jacfwd, jax.jacrev and alphagrad orders{at} (budget {self.budget})")
        return "\n".join([f"alphagrad.jacobian({name}) on {order_cache.device_name()}:"]
                         + [c.explain() for c in self.choices])

    def choose(self, args, nums) -> Choice:
        """The choice for one sample ``args`` at :attr:`batch` (:meth:`_choose`)."""
        values = jax.tree_util.tree_leaves(args)
        call = _Call(args, interpreter._abstract(args), nums, _traced(values), self.batch)
        return self._choose(call, lambda c: interpreter._takes_same_branches(c.graph, values),
                            lambda: interpreter._graph_at(self.main, args))

    def _choose(self, call: _Call, same: Callable, graph_of: Callable) -> Choice:
        """The choice kept for ``call`` on the branch path that ``same(choice)`` accepts
        (timed now if it was not and ``call`` can be); else one made (:meth:`tune`) on
        ``graph_of()``, or from the order of a choice kept at another batch (one search)."""
        kept = self.memory.setdefault(call.key, [])
        for k, choice in enumerate(kept):
            if same(choice):
                if choice.timed or call.traced:
                    return choice
                kept[k] = self.tune(call, choice.graph, known=choice)  # time it now
                self.choices[self.choices.index(choice)] = kept[k]
                return kept[k]
        donor = next((c for key, cs in self.memory.items() if key[:3] == call.key[:3] for c in cs if same(c)), None)
        choice = self.tune(call, graph_of() if donor is None else donor.graph, donor=donor)
        kept.append(choice)
        self.choices.append(choice)
        return choice

    def _under_trace(self, args, nums):
        """The Jacobian at tracers: one sample's choice (at :attr:`batch`), and under
        ``jax.vmap`` the choice at the vmap's batch size, told (with the batched values,
        concrete in an eager vmap) by a ``custom_vmap`` rule. ``custom_jvp`` around it keeps
        reverse mode, which ``custom_vmap`` lacks."""
        picked = []

        def sample(*a):
            picked.append((self.choose(a, nums), interpreter._abstract(a)))
            return picked[-1][0].fn(*a)

        batched = custom_vmap(sample)

        @batched.def_vmap
        def rule(size, in_batched, *xs):
            choice, abstract = picked[-1]
            axes = tuple(jax.tree_util.tree_map(lambda b: 0 if b else None, ib) for ib in in_batched)
            call = _Call(tuple(xs), abstract, nums, _traced(xs), int(size), axes)
            fingerprint = choice.graph.fingerprint
            mine = self._choose(call, lambda c: c.graph.fingerprint == fingerprint, lambda: choice.graph)
            out = jax.vmap(mine.fn, in_axes=axes)(*xs)
            return out, jax.tree_util.tree_map(lambda _: True, out)

        outer = jax.custom_jvp(lambda *a: batched(*a))
        outer.defjvp(lambda primals, tangents: jax.jvp(sample, primals, tangents))
        return outer(*args)

    def tune(self, call: _Call, graph: Graph, known=None, donor=None) -> Choice:
        """Searches (or reads the disk cache, or takes the order of an untimed choice
        ``known`` of this call, or of a choice ``donor`` at another batch), times unless
        ``call.traced``, and keeps the choice."""
        canon = canonical(graph)
        key = order_cache.key(canon.hash, call.spec, order_cache.device_name())
        folder = order_cache.directory() if self.cache else None
        entry = None if known is not None else _fitting(order_cache.load(folder, key), graph, canon, folder)
        search = known is None and donor is None and (entry is None or self.refine or self.explicit
                                                      or self.start is not None)
        if entry is not None:
            cached = _Found([canon.from_labels(entry.order)], [entry.cost], 0.0, "from the cache")
            if not search and (entry.timed or call.traced):  # at once: nothing to search or time
                return self._keep(self._choice(graph, call, entry.choice if entry.timed else "order", cached,
                                               dict(entry.times), "; chosen and timed in an earlier run"
                                               if entry.timed else ""))
        pool = concurrent.futures.ThreadPoolExecutor(len(JAX_CANDIDATES) + self.settings.candidates)
        try:
            searcher = _Search(graph, self.budget, self.settings, self._starts(graph, entry, folder)) if search else None
            jax_fns = {} if call.traced else self._jax_candidates(call, pool)  # compiling while the search runs
            if known is not None or (donor is not None and (entry is None or donor.cost < entry.cost)):
                source = known or donor
                found = _Found([list(source.order)], [source.cost], 0.0,
                               known.how if known is not None else f"the order found for {donor.spec}")
            elif search:
                found = searcher.run(lambda: self._multiplication_s(jax_fns, call, graph))
            else:
                found = cached
            improved = entry is None or found.costs[0] < entry.cost
            if not improved and search:
                found = dataclasses.replace(cached, seconds=found.seconds,
                                            how=f"{found.how}: nothing cheaper than the cached order")
            if not improved and entry.timed:
                choice = self._choice(graph, call, entry.choice, found, dict(entry.times),
                                      "; chosen and timed in an earlier run")
            elif call.traced:
                choice = self._choice(graph, call, "order", found, {}, "")
            else:
                choice = self._timed_choice(graph, call, found, jax_fns, pool)
        finally:
            pool.shutdown(wait=False, cancel_futures=True)
        if folder is not None and (improved or (choice.timed and not entry.timed)):
            # a refined order replaces the entry only if cheaper than the one kept meanwhile
            if order_cache.store(folder, self._entry(key, canon, call.spec, choice, found, entry),
                                 only_if_cheaper=improved and entry is not None):
                choice = dataclasses.replace(choice, how=f"{choice.how}; kept in {folder}")
        return self._keep(choice)

    def _keep(self, choice: Choice) -> Choice:
        """``choice``, said to the ``alphagrad`` logger (at INFO)."""
        if logger.isEnabledFor(logging.INFO):
            logger.info("alphagrad.jacobian(%s) %s", getattr(self.f, "__name__", "f"), choice.explain())
        return choice

    # ---------------------------------------------------------------- candidates
    def _order_fn(self, graph: Graph, order) -> Callable:
        """The Jacobian in ``order``, jitted (it then compiles ahead of time), except for a
        large graph's chunks and argument-dependent branches, which jit themselves."""
        fn = interpreter.jacobian(self.f, list(order), self.argnums, self.has_aux)
        own = len(graph.intermediates) > interpreter.CHUNK_ABOVE or any(b.on_arguments for b in graph.branches)
        return fn if own else jax.jit(fn)

    def _jax_fn(self, name: str) -> Callable:
        make = jax.jacfwd if name == "jax.jacfwd" else jax.jacrev
        return jax.jit(make(self.f, argnums=self.argnums, has_aux=self.has_aux))

    def _jax_candidates(self, call: _Call, pool) -> dict:
        """``jax.jacfwd`` and ``jax.jacrev`` as timed at ``call``, compiling on ``pool``
        (name -> (function, future))."""
        fns = {name: call.timed(self._jax_fn(name)) for name in JAX_CANDIDATES}
        return {name: (fn, pool.submit(_compile, fn, call.at)) for name, fn in fns.items()}

    def _multiplication_s(self, jax_fns, call: _Call, graph) -> tuple[float, str]:
        """What a multiplication saved is worth in seconds of one call, for ``"rate:R"``:
        ``jax.jacrev``'s measured time per multiplication of the reverse order (and sample)."""
        rev = max(cost_of(graph, "rev"), 1) * (call.batch or 1)
        if "jax.jacrev" not in jax_fns or jax_fns["jax.jacrev"][1].exception() is not None:
            return self.settings.multiplication_s, f"{self.settings.multiplication_s:g} s a multiplication (assumed)"
        seconds = time_candidates({"jax.jacrev": jax_fns["jax.jacrev"][0]}, call.at, self.settings)["jax.jacrev"]
        return seconds / rev, f"jax.jacrev's {_us(seconds)} / {rev} multiplications"

    def _starts(self, graph: Graph, entry, folder) -> dict:
        """The search's start orders by name: the user's ``start``, and the cached order
        (the search then continues from these alone) or else the classic orders and
        orders kept for this graph at other specs, batches or devices (``alphagrad cache
        import`` brings them from elsewhere)."""
        starts = {} if self.start is None else {"your start": resolve_order(graph, self.start)}
        canon = canonical(graph)
        if entry is not None:
            return {**starts, "the cached order": canon.from_labels(entry.order)}
        starts.update(orders.classic(graph))
        for e in order_cache.related(folder, canon.hash):
            with contextlib.suppress(ValueError, TypeError):  # one that does not fit is no start
                starts[f"an order kept for {e.spec} on {e.device}"] = graph.check_order(canon.from_labels(e.order))
        return starts

    def _choice(self, graph, call: _Call, name, found, times, note, k=0) -> Choice:
        """The choice of ``name`` with the ``k``-th order of ``found`` (per sample)."""
        fn = self._order_fn(graph, found.orders[k]) if name.startswith("order") else self._jax_fn(name)
        return Choice(call.spec, name, tuple(found.orders[k]), found.costs[k], times, found.how + note, fn, graph,
                      call.batch)

    def _timed_choice(self, graph, call: _Call, found, jax_fns, pool) -> Choice:
        """Compiles the cheapest orders (``"order"``, ``"order #2"``, ...; JAX's are
        already compiling), times every candidate that compiled at ``call`` and keeps the
        fastest (:func:`verdict`)."""
        picked = [k for k, c in enumerate(found.costs) if c <= self.settings.within * found.costs[0]]
        picked = picked[:self.settings.candidates]
        mine = {("order" if k == 0 else f"order #{k + 1}"): (call.timed(self._order_fn(graph, found.orders[k])), k)
                for k in picked}
        futures = {name: pool.submit(_compile, fn, call.at) for name, (fn, _) in mine.items()}
        futures.update({name: fut for name, (_, fut) in jax_fns.items()})
        fns = {name: fn for name, (fn, _) in {**mine, **jax_fns}.items()}
        failed = {name: fut.exception() for name, fut in futures.items() if fut.exception() is not None}
        if "order" in failed and (call.batch is None or len(failed) == len(fns)):
            raise failed["order"]  # the user's function or the interpreter: JAX would fail as well
        samples = sample_candidates({n: fn for n, fn in fns.items() if n not in failed}, call.at, self.settings)
        fastest, tie = verdict(samples, self.settings)
        times = {n: statistics.median(s) for n, s in samples.items() if s}
        note = tie + "".join(f"; {n} failed ({type(e).__name__}: {e})" for n, e in failed.items())
        choice = self._choice(graph, call, fastest, found, times, note, mine[fastest][1] if fastest in mine else 0)
        return choice if call.batch is not None else dataclasses.replace(choice, fn=fns[fastest])  # the compiled one

    def _entry(self, key, canon, spec, choice, found, old) -> order_cache.Entry:
        return order_cache.Entry(
            key=key, graph=canon.hash, spec=spec, device=order_cache.device_name(),
            order=tuple(canon.to_labels(choice.order)), cost=choice.cost,
            choice="order" if choice.name.startswith("order") else choice.name,
            times=dict(choice.times), search_s=found.seconds + (old.search_s if old is not None else 0.0),
            function=getattr(self.f, "__qualname__", ""), versions=f"jax {jax.__version__}")


def _compile(fn, args) -> None:
    """Compiles ``fn`` at ``args`` (a jitted function ahead of time; the chunks of a large
    graph by calling it)."""
    if hasattr(fn, "lower"):
        fn.lower(*args).compile()
    else:
        jax.block_until_ready(fn(*args))


def _fitting(entry, graph: Graph, canon, folder):
    """``entry`` if its order fits ``graph``; else None, with a warning."""
    if entry is None:
        return None
    try:
        if entry.graph != canon.hash:
            raise ValueError(f"it was stored for graph {entry.graph}, this one is {canon.hash}")
        graph.check_order(canon.from_labels(entry.order))
    except (ValueError, TypeError) as e:
        warnings.warn(f"alphagrad order cache: the order kept in {folder} for key {entry.key} does not fit "
                      f"this graph ({e}); ignoring it and searching again", stacklevel=5)
        return None
    return entry


@dataclasses.dataclass(frozen=True)
class _Found:
    orders: list  # distinct orders, the cheapest first
    costs: list  # their multiplications
    seconds: float  # of search
    how: str


class _Search:
    """One search under a :class:`Budget` from ``starts`` (name -> order)."""

    def __init__(self, graph, budget, settings, starts: dict):
        self.graph, self.budget, self.s = graph, budget, settings
        self.starts = list(starts.values())
        self.from_where = " from " + ", ".join(starts)

    def run(self, multiplication_s) -> _Found:
        """The orders found (``multiplication_s() -> (seconds, why)``: the value of a
        multiplication saved per call, asked only by a rate rule)."""
        t = time.perf_counter()
        n = len(self.graph.intermediates)
        if n <= self.s.exact_limit:
            best = orders.optimal(self.graph, max_intermediates=self.s.exact_limit) if n else []
            return self.found([best], t, f"the optimum ({n} intermediates: exact search)")
        if self.budget.rule == "seconds" and self.budget.value == 0:
            return self.found([], t, "no search (budget 0): the cheapest of" + self.from_where[5:])
        if self.budget.rule == "seconds":
            best = anneal(self.graph, self.budget.value, self.s.seed, start=self.starts)
            return self.found([best], t, f"annealed for {self.budget.value:g} s{self.from_where}")
        if self.budget.rule == "patience":
            return self.patience(self.starts, t)
        return self.rate(self.starts, t, *multiplication_s())

    def found(self, searched, t, how) -> _Found:
        costs = {tuple(o): cost_of(self.graph, o) for o in searched + self.starts}
        ranked = sorted(costs, key=costs.__getitem__)
        return _Found([list(o) for o in ranked], [costs[o] for o in ranked], time.perf_counter() - t, how)

    def patience(self, start, t) -> _Found:
        moves = max(200, self.s.round_moves * len(self.graph.intermediates))
        best = anneal(self.graph, seed=self.s.seed, iterations=moves, start=start)
        best_cost, quiet, rounds = cost_of(self.graph, best), 0, 1
        while quiet < self.budget.value and time.perf_counter() - t < self.s.max_search_s:
            order = anneal(self.graph, seed=(self.s.seed + rounds) % 2**32, iterations=moves, start=best)
            rounds += 1
            c = cost_of(self.graph, order)
            quiet = 0 if c < best_cost else quiet + 1
            if c < best_cost:
                best, best_cost = order, c
        return self.found([best], t, f"annealed in {rounds} rounds of {moves} moves until "
                                     f"{self.budget.value:g} found nothing cheaper{self.from_where}")

    def rate(self, start, t, per_mult, why) -> _Found:
        calls = self.budget.value
        best = None
        best_cost = min(cost_of(self.graph, o) for o in start)
        round_s, rounds = self.s.round_s, 0
        while time.perf_counter() - t < self.s.max_search_s:
            order = anneal(self.graph, round_s, (self.s.seed + rounds) % 2**32, start=start if best is None else best)
            rounds += 1
            c = cost_of(self.graph, order)
            saved_s = (best_cost - c) * per_mult * calls  # what this round saves over the calls
            if best is None or c < best_cost:
                best, best_cost = order, min(c, best_cost)
            round_s *= 2
            if saved_s < round_s:  # the next round would cost more than this one saved
                break
        return self.found([best], t, f"annealed in {rounds} rounds until a round saved less than it cost "
                                     f"({calls:g} calls x {why}){self.from_where}")


def jacobian(f: Callable, order: Any = "auto", argnums=0, has_aux: bool = False, *, budget=None,
             refine: bool = False, cache: bool = True, start=None, settings: AutoSettings | None = None,
             batch: int | None = None):
    """The Jacobian of ``f``, as ``jax.jacrev(f, argnums, has_aux)`` lays it out.

    Args:
      f: a JAX function (pytrees of float arrays in and out).
      order: ``"auto"`` (default): choose per argument shapes between ``jax.jacfwd``,
        ``jax.jacrev`` and the cheapest elimination orders found, by timing them on this
        device (see :mod:`alphagrad.autotune`); or an order
        (``"fwd"``, ``"rev"``, ``"markowitz"``, vertex ids, a result with ``.order``),
        computed as given by :func:`alphagrad.interpreter.jacobian`.
      argnums, has_aux: as for ``jax.jacrev``.
      budget: the search's stopping rule (:func:`parse_budget`): seconds (default
        ``AutoSettings.budget_s``), ``"rate:R"`` or ``"patience:N"``. Given on a later
        call (a new ``jacobian``), it continues from the cached order.
      refine: continue the search from the cached order (under ``budget``); the result
        is kept only if cheaper.
      cache: read and write the disk cache (:mod:`alphagrad.order_cache`).
      start: an order of your own (anything ``order`` accepts but ``"auto"``) to start
        the search from, beside the cached one or the classic ones; checked at the first
        call against the graph.
      settings: :class:`AutoSettings`.
      batch: the ``jax.vmap`` batch size you will run the Jacobian at (an int >= 1), or
        None: a call outside a trace then times the candidates as
        ``jax.jit(jax.vmap(candidate))`` on its arguments repeated ``batch`` times, and
        the choice (in memory and on disk) is kept for that batch. Under ``jax.vmap`` the
        batch size is read from the vmap itself; this says which to tune for before.

    Returns:
      With ``order="auto"``, an :class:`AutoJacobian` (call it as ``jax.jacrev(f)``;
      ``.explain()`` says what it chose); else what ``interpreter.jacobian`` returns.

    Raises:
      TypeError, ValueError: a bad argument (a negative or NaN budget, an unknown rule, a
        batch that is not an int >= 1, auto-only arguments with an explicit order), before
        any work.
    """
    if not (isinstance(order, str) and order == "auto"):
        if (budget is not None or refine is not False or cache is not True or start is not None or settings is not None
                or batch is not None):
            raise TypeError("budget, refine, cache, start, settings and batch apply to order='auto' only: an "
                            f"explicit order ({order!r}) is computed as given")
        return interpreter.jacobian(f, order, argnums, has_aux)
    if not callable(f):
        raise TypeError(f"f must be a function, not {type(f).__name__}")
    if not (isinstance(argnums, int) or (isinstance(argnums, (tuple, list)) and argnums
                                         and all(isinstance(n, int) for n in argnums))):
        raise TypeError(f"argnums must be an int or a non-empty tuple of ints, not {argnums!r}")
    for name, value in (("has_aux", has_aux), ("refine", refine), ("cache", cache)):
        if not isinstance(value, (bool, np.bool_)):
            raise TypeError(f"{name} must be True or False, not {value!r}")
    if isinstance(start, str):
        orders.by_name(start)  # an unknown name fails here
    elif isinstance(start, (set, frozenset, dict)):
        raise TypeError(f"start is an order (a sequence of vertex ids or a name), not a {type(start).__name__}")
    batch = check_batch(batch)
    settings = AutoSettings() if settings is None else settings
    if not isinstance(settings, AutoSettings):
        raise TypeError(f"settings must be an AutoSettings, not {type(settings).__name__}")
    return AutoJacobian(f, argnums, bool(has_aux), budget, bool(refine), bool(cache), start, settings, batch)
