"""The pretrained agent: elimination orders for new functions in seconds.

    agent = alphagrad.from_pretrained()          # the model shipped in the package
    result = agent.order(f, *args, budget_s=10)  # network orders beside annealing
    jac = alphagrad.jacobian(f, order=result)(*args)

:meth:`Agent.order` traces ``f`` and runs the budgeted schedule of
:mod:`alphagrad.inference`: the baselines, the network's greedy and sampled orders
(:class:`alphagrad.policy.Player`: one encoder pass per graph, compiled rollouts) played
beside annealing from the baselines, the cheapest order winning. The result is never
worse than the best baseline; results are cached by graph fingerprint and settings.
:meth:`Agent.greedy_order` is the network's order alone.
"""

from __future__ import annotations

import dataclasses
import numbers
import os

import jax
import jax.numpy as jnp
import numpy as np

from alphagrad import baselines, hub, policy
from alphagrad.graph import Graph
from alphagrad.inference import InferenceSettings, OrderResult, find_order
from alphagrad.network import NetworkConfig, PolicyNet

__all__ = ["Agent", "OrderResult", "from_pretrained", "model_config"]

#: The model shipped inside the package (``alphagrad.from_pretrained()``).
BUNDLED_MODEL = os.path.join(os.path.dirname(__file__), "pretrained")

#: The largest ``max_vertices`` a model config may declare, and the largest network.
CONFIG_SIZE_LIMIT = 1 << 20
NETWORK_LIMITS = {"dim": 512, "heads": 64, "layers": 12, "encodings": 64}


def model_config(network: NetworkConfig, max_vertices: int) -> dict:
    """The config.json content of a model (the hub adds its type and format version)."""
    return {"network": dataclasses.asdict(network), "max_vertices": int(max_vertices), "convention": "exact"}


def init_params(net: PolicyNet, key):
    """Fresh variables of ``net`` (shapes do not depend on the graph)."""
    V, E = 64, 128
    z = jnp.zeros
    return net.init(key, z((V, policy.NUM_STATIC)), z(E, jnp.int32), z(E, jnp.int32), z((E, policy.NUM_EDGE)),
                    jnp.int32(0), jnp.ones(V, bool), z((1, V, policy.NUM_DYNAMIC)), jnp.ones((1, V), bool), z(1))


def widen(params: dict, dim: int) -> dict:
    """``params`` of a model saved before its network read the last features of
    :func:`alphagrad.policy.dynamic_features` (the lookahead, the pressure, the frontier,
    then the last move's touch, then the costs in multiplications, then the growth: the decoder's first
    layer has ``dim + NUM_DYNAMIC - k`` input rows) or of
    :func:`alphagrad.policy.graph_inputs` (the forward and reverse costs, then the cost in
    multiplications: the encoder's first layer has ``MODES`` or ``STATIC_ABSOLUTE`` input
    rows; the edge costs in multiplications: each block's message layers have
    ``EDGE_ABSOLUTE + 3`` input rows), with zero rows for them: the policy and value are
    unchanged (and the rollout skips computing a lookahead, pressure, touch or growth of zero
    weight; the frontier counts are cheap and computed anyway). Other params are returned
    as they are."""
    for path, rows, most in input_layers(params, dim):
        params = _widen(params, path, rows, most, dim)
    return params


def input_layers(params: dict, dim: int) -> list:
    """``(path, rows, most)`` of each layer that reads the inputs older models lack: its
    path in ``params["params"]``, its input rows and how many of the last ones may be
    missing (what :func:`widen` pads, and ``fresh_inputs`` in training starts afresh)."""
    try:
        blocks = sorted(k for k in params["params"] if k.startswith("blocks_"))
    except (KeyError, TypeError):
        blocks = []
    messages = policy.NUM_EDGE + 3  # the edge's features and its direction
    return [(("first",), dim + policy.NUM_DYNAMIC, policy.NUM_DYNAMIC - policy.LOOKAHEAD),
            (("embed",), policy.NUM_STATIC, policy.NUM_STATIC - policy.MODES),
            *(((b, layer), messages, policy.NUM_EDGE - policy.EDGE_ABSOLUTE) for b in blocks for layer in ("ek", "ev"))]


def _widen(params: dict, path: tuple, rows: int, most: int, dim: int) -> dict:
    """``params`` with the kernel of the layer at ``path`` padded with zero input rows up
    to ``rows``, if it lacks at most ``most`` of them (else unchanged: left to the shape
    check)."""
    try:
        node = params["params"]
        for key in path:
            node = node[key]
        kernel = node["kernel"]
    except (KeyError, TypeError):
        return params
    shape = tuple(getattr(kernel, "shape", ()))
    out = int(np.prod(shape[1:])) if len(shape) >= 2 else 0
    missing = rows - shape[0] if out == dim else 0
    if not 0 < missing <= most:
        return params
    wide = {**node, "kernel": np.concatenate([np.asarray(kernel), np.zeros((missing, *shape[1:]), np.float32)])}
    return {**params, "params": _replace(params["params"], path, wide)}


def _replace(tree: dict, path: tuple, value) -> dict:
    """``tree`` with the entry at ``path`` replaced by ``value`` (copies along the path)."""
    if len(path) == 1:
        return {**tree, path[0]: value}
    return {**tree, path[0]: _replace(tree[path[0]], path[1:], value)}


