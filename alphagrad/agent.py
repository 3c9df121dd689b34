"""The pretrained agent: elimination orders for new functions in seconds.

    agent = alphagrad.from_pretrained()          # the model shipped in the package
    result = agent.order(f, *args, budget_s=10)  # zero-shot search, then a short fine-tune
    jac = alphagrad.jacobian(f, order=result)(*args)

:meth:`Agent.order` traces ``f``, scores forward, reverse and Markowitz, plays the
network's greedy and sampled policies and Gumbel MuZero searches with the network as
prior and value (*zero-shot*), then adapts a copy of the network's weights to this one
graph by short MCTS self-play (*fine-tune*). The time budget bounds both: after the
first batch of games, a batch starts only if its measured duration still fits. The
result is the cheapest order seen during the whole process, so it is never worse than
the best baseline. Results are cached by graph fingerprint and settings.
"""

from __future__ import annotations

import dataclasses
import functools
import numbers
import os
import time
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import optax

from alphagrad import baselines, engine, hub, search
from alphagrad.evaluator import Evaluator
from alphagrad.graph import Graph
from alphagrad.network import NUM_FEATURES, NetworkConfig, PolicyValueNet, loss

#: The model shipped inside the package (``alphagrad.from_pretrained()``).
BUNDLED_MODEL = os.path.join(os.path.dirname(__file__), "pretrained")

#: The largest ``max_vertices`` and ``max_structures`` a model config may declare. A game
#: state holds ``[V, V]`` arrays and the network attends over all vertex pairs, the rule
#: tables are ``[S, S]``: at 16384 one state's edge array alone is 1 GiB.
CONFIG_SIZE_LIMIT = 16384


def model_config(network: NetworkConfig, max_vertices: int, max_structures: int) -> dict:
    """The config.json content of a model (the hub adds its type and format version)."""
    return {"network": dataclasses.asdict(network), "max_vertices": int(max_vertices),
            "max_structures": int(max_structures), "convention": "exact"}


def _dummy_input(V: int = 32):
    return jnp.zeros((V, NUM_FEATURES)), jnp.zeros((V, V), jnp.int8), jnp.ones((V,), bool)


@dataclasses.dataclass
class OrderResult:
    """An elimination order found by :meth:`Agent.order`.

    Attributes:
      order: intermediate vertex ids in elimination order (pass the result itself to
        :func:`alphagrad.jacobian`).
      cost: its multiplications (``exact`` convention, what the interpreter executes).
      baselines: costs of ``forward``, ``reverse`` and ``markowitz`` on the same graph.
      method: what found the order (``zero-shot greedy``, ``zero-shot sampled``,
        ``zero-shot search``, ``fine-tune``, or a baseline's name).
      zero_shot_cost: the best cost before fine-tuning.
      seconds: wall time spent, compilation excluded.
      compile_seconds: one-time jit compilation in this call (0 when already compiled).
      history: ``(seconds, best cost so far)`` each time the best improved.
      fingerprint: the graph's fingerprint (orders are checked against it).
    """

    order: list
    cost: int
    baselines: dict
    method: str
    zero_shot_cost: int
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
        rows.append(f"savings vs the best baseline: {100 * self.savings:.1f}% "
                    f"(zero-shot {self.zero_shot_cost:,}); {self.seconds:.1f} s "
                    f"+ {self.compile_seconds:.1f} s compiling")
        return "\n".join(rows)


