"""``alphagrad.jacobian(f)`` with no order: a drop-in for ``jax.jacrev`` that chooses.

Per argument shapes and dtypes (and branch path), the first call traces ``f``, finds a
cheap elimination order (the optimum of a graph of at most
:attr:`AutoSettings.exact_limit` intermediates; else annealing from forward, reverse and
Markowitz under the ``budget`` rule, :func:`parse_budget`), then compiles the cheapest
orders found together with ``jax.jacfwd`` and ``jax.jacrev`` (side by side, JAX's two
while the search runs) and times each at the call's arguments (:func:`time_candidates`:
round robin, medians). The fastest computes the Jacobian, so auto is never slower than
JAX's best as measured. ``.explain()`` says what was chosen and the times; the
``alphagrad`` logger says it at level INFO.

The choice is kept in memory and, keyed by the graph's canonical form, the shapes and
the device, on disk (:mod:`alphagrad.order_cache`): a new process reuses it at once. A
later ``budget=`` or ``refine=True`` continues the search from the kept order and keeps
the result only if cheaper; ``start=`` adds an order of the user's as a start.

Inside ``jax.jit``/``jax.vmap`` (tracers: nothing can be timed) the kept choice is used;
without one, the cheapest order found, untimed (``.explain()`` says so); a later call
outside a trace times it.
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

from alphagrad import interpreter, order_cache, orders
from alphagrad.anneal import AnnealSettings, anneal
from alphagrad.canonical import canonical
from alphagrad.checks import check_int
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
    #: Timed rounds (round robin over the candidates; the median counts).
    repeats: int = 5
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
                     "max_search_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) or value < 0:
                raise ValueError(f"AutoSettings.{name} must be a finite number >= 0, got {value!r}")
        for name, low in (("exact_limit", 0), ("candidates", 1), ("repeats", 1), ("round_moves", 1), ("seed", 0)):
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
      spec: the argument shapes and dtypes and the arguments differentiated.
      name: what was chosen: ``"jax.jacfwd"``, ``"jax.jacrev"`` or an order (``"order"``
        for the cheapest found, ``"order #2"`` for the next that was timed, ...).
      order: the cheapest order found (the one timed and chosen, where an order was).
      cost: its multiplications.
      times: seconds per call of each candidate timed (empty: chosen untimed).
      how: how the order was found, and where the choice came from.
      fn: the function that computes the Jacobian.
      graph: the traced graph.
    """

    spec: str
    name: str
    order: tuple
    cost: int
    times: dict
    how: str
    fn: Callable = dataclasses.field(repr=False)
    graph: Graph = dataclasses.field(repr=False)

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
        else:
            lines.append("  not timed: chosen inside a jax trace (jit/vmap) by its cost; a call outside a "
                         "trace times it against jax.jacfwd and jax.jacrev")
        lines.append(f"  order: {self.cost} multiplications (forward {self.baselines['forward']}, reverse "
                     f"{self.baselines['reverse']}, Markowitz {self.baselines['markowitz']}); {self.how}")
        return "\n".join(lines)


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:.1f} us" if seconds < 1e-3 else f"{seconds * 1e3:.2f} ms"


def time_candidates(fns: dict, args, settings: AutoSettings) -> dict:
    """Median seconds per call of each compiled function in ``fns`` (name -> function)
    at ``args``, round robin over ``settings.repeats`` rounds (``block_until_ready``;
    a sample repeats a fast call for ``sample_s``). A candidate ``drop`` times slower
    than the fastest after a round is timed no more; timing ends after ``timing_s``
    (after one round)."""
    per_call = {}
    for name, fn in fns.items():  # the warm-up call also sizes the samples
        t = time.perf_counter()
        jax.block_until_ready(fn(*args))
        per_call[name] = max(time.perf_counter() - t, 1e-9)
    calls = {name: max(1, min(1000, math.ceil(settings.sample_s / t))) for name, t in per_call.items()}
    samples: dict = {name: [] for name in fns}
    active = list(fns)
    t_start = time.perf_counter()
    for _ in range(settings.repeats):
        for name in active:
            fn, n = fns[name], calls[name]
            t = time.perf_counter()
            for _ in range(n):
                out = fn(*args)
            jax.block_until_ready(out)
            samples[name].append((time.perf_counter() - t) / n)
        best = min(statistics.median(samples[n]) for n in active)
        active = [n for n in active if statistics.median(samples[n]) <= settings.drop * best]
        if time.perf_counter() - t_start > settings.timing_s:
            break
    return {name: statistics.median(s) for name, s in samples.items()}


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


