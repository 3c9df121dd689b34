"""What a short self-play fine-tune buys (not a test): ``python -m eval.bench_finetune``.

On each graph (the published tasks by default; ``--programs`` takes zoo names, ``NAME*K``
chains a zoo function K times, as ``eval.bench_schedule``'s large graphs), side by side in
one process, same seed: the shipped network's greedy order; then for each fine-tune
length S of ``--seconds``, the adapted copy's greedy order and the cheapest game its
self-play played (:meth:`alphagrad.agent.Agent.finetune`, compiling excluded and
reported); annealing alone at ``--anneal`` seconds; and, at the schedule's budget B
(``--budget``), the agent at B, at B + S (the same wall time spent without a fine-tune)
and at B after the fine-tune (``Agent.order(finetune_s=S)``; ``--no-schedule`` leaves the
schedule's columns out). Every figure is cost / best baseline (forward, reverse, Markowitz).
``--games`` and ``--simulations`` override :class:`alphagrad.selfplay.FinetuneSettings`'
(larger batches for an accelerator). Writes ``OUT/report.md`` and ``report.json`` after every
graph; ``--resume`` keeps the rows of a report of the same settings in ``OUT`` and measures
only the graphs it lacks (a run cut short by a time limit goes on where it stopped).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time

import numpy as np

from eval.common import write_report


def graphs(programs: list[str]) -> list:
    """``(name, graph)`` of zoo names, ``NAME*K`` a zoo function chained K times."""
    import alphagrad as ag

    zoo = {e.name: e for e in ag.examples.all_examples()}
    out = []
    for name in programs:
        base, _, times = name.partition("*")
        if base not in zoo:
            raise SystemExit(f"unknown program {base!r}; zoo names: {sorted(zoo)}")
        e = zoo[base]
        out.append((name, ag.trace(ag.examples.chain(e.fn, int(times)) if times else e.fn, *e.args)))
    return out


def run(programs: list[str], seconds: list[float], anneal_s: float, budget_s: float, seed: int,
        schedule: bool = True, settings=None, rows: list | None = None, done=lambda rows: None) -> dict:
    """Measures every graph of ``programs`` not already in ``rows`` (kept, in front), calling
    ``done(rows)`` after each; ``settings``: the fine-tune's (None: its defaults)."""
    import alphagrad as ag
    from alphagrad.evaluator import Evaluator
    from alphagrad.inference import InferenceSettings
    from alphagrad.scoring import best_baseline

    agent = ag.from_pretrained()
    tuning = InferenceSettings(finetune=settings)
    rows = list(rows or [])
    measured = {r["name"] for r in rows}
    for name, graph in graphs([p for p in programs if p not in measured]):
        ev = Evaluator(graph, "exact")
        scale = max(best_baseline(graph, "exact", ev), 1)
        ratio = lambda order: ev.cost(order) / scale  # noqa: E731
        r = {"name": name, "intermediates": len(graph.intermediates), "greedy": ratio(agent.greedy_order(graph)),
             f"anneal @{anneal_s:g}s": ratio(ag.baselines.anneal(graph, budget_s=anneal_s, seed=seed, progress=False))}
        if schedule:
            agent.order(graph, budget_s=0.2, seed=seed, progress=False)  # compiles the schedule's kernels
            r[f"agent @{budget_s:g}s"] = agent.order(graph, budget_s=budget_s, seed=seed, progress=False).cost / scale
        for s in seconds:
            t = time.perf_counter()
            tuned = agent.finetune(graph, seconds=s, seed=seed, settings=settings)
            ft = tuned.finetuned
            r[f"ft {s:g}s: greedy"] = ratio(tuned.greedy_order(graph))
            r[f"ft {s:g}s: best game"] = ft.cost / scale
            r[f"ft {s:g}s: games"] = ft.games
            r[f"ft {s:g}s: compile s"] = ft.compile_seconds
            r[f"ft {s:g}s: wall s"] = round(time.perf_counter() - t, 1)
            if not schedule:
                continue
            r[f"agent @{budget_s + s:g}s"] = agent.order(graph, budget_s=budget_s + s, seed=seed,
                                                         progress=False).cost / scale
            r[f"ft {s:g}s + agent @{budget_s:g}s"] = agent.order(graph, budget_s=budget_s, seed=seed, progress=False,
                                                                  finetune_s=s, settings=tuning).cost / scale
        rows.append(r)
        print(" ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in r.items()),
              file=sys.stderr, flush=True)
        done(rows)
    return {"rows": rows}


