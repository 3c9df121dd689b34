"""The budgeted schedule that turns a network into an order (:meth:`Agent.order`).

Within ``budget_s`` seconds of wall time (one-time work reported apart, as
``compile_seconds``: the first call in a process runs every compiled kernel once on a
small chain, see :func:`compile_kernels`, and the first call on a graph builds its rule
tables, :func:`alphagrad.rules.tables`, kept for later calls):

1. forward, reverse and Markowitz are scored (the result is never worse than them); a
   graph of at most :attr:`alphagrad.anneal.AnnealSettings.exact_limit` intermediates
   gets the proven optimum at once;
2. the network plays its greedy order and then sampled orders
   (:class:`alphagrad.player.Player`: one encoder pass, then compiled rollouts; sampling
   for at most ``sample_fraction`` of the budget, and only until annealing has found an
   order cheaper than every order the network played) on a thread of its own, beside step 5:
   the rollout runs on one core, and played first it would leave every other core idle
   (0.2-0.4 s of a 1 s budget on graphs of about 2,000 intermediates);
3. the rest of the network's cheapest order after its opening (its first ``opening``
   share of moves, kept) is annealed for ``opening_share`` of the time left: a smaller
   search space; off by default (``opening`` 0), since ``python -m eval.bench_schedule``
   measures it no better at 5 s and worse at 1 s, where annealing needs the time (with it
   on, the network plays first);
4. in a graph of more than ``periodic_above`` intermediates with a traced loop, the best
   loop-periodic order (:mod:`alphagrad.periodic`) is searched for a share of the budget
   and joins the baselines as a start (their only start, where it is cheaper than all);
5. the starts are each descended and annealed whole
   (:func:`alphagrad.anneal.anneal`, by default on its nested schedule, so that more
   budget never gives a dearer order) for the rest of the budget. The network's order
   is not a start: on large graphs the starts lie in basins of very different depth,
   and a network's order that is cheaper than the baselines' but in a shallower basin
   would take a baseline's chain (on NeuralCA_Conv at 1 s it
   took forward's, the only start that reaches the deep basin: 0.973 x the best
   baseline instead of annealing's 0.36). It is a late start instead
   (``late_start``): the last chain asks for the greedy order at a fixed cycle of its
   work (waiting for it) and anneals on from it if it is clearly cheaper than that
   chain's best order (:attr:`alphagrad.anneal.AnnealSettings.late_margin`; with the
   budget schedule, each order as it arrives goes to the chain whose best is dearest).
   Annealing is then behind the network, as at 1 s on graphs of about 2,000
   intermediates.

:class:`Schedule` runs the steps on one graph; ``OrderResult.history`` records each
improvement with the stage that found it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import sys
import threading
import time
import warnings

from alphagrad import orders, rules
from alphagrad.anneal import AnnealSettings, anneal
from alphagrad.checks import check_budget, check_seed
from alphagrad.evaluator import Evaluator
from alphagrad.graph import Graph
from alphagrad.periodic import iterations, periodic


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
        ``alphagrad.anneal.anneal(late=...)``: the chain whose best order is dearest takes
        one that costs less than :attr:`alphagrad.anneal.AnnealSettings.late_margin` of
        every chain's best; with nested annealing, the last chain asks for the greedy order
        once, at a fixed cycle, and takes it if cheaper than its own best: see
        ``alphagrad.anneal.anneal``'s ``late``); otherwise they only compete with
        annealing's result.
      finetune: the :class:`alphagrad.selfplay.FinetuneSettings` of
        ``Agent.order(..., finetune_s=S)`` (None: its defaults).
      periodic_above, periodic_share, periodic_max_s: in a graph of more than
        ``periodic_above`` intermediates with a traced loop, the best loop-periodic order
        (:func:`alphagrad.periodic.periodic`), searched for ``periodic_share`` of the time
        left (at most ``periodic_max_s`` seconds), joins annealing's starts (replaces
        them where it is cheaper than every baseline). Where annealing starves it is a
        deep start (N-body RK4 of 150 steps, 10,498 intermediates, 2 cores, x the best
        baseline: the agent at 5 s 0.999 without it, 0.876-0.910 with it; at 20 s 0.874
        and 0.844). 0 share: never.
      annealing: the :class:`alphagrad.anneal.AnnealSettings` of the annealing stages.
        The default is the nested schedule, with the network's greedy order taken at a
        fixed cycle (see ``alphagrad.anneal.anneal``'s ``late``): a longer budget repeats
        a shorter one's annealing and goes on, so it never returns a dearer order. Side by
        side on 15 graphs of 1,508-1,924 intermediates at 1-16 s (2 cores,
        ``eval/results/portfolio_xl``): with the budget schedule (``AnnealSettings()``)
        the agent returned a dearer order at a longer budget on 5 graphs, nested on none;
        geometric means x the best baseline, nested / budget: 0.808 / 0.816 at 1 s, 0.777
        / 0.776 at 2 s, 0.765 / 0.761 at 4 s, 0.760 / 0.758 at 8 s, 0.758 / 0.753 at 16 s.
    """

    samples: int = 32
    temperature: float = 0.2
    sample_fraction: float = 0.1
    opening: float = 0.0
    opening_share: float = 0.5
    anneal: bool = True
    late_start: bool = True
    finetune: object = None
    periodic_above: int = 5000
    periodic_share: float = 0.4
    periodic_max_s: float = 2.0
    annealing: AnnealSettings = AnnealSettings(schedule="nested")

    def __post_init__(self):
        if not isinstance(self.annealing, AnnealSettings):
            raise ValueError(f"annealing = {self.annealing!r} must be an alphagrad.anneal.AnnealSettings")
        if self.finetune is not None and type(self.finetune).__name__ != "FinetuneSettings":
            raise ValueError(f"finetune = {self.finetune!r} must be an alphagrad.selfplay.FinetuneSettings or None")
        if isinstance(self.samples, bool) or not isinstance(self.samples, int) or self.samples < 0:
            raise ValueError(f"samples = {self.samples!r} must be an integer >= 0")
        if not isinstance(self.temperature, (int, float)) or not math.isfinite(self.temperature) \
                or self.temperature <= 0:
            raise ValueError(f"temperature = {self.temperature!r} must be a finite number > 0")
        for name in ("anneal", "late_start"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} = {getattr(self, name)!r} must be True or False")
        if isinstance(self.periodic_above, bool) or not isinstance(self.periodic_above, int) \
                or self.periodic_above < 0:
            raise ValueError(f"periodic_above = {self.periodic_above!r} must be an integer >= 0")
        if isinstance(self.periodic_max_s, bool) or not isinstance(self.periodic_max_s, (int, float)) \
                or not math.isfinite(self.periodic_max_s) or self.periodic_max_s < 0:
            raise ValueError(f"periodic_max_s = {self.periodic_max_s!r} must be a finite number >= 0")
        for name in ("sample_fraction", "opening", "opening_share", "periodic_share"):
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
        the network's opening``, ``optimal``, ``fine-tune self-play`` or a baseline's
        name).
      network_cost: the cheapest order the network played (None if it did not play).
      seconds: wall time spent, one-time work excluded.
      compile_seconds: one-time work in this call: compiling the kernels (once per
        process) and the graph's rule tables (once per graph); 0 when both were done.
      history: ``(seconds, cost, stage)`` each time the best improved.
      fingerprint: the graph's fingerprint (orders are checked against it).
      finetune: with ``finetune_s``, what the fine-tune did (seconds, compile_seconds,
        games, updates, the cost of the cheapest order it played, and of the network's
        greedy order before and after: ``greedy_before``, ``greedy_cost``).
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
    finetune: dict | None = None

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
        if self.finetune:
            t = self.finetune
            rows.append(f"fine-tune: {t['games']} self-play games, {t['updates']} updates in {t['seconds']:.1f} s "
                        f"+ {t['compile_seconds']:.1f} s compiling; greedy order {t['greedy_before']:,} -> "
                        f"{t['greedy_cost']:,}, cheapest played {t['cost']:,}")
        return "\n".join(rows)


