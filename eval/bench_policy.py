"""Benchmark of the policy network (not a test): ``python -m eval.bench_policy``.

Measures on this machine, for the network of this release (sparse: one encoder pass per
graph, a per-vertex decoder re-scoring the eliminated vertex's neighbours, compiled
rollouts) and, side by side, for the dense network of an older release (``--old-rev``,
default the last commit with it; checked out into a temporary git worktree and run in a
subprocess with its own bundled model):

* seconds per greedy order and per network move on graphs of ~100, ~500 and ~2,000
  intermediates (RoeFlux_3d, chained 3 and 14 times), medians of ``--repeats`` calls
  after a compiling call (its time reported apart);
* training throughput of this release's network: labelled states and updates per second
  on batches of the dataset in ``--data`` (``python -m data_gen build`` + ``label``).

Writes ``OUT/report.json`` and ``OUT/report.md``; ``--readme README.md`` puts the table
between ``<!-- bench_policy:start -->`` and ``<!-- bench_policy:end -->``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from eval.common import machine, put_block

START, END = "<!-- bench_policy:start -->", "<!-- bench_policy:end -->"
GRAPHS = {"RoeFlux_3d": 1, "RoeFlux_3d x3": 3, "RoeFlux_3d x14": 14}
OLD_REV = "d5aeac7"  # the last commit with the dense network

_OLD_SCRIPT = r"""
import json, sys, time, statistics
import alphagrad as ag
try:
    from alphagrad.examples import chain
except ImportError:  # where it lived at the old revision
    from data_gen.dataset import chain
copies, repeats = json.loads(sys.argv[1]), int(sys.argv[2])
agent = ag.from_pretrained()
ex = ag.examples.get("RoeFlux_3d")
out = {}
for name, k in copies.items():
    g = ag.trace(chain(ex.fn, k) if k > 1 else ex.fn, *ex.args)
    if g.num_vertices > agent.max_vertices:
        out[name] = {"intermediates": len(g.intermediates), "error": f"over the model's limit of {agent.max_vertices} vertices"}
        continue
    t = time.perf_counter(); order = agent.greedy_order(g); first = time.perf_counter() - t
    times = []
    for _ in range(repeats):
        t = time.perf_counter(); agent.greedy_order(g); times.append(time.perf_counter() - t)
    out[name] = {"intermediates": len(g.intermediates), "first_s": first, "greedy_s": statistics.median(times),
                 "cost": ag.cost(g, order)}
