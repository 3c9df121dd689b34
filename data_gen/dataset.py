"""The dataset of elimination problems: traced graphs with their baseline costs.

``python -m data_gen build --out DIR --num-random N --seed S [--num-proc P] [--large K]``
(see :mod:`data_gen.__main__`) or :func:`build` writes, under ``DIR``:

* a Hugging Face :class:`datasets.DatasetDict` saved with ``save_to_disk`` (read it back
  with ``datasets.load_from_disk(DIR)``), splits ``train``, ``validation``, ``heldout``;
* ``parquet/<split>.parquet``: the same rows as Parquet files;
* ``README.md``: a dataset card (YAML metadata header, statistics per split and family);
* ``failures.json``: every function that failed to generate, trace or tabulate, with its
  family, name, seed, stage and reason (also counted in the printed summary);
* ``chunks/``: the finished work, one Parquet file per chunk, and ``build.json``, the
  build's parameters. An interrupted build run again with the same parameters skips the
  finished chunks and continues; the final splits are assembled from the chunks.

Rows (one per distinct graph; :func:`features` gives the exact types)::

    dd = datasets.load_from_disk(DIR)
    row = dd["heldout"][0]
    graph = data_gen.dataset.row_to_graph(row)  # alphagrad.cost(graph, "rev") == row["cost_reverse"]


==================  ========================================================================
graph_hash          ``Graph.fingerprint`` (shapes, kinds, edges and their structures)
family, name        where the graph comes from: ``random`` (training distribution),
                    ``random_heldout``, ``large_random``, ``large_zoo_chained``, ``large_train_random``,
                    ``large_train_zoo_chained``, ``stepped_train_random``, ``shared_train_random`` or the zoo
                    family of an :mod:`alphagrad.examples` entry (``published``, ``large_real``, ...)
source              ``random_program``, ``random_program_chained``, ``zoo`` or ``zoo_chained``
seed                the program seed of a random program (null for zoo functions)
params              JSON: ``random_programs.describe(spec, seed)`` for a random program;
                    the example (and number of copies) for a zoo function
num_vertices, ...   num_intermediates, num_edges, num_inputs, num_outputs
num_structures      distinct edge structures of the graph (``len(graph.structures)``)
table_size          structures in its rule tables (closed under elimination; what
                    ``engine.encode`` pads to a multiple of 64)
shapes              ``Graph.to_arrays()["shapes"]``: list of per-vertex shapes
kinds               per vertex 0 input, 1 intermediate, 2 output (int8)
edges               list of ``[src, dst, structure_index]``
structures          JSON list of the structure dicts of ``to_arrays()["structures"]``
cost_forward, ...   multiplications, "exact" convention, of forward, reverse and Markowitz
                    (``baselines.markowitz``) elimination; ``cost_optimal`` the minimum
                    (exact search) where ``num_intermediates <= 16``, else null
best_baseline       min(cost_forward, cost_reverse, cost_markowitz)
==================  ========================================================================

:func:`row_to_graph` rebuilds a row's :class:`~alphagrad.graph.Graph` (same fingerprint and
costs; it has no program, so it can be scored but not executed).

Splits. ``train`` and ``validation`` hold random programs whose :class:`ProgramSpec` is
drawn per program from :data:`TRAIN` (about ``validation_fraction`` of them go to
validation) and the zoo examples whose family is not ``published`` or ``large_real``
(split by a hash of their name). :data:`TRAIN` draws 5-150 operations, ranks up to 2, axes
up to 6, 1-6 inputs, 1-4 outputs, fan-in 1-4, width 1-32 and every category weight from a
range around the generator's default mix. ``heldout`` holds the ten published tasks, random
programs from :data:`HELDOUT` (rank-3 values, 151-250 operations, a mix without dots,
reshapes and explicit broadcasts) and large graphs of 300 to 500 intermediates: random
programs from :data:`LARGE` and held-out zoo functions (``published``, ``large_real``)
iterated (:func:`chain`) until they reach that size; and the real-sized programs of
:mod:`alphagrad.examples.real` (family ``large_real``: 500-5,000 intermediates, loops
unrolled). Graphs are deduplicated by ``graph_hash`` with priority heldout > validation >
train, so no heldout graph occurs in train or validation.

Work is split into chunks (by group: training-distribution programs, zoo, held-out
programs, large graphs); an item's program is a function of (build seed, group, index)
only, so a chunk's contents are too. A chunk file records a key of its contents (build
parameters, item indices, and for zoo-based groups the zoo's names); a rerun reuses the
files whose key matches and recomputes the others. ``chunks/build.json`` holds the build
parameters: resuming with other ones (seed, distributions, ...) is refused; the counts
(``num_random``, ``large``, ...) may change, which adds or drops chunks.

Costs are computed with the compiled CPU evaluator (:mod:`alphagrad.evaluator`, the same
rule tables and elimination step as the JAX engine, and the one Markowitz and exact search
of ``alphagrad.baselines``).
Rule tables larger than ``max_structures`` (default 1024) are reported as failures: their
pure-Python closure takes seconds to minutes, and the engine would pad every graph of a
batch to them.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import hashlib
import json
import math
import multiprocessing
import os
import queue as queue_lib
import shutil
import sys
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from alphagrad.examples import chain
from data_gen import random_programs as rp

#: Bumped whenever the rows a build writes change (columns, their meaning, the pipeline).
SCHEMA_VERSION = 3  # 2: the `branches` column; 3: index maps (`index_map` in structures)

#: Cost convention of every cost column.
CONVENTION = "exact"

#: ``cost_optimal`` is computed for graphs with at most this many intermediates.
OPTIMAL_MAX_INTERMEDIATES = 16

#: Rule tables with more structures than this are reported as failures (see above).
DEFAULT_MAX_STRUCTURES = 1024

#: Graphs per chunk of the training distribution; other groups use fractions of it.
DEFAULT_CHUNK_SIZE = 32

SPLITS = ("train", "validation", "heldout")

#: Work groups, in the order their chunks are scheduled (slow ones first) and their
#: divisor of the chunk size.
GROUPS = {"large": 16, "large_train": 16, "stepped_train": 16, "shared_train": 16, "heldout_random": 4, "zoo": 4,
          "random": 1}

#: Order in which rows are kept when deduplicating (first occurrence wins).
DEDUP_PRIORITY = ("heldout", "validation", "train")

#: Largest size of a large training graph (intermediates).
LARGE_TRAIN_SIZE_LIMIT = 5000
#: Allowed range of the large held-out graphs' size (intermediates): as the training graphs'.
LARGE_SIZE_LIMITS = (2, LARGE_TRAIN_SIZE_LIMIT)


# --------------------------------------------------------------------------------------
# Distributions of program specs.

_INT_FIELDS = ("num_inputs", "num_outputs", "num_ops", "max_rank", "max_dim", "fan_in", "width")


def _pair(value, name: str) -> tuple:
    try:
        lo, hi = value
    except (TypeError, ValueError):
        raise ValueError(f"{name} = {value!r} must be a pair (low, high)") from None
    return lo, hi


@dataclasses.dataclass(frozen=True)
class SpecDistribution:
    """A distribution of :class:`~data_gen.random_programs.ProgramSpec`: every integer
    field uniform in its inclusive ``(low, high)`` range, every mix weight uniform in its
    range (rounded to 3 decimals); ``num_outputs`` is clipped to the values a program has.
    """

    name: str
    num_inputs: tuple = (1, 6)
    num_outputs: tuple = (1, 4)
    num_ops: tuple = (5, 150)
    max_rank: tuple = (0, 2)
    max_dim: tuple = (1, 6)
    fan_in: tuple = (1, 4)
    width: tuple = (1, 32)
    mix: tuple = (
        ("elementwise_unary", (0.15, 0.45)),
        ("elementwise_binary", (0.15, 0.45)),
        ("dot", (0.03, 0.2)),
        ("reduction", (0.03, 0.2)),
        ("broadcast", (0.03, 0.15)),
        ("reshape", (0.03, 0.2)),
    )

    def validate(self) -> None:
        """Raises ValueError naming the bad field (ranges outside what ProgramSpec allows,
        low > high, bad mix weights)."""
        for field in _INT_FIELDS:
            lo, hi = _pair(getattr(self, field), f"{self.name}.{field}")
            for v in (lo, hi):
                if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                    raise ValueError(f"{self.name}.{field} = {(lo, hi)!r}: bounds must be integers")
            if lo > hi:
                raise ValueError(f"{self.name}.{field} = {(lo, hi)!r}: low is larger than high")
            rlo, rhi = rp.RANGES[field]
            if not (rlo <= lo and hi <= rhi):
                raise ValueError(
                    f"{self.name}.{field} = {(lo, hi)!r} is out of range: ProgramSpec.{field} "
                    f"must be an integer in [{rlo}, {rhi}]"
                )
        mix = dict(self.mix)
        unknown = sorted(set(mix) - set(rp.CATEGORIES))
        if unknown:
            raise ValueError(f"{self.name}.mix has unknown categories {unknown}; use {list(rp.CATEGORIES)}")
        for cat, bounds in mix.items():
            lo, hi = _pair(bounds, f"{self.name}.mix[{cat!r}]")
            if not all(isinstance(v, (int, float)) and math.isfinite(v) for v in (lo, hi)) or not 0 <= lo <= hi:
                raise ValueError(
                    f"{self.name}.mix[{cat!r}] = {bounds!r}: weights must satisfy 0 <= low <= high"
                )
        if not any(dict(self.mix).get(c, (0, 0))[0] >= 0.001 for c in rp.CATEGORIES):
            raise ValueError(f"{self.name}.mix needs a category whose low weight is >= 0.001")
        # The extreme specs must be valid ProgramSpecs (ProgramSpec names the bad field).
        for pick in (0, 1):
            d = {f: getattr(self, f)[pick] for f in _INT_FIELDS}
            d["num_outputs"] = min(d["num_outputs"], d["num_inputs"] + d["num_ops"])
            rp.ProgramSpec(**d, mix={c: b[pick] for c, b in mix.items()} if pick else
                           {c: max(b[0], 0.001) for c, b in mix.items()})

    def draw(self, rng: np.random.Generator, **fixed) -> rp.ProgramSpec:
        """One spec drawn with ``rng``; ``fixed`` overrides fields."""
        d = {f: int(rng.integers(getattr(self, f)[0], getattr(self, f)[1] + 1)) for f in _INT_FIELDS}
        mix = {c: round(float(rng.uniform(lo, hi)), 3) for c, (lo, hi) in self.mix}
        d.update(fixed)
        d["num_outputs"] = min(d["num_outputs"], d["num_inputs"] + d["num_ops"])
        return rp.ProgramSpec(**d, mix=mix)

    def to_dict(self) -> dict:
        d = {f: list(getattr(self, f)) for f in _INT_FIELDS}
        d["mix"] = {c: list(b) for c, b in self.mix}
        return d

    def replace(self, **changes) -> "SpecDistribution":
        return dataclasses.replace(self, **changes)


#: The training (and validation) distribution of random programs.
TRAIN = SpecDistribution("train")

#: The held-out random family: sizes, ranks and mixes training never sees (rank-3
#: values, 151-250 operations, no dots, reshapes or explicit broadcasts, a heavier
#: elementwise share). Dots, reshapes, or broadcasts together with reductions, of rank-3
#: values make the rule tables explode (thousands of structures), hence this mix.
HELDOUT = SpecDistribution(
    "heldout",
    num_ops=(151, 250),
    max_rank=(3, 3),
    max_dim=(2, 3),
    mix=(
        ("elementwise_unary", (0.5, 1.5)),
        ("elementwise_binary", (1.0, 2.0)),
        ("dot", (0.0, 0.0)),
        ("reduction", (0.05, 0.15)),
        ("broadcast", (0.0, 0.0)),
        ("reshape", (0.0, 0.0)),
    ),
)

#: Large random programs (``num_ops`` is set to reach the target size, at most this
#: distribution's high ``num_ops``: 600 operations make about 800 intermediates, and
#: ``--large-max-ops`` raises it; small axes keep the rule tables tractable at this size).
LARGE = SpecDistribution("large", num_ops=(1, 600), max_rank=(0, 2), max_dim=(1, 3))

#: One step of a stepped program (:attr:`BuildConfig.stepped_train`): a small random
#: program, iterated like the body of a time-stepping loop.
STEP = SpecDistribution("step", num_ops=(10, 60), max_rank=(0, 2), max_dim=(1, 4))

#: One step of a program with shared weights (:attr:`BuildConfig.shared_train`): at least
#: two inputs (a state and weights) and wider values than :data:`STEP`'s.
SHARED = SpecDistribution("shared", num_inputs=(2, 6), num_ops=(10, 60), max_rank=(1, 2), max_dim=(2, 8))


# --------------------------------------------------------------------------------------
# The build configuration.


@dataclasses.dataclass(frozen=True)
class BuildConfig:
    """Everything that determines a build's rows.

    Attributes:
      seed: the build seed; every program's spec and seed derive from (seed, group, index).
      num_random: random programs of the training distribution (train + validation).
      num_heldout: random programs of the held-out distribution (None: ceil(num_random/10)).
      large: graphs of ``large_size`` intermediates (random programs and chained zoo
        functions, alternately).
      large_size: (low, high) intermediates of a large graph.
      large_train: large graphs for training (random programs and chained zoo functions
        outside the held-out families, alternately), of ``large_train_size``.
      large_train_size: (low, high) intermediates of a large training graph.
      stepped_train: stepped training graphs of ``large_train_size``: a random program
        from :data:`STEP` iterated like a time-stepping loop (:func:`chain`), every other
        one summed into a scalar loss. The real programs of time-stepping solvers, scans
        and stacked layers are deep and their best orders sweep from one side (forward
        or reverse, where local greedy choices cost several times more); random programs
        are shallow.
      shared_train: training graphs of ``large_train_size`` like ``stepped_train``'s, but
        one input of the step is the carried state (one the outputs depend on, of an
        output's shape when there is one): its other inputs reach every step unchanged
        (the weights of a recurrent cell, a layer stack's shared parameters, a solver's
        constants: inputs with many consumers across the depth), and its values are
        wider (:data:`SHARED`).
      validation_fraction: share of training-distribution programs (and non-published zoo
        examples) that go to validation.
      max_structures: larger rule tables are reported as failures.
      chunk_size: graphs per chunk of the training distribution.
      zoo: "all", "none", "published" or a tuple of example names.
      train, heldout, large_dist: the spec distributions.
    """

    seed: int = 0
    num_random: int = 1000
    num_heldout: int | None = None
    large: int = 16
    large_size: tuple = (300, 500)
    large_train: int = 0
    large_train_size: tuple = (300, 2000)
    stepped_train: int = 0
    shared_train: int = 0
    validation_fraction: float = 0.1
    max_structures: int = DEFAULT_MAX_STRUCTURES
    chunk_size: int = DEFAULT_CHUNK_SIZE
    zoo: Any = "all"
    train: SpecDistribution = TRAIN
    heldout: SpecDistribution = HELDOUT
    large_dist: SpecDistribution = LARGE

    @property
    def heldout_count(self) -> int:
        return -(-self.num_random // 10) if self.num_heldout is None else self.num_heldout

    def validate(self) -> None:
        """Raises ValueError naming the first bad parameter; called before any work."""
        def count(name, value, lo=0):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < lo:
                raise ValueError(f"{name} = {value!r} must be an integer >= {lo}")

        count("seed", self.seed)
        count("num_random", self.num_random)
        if self.num_heldout is not None:
            count("num_heldout", self.num_heldout)
        count("large", self.large)
        count("large_train", self.large_train)
        count("stepped_train", self.stepped_train)
        count("shared_train", self.shared_train)
        lo, hi = _pair(self.large_train_size, "large_train_size")
        if not all(isinstance(v, (int, np.integer)) for v in (lo, hi)) or not 2 <= lo <= hi <= LARGE_TRAIN_SIZE_LIMIT:
            raise ValueError(f"large_train_size = {(lo, hi)!r} must be integers with 2 <= low <= high <= "
                             f"{LARGE_TRAIN_SIZE_LIMIT} (intermediates)")
        count("max_structures", self.max_structures, 1)
        count("chunk_size", self.chunk_size, 1)
        lo, hi = _pair(self.large_size, "large_size")
        count("large_size low", lo, LARGE_SIZE_LIMITS[0])
        count("large_size high", hi, LARGE_SIZE_LIMITS[0])
        if not lo <= hi <= LARGE_SIZE_LIMITS[1]:
            raise ValueError(
                f"large_size = {(lo, hi)!r} must satisfy {LARGE_SIZE_LIMITS[0]} <= low <= high "
                f"<= {LARGE_SIZE_LIMITS[1]} (intermediates)"
            )
        vf = self.validation_fraction
        if isinstance(vf, bool) or not isinstance(vf, (int, float)) or not 0 <= vf < 1:
            raise ValueError(f"validation_fraction = {vf!r} must be a number in [0, 1)")
        for dist in (self.train, self.heldout, self.large_dist):
            dist.validate()
        zoo = self.zoo
        if isinstance(zoo, str):
            if zoo not in ("all", "none", "published"):
                raise ValueError(f"zoo = {zoo!r} must be 'all', 'none', 'published' or a list of example names")
        else:
            from alphagrad import examples

            known = {e.name for e in examples.all_examples()}
            unknown = sorted(set(zoo) - known)
            if unknown:
                raise ValueError(f"zoo names unknown examples {unknown}; known: {sorted(known)}")

    def identity(self) -> dict:
        """What must match for a build directory to be resumed (counts may change)."""
        return {
            "schema_version": SCHEMA_VERSION,
            "generator_version": rp.GENERATOR_VERSION,
            "convention": CONVENTION,
            "seed": int(self.seed),
            "validation_fraction": float(self.validation_fraction),
            "max_structures": int(self.max_structures),
            "large_size": list(self.large_size),
            **({"large_train_size": list(self.large_train_size)}
               if self.large_train or self.stepped_train or self.shared_train else {}),
            **({"step_dist": STEP.to_dict()} if self.stepped_train else {}),
            **({"shared_dist": SHARED.to_dict()} if self.shared_train else {}),
            "train": self.train.to_dict(),
            "heldout": self.heldout.to_dict(),
            "large_dist": self.large_dist.to_dict(),
            "optimal_max_intermediates": OPTIMAL_MAX_INTERMEDIATES,
        }

    def to_dict(self) -> dict:
        d = self.identity()
        d.update(num_random=self.num_random, num_heldout=self.heldout_count, large=self.large,
                 large_train=self.large_train, stepped_train=self.stepped_train,
                 shared_train=self.shared_train, chunk_size=self.chunk_size,
                 zoo=self.zoo if isinstance(self.zoo, str) else list(self.zoo))
        return d


# --------------------------------------------------------------------------------------
# Baseline costs (compiled evaluator).


def baseline_costs(graph, tables=None, max_structures: int = DEFAULT_MAX_STRUCTURES,
                   optimal_max: int = OPTIMAL_MAX_INTERMEDIATES) -> dict:
    """Multiplications ("exact" convention) of forward, reverse and Markowitz elimination,
    their minimum, the optimum where ``num_intermediates <= optimal_max`` (else None) and
    the rule table size.

    Raises:
      alphagrad.rules.TooManyStructuresError: the rule tables exceed ``max_structures``.
    """
    from alphagrad import rules as rl
    from alphagrad import scoring
    from alphagrad.evaluator import Evaluator

    T = tables if tables is not None else rl.build_tables(graph, max_structures=max_structures)
    ev = Evaluator(graph, CONVENTION, rule_tables=T)
    costs = scoring.baseline_costs(graph, CONVENTION, ev)
    best = min(costs.values())  # scoring.best_baseline, from the costs at hand
    opt = None
    if len(graph.intermediates) <= optimal_max:
        opt = min(ev.optimal()[1], best)  # a state-hash collision could only make the search worse
    return {"cost_forward": costs["forward"], "cost_reverse": costs["reverse"], "cost_markowitz": costs["markowitz"],
            "cost_optimal": opt, "best_baseline": best, "table_size": T.size}


# --------------------------------------------------------------------------------------
# Rows.


def features():
    """The :class:`datasets.Features` of a split."""
    import datasets as hf

    i32, i64, s = hf.Value("int32"), hf.Value("int64"), hf.Value("string")
    return hf.Features({
        "graph_hash": s, "family": s, "name": s, "source": s, "seed": i64, "params": s,
        "num_vertices": i32, "num_intermediates": i32, "num_edges": i32, "num_inputs": i32,
        "num_outputs": i32, "num_structures": i32, "table_size": i32,
        "shapes": hf.List(hf.List(i32)), "kinds": hf.List(hf.Value("int8")),
        "edges": hf.List(hf.List(i32)), "structures": s, "branches": hf.List(hf.List(i32)),
        "cost_forward": i64, "cost_reverse": i64, "cost_markowitz": i64, "cost_optimal": i64,
        "best_baseline": i64,
    })


COLUMNS = tuple(features())  # noqa: E305 (the documented column order)

#: One line per column, for the dataset card.
COLUMN_DOCS = {
    "graph_hash": "`Graph.fingerprint`: hash of shapes, kinds, edges and edge structures",
    "family": "`random`, `random_heldout`, `large_random`, `large_zoo_chained`, `large_train_random`, "
              "`large_train_zoo_chained`, `stepped_train_random`, `shared_train_random`, or the zoo family",
    "name": "program or example name (a chained example: `<name>_chain<copies>`)",
    "source": "`random_program`, `random_program_chained`, `zoo` or `zoo_chained`",
    "seed": "program seed of a random program (null for zoo functions)",
    "params": "JSON: `random_programs.describe(spec, seed)`, or the zoo example (and copies)",
    "num_vertices": "vertices (inputs + intermediates + outputs)",
    "num_intermediates": "intermediate vertices (what an elimination order permutes)",
    "num_edges": "edges (local partial Jacobians)",
    "num_inputs": "input vertices",
    "num_outputs": "output vertices",
    "num_structures": "distinct edge structures (length of `structures`)",
    "table_size": "structures in the rule tables (closure under elimination)",
    "shapes": "per vertex, the shape of its value",
    "kinds": "per vertex: 0 input, 1 intermediate, 2 output",
    "edges": "`[src, dst, structure_index]` per edge, sorted by (dst, src)",
    "structures": "JSON list of structure dicts (`out_shape, in_shape, out_vars, in_vars, value_vars, sign, index_map`)",
    "branches": "`[taken, count]` per lax.cond/switch whose branch depends on the arguments (in the fingerprint; usually empty)",
    "cost_forward": "multiplications of forward elimination (exact convention)",
    "cost_reverse": "multiplications of reverse elimination",
    "cost_markowitz": "multiplications of the Markowitz order (`baselines.markowitz`)",
    "cost_optimal": f"minimum over all orders if num_intermediates <= {OPTIMAL_MAX_INTERMEDIATES}, else null",
    "best_baseline": "min(cost_forward, cost_reverse, cost_markowitz)",
}


def graph_to_row(graph, *, family: str, name: str, source: str, seed: int | None, params: Mapping,
                 max_structures: int = DEFAULT_MAX_STRUCTURES) -> dict:
    """The dataset row of ``graph`` (see the module docstring for the columns)."""
    from alphagrad.graph import INPUT, OUTPUT

    arrays = graph.to_arrays()
    costs = baseline_costs(graph, max_structures=max_structures)
    row = {
        "graph_hash": graph.fingerprint, "family": family, "name": name, "source": source,
        "seed": None if seed is None else int(seed), "params": json.dumps(params, sort_keys=True),
        "num_vertices": graph.num_vertices, "num_intermediates": len(graph.intermediates),
        "num_edges": len(graph.edges), "num_inputs": sum(k == INPUT for k in graph.kinds),
        "num_outputs": sum(k == OUTPUT for k in graph.kinds),
        "num_structures": len(arrays["structures"]),
        "shapes": [[int(n) for n in s] for s in arrays["shapes"]],
        "kinds": [int(k) for k in arrays["kinds"]],
        "edges": np.asarray(arrays["edges"]).tolist(),
        "structures": json.dumps(arrays["structures"], sort_keys=True, separators=(",", ":")),
        "branches": [[int(t), int(n)] for t, n in arrays.get("branches", ())],
        **costs,
    }
    return {c: row[c] for c in COLUMNS}


def row_to_graph(row: Mapping):
    """The :class:`~alphagrad.graph.Graph` of a dataset row (``Graph.from_arrays``)."""
    from alphagrad.graph import Graph

    edges = np.asarray(row["edges"], np.int64).reshape(-1, 3)
    branches = row.get("branches") or []  # absent in rows of schema version 1
    return Graph.from_arrays({
        "shapes": row["shapes"], "kinds": np.asarray(row["kinds"], np.int8), "edges": edges,
        "structures": json.loads(row["structures"]), **({"branches": branches} if branches else {}),
    })


# --------------------------------------------------------------------------------------
# Work items: what each (group, index) builds.

_GROUP_CODES = {"random": 1, "heldout_random": 2, "large": 3, "large_train": 4, "stepped_train": 5,
                "shared_train": 6}


def generate_program(spec: rp.ProgramSpec, seed: int):
    """``random_programs.generate`` (a seam for tests to inject failures)."""
    return rp.generate(spec, seed)


def _rng(config: BuildConfig, group: str, index: int, *more) -> np.random.Generator:
    return np.random.default_rng([int(config.seed), _GROUP_CODES[group], int(index), *more])


def _program_seed(rng) -> int:
    return int(rng.integers(0, 2**31 - 1))


def _name_fraction(name: str) -> float:
    return int(hashlib.sha256(name.encode()).hexdigest()[:8], 16) / 16**8


def zoo_examples(selection="all") -> list:
    """The zoo examples a build uses, in ``all_examples()`` order."""
    from alphagrad import examples

    exs = examples.all_examples()
    if selection == "all":
        return list(exs)
    if selection == "none":
        return []
    if selection == "published":
        return [e for e in exs if e.family == "published"]
    names = set(selection)
    return [e for e in exs if e.name in names]


class _Failure(Exception):
    """A work item failed at some stage (carries the stage)."""

    def __init__(self, stage: str, error: BaseException):
        super().__init__(stage, error)
        self.stage, self.error = stage, error


def _stage(stage: str, fn: Callable, *args):
    try:
        return fn(*args)
    except _Failure:
        raise
    except Exception as e:  # noqa: BLE001 - every failure is recorded, never dropped
        raise _Failure(stage, e) from e


def _trace(fn, args):
    import alphagrad

    return alphagrad.trace(fn, *args)


def _random_item(config: BuildConfig, group: str, index: int):
    """(meta, graph) of random-program item ``index`` of ``group``."""
    rng = _rng(config, group, index)
    dist = config.train if group == "random" else config.heldout
    spec = dist.draw(rng)
    seed = _program_seed(rng)
    if group == "random":
        split = "validation" if rng.random() < config.validation_fraction else "train"
        family, name = "random", f"random_{index:06d}"
    else:
        split, family, name = "heldout", "random_heldout", f"heldout_random_{index:06d}"
    meta = dict(split=split, family=family, name=name, source="random_program", seed=seed,
                params=rp.describe(spec, seed))
    return meta, lambda: _stage("trace", _trace, *_stage("generate", generate_program, spec, seed))


def _large_item(config: BuildConfig, index: int, zoo: list, group: str = "large"):
    """(meta, graph) of large item ``index`` of ``group`` (``large``: held out;
    ``large_train``: training, of ``large_train_size``): even indices (and all, without a
    zoo) are random programs, odd ones chained zoo functions of the group's split (a
    chained training function is not held out, nor a held-out one fit to train on)."""
    train = group == "large_train"
    zoo = [e for e in zoo if (e.family in HELDOUT_ZOO_FAMILIES) != train]
    lo, hi = config.large_train_size if train else config.large_size
    split, prefix = ("train", "large_train") if train else ("heldout", "large")
    rng = _rng(config, group, index)
    target = int(rng.integers(lo, hi + 1))
    if index % 2 == 0 or not zoo:
        max_ops = config.large_dist.num_ops[1]
        base = config.large_dist.draw(rng, num_ops=min(max(target, 1), max_ops))
        name = f"{prefix}_random_{index:05d}"
        meta = dict(split=split, family=f"{prefix}_random", name=name, source="random_program")

        def make():
            spec, ops, got = base, base.num_ops, None
            for attempt in range(8):
                spec = dataclasses.replace(spec, num_ops=ops,
                                           num_outputs=min(spec.num_outputs, spec.num_inputs + ops))
                seed = _program_seed(_rng(config, group, index, attempt))
                graph = _stage("trace", _trace, *_stage("generate", generate_program, spec, seed))
                got = len(graph.intermediates)
                if lo <= got <= hi:
                    meta.update(seed=seed, params=rp.describe(spec, seed))
                    return graph
                want = round(ops * target / max(got, 1))
                if want > max_ops or got < 0.25 * ops:  # a spec whose operations mostly die: redraw
                    spec = config.large_dist.draw(_rng(config, group, index, 1000 + attempt),
                                                  num_ops=min(target, max_ops))
                    ops = spec.num_ops
                else:
                    ops = int(np.clip(want, 1, max_ops))
            more = (f"; at most {max_ops} operations are allowed: raise the large distribution's num_ops "
                    f"(`--large-max-ops`) for graphs this size" if got < lo and spec.num_ops == max_ops else "")
            raise _Failure("size", ValueError(
                f"no program of {(lo, hi)} intermediates after 8 attempts (last: {got} "
                f"intermediates from {spec.num_ops} operations){more}"))

        meta.update(seed=None, params=rp.describe(base))
        return meta, make

    # A chained zoo function: the first example (round robin from index // 2) small
    # enough to be copied at least twice.
    meta = dict(split=split, family=f"{prefix}_zoo_chained", source="zoo_chained", seed=None)
    start = (index // 2) % len(zoo)
    candidates = zoo[start:] + zoo[:start]
    meta.update(name=f"chain_{candidates[0].name}", params={"example": candidates[0].name})

    def make():
        for ex in candidates:
            try:
                n0 = len(_base_graph(ex).intermediates)
            except Exception:  # noqa: BLE001 - the zoo group reports this example's failure
                continue
            if 0 < n0 <= hi // 2:
                break
        else:
            raise _Failure("size", ValueError(f"no zoo example has 1..{hi // 2} intermediates to chain"))

        def build(copies):
            meta.update(name=f"{ex.name}_chain{copies}",
                        params={"example": ex.name, "family": ex.family, "copies": copies,
                                "coupling": "x + 0.1*tanh(output of x's shape, else sum of output means)"})
            return _stage("trace", _trace, chain(ex.fn, copies), ex.args)

        return _sized(build, n0, target, lo, hi, f"chaining {ex.name} ({n0} intermediates)")

    return meta, make


def _sized(build, n0: int, target: int, lo: int, hi: int, what: str):
    """``build(copies)``'s graph with ``lo..hi`` intermediates: copies start at ``target /
    n0`` (at least 2) and are corrected from each graph's size, a few tries at most."""
    copies, got, tried = max(2, round(target / n0)), None, set()
    for _ in range(6):
        tried.add(copies)
        graph = build(copies)
        got = len(graph.intermediates)
        if lo <= got <= hi:
            return graph
        if got < copies:  # each copy that feeds the next adds an intermediate at least
            raise _Failure("size", ValueError(f"{what}: {copies} copies make {got} intermediates (a copy "
                                              f"does not reach the next)"))
        nxt = max(2, round(copies * target / max(got, 1)))
        if nxt in tried:
            nxt = copies + (1 if got < lo else -1)
        if nxt < 2 or nxt in tried:
            break
        copies = nxt
    raise _Failure("size", ValueError(
        f"{what} gives no graph of {(lo, hi)} intermediates (last: {copies} copies, {got})"))


