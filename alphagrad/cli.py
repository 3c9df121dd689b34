"""The ``alphagrad`` command line.

    alphagrad demo [--example RoeFlux_3d] [--budget 10]       # the README example, offline
    alphagrad order path/to/file.py:function --args "f32[3,4] f32[]" [--model ID] [--budget 10]
"""

from __future__ import annotations

import argparse
import sys
import time


def _baseline_table(graph, anneal_s: float, convention: str) -> list[tuple[str, int, float]]:
    from alphagrad import baselines, cost

    rows = []
    for name, fn in (("forward", baselines.forward), ("reverse", baselines.reverse),
                     ("markowitz", lambda g: baselines.markowitz(g, convention))):
        t = time.perf_counter()
        order = fn(graph)
        rows.append((name, cost(graph, order, convention=convention), time.perf_counter() - t))
    if anneal_s > 0:
        t = time.perf_counter()
        order = baselines.anneal(graph, budget_s=anneal_s, convention=convention)
        rows.append((f"anneal {anneal_s:g}s", cost(graph, order, convention=convention), time.perf_counter() - t))
    return rows


def _print_table(graph, rows):
    best = min(c for name, c, _ in rows[:3])
    print(f"{'order':<14}{'multiplications':>16}{'vs best baseline':>18}{'seconds':>9}")
    for name, c, secs in rows:
        print(f"{name:<14}{c:>16,}{c / best:>18.3f}{secs:>9.2f}")


_DTYPES = {"f16": "float16", "bf16": "bfloat16", "f32": "float32", "f64": "float64"}


def parse_args_spec(spec: str) -> list:
    """``"f32[3,4] f32[]"`` -> example arrays of those dtypes and shapes (ones)."""
    import re

    import jax.numpy as jnp

    out = []
    for token in spec.split():
        m = re.fullmatch(r"(f16|bf16|f32|f64)\[([0-9, ]*)\]", token)
        if not m:
            raise ValueError(f"cannot read argument {token!r}: write each as dtype[shape], e.g. "
                             f"f32[3,4] or f32[] for a scalar (dtypes: {', '.join(_DTYPES)})")
        shape = tuple(int(d) for d in m.group(2).replace(" ", "").split(",") if d)
        out.append(jnp.ones(shape, _DTYPES[m.group(1)]))
    return out


def load_function(target: str):
    """``path/to/file.py:function`` -> the function."""
    import importlib.util
    import os

    path, sep, name = target.rpartition(":")
    if not sep or not path or not name:
        raise ValueError(f"expected path/to/file.py:function, got {target!r}")
    if not os.path.isfile(path):
        raise ValueError(f"no such file: {path}")
    spec = importlib.util.spec_from_file_location(os.path.splitext(os.path.basename(path))[0], path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not callable(getattr(module, name, None)):
        raise ValueError(f"{path} has no function {name!r}")
    return getattr(module, name)


def _agent(model):
    import alphagrad

    t = time.perf_counter()
    agent = alphagrad.from_pretrained(model)
    print(f"model: {model or 'bundled'} ({time.perf_counter() - t:.1f} s to load)")
    return agent


def order(args) -> int:
    """Finds an elimination order for a function in a Python file."""
    import json

    try:
        fn = load_function(args.target)
        example = parse_args_spec(args.args)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    agent = _agent(args.model)
    result = agent.order(fn, *example, budget_s=args.budget, finetune=not args.no_finetune,
                         simulations=args.simulations, fallback=args.fallback, seed=args.seed)
    if args.json:
        print(json.dumps({"order": result.order, "cost": result.cost, "baselines": result.baselines,
                          "savings": result.savings, "method": result.method, "seconds": result.seconds,
                          "compile_seconds": result.compile_seconds, "fingerprint": result.fingerprint}))
    else:
        print(result)
    return 0


def demo(args) -> int:
    """Traces a benchmark function, compares classic orders and the bundled model's, and
    checks the Jacobian computed in the model's order against jax.jacrev."""
    import jax
    import numpy as np

    import alphagrad

    ex = alphagrad.examples.get(args.example)
    print(f"{ex.name}: {ex.description}\n")
    graph = alphagrad.trace(ex.fn, *ex.args)
    print(graph.summary(max_rows=0), "\n")
    _print_table(graph, _baseline_table(graph, args.anneal, args.convention))
    if args.budget <= 0:
        return 0
    print()
    agent = _agent(args.model)
    result = agent.order(graph, budget_s=args.budget, seed=args.seed)
    print(result)
    jac = alphagrad.jacobian(ex.fn, order=result)(*ex.args)
    ref = jax.jacrev(ex.fn)(*ex.args)
    err = max(float(np.max(np.abs(np.asarray(a) - np.asarray(b)), initial=0.0))
              for a, b in zip(jax.tree_util.tree_leaves(jac), jax.tree_util.tree_leaves(ref)))
    print(f"\nJacobian in this order vs jax.jacrev: max abs difference {err:.2e}")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="alphagrad", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("demo", help="trace a benchmark function and compare elimination orders")
    p.add_argument("--example", default="RoeFlux_3d", help="a name from alphagrad.examples")
    p.add_argument("--anneal", type=float, default=5.0, help="seconds of simulated annealing (0: skip)")
    p.add_argument("--budget", type=float, default=10.0, help="seconds for the pretrained model (0: skip)")
    p.add_argument("--model", default=None, help="model directory or hub repo id (default: bundled)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--convention", default="exact", choices=["exact", "published"])
    p.set_defaults(run=demo)
    p = sub.add_parser("order", help="an elimination order for a function in a Python file")
    p.add_argument("target", help="path/to/file.py:function")
    p.add_argument("--args", required=True, help='example arguments, e.g. "f32[3,4] f32[]"')
    p.add_argument("--model", default=None, help="model directory or hub repo id (default: bundled)")
    p.add_argument("--budget", type=float, default=10.0, help="seconds of search and fine-tuning")
    p.add_argument("--simulations", type=int, default=None, help="MCTS simulations per move")
    p.add_argument("--no-finetune", action="store_true", help="zero-shot only")
    p.add_argument("--fallback", choices=["markowitz"], default=None,
                   help="a Markowitz order for graphs over the model's limit")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(run=order)
    args = parser.parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
