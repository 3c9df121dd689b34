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

Arguments that cannot work are refused before any work, in one line on stderr with exit
status 2: an unknown split or family, a dataset, model or ``--train-data`` directory that
does not exist (or a model that does not load), an empty split, an ``--out`` that is a
file, budgets or counts out of range (NaN, infinity, zero or negative seconds). A method
that crashes on a graph is a failure row in the tables; the exit code is 1 only when
nothing could be evaluated.
"""

from __future__ import annotations

import argparse
import math
import os
import shlex
import sys

from eval import methods as M
from eval import report as R
from eval.common import EXAMPLES_SOURCE, dataset_label, display_path, load_split


class _Parser(argparse.ArgumentParser):
    """argparse's parser with usage errors on one line (``python -m eval: error: ...``,
    exit status 2), without the long usage text."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


def _positive_seconds(value: float) -> bool:
    return math.isfinite(value) and value > 0


def _floats(text: str) -> tuple:
    try:
        vals = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected comma-separated seconds, e.g. 5,30,60") from None
    if not vals or not all(map(_positive_seconds, vals)):
        raise argparse.ArgumentTypeError(f"{text!r}: budgets must be finite positive seconds, e.g. 5,30,60")
    return tuple(sorted(set(vals)))


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not _positive_seconds(value):
        raise argparse.ArgumentTypeError(f"{text!r}: expected finite positive seconds, e.g. 5")
    return value


def _count(low: int, high: int | None = None):
    """An argparse type: an integer from ``low`` (to ``high``, exclusive)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < low or (high is not None and value >= high):
            bound = f">= {low}" if high is None else f"from {low} to {high - 1}"
            raise argparse.ArgumentTypeError(f"{text!r}: expected an integer {bound}")
        return value

    return parse


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
            b = math.nan
        if kind not in M.BUDGETED or not _positive_seconds(b):
            raise argparse.ArgumentTypeError(f"{item!r}: expected METHOD@SECONDS with METHOD one of "
                                             f"{', '.join(M.BUDGETED)}, e.g. anneal@60")
        out.append((kind, b))
    return tuple(dict.fromkeys(out))


#: Default budgets with a dataset, and without one (the package's examples: a short run).
DATA_BUDGETS, EXAMPLES_BUDGETS = (5.0, 30.0, 60.0), (5.0,)


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m eval", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=None, help="model directory or Hugging Face repo id (default: the bundled model)")
    p.add_argument("--data", default=None, help="dataset directory of `python -m data_gen build` (default: "
                   "none: the examples shipped in alphagrad.examples; split heldout = the 10 published tasks)")
    p.add_argument("--split", default="heldout", help="split to evaluate (default: heldout)")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--budgets", type=_floats, default=None, help="seconds per graph for the "
                   "agent, annealing and the network-free search (default: 5,30,60 with --data, "
                   f"{','.join(f'{b:g}' for b in EXAMPLES_BUDGETS)} without)")
    p.add_argument("--limit", type=_count(1), default=None, help="at most N graphs per family")
    p.add_argument("--families", nargs="+", default=None, help="families to evaluate (default: all in the split); FAMILY:N evaluates at most N of that family")
    p.add_argument("--seed", type=_count(0, 2**32), default=0, help="seed of every method (default: 0)")
    p.add_argument("--methods", type=_methods, default=M.DEFAULT,
                   help="comma-separated subset of " + ",".join(M.OPTIONAL) + " (default: "
                        + ",".join(M.DEFAULT) + ")")
    p.add_argument("--no-jacobian-bench", dest="jacobian_bench", action="store_false",
                   help="skip the Jacobian runtime table")
    p.add_argument("--train-data", action="append", default=[], metavar="DIR",
                   help="another dataset whose train/validation splits held-out graphs must not occur in "
                        "(repeatable)")
    p.add_argument("--optimal-max", type=_count(0), default=16,
                   help="compute the exact optimum up to this many intermediates (default: 16)")
    p.add_argument("--search-simulations", type=_count(1), default=8,
                   help="simulations per move of the network-free search (default: 8)")
    p.add_argument("--extra", type=_extra, default=(), help="runs beyond --methods x --budgets, e.g. anneal@60 "
                   "(a longer reference run)")
    p.add_argument("--zero-shot-budget", type=_seconds, default=5.0,
                   help="time bound of the network's greedy order (default: 5 s)")
    p.add_argument("--jac-batches", type=_ints, default=(1, 512), help="batch sizes of the Jacobian runtime table")
    p.add_argument("--jac-repeats", type=_count(1), default=50, help="timed calls per Jacobian (default: 50)")
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


def _out_problem(out: str) -> str | None:
    """What keeps the report from being written under ``out`` (None: nothing)."""
    path = os.path.abspath(out)
    while not os.path.exists(path):
        path = os.path.dirname(path)
    if not os.path.isdir(path):
        return (f"--out {out}: {display_path(path)} is a file; give a directory for the report (created if "
                "needed)")
    if not os.access(path, os.W_OK | os.X_OK):
        return f"--out {out}: cannot write in {display_path(path)}"
    return None


def _dataset_problem(data: str | None, split: str, families) -> str | None:
    """What is wrong with the rows to evaluate (None: nothing): no such dataset or split, an
    empty split, a family the split lacks or a per-family limit that is not a count."""
    try:
        _, ds = load_split(data, split)
    except KeyError as e:
        return str(e.args[0])
    except (OSError, ValueError) as e:
        return " ".join(str(e).split())
    except Exception as e:  # noqa: BLE001 - datasets failing on a directory it wrote otherwise
        if data is None:
            raise
        return f"--data {data}: datasets cannot read it ({type(e).__name__}: {' '.join(str(e).split())})"
    where = f"split {split!r} of {dataset_label(data)}"
    if len(ds) == 0:
        return f"{where} has no rows"
    present = sorted(set(ds["family"]))
    for item in families or ():
        name, colon, n = item.partition(":")
        if name not in present:
            return f"--families {item}: {where} has no family {name!r} (families: {', '.join(present)})"
        if colon and not (n.isdigit() and int(n) >= 1):
            return f"--families {item}: expected FAMILY or FAMILY:N with N >= 1"
    return None


def _problem(args) -> str | None:
    """What makes the evaluation ``args`` ask for impossible, checked before any work (None: nothing)."""
    missing = [d for d in args.train_data if not os.path.isdir(d)]
    if missing:
        return f"--train-data {missing[0]}: no such dataset directory"
    return _out_problem(args.out) or _dataset_problem(args.data, args.split, args.families)


def _agent(p: argparse.ArgumentParser, args):
    """The model, loaded once here when a chosen method needs it or ``--model`` names one
    (None otherwise); one that does not load is a usage error."""
    if args.model is None and not any(M.METHODS[k].needs_model for k in args.methods):
        return None
    try:
        return R.load_agent(args.model)
    except (OSError, ValueError) as e:  # alphagrad.hub's ModelLoadError is a ValueError
        p.error(f"cannot load the model {args.model or '(bundled)'}: {' '.join(str(e).split())}")


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = parser()
    args = p.parse_args(argv)
    problem = _problem(args)
    if problem:
        p.error(problem)
    agent = _agent(p, args)
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
    _, code = R.run(config, agent)
    return code


if __name__ == "__main__":
    sys.exit(main())