def markdown(report: dict) -> str:
    """One row per graph, the geometric mean of every ratio column last."""
    rows = report["rows"]
    columns = [c for c in rows[0] if c not in ("name", "intermediates")]
    ratio = [c for c in columns if not c.endswith(("games", "compile s", "wall s"))]
    lines = ["| graph | intermediates | " + " | ".join(columns) + " |", "|---|---|" + "---|" * len(columns)]
    for r in rows:
        lines.append(f"| {r['name']} | {r['intermediates']} | "
                     + " | ".join(f"{r[c]:.3f}" if c in ratio else f"{r[c]:g}" for c in columns) + " |")
    means = {c: float(np.exp(np.mean(np.log([r[c] for r in rows])))) for c in ratio}
    lines.append("| geometric mean | | " + " | ".join(f"**{means[c]:.4f}**" if c in ratio else "" for c in columns)
                 + " |")
    anneal = next(c for c in columns if c.startswith("anneal @"))
    near = lambda c: sum(r[c] <= 1.02 * r[anneal] for r in rows)  # noqa: E731
    greedy = [c for c in columns if c.endswith(": greedy")]
    lines += ["", f"Greedy order within 2% of {anneal}: before the fine-tune {near('greedy')} of {len(rows)} graphs"
              + "".join(f"; after {c.split(':')[0][3:]} of fine-tune {near(c)}" for c in greedy) + "."]
    return "\n".join(lines)


PUBLISHED = ["RoeFlux_1d", "RoeFlux_3d", "RobotArm_6DOF", "HumanHeartDipole", "PropaneCombustion",
             "BlackScholes_Jacobian", "MLP", "Encoder", "RandomF", "RandomG"]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m eval.bench_finetune", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--programs", default=",".join(PUBLISHED), help="comma-separated zoo names, NAME*K chained")
    p.add_argument("--seconds", default="30", help="comma-separated fine-tune lengths (default 30)")
    p.add_argument("--anneal", type=float, default=5.0, help="annealing's budget (default 5)")
    p.add_argument("--budget", type=float, default=5.0, help="the schedule's budget B (default 5)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-schedule", dest="schedule", action="store_false",
                   help="leave out the agent's schedule (agent @B, @B+S, fine-tune + agent @B)")
    p.add_argument("--games", type=int, help="games a fine-tune step plays at once (FinetuneSettings.games)")
    p.add_argument("--simulations", type=int, help="Gumbel MuZero simulations per move (FinetuneSettings)")
    p.add_argument("--resume", action="store_true", help="keep OUT's rows of the same settings; measure the rest")
    p.add_argument("--out", default="eval/results/finetune_cpu")
    args = p.parse_args(argv)
    try:
        seconds = [float(s) for s in args.seconds.split(",")]
    except ValueError:
        p.error(f"--seconds {args.seconds!r} must be comma-separated seconds, e.g. 30,60")
    from alphagrad.selfplay import FinetuneSettings

    overrides = {k: getattr(args, k) for k in ("games", "simulations") if getattr(args, k) is not None}
    try:
        settings = dataclasses.replace(FinetuneSettings(), **overrides)
    except ValueError as e:
        p.error(str(e))
    same = run_settings(args, settings)
    rows = _resumed(p, args.out, same) if args.resume else []
    tuned = ", ".join(f"{k} {v}" for k, v in overrides.items()) or "default settings"
    what = (f"cost / best baseline; fine-tune {args.seconds} s ({tuned}), annealing {args.anneal:g} s"
            + (f", schedule {args.budget:g} s" if args.schedule else "") + f", seed {args.seed}")

    def done(rows):
        write_report(p, args, argv, {"rows": rows, "settings": same}, markdown, "Self-play fine-tune", what)

    report = run(args.programs.split(","), seconds, args.anneal, args.budget, args.seed, args.schedule, settings,
                 rows, done)
    if report["rows"] == rows:
        print(f"nothing left to measure: {args.out} holds every graph", file=sys.stderr)
    return 0


def run_settings(args, settings) -> dict:
    """What a resumed run must share with the report it continues: the options that change
    a row's figures and the fine-tune's settings."""
    return json.loads(json.dumps({k: getattr(args, k) for k in ("seconds", "anneal", "budget", "seed", "schedule")}
                                 | {"finetune": dataclasses.asdict(settings)}))


def _resumed(p, out: str, same: dict) -> list:
    """The rows of ``out/report.json`` when it was made with the ``same`` settings; none if
    there is no report; a usage error when its settings differ."""
    path = os.path.join(out, "report.json")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        report = json.load(f)
    if report.get("settings") != same:
        p.error(f"{path} was made with other settings ({report.get('settings')}); "
                f"use another --out, or run without --resume to start anew")
    return report["rows"]


if __name__ == "__main__":
    sys.exit(main())
