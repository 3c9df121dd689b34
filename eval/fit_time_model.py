"""Fits the packaged time model of this platform and reports how well it ranks orders:
``python -m eval.fit_time_model``.

Measures the programs of :class:`alphagrad.time_fit.FitSettings` (each with ~10-14 distinct
orders, timed round robin as ``jax.jit(jax.vmap(J))`` at the batch), then

* held out: the programs split in two halves (alternating, in the settings' order); a model
  fitted on one half ranks the orders of the other, and the other way round, so every
  program's rank correlation comes from a model that never saw it;
* the packaged model: fitted on every program, written to
  ``alphagrad/time_models/<platform>.json`` (``--model-out``; what ``convention="time"``
  uses on this platform unless the user refits with ``alphagrad timemodel fit``).

Per program it reports Spearman's rank correlation between measured time and (a) the
held-out model, (b) the packaged model, (c) multiplications. Writes ``report.json`` (every
timed order with its features) and ``report.md`` under ``--out``.

    python -m eval.fit_time_model [--out eval/results/time_model_cpu] [--quick]
        [--batch 256] [--programs a,b,...] [--time-limit S] [--rows report.json] [--note TEXT]

``--rows``: refit and report from an earlier report's measurements (no timing).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform as host
import shlex
import statistics
import sys
import time

import numpy as np

from eval.common import REPO_ROOT, display_path, fmt, machine, md_table


def _spearman(x, y) -> float | None:
    from scipy.stats import spearmanr

    if len(set(x)) < 2 or len(set(y)) < 2:
        return None
    return float(spearmanr(x, y)[0])


def _predict(rows, model) -> list:
    w = model.weights()
    return [float(np.asarray(r["features"]) @ w) for r in rows]


#: What XLA says of each compiled program (:func:`alphagrad.time_fit.program_features`)
#: that the XLA model below weighs.
XLA_FEATURES = ("kernels", "bytes", "flops", "transcendentals")


def _xla_weights(rows) -> np.ndarray:
    """Seconds per unit of :data:`XLA_FEATURES` (>= 0), fitted as the time model is
    (:func:`alphagrad.time_model.relative_fit`: relative error, a free intercept per program)."""
    from alphagrad.time_model import relative_fit

    return relative_fit([[r["xla"][k] for k in XLA_FEATURES] for r in rows], [r["seconds"] for r in rows],
                        [r["program"] for r in rows])


def _xla_predict(rows, w) -> list:
    return [float(np.asarray([r["xla"][k] for k in XLA_FEATURES]) @ w) for r in rows]


def evaluate(rows: list, programs: list, platform: str, batch: int) -> tuple[list, object]:
    """Per program: the held-out, packaged and multiplication rank correlations; and the
    model fitted on every program."""
    from alphagrad import time_fit

    halves = [programs[0::2], programs[1::2]]
    held, xla_held = {}, {}
    has_xla = all("xla" in r for r in rows)
    for k in (0, 1):
        train = [r for r in rows if r["program"] in halves[k]]
        if not train:
            continue
        model = time_fit.model_from(train, platform, batch)
        w = _xla_weights(train) if has_xla else None
        for p in halves[1 - k]:
            mine = [r for r in rows if r["program"] == p]
            held[p] = _spearman(_predict(mine, model), [r["seconds"] for r in mine])
            if has_xla:
                xla_held[p] = _spearman(_xla_predict(mine, w), [r["seconds"] for r in mine])
    full = time_fit.model_from(rows, platform, batch)
    table = []
    for p in programs:
        mine = [r for r in rows if r["program"] == p]
        t = [r["seconds"] for r in mine]
        by_name = {r["name"]: r["seconds"] for r in mine}
        classic = [by_name[n] for n in ("forward", "reverse", "markowitz", "anneal") if n in by_name]
        table.append({"program": p, "orders": len(mine), "fastest_ms": min(t) * 1e3, "slowest_ms": max(t) * 1e3,
                      "anneal_time_ratio": by_name["anneal@time"] / min(classic) if "anneal@time" in by_name else None,
                      "retest": _spearman(*zip(*[r["passes"] for r in mine])) if "passes" in mine[0] else None,
                      "heldout": held.get(p), "fitted": _spearman(_predict(mine, full), t),
                      "mults": _spearman([r["mults"] for r in mine], t),
                      "xla_heldout": xla_held.get(p),
                      **{f"xla_{k}": _spearman([r["xla"][k] for r in mine], t) if has_xla else None
                         for k in ("kernels", "bytes", "flops")}})
    return table, full


def _median(table, key):
    vals = [r[key] for r in table if r[key] is not None]
    return statistics.median(vals) if vals else None


def markdown(env: dict, table: list, model) -> str:
    coefs = ", ".join(f"{k} {v:.3g}" for k, v in model.coefficients.items() if v > 0)
    lines = [
        f"# Time model ({env['platform']}): rank correlation with measured time", "",
        f"- command: `{env['command']}`; {env['machine']}; JAX {env['jax']}; {env['started']}",
        *([f"- note: {env['note']}"] if env["note"] else []),
        f"- batch {model.batch}: `jax.jit(jax.vmap(J))`, orders compiled and timed round robin (median); "
        f"Spearman's rho over each program's orders between measured time and the held-out model (fitted on "
        f"the other half of the programs), the packaged model (fitted on all) and multiplications",
        f"- packaged model ({env['model_out']}), seconds per op / per entry per sample: {coefs}",
        "- rho retest: the two timing passes of the same compiled orders against each other, the most any model "
        "can reach (near 0: the orders tie within the timing noise)",
        "- anneal@time: the time of the order annealed under the time model stored when the run began, over the "
        "fastest of forward, reverse, Markowitz and the order annealed under multiplications (all 0.3 s, seed 0)",
        f"- median rho: retest {fmt(_median(table, 'retest'))}, held-out {fmt(_median(table, 'heldout'))}, packaged {fmt(_median(table, 'fitted'))}, "
        f"multiplications {fmt(_median(table, 'mults'))}; programs with held-out rho >= 0.9: "
        f"{sum(1 for r in table if (r['heldout'] or -1) >= 0.9)} of {len(table)}",
        "- XLA's view of each compiled program (`alphagrad.time_fit.program_features`), for comparison: rho of its "
        "entry kernels, bytes accessed and flops alone, and of a held-out model over them (kernels, bytes, flops, "
        f"transcendentals; fitted like the time model): median held-out {fmt(_median(table, 'xla_heldout'))}, "
        f"kernels {fmt(_median(table, 'xla_kernels'))}, bytes {fmt(_median(table, 'xla_bytes'))}, "
        f"flops {fmt(_median(table, 'xla_flops'))}; programs with XLA held-out rho >= 0.9: "
        f"{sum(1 for r in table if (r['xla_heldout'] or -1) >= 0.9)} of {len(table)}", "", "",
    ]
    rows = [[r["program"], r["orders"], f"{r['fastest_ms']:.3f}-{r['slowest_ms']:.3f}", fmt(r["retest"]),
             fmt(r["heldout"]), fmt(r["fitted"]), fmt(r["mults"]), fmt(r["xla_heldout"]), fmt(r["xla_kernels"]),
             fmt(r["xla_bytes"]), fmt(r["xla_flops"]), fmt(r["anneal_time_ratio"], 2)] for r in table]
    body = md_table(["program", "orders", "time ms", "rho retest", "rho held-out", "rho packaged", "rho mults",
                     "rho XLA held-out", "rho kernels", "rho bytes", "rho flops", "anneal@time"], rows)
    return "\n".join(lines) + body + "\n"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m eval.fit_time_model", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=None, help="report directory (default eval/results/time_model_<platform>)")
    p.add_argument("--model-out", default=None, help="model file (default: the packaged one of this platform)")
    p.add_argument("--quick", action="store_true", help="FitSettings.quick(): 6 small programs")
    p.add_argument("--batch", type=int, default=None)
    p.add_argument("--programs", default=None, help="comma-separated zoo example names")
    p.add_argument("--time-limit", type=float, default=None, help="seconds after which no program is started")
    p.add_argument("--rows", default=None, help="an earlier report.json: refit from its measurements")
    p.add_argument("--note", default="")
    return p


def main(argv=None) -> int:
    import jax

    from alphagrad import time_fit
    from alphagrad import time_model as tm

    p = parser()
    args = p.parse_args(argv)
    settings = time_fit.FitSettings.quick() if args.quick else time_fit.FitSettings()
    if args.batch is not None:
        settings = dataclasses.replace(settings, batch=args.batch)
    if args.time_limit is not None:
        settings = dataclasses.replace(settings, time_limit_s=args.time_limit)
    if args.programs:
        settings = dataclasses.replace(settings, programs=tuple(x for x in args.programs.split(",") if x))
    platform = jax.default_backend()
    model_path = os.path.abspath(args.model_out or tm.packaged_path(platform))
    env = {"platform": platform, "command": "python -m eval.fit_time_model " + shlex.join(
        argv if argv is not None else sys.argv[1:]), "machine": machine(), "jax": jax.__version__,
        "python": host.python_version(), "started": time.strftime("%Y-%m-%d %H:%M:%S"), "note": args.note,
        "model_out": display_path(model_path)}
    if args.rows:  # the measurements' environment, and the command that refitted them
        old = json.load(open(args.rows))
        rows, settings = old["rows"], dataclasses.replace(settings, batch=old["model"]["batch"])
        env = {**old["environment"], "model_out": env["model_out"],
               "refit": f"python -m eval.fit_time_model --rows {shlex.quote(display_path(os.path.abspath(args.rows)))}"}
    else:
        try:
            rows = time_fit.measure(settings, platform, log=lambda s: print(s, file=sys.stderr))
        except time_fit.FitError as e:
            print(f"{p.prog}: error: {e}; the stored model is unchanged", file=sys.stderr)
            return 1
    programs = list(dict.fromkeys(r["program"] for r in rows))
    table, model = evaluate(rows, programs, platform, settings.batch)
    model = dataclasses.replace(model, fit={"programs": programs, "orders": len(rows), "command": env["command"],
                                            "heldout_rho_median": _median(table, "heldout")})
    tm.save(model, model_path)
    out = args.out or os.path.join(REPO_ROOT, "eval", "results", f"time_model_{platform}")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "report.json"), "w") as f:
        json.dump({"environment": env, "model": model.to_json(), "programs": table, "rows": rows}, f, indent=None)
    text = markdown(env, table, model)
    with open(os.path.join(out, "report.md"), "w") as f:
        f.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