def _stepped_item(config: BuildConfig, index: int, group: str = "stepped_train"):
    """(meta, graph) of stepped training item ``index``: a program from :data:`STEP`
    iterated (:func:`chain`) to ``large_train_size`` intermediates; odd indices return the
    sum of squares of the last step's outputs (one scalar: the reverse-mode regime).
    ``group`` ``shared_train``: a program from :data:`SHARED` of which one input (moved
    first, :func:`_state_first`) is carried from step to step and the others are shared
    by every step."""
    import jax
    import jax.numpy as jnp

    lo, hi = config.large_train_size
    shared = group == "shared_train"
    rng = _rng(config, group, index)
    target = int(rng.integers(lo, hi + 1))
    spec = (SHARED if shared else STEP).draw(rng)
    seed = _program_seed(rng)
    loss = index % 2 == 1
    name = f"{group}_{index:05d}"
    meta = dict(split="train", family=f"{group}_random", name=name, source="random_program_chained",
                seed=seed, params={**rp.describe(spec, seed), "copies": None, "loss": loss,
                                   **({"carry": 1} if shared else {})})

    def iterated(fn, copies):
        chained = chain(fn, copies, carry=1 if shared else None)
        if not loss:
            return chained
        return lambda *a: sum(jnp.sum(jnp.square(o)) for o in jax.tree_util.tree_leaves(chained(*a)))

    def make():
        fn, args = _stage("generate", generate_program, spec, seed)
        step = _stage("trace", _trace, fn, args)
        if shared:
            fn, args = _state_first(fn, args, step)
        n0 = max(len(step.intermediates), 1)  # the same with the arguments reordered

        def build(copies):
            meta["params"]["copies"] = copies
            return _stage("trace", _trace, iterated(fn, copies), args)

        return _sized(build, n0, target, lo, hi, f"iterating a program of {n0} intermediates")

    return meta, make


