"""Runtime of per-sample Jacobians (not a test): ``python -m eval.bench_jacobian``.

For each task, the median time of ``jax.jit(jax.vmap(J))`` over a batch of inputs, where
``J`` is ``alphagrad.jacobian(f, order)`` for the forward, reverse, Markowitz and best
known (annealed) orders, next to ``jax.jacfwd(f)`` and ``jax.jacrev(f)``, all jitted, after
warm-up, measured side by side in this process; each ratio is to min(jacfwd, jacrev) of
the same run. Calls are interleaved round-robin. Per-sample Jacobians are compared on purpose: differentiating the vmapped
function would build a dense batch x batch Jacobian.

The default tasks are six published ones and three real-sized programs with loops
(``--tasks published`` or ``--tasks real`` for one group, or example names);
``--orders`` limits which of alphagrad's orders are compiled and timed, e.g.
``python -m eval.bench_jacobian --tasks real --batches 512 --anneal 5 --repeats 20``.
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
#: Real-sized programs (alphagrad.examples.real, 800-1,200 intermediates): ``--tasks real``.
REAL_TASKS = ["PendulumChain_RK4", "KalmanFilter_Scan", "BundleAdjustBAL"]
#: alphagrad's orders that can be timed (``--orders``).
ORDERS = ["fwd", "rev", "markowitz", "best"]


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
    parser.add_argument("--tasks", nargs="*", default=TASKS + REAL_TASKS,
                        help="example names; 'published' and 'real' stand for the two default groups")
    parser.add_argument("--orders", nargs="*", default=ORDERS, choices=ORDERS,
                        help="alphagrad orders to time beside jacfwd and jacrev (each compiles once)")
    parser.add_argument("--batches", nargs="*", type=int, default=[1, 512])
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--anneal", type=float, default=10.0, help="seconds of annealing for the best order")
    args = parser.parse_args(argv)
    groups = {"published": TASKS, "real": REAL_TASKS}
    tasks = [t for name in args.tasks for t in groups.get(name, [name])]
    print(f"jax {jax.__version__}; median of {args.repeats} runs; ratio = time / min(jacfwd, jacrev)\n")
    cols = ["jacfwd", "jacrev"] + [o for o in ORDERS if o in args.orders]
    print("| task | intermediates | batch | " + " | ".join(cols) + " | best order's multiplications (rev) |")
    print("|---|---|---|" + "---|" * len(cols) + "---|")
    for name in tasks:
        ex = ag.examples.get(name)
        g = ag.trace(ex.fn, *ex.args)
        argnums = tuple(range(len(ex.args)))
        best = baselines.anneal(g, budget_s=args.anneal) if args.anneal > 0 else baselines.markowitz(g)
        orders = {"fwd": "fwd", "rev": "rev", "markowitz": "markowitz", "best": best}
        fns = {"jacfwd": jax.jacfwd(ex.fn, argnums=argnums), "jacrev": jax.jacrev(ex.fn, argnums=argnums)}
        fns.update({k: jacobian(ex.fn, orders[k], argnums=argnums) for k in cols[2:]})
        for batch in args.batches:
            inputs = _batch(ex.args, batch)
            times = _median_times({k: jax.jit(jax.vmap(fn)) for k, fn in fns.items()}, inputs, args.repeats)
            ref = min(times["jacfwd"], times["jacrev"])
            cells = [f"{times[k] * 1e3:.3f} ms ({times[k] / ref:.2f}x)" for k in cols]
            print(f"| {name} | {len(g.intermediates)} | {batch} | " + " | ".join(cells) + f" | {ag.cost(g, best)} ({ag.cost(g, 'rev')}) |", flush=True)


if __name__ == "__main__":
    main()
