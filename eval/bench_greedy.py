"""What each model's network knows on its own (not a test): ``python -m eval.bench_greedy``.

Plays each model's greedy order (``Agent.greedy_order``'s player: no search, annealing or
baseline competing) on every held-out graph of the dataset in ``--data`` and reports its
cost over the graph's best baseline (forward, reverse, Markowitz), models side by side,
geometric means per group of families, and per graph for the published and large groups.
Used to compare training rounds (e.g. the main run's model against a DAgger round's).
``--split train`` plays the graphs the models were trained on instead, grouped by
training family (per graph: the zoo's), with how many each model plays worse than the
best baseline and over twice it: whether the network fits what it was taught. Graphs
some baseline eliminates for free (a few random programs) have no ratio and are left out.
The per-graph table also gives forward, reverse and Markowitz over the same best
baseline: which regime a graph is in (a sweep from one side, or local greedy choices).
The median seconds of one greedy order per group (encoders included) are measured as the
models play one after another on the same graphs.
Each further model is also set against the first, graph by graph (:func:`paired`): the
geometric mean of their cost ratios with a 90% bootstrap interval over the graphs, and how
many graphs it plays cheaper and dearer; one or two graphs can move a group's mean by 5-60%
between models, and the interval says when a difference is more than that.

A model written ``a+b+c`` is an ensemble: its members' logits averaged at every move (each
member's encoder once per graph, their decoders side by side as one wider decoder played by
the same compiled rollout, :func:`ensemble_weights`), to tell what independently trained
networks agree on from what one of them learned by chance.

Writes ``OUT/report.json`` and ``OUT/report.md``; ``--readme README.md`` puts the summary
between ``<!-- bench_greedy:start -->`` and ``<!-- bench_greedy:end -->``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

from eval.common import machine, put_block

START, END = "<!-- bench_greedy:start -->", "<!-- bench_greedy:end -->"
GROUPS = {"published": ("published",), "random held-out": ("random_heldout",),
          "large (300-1,200 intermediates)": ("large_random", "large_zoo_chained", "large_real")}
#: Groups of the training split (``--split train``); every other family is the zoo's.
TRAIN_GROUPS = {"random": ("random",), "large random (300-2,000)": ("large_train_random",),
                "chained zoo (300-2,000)": ("large_train_zoo_chained",),
                "stepped (300-2,000)": ("stepped_train_random",),
                "shared weights (300-2,000)": ("shared_train_random",), "zoo": None}
#: Groups listed graph by graph.
LISTED = ("published", "large (300-1,200 intermediates)", "zoo")


def group_of(family: str, groups: dict):
    """The group of ``groups`` holding ``family`` (a group of None holds the rest)."""
    found = next((g for g, fams in groups.items() if fams is not None and family in fams), None)
    return found if found is not None else next((g for g, fams in groups.items() if fams is None), None)


def ensemble_weights(weights: list) -> tuple:
    """The decoder arrays (:func:`alphagrad.network.decoder_weights`: ``H1, Wd, W2, b2, w3,
    b3``) whose logit is the mean of ``weights``' logits: the members' hidden units side by
    side (``H1``, ``Wd`` and ``b2`` concatenated, ``W2`` block-diagonal), the output layer
    over their number. The members must read the same inputs (``Wd``'s rows)."""
    sizes = [w[2].shape[0] for w in weights]
    W2 = np.zeros((sum(sizes), sum(sizes)))
    for w, start in zip(weights, np.cumsum([0, *sizes[:-1]])):
        W2[start:start + w[2].shape[0], start:start + w[2].shape[0]] = w[2]
    cat = lambda k: np.ascontiguousarray(np.concatenate([w[k] for w in weights], axis=-1))
    return cat(0), cat(1), W2, cat(3), cat(4) / len(weights), float(sum(w[5] for w in weights) / len(weights))


def load_models(models: list) -> list:
    """The agents of each model (one, or an ensemble's members for ``a+b+c``)."""
    import alphagrad

    out = []
    for spec in models:
        members = [alphagrad.from_pretrained(m) for m in spec.split("+")]
        if len(members) > 1 and any(a.net.config.encodings != 1 for a in members):
            raise ValueError(f"ensemble {spec!r}: its members must encode the graph once (network.encodings 1)")
        inputs = {a.params["params"]["first"]["kernel"].shape[0] - a.net.config.dim for a in members}
        if len(inputs) > 1:
            raise ValueError(f"ensemble {spec!r}: its members read different inputs ({sorted(inputs)} decoder "
                             "inputs); ensemble models trained by the same code")
        out.append(members)
    return out


def greedy(members: list, graph, scale: float, ev) -> list:
    """The greedy order of one model or of an ensemble's averaged logits on ``graph``."""
    players = [a.player(graph, scale, ev) for a in members]
    if len(players) > 1:
        players[0].weights = ensemble_weights([p.weights for p in players])
    return players[0].play(0.0)


def rows_by_group(data: str, split: str, groups: dict, limit: int = 0):
    """``(group, row)`` for each row of ``data:split`` in one of ``groups`` (at most
    ``limit`` per group, the split's first; 0: all), except graphs without intermediates
    and those some baseline eliminates for free (no ratio to report)."""
    import datasets as hf

    taken: dict = {g: 0 for g in groups}
    for row in hf.load_from_disk(data)[split]:
        group = group_of(row["family"], groups)
        if group is None or row["num_intermediates"] == 0 or row["best_baseline"] == 0 or (
                limit and taken[group] >= limit):
            continue
        taken[group] += 1
        yield group, row


def measure(agents: list, data: str, split: str, limit: int = 0) -> dict:
    """``{group: [(name, intermediates, [ratio per model], {baseline: ratio}, [seconds per
    model])]}`` over the split's graphs for each model of ``agents`` (:func:`load_models`;
    ``limit``: at most that many graphs per group, the split's first); the seconds are one
    greedy order's, its players' encoders included."""
    from alphagrad.evaluator import Evaluator
    from data_gen.dataset import row_to_graph

    kinds = GROUPS if split == "heldout" else TRAIN_GROUPS
    groups: dict = {g: [] for g in kinds}
    for group, row in rows_by_group(data, split, kinds, limit):
        graph = row_to_graph(row)
        ev = Evaluator(graph, "exact")
        scale = max(row["best_baseline"], 1)
        ratios, seconds = [], []
        for a in agents:
            t = time.perf_counter()
            order = greedy(a, graph, scale, ev)
            seconds.append(time.perf_counter() - t)
            ratios.append(ev.cost(order) / scale)
        modes = {m: row[f"cost_{m}"] / scale for m in ("forward", "reverse", "markowitz")}
        groups[group].append((row["name"], row["num_intermediates"], ratios, modes, seconds))
    return groups


def paired(groups: dict, i: int, seed: int = 0) -> dict:
    """Model ``i`` against model 0 of ``groups``, per group: ``{group: (geomean of the
    per-graph cost ratios, (low, high) 90% percentile-bootstrap interval over the graphs or
    None under two graphs, graphs cheaper, graphs dearer)}``."""
    from scipy import stats

    out = {}
    for g, rows in groups.items():
        if not rows:
            continue
        logs = np.log([r[2][i] / r[2][0] for r in rows])
        interval = None
        if len(logs) >= 2:
            ci = stats.bootstrap((logs,), np.mean, confidence_level=0.9, n_resamples=9999, method="percentile",
                                 rng=np.random.default_rng(seed)).confidence_interval
            interval = (float(np.exp(ci.low)), float(np.exp(ci.high)))
        out[g] = (float(np.exp(logs.mean())), interval, int((logs < 0).sum()), int((logs > 0).sum()))
    return out


def markdown(models: list, groups: dict) -> str:
    def geomean(rows, i):
        return float(np.exp(np.mean(np.log([r[2][i] for r in rows]))))

    def over(rows, i):
        return f"{sum(r[2][i] > 1 for r in rows)} / {sum(r[2][i] > 2 for r in rows)}"

    head = "| group | graphs | " + " | ".join(f"`{m}`" for m in models) + " |"
    lines = [head, "|---|---|" + "---|" * len(models)]
    for g, rows in groups.items():
        if rows:
            lines.append(f"| {g} | {len(rows)} | " + " | ".join(f"{geomean(rows, i):.3f}" for i in range(len(models)))
                         + " |")
    lines += ["", "Graphs played worse than the best baseline / over twice it:", "", head,
              "|---|---|" + "---|" * len(models)]
    lines += [f"| {g} | {len(rows)} | " + " | ".join(over(rows, i) for i in range(len(models))) + " |"
              for g, rows in groups.items() if rows]
    timed = {g: rows for g, rows in groups.items() if rows and len(rows[0]) > 4}
    if timed:
        lines += ["", "Seconds per greedy order (median over the group's graphs; the encoders included, the "
                  "first graph of each size also compiles one):", "", head, "|---|---|" + "---|" * len(models)]
        lines += [f"| {g} | {len(rows)} | " + " | ".join(f"{np.median([r[4][i] for r in rows]):.3f}"
                                                          for i in range(len(models))) + " |"
                  for g, rows in timed.items()]
    if len(models) > 1:
        lines += ["", f"Against `{models[0]}`, graph by graph: geometric mean of the cost ratios [90% bootstrap "
                  "interval over the graphs], graphs played cheaper / dearer:", "",
                  "| group | graphs | " + " | ".join(f"`{m}`" for m in models[1:]) + " |",
                  "|---|---|" + "---|" * (len(models) - 1)]
        against = [paired(groups, i) for i in range(1, len(models))]

        def cell(x):
            mean, interval, cheaper, dearer = x
            span = f" [{interval[0]:.3f}, {interval[1]:.3f}]" if interval else ""
            return f"{mean:.3f}{span}, {cheaper} / {dearer}"

        lines += [f"| {g} | {len(rows)} | " + " | ".join(cell(a[g]) for a in against) + " |"
                  for g, rows in groups.items() if rows]
    lines += ["", "| graph | intermediates | " + " | ".join(f"`{m}`" for m in models)
              + " | forward | reverse | Markowitz |", "|---|---|" + "---|" * (len(models) + 3)]
    for g, rows in groups.items():
        if g in LISTED:
            lines += [f"| {name} | {n} | " + " | ".join(f"{x:.3f}" for x in [*ratios, *modes.values()]) + " |"
                      for name, n, ratios, modes, *_ in rows]
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m eval.bench_greedy", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="train/runs/main/best_model,alphagrad/pretrained",
                   help="comma-separated model directories or hub ids, side by side; a+b+c: an ensemble")
    p.add_argument("--data", default="data/train")
    p.add_argument("--split", default="heldout",
                   help="heldout (default), or train/validation: the graphs the models learn from")
    p.add_argument("--limit", type=int, default=0, help="at most this many graphs per group (0: all)")
    p.add_argument("--out", default="eval/results/greedy")
    p.add_argument("--readme", default=None)
    args = p.parse_args(argv)
    models = [m for m in args.models.split(",") if m]
    if not models:
        p.error("--models names no model")
    if args.limit < 0:
        p.error(f"--limit = {args.limit} must be >= 0 (0: every graph)")
    try:
        agents = load_models(models)
    except ValueError as e:
        p.error(str(e))
    groups = measure(agents, args.data, args.split, args.limit)
    command = "python -m eval.bench_greedy " + " ".join(argv if argv is not None else sys.argv[1:])
    host = machine()
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "report.json"), "w") as f:
        json.dump({"command": command, "machine": host, "models": models, "groups": groups}, f, indent=1)
    table = markdown(models, groups)
    which = "held-out graphs" if args.split == "heldout" else "graphs the models were trained on"
    intro = (f"`{command}` ({host}): greedy order / best baseline, geometric mean over the {which} "
             f"of `{args.data}` (split `{args.split}`), models side by side")
    with open(os.path.join(args.out, "report.md"), "w") as f:
        f.write(f"# Greedy orders of the network alone\n\n{intro}\n\n{table}\n")
    print(table)
    if args.readme:
        put_block(args.readme, f"{intro}:\n\n{table.split(chr(10) * 2)[0]}", START, END)
    return 0


if __name__ == "__main__":
    sys.exit(main())