class Agent(hub.AgentHubMixin):
    """A pretrained policy-value network that proposes elimination orders.

    Load one with :func:`alphagrad.from_pretrained`; save with ``save_pretrained(dir)``;
    publish with ``push_to_hub(repo_id)`` (``dry_run=True`` writes the folder only).
    """

    def __init__(self, config: dict, params, card: str | None = None):
        self.config = _check_config(config)
        self.net = PolicyNet(NetworkConfig(**self.config["network"]))
        self.params = jax.tree_util.tree_map(jnp.asarray, params)
        self.card = card
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
        config = _check_config(config)
        net = PolicyNet(NetworkConfig(**config["network"]))
        expected = jax.eval_shape(lambda: init_params(net, jax.random.key(0)))
        params = widen(params, config["network"]["dim"])
        hub.check_shapes(expected, params)
        return cls(config, params, **kwargs)

    # -- orders ---------------------------------------------------------------------

    def player(self, graph: Graph, scale: float, ev=None, encode: bool = True) -> policy.Player:
        """The network's :class:`~alphagrad.policy.Player` on ``graph`` (costs relative to
        ``scale``, the best baseline's cost; ``encode=False``: a warm-up, see Player)."""
        return policy.Player(self.net, self.params, graph, scale, ev, encode)

    def order(self, f, *example_args, budget_s: float | None = None, seed: int = 0, fallback: str | None = None,
              progress: bool = True, settings: InferenceSettings | None = None) -> OrderResult:
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

        Raises:
          TypeError, ValueError: an argument of the wrong kind or out of range (checked
            before any work): ``budget_s`` must be a finite number > 0 or None, ``seed``
            an integer in [0, 2**32).
          alphagrad.engine.GraphTooLargeError: the graph has more vertices than the model
            handles (pass ``fallback="markowitz"``).
        """
        from alphagrad import engine

        _check_order_args(f, example_args, budget_s, seed, fallback, progress, settings)
        graph = f if isinstance(f, Graph) else _trace(f, *example_args)
        budget_s = 5.0 if budget_s is None else float(budget_s)
        settings = settings or InferenceSettings()
        key = (graph.fingerprint, budget_s, int(seed), settings)
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
        result = find_order(graph, make_player, budget_s, int(seed), settings, bool(progress))
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
        from alphagrad.inference import baseline_orders

        graph = f if isinstance(f, Graph) else _trace(f, *example_args)
        if graph.num_vertices > self.max_vertices:
            raise engine.GraphTooLargeError(
                f"the graph has {graph.num_vertices} vertices, more than this model's limit of "
                f"{self.max_vertices}; alphagrad.baselines.markowitz(graph) or "
                f"alphagrad.baselines.anneal(graph) give orders for it")
        if not graph.intermediates:
            return []
        ev = Evaluator(graph, "exact")
        scale = max(min(ev.cost(o) for o in baseline_orders(graph, ev).values()), 1)
        return self.player(graph, scale, ev).play()


def _trace(f, *args) -> Graph:
    from alphagrad.trace import trace

    return trace(f, *args)


_CONFIG_KEYS = ("network", "max_vertices", "convention")
_NETWORK_KEYS = tuple(f.name for f in dataclasses.fields(NetworkConfig))
#: Network keys a config saved before them may lack, with the value such a model plays.
_NETWORK_DEFAULTS = {"encodings": 1}


def _config_error(problem: str) -> hub.NotAnAlphagradModelError:
    return hub.NotAnAlphagradModelError(
        f"the model config is not one this alphagrad reads: {problem}. A config holds 'network' "
        f"({', '.join(_NETWORK_KEYS)}: positive integers, dim a multiple of heads, at most {NETWORK_LIMITS}), "
        f"'max_vertices' (an integer from 1 to {CONFIG_SIZE_LIMIT}) and optionally 'convention' ('exact'), as "
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
    missing = [k for k in _CONFIG_KEYS[:2] if k not in config]
    unknown = sorted(str(k) for k in config if k not in _CONFIG_KEYS)
    if missing or unknown:
        raise _config_error("; ".join(([f"missing {missing}"] if missing else [])
                                      + ([f"unknown keys {unknown}"] if unknown else [])))
    net = config["network"]
    if not isinstance(net, dict):
        raise _config_error(f"'network' must be a dict, got {net!r}")
    net = {**_NETWORK_DEFAULTS, **net}
    missing = [k for k in _NETWORK_KEYS if k not in net]
    unknown = sorted(str(k) for k in net if k not in _NETWORK_KEYS)
    if missing or unknown:
        raise _config_error("; ".join(([f"network is missing {missing}"] if missing else [])
                                      + ([f"network has unknown keys {unknown}"] if unknown else [])))
    net = {k: _config_int(net[k], f"network.{k}", 1, NETWORK_LIMITS[k]) for k in _NETWORK_KEYS}
    if net["dim"] % net["heads"]:
        raise _config_error(f"network.dim ({net['dim']}) must be a multiple of network.heads ({net['heads']})")
    convention = config.get("convention", "exact")
    if convention != "exact":
        raise _config_error(f"convention must be 'exact' (the cost model the agent plays), got {convention!r}")
    return {"network": net,
            "max_vertices": _config_int(config["max_vertices"], "max_vertices", 1, CONFIG_SIZE_LIMIT),
            "convention": convention}


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
    baselines.check_budget(budget_s, "budget_s", allow_none=True)  # the same checks as anneal's
    baselines.check_seed(seed)
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
