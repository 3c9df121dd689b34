"""Where a network's greedy order loses (not a test): ``python -m eval.loss_profile``.

For each held-out graph of ``--families`` in ``--data`` on which the model's greedy order
(its player, as :mod:`eval.bench_greedy` plays it) costs more than ``--above`` x the best
baseline, the order's first ``f * n`` moves are kept for each fraction ``f`` of
``--fractions`` and the rest is ordered again by annealing
(:func:`data_gen.labels.complete`, the labeller's completion: ``--moves-per-vertex`` moves
per vertex left, from the order's own rest and screened from forward and reverse; seed
``--seed``): the cheapest order that prefix still allows, as far as annealing finds one.
Where that cost jumps is where the network's moves made its loss; the prefix of 0 is
annealing alone. The summary gives, per fraction, the geometric mean of the completed
costs over the best baseline and the share of each graph's excess (its greedy order over
the prefix-0 completion, in logs) already made by the moves kept, averaged over the
graphs. Writes ``OUT/report.json`` and ``OUT/report.md``.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from eval.common import LARGE_FAMILIES, write_report

FRACTIONS = (0.0, 0.2, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95)


def profile(agent, row: dict, fractions, moves_per_vertex: int, seed: int, above: float = 0.0) -> dict | None:
    """One graph's row: its greedy order's cost and the cost of each prefix's completion,
    both over the best baseline; None if the greedy order costs at most ``above`` x it."""
    from alphagrad.evaluator import Evaluator
    from data_gen.dataset import row_to_graph
    from data_gen.labels import complete

    graph = row_to_graph(row)
    ev = Evaluator(graph, "exact")
    scale = max(row["best_baseline"], 1)
    order = np.asarray(agent.player(graph, scale, ev).play(0.0), np.int64)
    n = len(order)
    greedy = ev.cost(order) / scale
    if greedy <= above:
        return None
    completed = []
    for f in fractions:
        split = int(f * n)  # f in [0, 1]
        completed.append(ev.cost(complete(ev, order, split, max(1, moves_per_vertex * (n - split)), seed)) / scale)
    return {"name": row["name"], "family": row["family"], "intermediates": n, "greedy": greedy,
            "completed": completed}


def summary(rows: list, fractions) -> dict:
    """Per fraction: the geometric mean of the completed costs, and the mean share of each
    graph's excess (log of its greedy cost over its prefix-0 completion) that the kept
    moves already made (graphs with no excess over the prefix-0 completion left out)."""
    c = np.log([r["completed"] for r in rows])
    g = np.log([r["greedy"] for r in rows])
    excess = g - c[:, 0]
    lost = excess > 0
    share = ((c[lost] - c[lost, :1]) / excess[lost, None]).mean(0) if lost.any() else np.full(len(fractions), np.nan)
    return {"geomean": np.exp(c.mean(0)).tolist(), "greedy_geomean": float(np.exp(g.mean())),
            "excess_share": share.tolist(), "graphs_with_excess": int(lost.sum())}


def markdown(report: dict) -> str:
    fr = report["fractions"]
    head = "| graph | family | intermediates | greedy | " + " | ".join(f"kept {f:g}" for f in fr) + " |"
    lines = [head, "|---|---|---|---|" + "---|" * len(fr)]
    lines += [f"| {r['name']} | {r['family']} | {r['intermediates']} | {r['greedy']:.3f} | "
              + " | ".join(f"{x:.3f}" for x in r["completed"]) + " |" for r in report["rows"]]
    s = report["summary"]
    lines.append(f"| geometric mean | | | **{s['greedy_geomean']:.3f}** | "
                 + " | ".join(f"**{x:.3f}**" for x in s["geomean"]) + " |")
    lines.append(f"| share of the excess made ({s['graphs_with_excess']} graphs) | | | 1 | "
                 + " | ".join(f"{x:.2f}" for x in s["excess_share"]) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m eval.loss_profile", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="alphagrad/pretrained", help="model directory or hub id")
    p.add_argument("--data", required=True, help="a dataset from `python -m data_gen build`")
    p.add_argument("--split", default="heldout")
    p.add_argument("--families", default=",".join(LARGE_FAMILIES), help="comma-separated graph families")
    p.add_argument("--above", type=float, default=1.0,
                   help="profile the graphs whose greedy order costs more than this x the best baseline (0: all)")
    p.add_argument("--fractions", default=",".join(f"{f:g}" for f in FRACTIONS),
                   help="comma-separated shares of the moves kept, each in [0, 1]")
    p.add_argument("--moves-per-vertex", type=int, default=50, help="annealing moves per vertex left")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", default="eval/results/loss_profile")
    args = p.parse_args(argv)
    try:
        fractions = [float(f) for f in args.fractions.split(",") if f]
    except ValueError:
        fractions = []
    if not fractions or not all(0 <= f <= 1 for f in fractions):
        p.error(f"--fractions {args.fractions!r}: comma-separated numbers in [0, 1], e.g. 0,0.5,0.9")
    if args.moves_per_vertex < 1:
        p.error(f"--moves-per-vertex = {args.moves_per_vertex} must be >= 1")
    import datasets as hf

    import alphagrad

    families = {f for f in args.families.split(",") if f}
    agent = alphagrad.from_pretrained(args.model)
    rows = []
    for row in hf.load_from_disk(args.data)[args.split]:
        if row["family"] in families and row["num_intermediates"] > 0 and row["best_baseline"] > 0:
            r = profile(agent, row, fractions, args.moves_per_vertex, args.seed, args.above)
            if r is not None:
                rows.append(r)
    if not rows:
        p.error(f"no graph of the families {sorted(families)} in {args.data}:{args.split} has a greedy order "
                f"over {args.above} x its best baseline")
    report = {"model": args.model, "fractions": fractions, "rows": rows, "summary": summary(rows, fractions)}
    write_report(p, args, argv, report, markdown, "Where the greedy order loses",
                 f"`{args.model}`'s greedy order / best baseline, and the cost of keeping its first moves (the "
                 "share of them heading each column) and annealing the rest, over the same best baseline")
    return 0


if __name__ == "__main__":
    sys.exit(main())
