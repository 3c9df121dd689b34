"""How much of the policy loss its targets leave to learn (not a test): ``python -m eval.label_noise``.

A label's soft target at a state is every move that keeps the cost of *one* annealed
completion of that state minimal (:mod:`data_gen.labels`). Another completion of the same
state, annealed from another seed, can be as cheap and still want other moves: that part
of the target is not a function of the state, and no network can learn it. This measures
it: for ``--graphs`` labelled graphs of ``--data`` (``--min-intermediates`` to
``--max-intermediates``), at
``--positions`` of each graph's labelled positions spread over the game, the state the
label's order reaches there is completed again by annealing (the labeller's own budget,
read from the label set's manifest, and its screen; seed ``--seed``) and its target set
derived again, and the two are compared:

* **accuracy**: the share of the first target set that is in the second, i.e. the
  trainer's ``accuracy`` (the policy's top move is a target) of a policy that knows the
  first teacher exactly and picks uniformly among its targets;
* **teacher-clone excess**: the trainer's ``excess`` (cross-entropy to the target less the
  target's own entropy) of that policy, smoothed as ``(1 - eps) * uniform(first set) +
  eps * uniform(legal moves)``, against the second target; the least over an ``eps``
  grid is reported. A network's excess on such labels cannot be expected below it;

both weighted as the loss weighs states (``0.5 + progress``) and by stretch of the game.
With ``--models A,B``, each model's greedy move at the same states is scored against both
target sets too: how close the network's top move comes to what the labels allow.
Writes ``OUT/report.json`` and ``OUT/report.md``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys

import numpy as np

from eval.common import load_split, write_report

EPS = (0.01, 0.03, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9)
BANDS = ((0.0, 0.5), (0.5, 0.8), (0.8, 1.0))


def second_targets(graph, label: dict, picks, config, seed: int, agents=()) -> list[dict]:
    """For each labelled position index in ``picks``: the state of ``label["order"]`` there,
    completed again (``config``: the labeller's :class:`data_gen.labels.LabelConfig`, its
    moves and screen), both target sets, and whether each of ``agents``' greedy move there
    is in each."""
    from alphagrad.evaluator import Evaluator
    from data_gen.labels import candidates, complete

    ev = Evaluator(graph, "exact")
    players = [agent.player(graph, max(label["best_baseline"], 1), ev) for agent in agents]
    order = np.asarray(label["order"], np.int64)
    n = len(order)
    out = []
    for p in picks:
        t = int(label["positions"][p])
        if n - t < 2:  # one move left: nothing to disagree on
            continue
        again = complete(ev, order, t, config.moves(n - t), (seed + 7919 * t) % 2**32, config.screen)
        (_, targets), = candidates(ev, again, [t], config.horizon, int(config.regret_cap * ev.cost(again)))
        second = set(targets.tolist())
        first = set(label["moves"][p])
        picked = [player.play_from(order[:t], moves=1)[0] for player in players]
        out.append({"progress": t / n, "first": len(first), "second": len(second), "both": len(first & second),
                    "legal": n - t, "cost_ratio": ev.cost(again) / max(label["cost"], 1),
                    "network_first": [m in first for m in picked], "network_second": [m in second for m in picked]})
    return out


def clone_excess(states: list[dict], eps: float) -> np.ndarray:
    """Per state: the excess of ``(1 - eps) * uniform(first) + eps * uniform(legal)``
    against the uniform target on the second set."""
    first, second, both, legal = (np.array([s[k] for s in states], float) for k in ("first", "second", "both", "legal"))
    inside = (1 - eps) / first + eps / legal
    outside = eps / legal
    xent = -(both * np.log(inside) + (second - both) * np.log(outside)) / second
    return xent - np.log(second)


def summarise(states: list[dict]) -> list[dict]:
    """One row per stretch of the game and one for all of it: states, weighted accuracy,
    mean set sizes and legal moves, the least clone excess and its ``eps``, and each
    model's weighted accuracy against the first and the second target set."""
    rows = []
    for lo, hi in BANDS + ((0.0, 1.0),):
        s = [x for x in states if lo <= x["progress"] < hi]  # progress < 1: two moves or more are left
        if not s:
            continue
        w = 0.5 + np.array([x["progress"] for x in s])
        acc = np.array([x["both"] / x["first"] for x in s])
        excess = {eps: float((w * clone_excess(s, eps)).sum() / w.sum()) for eps in EPS}
        eps = min(excess, key=excess.get)

        def hits(key):  # per model: the weighted share of states whose greedy move is in that set
            return [float((w * np.array([x[key][i] for x in s])).sum() / w.sum())
                    for i in range(len(s[0].get(key, [])))]

        rows.append({"stretch": "all" if (lo, hi) == (0.0, 1.0) else f"{lo:g}-{hi:g}", "states": len(s),
                     "accuracy": float((w * acc).sum() / w.sum()),
                     "first": float(np.mean([x["first"] for x in s])),
                     "second": float(np.mean([x["second"] for x in s])),
                     "legal": float(np.mean([x["legal"] for x in s])),
                     "cost_ratio": float(np.mean([x["cost_ratio"] for x in s])),
                     "excess": excess[eps], "eps": eps,
                     "network_first": hits("network_first"), "network_second": hits("network_second")})
    return rows


