"""Benchmark of the classic search (not a test): run ``python -m eval.bench_search``.

Measures, side by side in one process on this machine, the evaluator and annealer of
this release (sparse, incremental: ``baselines.anneal``) against those of release 0.1.0
(dense ``V x V``, every move re-scores the whole order: ``baselines.anneal_dense``):

* full-order evaluations per second and annealing moves scored per second, at ~100,
  ~450, ~2,000 and ~5,000 intermediates (the new annealer per chain, and with its
  chains running side by side, one per core, as ``baselines.anneal`` runs them), and the
  evaluator's memory at ~5,000;
* time to quality: the cost (over the best of forward, reverse and Markowitz) that each
  annealer returns at budgets from 0.05 s to 60 s, on the ten published tasks and on
  graphs of 400-5,000 intermediates (chained benchmark functions and random programs);
* the targets set for the new annealer (scored moves per second, time to quality),
  judged from those numbers.

Writes ``OUT/report.json`` and ``OUT/report.md``; ``--readme README.md`` puts the tables
between ``<!-- bench_search:start -->`` and ``<!-- bench_search:end -->``. Times are
medians (throughput) or single runs per budget and seed (quality), old and new
interleaved so that load on the machine hits both alike.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import statistics
import sys
import threading
import time

import numpy as np

import alphagrad as ag
from alphagrad import baselines
from alphagrad import evaluator as E
from alphagrad.evaluator import Evaluator
from eval.bench_engine import median_time

START, END = "<!-- bench_search:start -->", "<!-- bench_search:end -->"
PUBLISHED = ["RoeFlux_1d", "RoeFlux_3d", "RobotArm_6DOF", "HumanHeartDipole", "PropaneCombustion",
             "MLP", "Encoder", "BlackScholes_Jacobian", "RandomF", "RandomG"]


def _chained(example: str, copies: int):
    from alphagrad.examples import chain

    ex = ag.examples.get(example)
    return ag.trace(chain(ex.fn, copies), *ex.args)


def _random(num_ops: int, seed: int):
    from data_gen import random_programs as rp

    spec = rp.ProgramSpec(num_inputs=6, num_outputs=4, num_ops=num_ops, max_rank=2, max_dim=4, width=24)
    f, args = rp.generate(spec, seed)
    return ag.trace(f, *args)


#: name -> graph builder. Sizes are intermediates with jax 0.10.2.
THROUGHPUT = {
    "RoeFlux_1d": lambda: ag.trace(ag.examples.get("RoeFlux_1d").fn, *ag.examples.get("RoeFlux_1d").args),
    "RoeFlux_3d x3": lambda: _chained("RoeFlux_3d", 3),
    "RoeFlux_3d x14": lambda: _chained("RoeFlux_3d", 14),
    "RoeFlux_3d x36": lambda: _chained("RoeFlux_3d", 36),
}
LARGE = {
    "RoeFlux_3d x3": lambda: _chained("RoeFlux_3d", 3),
    "RoeFlux_1d x4": lambda: _chained("RoeFlux_1d", 4),
    "random 300 ops": lambda: _random(300, 1),
    "BlackScholes x20": lambda: _chained("BlackScholes_Jacobian", 20),
    "RoeFlux_3d x14": lambda: _chained("RoeFlux_3d", 14),
    "RoeFlux_3d x36": lambda: _chained("RoeFlux_3d", 36),
}


def throughput(graph, seconds: float, threads: int) -> dict:
    """Full-order evaluations/s and annealing moves scored/s, old and new, from the same
    start order at the same temperature; the new one also with ``threads`` chains side by
    side (all their moves over the wall time)."""
    ev = Evaluator(graph)
    start = np.asarray(ev.markowitz(), np.int64)
    dense = ev.dense_matrix()
    tables = (ev.compose, ev.join, ev.cost_table)
    reps = 5
    t_new = median_time(lambda: E.order_cost(ev.initial, start, *tables), reps)
    t_old = median_time(lambda: E.dense_order_cost(dense, *tables, start), reps)
    cost = ev.cost(start)
    temp = max(1.0, 0.002 * cost)  # mid-schedule of both annealers

    def moves_new(n):
        order, best = start.copy(), start.copy()
        t = time.perf_counter()
        _, _, scored = ev.anneal(order, best, n, temp, temp, 0)
        return scored / (time.perf_counter() - t)

    evs = [ev] + [Evaluator(graph, rule_tables=ev.tables) for _ in range(threads - 1)]

    def moves_all(n):
        scored = [0] * threads

        def run(k):
            order, best = start.copy(), start.copy()
            scored[k] = evs[k].anneal(order, best, n, temp, temp, k)[2]
        workers = [threading.Thread(target=run, args=(k,)) for k in range(threads)]
        t = time.perf_counter()
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        return sum(scored) / (time.perf_counter() - t)

    def moves_old(n):
        order, best = start.copy(), start.copy()
        t = time.perf_counter()
        E.dense_anneal(dense, *tables, order, cost, best, cost, temp, temp, n, 0)
        return n / (time.perf_counter() - t)

    moves_new(10), moves_old(10)  # compiled
    n_new = max(10, int(seconds / max(t_new, 1e-7)))
    n_old = max(3, int(seconds / max(t_old, 1e-7)))
    rate_new = statistics.median(moves_new(n_new) for _ in range(3))
    rate_old = statistics.median(moves_old(n_old) for _ in range(3))
    rate_all = statistics.median(moves_all(n_new) for _ in range(3))
    state_bytes = sum(a.nbytes for a in ev.initial)
    return {"intermediates": len(graph.intermediates), "edges": len(graph.edges),
            "evals_per_s_old": 1 / t_old, "evals_per_s_new": 1 / t_new,
            "moves_per_s_old": rate_old, "moves_per_s_new": rate_new, "moves_per_s_new_all": rate_all,
            "dense_bytes": int(graph.num_vertices ** 2 * 4),
            "sparse_state_bytes": int(state_bytes),
            "sparse_anneal_bytes": int(state_bytes + _log_bytes(ev, start) + 6 * 8 * (len(start) + 1))}


def _log_bytes(ev: Evaluator, order) -> int:
    """Bytes the annealer's undo log can reach on ``order``: the writes of one full pass
    (the most it holds), times two for the doubling that grows it."""
    work = E.copy_state(ev.initial)
    log = E.new_log(1024)
    V = ev.graph.num_vertices
    mark, pos = np.zeros(V + 1, np.int64), np.zeros(V, np.int64)
    for v in order:
        _, log = E.eliminate_logged(work, v, ev.compose, ev.join, ev.cost_table, mark, pos, log)
    return 2 * 8 * int(log[0])


def quality(graph, budgets, seeds) -> dict:
    """Cost / best baseline returned by each annealer at each budget (old and new
    interleaved), and the wall time each call took."""
    ev = Evaluator(graph)
    best = min(ev.cost(baselines.forward(graph)), ev.cost(baselines.reverse(graph)), ev.cost(ev.markowitz()))
    baselines.anneal(graph, iterations=2)
    baselines.anneal_dense(graph, iterations=2)
    out = {"best_baseline": best, "new": {}, "old": {}, "seconds_new": {}, "seconds_old": {}}
    for b in budgets:
        for name, fn in (("new", baselines.anneal), ("old", baselines.anneal_dense)):
            ratios, secs = [], []
            for s in seeds:
                t = time.perf_counter()
                order = fn(graph, budget_s=b, seed=s)
                secs.append(time.perf_counter() - t)
                ratios.append(ev.cost(order) / max(best, 1))
            out[name][str(b)] = statistics.mean(ratios)
            out["seconds_" + name][str(b)] = max(secs)
        print(f"  {b:>6g} s: new {out['new'][str(b)]:.3f}  old {out['old'][str(b)]:.3f}", file=sys.stderr, flush=True)
    return out


def targets(report: dict) -> list[tuple[str, str, str]]:
    """(target, measured, met/missed) rows."""
    rows = []
    tp = report["throughput"]
    chains = report["config"]["threads"]
    for name, want in (("RoeFlux_3d x3", 10), ("RoeFlux_1d", 3)):
        if name in tp:
            one = tp[name]["moves_per_s_new"] / tp[name]["moves_per_s_old"]
            every = tp[name]["moves_per_s_new_all"] / tp[name]["moves_per_s_old"]
            rows.append((f">= {want}x scored moves/s at {tp[name]['intermediates']} intermediates ({name})",
                         f"{every:.1f}x with {chains} chains, {one:.1f}x with one",
                         ("met" if every >= want else "missed") + ("" if one >= want else " (one chain: missed)")))
    q = report["quality"]
    budgets = report["config"]["budgets"]
    if {"5.0", "60.0"} <= set(budgets_str(budgets)):
        for name, r in q.items():
            n = report["sizes"][name]
            if 400 <= n <= 500:
                new5, old60 = r["new"]["5.0"], r["old"]["60.0"]
                rows.append((f"new@5s <= old@60s ({name}, {n})", f"{new5:.3f} vs {old60:.3f}",
                             "met" if new5 <= old60 else "missed"))
            if n >= 2000:
                new60, old60 = r["new"]["60.0"], r["old"]["60.0"]
                rows.append((f"new@60s >= 5% below old@60s ({name}, {n})", f"{new60:.3f} vs {old60:.3f}",
                             "met" if new60 <= 0.95 * old60 else "missed"))
    pub = report.get("published", {})
    if pub and "60.0" in budgets_str(budgets) and "0.1" in budgets_str(budgets):
        hit = sum(1 for r in pub.values() if r["new"]["0.1"] <= r["new"]["60.0"] + 1e-12)
        rows.append(("published: new reaches its 60 s cost within 0.1 s on >= 8 of 10", f"{hit} of {len(pub)}",
                     "met" if hit >= 8 else "missed"))
    return rows


def budgets_str(budgets) -> list[str]:
    return [str(float(b)) for b in budgets]


def markdown(report: dict) -> str:
    L = [f"`{report['command']}` ({report['machine']}; {report['started']})", ""]
    chains = report["config"]["threads"]
    L += [f"Moves/s: the old annealer (one chain) and the new one per chain and with its {chains} chains side "
          f"by side (`baselines.anneal`'s default here: one per core).", "",
          "| graph | intermediates | evaluations/s old | new | moves/s old | new, one chain | "
          f"new, {chains} chains | speed-up (one chain) | speed-up ({chains} chains) |",
          "|---|---|---|---|---|---|---|---|---|"]
    for name, r in report["throughput"].items():
        L.append(f"| {name} | {r['intermediates']} | {r['evals_per_s_old']:,.0f} | {r['evals_per_s_new']:,.0f} | "
                 f"{r['moves_per_s_old']:,.0f} | {r['moves_per_s_new']:,.0f} | {r['moves_per_s_new_all']:,.0f} | "
                 f"{r['moves_per_s_new'] / r['moves_per_s_old']:.1f}x | "
                 f"{r['moves_per_s_new_all'] / r['moves_per_s_old']:.1f}x |")
    big = max(report["throughput"].values(), key=lambda r: r["intermediates"], default=None)
    if big:
        L += ["", f"Memory at {big['intermediates']} intermediates: dense matrix {big['dense_bytes'] / 2**20:.0f} MiB "
                  f"(int32, copied per evaluation); sparse state {big['sparse_state_bytes'] / 2**20:.1f} MiB, "
                  f"annealer with its undo log {big['sparse_anneal_bytes'] / 2**20:.0f} MiB per chain (upper bound)."
                  + (f" Process peak while tracing, scoring, Markowitz and annealing it: "
                     f"{report['peak_rss_mib']:.0f} MiB." if report.get("peak_rss_mib") else "")]
    budgets = budgets_str(report["config"]["budgets"])
    for title, block in (("Published tasks", report.get("published", {})), ("Large graphs", report["quality"])):
        if not block:
            continue
        L += ["", f"{title}: cost / best baseline (new annealer with {chains} chains, each ending with its "
                  f"descent / old, mean over seeds {report['config']['seeds']})", "",
              "| graph | n | " + " | ".join(f"{b} s" for b in budgets) + " |",
              "|---|---|" + "---|" * len(budgets)]
        for name, r in block.items():
            cells = [f"{r['new'][b]:.3f} / {r['old'][b]:.3f}" for b in budgets]
            L.append(f"| {name} | {report['sizes'][name]} | " + " | ".join(cells) + " |")
        if title == "Published tasks":
            gm = lambda k, b: math.exp(statistics.mean(math.log(r[k][b]) for r in block.values()))
            L.append("| geometric mean | | " + " | ".join(f"{gm('new', b):.3f} / {gm('old', b):.3f}"
                                                      for b in budgets) + " |")
    rows = targets(report)
    if rows:
        L += ["", "| target | measured | |", "|---|---|---|"] + [f"| {a} | {b} | {c} |" for a, b, c in rows]
    return "\n".join(L)


def put_in_readme(path: str, text: str):
    with open(path) as f:
        doc = f.read()
    block = f"{START}\n<!-- generated by `python -m eval.bench_search`; rerun it, do not edit -->\n{text}\n{END}"
    if START in doc and END in doc:
        doc = doc[:doc.index(START)] + block + doc[doc.index(END) + len(END):]
    else:
        doc += "\n" + block + "\n"
    with open(path, "w") as f:
        f.write(doc)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="eval/results/search")
    p.add_argument("--budgets", default="0.05,0.1,0.5,1,5,60", help="seconds, comma-separated")
    p.add_argument("--seeds", default="0", help="comma-separated")
    p.add_argument("--throughput-seconds", type=float, default=2.0)
    p.add_argument("--graphs", default=",".join(LARGE), help="large graphs for the quality curves")
    p.add_argument("--sizes", default=",".join(THROUGHPUT), help="graphs for the throughput table")
    p.add_argument("--no-published", action="store_true")
    p.add_argument("--readme", default=None, help="put the tables into this README")
    args = p.parse_args(argv)
    budgets = [float(b) for b in args.budgets.split(",")]
    seeds = [int(s) for s in args.seeds.split(",")]
    command = "python -m eval.bench_search " + " ".join(argv if argv is not None else sys.argv[1:])
    report = {"command": command.strip(), "started": time.strftime("%Y-%m-%d %H:%M"),
              "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
                         f"alphagrad {ag.__version__}",
              "config": {"budgets": budgets, "seeds": seeds, "threads": baselines.default_threads()},
              "sizes": {}, "throughput": {}, "quality": {},
              "published": {}}
    for name in [n for n in args.sizes.split(",") if n]:
        g = THROUGHPUT[name]()
        report["sizes"][name] = len(g.intermediates)
        print(f"throughput {name} ({len(g.intermediates)} intermediates)", file=sys.stderr, flush=True)
        report["throughput"][name] = throughput(g, args.throughput_seconds, report["config"]["threads"])
        del g
    report["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if not args.no_published:
        for name in PUBLISHED:
            ex = ag.examples.get(name)
            g = ag.trace(ex.fn, *ex.args)
            report["sizes"][name] = len(g.intermediates)
            print(f"quality {name}", file=sys.stderr, flush=True)
            report["published"][name] = quality(g, budgets, seeds)
    for name in [n for n in args.graphs.split(",") if n]:
        g = LARGE[name]()
        report["sizes"][name] = len(g.intermediates)
        print(f"quality {name} ({len(g.intermediates)} intermediates)", file=sys.stderr, flush=True)
        report["quality"][name] = quality(g, budgets, seeds)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "report.json"), "w") as f:
        json.dump(report, f, indent=1)
    text = markdown(report)
    with open(os.path.join(args.out, "report.md"), "w") as f:
        f.write("# Search benchmark\n\n" + text + "\n")
    print(text)
    if args.readme:
        put_in_readme(args.readme, text)


if __name__ == "__main__":
    main()
