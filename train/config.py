"""Training configuration: dataclasses, loaded from one YAML file per experiment.

Loading is strict: an unknown key, a value of the wrong type, a dataset path that does
not exist or sizes that do not fit the model stop with a message before training starts.
"""

from __future__ import annotations

import dataclasses
import math
import os
import types
import typing

import yaml

from alphagrad.hub.format import NETWORK_LIMITS
from alphagrad.network import NetworkConfig


class ConfigError(ValueError):
    """The configuration is invalid; the message says which key and why."""


@dataclasses.dataclass(frozen=True)
class DataConfig:
    """Which graphs to train and validate on.

    Attributes:
      path: a dataset built by ``python -m data_gen build`` and labelled by ``python -m
        data_gen label`` (graphs in ``path``, targets in ``path/labels``).
      train_split, validation_split: split names.
      max_train_graphs: use at most this many training graphs (0: all).
      max_validation_graphs: validate on the first this many graphs of the split.
      large_validation: move this many training graphs of at least ``large_from``
        intermediates (those of the smallest hashes, labelled by the first of ``labels``)
        from training to validation: the validation split holds small graphs only, so
        without them the best model is picked blind to large ones (``val_large_ratio``
        reports them apart).
      large_from: what counts as large (the held-out large graphs have 300+ intermediates).
      max_vertices: graphs with more vertices are left out (and counted in the log);
        at most the largest bucket.
      labels: label sets under ``path`` to train on, each made by ``python -m data_gen
        label`` (``labels``: states of annealed orders; more, e.g. ``dagger-1``: states
        a policy reached, from ``--policy MODEL --name dagger-1``). Every labelled state
        of every set is used once per epoch; validation reads the first set.
      repeats: per set of ``labels`` (the same length; empty: 1 each), how many times
        an epoch uses each of its states: a small new set among hundreds of thousands of
        states is otherwise seen a fraction of a time in a fine-tune of a fraction of an
        epoch.
      extra_paths: more datasets, built and labelled the same way (e.g. ``data/stepped``
        from ``python -m data_gen build --stepped-train N``), whose training split joins
        the training graphs with the label sets ``extra_labels`` (graphs already in
        ``path`` are left out, counted as duplicates); validation stays on ``path``.
      extra_repeats: per set of ``extra_labels``, as ``repeats`` for ``labels``.
    """

    path: str = "data/train"
    labels: tuple = ("labels",)
    repeats: tuple = ()
    extra_paths: tuple = ()
    extra_labels: tuple = ("labels",)
    extra_repeats: tuple = ()
    train_split: str = "train"
    validation_split: str = "validation"
    max_train_graphs: int = 0
    max_validation_graphs: int = 64
    large_validation: int = 0
    large_from: int = 300
    max_vertices: int = 2048


