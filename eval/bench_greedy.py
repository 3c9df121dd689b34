"""What each model's network knows on its own (not a test): ``python -m eval.bench_greedy``.

Plays each model's greedy order (``Agent.greedy_order``'s player: no search, annealing or
baseline competing) on every held-out graph of the dataset in ``--data`` and reports its
cost over the graph's best baseline (forward, reverse, Markowitz), models side by side,
geometric means per group of families, and per graph for the published and large groups.
Used to compare training rounds (e.g. the main run's model against a DAgger round's).
The per-graph table also gives forward, reverse and Markowitz over the same best
baseline: which regime a graph is in (a sweep from one side, or local greedy choices).

Writes ``OUT/report.json`` and ``OUT/report.md``; ``--readme README.md`` puts the summary
between ``<!-- bench_greedy:start -->`` and ``<!-- bench_greedy:end -->``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys

import numpy as np

START, END = "<!-- bench_greedy:start -->", "<!-- bench_greedy:end -->"
GROUPS = {"published": ("published",), "random held-out": ("random_heldout",),
          "large (300-1,200 intermediates)": ("large_random", "large_zoo_chained", "large_real")}


def measure(models: list, data: str, split: str) -> dict:
    """``{group: [(name, intermediates, [ratio per model], {baseline: ratio})]}`` over the
    split's graphs."""
    import datasets as hf

    import alphagrad
    from alphagrad.evaluator import Evaluator
    from data_gen.dataset import row_to_graph

    agents = [alphagrad.from_pretrained(m) for m in models]
    groups: dict = {g: [] for g in GROUPS}
    for row in hf.load_from_disk(data)[split]:
        group = next((g for g, fams in GROUPS.items() if row["family"] in fams), None)
        if group is None or row["num_intermediates"] == 0:
            continue
        graph = row_to_graph(row)
        ev = Evaluator(graph, "exact")
        scale = max(row["best_baseline"], 1)
        ratios = [ev.cost(a.player(graph, scale, ev).play(0.0)) / scale for a in agents]
        modes = {m: row[f"cost_{m}"] / scale for m in ("forward", "reverse", "markowitz")}
        groups[group].append((row["name"], row["num_intermediates"], ratios, modes))
    return groups


def markdown(models: list, groups: dict) -> str:
    def geomean(rows, i):
        return float(np.exp(np.mean(np.log([r[2][i] for r in rows]))))

    head = "| group | graphs | " + " | ".join(f"`{m}`" for m in models) + " |"
    lines = [head, "|---|---|" + "---|" * len(models)]
    for g, rows in groups.items():
        if rows:
            lines.append(f"| {g} | {len(rows)} | " + " | ".join(f"{geomean(rows, i):.3f}" for i in range(len(models)))
                         + " |")
    lines += ["", "| graph | intermediates | " + " | ".join(f"`{m}`" for m in models)
              + " | forward | reverse | Markowitz |", "|---|---|" + "---|" * (len(models) + 3)]
    for g, rows in groups.items():
        if g != "random held-out":
            lines += [f"| {name} | {n} | " + " | ".join(f"{x:.3f}" for x in [*ratios, *modes.values()]) + " |"
                      for name, n, ratios, modes in rows]
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m eval.bench_greedy", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="train/runs/main/best_model,alphagrad/pretrained",
                   help="comma-separated model directories or hub ids, side by side")
    p.add_argument("--data", default="data/train")
    p.add_argument("--split", default="heldout")
    p.add_argument("--out", default="eval/results/greedy")
    p.add_argument("--readme", default=None)
    args = p.parse_args(argv)
    models = [m for m in args.models.split(",") if m]
    if not models:
        p.error("--models names no model")
    groups = measure(models, args.data, args.split)
    command = "python -m eval.bench_greedy " + " ".join(argv if argv is not None else sys.argv[1:])
    machine = f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores"
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "report.json"), "w") as f:
        json.dump({"command": command, "machine": machine, "models": models, "groups": groups}, f, indent=1)
    table = markdown(models, groups)
    intro = (f"`{command}` ({machine}): greedy order / best baseline, geometric mean over the held-out "
             f"graphs of `{args.data}` (split `{args.split}`), models side by side")
    with open(os.path.join(args.out, "report.md"), "w") as f:
        f.write(f"# Greedy orders of the network alone\n\n{intro}\n\n{table}\n")
    print(table)
    if args.readme:
        from eval.readme_results import put_block

        put_block(args.readme, f"{intro}:\n\n{table.split(chr(10) * 2)[0]}", START, END)
    return 0


if __name__ == "__main__":
    sys.exit(main())
