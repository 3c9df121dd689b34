"""Ablation of the agent's schedule (not a test): ``python -m eval.bench_schedule``.

Runs the schedule (:func:`alphagrad.inference.find_order`) of the methods of
:mod:`eval.methods` that play it, the agent (its network; ``network`` below) and the
one-parameter Markowitz prior (the control), each in the default schedule, with the
opening stage (``InferenceSettings(opening=0.5)``), without the late start
(``late_start=False``: the player's orders only compete with annealing's) and sampling
at temperature 1 (the default before 0.2), beside annealing alone, on the large held-out
graphs of ``--data`` at each budget, one after another on each graph (same seed; each
schedule compiled by an untimed warm-up call first). Prints and writes cost / best
baseline per graph and the geometric means to ``OUT/report.md`` (and ``report.json``).
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from eval.common import add_graph_arguments, large_rows, write_report
from eval.methods import METHODS

#: The players compared, by the name the report gives them: methods that run the schedule.
PLAYERS = {"network": "agent", "markowitz-prior": "markowitz-prior"}
#: The schedules compared, by name: ``InferenceSettings`` keyword arguments.
VARIANTS = {"default": {}, "opening 0.5": {"opening": 0.5}, "no late start": {"late_start": False},
            "temperature 1": {"temperature": 1.0}}


def run(model: str, data: str, split: str, per_family: int, budgets, seed: int, variants=VARIANTS) -> dict:
    import alphagrad
    from alphagrad.inference import InferenceSettings
    from data_gen.dataset import row_to_graph

    context = {"agent": alphagrad.from_pretrained(model)}
    players = {name: METHODS[method] for name, method in PLAYERS.items()}
    warmup = min(min(budgets) / 2, 0.2)  # no measured budget: the agent keeps its result per budget
    rows = []
    for row in large_rows(data, split, per_family):
        graph, scale = row_to_graph(row), max(row["best_baseline"], 1)
        ratios = {}
        for method in players.values():
            for kwargs in variants.values():  # compiles
                method.run(graph, budget_s=warmup, seed=seed, settings=InferenceSettings(**kwargs), **context)
        for budget in budgets:
            ratios[f"anneal @{budget:g}s"] = alphagrad.cost(
                graph, METHODS["anneal"].run(graph, budget_s=budget, seed=seed).order) / scale
            for name, method in players.items():
                for variant, kwargs in variants.items():
                    found = method.run(graph, budget_s=budget, seed=seed, settings=InferenceSettings(**kwargs),
                                       **context)
                    ratios[f"{name}, {variant} @{budget:g}s"] = found.cost / scale
        rows.append({"name": row["name"], "intermediates": row["num_intermediates"], "ratios": ratios})
        print(row["name"], " ".join(f"{k}={v:.3f}" for k, v in ratios.items()), file=sys.stderr, flush=True)
    return {"rows": rows}


def markdown(report: dict) -> str:
    """Geometric means (a method per row, a budget per column), then every graph."""
    columns = list(report["rows"][0]["ratios"])
    means = {c: np.exp(np.mean(np.log([r["ratios"][c] for r in report["rows"]]))) for c in columns}
    methods = list(dict.fromkeys(c.rsplit(" @", 1)[0] for c in columns))
    budgets = list(dict.fromkeys(c.rsplit(" @", 1)[1] for c in columns))
    lines = ["| method | " + " | ".join(budgets) + " |", "|---|" + "---|" * len(budgets)]
    lines += [f"| {m} | " + " | ".join(f"{means[f'{m} @{b}']:.4f}" for b in budgets) + " |" for m in methods]
    lines += ["", "| graph | intermediates | " + " | ".join(columns) + " |", "|---|---|" + "---|" * len(columns)]
    for r in report["rows"]:
        lines.append(f"| {r['name']} | {r['intermediates']} | " + " | ".join(f"{r['ratios'][c]:.3f}" for c in columns)
                     + " |")
    lines.append("| geometric mean | | " + " | ".join(f"**{means[c]:.4f}**" for c in columns) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m eval.bench_schedule", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_graph_arguments(p, "data/train")
    p.add_argument("--budgets", default="1,5", help="comma-separated seconds (default 1,5)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="eval/results/schedule")
    args = p.parse_args(argv)
    try:
        budgets = [float(b) for b in args.budgets.split(",")]
    except ValueError:
        p.error(f"--budgets {args.budgets!r} must be comma-separated seconds, e.g. 1,5")
    if not budgets or not all(0 < b < float("inf") for b in budgets):
        p.error(f"--budgets {args.budgets!r}: every budget must be a finite number of seconds > 0")
    report = run(args.model, args.data, args.split, args.per_family, budgets, args.seed)
    write_report(p, args, argv, report, markdown, "The schedule's stages",
                 f"cost / best baseline at {args.budgets} s, seed {args.seed}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
