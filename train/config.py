"""Training configuration: dataclasses, loaded from one YAML file per experiment.

Loading is strict: an unknown key, a value of the wrong type, a dataset path that does
not exist or sizes that do not fit the model stop with a message before training starts.
"""

from __future__ import annotations

import dataclasses
import os
import types
import typing

import yaml

from alphagrad.network import NetworkConfig


class ConfigError(ValueError):
    """The configuration is invalid; the message says which key and why."""


@dataclasses.dataclass(frozen=True)
class DataConfig:
    """Which graphs to train and validate on.

    Attributes:
      path: a dataset built by ``python -m data_gen build`` (``datasets.load_from_disk``).
      train_split, validation_split: split names.
      max_train_graphs: use at most this many training graphs (0: all).
      max_validation_graphs: validate on the first this many graphs of the split.
      max_vertices: graphs with more vertices are left out (and counted in the log);
        at most the model's largest bucket.
    """

    path: str = "data/train"
    train_split: str = "train"
    validation_split: str = "validation"
    max_train_graphs: int = 0
    max_validation_graphs: int = 64
    max_vertices: int = 256


@dataclasses.dataclass(frozen=True)
class SearchConfig:
    """Self-play search (Gumbel MuZero, :func:`alphagrad.search.play`)."""

    simulations: int = 16
    max_considered: int = 8


@dataclasses.dataclass(frozen=True)
class WarmStartConfig:
    """Optional supervised pretraining of the policy on annealed orders before self-play.

    Attributes:
      steps: update steps on warm-start data (0: no warm start).
      graphs: training graphs whose annealed orders make the warm-start data.
      anneal_iterations: simulated-annealing moves per graph (a count, not seconds, so
        the data is the same on every machine and after a resume).
    """

    steps: int = 0
    graphs: int = 256
    anneal_iterations: int = 20000


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """One experiment.

    Attributes:
      seed: every random choice (graphs, search, initialisation) derives from it and the step.
      steps: self-play iterations; each plays ``games`` games and then makes
        ``updates_per_step`` gradient updates.
      games: games per self-play iteration (a multiple of the device count).
      batch_size: samples per gradient update (a multiple of the device count).
      buckets: padded vertex counts; a graph plays in the smallest bucket it fits.
      max_vertices: the trained model's limit at inference (recorded in its config).
      max_structures: rule tables are padded to this many structures.
      replay_capacity: samples kept per bucket (oldest dropped first).
      value_weight: weight of the value loss next to the policy loss.
      checkpoint_every, keep_checkpoints: orbax checkpoints (the last K and the best).
      eval_every: validation every this many steps (and at the end).
      devices: data-parallel devices (0: all available).
    """

    seed: int = 0
    steps: int = 1000
    games: int = 8
    updates_per_step: int = 4
    batch_size: int = 64
    learning_rate: float = 3e-4
    weight_decay: float = 1e-4
    grad_clip: float = 1.0
    value_weight: float = 1.0
    buckets: tuple = (64, 128, 256)
    max_vertices: int = 1024
    max_structures: int = 1024
    replay_capacity: int = 20000
    checkpoint_every: int = 50
    keep_checkpoints: int = 3
    eval_every: int = 50
    devices: int = 0
    network: NetworkConfig = NetworkConfig()
    search: SearchConfig = SearchConfig()
    warm_start: WarmStartConfig = WarmStartConfig()
    data: DataConfig = DataConfig()

    def validate(self, check_paths: bool = True) -> None:
        """Raises :class:`ConfigError` for values that cannot work."""
        positive = ["steps", "games", "updates_per_step", "batch_size", "replay_capacity",
                    "checkpoint_every", "keep_checkpoints", "eval_every", "max_structures"]
        for name in positive:
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be positive, got {getattr(self, name)}")
        if self.learning_rate <= 0:
            raise ConfigError(f"learning_rate must be positive, got {self.learning_rate}")
        if not self.buckets or list(self.buckets) != sorted(set(self.buckets)) or any(
                b <= 0 or b % 32 for b in self.buckets):
            raise ConfigError(f"buckets must be increasing multiples of 32, got {list(self.buckets)}")
        if self.max_vertices < self.buckets[-1] or self.max_vertices % 32:
            raise ConfigError(f"max_vertices={self.max_vertices} must be a multiple of 32 and at least "
                              f"the largest bucket {self.buckets[-1]}")
        if self.data.max_vertices > self.buckets[-1]:
            raise ConfigError(
                f"data.max_vertices={self.data.max_vertices} is larger than the largest bucket "
                f"{self.buckets[-1]}: such graphs cannot fit the model; add a bucket of at least "
                f"{-(-self.data.max_vertices // 32) * 32} or lower data.max_vertices")
        if self.network.dim % self.network.heads:
            raise ConfigError(f"network.dim={self.network.dim} is not a multiple of network.heads="
                              f"{self.network.heads}")
        if self.search.simulations < 1 or self.search.max_considered < 2:
            raise ConfigError("search.simulations must be >= 1 and search.max_considered >= 2")
        if self.warm_start.steps < 0 or self.warm_start.graphs < 0:
            raise ConfigError("warm_start.steps and warm_start.graphs must be >= 0")
        if check_paths and os.path.exists(self.data.path) and not os.path.isdir(self.data.path):
            raise ConfigError(
                f"data.path {self.data.path!r} is a file, not a dataset; set data.path (or --set "
                f"data.path=DIR) to the directory written by `python -m data_gen build --out DIR`")
        if check_paths and not os.path.isdir(self.data.path):
            raise ConfigError(
                f"data.path {self.data.path!r} does not exist; build a dataset first, e.g. "
                f"`python -m data_gen build --out {self.data.path} --num-random 1000 --seed 0`, or set "
                f"data.path (--set data.path=DIR) to one")

    def to_dict(self) -> dict:
        return _to_plain(dataclasses.asdict(self))


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
        kwargs[name] = _value(hints[name], value, where + name)
    return cls(**kwargs)


def _value(tp, value, key: str):
    if dataclasses.is_dataclass(tp):
        return _convert(tp, value, key + ".")
    if tp is tuple or typing.get_origin(tp) is tuple:
        if not isinstance(value, (list, tuple)) or not all(type(v) is int for v in value):
            raise ConfigError(f"{key} must be a list of integers, got {value!r}")
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


def load(path: str, overrides: dict | None = None) -> TrainConfig:
    """Reads a YAML config; ``overrides`` ({"data.path": ..., ...}) replace single keys."""
    if not os.path.isfile(path):
        raise ConfigError(f"config file {path!r} does not exist (see train/configs/)")
    with open(path) as f:
        try:
            data = yaml.safe_load(f) or {}
        except yaml.YAMLError as e:
            raise ConfigError(f"{path} is not valid YAML: {e}") from None
    for dotted, value in (overrides or {}).items():
        node = data
        *parents, leaf = dotted.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return from_dict(data)
