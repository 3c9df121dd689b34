"""The alphagrad model format: what a saved model holds, which models this version reads,
and how older ones are brought up to date.

A saved model is a directory (or a Hugging Face Hub model repo) holding exactly

    config.json        the model config (:func:`model_config`) plus "model_type",
                       "format_version" and "weights_sha256" (:func:`config_text`)
    model.safetensors  the flax parameters, flattened to "/"-joined keys, float32
    README.md          the model card (:mod:`alphagrad.hub.card`)

Reading and writing the files is :mod:`alphagrad.hub.files`. Here: the config's schema
and limits (:func:`check_config`), the format version (:func:`read_config` refuses
others), the weights' checksum (:func:`weights_checksum`: the sha256 of model.safetensors,
recorded when saving so that loading refuses a damaged or altered weights file; models
saved before it was recorded have none and load unchecked), the parameters a config's
network has (:func:`init_params`, :func:`check_shapes`) and the migrations of models
saved before the network read its latest inputs (:func:`widen`) or before a network key
existed (``encodings``).

Loading errors are a :class:`ModelLoadError` (a ValueError); the ones that mean "nothing
to load there" (missing directory, unknown repo or revision, offline and not cached) are
also FileNotFoundErrors.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import numbers
import re
from collections.abc import Mapping

import numpy as np

MODEL_TYPE = "alphagrad-policy-value"
FORMAT_VERSION = 2  # the config.json schema this code reads and writes (2: the sparse policy network)
CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
CARD_NAME = "README.md"
FILE_NAMES = (CONFIG_NAME, WEIGHTS_NAME, CARD_NAME)
#: The keys config.json (and the weights' metadata) always hold, with their values.
RESERVED = {"model_type": MODEL_TYPE, "format_version": FORMAT_VERSION}
#: The key of config.json that records :func:`weights_checksum` of model.safetensors.
CHECKSUM_KEY = "weights_sha256"

#: The largest ``max_vertices`` a model config may declare, and the largest network.
CONFIG_SIZE_LIMIT = 1 << 20
NETWORK_LIMITS = {"dim": 512, "heads": 64, "layers": 12, "encodings": 64}

_SHA256 = re.compile(r"[0-9a-f]{64}")

BUNDLED_HINT = "To load the bundled pretrained model instead, call `alphagrad.from_pretrained()` without an argument."
UPGRADE_HINT = "Upgrade alphagrad to read it: `pip install -U alphagrad`."


class ModelLoadError(ValueError):
    """A model could not be loaded; the message says why and what to do."""


class NotAnAlphagradModelError(ModelLoadError):
    """The directory or repo exists but does not hold an alphagrad model (or holds a broken one)."""


class UnsupportedFormatError(ModelLoadError):
    """The model was saved in a newer format than this alphagrad reads."""


class ModelNotFoundError(ModelLoadError, FileNotFoundError):
    """Nothing to load: no such directory, repo or revision, or offline and not cached."""


# ------------------------------------------------------------------------------ config.json


def model_config(network, max_vertices: int) -> dict:
    """The config of a model (a :class:`alphagrad.network.NetworkConfig` and the largest
    graph it plays); :func:`config_text` adds its type and format version."""
    return {"network": dataclasses.asdict(network), "max_vertices": int(max_vertices), "convention": "exact"}


def weights_checksum(data: bytes) -> str:
    """The checksum config.json records of the weights file's bytes ``data``: its sha256,
    as 64 hexadecimal digits."""
    return hashlib.sha256(data).hexdigest()


def config_text(config: Mapping, checksum: str | None = None) -> str:
    """config.json's exact text: config plus model_type and format_version (and
    ``checksum``, the :func:`weights_checksum` of the weights saved beside it, if given),
    sorted, indent 2."""
    if not isinstance(config, Mapping):
        raise TypeError(f"config must be a dict, not {type(config).__name__}")
    for key, value in RESERVED.items():
        if key in config and config[key] != value:
            raise ValueError(f"config[{key!r}] is reserved: it is always {value!r}, got {config[key]!r}")
    if CHECKSUM_KEY in config:
        raise ValueError(f"config[{CHECKSUM_KEY!r}] is reserved: saving records the checksum of the weights "
                         "it writes; leave it out")
    bad_keys = [k for k in config if not isinstance(k, str)]
    if bad_keys:
        raise TypeError(f"config keys must be strings, got {bad_keys!r}")
    recorded = {} if checksum is None else {CHECKSUM_KEY: checksum}
    try:
        return json.dumps({**config, **RESERVED, **recorded}, sort_keys=True, indent=2, allow_nan=False) + "\n"
    except (TypeError, ValueError) as e:
        raise ValueError(
            "config must be JSON-serializable (str keys; str/int/float/bool/None/list/dict values; "
            f"no NaN or infinity): {e}"
        ) from e


def read_config(config, where: str) -> tuple[dict, str | None]:
    """``(model config, checksum)`` of a parsed config.json (``where``: where it was read,
    for the messages): the config without model_type, format_version and the checksum,
    once the first two say this version of alphagrad reads it; the checksum of the weights
    it records (None for a model saved before checksums were recorded)."""
    if not isinstance(config, dict):
        raise NotAnAlphagradModelError(
            f"{where}: {CONFIG_NAME} holds a {type(config).__name__}, not a JSON object, so this is "
            f"not an alphagrad model. {BUNDLED_HINT}"
        )
    model_type = config.get("model_type")
    if model_type != MODEL_TYPE:
        found = "has no model_type" if model_type is None else f"has model_type {model_type!r}"
        raise NotAnAlphagradModelError(
            f"{where}: {CONFIG_NAME} {found}, expected {MODEL_TYPE!r}: this is not an alphagrad "
            f"policy-value model. {BUNDLED_HINT}"
        )
    version = config.get("format_version")
    if type(version) is not int or version < 1:
        raise NotAnAlphagradModelError(
            f"{where}: {CONFIG_NAME} has an invalid format_version {version!r} (expected an integer "
            f"from 1 to {FORMAT_VERSION}); the file is damaged. {BUNDLED_HINT}"
        )
    if version > FORMAT_VERSION:
        raise UnsupportedFormatError(
            f"{where} was saved in alphagrad model format version {version}, but this version of "
            f"alphagrad reads format versions up to {FORMAT_VERSION}. {UPGRADE_HINT}"
        )
    if version < FORMAT_VERSION:
        raise UnsupportedFormatError(
            f"{where} holds the old dense network (model format version {version}); this alphagrad's "
            f"agent is a different network (format {FORMAT_VERSION}) and cannot use its weights. Use the "
            f"bundled model (alphagrad.from_pretrained()), retrain with `python -m train`, or load it with "
            f"alphagrad 0.1 (pip install 'alphagrad<0.2')"
        )
    checksum = config.get(CHECKSUM_KEY)
    if checksum is not None and not (isinstance(checksum, str) and _SHA256.fullmatch(checksum)):
        raise NotAnAlphagradModelError(
            f"{where}: {CONFIG_NAME} has an invalid {CHECKSUM_KEY} {checksum!r} (expected 64 hexadecimal "
            f"digits, the sha256 of {WEIGHTS_NAME}); the file is damaged. Save the model again. {BUNDLED_HINT}"
        )
    return {k: v for k, v in config.items() if k not in RESERVED and k != CHECKSUM_KEY}, checksum


_CONFIG_KEYS = ("network", "max_vertices", "convention")
#: Network keys a config saved before them may lack, with the value such a model plays.
_NETWORK_DEFAULTS = {"encodings": 1}


def _network_keys() -> tuple:
    """The keys of a config's ``network``: the fields of :class:`alphagrad.network.NetworkConfig`
    (imported here, not with the module: it loads flax)."""
    from alphagrad.network import NetworkConfig

    return tuple(f.name for f in dataclasses.fields(NetworkConfig))


def _config_error(problem: str) -> NotAnAlphagradModelError:
    return NotAnAlphagradModelError(
        f"the model config is not one this alphagrad reads: {problem}. A config holds 'network' "
        f"({', '.join(_network_keys())}: positive integers, dim a multiple of heads, at most {NETWORK_LIMITS}), "
        f"'max_vertices' (an integer from 1 to {CONFIG_SIZE_LIMIT}) and optionally 'convention' ('exact'), as "
        "`alphagrad.hub.format.model_config` writes it. Re-export the model, or upgrade alphagrad "
        "(`pip install -U alphagrad`) if a newer version saved it")


def _config_int(value, name: str, low: int, high: int | None) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise _config_error(f"{name} must be an integer, got {value!r} ({type(value).__name__})")
    if value < low or (high is not None and value > high):
        bound = f"from {low} to {high}" if high is not None else f">= {low}"
        raise _config_error(f"{name} must be {bound}, got {value}")
    return int(value)


def check_config(config: dict) -> dict:
    """The config with every key and value checked (types, ranges) and the network keys
    older configs lack filled in, or a :class:`NotAnAlphagradModelError` saying what is
    wrong."""
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
    keys = _network_keys()
    missing = [k for k in keys if k not in net]
    unknown = sorted(str(k) for k in net if k not in keys)
    if missing or unknown:
        raise _config_error("; ".join(([f"network is missing {missing}"] if missing else [])
                                      + ([f"network has unknown keys {unknown}"] if unknown else [])))
    net = {k: _config_int(net[k], f"network.{k}", 1, NETWORK_LIMITS[k]) for k in keys}
    if net["dim"] % net["heads"]:
        raise _config_error(f"network.dim ({net['dim']}) must be a multiple of network.heads ({net['heads']})")
    convention = config.get("convention", "exact")
    if convention != "exact":
        raise _config_error(f"convention must be 'exact' (the cost model the agent plays), got {convention!r}")
    return {"network": net,
            "max_vertices": _config_int(config["max_vertices"], "max_vertices", 1, CONFIG_SIZE_LIMIT),
            "convention": convention}


# ------------------------------------------------------------------------------ parameters


def init_params(net, key):
    """Fresh variables of ``net`` (a :class:`alphagrad.network.PolicyNet`; shapes do not
    depend on the graph): what a config's weights must match."""
    import jax.numpy as jnp

    from alphagrad.features import NUM_DYNAMIC, NUM_EDGE, NUM_STATIC

    V, E = 64, 128
    z = jnp.zeros
    return net.init(key, z((V, NUM_STATIC)), z(E, jnp.int32), z(E, jnp.int32), z((E, NUM_EDGE)),
                    jnp.int32(0), jnp.ones(V, bool), z((1, V, NUM_DYNAMIC)), jnp.ones((1, V), bool), z(1))