print(json.dumps(out))
"""


def _graph(copies: int):
    import alphagrad as ag
    from alphagrad.examples import chain

    ex = ag.examples.get("RoeFlux_3d")
    return ag.trace(chain(ex.fn, copies) if copies > 1 else ex.fn, *ex.args)


def new_network(repeats: int) -> dict:
    import alphagrad as ag

    agent = ag.from_pretrained()
    out = {}
    for name, k in GRAPHS.items():
        g = _graph(k)
        t = time.perf_counter()
        order = agent.greedy_order(g)
        first = time.perf_counter() - t
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            agent.greedy_order(g)
            times.append(time.perf_counter() - t)
        # the moves alone: rollouts of an already encoded graph
        player = agent.player(g, max(min(ag.cost(g, o) for o in ("fwd", "rev", "markowitz")), 1))
        moves = []
        for _ in range(repeats):
            t = time.perf_counter()
            player.play()
            moves.append(time.perf_counter() - t)
        n = len(g.intermediates)
        out[name] = {"intermediates": n, "first_s": first, "greedy_s": statistics.median(times),
                     "rollout_s": statistics.median(moves), "move_s": statistics.median(moves) / n,
                     "cost": ag.cost(g, order)}
    return out


def old_network(rev: str, repeats: int) -> dict:
    root = subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True,
                          check=True).stdout.strip()
    with tempfile.TemporaryDirectory() as tmp:
        tree = os.path.join(tmp, "old")
        subprocess.run(["git", "-C", root, "worktree", "add", "--detach", tree, rev], check=True,
                       capture_output=True)
        try:
            proc = subprocess.run([sys.executable, "-c", _OLD_SCRIPT, json.dumps(GRAPHS), str(repeats)],
                                  cwd=tree, capture_output=True, text=True,
                                  env={**os.environ, "PYTHONPATH": tree, "HF_HUB_OFFLINE": "1"})
        finally:
            subprocess.run(["git", "-C", root, "worktree", "remove", "--force", tree], capture_output=True)
    if proc.returncode != 0:
        return {"error": proc.stderr[-2000:]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def training(data: str, steps: int) -> dict:
    """Labelled states and updates per second of this release's trainer on ``data``
    (first update, which compiles, excluded), per bucket met."""
    import jax
    import numpy as np

    from train.config import TrainConfig, DataConfig
    from train.data import batch_shape, epoch_batches, load_split, make_batch
    from train.loop import init_params, network, optimizer, update_fn

    config = TrainConfig(data=DataConfig(path=data, max_train_graphs=400))
    d = config.data
    split = load_split(d.path, d.train_split, config.buckets, d.max_vertices, d.max_train_graphs)
    net, tx = network(config), optimizer(config)
    params = init_params(config, jax.random.key(0))
    opt = tx.init(params)
    update = update_fn(net, config.value_weight, config.regret_weight, config.reinforce_weight, tx)
    by_bucket: dict = {}
    for visits in epoch_batches(split, 0, 0, config.tokens_per_batch, config.states_per_graph):
        V = int(split.bucket[visits[0][0]])
        by_bucket.setdefault(V, []).append(visits)
    out = {}
    for V, batches in sorted(by_bucket.items()):
        batches = batches[:steps + 1]
        t_data, t_update, states = 0.0, 0.0, 0
        for k, visits in enumerate(batches):
            t = time.perf_counter()
            shape = batch_shape(split, visits, config)
            batch = make_batch(split, visits, *shape)
            t1 = time.perf_counter()
            params, opt, aux = update(params, opt, batch)
            jax.block_until_ready(params)
            t2 = time.perf_counter()
            if k:  # the first update compiles
                t_data += t1 - t
                t_update += t2 - t1
                states += int(np.asarray(batch["weight"]).sum())
        if len(batches) > 1:
            out[V] = {"updates": len(batches) - 1, "updates_per_s": (len(batches) - 1) / (t_data + t_update),
                      "states_per_s": states / (t_data + t_update),
                      "data_share": t_data / (t_data + t_update)}
    return out


def markdown(report: dict) -> str:
    new, old = report["new"], report["old"]
    lines = ["| graph | intermediates | greedy order, new | per move, new | first call, new "
             "| greedy order, old | first call, old | speed-up |", "|---|---|---|---|---|---|---|---|"]
    for name, r in new.items():
        o = old.get(name, {})
        if "greedy_s" in o:
            old_cells = f"{o['greedy_s']:.3f} s | {o['first_s']:.1f} s | {o['greedy_s'] / r['greedy_s']:.0f}x"
        else:
            old_cells = f"{o.get('error', 'not run')[:60]} | | "
        lines.append(f"| {name} | {r['intermediates']} | {r['greedy_s']:.3f} s | {1e6 * r['move_s']:.0f} us "
                     f"| {r['first_s']:.1f} s | {old_cells} |")
    if report.get("training"):
        lines += ["", "| bucket (vertices) | updates/s | labelled states/s | batch building share |",
                  "|---|---|---|---|"]
        for V, t in report["training"].items():
            lines.append(f"| {V} | {t['updates_per_s']:.2f} | {t['states_per_s']:.0f} | {100 * t['data_share']:.0f}% |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m eval.bench_policy", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="eval/results/policy")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--old-rev", default=OLD_REV, help="git revision of the dense network ('' to skip)")
    p.add_argument("--data", default="data/train", help="labelled dataset for the training throughput ('' to skip)")
    p.add_argument("--train-steps", type=int, default=10)
    p.add_argument("--readme", default=None)
    args = p.parse_args(argv)
    report = {"machine": machine(),
              "command": "python -m eval.bench_policy " + " ".join(argv if argv is not None else sys.argv[1:])}
    report["new"] = new_network(args.repeats)
    report["old"] = old_network(args.old_rev, args.repeats) if args.old_rev else {}
    report["training"] = training(args.data, args.train_steps) if args.data else {}
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "report.json"), "w") as f:
        json.dump(report, f, indent=1, sort_keys=True)
    table = markdown(report)
    with open(os.path.join(args.out, "report.md"), "w") as f:
        f.write(f"# Policy network benchmark\n\n`{report['command']}` on {report['machine']}\n\n{table}\n")
    print(table)
    if args.readme:
        put_block(args.readme, f"`{report['command']}` ({report['machine']}):\n\n{table}", START, END)
    return 0


if __name__ == "__main__":
    sys.exit(main())