def _state_first(fn, args, graph):
    """``fn`` and ``args`` (``graph``: their trace) with the argument to carry from step
    to step moved first: one the outputs depend on, of an output's shape if there is one
    (a state), so that the steps chain."""
    used = {e.src for e in graph.edges}
    live = [k for k, v in enumerate(graph.inputs) if v in used]
    shapes = {graph.shapes[v] for v in graph.outputs}
    first = next((k for k in live if tuple(np.shape(args[k])) in shapes), live[0] if live else 0)
    order = [first] + [k for k in range(len(args)) if k != first]

    def moved(*a):
        full = [None] * len(a)
        for at, k in enumerate(order):
            full[k] = a[at]
        return fn(*full)

    return moved, tuple(args[k] for k in order)


_BASE_GRAPHS: dict = {}


def _base_graph(ex):
    if ex.name not in _BASE_GRAPHS:
        _BASE_GRAPHS[ex.name] = _trace(ex.fn, ex.args)
    return _BASE_GRAPHS[ex.name]


#: Zoo families whose examples go to the held-out split only: the published tasks and the
#: real-sized programs of :mod:`alphagrad.examples.real`.
HELDOUT_ZOO_FAMILIES = ("published", "large_real")


def _zoo_item(config: BuildConfig, ex):
    if ex.family in HELDOUT_ZOO_FAMILIES:
        split = "heldout"
    else:
        split = "validation" if _name_fraction(ex.name) < config.validation_fraction else "train"
    meta = dict(split=split, family=ex.family, name=ex.name, source="zoo", seed=None,
                params={"example": ex.name, "family": ex.family, "description": ex.description})
    return meta, lambda: _stage("trace", _base_graph, ex)


