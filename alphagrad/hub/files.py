"""Reading and writing saved alphagrad models: files on disk and Hugging Face Hub repos.

What the files hold is :mod:`alphagrad.hub.format`; this module writes and reads them.
Loading reads JSON and safetensors only: nothing is ever unpickled. Weights must be finite
(NaN or infinity is refused) and float32; float16 and bfloat16 files are upcast to float32
(exactly, every such value is a float32) with a warning; any other dtype is refused. Saving
records the sha256 of model.safetensors in config.json, and loading refuses a weights file
that does not match it (damaged, or changed after saving), naming the file; a model saved
before checksums were recorded loads without the check.

    save_files(directory, config, params, card, overwrite=False) -> written file names
    load_files(model_id_or_path, revision=None, ...)             -> (config, params)
    push_folder(directory, repo_id, ..., dry_run=False)           uploads a saved model directory
    AgentHubMixin               save_pretrained / from_pretrained / push_to_hub for alphagrad's Agent

Saving never replaces files alphagrad did not write: a README.md that is not an alphagrad
model card, or a config.json / model.safetensors of another kind of model, in the target
directory is an error unless ``overwrite=True``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import tempfile
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import safetensors.numpy
from huggingface_hub import HfApi, ModelCard, ModelHubMixin, hf_hub_download
from huggingface_hub import constants as hf_constants
from huggingface_hub.errors import (
    EntryNotFoundError,
    GatedRepoError,
    HfHubHTTPError,
    HFValidationError,
    LocalEntryNotFoundError,
    OfflineModeIsEnabled,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.utils import filter_repo_objects, validate_repo_id

from alphagrad.hub.card import TAGS, is_model_card
from alphagrad.hub.format import (BUNDLED_HINT, CARD_NAME, CHECKSUM_KEY, CONFIG_NAME, FILE_NAMES, MODEL_TYPE, RESERVED,
                                  WEIGHTS_NAME, ModelNotFoundError, NotAnAlphagradModelError, config_text, read_config,
                                  weights_checksum)

_COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")


# --------------------------------------------------------------------------------- saving

def _flatten_params(params, prefix: str = "") -> dict[str, np.ndarray]:
    if not isinstance(params, Mapping):
        raise TypeError(f"params must be a nested dict of arrays, not {type(params).__name__}")
    flat = {}
    for key, value in params.items():
        if not isinstance(key, str) or not key or "/" in key:
            raise ValueError(f"params key {prefix + str(key)!r}: keys must be non-empty strings without '/'")
        name = prefix + key
        if isinstance(value, Mapping):
            flat.update(_flatten_params(value, name + "/"))
            continue
        array = np.asarray(value)
        if array.dtype.kind not in "fiub" and "float" not in array.dtype.name:
            raise TypeError(f"params[{name!r}] is not a numeric array (dtype {array.dtype})")
        flat[name] = np.ascontiguousarray(array, dtype=np.float32)
    if not prefix:
        bad = _non_finite(flat)
        if bad:
            raise ValueError(
                f"params hold NaN or infinite values ({bad}); such a model cannot be loaded again. "
                "The network probably diverged in training: save an earlier checkpoint."
            )
    return flat


def _non_finite(flat: Mapping[str, np.ndarray], limit: int = 3) -> str:
    """'' if every value is finite, else which tensors are not (the first `limit`)."""
    bad = [(k, int(np.size(v) - np.count_nonzero(np.isfinite(v)))) for k, v in flat.items()
           if not np.isfinite(v).all()]
    if not bad:
        return ""
    more = f" and {len(bad) - limit} more tensors" if len(bad) > limit else ""
    return ", ".join(f"{k}: {n} of {np.size(flat[k])}" for k, n in bad[:limit]) + more


def _safetensors_bytes(tensors: dict[str, np.ndarray], metadata: dict[str, str]) -> bytes:
    """safetensors.numpy.save's output with a canonical header.

    safetensors writes the metadata in hash-map order, which changes from call to call; the
    header is rewritten with sorted metadata (tensors keep their order and offsets) so that
    the same parameters always give the same bytes.
    """
    raw = safetensors.numpy.save(tensors, metadata=metadata)
    size = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + size])
    meta = header.pop("__metadata__", None) or {}
    canonical = {"__metadata__": dict(sorted(meta.items())), **header}
    text = json.dumps(canonical, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    text += b" " * (-len(text) % 8)  # keep the data 8-byte aligned, as safetensors does
    return len(text).to_bytes(8, "little") + text + raw[8 + size:]


def _atomic_write(path: Path, data: bytes) -> None:
    """Write to a temporary name in the same directory, then rename over `path`."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    fd = os.open(tmp, flags, 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _foreign_files(directory: Path) -> list[str]:
    """The files among FILE_NAMES in `directory` that alphagrad did not write, each with why."""
    foreign = []
    for name in FILE_NAMES:
        path = directory / name
        if not os.path.lexists(path):
            continue
        if not path.is_file():
            foreign.append(f"{name} (not a regular file)")
            continue
        try:
            if name == CARD_NAME:
                ours = is_model_card(path.read_text(encoding="utf-8"))
                why = "not an alphagrad model card"
            elif name == CONFIG_NAME:
                ours = json.loads(path.read_text(encoding="utf-8")).get("model_type") == MODEL_TYPE
                why = f"model_type is not {MODEL_TYPE!r}"
            else:
                with open(path, "rb") as f:
                    size = int.from_bytes(f.read(8), "little")
                    header = json.loads(f.read(min(size, 100_000_000)))
                ours = (header.get("__metadata__") or {}).get("model_type") == MODEL_TYPE
                why = "not alphagrad weights"
        except (OSError, UnicodeDecodeError, ValueError, AttributeError):
            ours, why = False, "unreadable"
        if not ours:
            foreign.append(f"{name} ({why})")
    return foreign