@dataclasses.dataclass(frozen=True)
class SelfPlayConfig:
    """AlphaZero self-play (``mode: selfplay``, :mod:`train.selfplay`): Gumbel MuZero
    (mctx) with the network as prior plays batches of games on a pool of graphs; every
    game leaves ``states_per_game`` of its states, with the search's policy and the cost
    the game then still spent, in a replay buffer the updates draw from.

    Attributes:
      games: games a step plays at once (one batch; a multiple of the devices).
      simulations: simulations per move; max_considered: actions Gumbel MuZero considers
        at the root; gumbel_scale: the scale of its Gumbel noise (0: none).
      states_per_game: states of each game kept as targets (drawn at random along it).
      replay: games the replay buffer holds (the oldest go first).
      batch_games: games (graph slots, ``states_per_game`` states each) per update; the
        updates start once the buffer holds that many.
      updates_per_step: updates after each step's games.
      vertices, structures: the padded size of every game (vertices at most the engine's
        limit); graphs that do not fit are left out of the pool (and counted in the log).
      families: where the pool's graphs come from: ``random`` (``data_gen`` random
        programs) and the example zoo's families (``published``, ``minpack``, ...).
      random_ops: the smallest and largest operation count of a random program.
      graphs: random programs in the pool (next to every zoo graph of ``families`` that fits).
      validation: zoo families whose graphs validate the network (its greedy order's cost
        over the best baseline's, ``val_ratio``, every ``eval_every`` steps; the best
        model so far goes to ``WORKDIR/best_model``); they must not be in ``families``.
      validation_graphs: random programs (drawn from their own seed, none in the pool)
        validating beside them (``val_random_ratio``).
      devices: devices the batch is split over (``jax.sharding``); 0: all there are.
      convention: the cost the reward counts (:func:`alphagrad.cost`'s conventions:
        multiplications, ``exact`` or ``published``, or the time model's modelled
        seconds, ``time`` (this platform's) or ``time:PLATFORM``, e.g. ``time:cpu`` to
        train on a TPU for the CPU's clock).
    """

    games: int = 8
    simulations: int = 16
    max_considered: int = 16
    gumbel_scale: float = 1.0
    states_per_game: int = 8
    replay: int = 512
    batch_games: int = 8
    updates_per_step: int = 1
    vertices: int = 128
    structures: int = 256
    families: tuple = ("random",)
    random_ops: tuple = (20, 60)
    graphs: int = 64
    validation: tuple = ("published",)
    validation_graphs: int = 8
    devices: int = 0
    convention: str = "exact"

    def validate(self) -> None:
        """Raises :class:`ConfigError` for values that cannot work."""
        from alphagrad.engine import MAX_VERTICES

        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, float) and not math.isfinite(value):
                raise ConfigError(f"selfplay.{f.name} must be a finite number, got {value}")
            if isinstance(value, int) and f.name not in ("devices", "validation_graphs") and not value > 0:
                raise ConfigError(f"selfplay.{f.name} must be positive, got {value}")
        overlap = sorted(set(self.validation) & set(self.families) - {"random"})
        if overlap:
            raise ConfigError(f"selfplay.validation {overlap} also in selfplay.families: validation graphs must be "
                              f"held out of the pool; remove them from one of the two")
        if self.validation_graphs < 0:
            raise ConfigError(f"selfplay.validation_graphs must be >= 0, got {self.validation_graphs}")
        if self.devices < 0 or self.gumbel_scale < 0:
            raise ConfigError(f"selfplay.devices (0: all) and selfplay.gumbel_scale must be >= 0, got "
                              f"{self.devices} and {self.gumbel_scale}")
        if self.vertices > MAX_VERTICES:
            raise ConfigError(f"selfplay.vertices={self.vertices} is over the game's padded limit of {MAX_VERTICES} "
                              f"vertices (its state is a dense vertices x vertices matrix); lower it")
        from alphagrad.time_model import is_time

        if self.convention not in ("exact", "published") and not is_time(self.convention):
            raise ConfigError(f"selfplay.convention must be exact, published (multiplications) or time / "
                              f"time:PLATFORM (the time model's modelled seconds), got {self.convention!r}")
        if self.replay < self.batch_games:
            raise ConfigError(f"selfplay.replay={self.replay} holds fewer games than one update reads "
                              f"(selfplay.batch_games={self.batch_games})")
        lo, hi = (list(self.random_ops) + [0, 0])[:2]
        if len(self.random_ops) != 2 or not 1 <= lo <= hi <= 3000:
            raise ConfigError(f"selfplay.random_ops must be [smallest, largest] operation counts with "
                              f"1 <= smallest <= largest <= 3000, got {list(self.random_ops)}")
        if self.devices and (self.games % self.devices or self.batch_games % self.devices):
            raise ConfigError(f"selfplay.games={self.games} and selfplay.batch_games={self.batch_games} must be "
                              f"multiples of selfplay.devices={self.devices} (each device plays its share)")


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """One experiment: supervised training of the policy-value network on labelled states.

    Attributes:
      seed: every random choice (initialisation, batch order) derives from it and the step.
      steps: gradient updates.
      tokens_per_batch: about how many (state, vertex) pairs one update decodes: a batch
        holds ``tokens_per_batch // (bucket * states_per_graph)`` graphs of one bucket
        (at least one).
      states_per_graph: labelled states of one graph in a batch (they share its encoder pass).
      buckets: padded vertex counts (powers of two); a graph trains in the smallest it fits,
        with edges padded to ``edges_per_vertex`` times the bucket.
      learning_rate, warmup_steps, weight_decay, grad_clip: AdamW with linear warmup and
        cosine decay to 10% over ``steps``.
      value_weight: weight of the value loss next to the policy loss.
      regret_weight: weight of the policy's expected regret (``log1p`` of what its moves
        add to the completed cost, from the labels' ``regrets``) next to the
        cross-entropy: a move that multiplies the cost is punished more than one that is
        merely not the best (0: cross-entropy alone).
      reinforce_weight: weight of the REINFORCE term on the states of rollout label sets
        (``python -m data_gen label --rollouts``: the policy's own sampled orders, each
        move weighed by its order's advantage; :func:`alphagrad.network.policy_loss`).
      stakes_weight: a graph's training states weigh ``(m / c) ** stakes_weight``, with
        ``m / c`` what Markowitz's order costs over the label's (capped at 4): graphs
        where playing by the current elimination cost loses most, where a wrong move is
        dear, weigh more (0: every state alike). Validation is unweighted.
      max_vertices: the trained model's size limit at inference (recorded in its config).
      checkpoint_every, keep_checkpoints: orbax checkpoints (the last K and the best).
      eval_every: validation every this many steps (and at the end).
      init_from: a model directory (``alphagrad/pretrained``, ``RUN/best_model``) whose
        weights start the run instead of a random initialisation (same network sizes);
        "" for a random start.
      fresh_inputs: the inputs ``init_from``'s model was saved without (loaded with zero
        weights, so that it plays as before) start from this run's random initialisation
        instead: from zero, a new input's weights barely move in a short run (measured: the
        last move's touch reached a weight norm of 0.06 in 1,500 steps, the inputs trained
        from the start 0.9-6.6).
      ema_decay: 0 (off), or the decay of an exponential moving average of the weights
        (Polyak averaging, ``optax.incremental_update``), started at the first weights:
        validation, the best model and the checkpoints' selection use the average, so a
        checkpoint is not picked for one lucky stretch of updates (without it a run's
        ``val_ratio`` moved by 1-4% between checkpoints 250 steps apart, and the model it
        picked was no better on held-out graphs). A horizon of ``1 / (1 - ema_decay)`` steps.
      mode: ``supervised`` (labelled states of ``data``) or ``selfplay`` (AlphaZero:
        :class:`SelfPlayConfig`; ``steps`` counts self-play steps, ``data`` is not read).
    """

    seed: int = 0
    steps: int = 20000
    tokens_per_batch: int = 16384
    states_per_graph: int = 16
    buckets: tuple = (64, 128, 256, 512, 1024, 2048)
    edges_per_vertex: int = 4
    learning_rate: float = 1e-3
    warmup_steps: int = 500
    weight_decay: float = 1e-4
    grad_clip: float = 1.0
    value_weight: float = 0.25
    regret_weight: float = 0.0
    stakes_weight: float = 0.0
    reinforce_weight: float = 1.0
    max_vertices: int = 16384
    checkpoint_every: int = 500
    keep_checkpoints: int = 3
    eval_every: int = 1000
    init_from: str = ""
    fresh_inputs: bool = False
    ema_decay: float = 0.0
    mode: str = "supervised"
    network: NetworkConfig = NetworkConfig()
    data: DataConfig = DataConfig()
    selfplay: SelfPlayConfig = SelfPlayConfig()

    def validate(self, check_paths: bool = True) -> None:
        """Raises :class:`ConfigError` for values that cannot work."""
        settings = {**{f.name: getattr(self, f.name) for f in dataclasses.fields(self)},
                    **{f"data.{f.name}": getattr(self.data, f.name) for f in dataclasses.fields(self.data)}}
        for name, value in settings.items():  # NaN passes every comparison below; inf trains on inf
            if isinstance(value, float) and not math.isfinite(value):
                raise ConfigError(f"{name} must be a finite number, got {value}")
        positive = ["steps", "tokens_per_batch", "states_per_graph", "edges_per_vertex", "checkpoint_every",
                    "keep_checkpoints", "eval_every", "max_vertices", "learning_rate", "grad_clip",
                    "data.max_vertices"]
        for name in positive:
            if not settings[name] > 0:
                raise ConfigError(f"{name} must be positive, got {settings[name]}")
        at_least_zero = ["seed", "weight_decay", "value_weight", "stakes_weight", "regret_weight",
                         "reinforce_weight", "data.max_train_graphs", "data.max_validation_graphs"]
        for name in at_least_zero:
            if not settings[name] >= 0:
                raise ConfigError(f"{name} must be >= 0, got {settings[name]}")
        if not 0 <= self.ema_decay < 1:
            raise ConfigError(f"ema_decay must be in [0, 1) (0: no average of the weights; 0.999: about the "
                              f"last 1,000 steps), got {self.ema_decay}")
        if self.warmup_steps < 0:
            raise ConfigError(f"warmup_steps must be >= 0, got {self.warmup_steps}")
        b = list(self.buckets)
        if not b or b != sorted(set(b)) or any(x < 32 or x & (x - 1) for x in b):
            raise ConfigError(f"buckets must be increasing powers of two >= 32, got {b}")
        if self.data.max_vertices > b[-1]:
            raise ConfigError(
                f"data.max_vertices={self.data.max_vertices} is larger than the largest bucket {b[-1]}: "
                f"such graphs cannot be batched; add a bucket of at least {self.data.max_vertices} "
                f"(a power of two) or lower data.max_vertices")
        n = self.network
        if min(n.dim, n.heads, n.layers) <= 0 or n.dim % n.heads:
            raise ConfigError(f"network.dim={n.dim} must be a positive multiple of network.heads={n.heads}, "
                              f"and network.layers={n.layers} positive")
        if n.dim > MAX_DIM or n.layers > MAX_LAYERS:
            raise ConfigError(f"network dim={n.dim}, layers={n.layers} is larger than this model family's "
                              f"limits (dim <= {MAX_DIM}, layers <= {MAX_LAYERS}): a network that size "
                              f"would not be cheap per move; lower network.dim or network.layers")
        if not 1 <= n.encodings <= MAX_ENCODINGS:
            raise ConfigError(f"network.encodings={n.encodings} must be from 1 (encode the traced graph once) to "
                              f"{MAX_ENCODINGS} (each encoding costs an encoder pass a game)")
        if self.data.large_validation < 0 or self.data.large_from < 1:
            raise ConfigError(f"data.large_validation must be >= 0 and data.large_from >= 1, got "
                              f"{self.data.large_validation} and {self.data.large_from}")
        if len(set(self.data.labels)) != len(self.data.labels):
            raise ConfigError(f"data.labels {list(self.data.labels)} names a label set twice")
        for counts, sets in (("repeats", "labels"), ("extra_repeats", "extra_labels")):
            given, names = getattr(self.data, counts), getattr(self.data, sets)
            if given and (len(given) != len(names) or min(given) < 1):
                raise ConfigError(f"data.{counts} {list(given)} must give each of data.{sets} {list(names)} a "
                                  f"count >= 1 (or be empty: once each)")
        if self.mode not in ("supervised", "selfplay"):
            raise ConfigError(f"mode must be supervised or selfplay, got {self.mode!r}")
        if self.mode == "selfplay":
            self.selfplay.validate()
        if self.fresh_inputs and not self.init_from:
            raise ConfigError("fresh_inputs starts the inputs init_from's model lacks afresh, but init_from is "
                              "\"\" (a random start): set init_from to a model directory or fresh_inputs to false")
        if check_paths and self.init_from and not os.path.isfile(os.path.join(self.init_from, "config.json")):
            raise ConfigError(f"init_from {self.init_from!r} is not a model directory (no config.json); give "
                              f"the directory of a trained model (alphagrad/pretrained, RUN/best_model) or \"\"")
        if self.mode == "selfplay":  # no data to read
            return
        if check_paths and os.path.exists(self.data.path) and not os.path.isdir(self.data.path):
            raise ConfigError(
                f"data.path {self.data.path!r} is a file, not a dataset; set data.path (or --set "
                f"data.path=DIR) to the directory written by `python -m data_gen build --out DIR`")
        if check_paths and not os.path.isdir(self.data.path):
            raise ConfigError(
                f"data.path {self.data.path!r} does not exist; build a dataset first, e.g. "
                f"`python -m data_gen build --out {self.data.path} --num-random 1000 --seed 0`, then "
                f"`python -m data_gen label --data {self.data.path}`, or set data.path (--set data.path=DIR)")
        for extra in self.data.extra_paths:
            if check_paths and not os.path.isdir(extra):
                raise ConfigError(
                    f"data.extra_paths names {extra!r}, which is not a dataset directory; build and label it "
                    f"(`python -m data_gen build --out {extra} ...`, `python -m data_gen label --data {extra}`) "
                    f"or remove it from data.extra_paths")

    def to_dict(self) -> dict:
        return _to_plain(dataclasses.asdict(self))