class Agent(hub.AgentHubMixin):
    """A pretrained policy-value network that proposes elimination orders.

    Load one with :func:`alphagrad.from_pretrained`; save with ``save_pretrained(dir)``;
    publish with ``push_to_hub(repo_id)`` (``dry_run=True`` writes the folder only).
    """

    def __init__(self, config: dict, params, card: str | None = None):
        self.config = _check_config(config)
        self.net = PolicyValueNet(NetworkConfig(**self.config["network"]))
        self.params = jax.tree_util.tree_map(jnp.asarray, params)
        self.card = card
        self._cache: dict = {}
        self._compiled: dict = {}

    @property
    def max_vertices(self) -> int:
        return self.config["max_vertices"]

    # -- hub hooks ------------------------------------------------------------------

    def _hub_payload(self):
        params = jax.tree_util.tree_map(np.asarray, self.params)
        return self.config, params, self.card or hub.model_card(self.config, {})

    @classmethod
    def _from_hub_payload(cls, config: dict, params: dict, **kwargs):
        config = _check_config(config)
        net = PolicyValueNet(NetworkConfig(**config["network"]))
        expected = jax.eval_shape(net.init, jax.random.key(0), *_dummy_input())
        hub.check_shapes(expected, params)
        return cls(config, params, **kwargs)

    # -- orders ---------------------------------------------------------------------

    def order(self, f, *example_args, budget_s: float | None = None, simulations: int | None = None,
              finetune: bool = True, seed: int = 0, fallback: str | None = None,
              progress: bool = True) -> OrderResult:
        """A cheap elimination order for the Jacobian of ``f(*example_args)``.

        Args:
          f: a JAX function (or a traced :class:`~alphagrad.graph.Graph`).
          *example_args: example arguments (only shapes and dtypes matter).
          budget_s: seconds for the whole search, compilation excluded (default: 10 with
            fine-tuning, 5 without). The network's greedy game and one batch of sampled
            games always run; every further batch starts only if it is expected to end
            within the budget.
          simulations: Gumbel MuZero simulations per move (default 8; 0: no search).
          finetune: adapt the network to this graph by MCTS self-play within the budget.
          seed: PRNG seed of the search.
          fallback: ``"markowitz"``: a graph over the model's vertex limit gets the
            Markowitz order with a warning instead of an error.
          progress: show a progress bar (seconds of the budget spent, best cost so far).

        Raises:
          TypeError, ValueError: an argument of the wrong kind or out of range (checked
            before any work): ``budget_s`` must be a finite number > 0 or None,
            ``simulations`` an integer >= 0 or None, ``seed`` an integer in [0, 2**32).
          alphagrad.engine.GraphTooLargeError: the graph has more vertices than the model
            handles (pass ``fallback="markowitz"`` for a classic order instead).
        """
        _check_order_args(f, example_args, budget_s, simulations, finetune, seed, fallback, progress)
        graph = f if isinstance(f, Graph) else _trace(f, *example_args)
        simulations = 8 if simulations is None else int(simulations)
        if budget_s is None:
            budget_s = 10.0 if finetune else 5.0
        key = (graph.fingerprint, float(budget_s), simulations, bool(finetune), int(seed))
        if key in self._cache:
            return self._cache[key]
        if graph.num_vertices > self.max_vertices:
            if fallback != "markowitz":
                raise engine.GraphTooLargeError(
                    f"the graph has {graph.num_vertices} vertices, more than this model's limit of "
                    f"{self.max_vertices}; pass fallback='markowitz' for a Markowitz order, or use "
                    f"alphagrad.baselines.anneal(graph) for local search")
            warnings.warn(f"the graph has {graph.num_vertices} vertices, more than the model's limit of "
                          f"{self.max_vertices}: returning the Markowitz order", stacklevel=2)
        result = _Search(self, graph, simulations, int(seed), bool(progress)).run(float(budget_s), bool(finetune))
        self._cache[key] = result
        return result

    def greedy_order(self, f, *example_args) -> list[int]:
        """The order the network plays greedily for the Jacobian of ``f(*example_args)``
        (or of a traced :class:`~alphagrad.graph.Graph`): its most likely move at every
        step, with no search, no annealing and no baseline competing, so it shows what
        the network alone has learned. (As in training, the network sees costs relative to
        the best of forward, reverse and Markowitz; only their cost is used.)

        Raises:
          alphagrad.engine.GraphTooLargeError: the graph has more vertices than the model
            handles.
        """
        graph = f if isinstance(f, Graph) else _trace(f, *example_args)
        if graph.num_vertices > self.max_vertices:
            raise engine.GraphTooLargeError(
                f"the graph has {graph.num_vertices} vertices, more than this model's limit of "
                f"{self.max_vertices}; alphagrad.baselines.markowitz(graph) or "
                f"alphagrad.baselines.anneal(graph) give orders for it")
        if not graph.intermediates:
            return []
        ev = Evaluator(graph, "exact")
        scale = max(min(ev.cost(o) for o in _baseline_orders(graph, ev).values()), 1)
        states, scales = _initial_states(graph, self.max_vertices, scale, 1)
        args = (self.params, jax.random.key(0), states, scales, jnp.zeros(1, jnp.float32))
        rollout, _ = self._compile("rollout", search.rollout, *args, prior=search.network_prior(self.net),
                                   record=True)
        return [int(v) for v in search.orders(rollout(*args))[0]]

    def _compile(self, name: str, fn, *args, **static):
        """An AOT-compiled ``fn`` for these argument shapes, and the seconds compiling took."""
        shapes = tuple((x.shape, x.dtype) for x in jax.tree_util.tree_leaves(args))
        k = (name, shapes, tuple(sorted(static.items())))
        if k in self._compiled:
            return self._compiled[k], 0.0
        t = time.perf_counter()
        compiled = fn.lower(*args, **static).compile()
        self._compiled[k] = compiled
        return compiled, time.perf_counter() - t