def save_files(directory: str | os.PathLike, config: dict, params: Mapping, card: str, *,
               overwrite: bool = False) -> list[str]:
    """Write config.json, model.safetensors and README.md into `directory` (created if needed).

    Every file is written under a temporary name and renamed into place, so a crash never
    leaves a partial file under a final name; config.json, the file that marks the directory
    as a model, is written last. Returns the names of the written files.

    config.json records the sha256 of model.safetensors
    (:func:`alphagrad.hub.format.weights_checksum`), which loading verifies.

    Files of a model alphagrad saved before are replaced. Any other README.md, config.json or
    model.safetensors already in `directory` (a README.md that is not an alphagrad model card,
    another library's config or weights) raises FileExistsError and nothing is written,
    unless `overwrite=True`. Other files in `directory` are left alone. NaN or infinite
    parameters raise ValueError.
    """
    # Everything is serialized and checked before anything is written: a bad argument writes nothing.
    if not isinstance(card, str):
        raise TypeError(f"card must be a str, not {type(card).__name__}")
    metadata = {"format": "np", **{k: str(v) for k, v in RESERVED.items()}}
    weights_bytes = _safetensors_bytes(_flatten_params(params), metadata)
    config_bytes = config_text(config, weights_checksum(weights_bytes)).encode("utf-8")
    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise NotADirectoryError(f"{directory} is a file; give a directory to save the model into")
    foreign = [] if overwrite or not directory.is_dir() else _foreign_files(directory)
    if foreign:
        raise FileExistsError(
            f"{directory} already holds files that alphagrad did not write: {', '.join(foreign)}. Saving "
            "would replace them. Save into another (new or empty) directory, or pass overwrite=True to "
            "replace them."
        )
    directory.mkdir(parents=True, exist_ok=True)
    _atomic_write(directory / WEIGHTS_NAME, weights_bytes)
    _atomic_write(directory / CARD_NAME, card.encode("utf-8"))
    _atomic_write(directory / CONFIG_NAME, config_bytes)
    return [CONFIG_NAME, WEIGHTS_NAME, CARD_NAME]


# -------------------------------------------------------------------------------- loading