#: Largest network a config may ask for (the decoder runs on every move of every order).
MAX_DIM = 512
MAX_LAYERS = 12
#: The most encodings a game a model config may hold.
MAX_ENCODINGS = NETWORK_LIMITS["encodings"]


def _to_plain(x):
    if isinstance(x, dict):
        return {k: _to_plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_to_plain(v) for v in x]
    return x


def _convert(cls, data, where: str):
    if not isinstance(data, dict):
        raise ConfigError(f"{where or 'the config'} must be a mapping, got {type(data).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ConfigError(f"unknown key(s) {', '.join(where + k for k in unknown)}; "
                          f"known keys here: {', '.join(sorted(fields))}")
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for name, value in data.items():
        kwargs[name] = _value(hints[name], value, where + name,
                              empty_ok=fields[name].default == () or name == "validation")  # none: no zoo graphs
    return cls(**kwargs)


def _value(tp, value, key: str, empty_ok: bool = False):
    """``value`` of type ``tp`` for ``key``; a list may be empty where the field's default is."""
    if dataclasses.is_dataclass(tp):
        return _convert(tp, value, key + ".")
    if tp is tuple or typing.get_origin(tp) is tuple:
        kind = str if key.endswith(("labels", "paths", "families", "validation")) else int
        if not isinstance(value, (list, tuple)) or not (value or empty_ok) or not all(type(v) is kind for v in value):
            raise ConfigError(f"{key} must be a{'' if empty_ok else ' non-empty'} list of "
                              f"{'names' if kind is str else 'integers'}, got {value!r}")
        return tuple(value)
    if tp is float:
        if type(value) not in (int, float):
            raise ConfigError(f"{key} must be a number, got {value!r} ({type(value).__name__})")
        return float(value)
    if tp in (int, str, bool):
        if type(value) is not tp:
            raise ConfigError(f"{key} must be of type {tp.__name__}, got {value!r} ({type(value).__name__})")
        return value
    if isinstance(tp, types.UnionType):  # pragma: no cover - no optional fields yet
        return value
    raise ConfigError(f"{key}: unsupported type {tp}")  # pragma: no cover


