"""What a new user waits for (not a test): ``python -m eval.bench_first_call``.

Each graph gets two new Python processes in turn, sharing fresh directories for JAX's
persistent compilation cache (``JAX_COMPILATION_CACHE_DIR``) and for rule tables
(``ALPHAGRAD_CACHE_DIR``), as ``alphagrad order`` keeps them: the first compiles and
builds, the second loads what the first kept. Each process imports
alphagrad, loads the bundled model, and calls ``agent.order(f, *args, budget_s=B)`` twice
on the plain function, as a user would. Reported per process: import and model load, the
first call's wall time, its ``.seconds`` (the budget's clock) and ``.compile_seconds``
(one-time work: the compiled kernels once per process, the graph's rule tables and the
network's encoder for its padded size once per graph), and the repeated call's wall time
(tracing again, then the cached result). numba's own disk cache is whatever this machine
holds (its first compile, about 20 s, happens once per machine and is not measured here).

Graphs: README's two-intermediate example (proved optimal at once, no budget spent),
RoeFlux_3d (~100 intermediates), TransformerStack (the zoo's largest rule tables) and
RoeFlux_3d_chain13 (13 copies of RoeFlux_3d in a chain, ~2,000 intermediates: a user's
large function; ``NAME_chainK`` chains any zoo entry K times, as ``data_gen`` does).
Writes ``OUT/report.json`` and ``OUT/report.md``; ``--readme README.md`` puts the table
between ``<!-- bench_first_call:start -->`` and ``<!-- bench_first_call:end -->``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from eval.common import machine, put_block

START, END = "<!-- bench_first_call:start -->", "<!-- bench_first_call:end -->"
GRAPHS = ("readme", "RoeFlux_3d", "TransformerStack", "RoeFlux_3d_chain13")


def _function(name: str):
    """``(f, args)``: README's example, a zoo entry, or ``NAME_chainK`` (the zoo entry
    NAME chained K times, :func:`alphagrad.examples.chain`)."""
    import jax.numpy as jnp

    if name == "readme":
        return (lambda x, W: jnp.tanh(W @ x).sum()), (jnp.ones(3), jnp.ones((4, 3)))
    from alphagrad import examples

    base, sep, copies = name.rpartition("_chain")
    if sep and copies.isdigit():
        e = examples.get(base)
        return examples.chain(e.fn, int(copies)), e.args
    e = examples.get(name)
    return e.fn, e.args


def child(name: str, budget_s: float) -> dict:
    """One new user's process: the timings of :func:`main`'s table, as a dict."""
    t = time.perf_counter()
    import alphagrad

    agent = alphagrad.from_pretrained()
    load_s = time.perf_counter() - t
    f, args = _function(name)
    t = time.perf_counter()
    first = agent.order(f, *args, budget_s=budget_s, progress=False)
    first_s = time.perf_counter() - t
    t = time.perf_counter()
    again = agent.order(f, *args, budget_s=budget_s, progress=False)
    again_s = time.perf_counter() - t
    assert again.order == first.order
    return {"graph": name, "intermediates": len(first.order), "load_s": load_s, "first_s": first_s,
            "seconds": first.seconds, "compile_seconds": first.compile_seconds, "again_s": again_s,
            "method": first.method, "ratio": first.cost / max(first.best_baseline, 1)}


def measure(graphs, budget_s: float) -> list:
    rows = []
    for name in graphs:
        with tempfile.TemporaryDirectory() as cache:
            env = {**os.environ, "JAX_COMPILATION_CACHE_DIR": os.path.join(cache, "jax"),
                   "ALPHAGRAD_CACHE_DIR": os.path.join(cache, "alphagrad"),
                   "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0", "HF_HUB_OFFLINE": "1"}
            for process in ("first", "second"):
                out = subprocess.run([sys.executable, "-m", "eval.bench_first_call", "--child", name,
                                      "--budget", str(budget_s)], env=env, capture_output=True, text=True,
                                     check=False)
                if out.returncode != 0:
                    raise RuntimeError(f"the process for {name} failed:\n{out.stderr[-3000:]}")
                rows.append({**json.loads(out.stdout.strip().splitlines()[-1]), "process": process})
    return rows


def markdown(rows: list) -> str:
    lines = ["| graph | intermediates | process | import + load | first call | `.seconds` | `.compile_seconds` "
             "| repeated call | found by | cost / best baseline |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['graph']} | {r['intermediates']} | {r['process']} | {r['load_s']:.2f} s "
                     f"| {r['first_s']:.2f} s | {r['seconds']:.2f} s | {r['compile_seconds']:.2f} s "
                     f"| {r['again_s']:.2f} s | {r['method']} | {r['ratio']:.3f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m eval.bench_first_call", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--budget", type=float, default=1.0, help="budget_s of each call (default 1)")
    p.add_argument("--graphs", default=",".join(GRAPHS), help="comma-separated: readme, zoo names, NAME_chainK")
    p.add_argument("--out", default="eval/results/first_call")
    p.add_argument("--readme", default=None)
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.budget)))
        return 0
    rows = measure([g for g in args.graphs.split(",") if g], args.budget)
    command = "python -m eval.bench_first_call " + " ".join(argv if argv is not None else sys.argv[1:])
    host = machine()
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "report.json"), "w") as f:
        json.dump({"command": command, "machine": host, "budget_s": args.budget, "rows": rows}, f, indent=1)
    table = markdown(rows)
    intro = (f"`{command.strip()}` ({host}): `agent.order(f, *args, budget_s={args.budget:g})` in new "
             f"processes, two per graph sharing a JAX compilation cache and a rule-table cache directory")
    with open(os.path.join(args.out, "report.md"), "w") as f:
        f.write(f"# A new user's first call\n\n{intro}\n\n{table}\n")
    print(table)
    if args.readme:
        put_block(args.readme, f"{intro}:\n\n{table}", START, END)
    return 0


if __name__ == "__main__":
    sys.exit(main())