def _offline() -> bool:
    """huggingface_hub's offline mode, or HF_HUB_OFFLINE set since huggingface_hub was imported."""
    env = os.environ.get("HF_HUB_OFFLINE", "")
    return hf_constants.is_offline_mode() or env.strip().upper() in {"1", "ON", "YES", "TRUE"}


def _read_config(path: str | os.PathLike, where: str) -> tuple[dict, str | None]:
    """``(model config, weights checksum or None)`` of the config.json at ``path``
    (:func:`alphagrad.hub.format.read_config`)."""
    try:
        config = json.loads(Path(path).read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise NotAnAlphagradModelError(
            f"{where}: {CONFIG_NAME} is not valid JSON ({e}), so this is not a readable alphagrad "
            f"model. {BUNDLED_HINT}"
        ) from e
    return read_config(config, where)


_UPCAST = ("float16", "bfloat16")  # every value of these is exactly a float32


def _read_weights(path: str | os.PathLike, where: str, checksum: str | None) -> dict:
    """The nested params in the weights file at ``path``, once they are readable, float32
    (or upcast), finite and (``checksum`` not None) the bytes config.json recorded."""
    try:
        data = Path(path).read_bytes()
        flat = safetensors.numpy.load(data)
    except Exception as e:  # safetensors raises its own SafetensorError for bad headers
        raise NotAnAlphagradModelError(
            f"{where}: {WEIGHTS_NAME} could not be read ({type(e).__name__}: {e}); it is damaged or "
            "truncated. Save the model again, or for a Hub repo download it again with "
            "force_download=True."
        ) from e
    dtypes = {k: v.dtype.name for k, v in flat.items()}
    other = sorted(k for k, d in dtypes.items() if d != "float32" and d not in _UPCAST)
    if other:
        raise NotAnAlphagradModelError(
            f"{where}: {WEIGHTS_NAME} holds tensors that are not float32 ("
            + ", ".join(f"{k}: {dtypes[k]}" for k in other[:3]) + (" ..." if len(other) > 3 else "")
            + "); alphagrad models store float32 weights. Convert them to float32 and save the model "
            "again (alphagrad.hub.save_files or save_pretrained)."
        )
    low = sorted(k for k, d in dtypes.items() if d in _UPCAST)
    if low:
        warnings.warn(
            f"{where}: {len(low)} of {len(flat)} weight tensors are {'/'.join(sorted({dtypes[k] for k in low}))}"
            f" (e.g. {low[0]}); they are upcast to float32 (exactly). Save the model again to store float32.",
            UserWarning, stacklevel=4)
        flat = {k: v.astype(np.float32) if k in low else v for k, v in flat.items()}
    bad = _non_finite(flat)
    if bad:
        raise NotAnAlphagradModelError(
            f"{where}: {WEIGHTS_NAME} holds NaN or infinite weights ({bad}), so the network's outputs "
            "would be meaningless. The model is damaged or its training diverged: use an earlier "
            "checkpoint, or the bundled model (`alphagrad.from_pretrained()` without an argument)."
        )
    _verify_checksum(data, checksum, path, where)
    params: dict[str, Any] = {}
    for key in sorted(flat):
        parts = key.split("/")
        node = params
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            if not part or (part in node and (last or not isinstance(node[part], dict))):
                raise NotAnAlphagradModelError(
                    f"{where}: {WEIGHTS_NAME} has an invalid or clashing tensor name {key!r}; it was "
                    "not written by alphagrad. Save the model again."
                )
            if last:
                node[part] = flat[key]
            else:
                node = node.setdefault(part, {})
    return params


def _verify_checksum(data: bytes, checksum: str | None, path, where: str) -> None:
    """Raises unless the weights file's bytes ``data`` have the ``checksum`` config.json
    records (None: a model saved before checksums were recorded, not checked)."""
    if checksum is None:
        return
    got = weights_checksum(data)
    if got != checksum:
        raise NotAnAlphagradModelError(
            f"{where}: the weights file {os.fspath(path)} does not match the checksum in {CONFIG_NAME} "
            f"(sha256 {got[:16]}..., {CONFIG_NAME} records {checksum[:16]}...): it was damaged (a bad copy, "
            "download or disk) or changed after the model was saved. Save or download the model again "
            "(force_download=True for a Hub repo); weights changed on purpose must be saved with "
            f"save_pretrained (or alphagrad.hub.save_files), which records their {CHECKSUM_KEY}."
        )


def _load_local(directory: str, where: str) -> tuple[dict, dict]:
    config_path = os.path.join(directory, CONFIG_NAME)
    weights_path = os.path.join(directory, WEIGHTS_NAME)
    if not os.path.isfile(config_path):
        raise NotAnAlphagradModelError(
            f"{where} has no {CONFIG_NAME}, so it is not a saved alphagrad model (one holds "
            f"{CONFIG_NAME} and {WEIGHTS_NAME}, as written by `save_pretrained`). {BUNDLED_HINT}"
        )
    config, checksum = _read_config(config_path, where)
    if not os.path.isfile(weights_path):
        raise NotAnAlphagradModelError(
            f"{where} has a {CONFIG_NAME} but no {WEIGHTS_NAME}: the model was not saved completely. "
            f"Save it again with `save_pretrained`. {BUNDLED_HINT}"
        )
    return config, _read_weights(weights_path, where, checksum)


def _hub_download(repo_id: str, filename: str, revision: str | None, *, cache_dir, force_download: bool,
                  local_files_only: bool, token, offline: bool) -> str:
    where = f"Hugging Face Hub repo {repo_id!r}" + (f" at revision {revision!r}" if revision else "")
    cache = os.fspath(cache_dir) if cache_dir is not None else hf_constants.HF_HUB_CACHE
    not_dir = "" if "/" in repo_id and not repo_id.startswith((".", "~")) else (
        f" (No local directory {repo_id!r} exists either.)")
    try:
        return hf_hub_download(repo_id=repo_id, filename=filename, revision=revision, cache_dir=cache_dir,
                               force_download=force_download, local_files_only=local_files_only,
                               token=token)
    except LocalEntryNotFoundError as e:  # not cached, and the Hub was not asked or not reachable
        if offline or local_files_only:
            why = ("offline mode is on (HF_HUB_OFFLINE=1)" if offline
                   else "local_files_only=True was passed")
            todo = ("unset HF_HUB_OFFLINE" if offline else "drop local_files_only=True")
            raise ModelNotFoundError(
                f"Cannot load {where}: {why}, and {filename} is not in the local Hugging Face cache "
                f"({cache}). Run once online so it is downloaded and cached ({todo}), pass "
                f"cache_dir= pointing at a cache that holds it, or pass a local model directory.{not_dir}"
            ) from e
        raise ModelNotFoundError(
            f"Cannot load {where}: the Hugging Face Hub could not be reached and {filename} is not in "
            f"the local cache ({cache}). Check your network connection, or pass a local model "
            f"directory.{not_dir}"
        ) from e
    except GatedRepoError as e:
        raise ModelNotFoundError(
            f"Cannot load {where}: the repo is gated. Request access on "
            f"https://huggingface.co/{repo_id}, then log in with `hf auth login` (or pass token=)."
        ) from e
    except RepositoryNotFoundError as e:
        raise ModelNotFoundError(
            f"Cannot load {where}: the repo was not found on the Hugging Face Hub. Check the repo id; "
            f"if the repo is private, log in with `hf auth login` (or pass token=).{not_dir} "
            f"{BUNDLED_HINT}"
        ) from e
    except RevisionNotFoundError as e:
        raise ModelNotFoundError(
            f"Cannot load {where}: the revision {revision!r} was not found. Pass an existing "
            f"branch, tag or commit hash (see https://huggingface.co/{repo_id}/commits), or no "
            "revision for the latest version."
        ) from e
    except (EntryNotFoundError, OfflineModeIsEnabled, HfHubHTTPError) as e:
        if isinstance(e, EntryNotFoundError):  # the remote repo has no such file
            if filename == CONFIG_NAME:
                raise NotAnAlphagradModelError(
                    f"{where} has no {CONFIG_NAME}, so it is not an alphagrad model. {BUNDLED_HINT}"
                ) from e
            raise NotAnAlphagradModelError(
                f"{where} has a {CONFIG_NAME} but no {filename}, so it is not a complete alphagrad "
                f"model. {BUNDLED_HINT}"
            ) from e
        if isinstance(e, OfflineModeIsEnabled):
            raise ModelNotFoundError(
                f"Cannot load {where}: offline mode is on (HF_HUB_OFFLINE=1). Unset HF_HUB_OFFLINE, "
                "or pass a local model directory."
            ) from e
        status = getattr(getattr(e, "response", None), "status_code", None)
        if status in (401, 403):
            raise ModelNotFoundError(
                f"Cannot load {where}: access denied (HTTP {status}). Log in with `hf auth login` "
                "(or pass token=) with an account that can read this repo."
            ) from e
        raise ModelNotFoundError(f"Cannot load {where}: the Hugging Face Hub answered {e}") from e


def load_files(model_id_or_path: str | os.PathLike, revision: str | None = None, *,
               cache_dir: str | os.PathLike | None = None, force_download: bool = False,
               local_files_only: bool | None = None, token: str | bool | None = None) -> tuple[dict, dict]:
    """Read a saved model: returns (config, params).

    config is the dict given to `save_files` (without model_type and format_version);
    params the nested dict of numpy float32 arrays.

    An existing local directory is read directly (revision must then be None); a Path object
    is always taken as a directory. Any other string is a Hub repo id ("org/name"): its
    config.json and model.safetensors are fetched with `huggingface_hub.hf_hub_download`,
    which serves them from the Hugging Face cache (HF_HUB_CACHE, or cache_dir) when it can
    and honours HF_HUB_OFFLINE=1 and local_files_only=True. Both files are taken from the same
    commit. Nothing is unpickled: only JSON and safetensors are read. The weights file must
    match the checksum its config.json records, if it records one.
    """
    if isinstance(model_id_or_path, os.PathLike) or not isinstance(model_id_or_path, str):
        path = os.fspath(model_id_or_path)
        as_repo = False
    else:
        path = model_id_or_path
        try:
            validate_repo_id(path)
            as_repo = True
        except HFValidationError:
            as_repo = False
    local = os.path.expanduser(path)
    if os.path.isdir(local):
        if revision is not None:
            raise ValueError(
                f"revision={revision!r} was given, but {path!r} is a local directory, which has no "
                "revisions. Drop revision=, or pass a Hub repo id."
            )
        return _load_local(local, f"directory {path!r}")
    if os.path.exists(local):
        raise NotAnAlphagradModelError(
            f"{path!r} is a file; pass the directory that holds {CONFIG_NAME} and {WEIGHTS_NAME}."
        )
    if not as_repo:
        raise ModelNotFoundError(
            f"Directory {path!r} does not exist (and it is not a Hugging Face Hub repo id, which "
            f"looks like 'org/name'). Check the path. {BUNDLED_HINT}"
        )

    offline = _offline()
    local_only = bool(local_files_only) or offline
    if force_download and local_only:
        raise ValueError(
            "force_download=True needs the network, but "
            + ("offline mode is on (HF_HUB_OFFLINE=1)" if offline else "local_files_only=True was passed")
            + ". Drop one of them."
        )
    fetch = {"cache_dir": cache_dir, "force_download": force_download,
             "local_files_only": local_only, "token": token, "offline": offline}
    where = f"Hugging Face Hub repo {path!r}" + (f" at revision {revision!r}" if revision else "")
    config_file = _hub_download(path, CONFIG_NAME, revision, **fetch)
    config, checksum = _read_config(config_file, where)
    # Fetch the weights from the very commit the config came from (a cache path ends in
    # snapshots/<commit>/config.json), so that a push in between cannot mix two versions.
    snapshot = Path(config_file).parent
    if snapshot.parent.name == "snapshots" and _COMMIT_RE.match(snapshot.name):
        revision = snapshot.name
    weights_file = _hub_download(path, WEIGHTS_NAME, revision, **fetch)
    return config, _read_weights(weights_file, where, checksum)


# ---------------------------------------------------------------------------------- mixin


class AgentHubMixin(ModelHubMixin, library_name="alphagrad", license="apache-2.0", tags=list(TAGS)):
    """save_pretrained / from_pretrained / push_to_hub for alphagrad's Agent.

    The subclass implements two hooks:

        def _hub_payload(self) -> tuple[dict, dict, str]:
            '''(config, params, card): a JSON-serializable config dict, the nested dict of
            parameter arrays, and the model card markdown (see `alphagrad.hub.card.model_card`).'''

        @classmethod
        def _from_hub_payload(cls, config: dict, params: dict, **kwargs):
            '''An instance from a loaded config (as returned by _hub_payload) and params
            (nested dict of numpy float32 arrays); it validates shapes itself, e.g. with
            `alphagrad.hub.format.check_shapes`. kwargs are extra keyword arguments given
            to from_pretrained.'''

    Unlike a plain ModelHubMixin, no __init__ arguments are captured and no second
    config.json or default card is written: the saved folder is exactly what `save_files`
    writes from `_hub_payload()`, for save_pretrained and push_to_hub alike.
    """

    def __new__(cls, *args, **kwargs):
        # Skip ModelHubMixin.__new__, which records JSON-able __init__ arguments as a config of
        # its own; the config here comes from _hub_payload alone.
        return super(ModelHubMixin, cls).__new__(cls)

    # ---- hooks for the subclass

    def _hub_payload(self) -> tuple[dict, dict, str]:
        raise NotImplementedError(f"{type(self).__name__} must implement _hub_payload() -> (config, params, card)")

    @classmethod
    def _from_hub_payload(cls, config: dict, params: dict, **kwargs):
        raise NotImplementedError(f"{cls.__name__} must implement the classmethod _from_hub_payload(config, params)")

    # ---- huggingface_hub's hooks

    def _save_pretrained(self, save_directory: Path, overwrite: bool = False) -> None:
        config, params, card = self._hub_payload()
        save_files(save_directory, config, params, card, overwrite=overwrite)

    @classmethod
    def _from_pretrained(cls, *, model_id: str, revision: str | None, cache_dir: str | Path | None,
                         force_download: bool, local_files_only: bool, token: str | bool | None,
                         **model_kwargs):
        config, params = load_files(model_id, revision, cache_dir=cache_dir, force_download=force_download,
                                    local_files_only=local_files_only, token=token)
        return cls._from_hub_payload(config, params, **model_kwargs)

    def generate_model_card(self, *args, **kwargs) -> ModelCard:
        return ModelCard(self._hub_payload()[2])

    # ---- public API (huggingface_hub's signatures)

    @staticmethod
    def _no_config(config, model_card_kwargs) -> None:
        if config is not None:
            raise ValueError("config= is not supported: the config comes from the agent itself (_hub_payload)")
        if model_card_kwargs:
            raise ValueError("model_card_kwargs= is not supported: the card comes from the agent (_hub_payload)")

    def save_pretrained(self, save_directory: str | Path, *, config: dict | None = None,
                        repo_id: str | None = None, push_to_hub: bool = False,
                        model_card_kwargs: dict[str, Any] | None = None, overwrite: bool = False,
                        **push_to_hub_kwargs) -> str | None:
        """Write config.json, model.safetensors and README.md into save_directory
        (then push them to repo_id if push_to_hub=True). Returns the commit URL when pushing.

        The files of a model alphagrad saved there before are replaced; a README.md that is not
        an alphagrad model card (e.g. your project's README), or another library's config.json or
        model.safetensors, raises FileExistsError and nothing is written, unless overwrite=True.
        """
        self._no_config(config, model_card_kwargs)
        save_directory = Path(save_directory)
        self._save_pretrained(save_directory, overwrite=overwrite)
        if push_to_hub:
            return self.push_to_hub(repo_id if repo_id is not None else save_directory.name, **push_to_hub_kwargs)
        return None

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: str | Path, *, force_download: bool = False,
                        token: str | bool | None = None, cache_dir: str | Path | None = None,
                        local_files_only: bool = False, revision: str | None = None, **model_kwargs):
        """Load from a local directory or a Hub repo id (see `load_files`)."""
        # ModelHubMixin.from_pretrained is bypassed: it reads config.json on its own (without our
        # checks or error messages) and injects its entries as keyword arguments.
        return cls._from_pretrained(model_id=pretrained_model_name_or_path, revision=revision,
                                    cache_dir=cache_dir, force_download=force_download,
                                    local_files_only=local_files_only, token=token, **model_kwargs)

    def _write_upload_folder(self, folder: Path, allow_patterns=None, ignore_patterns=None) -> list[str]:
        """Write into `folder` exactly the files push_to_hub uploads; returns their names."""
        _check_upload_folder(folder)
        written = save_files(folder, *self._hub_payload())
        return _filter_upload(folder, written, allow_patterns, ignore_patterns)

    def push_to_hub(self, repo_id: str, *, config: dict | None = None,
                    commit_message: str = "Push model using huggingface_hub.", private: bool | None = None,
                    token: str | None = None, branch: str | None = None, create_pr: bool | None = None,
                    allow_patterns: list[str] | str | None = None, ignore_patterns: list[str] | str | None = None,
                    delete_patterns: list[str] | str | None = None,
                    model_card_kwargs: dict[str, Any] | None = None, revision: str | None = None,
                    dry_run: bool | str | os.PathLike = False) -> str:
        """Upload config.json, model.safetensors and README.md to the Hub repo `repo_id`
        (created if needed) in one commit; returns the commit URL.

        revision: an alias of branch (created from main if it does not exist yet).
        dry_run: True, or a directory path: write the folder that would be uploaded, into that
            directory (or a new temporary one for True), and return its path, without any network
            access. The real upload writes its folder with the same function.
        """
        self._no_config(config, model_card_kwargs)
        return _push(lambda folder: self._write_upload_folder(folder, allow_patterns, ignore_patterns),
                     repo_id, commit_message=commit_message, private=private, token=token, branch=branch,
                     create_pr=create_pr, delete_patterns=delete_patterns, revision=revision, dry_run=dry_run)


