"""Benchmark of the elimination engine (not a test): run ``python -m eval.bench_engine``.

Prints, on this machine:
  * eliminations per second of the JAX engine for full eliminations of ~100-, ~150- and
    ~250-vertex graphs, jitted, one graph at a time and vmapped over 64 graphs;
  * full-order evaluations per second of the compiled evaluator that ``anneal`` uses;
  * ``baselines.optimal`` seconds against the number of intermediates.
Times are medians of repeated runs measured in this one process.
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

import alphagrad as ag
from alphagrad import baselines, engine
from alphagrad.evaluator import Evaluator


def median_time(fn, repeats):
    """Median seconds of `fn()` over `repeats` runs, after one warm-up run (compilation)."""
    fn()  # warm-up (compilation)
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def _chain_of(example, copies):
    """A bigger graph: ``copies`` instances of an example chained output -> input."""
    ex = ag.examples.get(example)

    def f(*args):
        out = ex.fn(*args)
        for _ in range(copies - 1):
            leaves = jax.tree_util.tree_leaves(out)
            args = tuple(a + 0.01 * leaves[k % len(leaves)].sum() for k, a in enumerate(args))
            out = ex.fn(*args)
        return out

    return ag.trace(f, *ex.args)


def engine_rates(graph, batch, repeats):
    order = np.asarray(baselines.reverse(graph))
    rng = np.random.default_rng(0)
    state = engine.encode(graph)
    one = jax.jit(engine.eliminate_all)
    t_one = median_time(lambda: one(state, jnp.asarray(order, jnp.int32))[1].block_until_ready(), repeats)
    orders = jnp.asarray(np.stack([rng.permutation(order) for _ in range(batch)]), jnp.int32)
    many = jax.jit(jax.vmap(engine.eliminate_all, in_axes=(None, 0)))
    t_many = median_time(lambda: many(state, orders)[1].block_until_ready(), repeats)
    ev = Evaluator(graph)
    perms = [rng.permutation(order) for _ in range(200)]
    t_ev = median_time(lambda: [ev.cost(p) for p in perms], repeats) / len(perms)
    n = len(order)
    return n / t_one, batch * n / t_many, 1.0 / t_ev


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--optimal-max", type=int, default=16)
    args = parser.parse_args(argv)
    print(f"jax {jax.__version__}, devices {jax.devices()}")
    graphs = [
        ("RoeFlux_1d", ag.trace(ag.examples.get("RoeFlux_1d").fn, *ag.examples.get("RoeFlux_1d").args)),
        ("RoeFlux_3d", ag.trace(ag.examples.get("RoeFlux_3d").fn, *ag.examples.get("RoeFlux_3d").args)),
        ("RoeFlux_1d x3 chained", _chain_of("RoeFlux_1d", 3)),
    ]
    print(f"\n| graph | vertices | intermediates | elim/s one graph | elim/s vmap {args.batch} | evaluator orders/s |")
    print("|---|---|---|---|---|---|")
    for name, g in graphs:
        one, many, ev = engine_rates(g, args.batch, args.repeats)
        print(f"| {name} | {g.num_vertices} | {len(g.intermediates)} | {one:,.0f} | {many:,.0f} | {ev:,.0f} |")
    print("\n| intermediates | optimal seconds |")
    print("|---|---|")
    for n in range(6, args.optimal_max + 1, 2):
        g = _prefix_graph(n)
        t = time.perf_counter()
        baselines.optimal(g, max_intermediates=n)
        print(f"| {len(g.intermediates)} | {time.perf_counter() - t:.2f} |")


def _prefix_graph(n):
    """A random program whose graph has about ``n`` intermediates (scalars and vectors)."""
    from data_gen.random_programs import ProgramSpec, generate

    for seed in range(1000):
        f, args = generate(ProgramSpec(num_inputs=3, num_outputs=2, num_ops=n, max_rank=1, max_dim=3), seed)
        g = ag.trace(f, *args)
        if len(g.intermediates) == n:
            return g
    return g


if __name__ == "__main__":
    main()
