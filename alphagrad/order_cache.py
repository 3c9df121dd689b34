"""Orders found for a function, kept on disk for later processes (and shipped with code).

One JSON file per key under :func:`directory` (``$ALPHAGRAD_CACHE_DIR/orders``, or
``~/.cache/alphagrad/orders`` where the variable is unset; empty turns the cache off, as
it does for the rule tables). A key (:func:`key`) hashes the graph's canonical form
(:mod:`alphagrad.canonical`: the same for a renamed function or renumbered vertices),
the argument shapes and dtypes, the arguments differentiated, the ``jax.vmap`` batch the
choice was timed at (none for an unbatched call: a choice made for one batch is not
reused for another) and the device (platform and kind). An :class:`Entry` holds the
order in canonical labels, its cost, and what :func:`alphagrad.jacobian` chose after
timing (``jax.jacfwd``, ``jax.jacrev`` or the order) with the times.

Process-safe: a file is written whole and renamed into place (a reader never sees half
of one), and a write that keeps the cheaper of two entries holds a lock on the
directory while it compares. A directory that cannot be read or written gives a warning
and no cache, never an error; a damaged file is reported and replaced.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import tempfile
import warnings

from alphagrad.rules import CACHE_ENV

#: The version of the entry format; a file of another version is ignored (and replaced).
FORMAT = 1
#: The format of an exported bundle of entries (``alphagrad cache export``).
BUNDLE_FORMAT = "alphagrad-orders-1"
#: What a jacobian may choose.
CHOICES = ("order", "jax.jacfwd", "jax.jacrev")


@dataclasses.dataclass(frozen=True)
class Entry:
    """What is kept for one key.

    Attributes:
      key: the file's key (:func:`key`).
      graph: the canonical hash of the graph (:attr:`alphagrad.canonical.Canonical.hash`).
      spec: the argument shapes and dtypes and the arguments differentiated, in words.
      device: the platform and device kind the times were measured on.
      order: the cheapest order found, in canonical labels.
      cost: its multiplications.
      choice: what computes the Jacobian (one of :data:`CHOICES`).
      times: seconds per call of each candidate timed (empty if none was: chosen inside
        a ``jax.jit`` trace by cost alone).
      search_s: seconds of search spent on the order, over every refinement.
      function: the function's name when it was stored (for people; not in the key).
      versions: the jax and alphagrad versions that stored it (for people).
    """

    key: str
    graph: str
    spec: str
    device: str
    order: tuple
    cost: int
    choice: str
    times: dict
    search_s: float
    function: str = ""
    versions: str = ""

    @property
    def timed(self) -> bool:
        return bool(self.times)

    def to_json(self) -> dict:
        return {"format": FORMAT, **dataclasses.asdict(self), "order": list(self.order)}

    @classmethod
    def from_json(cls, data) -> "Entry":
        """An entry from its JSON object (ValueError if anything is missing or wrong)."""
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ValueError(f"not an order-cache entry of format {FORMAT}")
        fields = {f.name for f in dataclasses.fields(cls)}
        try:
            entry = cls(**{k: v for k, v in data.items() if k in fields})
        except TypeError as e:
            raise ValueError(str(e)) from None
        entry = dataclasses.replace(entry, order=tuple(int(v) for v in entry.order), cost=int(entry.cost),
                                    times={str(k): float(v) for k, v in dict(entry.times).items()},
                                    search_s=float(entry.search_s))
        if entry.choice not in CHOICES or not all(isinstance(getattr(entry, f), str)
                                                   for f in ("key", "graph", "spec", "device")):
            raise ValueError(f"choice {entry.choice!r} is not one of {CHOICES}")
        return entry


def directory() -> str | None:
    """Where orders are kept: ``$ALPHAGRAD_CACHE_DIR/orders``, ``~/.cache/alphagrad/orders``
    (``$XDG_CACHE_HOME`` for ``~/.cache``) where the variable is unset, None where it is
    empty (no disk cache)."""
    root = os.environ.get(CACHE_ENV)
    if root is None:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        root = os.path.join(base, "alphagrad")
    return os.path.join(root, "orders") if root else None


def key(graph_hash: str, spec: str, device: str) -> str:
    """The key of a graph's canonical hash at ``spec`` (:func:`spec_of`) on ``device``
    (:func:`device_name`)."""
    return hashlib.sha256(f"{FORMAT} {graph_hash} {spec} {device}".encode()).hexdigest()[:32]


def spec_of(abstract_args, nums, batch: int | None = None) -> str:
    """One sample's pytree with each leaf's dtype and shape (of ``jax.ShapeDtypeStruct``s),
    the arguments differentiated and the ``jax.vmap`` batch size where there is one, in
    words: ``(f32[3], {a: f32[4,3]}) d/d args 0`` or ``... d/d args 0 under jax.vmap at
    batch 256``."""
    import jax
    import numpy as np

    def name(leaf) -> str:
        dtype = np.dtype(leaf.dtype)
        short = "bf16" if dtype.name == "bfloat16" else f"{dtype.kind}{8 * dtype.itemsize}"
        return f"{short}[{','.join(map(str, leaf.shape))}]"

    leaves, tree = jax.tree_util.tree_flatten(abstract_args)
    shown = str(jax.tree_util.tree_unflatten(tree, [name(leaf) for leaf in leaves])).replace("'", "")
    vmapped = "" if batch is None else f" under jax.vmap at batch {batch}"
    return f"{shown} d/d args {','.join(map(str, nums))}{vmapped}"


def device_name() -> str:
    """The default device, as ``platform:device kind`` (e.g. ``cpu:cpu``, ``tpu:TPU v5 lite``)."""
    import jax

    d = jax.devices()[0]
    return f"{d.platform}:{d.device_kind}"


def _path(folder: str, k: str) -> str:
    return os.path.join(folder, f"{k}.json")


def _warn(message: str) -> None:
    warnings.warn(f"alphagrad order cache: {message}", stacklevel=4)


def load(folder: str | None, k: str) -> Entry | None:
    """The entry kept under ``k``, or None (no file; a damaged or foreign one is reported
    with a warning, and a later :func:`store` replaces it)."""
    if folder is None:
        return None
    path = _path(folder, k)
    try:
        with open(path, encoding="utf-8") as f:
            entry = Entry.from_json(json.load(f))
    except FileNotFoundError:
        return None
    except OSError as e:
        _warn(f"cannot read {path} ({e}); searching without the cache")
        return None
    except (ValueError, TypeError, AttributeError) as e:  # json.JSONDecodeError is a ValueError
        _warn(f"the entry {path} is damaged ({type(e).__name__}: {e}); searching again and replacing it")
        return None
    if entry.key != k:
        _warn(f"the entry {path} holds key {entry.key}, not its file name's; searching again and replacing it")
        return None
    return entry


@contextlib.contextmanager
def _locked(folder: str):
    """Holds an exclusive lock on ``folder`` (POSIX ``flock``; elsewhere, none: writes
    stay atomic, only the comparison of two writers may interleave)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        yield
        return
    with open(os.path.join(folder, ".lock"), "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _write(folder: str, entry: Entry) -> None:
    """Writes ``entry`` whole to a temporary file in ``folder`` and renames it into place."""
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".entry-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(entry.to_json(), f, indent=1)
        os.replace(tmp, _path(folder, entry.key))
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def _store(folder: str, entry: Entry, only_if_cheaper: bool) -> bool:
    """:func:`store`, raising OSError where ``folder`` cannot be written."""
    os.makedirs(folder, exist_ok=True)
    with _locked(folder):
        if only_if_cheaper:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # a damaged entry is replaced: no need to say so
                old = load(folder, entry.key)
            if old is not None and old.graph == entry.graph and old.cost <= entry.cost:
                return False
        _write(folder, entry)
    return True


def store(folder: str | None, entry: Entry, only_if_cheaper: bool = False) -> bool:
    """Keeps ``entry`` (with ``only_if_cheaper``: only if no valid entry of its key costs
    as little). Returns whether it was written; a directory that cannot be written (read
    only, full) gives a warning and False."""
    if folder is None:
        return False
    try:
        return _store(folder, entry, only_if_cheaper)
    except OSError as e:
        _warn(f"cannot write to {folder} ({e}); orders stay in memory. Set ${CACHE_ENV} to a writable "
              f"directory, or to an empty string to turn the disk cache off")
        return False


def entries(folder: str | None) -> list[tuple[str, Entry | str]]:
    """Every file in ``folder`` as ``(path, entry)``, or ``(path, why it is not read)``."""
    if folder is None or not os.path.isdir(folder):
        return []
    out = []
    for name in sorted(os.listdir(folder)):
        if not name.endswith(".json") or name.startswith("."):
            continue
        path = os.path.join(folder, name)
        try:
            with open(path, encoding="utf-8") as f:
                out.append((path, Entry.from_json(json.load(f))))
        except (OSError, ValueError, TypeError, AttributeError) as e:
            out.append((path, f"{type(e).__name__}: {e}"))
    return out


def related(folder: str | None, graph_hash: str) -> list[Entry]:
    """The valid entries of the graph ``graph_hash`` at any spec or device (orders found
    elsewhere: starts for a search here)."""
    return [e for _, e in entries(folder) if isinstance(e, Entry) and e.graph == graph_hash]


def clear(folder: str | None) -> int:
    """Removes every entry (and damaged file) in ``folder``; returns how many."""
    found = entries(folder)
    for path, _ in found:
        os.remove(path)
    return len(found)


def export(folder: str | None, path: str) -> int:
    """Writes every valid entry of ``folder`` into one JSON bundle at ``path`` (to ship
    with code; :func:`import_bundle` reads it). Returns how many."""
    kept = [e.to_json() for _, e in entries(folder) if isinstance(e, Entry)]
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"format": BUNDLE_FORMAT, "entries": kept}, f, indent=1)
    return len(kept)


