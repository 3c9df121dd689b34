"""Where annealing stops on the large held-out graphs (not a test): ``python -m eval.bench_plateau``.

Issue 14 (closed) asked the agent for orders 5% cheaper than annealing's at the same budget on
graphs of 300-2,000 intermediates. This measures whether a better start or a local exact
search could give that, on the large held-out graphs of ``--data`` (``--per-family`` of
each large family):

* **starts**: one annealing chain (``threads=1``, seed 0, ``--budget`` s) from each of
  forward, reverse, Markowitz, the network's greedy order and ``--samples`` orders it
  samples at temperature 1; cost / best baseline of each, and the spread (the dearest
  over the cheapest result);
* **windows**: annealing as the agent runs it (every core, ``--budget`` s), then an exact
  re-ordering of every window of ``--window`` consecutive positions (stride half a window,
  two passes): the graph after the window has the same edges whatever the order within
  it, so each window is solved by :func:`alphagrad.evaluator.optimal` from the state
  before it, and the change is kept when the whole order's cost falls. Its gain is what
  annealing left in reach of a local exact search;
* **longer and restarted** (``--longer F``, 0: not run): annealing as the agent runs it
  for ``F`` times ``--budget``, and the best of ``--restarts`` runs of the same total
  time from uniformly random orders (the first time from each): what more time, and
  starts unlike every heuristic's, find beyond ``--budget``.

Prints and writes ``OUT/report.md`` (and ``report.json``).
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from eval.common import add_graph_arguments, large_rows, write_report


def _solve_window(ev, order, lo: int, window: int):
    """``(state before the window, its vertices, their cheapest order, its cost)``, the
    evaluator's pools grown while either kernel overflows."""
    from alphagrad import evaluator as E

    tables = (ev.compose, ev.join, ev.cost_table)
    part = order[lo:lo + window].copy()
    while True:
        state, flag = E.after(ev.initial, order[:lo], *tables)
        if flag != E.OVERFLOW:
            sub, cost = E.optimal(state, part, *tables)
            if cost != E.OVERFLOW:
                return state, part, sub, cost
        ev.grow()