def _item(config: BuildConfig, group: str, index, zoo: list):
    if group in ("random", "heldout_random"):
        return _random_item(config, group, index)
    if group in ("large", "large_train"):
        return _large_item(config, index, zoo, group)
    if group in ("stepped_train", "shared_train"):
        return _stepped_item(config, index, group)
    ex = next(e for e in zoo if e.name == index)
    return _zoo_item(config, ex)


def compute_item(config: BuildConfig, group: str, index, zoo: list | None = None):
    """``(row, None)`` or ``(None, failure)`` for one work item."""
    zoo = zoo_examples(config.zoo) if zoo is None else zoo
    t0 = time.perf_counter()
    meta = {"split": None, "family": group, "name": str(index), "seed": None}
    try:
        meta, make = _item(config, group, index, zoo)
        graph = make()
        row = _stage("tables", lambda: graph_to_row(
            graph, family=meta["family"], name=meta["name"], source=meta["source"], seed=meta["seed"],
            params=meta["params"], max_structures=config.max_structures))
        row["split"] = meta["split"]
        return row, None
    except Exception as e:  # noqa: BLE001
        stage, err = (e.stage, e.error) if isinstance(e, _Failure) else ("setup", e)
        if stage == "tables" and type(err).__name__ != "TooManyStructuresError":
            stage = "baselines"
        failure = {
            "group": group, "index": index, "split": meta.get("split"), "family": meta.get("family"),
            "name": meta.get("name"), "seed": meta.get("seed"), "stage": stage,
            "error": type(err).__name__, "reason": str(err)[:1000],
            "traceback": "".join(traceback.format_exception(err))[-3000:],
            "seconds": round(time.perf_counter() - t0, 3),
        }
        return None, failure


