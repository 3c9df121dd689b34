"""Real programs of 10,000+ intermediates end to end (issue 61): ``python -m eval.bench_scale``.

For each program and method, a fresh process traces the program, gets the order
(``fwd``, ``rev``, ``anneal`` for ``--anneal-s`` seconds, or ``periodic``: the best
loop-periodic order, :func:`alphagrad.baselines.periodic`, searched as long), builds
``alphagrad.jacobian(f, order)`` and calls it twice: the first call compiles (graphs of
more than ``interpreter.CHUNK_ABOVE`` intermediates run as jitted chunks, compiled side
by side on a pool of threads), the second is the steady call. ``jax.jacrev`` gets the
same in its own process. Each phase's seconds, the process's peak resident memory and the
Jacobian's largest difference from ``jax.jacrev``'s (relative to its largest entry) go to
``report.json`` and ``report.md`` under ``--out``.

    python -m eval.bench_scale --out DIR [--programs nbody:150,transformer:24]
        [--methods fwd,rev,anneal,periodic,jax.jacrev] [--anneal-s 10] [--timeout 900]

Programs: ``nbody:S`` is :func:`alphagrad.examples.real.make_nbody` with S RK4 steps
(70 intermediates a step), ``transformer:L`` :func:`~alphagrad.examples.real.make_transformer`
with L blocks. The issue's target: trace + order + compile + first call within 5 minutes
and 8 GB.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

from eval.common import fmt, md_table, write_report

METHODS = ("fwd", "rev", "anneal", "periodic", "jax.jacrev")


def _example(spec: str):
    """The example a ``name:size`` spec names."""
    from alphagrad.examples import real

    name, _, size = spec.partition(":")
    makers = {"nbody": lambda n: real.make_nbody(steps=n), "transformer": lambda n: real.make_transformer(layers=n)}
    if name not in makers or not size.isdigit() or int(size) < 1:
        raise ValueError(f"unknown program {spec!r}: use nbody:STEPS or transformer:LAYERS (a positive integer)")
    return makers[name](int(size))


def _peak_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6


def run_one(spec: str, method: str, anneal_s: float) -> dict:
    """One program and method in this process: each phase's seconds, peak memory, check."""
    import jax
    import jax.numpy as jnp

    import alphagrad as ag

    ex = _example(spec)
    argnums = tuple(range(len(ex.args)))
    row = {"program": spec, "method": method, "platform": jax.default_backend()}
    t0 = time.perf_counter()
    if method == "jax.jacrev":
        J = jax.jit(jax.jacrev(ex.fn, argnums=argnums))
    else:
        graph = ag.trace(ex.fn, *ex.args, max_equations=10**8)
        t1 = time.perf_counter()
        search = {"anneal": ag.baselines.anneal, "periodic": ag.baselines.periodic}.get(method)
        order = search(graph, budget_s=anneal_s) if search else method
        t2 = time.perf_counter()
        row.update(intermediates=len(graph.intermediates), trace_s=t1 - t0, order_s=t2 - t1,
                   mults=ag.cost(graph, order))
        J = ag.jacobian(ex.fn, order, argnums=argnums)
    t3 = time.perf_counter()
    out = jax.block_until_ready(J(*ex.args))
    t4 = time.perf_counter()
    jax.block_until_ready(J(*ex.args))
    t5 = time.perf_counter()
    row.update(first_call_s=t4 - t3, total_s=t4 - t0, call_s=t5 - t4, peak_gb=_peak_gb())
    if method != "jax.jacrev":
        ref = jax.jit(jax.jacrev(ex.fn, argnums=argnums))(*ex.args)
        scale = max(1.0, max(float(jnp.max(jnp.abs(b))) for b in jax.tree_util.tree_leaves(ref)))
        row["check"] = max(float(jnp.max(jnp.abs(a - b))) for a, b in
                           zip(jax.tree_util.tree_leaves(out), jax.tree_util.tree_leaves(ref))) / scale
    return row


def _child(spec: str, method: str, anneal_s: float, timeout: float) -> dict:
    """:func:`run_one` in a fresh process (its own peak memory), or why it gave nothing."""
    cmd = [sys.executable, "-m", "eval.bench_scale", "--one", spec, method, str(anneal_s)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"program": spec, "method": method, "status": f"over {timeout:.0f} s"}
    lines = [l for l in done.stdout.splitlines() if l.startswith("{")]
    if done.returncode or not lines:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {"program": spec, "method": method, "status": f"failed: {tail[:200]}"}
    return {**json.loads(lines[-1]), "status": "ok"}


def _markdown(report: dict) -> str:
    header = ["program", "method", "intermediates", "trace s", "order s", "first call s", "total s",
              "call s", "peak GB", "mults", "check", "status"]
    rows = [[r["program"], r["method"], fmt(r.get("intermediates")), fmt(r.get("trace_s"), 1),
             fmt(r.get("order_s"), 1), fmt(r.get("first_call_s"), 1), fmt(r.get("total_s"), 1),
             fmt(r.get("call_s"), 3), fmt(r.get("peak_gb"), 2), fmt(r.get("mults")),
             "-" if r.get("check") is None else f"{r['check']:.1e}", r["status"]] for r in report["rows"]]
    return md_table(header, rows)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m eval.bench_scale", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", help="directory for report.json and report.md")
    p.add_argument("--programs", default="nbody:150", help="comma-separated nbody:STEPS / transformer:LAYERS")
    p.add_argument("--methods", default="fwd,anneal,jax.jacrev", help=f"comma-separated of {METHODS}")
    p.add_argument("--anneal-s", type=float, default=10.0, help="seconds of search for anneal and periodic")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds per program and method")
    p.add_argument("--one", nargs=3, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.one:
        spec, method, anneal_s = args.one
        print(json.dumps(run_one(spec, method, float(anneal_s))), flush=True)
        return 0
    methods = args.methods.split(",")
    if not args.out or any(m not in METHODS for m in methods) or not args.anneal_s > 0 or not args.timeout > 0:
        p.error(f"--out is required, --methods from {METHODS}, --anneal-s and --timeout positive")
    programs = args.programs.split(",")
    try:
        for spec in programs:
            _example(spec)
    except ValueError as e:
        p.error(str(e))
    report = {"rows": []}
    for spec in programs:
        for method in methods:
            report["rows"].append(_child(spec, method, args.anneal_s, args.timeout))
            print(json.dumps(report["rows"][-1]), flush=True)
    import jax

    report["platform"] = jax.default_backend()
    write_report(p, args, argv, report, _markdown, "Real programs of 10,000+ intermediates, end to end",
                 f"platform {report['platform']}; one process per row; seconds, peak resident memory")
    return 0


if __name__ == "__main__":
    sys.exit(main())