def _shapes(tree, prefix: str = "") -> dict[str, tuple]:
    out = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(_shapes(value, name + "/"))
        elif hasattr(value, "shape"):  # an array, or a jax.ShapeDtypeStruct from jax.eval_shape
            out[name] = tuple(int(d) for d in value.shape)
        else:  # a shape given as a tuple or list
            out[name] = tuple(int(d) for d in value)
    return out


def check_shapes(expected: Mapping, params: Mapping, *, limit: int = 5) -> None:
    """Raise ValueError unless params has exactly the expected keys and shapes.

    expected: nested dict whose leaves are shapes (tuples), or arrays / jax.ShapeDtypeStructs
    (e.g. `jax.eval_shape(model.init, ...)`); params: nested dict of arrays. The message lists
    the first `limit` missing keys, unexpected keys and mismatched shapes.
    """
    want, got = _shapes(expected), _shapes(params)
    missing = sorted(want.keys() - got.keys())
    unexpected = sorted(got.keys() - want.keys())
    mismatched = sorted(k for k in want.keys() & got.keys() if want[k] != got[k])
    if not (missing or unexpected or mismatched):
        return

    def listing(title, items, render):
        more = f" ... and {len(items) - limit} more" if len(items) > limit else ""
        return f"\n  {title} ({len(items)}): " + ", ".join(render(k) for k in items[:limit]) + more

    message = "The weights do not match the config (a different architecture or a damaged file):"
    if missing:
        message += listing("missing", missing, str)
    if unexpected:
        message += listing("unexpected", unexpected, str)
    if mismatched:
        message += listing("shape mismatch", mismatched,
                           lambda k: f"{k} expected {want[k]}, got {got[k]}")
    raise ValueError(message)


def widen(params: dict, dim: int) -> dict:
    """``params`` of a model saved before its network read the last features of
    :func:`alphagrad.features.dynamic_features` (the lookahead, the pressure, the frontier,
    then the last move's touch, then the costs in multiplications, then the growth: the
    decoder's first layer has ``dim + NUM_DYNAMIC - k`` input rows) or of
    :func:`alphagrad.features.graph_inputs` (the forward and reverse costs, then the cost in
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
    from alphagrad import features as F

    try:
        blocks = sorted(k for k in params["params"] if k.startswith("blocks_"))
    except (KeyError, TypeError):
        blocks = []
    messages = F.NUM_EDGE + 3  # the edge's features and its direction
    return [(("first",), dim + F.NUM_DYNAMIC, F.NUM_DYNAMIC - F.LOOKAHEAD),
            (("embed",), F.NUM_STATIC, F.NUM_STATIC - F.MODES),
            *(((b, layer), messages, F.NUM_EDGE - F.EDGE_ABSOLUTE) for b in blocks for layer in ("ek", "ev"))]


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