# --------------------------------------------------------------------------------------
# Chunks.


@dataclasses.dataclass(frozen=True)
class Chunk:
    """A unit of work: items ``indices`` of ``group``; ``key`` identifies its contents."""

    group: str
    number: int
    indices: tuple
    key: str

    @property
    def name(self) -> str:
        return f"{self.group}-{self.number:05d}"

    def path(self, out_dir) -> str:
        return os.path.join(out_dir, "chunks", f"{self.name}.parquet")


def _zoo_digest(zoo: list) -> str:
    return hashlib.sha256(json.dumps([e.name for e in zoo]).encode()).hexdigest()[:12]


def plan_chunks(config: BuildConfig, zoo: list) -> list[Chunk]:
    """Every chunk of the build, in scheduling order. A chunk's contents depend only on
    the build identity, its group and number (and, for zoo-based groups, the zoo's names)."""
    items = {
        "random": list(range(config.num_random)),
        "heldout_random": list(range(config.heldout_count)),
        "large": list(range(config.large)),
        "large_train": list(range(config.large_train)),
        "stepped_train": list(range(config.stepped_train)),
        "shared_train": list(range(config.shared_train)),
        "zoo": [e.name for e in zoo],
    }
    ident = hashlib.sha256(json.dumps(config.identity(), sort_keys=True).encode()).hexdigest()[:12]
    chunks = []
    for group, divisor in GROUPS.items():
        size = max(1, config.chunk_size // divisor)
        idx = items[group]
        for number, start in enumerate(range(0, len(idx), size)):
            part = tuple(idx[start:start + size])
            extra = _zoo_digest(zoo) if group in ("zoo", "large", "large_train") else ""
            key = hashlib.sha256(json.dumps([ident, group, number, list(part), extra]).encode()).hexdigest()[:16]
            chunks.append(Chunk(group, number, part, key))
    return chunks


_META_KEY = b"alphagrad.chunk"


def _chunk_schema():
    import pyarrow as pa

    schema = features().arrow_schema
    return schema.append(pa.field("split", pa.string())).remove_metadata()


def chunk_is_done(chunk: Chunk, out_dir) -> bool:
    """Whether ``chunk``'s file exists, is readable and holds exactly this chunk's work."""
    import pyarrow.parquet as pq

    path = chunk.path(out_dir)
    if not os.path.exists(path):
        return False
    try:
        meta = json.loads(pq.read_schema(path).metadata[_META_KEY])
    except Exception:  # noqa: BLE001 - unreadable: redo it
        return False
    return meta.get("key") == chunk.key and meta.get("schema_version") == SCHEMA_VERSION


def read_chunk(chunk: Chunk, out_dir):
    """``(table, meta)`` of a finished chunk."""
    import pyarrow.parquet as pq

    table = pq.read_table(chunk.path(out_dir))
    return table, json.loads(table.schema.metadata[_META_KEY])


_PROGRESS = None


def _init_worker(progress_queue):
    global _PROGRESS
    _PROGRESS = progress_queue


def run_chunk(chunk: Chunk, config: BuildConfig, out_dir, progress: Callable | None = None) -> dict:
    """Computes ``chunk`` and writes it atomically to ``DIR/chunks/``; returns a summary."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    t0 = time.perf_counter()
    zoo = zoo_examples(config.zoo)
    rows, failures, timings = [], [], []
    for index in chunk.indices:
        t = time.perf_counter()
        row, failure = compute_item(config, chunk.group, index, zoo)
        if row is not None:
            rows.append(row)
        else:
            failures.append(failure)
        timings.append([index, round(time.perf_counter() - t, 3),
                        None if row is None else row["num_intermediates"],
                        None if row is None else row["table_size"]])
        if progress is not None:
            progress(1)
        elif _PROGRESS is not None:
            _PROGRESS.put(1)
    schema = _chunk_schema()
    meta = {"key": chunk.key, "name": chunk.name, "group": chunk.group, "indices": list(chunk.indices),
            "schema_version": SCHEMA_VERSION, "failures": failures,
            "timings": timings,  # [index, seconds, intermediates, table size] per item
            "seconds": round(time.perf_counter() - t0, 3), "pid": os.getpid()}
    table = pa.Table.from_pylist(rows, schema=schema).replace_schema_metadata(
        {_META_KEY: json.dumps(meta).encode()})
    path = chunk.path(out_dir)
    tmp = f"{path}.tmp-{os.getpid()}"
    pq.write_table(table, tmp)
    os.replace(tmp, path)
    return {"name": chunk.name, "rows": len(rows), "failures": len(failures), "seconds": meta["seconds"]}


# --------------------------------------------------------------------------------------
# The build.


class BuildDirectoryError(ValueError):
    """The output directory holds a build with other parameters."""


def _log(msg: str, quiet: bool):
    if not quiet:
        print(msg, file=sys.stderr, flush=True)


def _check_manifest(config: BuildConfig, out_dir) -> None:
    path = os.path.join(out_dir, "chunks", "build.json")
    if not os.path.exists(path):
        return
    with open(path) as f:
        old = json.load(f).get("identity")
    new = json.loads(json.dumps(config.identity()))
    if old != new:
        diff = sorted(k for k in set(old or {}) | set(new) if (old or {}).get(k) != new.get(k))
        raise BuildDirectoryError(
            f"{out_dir} holds a build with other parameters ({', '.join(diff)} differ); resume it "
            f"with the same parameters, or use another --out (or delete {out_dir}/chunks)"
        )


def write_json(path, obj):
    """Writes ``obj`` as JSON to ``path`` atomically (a temporary file, then a rename)."""
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)


def build(out_dir, config: BuildConfig, num_proc: int = 1, progress: bool = True, quiet: bool = False) -> dict:
    """Builds (or resumes) the dataset in ``out_dir``; returns the build summary.

    ``num_proc`` > 1 computes chunks in that many "spawn" worker processes (each imports
    JAX itself); 1 computes them in this process.
    """
    from tqdm.auto import tqdm

    if isinstance(num_proc, bool) or not isinstance(num_proc, int) or num_proc < 1:
        raise ValueError(f"num_proc = {num_proc!r} must be an integer >= 1")
    config.validate()
    _check_manifest(config, out_dir)
    zoo = zoo_examples(config.zoo)
    chunks = plan_chunks(config, zoo)
    os.makedirs(os.path.join(out_dir, "chunks"), exist_ok=True)
    for name in os.listdir(os.path.join(out_dir, "chunks")):  # left by an interrupted run
        if ".tmp-" in name:
            os.remove(os.path.join(out_dir, "chunks", name))
    write_json(os.path.join(out_dir, "chunks", "build.json"),
                {"identity": config.identity(), "config": config.to_dict()})
    done = [c for c in chunks if chunk_is_done(c, out_dir)]
    todo = [c for c in chunks if c not in done]
    total = sum(len(c.indices) for c in chunks)
    todo_items = sum(len(c.indices) for c in todo)
    _log(f"data_gen: {total} work items in {len(chunks)} chunks; {len(done)} chunks already done, "
         f"{len(todo)} to compute ({todo_items} items) with {num_proc} process(es)", quiet)
    t0 = time.perf_counter()
    bar = tqdm(total=total, initial=total - todo_items, unit="graph", desc="building",
               disable=not progress, file=sys.stderr, dynamic_ncols=True)
    computed = []
    try:
        if num_proc == 1 or len(todo) <= 1:
            for c in todo:
                computed.append(run_chunk(c, config, out_dir, progress=bar.update))
        else:
            computed = _run_pool(todo, config, out_dir, num_proc, bar)
    finally:
        bar.close()
    seconds = time.perf_counter() - t0
    summary = assemble(out_dir, config, chunks, quiet=quiet)
    summary.update(chunks_total=len(chunks), chunks_reused=[c.name for c in done],
                   chunks_computed=sorted(r["name"] for r in computed), compute_seconds=round(seconds, 3),
                   items_computed=todo_items,
                   graphs_per_second=round(todo_items / seconds, 3) if todo_items and seconds > 0 else None)
    _log(format_summary(summary, out_dir), quiet)
    return summary


def _run_pool(todo, config, out_dir, num_proc, bar) -> list:
    ctx = multiprocessing.get_context("spawn")
    progress_queue = ctx.Queue()
    results = []
    with concurrent.futures.ProcessPoolExecutor(
        max_workers=min(num_proc, len(todo)), mp_context=ctx,
        initializer=_init_worker, initargs=(progress_queue,),
    ) as pool:
        pending = {pool.submit(run_chunk, c, config, out_dir) for c in todo}
        try:
            while pending:
                finished, pending = concurrent.futures.wait(
                    pending, timeout=0.25, return_when=concurrent.futures.FIRST_COMPLETED)
                _drain(progress_queue, bar)
                for f in finished:
                    results.append(f.result())
        except BaseException:
            for f in pending:
                f.cancel()
            raise
    _drain(progress_queue, bar)
    return results


def _drain(progress_queue, bar):
    while True:
        try:
            bar.update(progress_queue.get_nowait())
        except queue_lib.Empty:
            return
        except (OSError, ValueError):
            return


# --------------------------------------------------------------------------------------
# Assembly, statistics and the card.


def assemble(out_dir, config: BuildConfig, chunks: Sequence[Chunk], quiet: bool = False) -> dict:
    """Reads the finished ``chunks``, deduplicates, writes the DatasetDict, the Parquet
    export, ``failures.json`` and ``README.md``; returns the build summary."""
    import datasets as hf

    bars = hf.is_progress_bar_enabled()
    hf.disable_progress_bars()
    try:
        return _assemble(out_dir, config, chunks)
    finally:
        if bars:
            hf.enable_progress_bars()


def _assemble(out_dir, config, chunks) -> dict:
    import datasets as hf
    import pyarrow as pa
    import pyarrow.compute as pc

    tables, failures = [], []
    for c in chunks:
        table, meta = read_chunk(c, out_dir)
        tables.append(table)
        failures.extend(meta["failures"])
    schema = _chunk_schema()
    everything = pa.concat_tables([t.replace_schema_metadata(None).cast(schema) for t in tables]) \
        if tables else schema.empty_table()
    feats = features()
    seen: set = set()
    splits, duplicates = {}, {}
    for split in DEDUP_PRIORITY:
        part = everything.filter(pc.equal(everything["split"], split))
        keep = []
        for h in part["graph_hash"].to_pylist():
            keep.append(h not in seen)
            seen.add(h)
        duplicates[split] = keep.count(False)
        part = part.filter(pa.array(keep, pa.bool_())).drop_columns(["split"])
        splits[split] = hf.Dataset(part.cast(feats.arrow_schema), info=hf.DatasetInfo(features=feats))
    dd = hf.DatasetDict({s: splits[s] for s in SPLITS})
    save_dataset_dict(dd, out_dir)
    pq_dir = os.path.join(out_dir, "parquet")
    os.makedirs(pq_dir, exist_ok=True)
    for s in SPLITS:
        path = os.path.join(pq_dir, f"{s}.parquet")
        tmp = f"{path}.tmp-{os.getpid()}"
        dd[s].to_parquet(tmp)
        os.replace(tmp, path)
    stats = statistics(dd)
    fail_counts: dict = {}
    for f in failures:
        key = f"{f['family']}/{f['stage']}"
        fail_counts[key] = fail_counts.get(key, 0) + 1
    summary = {
        "rows": {s: len(dd[s]) for s in SPLITS},
        "duplicates_dropped": duplicates,
        "failures": len(failures),
        "failures_by_family_stage": dict(sorted(fail_counts.items())),
        "statistics": stats,
    }
    write_json(os.path.join(out_dir, "failures.json"),
                {"count": len(failures), "by_family_stage": summary["failures_by_family_stage"],
                 "failures": failures})
    card = dataset_card(config, summary)
    tmp = os.path.join(out_dir, f"README.md.tmp-{os.getpid()}")
    with open(tmp, "w") as f:
        f.write(card)
    os.replace(tmp, os.path.join(out_dir, "README.md"))
    return summary


def save_dataset_dict(dd, out_dir):
    """``dd.save_to_disk(out_dir)`` via a temporary folder, then swapped in split by split,
    ``dataset_dict.json`` last."""
    tmp = os.path.join(out_dir, ".dataset.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    # Explicit shard counts: datasets writes no shard for an empty split otherwise, and
    # cannot load that split back.
    shards = {s: max(1, -(-dd[s].data.nbytes // (256 << 20))) for s in dd}
    dd.save_to_disk(tmp, num_shards=shards)
    marker = os.path.join(out_dir, "dataset_dict.json")
    if os.path.exists(marker):
        os.remove(marker)
    for s in dd:
        dst = os.path.join(out_dir, s)
        if os.path.isdir(dst):
            shutil.rmtree(dst)
        os.replace(os.path.join(tmp, s), dst)
    os.replace(os.path.join(tmp, "dataset_dict.json"), marker)
    shutil.rmtree(tmp, ignore_errors=True)


def statistics(dd) -> dict:
    """Per split and family: count, intermediates min/median/max, mean best/reverse."""
    out = {}
    for split in SPLITS:
        ds = dd[split]
        cols = ds.select_columns(["family", "num_intermediates", "best_baseline", "cost_reverse",
                                  "cost_optimal"]).to_dict()
        fams: dict = {}
        for k, fam in enumerate(cols["family"]):
            fams.setdefault(fam, []).append(k)
        per = {}
        for fam in sorted(fams) + (["all"] if fams else []):
            idx = fams[fam] if fam != "all" else range(len(cols["family"]))
            n = np.asarray([cols["num_intermediates"][k] for k in idx])
            ratios = [cols["best_baseline"][k] / cols["cost_reverse"][k] for k in idx if cols["cost_reverse"][k]]
            opt = [k for k in idx if cols["cost_optimal"][k] is not None]
            per[fam] = {
                "count": len(n), "intermediates_min": int(n.min()), "intermediates_median": float(np.median(n)),
                "intermediates_max": int(n.max()),
                "mean_best_over_reverse": round(float(np.mean(ratios)), 4) if ratios else None,
                "with_optimal": len(opt),
            }
        out[split] = per
    return out


def _size_category(n: int) -> str:
    for limit, name in ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M")):
        if n < limit:
            return name
    return "1M<n<10M"


def dataset_card(config: BuildConfig, summary: dict) -> str:
    """The dataset card (``README.md``): YAML metadata header, description, statistics."""
    import yaml

    import alphagrad
    import jax

    feats = features()
    rows = summary["rows"]
    header = {
        "pretty_name": "alphagrad vertex-elimination graphs",
        "license": "apache-2.0",
        "tags": ["automatic-differentiation", "jacobian", "vertex-elimination", "jax", "graphs"],
        "size_categories": [_size_category(sum(rows.values()))],
        "configs": [{"config_name": "default",
                     "data_files": [{"split": s, "path": f"parquet/{s}.parquet"} for s in SPLITS]}],
        "dataset_info": {"splits": [{"name": s, "num_examples": rows[s]} for s in SPLITS]},
    }
    try:  # the Hub's YAML form of the features (a private helper of `datasets`)
        header["dataset_info"] = {"features": feats._to_yaml_list(), **header["dataset_info"]}
    except Exception:  # noqa: BLE001
        pass
    lines = ["---", yaml.safe_dump(header, sort_keys=False).rstrip(), "---", "",
             "# alphagrad vertex-elimination graphs", "",
             "Computational graphs of JAX functions, as the `alphagrad` elimination engine reads "
             "them, with the cost (multiplications, `exact` convention) of accumulating their "
             "Jacobian by forward, reverse and Markowitz vertex elimination, and the optimum where "
             f"a graph has at most {OPTIMAL_MAX_INTERMEDIATES} intermediates. Built by "
             "`python -m data_gen build` (`data_gen/dataset.py`); load it with "
             "`datasets.load_from_disk(DIR)` or from the Parquet files, and rebuild a graph with "
             "`data_gen.dataset.row_to_graph(row)`.", "",
             "## Splits", "",
             "* `train`, `validation`: random JAX programs (`data_gen.random_programs`) with specs "
             "drawn from the training distribution below, and the zoo functions of "
             "`alphagrad.examples` outside the `published` and `large_real` families.",
             "* `heldout`: the ten published AlphaGrad tasks (family `published`), random programs "
             "from the held-out distribution (`random_heldout`: sizes, ranks and mixes training "
             f"never sees) and large graphs of {config.large_size[0]}-{config.large_size[1]} "
             "intermediates (`large_random`, and held-out zoo functions iterated until that size: "
             "`large_zoo_chained`), and the real-sized programs of `alphagrad.examples.real` "
             "(`large_real`: time-stepping loops, scans and maps unrolled, 500-5,000 intermediates).",
             "* Rows are deduplicated by `graph_hash` (heldout first, then validation, then train): "
             "no heldout graph occurs in train or validation.", "",
             "## Columns", "", "| column | type | meaning |", "|---|---|---|"]
    for name, feat in feats.items():
        lines.append(f"| `{name}` | `{feat}` | {COLUMN_DOCS[name]} |")
    lines += ["", "## Statistics", "",
              "Per split and family: rows, intermediate vertices (min / median / max), mean ratio of "
              "the best baseline (min of forward, reverse, Markowitz) to reverse mode, rows with a "
              "known optimum.", "",
              "| split | family | rows | intermediates min / median / max | mean best / reverse | with optimum |",
              "|---|---|---|---|---|---|"]
    for split, per in summary["statistics"].items():
        for fam, s in per.items():
            ratio = "n/a" if s["mean_best_over_reverse"] is None else f"{s['mean_best_over_reverse']:.3f}"
            lines.append(f"| {split} | {'**all**' if fam == 'all' else fam} | {s['count']} | "
                         f"{s['intermediates_min']} / {s['intermediates_median']:g} / {s['intermediates_max']} | "
                         f"{ratio} | {s['with_optimal']} |")
    lines += ["", "## Build", "",
              f"* Failures (reported in `failures.json`, not in the data): {summary['failures']}"
              + ("".join(f"\n  * {k}: {v}" for k, v in summary["failures_by_family_stage"].items())),
              "* Duplicates dropped: " + ", ".join(f"{s} {n}" for s, n in summary["duplicates_dropped"].items()),
              f"* alphagrad {alphagrad.__version__}, JAX {jax.__version__}, random program generator "
              f"version {rp.GENERATOR_VERSION}, dataset schema version {SCHEMA_VERSION}.",
              "* Parameters:", "", "```json", json.dumps(config.to_dict(), indent=1, sort_keys=True), "```", ""]
    return "\n".join(lines)


def format_summary(summary: dict, out_dir) -> str:
    rows = summary["rows"]
    lines = [f"data_gen: wrote {out_dir}: " + ", ".join(f"{s} {rows[s]}" for s in SPLITS) + " rows"]
    if summary.get("graphs_per_second"):
        lines.append(f"  computed {summary['items_computed']} items in {summary['compute_seconds']:.1f} s "
                     f"({summary['graphs_per_second']:.2f} graphs/s); chunks: {len(summary['chunks_computed'])} "
                     f"computed, {len(summary['chunks_reused'])} reused")
    else:
        lines.append(f"  chunks: {len(summary.get('chunks_computed', []))} computed, "
                     f"{len(summary.get('chunks_reused', []))} reused")
    lines.append("  duplicates dropped: " + ", ".join(f"{s} {n}" for s, n in summary["duplicates_dropped"].items()))
    lines.append(f"  failures: {summary['failures']}" + (f" (see {os.path.join(out_dir, 'failures.json')})"
                                                          if summary["failures"] else ""))
    for k, v in summary["failures_by_family_stage"].items():
        lines.append(f"    {k}: {v}")
    return "\n".join(lines)