# ------------------------------------------------------------------------------- pushing


def _check_upload_folder(folder: Path) -> None:
    """A dry-run folder must be new, empty or hold only a model's files, so that afterwards
    it holds exactly what would be uploaded."""
    if folder.exists():
        if not folder.is_dir():
            raise NotADirectoryError(f"{folder} is not a directory")
        others = sorted(p.name for p in folder.iterdir() if p.name not in FILE_NAMES)
        if others:
            raise FileExistsError(
                f"{folder} already holds other files ({', '.join(others)}); give an empty or new "
                "directory, so that it holds exactly what would be uploaded"
            )


def _filter_upload(folder: Path, written: list[str], allow_patterns, ignore_patterns) -> list[str]:
    kept = list(filter_repo_objects(written, allow_patterns=allow_patterns, ignore_patterns=ignore_patterns))
    for name in written:
        if name not in kept:
            (folder / name).unlink()
    if not kept:
        raise ValueError("allow_patterns / ignore_patterns leave no file to upload")
    return kept


def _push(write, repo_id: str, *, commit_message: str, private, token, branch, create_pr, delete_patterns,
          revision, dry_run) -> str:
    """Write the upload folder with `write(folder)`, then upload it (or, for a dry run, keep it)."""
    if revision is not None and branch is not None and revision != branch:
        raise ValueError(f"branch={branch!r} and revision={revision!r} disagree; pass one of them")
    branch = branch if branch is not None else revision
    validate_repo_id(repo_id)
    if dry_run is not False and dry_run is not None:
        if dry_run is True:
            folder = Path(tempfile.mkdtemp(prefix="alphagrad-push-"))
        elif isinstance(dry_run, (str, os.PathLike)) and os.fspath(dry_run):
            folder = Path(dry_run)
        else:
            raise TypeError(f"dry_run must be a bool or a directory path, not {dry_run!r}")
        write(folder)
        return str(folder)

    with tempfile.TemporaryDirectory(prefix="alphagrad-push-") as tmp:
        folder = Path(tmp)
        write(folder)  # before any network call
        api = HfApi(token=token)
        repo_id = api.create_repo(repo_id=repo_id, private=private, exist_ok=True).repo_id
        if branch is not None and branch != "main":
            api.create_branch(repo_id=repo_id, branch=branch, exist_ok=True)
        return api.upload_folder(repo_id=repo_id, repo_type="model", folder_path=folder,
                                 commit_message=commit_message, revision=branch, create_pr=create_pr,
                                 delete_patterns=delete_patterns)


