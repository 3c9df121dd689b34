"""Labelled training graphs: a dataset split joined with its labels, batched by size.

Every (graph, labelled position) pair is used once per epoch (``repeat`` times for an entry
of a repeated label set, ``data.repeats``): an epoch visits each graph
``ceil(positions / states_per_graph)`` times with disjoint groups of its positions, in an
order drawn from ``(seed, epoch)``; step ``s`` maps to one batch of that schedule, so a
resumed run sees exactly the batches an uninterrupted one would.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from alphagrad import features
from alphagrad.evaluator import Evaluator
from train.config import ConfigError


#: The largest Markowitz-to-label cost ratio :meth:`LabelledGraphs.stakes` counts.
STAKES_CAP = 4.0


def bucket_of(num_vertices: int, buckets) -> int | None:
    for b in buckets:
        if num_vertices <= b:
            return b
    return None


@dataclasses.dataclass
class LabelledGraphs:
    """The labelled graphs of one split that fit the buckets.

    Attributes:
      rows: per graph, the dataset row (graph columns and label columns).
      bucket: per graph, its padded vertex count.
      skipped: graphs left out, by reason (never silently).
      encodings: how often the network encodes a game's graph
        (:class:`alphagrad.network.NetworkConfig`): a state's encoder inputs are those of
        the graph left at the start of its stretch of the labelled order.
    """

    rows: list
    bucket: np.ndarray
    skipped: dict
    encodings: int = 1
    cache: dict = dataclasses.field(default_factory=dict)
    kept: dict = dataclasses.field(default_factory=dict)
    by_graph: dict = dataclasses.field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.rows)

    def evaluated(self, i: int, keep: bool = False):
        """``(graph, evaluator)`` of graph ``i``, built anew, or with ``keep`` built once
        and kept: validation replays its few graphs every time, while training keeps only
        :meth:`prepared` (the rule tables behind an evaluator are large)."""
        from data_gen.dataset import row_to_graph

        if i in self.kept:
            return self.kept[i]
        g = row_to_graph(self.rows[i])
        out = (g, Evaluator(g, "exact"))
        if keep:
            self.kept[i] = out
        return out

    def scale(self, i: int) -> float:
        return float(max(self.rows[i]["best_baseline"], 1))

    def prepared(self, i: int) -> dict:
        """What batches need of entry ``i``, computed once and kept (compact: no graph or
        rule tables): the encoder inputs by stretch of the order (:meth:`stretch`; the
        first shared by the entries of one graph, which are prepared together), and the
        decoder's features and the cost still to come at every labelled position."""
        if i not in self.cache:
            g, ev = self.evaluated(i)
            first = features.graph_inputs(g, ev, self.scale(i))
            for j in self.siblings(i):
                orders, of = self.orders(j)
                pos = np.asarray(self.rows[j]["positions"], np.int64)
                runs = [ev.run(features.observe_along, o, pos[of == k], features.Tables.of(ev))
                        for k, o in enumerate(orders)]
                raw, to_go = np.concatenate([r[0] for r in runs]), np.concatenate([r[1] for r in runs])
                # a stretch starts on the graph its order left there (several orders: one
                # encoding, load_split checks, so every state is on the graph as traced)
                inputs = {int(t): features.graph_inputs(g, ev, self.scale(j), orders[0][:t]) if t else first
                          for t in np.unique(self.stretch(j, pos))}
                self.cache[j] = {"inputs": inputs, "dynamic": features.dynamic_features(raw, self.scale(j)),
                                 "to_go": to_go}
        return self.cache[i]

    def orders(self, i: int) -> tuple[list, np.ndarray]:
        """``(orders, index)``: the orders entry ``i``'s states lie on (one, or a graph's
        sampled orders) and, per labelled position, which of them."""
        row = self.rows[i]
        if "orders" in row:
            return [np.asarray(o, np.int64) for o in row["orders"]], np.asarray(row["rollout"], np.int64)
        return [np.asarray(row["order"], np.int64)], np.zeros(len(row["positions"]), np.int64)

    def stretch(self, i: int, pos) -> np.ndarray:
        """Where the stretch of entry ``i``'s order that each of positions ``pos`` lies in
        starts: the network encodes the graph left there (:attr:`encodings`)."""
        step = features.moves_per_encoding(int(self.rows[i]["num_intermediates"]), self.encodings)
        return (np.asarray(pos, np.int64) // step) * step

    def inputs(self, i: int, which) -> dict:
        """The encoder inputs of the states at labelled positions ``which`` of entry ``i``
        (indices into the row's ``positions``, all in one stretch)."""
        starts = np.unique(self.stretch(i, np.asarray(self.rows[i]["positions"], np.int64)[np.asarray(which)]))
        if len(starts) != 1:
            raise ValueError(f"positions {list(which)} of entry {i} lie in stretches starting at {starts.tolist()}")
        return self.prepared(i)["inputs"][int(starts[0])]

    def stakes(self, i: int) -> float:
        """How much playing like Markowitz loses on entry ``i``'s graph against its label:
        ``log(markowitz cost / label cost)``, from 0 to ``log(STAKES_CAP)``."""
        r = self.rows[i]
        ratio = max(r["cost_markowitz"], r["cost"], 1) / max(r["cost"], 1)
        return float(np.log(min(ratio, STAKES_CAP)))

    def joined(self, other: "LabelledGraphs") -> "LabelledGraphs":
        """These graphs and ``other``'s, but for graphs already here (counted in ``skipped``
        as duplicates): training on several datasets."""
        have = {r["graph_hash"] for r in self.rows}
        keep = [j for j, r in enumerate(other.rows) if r["graph_hash"] not in have]
        skipped = dict(self.skipped)
        for reason, n in other.skipped.items():
            skipped[reason] = skipped.get(reason, 0) + n
        dropped = len({r["graph_hash"] for r in other.rows} & have)
        if dropped:
            skipped["duplicate"] = skipped.get("duplicate", 0) + dropped
        return LabelledGraphs(self.rows + [other.rows[j] for j in keep],
                              np.concatenate([self.bucket, other.bucket[keep]]), skipped, self.encodings)

    def split_off(self, hashes: set, label_set: str) -> tuple["LabelledGraphs", "LabelledGraphs"]:
        """``(these graphs but those in hashes, the entries of those from label_set)``:
        graphs taken out of training to validate on (counted in the first's ``skipped``)."""
        keep = np.asarray([j for j, r in enumerate(self.rows) if r["graph_hash"] not in hashes], np.int64)
        took = np.asarray([j for j, r in enumerate(self.rows)
                           if r["graph_hash"] in hashes and r["label_set"] == label_set], np.int64)
        skipped = dict(self.skipped)
        if len(took):
            skipped["large validation"] = len(took)

        def part(idx, left_out):
            return LabelledGraphs([self.rows[j] for j in idx], self.bucket[idx], left_out, self.encodings)

        return part(keep, skipped), part(took, {})

    def siblings(self, i: int) -> list:
        """The entries of graph ``i``'s graph (one per label set that labels it)."""
        if not self.by_graph:
            for j, r in enumerate(self.rows):
                self.by_graph.setdefault(r["graph_hash"], []).append(j)
        return self.by_graph[self.rows[i]["graph_hash"]]

    def states(self, i: int, which) -> dict:
        """The decoder's inputs and targets at labelled positions ``which`` (indices into
        the row's ``positions``) of graph ``i``, unpadded."""
        prep = self.prepared(i)
        row = self.rows[i]
        sampled = "orders" in row  # a graph's sampled orders: the move taken, weighed by its order's advantage
        n, V = int(row["num_intermediates"]), int(row["num_vertices"])
        which = np.sort(np.asarray(which))
        pos = np.asarray(row["positions"], np.int64)[which]
        K = len(pos)
        legal = np.zeros((K, V), bool)
        target = np.zeros((K, V), np.float32)
        regret = np.zeros((K, V), np.float32)
        orders, of = self.orders(i)
        for k, (w, t) in enumerate(zip(which, pos)):
            order = orders[of[w]]
            legal[k, order[t:]] = True
            good = np.asarray(row["moves"][w], np.int64)
            target[k, good] = 1.0 / len(good)
            r = np.asarray(row["regrets"][w], np.float32)
            regret[k, order[t:t + len(r)]] = np.log1p(r)
        return {"dynamic": prep["dynamic"][which], "legal": legal, "target": target, "regret": regret,
                "value": (prep["to_go"][which] / self.scale(i)).astype(np.float32),
                "progress": (pos / n).astype(np.float32), "sampled": np.full(K, sampled),
                "advantage": np.asarray(row["advantage"], np.float32)[which] if sampled else np.zeros(K, np.float32),
                "temperature": np.full(K, row["temperature"] if sampled else 1.0, np.float32)}


def load_split(path: str, split: str, buckets, max_vertices: int, limit: int = 0,
               labels=("labels",), encodings: int = 1, repeats=()) -> LabelledGraphs:
    """The graphs of ``split`` in the dataset at ``path`` joined with their labels (by
    ``graph_hash``) from each label set in ``labels``: one entry per (graph, label row).
    Graphs over ``max_vertices``, without intermediates or without labels in any set
    are left out and counted in ``skipped``; ``limit`` caps the graphs, not the entries;
    ``encodings``: :attr:`LabelledGraphs.encodings`; ``repeats``: per set of ``labels``, how
    often an epoch uses each of its states (an entry's ``repeat``; empty: once)."""
    from datasets import load_from_disk

    from data_gen.labels import load_labels

    try:
        dd = load_from_disk(path)
    except Exception as e:  # noqa: BLE001 - datasets raises several types
        raise ConfigError(f"cannot read a dataset at {path!r} ({e}); build one with "
                          f"`python -m data_gen build --out {path} ...`") from None
    if split not in dd:
        raise ConfigError(f"dataset {path!r} has no split {split!r}; it has {sorted(dd)}")
    sets = []
    for name in labels:
        try:
            lab = load_labels(path, name)
        except (FileNotFoundError, ValueError) as e:
            raise ConfigError(str(e)) from None
        if split not in lab:
            raise ConfigError(f"the labels {name!r} of {path!r} have no split {split!r}; run `python -m data_gen "
                              f"label --data {path}`")
        rows_of: dict = {}  # a DAgger set may hold several rows (states) per graph
        for r in lab[split]:
            rows_of.setdefault(r["graph_hash"], []).append(r)
        sets.append((name, rows_of))
    ds = dd[split]
    rows, skipped, graphs = [], {}, 0
    for row in ds:
        found = [(name, label) for name, lab in sets for label in lab.get(row["graph_hash"], ())]
        reason = ("more than max_vertices" if row["num_vertices"] > max_vertices else
                  "no intermediates" if row["num_intermediates"] == 0 else
                  "no labels" if not found else None)
        if reason is not None:
            skipped[reason] = skipped.get(reason, 0) + 1
            continue
        for name, label in found:
            if label["best_baseline"] != row["best_baseline"] or len(label["order"]) != row["num_intermediates"]:
                raise ConfigError(f"the labels {name!r} of graph {row['graph_hash']} in {path!r} do not match the "
                                  f"graph (another build?); rebuild them with `python -m data_gen label --data "
                                  f"{path}` after deleting {path}/{name}")
        first = len(rows)
        for name, _ in sets:
            mine = [label for n, label in found if n == name]
            if mine and "advantage" in mine[0]:
                if encodings != 1:
                    raise ConfigError(f"the rollout set {name!r} of {path!r} holds orders sampled from the graph as "
                                      f"traced; it trains a network of encodings 1, not {encodings}")
                rows.append(_rollout_entry(row, mine, name))
            else:
                rows.extend({**row, **label, "label_set": name} for label in mine)
        for entry in rows[first:] if repeats else ():
            entry["repeat"] = int(repeats[list(labels).index(entry["label_set"])])
        graphs += 1
        if limit and graphs >= limit:
            break
    if not rows:
        raise ConfigError(f"no labelled graph of split {split!r} fits (max_vertices={max_vertices}; "
                          f"left out: {skipped})")
    bucket = np.asarray([bucket_of(r["num_vertices"], buckets) for r in rows])
    return LabelledGraphs(rows, bucket, skipped, encodings)


def _rollout_entry(row: dict, labels: list, name: str) -> dict:
    """One entry for a graph's sampled orders (the rows of a rollout set): ``orders``,
    and per labelled state its ``positions``, the ``rollout`` it lies on, the move taken
    (``moves``), ``to_go`` and its order's ``advantage``; ``cost`` is the samples'
    geometric mean. One entry, so that a batch slot takes states of several of the
    graph's samples under one encoder pass, and the REINFORCE term compares them there."""
    def flat(key):
        return [x for label in labels for x in label[key]]

    return {**row, "label_set": name, "orders": [label["order"] for label in labels],
            "rollout": [k for k, label in enumerate(labels) for _ in label["positions"]],
            "positions": flat("positions"), "moves": flat("moves"), "regrets": flat("regrets"), "to_go": flat("to_go"),
            "advantage": [label["advantage"] for label in labels for _ in label["positions"]],
            "temperature": labels[0]["temperature"],
            "cost": int(round(float(np.exp(np.mean(np.log([max(label["cost"], 1) for label in labels]))))))}


def large_graphs(data: LabelledGraphs, count: int, large_from: int, label_set: str) -> set:
    """The hashes of ``count`` graphs of ``data`` with at least ``large_from`` intermediates
    and labels in ``label_set``: those of the smallest hashes (the same whatever order the
    data come in)."""
    hashes = sorted({r["graph_hash"] for r in data.rows
                     if r["num_intermediates"] >= large_from and r["label_set"] == label_set})
    if len(hashes) < count:
        raise ConfigError(f"data.large_validation={count} asks for more training graphs of {large_from}+ "
                          f"intermediates labelled by {label_set!r} than there are ({len(hashes)}); lower it, "
                          f"or build more with `python -m data_gen build --large-train N`")
    return set(hashes[:count])


def epoch_batches(data: LabelledGraphs, seed: int, epoch: int, tokens_per_batch: int,
                  states_per_graph: int) -> list:
    """One epoch's batches, in order: each a list of ``(graph, position indices)`` of one
    bucket, the positions of a visit in one stretch of the order (they share its encoder
    pass: :meth:`LabelledGraphs.stretch`); every labelled position of every graph appears
    exactly once."""
    rng = np.random.default_rng([seed, epoch, 7])
    batches = []
    for b in np.unique(data.bucket):
        visits = []
        for i in np.flatnonzero(data.bucket == b):
            starts = data.stretch(i, data.rows[i]["positions"])
            for t in np.unique(starts):
                for _ in range(data.rows[i].get("repeat", 1)):
                    perm = rng.permutation(np.flatnonzero(starts == t))
                    visits += [(int(i), perm[k:k + states_per_graph]) for k in range(0, len(perm), states_per_graph)]
        order = rng.permutation(len(visits))
        per = max(1, tokens_per_batch // (int(b) * states_per_graph))
        batches += [[visits[j] for j in order[k:k + per]] for k in range(0, len(order), per)]
    return [batches[j] for j in rng.permutation(len(batches))]


def make_batch(data: LabelledGraphs, visits: list, V: int, E: int, K: int, G: int,
               stakes_weight: float = 0.0) -> dict:
    """The padded arrays of one batch: ``G`` graph slots of ``V`` vertices and ``E``
    edges, ``K`` states each; empty slots and states have weight 0, the others
    ``exp(stakes_weight * stakes)`` (:meth:`LabelledGraphs.stakes`: 1 by default);
    ``sampled`` marks the states of rollout rows, with their order's ``advantage`` and
    sampling ``temperature``."""
    out = {
        "static": np.zeros((G, V, features.NUM_STATIC), np.float32), "src": np.zeros((G, E), np.int32),
        "dst": np.zeros((G, E), np.int32), "edge_features": np.zeros((G, E, features.NUM_EDGE), np.float32),
        "num_edges": np.zeros(G, np.int32), "vmask": np.zeros((G, V), bool),
        "dynamic": np.zeros((G, K, V, features.NUM_DYNAMIC), np.float32), "legal": np.zeros((G, K, V), bool),
        "target": np.zeros((G, K, V), np.float32), "regret": np.zeros((G, K, V), np.float32),
        "value": np.zeros((G, K), np.float32),
        "progress": np.zeros((G, K), np.float32), "weight": np.zeros((G, K), np.float32),
        "sampled": np.zeros((G, K), bool), "advantage": np.zeros((G, K), np.float32),
        "temperature": np.ones((G, K), np.float32),
    }
    for g, (i, which) in enumerate(visits):
        for k, v in features.pad_inputs(data.inputs(i, which), V, E).items():
            out[k][g] = v
        s = data.states(i, which)
        n, k = s["legal"].shape[1], len(which)
        for key in ("dynamic", "legal", "target", "regret"):
            out[key][g, :k, :n] = s[key]
        for key in ("value", "progress", "sampled", "advantage", "temperature"):
            out[key][g, :k] = s[key]
        out["weight"][g, :k] = np.exp(stakes_weight * data.stakes(i)) if stakes_weight else 1.0
    return out


def batch_shape(data: LabelledGraphs, visits: list, config) -> tuple:
    """``(V, E, K, G)`` of a batch of ``visits`` under ``config``: the bucket, its edge
    room (raised to the next power of two for a graph with more edges), states per
    graph and graphs per batch."""
    V = int(data.bucket[visits[0][0]])
    E = config.edges_per_vertex * V
    for i, which in visits:
        E = max(E, features.padded(len(data.inputs(i, which)["src"]), 128))
    K = config.states_per_graph
    return V, E, K, max(1, config.tokens_per_batch // (V * K))