class AutoJacobian:
    """The function :func:`jacobian` returns for ``order="auto"``: ``jax.jacrev``'s
    signature and output layout, choosing per argument spec (see the module docstring).

    Attributes:
      choices: every :class:`Choice` made so far, one per argument spec (and branch path).
    """

    def __init__(self, f, argnums, has_aux, budget, refine, cache, start, settings):
        functools.update_wrapper(self, f)
        self.f, self.argnums, self.has_aux = f, argnums if isinstance(argnums, int) else tuple(argnums), has_aux
        self.main = (lambda *a: f(*a)[0]) if has_aux else f
        self.budget, self.explicit = parse_budget(budget, settings), budget is not None
        self.refine, self.cache, self.start, self.settings = refine, cache, start, settings
        self.memory: dict = {}
        self.choices: list = []

    def __call__(self, *args):
        nums = _check_call(args, self.argnums)
        return self.choose(args, nums).fn(*args)

    def explain(self) -> str:
        """What was chosen at each argument spec so far, with the measured times."""
        name = getattr(self.f, "__name__", "f")
        if not self.choices:
            return (f"alphagrad.jacobian({name}): not called yet; the first call at each argument shapes "
                    f"chooses between jax.jacfwd, jax.jacrev and alphagrad orders (budget {self.budget})")
        return "\n".join([f"alphagrad.jacobian({name}) on {order_cache.device_name()}:"]
                         + [c.explain() for c in self.choices])

    def choose(self, args, nums) -> Choice:
        """The choice for these arguments: kept in memory, else made (:meth:`tune`)."""
        abstract = interpreter._abstract(args)
        leaves, tree = jax.tree_util.tree_flatten(abstract)
        key = (tree, tuple((l.shape, str(l.dtype)) for l in leaves), nums)
        values = jax.tree_util.tree_leaves(args)
        traced = any(isinstance(v, jax.core.Tracer) for v in values)
        kept = self.memory.setdefault(key, [])
        for k, choice in enumerate(kept):
            if interpreter._takes_same_branches(choice.graph, values):
                if choice.timed or traced:
                    return choice
                kept[k] = self.tune(args, abstract, nums, False, choice.graph, known=choice)  # time it now
                self.choices[self.choices.index(choice)] = kept[k]
                return kept[k]
        choice = self.tune(args, abstract, nums, traced, interpreter._graph_at(self.main, args))
        kept.append(choice)
        self.choices.append(choice)
        return choice

    def tune(self, args, abstract, nums, traced, graph, known=None) -> Choice:
        """Searches (or reads the disk cache, or takes the order of an untimed choice
        ``known``), times unless ``traced``, and keeps the choice."""
        canon = canonical(graph)
        spec = order_cache.spec_of(abstract, nums)
        key = order_cache.key(canon.hash, spec, order_cache.device_name())
        folder = order_cache.directory() if self.cache else None
        entry = None if known is not None else _fitting(order_cache.load(folder, key), graph, canon, folder)
        search = known is None and (entry is None or self.refine or self.explicit or self.start is not None)
        if entry is not None:
            cached = _Found([canon.from_labels(entry.order)], [entry.cost], 0.0, "from the cache")
            if not search and (entry.timed or traced):  # at once: nothing to search or time
                return self._keep(self._choice(graph, spec, entry.choice if entry.timed else "order", cached,
                                               dict(entry.times), "; chosen and timed in an earlier run"
                                               if entry.timed else ""))
        pool = concurrent.futures.ThreadPoolExecutor(len(JAX_CANDIDATES) + self.settings.candidates)
        try:
            searcher = _Search(graph, self.budget, self.settings, self._starts(graph, entry, folder)) if search else None
            jax_fns = {} if traced else self._jax_candidates(args, pool)  # compiling while the search runs
            if known is not None:
                found = _Found([list(known.order)], [known.cost], 0.0, known.how)
            elif search:
                found = searcher.run(lambda: self._multiplication_s(jax_fns, args, graph))
            else:
                found = cached
            improved = entry is None or found.costs[0] < entry.cost
            if not improved and search:
                found = dataclasses.replace(cached, seconds=found.seconds,
                                            how=f"{found.how}: nothing cheaper than the cached order")
            if not improved and entry.timed:
                choice = self._choice(graph, spec, entry.choice, found, dict(entry.times),
                                      "; chosen and timed in an earlier run")
            elif traced:
                choice = self._choice(graph, spec, "order", found, {}, "")
            else:
                choice = self._timed_choice(graph, spec, found, jax_fns, args, pool)
        finally:
            pool.shutdown(wait=False, cancel_futures=True)
        if folder is not None and (improved or (choice.timed and not entry.timed)):
            # a refined order replaces the entry only if cheaper than the one kept meanwhile
            if order_cache.store(folder, self._entry(key, canon, spec, choice, found, entry),
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

    def _jax_candidates(self, args, pool) -> dict:
        """``jax.jacfwd`` and ``jax.jacrev``, jitted, compiling on ``pool`` (name ->
        (function, future))."""
        fns = {name: self._jax_fn(name) for name in JAX_CANDIDATES}
        return {name: (fn, pool.submit(_compile, fn, args)) for name, fn in fns.items()}

    def _multiplication_s(self, jax_fns, args, graph) -> tuple[float, str]:
        """What a multiplication saved is worth in seconds of one call, for ``"rate:R"``:
        ``jax.jacrev``'s measured time per multiplication of the reverse order."""
        rev = max(cost_of(graph, "rev"), 1)
        if "jax.jacrev" not in jax_fns or jax_fns["jax.jacrev"][1].exception() is not None:
            return self.settings.multiplication_s, f"{self.settings.multiplication_s:g} s a multiplication (assumed)"
        seconds = time_candidates({"jax.jacrev": jax_fns["jax.jacrev"][0]}, args, self.settings)["jax.jacrev"]
        return seconds / rev, f"jax.jacrev's {_us(seconds)} / {rev} multiplications"

    def _starts(self, graph: Graph, entry, folder) -> dict:
        """The search's start orders by name: the user's ``start``, and the cached order
        (the search then continues from these alone) or else the classic orders and
        orders kept for this graph at other specs or devices (``alphagrad cache import``
        brings them from elsewhere)."""
        starts = {} if self.start is None else {"your start": resolve_order(graph, self.start)}
        canon = canonical(graph)
        if entry is not None:
            return {**starts, "the cached order": canon.from_labels(entry.order)}
        starts.update(orders.classic(graph))
        for e in order_cache.related(folder, canon.hash):
            with contextlib.suppress(ValueError, TypeError):  # one that does not fit is no start
                starts[f"an order kept for {e.spec} on {e.device}"] = graph.check_order(canon.from_labels(e.order))
        return starts

    def _choice(self, graph, spec, name, found, times, note, k=0) -> Choice:
        """The choice of ``name`` with the ``k``-th order of ``found``."""
        fn = self._order_fn(graph, found.orders[k]) if name.startswith("order") else self._jax_fn(name)
        return Choice(spec, name, tuple(found.orders[k]), found.costs[k], times, found.how + note, fn, graph)

    def _timed_choice(self, graph, spec, found, jax_fns, args, pool) -> Choice:
        """Compiles the cheapest orders (``"order"``, ``"order #2"``, ...; JAX's are
        already compiling), times every candidate that compiled and keeps the fastest."""
        picked = [k for k, c in enumerate(found.costs) if c <= self.settings.within * found.costs[0]]
        picked = picked[:self.settings.candidates]
        mine = {("order" if k == 0 else f"order #{k + 1}"): (self._order_fn(graph, found.orders[k]), k) for k in picked}
        futures = {name: pool.submit(_compile, fn, args) for name, (fn, _) in mine.items()}
        futures.update({name: fut for name, (_, fut) in jax_fns.items()})
        fns = {name: fn for name, (fn, _) in {**mine, **jax_fns}.items()}
        failed = {name: fut.exception() for name, fut in futures.items() if fut.exception() is not None}
        if "order" in failed:  # the user's function or the interpreter: JAX would fail as well
            raise failed["order"]
        times = time_candidates({n: fn for n, fn in fns.items() if n not in failed}, args, self.settings)
        fastest = min(times, key=times.__getitem__)
        note = "".join(f"; {n} failed ({type(e).__name__}: {e})" for n, e in failed.items())
        choice = self._choice(graph, spec, fastest, found, times, note, mine[fastest][1] if fastest in mine else 0)
        return dataclasses.replace(choice, fn=fns[fastest])  # the compiled one

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
             refine: bool = False, cache: bool = True, start=None, settings: AutoSettings | None = None):
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

    Returns:
      With ``order="auto"``, an :class:`AutoJacobian` (call it as ``jax.jacrev(f)``;
      ``.explain()`` says what it chose); else what ``interpreter.jacobian`` returns.

    Raises:
      TypeError, ValueError: a bad argument (a negative or NaN budget, an unknown rule,
        auto-only arguments with an explicit order), before any work.
    """
    if not (isinstance(order, str) and order == "auto"):
        if budget is not None or refine is not False or cache is not True or start is not None or settings is not None:
            raise TypeError("budget, refine, cache, start and settings apply to order='auto' only: an explicit "
                            f"order ({order!r}) is computed as given")
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
    settings = AutoSettings() if settings is None else settings
    if not isinstance(settings, AutoSettings):
        raise TypeError(f"settings must be an AutoSettings, not {type(settings).__name__}")
    return AutoJacobian(f, argnums, bool(has_aux), budget, bool(refine), bool(cache), start, settings)
