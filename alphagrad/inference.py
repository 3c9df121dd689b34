"""The budgeted schedule that turns a network into an order (:meth:`Agent.order`).

Within ``budget_s`` seconds of wall time (one-time work reported apart, as
``compile_seconds``: the first call in a process runs every compiled kernel once on a
small chain, see :func:`compile_kernels`, and the first call on a graph builds its rule
tables, :func:`alphagrad.rules.tables`, kept for later calls):

1. forward, reverse and Markowitz are scored (the result is never worse than them); a
   graph of at most :data:`alphagrad.baselines.EXACT_LIMIT` intermediates gets the proven
   optimum at once;
2. the network plays its greedy order and then sampled orders
   (:class:`alphagrad.policy.Player`: one encoder pass, then compiled rollouts; sampling
   for at most ``sample_fraction`` of the budget, and only until annealing has found an
   order cheaper than every order the network played) on a thread of its own, beside step 4:
   the rollout runs on one core, and played first it would leave every other core idle
   (0.2-0.4 s of a 1 s budget on graphs of about 2,000 intermediates);
3. the rest of the network's cheapest order after its opening (its first ``opening``
   share of moves, kept) is annealed for ``opening_share`` of the time left: a smaller
   search space; off by default (``opening`` 0), since ``python -m eval.bench_schedule``
   measures it no better at 5 s and worse at 1 s, where annealing needs the time (with it
   on, the network plays first);
4. the three baselines are each descended and annealed whole
   (:func:`alphagrad.baselines.anneal`) for the rest of the budget, as annealing alone
   does. The network's order is not a start: on large graphs the starts lie in basins
   of very different depth, and a network's order that is cheaper than the baselines'
   but in a shallower basin would take a baseline's chain (on NeuralCA_Conv at 1 s it
   took forward's, the only start that reaches the deep basin: 0.973 x the best
   baseline instead of annealing's 0.36). It is a late start instead
   (``late_start``): when it arrives clearly cheaper than every chain's best order so
   far (:data:`alphagrad.baselines.LATE_MARGIN`), the chain whose best is dearest
   anneals on from it (annealing is then behind the network, as at 1 s on graphs of
   about 2,000 intermediates).

``OrderResult.history`` records each improvement with the stage that found it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import threading
import time

from alphagrad import baselines, rules
from alphagrad.evaluator import Evaluator
from alphagrad.graph import Graph


@dataclasses.dataclass(frozen=True)
class InferenceSettings:
    """Settings of the schedule.

    Attributes:
      samples: sampled orders at most (after the greedy one).
      temperature: the sampling temperature of the policy's logits. At 0.2 the cheapest of
        32 samples is cheaper than at 1 on every held-out group (`python -m
        eval.bench_sampling`: 0.845 vs 0.883 x the best baseline on data/heldout-large's 94
        large graphs, 0.901 vs 0.913 on the published tasks); at 1 a game of hundreds of
        moves drifts far from the greedy one.
      sample_fraction: the share of the budget sampling may use.
      opening: the share of the network's order kept while the rest is annealed (0: no
        such stage).
      opening_share: the share of the annealing time spent after the opening.
      anneal: anneal for the rest of the budget.
      late_start: hand the network's orders to annealing as they arrive (a late start,
        ``baselines.anneal(late=...)``: the chain whose best order is dearest takes one
        that costs less than :data:`alphagrad.baselines.LATE_MARGIN` of every chain's
        best); otherwise they only compete with annealing's result.
    """

    samples: int = 32
    temperature: float = 0.2
    sample_fraction: float = 0.1
    opening: float = 0.0
    opening_share: float = 0.5
    anneal: bool = True
    late_start: bool = True

    def __post_init__(self):
        import math

        if isinstance(self.samples, bool) or not isinstance(self.samples, int) or self.samples < 0:
            raise ValueError(f"samples = {self.samples!r} must be an integer >= 0")
        if not isinstance(self.temperature, (int, float)) or not math.isfinite(self.temperature) \
                or self.temperature <= 0:
            raise ValueError(f"temperature = {self.temperature!r} must be a finite number > 0")
        for name in ("anneal", "late_start"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} = {getattr(self, name)!r} must be True or False")
        for name in ("sample_fraction", "opening", "opening_share"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
                raise ValueError(f"{name} = {value!r} must be a number in [0, 1]")


@dataclasses.dataclass
class OrderResult:
    """An elimination order found by :meth:`Agent.order`.

    Attributes:
      order: intermediate vertex ids in elimination order (pass the result itself to
        :func:`alphagrad.jacobian`).
      cost: its multiplications (``exact`` convention, what the interpreter executes).
      baselines: costs of ``forward``, ``reverse`` and ``markowitz`` on the same graph.
      method: the stage that found the order (``network greedy``, ``network sampled``,
        ``anneal``, ``anneal from the network's order`` (a late start), ``anneal after
        the network's opening``, ``optimal`` or a baseline's name).
      network_cost: the cheapest order the network played (None if it did not play).
      seconds: wall time spent, one-time work excluded.
      compile_seconds: one-time work in this call: compiling the kernels (once per
        process) and the graph's rule tables (once per graph); 0 when both were done.
      history: ``(seconds, cost, stage)`` each time the best improved.
      fingerprint: the graph's fingerprint (orders are checked against it).
    """

    order: list
    cost: int
    baselines: dict
    method: str
    network_cost: int | None
    seconds: float
    compile_seconds: float
    history: list
    fingerprint: str

    @property
    def best_baseline(self) -> int:
        return min(self.baselines.values())

    @property
    def savings(self) -> float:
        """Fraction of the best baseline's multiplications saved (0.2: 20% fewer)."""
        return 1.0 - self.cost / self.best_baseline if self.best_baseline else 0.0

    def __str__(self) -> str:
        rows = [f"order ({len(self.order)} vertices, found by {self.method}): {self.order}",
                f"multiplications: {self.cost:,}"]
        rows += [f"  {name:<9} {c:>14,}  ({self.cost / c:.3f}x)" if c else f"  {name:<9} {c:>14,}"
                 for name, c in self.baselines.items()]
        net = "" if self.network_cost is None else f" (network alone {self.network_cost:,})"
        rows.append(f"savings vs the best baseline: {100 * self.savings:.1f}%{net}; {self.seconds:.1f} s "
                    f"+ {self.compile_seconds:.1f} s compiling")
        return "\n".join(rows)