def import_bundle(folder: str | None, path: str) -> tuple[int, int]:
    """Merges the bundle at ``path`` into ``folder``, an entry replacing one of its key
    only if cheaper. Returns ``(written, kept as they were)``.

    Raises:
      ValueError: ``path`` is not a bundle, or holds a damaged entry (nothing is written).
      OSError: ``folder`` cannot be written.
    """
    if folder is None:
        raise ValueError(f"the order cache is off (${CACHE_ENV} is empty): nowhere to import to")
    with open(path, encoding="utf-8") as f:
        try:
            data = json.load(f)
        except ValueError as e:
            raise ValueError(f"{path} is not an alphagrad order bundle ({e})") from None
    if not isinstance(data, dict) or data.get("format") != BUNDLE_FORMAT or not isinstance(data.get("entries"), list):
        raise ValueError(f"{path} is not an alphagrad order bundle (format {BUNDLE_FORMAT!r}); "
                         f"write one with `alphagrad cache export`")
    bundle = []
    for k, item in enumerate(data["entries"]):
        try:
            bundle.append(Entry.from_json(item))
        except (ValueError, TypeError, AttributeError) as e:
            raise ValueError(f"entry {k} of {path} is damaged ({e}); nothing imported") from None
    written = sum(_store(folder, e, only_if_cheaper=True) for e in bundle)
    return written, len(bundle) - written