def exact_windows(ev, order, window: int, passes: int = 2) -> list[int]:
    """``order`` with every window of ``window`` consecutive positions (stride half a
    window) re-ordered optimally, ``passes`` times over; each change is kept only when the
    whole order's cost falls."""
    from alphagrad import evaluator as E

    order = np.asarray(order, np.int64).copy()
    best = ev.cost(order)
    tables = (ev.compose, ev.join, ev.cost_table)
    for _ in range(passes):
        for lo in range(0, max(len(order) - window, 0) + 1, max(window // 2, 1)):
            state, part, sub, cost = _solve_window(ev, order, lo, window)
            if cost < E.order_cost(state, part, *tables):
                trial = order.copy()
                trial[lo:lo + window] = sub
                c = ev.cost(trial)
                if c < best:
                    order, best = trial, c
    return [int(v) for v in order]


def run(model: str, data: str, split: str, per_family: int, budget: float, samples: int, window: int,
        seed: int, longer: float = 0.0, restarts: int = 8) -> dict:
    import alphagrad
    from alphagrad import baselines
    from alphagrad.evaluator import Evaluator
    from data_gen.dataset import row_to_graph

    agent = alphagrad.from_pretrained(model)
    rows = []
    for row in large_rows(data, split, per_family):
        graph, scale = row_to_graph(row), max(row["best_baseline"], 1)
        ev = Evaluator(graph, "exact")
        player = agent.player(graph, scale, ev)
        starts = {"forward": baselines.forward(graph), "reverse": baselines.reverse(graph),
                  "markowitz": ev.markowitz(), "network greedy": player.play()}
        starts.update({f"network sample {k}": player.play(1.0, seed + k) for k in range(samples)})
        baselines.anneal(graph, budget_s=0.05, seed=seed)  # compiles the kernels (untimed)
        annealed = {name: ev.cost(baselines.anneal(graph, budget_s=budget, seed=seed, start=o, threads=1)) / scale
                    for name, o in starts.items()}
        agentlike = baselines.anneal(graph, budget_s=budget, seed=seed)
        t0 = time.perf_counter()
        local = exact_windows(ev, agentlike, window)
        rows.append({"name": row["name"], "family": row["family"], "intermediates": row["num_intermediates"],
                     "starts": {k: round(ev.cost(o) / scale, 4) for k, o in starts.items()},
                     "annealed": {k: round(v, 4) for k, v in annealed.items()},
                     "spread": round(max(annealed.values()) / min(annealed.values()), 4),
                     "anneal": round(ev.cost(agentlike) / scale, 4),
                     "windows": round(ev.cost(local) / scale, 4),
                     "windows_seconds": round(time.perf_counter() - t0, 1)})
        r = rows[-1]
        if longer:
            rng = np.random.default_rng(seed)
            r["longer"] = round(ev.cost(baselines.anneal(graph, budget_s=longer * budget, seed=seed)) / scale, 4)
            r["restarts"] = round(min(ev.cost(baselines.anneal(
                graph, budget_s=longer * budget / restarts, seed=seed + 1 + k,
                start=[int(v) for v in rng.permutation(graph.intermediates)])) for k in range(restarts)) / scale, 4)
        print(f"{r['name']}: spread {r['spread']:.4f}, anneal {r['anneal']:.4f} -> exact windows {r['windows']:.4f}",
              file=sys.stderr, flush=True)
    return {"rows": rows}


def _gmean(xs) -> float:
    return float(np.exp(np.mean(np.log(xs))))


def markdown(report: dict) -> str:
    rows = report["rows"]
    names = list(rows[0]["annealed"])
    more = [k for k in ("longer", "restarts") if k in rows[0]]
    heads = {"longer": f"anneal x{report.get('longer', 0):g} time",
             "restarts": f"best of {report.get('restarts', 0)} random restarts, same time"}
    lines = ["| graph | intermediates | " + " | ".join(f"{n} (start)" for n in names)
             + " | spread | anneal | + exact windows | windows s |" + "".join(f" {heads[k]} |" for k in more),
             "|---|---|" + "---|" * (len(names) + 4 + len(more))]
    for r in rows:
        lines.append(f"| {r['name']} | {r['intermediates']} | "
                     + " | ".join(f"{r['annealed'][n]:.3f} ({r['starts'][n]:.2f})" for n in names)
                     + f" | {r['spread']:.3f} | {r['anneal']:.4f} | {r['windows']:.4f} | {r['windows_seconds']:.1f} |"
                     + "".join(f" {r[k]:.4f} |" for k in more))
    lines.append("| geometric mean | | " + " | ".join(f"**{_gmean([r['annealed'][n] for r in rows]):.4f}**"
                                               for n in names)
                 + f" | **{_gmean([r['spread'] for r in rows]):.4f}** | **{_gmean([r['anneal'] for r in rows]):.4f}**"
                 f" | **{_gmean([r['windows'] for r in rows]):.4f}** | |"
                 + "".join(f" **{_gmean([r[k] for r in rows]):.4f}** |" for k in more))
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m eval.bench_plateau", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_graph_arguments(p, "data/heldout")
    p.add_argument("--budget", type=float, default=3.0, help="seconds of annealing per run (default 3)")
    p.add_argument("--samples", type=int, default=3, help="sampled network orders as starts (default 3)")
    p.add_argument("--window", type=int, default=10, help="positions per exactly re-ordered window (default 10)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--longer", type=float, default=0.0,
                   help="also anneal for this many times --budget, and restart from random orders (default 0: not run)")
    p.add_argument("--restarts", type=int, default=8, help="random restarts sharing the --longer time (default 8)")
    p.add_argument("--out", default="eval/results/plateau")
    args = p.parse_args(argv)
    if not 0 < args.budget < float("inf"):
        p.error(f"--budget {args.budget!r} must be a finite number of seconds > 0")
    if not 2 <= args.window <= 16:
        p.error(f"--window {args.window!r} must be 2..16 (the exact search grows as 2^window)")
    if args.samples < 0:
        p.error(f"--samples {args.samples!r} must be >= 0")
    if not 0 <= args.longer < float("inf") or args.restarts < 1:
        p.error(f"--longer {args.longer!r} must be a finite number >= 0 and --restarts {args.restarts!r} >= 1")
    report = run(args.model, args.data, args.split, args.per_family, args.budget, args.samples, args.window,
                 args.seed, args.longer, args.restarts)
    if args.longer:
        report.update(longer=args.longer, restarts=args.restarts)
    write_report(p, args, argv, report, markdown, "Where annealing stops",
                 f"cost / best baseline after {args.budget:g} s of annealing from each start (the start's own "
                 f"in brackets), the spread (dearest / cheapest), and annealing on every core followed by exact "
                 f"windows of {args.window} positions" + (f"; then annealing for {args.longer:g} x {args.budget:g} s "
                 f"on every core, and the best of {args.restarts} runs sharing that time from random orders"
                 if args.longer else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