#: What :func:`compile_kernels` has compiled in this process ("search", "network").
_COMPILED: set = set()


def _chain() -> Graph:
    """A chain of 12 scalar intermediates: more than ``AnnealSettings.exact_limit``, so
    that annealing runs its kernel rather than the exact search."""
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
    size, in :class:`alphagrad.player.Player`): numba compiles them the first time on a
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


class Schedule:
    """One run of the schedule on one graph (the steps of the module docstring): the best
    order so far and its history, the network's thread and the orders it hands to
    annealing, and the progress bar. The network's thread offers orders while annealing
    runs, so :meth:`offer` takes a lock. Build it, then :meth:`run` it once.

    Args: as :func:`find_order`'s, ``budget_s`` checked.
    """

    def __init__(self, graph: Graph, make_player, budget_s: float, seed: int, settings: InferenceSettings,
                 progress: bool, extra: dict | None = None):
        self.t0 = time.perf_counter()
        self.graph, self.make_player, self.budget_s, self.seed = graph, make_player, budget_s, seed
        self.settings, self.progress = settings, progress
        self.small = len(graph.intermediates) <= settings.annealing.exact_limit  # solved exactly at once
        self.compile_s = compile_kernels(None if self.small else make_player, note=progress)
        t_tables = time.perf_counter()
        rules.tables(graph)  # once per graph (up to 1.3 s on the zoo's; cached for later calls)
        self.compile_s += time.perf_counter() - t_tables
        self.ev = Evaluator(graph, "exact")
        self.best: tuple | None = None  # (cost, order, stage)
        self.history: list = []
        self.lock = threading.Lock()
        self.network_cost: int | None = None  # the cheapest order the network played
        self.annealed = math.inf  # the cheapest cost annealing has reported
        self.arrivals: list = []  # the network's cheapest orders so far, for annealing's late start
        self.greedy_played = threading.Event()  # set once the greedy order is in arrivals (or the thread ended)
        self.failed: list = []  # an error on the network's thread, raised in the caller's
        self.thread: threading.Thread | None = None
        self.starts = orders.classic(graph, "exact", self.ev)
        self.extra = {stage: order for stage, order in (extra or {}).items() if order is not None}
        self.costs: dict = {}
        self.bar = None

    def elapsed(self) -> float:
        """Seconds of the budget spent (one-time work left out)."""
        return time.perf_counter() - self.t0 - self.compile_s

    def left(self) -> float:
        """Seconds of the budget left."""
        return self.budget_s - self.elapsed()

    def offer(self, order, stage: str, cost: int | None = None) -> int:
        """Scores ``order`` (unless its ``cost`` is given) and keeps it if it is the
        cheapest so far, recording the improvement; returns its cost."""
        with self.lock:
            cost = self.ev.cost(order) if cost is None else cost
            if self.best is None or cost < self.best[0]:
                self.best = (int(cost), [int(v) for v in order], stage)
                self.history.append((round(self.elapsed(), 3), int(cost), stage))
        return cost

    def run(self) -> OrderResult:
        """Runs the steps; Ctrl-C returns the best complete order so far, with a warning."""
        from tqdm.auto import tqdm

        self.costs = {name: self.offer(order, name) for name, order in self.starts.items()}
        for stage, order in self.extra.items():
            self.offer(order, stage)
        n = len(self.graph.intermediates)
        self.bar = tqdm(total=round(self.budget_s, 1), desc="alphagrad order", unit="s",
                        disable=not self.progress or n == 0, leave=False)
        try:
            if self.small:
                if n > 1:
                    self.offer(orders.optimal(self.graph), "optimal")
            elif self.best[0] > 0:
                self._search()
        except KeyboardInterrupt:
            warnings.warn(f"order interrupted after {self.elapsed():.1f}s: returning the best order found so far",
                          stacklevel=4)
        finally:
            self.bar.close()
        return self.result()

    def _search(self):
        """Steps 2-5: the network, the opening, the loop-periodic start and annealing."""
        played = self._start_network()
        self._anneal_opening(played)
        self._periodic()
        annealed = self._anneal()
        if self.thread is not None:
            self.thread.join()
        if self.failed:
            raise self.failed[0]
        if annealed is not None:  # the network's thread is done
            self.offer(*annealed)

    def _start_network(self):
        """Step 2: the network's player (its encoder runs here) plays on a thread beside
        annealing, or first (returning its cheapest order) where an opening stage
        follows or nothing anneals; None without a network."""
        player = self.make_player(self.graph, max(min(self.costs.values()), 1), self.ev)
        if player is None:
            return None
        self.compile_s += player.compile_seconds
        if self.settings.anneal and self.settings.opening == 0:
            self.thread = threading.Thread(target=self._beside, args=(player,), daemon=True)
            self.thread.start()
            return None
        played = self._play(player)
        self._tick()
        return played

    def _play(self, player):
        """The network's greedy order, then sampled ones for at most ``sample_fraction``
        of the budget, and only while annealing has found nothing cheaper than every
        order the network played (a sample would then have to be cheaper still to be
        taken or returned, and it takes a core from annealing); returns the cheapest."""
        settings = self.settings
        played = player.play()
        self.network_cost = self.offer(played, "network greedy")
        self.arrivals.append(played)
        self.greedy_played.set()
        for k in range(settings.samples):
            if self.elapsed() >= settings.sample_fraction * self.budget_s or self.annealed < self.network_cost:
                break
            order = player.play(settings.temperature, sample_seed(self.seed, k))
            cost = self.offer(order, "network sampled")
            if cost < self.network_cost:
                self.network_cost, played = cost, order
                self.arrivals.append(order)
        return played

    def _beside(self, player):
        """:meth:`_play` on the network's thread: an error reaches the caller after the join."""
        try:
            self._play(player)
        except BaseException as err:  # noqa: BLE001 - re-raised in the caller's thread
            self.failed.append(err)
        finally:
            self.greedy_played.set()

    def _late(self):
        """The next of the network's orders for annealing's late start, or None."""
        return self.arrivals.pop(0) if self.arrivals else None

    def _greedy_late(self):
        """The nested schedule's one late start (asked once, at a fixed cycle): the
        network's greedy order, waited for while budget is left, so that the chain takes
        it at the same point of its work whatever the budget."""
        self.greedy_played.wait(max(self.left(), 0.0))
        return self.arrivals[0] if self.arrivals else None

    def _anneal_opening(self, played):
        """Step 3: anneals the rest of ``played`` after its opening (off by default)."""
        keep = int(self.settings.opening * len(self.graph.intermediates))
        seconds = self.left() * self.settings.opening_share
        if not (self.settings.anneal and played is not None and keep > 0 and seconds > 0 and self.best[0] > 0):
            return
        with self._ticking() as report:
            self.offer(anneal(self.graph, budget_s=seconds, seed=self.seed, start=played, keep=keep,
                              progress=report, settings=self.settings.annealing), "anneal after the network's opening")
        self._tick()

    def _periodic(self):
        """Step 3b: in a large graph with a traced loop, the best loop-periodic order joins
        annealing's starts (``InferenceSettings.periodic_above``)."""
        s = self.settings
        seconds = min(self.left() * s.periodic_share, s.periodic_max_s)
        if len(self.graph.intermediates) <= s.periodic_above or seconds <= 0 or not s.anneal \
                or iterations(self.graph) is None:
            return
        # an evaluator of its own: the network's thread scores its orders on self.ev meanwhile
        order = periodic(self.graph, budget_s=seconds, seed=self.seed, evaluator=Evaluator(self.graph, "exact"))
        cost = self.offer(order, "loop-periodic")
        # cheaper than every baseline, it is annealing's only start: in a graph this large the
        # baselines' chains do not reach its basin in time (N-body RK4 x150 at 5 s: 0.876 x the
        # best baseline alone, 0.917 beside the baselines, in one pair of runs)
        self.starts = {"loop-periodic": order} if cost < min(self.costs.values()) else {
            **self.starts, "loop-periodic": order}

    def _anneal(self):
        """Step 5: anneals from the starts for the rest of the budget, taking the
        network's orders as late starts; ``(order, stage)``, or None if it did not run."""
        seconds = self.left()
        if not (self.settings.anneal and seconds > 0 and self.best[0] > 0):
            return None
        late = None
        if self.thread is not None and self.settings.late_start:
            late = self._greedy_late if self.settings.annealing.schedule == "nested" else self._late
        with self._ticking() as report:
            order, where = anneal(self.graph, budget_s=seconds, seed=self.seed, start=list(self.starts.values()),
                                  progress=report, late=late, info=True, settings=self.settings.annealing)
        return order, "anneal from the network's order" if where["late"] else "anneal"

    def _seen(self, cost):
        """Annealing's report of a cheaper order (from its chains' threads)."""
        self.annealed = min(self.annealed, cost)

    def _tick(self):
        """Shows the seconds spent and the cheapest cost on the progress bar."""
        self.bar.n = min(round(self.elapsed(), 1), self.bar.total)
        self.bar.set_postfix(best=f"{min(self.best[0], self.annealed):,}")
        self.bar.refresh()

    @contextlib.contextmanager
    def _ticking(self):
        """Yields annealing's report function; ticks the bar every 0.2 s while annealing
        runs."""
        if self.bar.disable:
            yield self._seen
            return
        done = threading.Event()

        def loop():
            while not done.wait(0.2):
                self._tick()

        ticker = threading.Thread(target=loop, daemon=True)
        ticker.start()
        try:
            yield self._seen
        finally:
            done.set()
            ticker.join()

    def result(self) -> OrderResult:
        """The cheapest order offered so far, with how and when it was found."""
        with self.lock:
            cost, order, method = self.best
        return OrderResult(order=order, cost=cost, baselines=self.costs, method=method,
                           network_cost=self.network_cost, seconds=round(self.elapsed(), 3),
                           compile_seconds=round(self.compile_s, 3), history=self.history,
                           fingerprint=self.graph.fingerprint)


def find_order(graph: Graph, make_player, budget_s: float, seed: int = 0,
               settings: InferenceSettings = InferenceSettings(), progress: bool = False,
               extra: dict | None = None) -> OrderResult:
    """Runs the schedule on ``graph`` for ``budget_s`` seconds (a finite number > 0).
    ``make_player(graph, scale, ev, encode=True)`` returns a
    :class:`alphagrad.player.Player` (or None: no network, the baselines and annealing
    only; ``encode=False`` is the warm-up of :func:`compile_kernels`); ``extra``: orders
    found before, ``{stage: order}`` (None entries skipped), competing from the start.
    Ctrl-C returns the best complete order so far, with a warning."""
    budget_s = check_budget(budget_s)
    seed = check_seed(seed)
    if not isinstance(settings, InferenceSettings):
        raise TypeError(f"settings must be an alphagrad.inference.InferenceSettings, not {type(settings).__name__}")
    return Schedule(graph, make_player, budget_s, seed, settings, progress, extra).run()
