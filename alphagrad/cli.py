"""The ``alphagrad`` command line: ``alphagrad demo``, ``alphagrad cost``."""

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


def demo(args) -> int:
    """Traces a benchmark function and compares elimination orders."""
    import alphagrad

    ex = alphagrad.examples.get(args.example)
    print(f"{ex.name}: {ex.description}\n")
    graph = alphagrad.trace(ex.fn, *ex.args)
    print(graph.summary(max_rows=0), "\n")
    _print_table(graph, _baseline_table(graph, args.anneal, args.convention))
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="alphagrad", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("demo", help="trace a benchmark function and compare elimination orders")
    p.add_argument("--example", default="RoeFlux_3d", help="a name from alphagrad.examples")
    p.add_argument("--anneal", type=float, default=5.0, help="seconds of simulated annealing (0: skip)")
    p.add_argument("--convention", default="exact", choices=["exact", "published"])
    p.set_defaults(run=demo)
    args = parser.parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
