"""How much the network's sampled orders add to its greedy one, by temperature (not a
test): ``python -m eval.bench_sampling``.

The schedule (:mod:`alphagrad.inference`) plays the network's greedy order, then sampled
ones at ``InferenceSettings.temperature`` with the seeds :func:`alphagrad.inference.sample_seed`
gives, keeping the cheapest. This plays the same: on every held-out graph of ``--data``,
the greedy order and ``--samples`` sampled orders at each of ``--temperatures``, and reports
the cheapest of the greedy order and the first k samples (k = 1, 2, 4, ...) over the best
baseline, geometric means per group of families (:data:`GROUPS`), and
the median seconds of one sampled order: which temperature the schedule should sample at,
and how far sampling alone takes the network's orders. Graphs some baseline eliminates for
free have no ratio and are left out.

Writes ``OUT/report.json`` and ``OUT/report.md``; ``--readme README.md --block NAME`` puts the
tables between ``<!-- bench_sampling:NAME:start -->`` and its end marker (``--from-report
OUT`` renders a report already written, measuring nothing).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

from eval.bench_greedy import rows_by_group
from eval.common import geomean, machine, put_block

#: Groups of held-out families (:mod:`eval.bench_greedy`'s, the large graphs of any size).
GROUPS = {"published": ("published",), "random held-out": ("random_heldout",),
          "large (300+ intermediates)": ("large_random", "large_zoo_chained", "large_real")}


def counts(samples: int) -> list[int]:
    """The sample counts reported: 1, 2, 4, ... up to ``samples`` (always included)."""
    return sorted({min(2**i, samples) for i in range(samples.bit_length() + 1)})


def measure(model: str, data: str, split: str, temperatures, samples: int, seed: int, limit: int = 0) -> dict:
    """``{group: [{"name", "intermediates", "greedy", "best": {T: [cheapest of the greedy
    order and the first k samples, k = 1..samples]}, "seconds": {T: median seconds per
    sample}}]}``, costs over the best baseline."""
    import alphagrad
    from alphagrad.evaluator import Evaluator
    from alphagrad.inference import sample_seed
    from data_gen.dataset import row_to_graph

    agent = alphagrad.from_pretrained(model)
    groups: dict = {g: [] for g in GROUPS}
    for group, row in rows_by_group(data, split, GROUPS, limit):
        graph = row_to_graph(row)
        ev = Evaluator(graph, "exact")
        scale = max(row["best_baseline"], 1)
        player = agent.player(graph, scale, ev)
        greedy = ev.cost(player.play()) / scale
        best, seconds = {}, {}
        for t in temperatures:
            costs, times = [], []
            for k in range(samples):
                t0 = time.perf_counter()
                order = player.play(t, sample_seed(seed, k))
                times.append(time.perf_counter() - t0)
                costs.append(ev.cost(order) / scale)
            best[str(t)] = np.minimum.accumulate([greedy] + costs)[1:].tolist()
            seconds[str(t)] = float(np.median(times))
        groups[group].append({"name": row["name"], "intermediates": row["num_intermediates"], "greedy": greedy,
                              "best": best, "seconds": seconds})
    return {g: rows for g, rows in groups.items() if rows}


def markdown(groups: dict, temperatures, samples: int) -> str:
    """Per group: a row per temperature, the cheapest of the greedy order and the first k
    samples for each reported k, and the median seconds of a sample."""
    ks = counts(samples)
    lines = []
    for group, rows in groups.items():
        graphs = f"{len(rows)} graph" + ("s" if len(rows) != 1 else "")
        lines += [f"**{group}** ({graphs}; greedy order alone {geomean([r['greedy'] for r in rows]):.3f})",
                  "", "| temperature | " + " | ".join(f"best of greedy + {k}" for k in ks) + " | s per sample |",
                  "|---|" + "---|" * (len(ks) + 1)]
        for t in map(str, temperatures):
            cells = [f"{geomean([r['best'][t][k - 1] for r in rows]):.3f}" for k in ks]
            lines.append(f"| {t} | " + " | ".join(cells)
                         + f" | {np.median([r['seconds'][t] for r in rows]):.3f} |")
        lines.append("")
    return "\n".join(lines).rstrip()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m eval.bench_sampling", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="alphagrad/pretrained")
    p.add_argument("--data", default="data/heldout")
    p.add_argument("--split", default="heldout")
    p.add_argument("--temperatures", default="1,0.5,0.3,0.2,0.1", help="comma-separated, each > 0")
    p.add_argument("--samples", type=int, default=16, help="sampled orders per temperature and graph")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--limit", type=int, default=0, help="at most this many graphs per group (0: all)")
    p.add_argument("--out", default="eval/results/sampling")
    p.add_argument("--from-report", default=None, metavar="DIR",
                   help="measure nothing: render DIR/report.json (e.g. into --readme)")
    p.add_argument("--readme", default=None, help="also put the tables into this file, between "
                   "<!-- bench_sampling:BLOCK:start --> and <!-- bench_sampling:BLOCK:end -->")
    p.add_argument("--block", default="heldout", help="the README block's name (default heldout)")
    args = p.parse_args(argv)
    if args.from_report:
        try:
            with open(os.path.join(args.from_report, "report.json")) as f:
                report = json.load(f)
        except OSError as e:
            p.error(f"--from-report {args.from_report!r}: {e}; run the benchmark with --out DIR first")
    else:
        report = run(p, args, argv)
    table = markdown(report["groups"], report["temperatures"], report["samples"])
    intro = (f"`{report['command']}` ({report['machine']}): the cheapest of the greedy order and the first k sampled "
             f"orders / best baseline, geometric means over the held-out graphs of `{report['data']}`")
    if not args.from_report:
        with open(os.path.join(args.out, "report.md"), "w") as f:
            f.write(f"# The network's sampled orders by temperature\n\n{intro}\n\n{table}\n")
    print(table)
    if args.readme:
        put_block(args.readme, f"{intro}:\n\n{table}", f"<!-- bench_sampling:{args.block}:start -->",
                  f"<!-- bench_sampling:{args.block}:end -->")
    return 0


def run(p, args, argv) -> dict:
    """Measures as the flags say and writes ``OUT/report.json``; returns the report."""
    try:
        temperatures = [float(t) for t in args.temperatures.split(",")]
    except ValueError:
        p.error(f"--temperatures {args.temperatures!r} must be comma-separated numbers, e.g. 1,0.5,0.2")
    if not temperatures or not all(0 < t < float("inf") for t in temperatures):
        p.error(f"--temperatures {args.temperatures!r}: every temperature must be a finite number > 0")
    if args.samples < 1:
        p.error(f"--samples = {args.samples} must be >= 1")
    if args.limit < 0:
        p.error(f"--limit = {args.limit} must be >= 0 (0: every graph)")
    groups = measure(args.model, args.data, args.split, temperatures, args.samples, args.seed, args.limit)
    if not groups:
        p.error(f"no held-out graph of the families {sorted(f for fs in GROUPS.values() for f in fs)} "
                f"in {args.data}:{args.split}")
    report = {"command": "python -m eval.bench_sampling " + " ".join(argv if argv is not None else sys.argv[1:]),
              "machine": machine(),
              "model": args.model, "data": args.data, "samples": args.samples, "temperatures": temperatures,
              "seed": args.seed, "groups": groups}
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "report.json"), "w") as f:
        json.dump(report, f, indent=1)
    return report


if __name__ == "__main__":
    sys.exit(main())
