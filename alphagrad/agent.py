"""The pretrained agent: elimination orders for new functions in seconds.

    agent = alphagrad.from_pretrained()          # the model shipped in the package
    result = agent.order(f, *args, budget_s=10)  # network orders beside annealing
    jac = alphagrad.jacobian(f, order=result)(*args)

:meth:`Agent.order` traces ``f`` and runs the budgeted schedule of
:mod:`alphagrad.inference`: the baselines, the network's greedy and sampled orders
(:class:`alphagrad.player.Player`: one encoder pass per graph, compiled rollouts) played
beside annealing from the baselines, the cheapest order winning. The result is never
worse than the best baseline; results are cached by graph fingerprint and settings.
:meth:`Agent.greedy_order` is the network's order alone. What a saved model holds is
:mod:`alphagrad.hub.format`.
"""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np

from alphagrad import checks, hub
from alphagrad.graph import Graph
from alphagrad.hub.format import check_config, init_params, widen
from alphagrad.inference import InferenceSettings, OrderResult, find_order
from alphagrad.network import NetworkConfig, PolicyNet
from alphagrad.player import Player

__all__ = ["Agent", "OrderResult", "from_pretrained"]

#: The model shipped inside the package (``alphagrad.from_pretrained()``).
BUNDLED_MODEL = os.path.join(os.path.dirname(__file__), "pretrained")


