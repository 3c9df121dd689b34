"""Costs of the classic orders on the ten published tasks, beside the published figures
(not a test): ``python -m eval.bench_costs [--anneal SECONDS]``.

For each task: our graph's intermediates, forward / reverse / Markowitz multiplications
under the published cost model next to the published ones, the same under our exact
model, and (with ``--anneal``) simulated annealing at that budget as a ratio to the best
baseline, next to the published per-task AlphaZero's ratio.
"""

from __future__ import annotations

import argparse
import math

import alphagrad as ag
from alphagrad import baselines
from eval.published import PUBLISHED


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--anneal", type=float, default=0.0, help="seconds of annealing per task (0: skip)")
    args = parser.parse_args(argv)
    head = "| task | intermediates (pub.) | fwd / rev / Markowitz, published model (pub.) | exact model |"
    if args.anneal:
        head += f" anneal {args.anneal:g}s / best baseline | AlphaZero / best (pub.) |"
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    ratios, az = [], []
    for ex in (e for e in ag.examples.all_examples() if e.family == "published"):
        g = ag.trace(ex.fn, *ex.args)
        pub = PUBLISHED[ex.name]
        row = [ex.name, f"{len(g.intermediates)} ({pub[0]})"]
        costs = {}
        for conv in ("published", "exact"):
            c = [ag.cost(g, o, convention=conv) for o in ("fwd", "rev")]
            c.append(ag.cost(g, baselines.markowitz(g, conv), convention=conv))
            costs[conv] = c
        row.append(" / ".join(map(str, costs["published"])) + f" ({pub[1]} / {pub[2]} / {pub[3]})")
        row.append(" / ".join(map(str, costs["exact"])))
        if args.anneal:
            best = min(costs["published"])
            a = ag.cost(g, baselines.anneal(g, budget_s=args.anneal, convention="published"), convention="published")
            ratios.append(a / best)
            az.append(pub[5] / min(pub[1:4]))
            row += [f"{a} / {best} = {a / best:.3f}", f"{az[-1]:.3f}"]
        print("| " + " | ".join(row) + " |")
    if args.anneal:
        gm = lambda xs: math.exp(sum(map(math.log, xs)) / len(xs))
        print(f"\ngeometric mean: anneal {gm(ratios):.3f}, published AlphaZero {gm(az):.3f}")


if __name__ == "__main__":
    main()