def _baseline_orders(graph: Graph, ev: Evaluator) -> dict:
    """The forward, reverse and Markowitz orders, by name: the network's cost scale is the
    cheapest of them, and a search never returns worse."""
    return {"forward": baselines.forward(graph), "reverse": baselines.reverse(graph),
            "markowitz": ev.markowitz()}


def _initial_states(graph: Graph, max_vertices: int, scale: float, n: int):
    """``n`` copies of ``graph``'s initial game state (a batch) and of ``scale``."""
    T = engine.tables(graph)
    S = max(64, 1 << (T.size - 1).bit_length())  # few distinct shapes: few compiles
    state = engine.encode(graph, "exact", num_structures=S, max_vertices=max_vertices)
    return search.batch_states([state] * n), jnp.full((n,), scale, jnp.float32)


def _trace(f, *args) -> Graph:
    from alphagrad.trace import trace

    return trace(f, *args)


_CONFIG_KEYS = ("network", "max_vertices", "max_structures", "convention")
_NETWORK_KEYS = tuple(f.name for f in dataclasses.fields(NetworkConfig))


def _config_error(problem: str) -> hub.NotAnAlphagradModelError:
    return hub.NotAnAlphagradModelError(
        f"the model config is not one this alphagrad reads: {problem}. A config holds 'network' "
        f"({', '.join(_NETWORK_KEYS)}: positive integers, dim a multiple of heads), 'max_vertices' and "
        f"'max_structures' (integers from 1 to {CONFIG_SIZE_LIMIT}) and optionally 'convention' ('exact'), as "
        "`alphagrad.agent.model_config` writes it. Re-export the model, or upgrade alphagrad "
        "(`pip install -U alphagrad`) if a newer version saved it")


def _config_int(value, name: str, low: int, high: int | None) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise _config_error(f"{name} must be an integer, got {value!r} ({type(value).__name__})")
    if value < low or (high is not None and value > high):
        bound = f"from {low} to {high}" if high is not None else f">= {low}"
        raise _config_error(f"{name} must be {bound}, got {value}")
    return int(value)


def _check_config(config: dict) -> dict:
    """The config with every key and value checked (types, ranges), or a
    :class:`~alphagrad.hub.NotAnAlphagradModelError` saying what is wrong."""
    if not isinstance(config, dict):
        raise _config_error(f"it is a {type(config).__name__}, not a dict")
    missing = [k for k in _CONFIG_KEYS[:3] if k not in config]
    unknown = sorted(str(k) for k in config if k not in _CONFIG_KEYS)
    if missing or unknown:
        raise _config_error("; ".join(([f"missing {missing}"] if missing else [])
                                      + ([f"unknown keys {unknown}"] if unknown else [])))
    net = config["network"]
    if not isinstance(net, dict):
        raise _config_error(f"'network' must be a dict, got {net!r}")
    missing = [k for k in _NETWORK_KEYS if k not in net]
    unknown = sorted(str(k) for k in net if k not in _NETWORK_KEYS)
    if missing or unknown:
        raise _config_error("; ".join(([f"network is missing {missing}"] if missing else [])
                                      + ([f"network has unknown keys {unknown}"] if unknown else [])))
    net = {k: _config_int(net[k], f"network.{k}", 1, None) for k in _NETWORK_KEYS}
    if net["dim"] % net["heads"]:
        raise _config_error(f"network.dim ({net['dim']}) must be a multiple of network.heads ({net['heads']})")
    convention = config.get("convention", "exact")
    if convention != "exact":
        raise _config_error(f"convention must be 'exact' (the cost model the agent plays), got {convention!r}")
    return {"network": net,
            "max_vertices": _config_int(config["max_vertices"], "max_vertices", 1, CONFIG_SIZE_LIMIT),
            "max_structures": _config_int(config["max_structures"], "max_structures", 1, CONFIG_SIZE_LIMIT),
            "convention": convention}


def _check_order_args(f, example_args, budget_s, simulations, finetune, seed, fallback, progress):
    """Every argument of :meth:`Agent.order`, checked before any work (TypeError for a wrong
    kind of value, ValueError for a value out of range)."""
    if isinstance(f, Graph):
        if example_args:
            raise TypeError(f"order(graph, ...) takes no example arguments (the graph is already traced); "
                            f"got {len(example_args)}")
    elif not callable(f):
        raise TypeError(f"f must be a JAX function (with its example arguments) or a traced alphagrad Graph, "
                        f"not {type(f).__name__}")
    baselines.check_budget(budget_s, "budget_s", allow_none=True)  # the same checks as anneal's
    if simulations is not None:
        baselines.check_int(simulations, "simulations", 0)
    baselines.check_seed(seed)
    for name, value in (("finetune", finetune), ("progress", progress)):
        if not isinstance(value, (bool, np.bool_)):
            raise TypeError(f"{name} must be True or False, not {value!r}")
    if fallback not in (None, "markowitz"):
        raise ValueError(f"fallback must be None or 'markowitz', got {fallback!r}")