class Agent(hub.AgentHubMixin):
    """A pretrained policy-value network that proposes elimination orders.

    Load one with :func:`alphagrad.from_pretrained`; save with ``save_pretrained(dir)``;
    publish with ``push_to_hub(repo_id)`` (``dry_run=True`` writes the folder only).
    """

    def __init__(self, config: dict, params, card: str | None = None):
        self.config = check_config(config)
        self.net = PolicyNet(NetworkConfig(**self.config["network"]))
        self.params = jax.tree_util.tree_map(jnp.asarray, params)
        self.card = card
        self.finetuned = None  # what :meth:`finetune` did, on an adapted copy
        self._cache: dict = {}

    @property
    def max_vertices(self) -> int:
        return self.config["max_vertices"]

    # -- hub hooks ------------------------------------------------------------------

    def _hub_payload(self):
        params = jax.tree_util.tree_map(np.asarray, self.params)
        return self.config, params, self.card or hub.model_card(self.config, {})

    @classmethod
    def _from_hub_payload(cls, config: dict, params: dict, **kwargs):
        config = check_config(config)
        net = PolicyNet(NetworkConfig(**config["network"]))
        expected = jax.eval_shape(lambda: init_params(net, jax.random.key(0)))
        params = widen(params, config["network"]["dim"])
        hub.check_shapes(expected, params)
        return cls(config, params, **kwargs)

    # -- orders ---------------------------------------------------------------------

    def player(self, graph: Graph, scale: float, ev=None, encode: bool = True) -> Player:
        """The network's :class:`~alphagrad.player.Player` on ``graph`` (costs relative to
        ``scale``, the best baseline's cost; ``encode=False``: a warm-up, see Player)."""
        return Player(self.net, self.params, graph, scale, ev, encode)

    def finetune(self, f, *example_args, seconds: float, seed: int = 0, settings=None) -> "Agent":
        """A copy of this agent adapted to ``f(*example_args)`` (or a traced
        :class:`~alphagrad.graph.Graph`) by ``seconds`` of AlphaZero self-play on its graph
        (:func:`alphagrad.selfplay.finetune`: Gumbel MuZero games with the network as prior,
        Adam updates towards the search's policy and the cost the games spent; compiling
        excluded). This agent's weights are unchanged; the copy's ``finetuned`` says what
        was done (games, updates, seconds, the cheapest order its games played).

        Raises:
          TypeError, ValueError: ``seconds`` not a finite number in (0, 3600], ``seed``
            not an integer in [0, 2**32), ``settings`` not a
            :class:`~alphagrad.selfplay.FinetuneSettings`.
          alphagrad.engine.GraphTooLargeError: the graph has more vertices than the JAX
            game self-play runs on holds (1,024) or the model handles.
        """
        from alphagrad import selfplay

        seconds = selfplay.check_finetune_s(seconds, "seconds")
        checks.check_seed(seed)
        settings = settings or selfplay.FinetuneSettings()
        if not isinstance(settings, selfplay.FinetuneSettings):
            raise TypeError(f"settings must be an alphagrad.selfplay.FinetuneSettings, not {type(settings).__name__}")
        graph = f if isinstance(f, Graph) else _trace(f, *example_args)
        tuned = selfplay.finetune(self.net, self.params, graph, seconds, int(seed), settings, self.max_vertices)
        copy = type(self)(self.config, tuned.params, self.card)
        copy.finetuned = tuned
        return copy

    def order(self, f, *example_args, budget_s: float | None = None, seed: int = 0, fallback: str | None = None,
              progress: bool = True, settings: InferenceSettings | None = None,
              finetune_s: float | None = None) -> OrderResult:
        """A cheap elimination order for the Jacobian of ``f(*example_args)``.

        Args:
          f: a JAX function (or a traced :class:`~alphagrad.graph.Graph`).
          *example_args: example arguments (only shapes and dtypes matter).
          budget_s: seconds for the whole search, compilation excluded (default 5).
          seed: seed of the sampled orders and of annealing.
          fallback: ``"markowitz"``: a graph over the model's vertex limit gets annealing
            from the baselines, without the network, with a warning, instead of an error.
          progress: show a progress bar (seconds of the budget spent, best cost so far).
          settings: the schedule's :class:`~alphagrad.inference.InferenceSettings`.
          finetune_s: first adapt a copy of the network to this graph by this many
            seconds of AlphaZero self-play (:meth:`finetune`; compiling excluded), then
            run the schedule with it, the self-play games' cheapest order competing. Off
            by default: on the CPU the same seconds spent in the schedule measure better
            (``python -m eval.bench_finetune``).

        Raises:
          TypeError, ValueError: an argument of the wrong kind or out of range (checked
            before any work): ``budget_s`` must be a finite number > 0 or None, ``seed``
            an integer in [0, 2**32), ``finetune_s`` None or a finite number in (0, 3600].
          alphagrad.engine.GraphTooLargeError: the graph has more vertices than the model
            handles (pass ``fallback="markowitz"``), or, with ``finetune_s``, than the JAX
            game of the fine-tune holds (1,024).
        """
        from alphagrad import engine

        _check_order_args(f, example_args, budget_s, seed, fallback, progress, settings)
        if finetune_s is not None:
            from alphagrad.selfplay import check_finetune_s

            finetune_s = check_finetune_s(finetune_s)
        graph = f if isinstance(f, Graph) else _trace(f, *example_args)
        budget_s = 5.0 if budget_s is None else float(budget_s)
        settings = settings or InferenceSettings()
        key = (graph.fingerprint, budget_s, int(seed), settings, finetune_s)
        if key in self._cache:
            return self._cache[key]
        make_player = self.player
        if graph.num_vertices > self.max_vertices:
            if fallback != "markowitz":
                raise engine.GraphTooLargeError(
                    f"the graph has {graph.num_vertices} vertices, more than this model's limit of "
                    f"{self.max_vertices}; pass fallback='markowitz' to anneal from the classic orders "
                    f"without the network, or use alphagrad.baselines.anneal(graph)")
            import warnings

            warnings.warn(f"the graph has {graph.num_vertices} vertices, more than the model's limit of "
                          f"{self.max_vertices}: annealing from the classic orders without the network",
                          stacklevel=2)
            make_player = lambda *a, **k: None  # noqa: E731
            finetune_s = None
        extra, tuned = {}, None
        if finetune_s is not None and graph.intermediates:  # else nothing to play
            tuned = self.finetune(graph, seconds=finetune_s, seed=seed, settings=settings.finetune)
            make_player, extra = tuned.player, {"fine-tune self-play": tuned.finetuned.order}
        result = find_order(graph, make_player, budget_s, int(seed), settings, bool(progress), extra)
        if tuned is not None:
            t = tuned.finetuned
            result.finetune = {"seconds": t.seconds, "compile_seconds": t.compile_seconds, "games": t.games,
                               "updates": t.updates, "cost": t.cost, "greedy_before": t.greedy_before,
                               "greedy_cost": t.greedy_cost}
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
        from alphagrad import engine
        from alphagrad.evaluator import Evaluator
        from alphagrad.scoring import best_baseline

        graph = f if isinstance(f, Graph) else _trace(f, *example_args)
        if graph.num_vertices > self.max_vertices:
            raise engine.GraphTooLargeError(
                f"the graph has {graph.num_vertices} vertices, more than this model's limit of "
                f"{self.max_vertices}; alphagrad.baselines.markowitz(graph) or "
                f"alphagrad.baselines.anneal(graph) give orders for it")
        if not graph.intermediates:
            return []
        ev = Evaluator(graph, "exact")
        scale = max(best_baseline(graph, evaluator=ev), 1)
        return self.player(graph, scale, ev).play()


def _trace(f, *args) -> Graph:
    from alphagrad.trace import trace

    return trace(f, *args)


def _check_order_args(f, example_args, budget_s, seed, fallback, progress, settings):
    """Every argument of :meth:`Agent.order`, checked before any work (TypeError for a wrong
    kind of value, ValueError for a value out of range)."""
    if isinstance(f, Graph):
        if example_args:
            raise TypeError(f"order(graph, ...) takes no example arguments (the graph is already traced); "
                            f"got {len(example_args)}")
    elif not callable(f):
        raise TypeError(f"f must be a JAX function (with its example arguments) or a traced alphagrad Graph, "
                        f"not {type(f).__name__}")
    checks.check_budget(budget_s, "budget_s", allow_none=True)  # the same checks as anneal's
    checks.check_seed(seed)
    if not isinstance(progress, (bool, np.bool_)):
        raise TypeError(f"progress must be True or False, not {progress!r}")
    if fallback not in (None, "markowitz"):
        raise ValueError(f"fallback must be None or 'markowitz', got {fallback!r}")
    if settings is not None and not isinstance(settings, InferenceSettings):
        raise TypeError(f"settings must be an alphagrad.inference.InferenceSettings, not {type(settings).__name__}")


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