#: What :func:`compile_kernels` has compiled in this process ("search", "network").
_COMPILED: set = set()


def _chain() -> Graph:
    """A chain of 12 scalar intermediates: more than ``baselines.EXACT_LIMIT``, so that
    annealing runs its kernel rather than the exact search."""
    import jax.numpy as jnp

    from alphagrad.trace import trace

    def f(x):
        for _ in range(6):
            x = jnp.sin(x) * x
        return x

    return trace(f, jnp.float32(0.5))


def compile_kernels(make_player=None, note: bool = False) -> float:
    """Runs each compiled kernel of the schedule once on a small chain (with
    ``make_player``, also the network's features and rollout, played with zero embeddings
    by ``make_player(graph, scale, ev, encode=False)``: the encoder compiles per graph
    size, in :class:`alphagrad.policy.Player`): numba compiles them the first time on a
    machine (seconds; then it loads them from its disk cache), so that a budget measures
    search, not compilation. Once per process (``note``: say so on stderr); returns the
    seconds spent (0 when already done)."""
    todo = {"search"} | ({"network"} if make_player is not None else set())
    if todo <= _COMPILED:
        return 0.0
    if note:
        print("alphagrad order: compiling kernels (once per process; the first time on a machine "
              "takes longer, then numba's disk cache serves them)", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    import numpy as np

    graph = _chain()
    ev = Evaluator(graph, "exact")
    order = np.asarray(ev.markowitz(), np.int64)
    ev.optimal()
    for prefix in (None, order[:4]):
        rest = order if prefix is None else order[4:].copy()
        ev.anneal(rest.copy(), rest.copy(), 64, 1.0, 0.1, 0, prefix=prefix)
        ev.descend(rest.copy(), prefix=prefix)
    if make_player is not None:
        player = make_player(graph, max(ev.cost(order), 1), ev, encode=False)
        if player is not None:
            player.play()
            player.play(1.0, 0)
    _COMPILED.update(todo)
    return time.perf_counter() - t0


def sample_seed(seed: int, k: int) -> int:
    """The seed of the ``k``-th order the network samples in a call with ``seed``."""
    return seed * 1_000_003 + k


def baseline_orders(graph: Graph, ev: Evaluator) -> dict:
    """The forward, reverse and Markowitz orders, by name."""
    return {"forward": baselines.forward(graph), "reverse": baselines.reverse(graph),
            "markowitz": ev.markowitz()}


def find_order(graph: Graph, make_player, budget_s: float, seed: int = 0,
               settings: InferenceSettings = InferenceSettings(), progress: bool = False) -> OrderResult:
    """Runs the schedule on ``graph``. ``make_player(graph, scale, ev, encode=True)`` returns
    a :class:`alphagrad.policy.Player` (or None: no network, the baselines and annealing
    only; ``encode=False`` is the warm-up of :func:`compile_kernels`). Ctrl-C returns the
    best complete order so far, with a warning."""
    import warnings

    from tqdm.auto import tqdm

    t0 = time.perf_counter()
    n = len(graph.intermediates)
    small = n <= baselines.EXACT_LIMIT  # solved exactly at once: no network
    compile_s = compile_kernels(None if small else make_player, note=progress)
    t_tables = time.perf_counter()
    rules.tables(graph)  # once per graph (up to 1.3 s on the zoo's; cached for later calls)
    compile_s += time.perf_counter() - t_tables
    ev = Evaluator(graph, "exact")
    history: list = []
    best: list = [None, None, None]  # cost, order, stage

    def elapsed():
        return time.perf_counter() - t0 - compile_s

    def offer(order, stage, cost=None):
        cost = ev.cost(order) if cost is None else cost
        if best[0] is None or cost < best[0]:
            best[:] = [int(cost), [int(v) for v in order], stage]
            history.append((round(elapsed(), 3), int(cost), stage))
        return cost

    orders = baseline_orders(graph, ev)
    costs = {name: offer(o, name) for name, o in orders.items()}
    network_cost = None
    bar = tqdm(total=round(budget_s, 1), desc="alphagrad order", unit="s", disable=not progress or n == 0,
               leave=False)

    annealed = [float("inf")]  # the cheapest cost annealing has reported (below the baselines')

    def tick():
        bar.n = min(round(elapsed(), 1), bar.total)
        bar.set_postfix(best=f"{min(best[0], annealed[0]):,}")
        bar.refresh()

    def seen(cost):  # annealing's report of a cheaper order (from its chains' threads)
        annealed[0] = min(annealed[0], cost)

    @contextlib.contextmanager
    def ticking():
        """Yields annealing's report function; ticks the bar (seconds spent, cheapest
        cost) every 0.2 s while annealing runs."""
        if bar.disable:
            yield seen
            return
        done = threading.Event()

        def loop():
            while not done.wait(0.2):
                tick()

        ticker = threading.Thread(target=loop, daemon=True)
        ticker.start()
        try:
            yield seen
        finally:
            done.set()
            ticker.join()

    lock = threading.Lock()  # the network's thread offers orders while annealing runs
    failed: list = []
    arrivals: list = []  # the network's cheapest orders so far, for annealing's late start

    def late():
        return arrivals.pop(0) if arrivals else None

    def network(player):
        """The network's greedy order, then sampled ones for at most ``sample_fraction``
        of the budget, and only while annealing has found nothing cheaper than every
        order the network played (a sample would then have to be cheaper still to be
        taken or returned, and it takes a core from annealing); returns the cheapest."""
        nonlocal network_cost
        played = player.play()
        with lock:
            network_cost = offer(played, "network greedy")
        arrivals.append(played)
        for k in range(settings.samples):
            if elapsed() >= settings.sample_fraction * budget_s or annealed[0] < network_cost:
                break
            order = player.play(settings.temperature, sample_seed(seed, k))
            with lock:
                c = offer(order, "network sampled")
                if c < network_cost:
                    network_cost, played = c, order
                    arrivals.append(order)
        return played

    def beside(player):  # the network's thread: an error reaches the caller after the join
        try:
            network(player)
        except BaseException as err:  # noqa: BLE001 - re-raised in the caller's thread
            failed.append(err)

    thread = None
    try:
        if small and n > 1:
            offer(baselines.optimal(graph), "optimal")
        elif n > 1 and best[0] > 0:
            player = make_player(graph, max(min(costs.values()), 1), ev)  # the encoder runs here
            played = None
            if player is not None:
                compile_s += player.compile_seconds
                if settings.anneal and settings.opening == 0:
                    # beside annealing, not before it (step 2 of the module docstring)
                    thread = threading.Thread(target=beside, args=(player,), daemon=True)
                    thread.start()
                else:
                    played = network(player)
                    tick()
            keep = int(settings.opening * n)
            left = (budget_s - elapsed()) * settings.opening_share
            if settings.anneal and played is not None and keep > 0 and left > 0 and best[0] > 0:
                with ticking() as report:
                    offer(baselines.anneal(graph, budget_s=left, seed=seed, start=played, keep=keep,
                                           progress=report), "anneal after the network's opening")
                tick()
            left = budget_s - elapsed()
            annealed_order, annealed_from = None, "anneal"
            if settings.anneal and left > 0 and best[0] > 0:
                # from the baselines, as annealing alone starts (step 4 of the module docstring)
                with ticking() as report:
                    annealed_order, where = baselines.anneal(
                        graph, budget_s=left, seed=seed, start=list(orders.values()), progress=report,
                        late=late if thread is not None and settings.late_start else None, info=True)
                if where["late"]:
                    annealed_from = "anneal from the network's order"
            if thread is not None:
                thread.join()
            if failed:
                raise failed[0]
            if annealed_order is not None:  # the network's thread is done: no lock needed
                offer(annealed_order, annealed_from)
    except KeyboardInterrupt:
        warnings.warn(f"order interrupted after {elapsed():.1f}s: returning the best order found so far",
                      stacklevel=3)
    finally:
        bar.close()
    with lock:
        cost, order, method = list(best)
    return OrderResult(order=order, cost=cost, baselines=costs, method=method, network_cost=network_cost,
                       seconds=round(elapsed(), 3), compile_seconds=round(compile_s, 3), history=history,
                       fingerprint=graph.fingerprint)
