"""Training graphs: a dataset split, bucketed by padded size, encoded on demand."""

from __future__ import annotations

import dataclasses
import jax.numpy as jnp
import numpy as np

from alphagrad import engine
from train.config import ConfigError


@dataclasses.dataclass
class GraphPool:
    """The graphs of one split that fit the model, with their reward scales.

    Attributes:
      graphs: the graphs (rule tables are built when a graph is first encoded).
      names, hashes: per graph.
      scale: per graph, the best baseline's cost (cheapest of forward, reverse,
        Markowitz): the reward of a game is minus its cost divided by this.
      optimal: per graph, the exact optimum or -1 where unknown.
      bucket: per graph, the padded vertex count it plays in.
      skipped: graphs left out, by reason.
    """

    graphs: list
    names: list
    hashes: list
    scale: np.ndarray
    optimal: np.ndarray
    bucket: np.ndarray
    skipped: dict

    def __len__(self) -> int:
        return len(self.graphs)

    def by_bucket(self) -> dict:
        """{bucket: indices of its graphs}."""
        return {int(b): np.flatnonzero(self.bucket == b) for b in np.unique(self.bucket)}

    tables: dict = dataclasses.field(default_factory=dict)

    def encode(self, indices, num_vertices: int, max_structures: int):
        """The initial states of the given graphs, batched (``[B]``), and their scales."""
        from alphagrad.search import batch_states

        states = []
        for i in indices:
            if i not in self.tables:  # built once per graph (pure Python, can take a while)
                self.tables[i] = engine.tables(self.graphs[i])
            states.append(engine.encode(self.graphs[i], "exact", num_vertices=num_vertices,
                                        num_structures=max_structures, rule_tables=self.tables[i]))
        return batch_states(states), jnp.asarray(self.scale[list(indices)], jnp.float32)


def bucket_of(num_vertices: int, buckets) -> int | None:
    for b in buckets:
        if num_vertices <= b:
            return b
    return None


def load_pool(path: str, split: str, buckets, max_vertices: int, max_structures: int,
              limit: int = 0) -> GraphPool:
    """Reads ``split`` of the dataset at ``path`` (built by ``python -m data_gen build``).

    Graphs with more than ``max_vertices`` vertices or more than ``max_structures``
    structures in their rule tables, and graphs without intermediates, are left out and
    counted in ``skipped``; never silently.
    """
    from datasets import load_from_disk

    from data_gen.dataset import row_to_graph

    try:
        dd = load_from_disk(path)
    except Exception as e:  # noqa: BLE001 - datasets raises several types
        raise ConfigError(f"cannot read a dataset at {path!r} ({e}); build one with "
                          f"`python -m data_gen build --out {path} ...`") from None
    if split not in dd:
        raise ConfigError(f"dataset {path!r} has no split {split!r}; it has {sorted(dd)}")
    ds = dd[split]
    if len(ds) == 0:
        raise ConfigError(f"split {split!r} of {path!r} is empty")
    meta = ds.select_columns(["num_vertices", "num_intermediates", "table_size"]).to_dict()
    keep, skipped = [], {}
    for i, (v, n, s) in enumerate(zip(meta["num_vertices"], meta["num_intermediates"], meta["table_size"])):
        reason = ("more than max_vertices" if v > max_vertices else
                  "more than max_structures" if s > max_structures else
                  "no intermediates" if n == 0 else None)
        if reason:
            skipped[reason] = skipped.get(reason, 0) + 1
        else:
            keep.append(i)
        if limit and len(keep) >= limit:
            break
    if not keep:
        raise ConfigError(f"no graph of split {split!r} fits the model (max_vertices={max_vertices}, "
                          f"max_structures={max_structures}; left out: {skipped})")
    rows = ds.select(keep)
    graphs, names, hashes, scale, optimal = [], [], [], [], []
    for row in rows:
        graphs.append(row_to_graph(row))
        names.append(row["name"])
        hashes.append(row["graph_hash"])
        scale.append(max(row["best_baseline"], 1))
        optimal.append(-1 if row["cost_optimal"] is None else row["cost_optimal"])
    bucket = np.asarray([bucket_of(g.num_vertices, buckets) for g in graphs])
    return GraphPool(graphs, names, hashes, np.asarray(scale, np.float64), np.asarray(optimal, np.int64),
                     bucket, skipped)