def push_folder(directory: str | os.PathLike, repo_id: str, *,
                commit_message: str = "Upload alphagrad model", private: bool | None = None,
                token: str | None = None, branch: str | None = None, create_pr: bool | None = None,
                delete_patterns: list[str] | str | None = None, revision: str | None = None,
                dry_run: bool | str | os.PathLike = False) -> str:
    """Upload a saved model directory (config.json, model.safetensors, README.md, as written by
    `save_files` / `save_pretrained` / `python -m train.export`) to the Hub repo `repo_id`
    in one commit, byte for byte; returns the commit URL.

    The directory is read first as `load_files` reads it (model type, format version, readable
    finite weights that match their checksum) and must hold an alphagrad model card as
    README.md, so nothing broken is uploaded; its other files are not uploaded. The network
    is not built here: to check that the weights fit the config, load the directory with
    `alphagrad.from_pretrained` first (the `python -m hub push` tool does).

    revision: an alias of branch (created from main if it does not exist yet).
    dry_run: True, or a directory path: copy the files that would be uploaded into that
        directory (or a new temporary one for True) and return its path, without any network
        access.
    """
    source = Path(os.path.expanduser(os.fspath(directory)))
    if not source.is_dir():
        raise ModelNotFoundError(f"{source} is not a directory; pass the directory the model was saved into")
    load_files(source)  # raises with the reason if this is not a loadable alphagrad model
    card = source / CARD_NAME
    if not card.is_file():
        raise NotAnAlphagradModelError(
            f"{source} has no {CARD_NAME} (the model card); save the model with `save_pretrained` or "
            "`alphagrad.hub.save_files`, which write one"
        )
    if not is_model_card(card.read_text(encoding="utf-8", errors="replace")):
        raise NotAnAlphagradModelError(
            f"{source / CARD_NAME} is not an alphagrad model card (it needs the front matter "
            "'library_name: alphagrad' and the title written by alphagrad.hub.card.model_card); write the card "
            "with model_card(config, info) and save the model again"
        )

    def write(folder: Path) -> list[str]:
        if folder.resolve() == source.resolve():
            raise ValueError(f"dry_run={os.fspath(folder)!r} is the model directory itself; give another directory")
        _check_upload_folder(folder)
        foreign = _foreign_files(folder) if folder.is_dir() else []
        if foreign:
            raise FileExistsError(
                f"{folder} already holds files that alphagrad did not write: {', '.join(foreign)}; give an "
                "empty or new directory for the dry run"
            )
        folder.mkdir(parents=True, exist_ok=True)
        for name in (WEIGHTS_NAME, CARD_NAME, CONFIG_NAME):  # config.json last, as save_files does
            _atomic_write(folder / name, (source / name).read_bytes())
        return list(FILE_NAMES)

    return _push(write, repo_id, commit_message=commit_message, private=private, token=token, branch=branch,
                 create_pr=create_pr, delete_patterns=delete_patterns, revision=revision, dry_run=dry_run)