def run(data: str, split: str, name: str, graphs: int, positions: int, min_intermediates: int, seed: int,
        models=(), max_intermediates: int = 0, by_hash: bool = False) -> dict:
    import alphagrad
    from data_gen.dataset import row_to_graph
    from data_gen.labels import LabelConfig, load_labels

    with open(os.path.join(data, name, "labels.json")) as f:
        made = json.load(f)["config"]  # what the labels depend on; a setting it leaves out was the default
    config = LabelConfig(**{f.name: made[f.name] for f in dataclasses.fields(LabelConfig) if f.name in made})
    _, ds = load_split(data, split)
    labels = {r["graph_hash"]: r for r in load_labels(data, name)[split]}
    agents = [alphagrad.from_pretrained(m) for m in models]
    states, used = [], []
    if by_hash:  # as the trainer's data.large_validation picks the training graphs it keeps out
        ds = ds.select(np.argsort(ds["graph_hash"], kind="stable"))
    for row in ds:
        if len(used) >= graphs:
            break
        label = labels.get(row["graph_hash"])
        n = row["num_intermediates"]
        if label is None or n < min_intermediates or (max_intermediates and n > max_intermediates):
            continue
        picks = sorted(set(np.linspace(0, len(label["positions"]) - 1, positions).round().astype(int).tolist()))
        found = second_targets(row_to_graph(row), label, picks, config, seed, agents)
        states += found
        used.append(row["name"])
        print(f"{row['name']} ({row['num_intermediates']}): {len(found)} states", file=sys.stderr, flush=True)
    return {"rows": summarise(states) if states else [], "graphs": used, "states": states, "models": list(models)}


def markdown(report: dict) -> str:
    models = report.get("models", [])
    lines = ["| stretch of the game | states | accuracy | first set | second set | legal moves | "
             "second cost / first | teacher-clone excess (nat) | eps |"
             + "".join(f" `{m}` vs first / second |" for m in models), "|---|---|---|---|---|---|---|---|---|"
             + "---|" * len(models)]
    lines += [f"| {r['stretch']} | {r['states']} | {r['accuracy']:.3f} | {r['first']:.1f} | {r['second']:.1f} | "
              f"{r['legal']:.1f} | {r['cost_ratio']:.4f} | {r['excess']:.3f} | {r['eps']:g} |"
              + "".join(f" {a:.3f} / {b:.3f} |" for a, b in zip(r["network_first"], r["network_second"]))
              for r in report["rows"]]
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m eval.label_noise", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default="data/train")
    p.add_argument("--split", default="validation", choices=("train", "validation"))
    p.add_argument("--labels", default="labels", help="the label set under --data (default labels)")
    p.add_argument("--graphs", type=int, default=64)
    p.add_argument("--positions", type=int, default=6, help="labelled positions per graph (default 6)")
    p.add_argument("--min-intermediates", type=int, default=0)
    p.add_argument("--max-intermediates", type=int, default=0, help="0: no limit")
    p.add_argument("--by-hash", action="store_true",
                   help="take the graphs in order of their hash, as the trainer's data.large_validation picks the "
                        "training graphs it keeps out (the first ones of --min-intermediates 300 are those)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--models", default="", help="comma-separated models whose greedy move is scored too")
    p.add_argument("--out", default="eval/results/label_noise")
    args = p.parse_args(argv)
    if args.graphs < 1 or args.positions < 1:
        p.error(f"--graphs {args.graphs} and --positions {args.positions} must be >= 1")
    if not os.path.exists(os.path.join(args.data, args.labels, "labels.json")):
        p.error(f"no label set {args.labels!r} in {args.data!r}: make it with "
                f"`python -m data_gen label --data {args.data}`")
    report = run(args.data, args.split, args.labels, args.graphs, args.positions, args.min_intermediates, args.seed,
                 [m for m in args.models.split(",") if m], args.max_intermediates, args.by_hash)
    if not report["rows"]:
        p.error(f"no labelled graph of {args.min_intermediates} or more intermediates with a state to compare "
                f"in {args.data}:{args.split}")
    write_report(p, args, argv, report, markdown, "What the targets leave to learn",
                 f"{len(report['graphs'])} graphs of `{args.data}` ({args.split}, label set `{args.labels}`), "
                 f"{args.positions} labelled states each completed again by annealing (seed {args.seed}); "
                 "accuracy and excess as the trainer measures them, of a policy that knows the first teacher")
    return 0


if __name__ == "__main__":
    sys.exit(main())
