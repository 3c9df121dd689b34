"""What XLA makes of each per-sample Jacobian (not a test): ``python -m eval.hlo_report``.

For each task, compiles ``jax.jit(jax.vmap(J))`` at one batch size (512 by default) for
``J`` = ``jax.jacfwd(f)``, ``jax.jacrev(f)`` and ``alphagrad.jacobian(f, order)`` with the
reverse, Markowitz and best known (annealed) orders, and prints one table row per
method with, from the optimised HLO (``jax.jit(...).lower(...).compile().as_text()``):

* ``instr``: HLO instructions in all computations (inside fusions included);
* ``entry``: instructions of the entry computation that do work (parameters,
  constants, tuples, get-tuple-element and bitcasts left out): roughly the kernels and
  loops the CPU runs one after the other;
* ``fusions``: fusion instructions (each becomes one loop nest);
* ``dot``: dot and convolution instructions (fused or not);

A ``floor`` row is a function with exactly the output leaves of ``jax.jacrev(f)`` that
does no differentiation at all (each leaf is one input entry times a constant, broadcast
to the leaf's shape): the cost of producing that many output buffers, which every method
pays whatever its arithmetic.

Then ``mults``, the multiplications of the elimination order by ``alphagrad.cost``
(exact convention, per sample), ``flops``, XLA's estimate from
``compiled.cost_analysis()`` (whole batch), ``bytes``, its bytes accessed, and the
median runtime of each method, measured round-robin in this process, with its ratio to
min(jacfwd, jacrev).
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp

import alphagrad as ag
from alphagrad import baselines
from alphagrad.interpreter import jacobian
from alphagrad.time_fit import FREE_OPS as _FREE
from alphagrad.time_fit import hlo_counts
from eval.bench_jacobian import _batch, _median_times

def _floor(fn, args, argnums):
    """A function with the output leaves of ``jax.jacrev(fn)`` and no work (see above)."""
    out = jax.eval_shape(jax.jacrev(fn, argnums=argnums), *args)
    leaves, tree = jax.tree_util.tree_flatten(out)

    def floor(*a):
        x = jnp.ravel(jax.tree_util.tree_leaves(a)[0])[0]
        return jax.tree_util.tree_unflatten(
            tree, [jnp.broadcast_to(x * (k + 1.0), l.shape).astype(l.dtype) for k, l in enumerate(leaves)])

    return floor


def _cost_analysis(compiled) -> dict:
    try:
        ca = compiled.cost_analysis()
    except (NotImplementedError, RuntimeError, ValueError):  # not every backend provides it
        return {}
    if isinstance(ca, (list, tuple)):
        ca = ca[0] if ca else {}
    return dict(ca or {})


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", nargs="*", default=["RoeFlux_1d", "HumanHeartDipole"])
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--anneal", type=float, default=3.0, help="seconds of annealing for the best order")
    parser.add_argument("--iterations", type=int, default=None,
                        help="a fixed number of annealing moves instead (deterministic)")
    parser.add_argument("--ops", action="store_true", help="also print each method's entry opcodes")
    args = parser.parse_args(argv)
    print(f"jax {jax.__version__} on {jax.default_backend()}; batch {args.batch}; "
          f"median of {args.repeats} runs, round-robin; ratio = time / min(jacfwd, jacrev)\n")
    print("| task | method | instr | entry | fusions | dot | mults (cost) | flops (XLA) | bytes (XLA) | time | ratio |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name in args.tasks:
        ex = ag.examples.get(name)
        g = ag.trace(ex.fn, *ex.args)
        argnums = tuple(range(len(ex.args)))
        if args.iterations is not None:
            best = baselines.anneal(g, iterations=args.iterations)
        elif args.anneal > 0:
            best = baselines.anneal(g, budget_s=args.anneal)
        else:
            best = baselines.markowitz(g)
        orders = {"rev": "rev", "markowitz": "markowitz", "best": best}
        fns = {"jacfwd": jax.jacfwd(ex.fn, argnums=argnums), "jacrev": jax.jacrev(ex.fn, argnums=argnums)}
        fns.update({k: jacobian(ex.fn, o, argnums=argnums) for k, o in orders.items()})
        fns["floor"] = _floor(ex.fn, ex.args, argnums)
        inputs = _batch(ex.args, args.batch)
        jitted = {k: jax.jit(jax.vmap(fn)) for k, fn in fns.items()}
        stats = {}
        for k, fn in jitted.items():
            compiled = fn.lower(*inputs).compile()
            stats[k] = hlo_counts(compiled.as_text())
            stats[k].update(_cost_analysis(compiled))
        times = _median_times(jitted, inputs, args.repeats)
        ref = min(times["jacfwd"], times["jacrev"])
        for k in jitted:
            s = stats[k]
            mults = ag.cost(g, orders[k]) if k in orders else "-"
            flops = f"{s['flops']:.0f}" if "flops" in s else "n/a"
            nbytes = f"{s['bytes accessed']:.0f}" if "bytes accessed" in s else "n/a"
            print(f"| {name} | {k} | {s['instr']} | {s['entry']} | {s['fusions']} | {s['dot']} | {mults} | "
                  f"{flops} | {nbytes} | {times[k] * 1e3:.3f} ms | {times[k] / ref:.2f}x |", flush=True)
        if args.ops:
            for k in jitted:
                top = ", ".join(f"{op} {n}" for op, n in stats[k]["entry_ops"].most_common() if op not in _FREE)
                print(f"  {name} {k} entry: {top}")


if __name__ == "__main__":
    main()
