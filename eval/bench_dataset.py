"""Throughput of the dataset builder (not a test): ``python -m eval.bench_dataset``.

Builds ``--num`` random programs of the training distribution (no zoo, held-out or
large graphs) in a fresh temporary directory once per ``--procs`` value, and prints
graphs per second (work only, and end to end with process start-up and assembly) and
the extrapolated time of a 10,000-graph build. With ``--heldout`` / ``--large`` it also
times that many held-out random programs and large graphs (at the largest process count)
and extrapolates a default full build (``--num-random 10000``: 1,000 held-out programs,
16 large graphs, the zoo).

    python -m eval.bench_dataset --num 200 --procs 1 2 --heldout 16 --large 4
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np

from data_gen import dataset as D


def _run(config: D.BuildConfig, procs: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench_dataset_") as out:
        t0 = time.perf_counter()
        summary = D.build(out, config, num_proc=procs, progress=False, quiet=True)
        wall = time.perf_counter() - t0
        times = []
        for c in D.plan_chunks(config, D.zoo_examples(config.zoo)):
            times += [t[1] for t in D.read_chunk(c, out)[1]["timings"]]
    times = np.sort(np.asarray(times))
    top = times[-max(1, len(times) // 20):].sum() / times.sum() if len(times) else float("nan")
    items = summary["items_computed"]
    return {"items": items, "work_s": summary["compute_seconds"], "wall_s": wall,
            "rows": sum(summary["rows"].values()), "failures": summary["failures"],
            "failure_kinds": summary["failures_by_family_stage"],
            "rate": items / summary["compute_seconds"] if summary["compute_seconds"] else float("nan"),
            "wall_rate": items / wall,
            "per_graph": f"median {np.median(times):.2f} s, p90 {np.quantile(times, 0.9):.2f} s, "
                         f"max {times.max():.1f} s; slowest 5% take {100 * top:.0f}% of the time"}


def _hms(seconds: float) -> str:
    h, rem = divmod(int(round(seconds)), 3600)
    return f"{h}h{rem // 60:02d}m" if h else f"{rem // 60}m{rem % 60:02d}s"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--num", type=int, default=200, help="random programs per build (default 200)")
    p.add_argument("--procs", type=int, nargs="+", default=[1, 2], help="process counts (default 1 2)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--heldout", type=int, default=0, help="also time this many held-out programs")
    p.add_argument("--large", type=int, default=0, help="also time this many large graphs")
    args = p.parse_args(argv)
    print(f"dataset build benchmark: {args.num} training-distribution graphs, seed {args.seed}, "
          f"{os.cpu_count()} CPUs")
    print("| processes | graphs | rows | failures | work s | graphs/s | end-to-end graphs/s | 10,000 graphs |")
    print("|---|---|---|---|---|---|---|---|")
    rates = {}
    base = D.BuildConfig(seed=args.seed, num_random=args.num, num_heldout=0, large=0, zoo="none")
    for procs in args.procs:
        r = _run(base, procs)
        rates[procs] = r["rate"]
        print(f"| {procs} | {r['items']} | {r['rows']} | {r['failures']} | {r['work_s']:.1f} | {r['rate']:.2f} | "
              f"{r['wall_rate']:.2f} | {_hms(10_000 / r['rate'])} |", flush=True)
        print(f"  per graph (one process's time): {r['per_graph']}"
              + (f"; failures: {r['failure_kinds']}" if r["failure_kinds"] else ""))
    procs = max(args.procs)
    extra = {}
    for name, changes in (("heldout", dict(num_random=0, num_heldout=args.heldout)),
                          ("large", dict(num_random=0, large=args.large))):
        n = changes.get("num_heldout", changes.get("large"))
        if not n:
            continue
        r = _run(D.BuildConfig(seed=args.seed, zoo="none", **{"num_heldout": 0, "large": 0, **changes}), procs)
        extra[name] = r["rate"]
        print(f"{name}: {r['items']} graphs with {procs} processes in {r['work_s']:.1f} s "
              f"({r['rate']:.3f} graphs/s), {r['failures']} failures {r['failure_kinds'] or ''}; "
              f"per graph: {r['per_graph']}", flush=True)
    if len(extra) == 2:
        total = 10_000 / rates[procs] + 1_000 / extra["heldout"] + 16 / extra["large"]
        print(f"extrapolated default build of --num-random 10000 with {procs} processes "
              f"(plus 1,000 held-out, 16 large, the zoo not counted): {_hms(total)}")


if __name__ == "__main__":
    main()
