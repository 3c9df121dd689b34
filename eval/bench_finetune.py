"""What a short self-play fine-tune buys (not a test): ``python -m eval.bench_finetune``.

On each graph (the published tasks by default; ``--programs`` takes zoo names, ``NAME*K``
chains a zoo function K times, as ``eval.bench_schedule``'s large graphs), side by side in
one process, same seed: the shipped network's greedy order; then for each fine-tune
length S of ``--seconds``, the adapted copy's greedy order and the cheapest game its
self-play played (:meth:`alphagrad.agent.Agent.finetune`, compiling excluded and
reported); annealing alone at ``--anneal`` seconds; and, at the schedule's budget B
(``--budget``), the agent at B, at B + S (the same wall time spent without a fine-tune)
and at B after the fine-tune (``Agent.order(finetune_s=S)``). Every figure is cost / best
baseline (forward, reverse, Markowitz). Writes ``OUT/report.md`` and ``report.json``.
"""

from __future__ import annotations

import argparse
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


def run(programs: list[str], seconds: list[float], anneal_s: float, budget_s: float, seed: int) -> dict:
    import alphagrad as ag
    from alphagrad.evaluator import Evaluator
    from alphagrad.scoring import best_baseline

    agent = ag.from_pretrained()
    rows = []
    for name, graph in graphs(programs):
        ev = Evaluator(graph, "exact")
        scale = max(best_baseline(graph, "exact", ev), 1)
        ratio = lambda order: ev.cost(order) / scale  # noqa: E731
        r = {"name": name, "intermediates": len(graph.intermediates), "greedy": ratio(agent.greedy_order(graph)),
             f"anneal @{anneal_s:g}s": ratio(ag.baselines.anneal(graph, budget_s=anneal_s, seed=seed, progress=False))}
        agent.order(graph, budget_s=0.2, seed=seed, progress=False)  # compiles the schedule's kernels
        r[f"agent @{budget_s:g}s"] = agent.order(graph, budget_s=budget_s, seed=seed, progress=False).cost / scale
        for s in seconds:
            t = time.perf_counter()
            tuned = agent.finetune(graph, seconds=s, seed=seed)
            ft = tuned.finetuned
            r[f"ft {s:g}s: greedy"] = ratio(tuned.greedy_order(graph))
            r[f"ft {s:g}s: best game"] = ft.cost / scale
            r[f"ft {s:g}s: games"] = ft.games
            r[f"ft {s:g}s: compile s"] = ft.compile_seconds
            r[f"ft {s:g}s: wall s"] = round(time.perf_counter() - t, 1)
            r[f"agent @{budget_s + s:g}s"] = agent.order(graph, budget_s=budget_s + s, seed=seed,
                                                         progress=False).cost / scale
            r[f"ft {s:g}s + agent @{budget_s:g}s"] = agent.order(graph, budget_s=budget_s, seed=seed, progress=False,
                                                                  finetune_s=s).cost / scale
        rows.append(r)
        print(" ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in r.items()),
              file=sys.stderr, flush=True)
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
    p.add_argument("--out", default="eval/results/finetune_cpu")
    args = p.parse_args(argv)
    try:
        seconds = [float(s) for s in args.seconds.split(",")]
    except ValueError:
        p.error(f"--seconds {args.seconds!r} must be comma-separated seconds, e.g. 30,60")
    report = run(args.programs.split(","), seconds, args.anneal, args.budget, args.seed)
    write_report(p, args, argv, report, markdown, "Self-play fine-tune",
                 f"cost / best baseline; fine-tune {args.seconds} s, annealing {args.anneal:g} s, "
                 f"schedule {args.budget:g} s, seed {args.seed}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
