"""Runtime of per-sample Jacobians (not a test): ``python -m eval.bench_jacobian``.

For each task, the median time of ``jax.jit(jax.vmap(J))`` over a batch of inputs, where
``J`` is ``alphagrad.jacobian(f, order)`` for the forward, reverse, Markowitz and best
known (annealed) orders, next to ``jax.jacfwd(f)`` and ``jax.jacrev(f)``, all jitted, after
warm-up, measured side by side in this process; each ratio is to min(jacfwd, jacrev) of
the same run. Calls are interleaved round-robin. Per-sample Jacobians are compared on purpose: differentiating the vmapped
function would build a dense batch x batch Jacobian.
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

import alphagrad as ag
from alphagrad import baselines
from alphagrad.interpreter import jacobian

TASKS = ["RoeFlux_1d", "RoeFlux_3d", "RobotArm_6DOF", "HumanHeartDipole", "BlackScholes_Jacobian", "MLP"]


def _median_times(fns: dict, args, repeats) -> dict:
    """Median seconds per call of each function, measured round-robin (one call of each
    in turn), so that drifting machine load hits every method alike."""
    for fn in fns.values():
        jax.block_until_ready(fn(*args))  # compile and warm up
    times = {k: [] for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            t = time.perf_counter()
            jax.block_until_ready(fn(*args))
            times[k].append(time.perf_counter() - t)
    return {k: statistics.median(v) for k, v in times.items()}


def _batch(args, batch, seed=0):
    rng = np.random.default_rng(seed)
    return tuple(
        jax.tree_util.tree_map(
            lambda a: jnp.asarray(a)[None] * (1 + 0.01 * jnp.asarray(rng.standard_normal((batch,) + jnp.shape(a)), jnp.result_type(a))),
            x,
        )
        for x in args
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", nargs="*", default=TASKS)
    parser.add_argument("--batches", nargs="*", type=int, default=[1, 512])
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--anneal", type=float, default=10.0, help="seconds of annealing for the best order")
    args = parser.parse_args(argv)
    print(f"jax {jax.__version__}; median of {args.repeats} runs; ratio = time / min(jacfwd, jacrev)\n")
    cols = ["jacfwd", "jacrev", "fwd", "rev", "markowitz", "best"]
    print("| task | batch | " + " | ".join(cols) + " | best order's multiplications (rev) |")
    print("|---|---|" + "---|" * len(cols) + "---|")
    for name in args.tasks:
        ex = ag.examples.get(name)
        g = ag.trace(ex.fn, *ex.args)
        argnums = tuple(range(len(ex.args)))
        best = baselines.anneal(g, budget_s=args.anneal) if args.anneal > 0 else baselines.markowitz(g)
        fns = {
            "jacfwd": jax.jacfwd(ex.fn, argnums=argnums),
            "jacrev": jax.jacrev(ex.fn, argnums=argnums),
            "fwd": jacobian(ex.fn, "fwd", argnums=argnums),
            "rev": jacobian(ex.fn, "rev", argnums=argnums),
            "markowitz": jacobian(ex.fn, "markowitz", argnums=argnums),
            "best": jacobian(ex.fn, best, argnums=argnums),
        }
        for batch in args.batches:
            inputs = _batch(ex.args, batch)
            times = _median_times({k: jax.jit(jax.vmap(fn)) for k, fn in fns.items()}, inputs, args.repeats)
            ref = min(times["jacfwd"], times["jacrev"])
            cells = [f"{times[k] * 1e3:.3f} ms ({times[k] / ref:.2f}x)" for k in cols]
            print(f"| {name} | {batch} | " + " | ".join(cells) + f" | {ag.cost(g, best)} ({ag.cost(g, 'rev')}) |", flush=True)


if __name__ == "__main__":
    main()
