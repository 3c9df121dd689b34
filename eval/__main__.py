"""``python -m eval``: the evaluation report of the pretrained agent against the baselines
(:mod:`eval.report`).

    python -m eval [--model PATH_OR_REPO] [--data DIR] [--split heldout] --out DIR
                   [--budgets 5,30,60] [--limit N] [--families F ...] [--seed 0]
                   [--methods optimal,zero-shot,agent,anneal,search] [--no-jacobian-bench]
                   [--train-data DIR ...]

Without ``--data`` it evaluates the examples shipped in the package (``alphagrad.examples``,
split as ``python -m data_gen build`` splits them: ``heldout``, the default split, is the ten
published tasks; ``--split train`` or ``validation`` the rest of the zoo; the real-sized
programs of family ``large_real`` are held out in a build and evaluated with ``--data DIR
--families large_real``) at a 5 s budget
(a report in about ten minutes on 2 CPU cores), and says so on stderr. With ``--data DIR`` (a
dataset of ``python -m data_gen build``) the default budgets are 5,30,60.

Evaluates every graph of the split (at most ``--limit`` per family) with forward, reverse,
Markowitz and the ``--methods`` chosen among :mod:`eval.methods` (by default the exact
optimum on small graphs, the network's own greedy order (zero-shot), and at each budget the
agent, simulated annealing and the network-free search); re-scores every
order with ``alphagrad.cost``; checks that no held-out graph occurs in the training
splits, that every method got the same seed and budgets, and (published tasks) the
Jacobian of the cheapest order against ``jax.jacrev``; and writes ``report.md``,
``report.json``, CSV/Markdown tables and PNG plots under ``--out``.

Failures (missing model or dataset, an empty split, a method that crashes on a graph) are
reported in the tables; the exit code is 1 only when nothing could be evaluated.
"""

from __future__ import annotations

import argparse
import shlex
import sys

from eval import methods as M
from eval import report as R
from eval.common import EXAMPLES_SOURCE, display_path


def _floats(text: str) -> tuple:
    try:
        vals = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected comma-separated seconds, e.g. 5,30,60") from None
    if not vals or any(v <= 0 for v in vals):
        raise argparse.ArgumentTypeError(f"{text!r}: budgets must be positive seconds")
    return tuple(sorted(set(vals)))


def _ints(text: str) -> tuple:
    try:
        vals = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected comma-separated integers") from None
    if not vals or any(v < 1 for v in vals):
        raise argparse.ArgumentTypeError(f"{text!r}: expected positive integers")
    return vals


def _methods(text: str) -> tuple:
    try:
        return M.choose(x.strip() for x in text.split(",") if x.strip())
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _extra(text: str) -> tuple:
    out = []
    for item in (x.strip() for x in text.split(",") if x.strip()):
        kind, _, budget = item.partition("@")
        try:
            b = float(budget.rstrip("s"))
        except ValueError:
            b = -1.0
        if kind not in M.BUDGETED or b <= 0:
            raise argparse.ArgumentTypeError(f"{item!r}: expected METHOD@SECONDS with METHOD one of "
                                             f"{', '.join(M.BUDGETED)}, e.g. anneal@60")
        out.append((kind, b))
    return tuple(dict.fromkeys(out))


#: Default budgets with a dataset, and without one (the package's examples: a short run).
DATA_BUDGETS, EXAMPLES_BUDGETS = (5.0, 30.0, 60.0), (5.0,)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m eval", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=None, help="model directory or Hugging Face repo id (default: the bundled model)")
    p.add_argument("--data", default=None, help="dataset directory of `python -m data_gen build` (default: "
                   "none: the examples shipped in alphagrad.examples; split heldout = the 10 published tasks)")
    p.add_argument("--split", default="heldout", help="split to evaluate (default: heldout)")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--budgets", type=_floats, default=None, help="seconds per graph for the "
                   "agent, annealing and the network-free search (default: 5,30,60 with --data, "
                   f"{','.join(f'{b:g}' for b in EXAMPLES_BUDGETS)} without)")
    p.add_argument("--limit", type=int, default=None, help="at most N graphs per family")
    p.add_argument("--families", nargs="+", default=None, help="families to evaluate (default: all in the split); FAMILY:N evaluates at most N of that family")
    p.add_argument("--seed", type=int, default=0, help="seed of every method (default: 0)")
    p.add_argument("--methods", type=_methods, default=M.DEFAULT,
                   help="comma-separated subset of " + ",".join(M.OPTIONAL) + " (default: "
                        + ",".join(M.DEFAULT) + ")")
    p.add_argument("--no-jacobian-bench", dest="jacobian_bench", action="store_false",
                   help="skip the Jacobian runtime table")
    p.add_argument("--train-data", action="append", default=[], metavar="DIR",
                   help="another dataset whose train/validation splits held-out graphs must not occur in "
                        "(repeatable)")
    p.add_argument("--optimal-max", type=int, default=16,
                   help="compute the exact optimum up to this many intermediates (default: 16)")
    p.add_argument("--search-simulations", type=int, default=8,
                   help="simulations per move of the network-free search (default: 8)")
    p.add_argument("--extra", type=_extra, default=(), help="runs beyond --methods x --budgets, e.g. anneal@60 "
                   "(a longer reference run)")
    p.add_argument("--zero-shot-budget", type=float, default=5.0,
                   help="time bound of the network's greedy order (default: 5 s)")
    p.add_argument("--jac-batches", type=_ints, default=(1, 512), help="batch sizes of the Jacobian runtime table")
    p.add_argument("--jac-repeats", type=int, default=50, help="timed calls per Jacobian (default: 50)")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    return p


def command_line(argv) -> str:
    """The command as the report shows it: absolute paths inside the repository made
    relative to its root (:func:`eval.common.display_path`), so it reruns from the root anywhere."""
    def arg(a: str) -> str:
        if a.startswith("--") and "=" in a:
            opt, _, val = a.partition("=")
            return f"{opt}={display_path(val)}"
        return display_path(a)

    return "python -m eval" + ("" if not argv else " " + shlex.join(arg(a) for a in argv))


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser().parse_args(argv)
    if args.limit is not None and args.limit < 1:
        parser().error("--limit must be >= 1")
    if args.budgets is None:
        args.budgets = DATA_BUDGETS if args.data is not None else EXAMPLES_BUDGETS
    if args.data is None:
        print(f"python -m eval: no --data given: evaluating the examples shipped in {EXAMPLES_SOURCE}, split "
              f"{args.split!r} (heldout: the 10 published tasks; train/validation: the rest of the zoo), budgets "
              f"{','.join(f'{b:g}' for b in args.budgets)} s; --data DIR evaluates a dataset of `python -m "
              f"data_gen build`, --budgets 5,30,60 the full budgets", file=sys.stderr, flush=True)
    config = R.EvalConfig(
        out=args.out, model=args.model, data=args.data, split=args.split, budgets=args.budgets,
        limit=args.limit, families=tuple(args.families) if args.families else None, seed=args.seed,
        jacobian_bench=args.jacobian_bench, train_data=tuple(args.train_data), methods=args.methods,
        optimal_max=args.optimal_max, search_simulations=args.search_simulations,
        zero_shot_budget=args.zero_shot_budget, extra=args.extra,
        jac_batches=args.jac_batches, jac_repeats=args.jac_repeats, command=command_line(argv),
        quiet=args.quiet,
    )
    _, code = R.run(config)
    return code


if __name__ == "__main__":
    sys.exit(main())