#: Fine-tuning's optimiser (one object, so its compiled update is reused across calls).
_FINETUNE_OPTIMIZER = optax.adam(3e-4)


@functools.cache
def _finetune_update(net, tx):
    @jax.jit
    def update(params, opt_state, batch):
        (_, _aux), grads = jax.value_and_grad(functools.partial(loss, net), has_aux=True)(params, batch)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state

    return update


class _Search:
    """One call of :meth:`Agent.order`: keeps the best order seen and the clock."""

    GAMES = 2  # games per search batch

    @property
    def samples(self) -> int:
        """Games per rollout batch: fewer on large graphs, where one network call
        (quadratic in the vertex count) dominates."""
        V = engine.padded_size(self.graph.num_vertices)
        return 8 if V <= 128 else 4 if V <= 256 else 2

    def __init__(self, agent: Agent, graph: Graph, simulations: int, seed: int, progress: bool):
        self.agent, self.graph, self.simulations, self.progress = agent, graph, simulations, progress
        self.key = jax.random.key(seed)
        self.t0 = time.perf_counter()
        self.compile_s = 0.0
        self.history: list = []
        self.best = None  # (cost, order, method)
        self.took: dict = {}  # seconds the last batch of each kind took
        self.initial: dict = {}  # batch size -> (initial states, scales)

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0 - self.compile_s

    def offer(self, order, method: str, cost: int | None = None):
        cost = self.ev.cost(order) if cost is None else cost
        if self.best is None or cost < self.best[0]:
            self.best = (int(cost), list(map(int, order)), method)
            self.history.append((round(self.elapsed(), 3), int(cost)))

    def call(self, name, fn, *args, **static):
        compiled, secs = self.agent._compile(name, fn, *args, **static)
        self.compile_s += secs
        return compiled(*args)

    def next_key(self):
        self.key, sub = jax.random.split(self.key)
        return sub

    def fits(self, kind: str) -> bool:
        """Whether a batch of ``kind`` is expected to end within the budget. Until one has
        been timed, a search batch is estimated at ``simulations`` rollout batches."""
        took = self.took.get(kind)
        if took is None and kind == "search":
            took = self.took.get("rollout", 0.0) * self.simulations
        return self.elapsed() + (took or 0.0) <= self.budget_s

    def timed(self, kind: str, fn, *args):
        start = self.elapsed()
        out = jax.block_until_ready(fn(*args))
        self.took[kind] = self.elapsed() - start
        self.tick()
        return out

    def tick(self):
        if self.bar is not None:
            self.bar.n = min(round(self.elapsed(), 1), self.bar.total)
            self.bar.set_postfix(best=f"{self.best[0]:,}")
            self.bar.refresh()

    def run(self, budget_s: float, finetune: bool) -> OrderResult:
        from tqdm.auto import tqdm

        g = self.graph
        self.budget_s = budget_s
        self.ev = Evaluator(g, "exact")
        costs = {}
        for name, order in _baseline_orders(g, self.ev).items():
            costs[name] = self.ev.cost(order)
            self.offer(order, name, costs[name])
        self.scale = float(max(min(costs.values()), 1))
        zero_shot = self.best[0]
        self.bar = None
        if g.intermediates and g.num_vertices <= self.agent.max_vertices:
            self.bar = tqdm(total=round(budget_s, 1), desc="alphagrad order", unit="s", disable=not self.progress,
                            leave=False)
            self.zero_shot(more=not finetune)
            zero_shot = self.best[0]
            if finetune:
                self.finetune()
            self.bar.close()
        cost, order, method = self.best
        return OrderResult(order=order, cost=cost, baselines=costs, method=method, zero_shot_cost=zero_shot,
                           seconds=round(self.elapsed(), 3), compile_seconds=round(self.compile_s, 3),
                           history=self.history, fingerprint=g.fingerprint)

    def _states(self, n: int):
        """``n`` copies of the graph's initial state and scale, encoded once per ``n`` (every
        batch of a call starts from them)."""
        if n not in self.initial:
            self.initial[n] = _initial_states(self.graph, self.agent.max_vertices, self.scale, n)
        return self.initial[n]

    def _play(self, params, record=False):
        """``GAMES`` Gumbel MuZero games with the network as prior and value."""
        state, scale = self._states(self.GAMES)
        prior = search.network_prior(self.agent.net)
        return self.call("play", search.play, params, self.next_key(), state, scale, prior=prior,
                         simulations=self.simulations, max_considered=min(16, len(self.graph.intermediates) + 1),
                         record=record)

    def _rollouts(self, params, greedy: bool):
        """``samples`` games by the policy alone: sampled at temperature 1, the first one
        greedy if ``greedy``."""
        state, scale = self._states(self.samples)
        temperature = jnp.ones(self.samples).at[0].set(0.0 if greedy else 1.0)
        prior = search.network_prior(self.agent.net)
        return self.call("rollout", search.rollout, params, self.next_key(), state, scale, temperature,
                         prior=prior, record=True)

    def zero_shot(self, more: bool):
        """The network's greedy order and one batch of sampled orders; then, if ``more``,
        Gumbel MuZero games alternating with sampled batches while they fit the budget."""
        params = self.agent.params
        greedy, *sampled = search.orders(self.timed("rollout", self._rollouts, params, True))
        self.offer(greedy, "zero-shot greedy")
        for order in sampled:
            self.offer(order, "zero-shot sampled")
        rounds = 0
        while more:
            kinds = ["search", "rollout"] if self.simulations > 0 else ["rollout"]
            kinds = [k for k in kinds[rounds % len(kinds):] + kinds[:rounds % len(kinds)] if self.fits(k)]
            if not kinds:
                break
            if kinds[0] == "search":
                for order in search.orders(self.timed("search", self._play, params)):
                    self.offer(order, "zero-shot search")
            else:
                for order in search.orders(self.timed("rollout", self._rollouts, params, False)):
                    self.offer(order, "zero-shot sampled")
            rounds += 1

    def finetune(self):
        """Adapts a copy of the weights to this graph while batches fit the budget: rounds
        of sampled self-play whose cheapest games become policy targets, alternating with
        Gumbel MuZero games whose improved policies become targets."""
        tx = _FINETUNE_OPTIMIZER
        params = self.agent.params
        opt_state = tx.init(params)
        update = _finetune_update(self.agent.net, tx)
        rng = np.random.default_rng(0)
        rounds = 0
        while True:
            search_turn = rounds % 2 and self.simulations > 0 and self.fits("search")
            if not search_turn and not self.fits("rollout"):
                break
            start = self.elapsed()
            if search_turn:
                traj = self.timed("search", self._play, params, True)
            else:
                traj = self.timed("rollout", self._rollouts, params, False)
                costs = np.asarray(traj.mults, np.int64).sum(0)
                elite = costs <= np.quantile(costs, 0.25)
                traj = traj.replace(active=traj.active & jnp.asarray(elite)[None, :],
                                    weights=jax.nn.one_hot(traj.actions, traj.weights.shape[-1]))
            for order in search.orders(traj):
                if order:
                    self.offer(order, "fine-tune")
            data = search.samples(traj, traj.mults.shape[1] * [self.scale])
            for _ in range(4):
                idx = rng.integers(0, len(data["value"]), 32)
                batch = {k: v[idx] for k, v in data.items()}
                params, opt_state = self.call("update", update, params, opt_state, batch)
            jax.block_until_ready(params)
            # a round's time includes its updates
            self.took["search" if search_turn else "rollout"] = self.elapsed() - start
            rounds += 1
            self.tick()


def from_pretrained(model_id_or_path: str | os.PathLike | None = None, revision: str | None = None,
                    **kwargs) -> Agent:
    """Loads a pretrained :class:`Agent`.

    Args:
      model_id_or_path: a local directory or a Hugging Face Hub repo id; None: the model
        shipped inside the package (works offline).
      revision: a branch, tag or commit of the hub repo.
      **kwargs: passed to ``huggingface_hub`` (``cache_dir``, ``token``,
        ``local_files_only``, ``force_download``).
    """
    if model_id_or_path is None:
        if revision is not None:
            raise ValueError("revision applies to hub repos, not to the bundled model")
        if not os.path.isfile(os.path.join(BUNDLED_MODEL, hub.WEIGHTS_NAME)):
            raise hub.ModelNotFoundError(
                f"the bundled model is missing from {BUNDLED_MODEL}; reinstall alphagrad or pass a "
                f"model directory or hub repo id")
        model_id_or_path = BUNDLED_MODEL
    return Agent.from_pretrained(model_id_or_path, revision=revision, **kwargs)