def from_dict(data: dict) -> TrainConfig:
    return _convert(TrainConfig, data, "")


def build_command(config_path: str, data_path: str) -> str | None:
    """The ``python -m data_gen build --out DATA_PATH ...`` command that a config file's
    comments give for its dataset (each file in ``train/configs/`` names one), or None."""
    try:
        with open(config_path) as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in lines:
        text = line.strip().lstrip("#").strip()
        words = text.split()
        if text.startswith("python -m data_gen build") and "--out" in words:
            i = words.index("--out")
            if i + 1 < len(words) and os.path.normpath(words[i + 1]) == os.path.normpath(data_path):
                return text
    return None


def _merge(base: dict, over: dict) -> dict:
    """``over`` laid on ``base``: nested mappings merge key by key, anything else replaces."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def read_yaml(path: str, _seen: tuple = ()) -> dict:
    """A config file's settings with its ``base:`` chain applied (a path relative to the
    file naming the config it changes; the file's own keys win, nested ones key by key)."""
    if not os.path.isfile(path):
        raise ConfigError(f"config file {path!r} does not exist (see train/configs/)")
    real = os.path.realpath(path)
    if real in _seen:
        raise ConfigError(f"config {path!r} is its own base (a cycle of base: keys)")
    with open(path) as f:
        try:
            data = yaml.safe_load(f) or {}
        except yaml.YAMLError as e:
            raise ConfigError(f"{path} is not valid YAML: {e}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a mapping of settings, not {type(data).__name__}")
    base = data.pop("base", None)
    if base is None:
        return data
    if not isinstance(base, str) or not base:
        raise ConfigError(f"{path}: base must name a config file (a path relative to it), got {base!r}")
    base_path = os.path.join(os.path.dirname(path), base)
    if not os.path.isfile(base_path):
        raise ConfigError(f"{path}: its base {base!r} does not exist (looked for {base_path})")
    return _merge(read_yaml(base_path, _seen + (real,)), data)


def load(path: str, overrides: dict | None = None) -> TrainConfig:
    """Reads a YAML config (over its ``base:``); ``overrides`` ({"data.path": ..., ...})
    replace single keys."""
    return from_dict(overridden(read_yaml(path), overrides))


def overridden(data: dict, overrides: dict | None) -> dict:
    """``data`` (a config's settings) with ``overrides`` ({"data.path": ..., ...})
    replacing single keys (in place)."""
    for dotted, value in (overrides or {}).items():
        node = data
        *parents, leaf = dotted.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return data
