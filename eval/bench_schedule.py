"""Ablation of the agent's schedule (not a test): ``python -m eval.bench_schedule``.

Runs :func:`alphagrad.inference.find_order` with the bundled network and with the
one-parameter Markowitz prior (the control), each in the default schedule, with the
opening stage (``InferenceSettings(opening=0.5)``) and without the late start
(``late_start=False``: the player's orders only compete with annealing's) and sampling
at temperature 1 (the default before 0.2), beside
annealing alone, on the large held-out graphs of ``--data`` at each budget, one after
another on each graph (same seed; each schedule compiled by an untimed warm-up call
first). Prints and writes cost / best baseline per
graph and the geometric means to ``OUT/report.md`` (and ``report.json``).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys

import numpy as np

from eval.report import machine

FAMILIES = ("large_random", "large_zoo_chained", "large_real")
#: The schedules compared, by name: ``InferenceSettings`` keyword arguments.
VARIANTS = {"default": {}, "opening 0.5": {"opening": 0.5}, "no late start": {"late_start": False},
            "temperature 1": {"temperature": 1.0}}


def large_rows(data: str, split: str, per_family: int):
    """The first ``per_family`` rows of each family of :data:`FAMILIES` in ``data:split``."""
    import datasets as hf

    count = collections.Counter()
    for row in hf.load_from_disk(data)[split]:
        if row["family"] in FAMILIES and count[row["family"]] < per_family:
            count[row["family"]] += 1
            yield row


def add_graph_arguments(p: argparse.ArgumentParser, data: str) -> None:
    """The model and graph selection flags the large-graph benchmarks share."""
    p.add_argument("--model", default="alphagrad/pretrained")
    p.add_argument("--data", default=data)
    p.add_argument("--split", default="heldout")
    p.add_argument("--per-family", type=int, default=4)


def run(model: str, data: str, split: str, per_family: int, budgets, seed: int, variants=VARIANTS) -> dict:
    import alphagrad
    from alphagrad import baselines
    from alphagrad.inference import InferenceSettings, find_order
    from alphagrad.policy import ControlPlayer
    from data_gen.dataset import row_to_graph

    agent = alphagrad.from_pretrained(model)
    players = {"network": agent.player,
               "markowitz-prior": lambda g, s, ev, encode=True: ControlPlayer("markowitz", g, s, ev, seed=seed)}
    rows = []
    for row in large_rows(data, split, per_family):
        graph, scale = row_to_graph(row), max(row["best_baseline"], 1)
        ratios = {}
        for name, make in players.items():
            for kwargs in variants.values():
                find_order(graph, make, min(min(budgets), 0.2), seed, InferenceSettings(**kwargs))  # compiles
        for budget in budgets:
            ratios[f"anneal @{budget:g}s"] = alphagrad.cost(
                graph, baselines.anneal(graph, budget_s=budget, seed=seed)) / scale
            for name, make in players.items():
                for variant, kwargs in variants.items():
                    ratios[f"{name}, {variant} @{budget:g}s"] = find_order(
                        graph, make, budget, seed, InferenceSettings(**kwargs)).cost / scale
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


def write_report(p, args, argv, report: dict, markdown, title: str, what: str) -> None:
    """Writes ``report`` (with the command that made it and the machine) to
    ``args.out/report.json`` and its ``markdown`` table under ``title`` to ``report.md``,
    and prints the table; no rows is a usage error."""
    if not report["rows"]:
        p.error(f"no graph of the families {FAMILIES} in {args.data}:{args.split}")
    report["command"] = f"{p.prog} " + " ".join(argv if argv is not None else sys.argv[1:])
    report["machine"] = machine()
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "report.json"), "w") as f:
        json.dump(report, f, indent=1)
    table = markdown(report)
    with open(os.path.join(args.out, "report.md"), "w") as f:
        f.write(f"# {title}\n\n`{report['command']}` ({report['machine']}): {what}\n\n{table}\n")
    print(table)


if __name__ == "__main__":
    sys.exit(main())
