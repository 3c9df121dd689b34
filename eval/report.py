"""The evaluation report: ``python -m eval`` (its CLI is :mod:`eval.__main__`).

:func:`run` evaluates every graph of a dataset split (``datasets.load_from_disk``) with the
methods of :mod:`eval.methods`: the classic orders (forward, reverse, Markowitz; always),
and those chosen: the exact optimum on small graphs, the network's greedy order
(zero-shot, held to ``zero_shot_budget``), and at each budget the agent, annealing, the
network-free search and the agent's schedule with network-free priors (the controls).
Annealing, the search and the zero-shot order are compiled by an untimed warm-up call per
graph first, as the agent's budget excludes compilation too.

Without a dataset (``data=None``, the CLI without ``--data``) it evaluates the examples
shipped in the package (:func:`eval.common.examples_dataset`): ``heldout`` holds the ten
published tasks, ``train`` and ``validation`` the rest of the zoo.

It writes, under ``out``: ``report.md``, ``report.json`` (raw numbers), CSV and Markdown
tables, PNG plots (:mod:`eval.plots`) and ``orders.jsonl`` (every order, for
reproduction). Every order is re-scored with :func:`alphagrad.cost`; a method that raises,
returns an invalid order or an order whose re-scored cost differs from the cost it
claimed (the dataset's record of it, else its own claim, else the evaluator's count)
becomes a failure row, and the evaluation goes on. Honesty checks: no held-out graph in
the training splits, the same seed and budgets for every method, budgets kept, no order
below the known optimum, and the Jacobian of each published task's cheapest order
against ``jax.jacrev``.
"""

from __future__ import annotations

import collections
import csv
import dataclasses
import datetime
import hashlib
import json
import math
import os
import platform
import sys
import time
import traceback

import numpy as np

from eval import plots
from eval.common import EXAMPLES_SOURCE, dataset_label, display_path, fmt, geomean, load_split, md_table
from eval.methods import BASELINES, BUDGETED, DEFAULT, METHODS, method_id

#: Families of the held-out split, in report order.
FAMILY_ORDER = ("published", "random_heldout", "large_random", "large_zoo_chained", "large_real")
#: float32 tolerances of the Jacobian check (as in tests/test_interpreter.py); ``atol`` is
#: scaled by max(1, max |jacrev|).
JAC_RTOL, JAC_ATOL = 2e-4, 2e-5
#: Splits a held-out graph must not occur in.
TRAINING_SPLITS = ("train", "validation")


@dataclasses.dataclass
class EvalConfig:
    """What :func:`run` evaluates (the CLI's options)."""

    out: str
    model: str | None = None
    data: str | None = None  # None: the examples shipped in alphagrad.examples
    split: str = "heldout"
    budgets: tuple = (5.0, 30.0, 60.0)
    limit: int | None = None
    families: tuple | None = None
    seed: int = 0
    jacobian_bench: bool = True
    train_data: tuple = ()
    methods: tuple = DEFAULT  # optional methods of eval.methods (the baselines always run)
    optimal_max: int = 16
    search_simulations: int = 8
    zero_shot_budget: float = 5.0
    extra: tuple = ()  # (kind, budget) runs beyond methods x budgets, e.g. (("anneal", 60.0),)
    jac_batches: tuple = (1, 512)
    jac_repeats: int = 50
    command: str = ""
    quiet: bool = False


def method_ids(config: EvalConfig) -> list[str]:
    """Every method column, in report order: the baselines, the other unbudgeted methods
    chosen, each budgeted method at every budget, then the extra runs."""
    ids = [n for n, m in METHODS.items() if not m.budgeted and (m.baseline or n in config.methods)]
    for kind in BUDGETED:
        if kind in config.methods:
            ids += [method_id(kind, b) for b in config.budgets]
    return ids + [m for m in (method_id(k, b) for k, b in config.extra) if m not in ids]


def _log(config: EvalConfig, msg: str) -> None:
    if not config.quiet:
        print(msg, file=sys.stderr, flush=True)


def _reason(e: BaseException) -> str:
    text = f"{type(e).__name__}: {e}".strip()
    return " ".join(text.split())[:500]


# --------------------------------------------------------------------------------------
# Loading.


def select_rows(ds, families, limit) -> tuple[list[dict], list[dict]]:
    """The rows to evaluate (dataset order, at most ``limit`` per family, families in
    :data:`FAMILY_ORDER` first) and failures for requested families without rows."""
    fams = ds["family"]
    present = sorted(set(fams), key=lambda f: (FAMILY_ORDER.index(f) if f in FAMILY_ORDER else 99, f))
    own_limit = {}  # "family:N" sets that family's limit
    for f in families or ():
        name, _, n = f.partition(":")
        own_limit[name] = int(n) if n else limit
    wanted = list(own_limit) if families else present
    failures = [{"stage": "dataset", "family": f, "reason": f"no rows of family {f!r} in the split "
                 f"(families present: {present})"} for f in wanted if f not in present]
    rows = []
    for fam in (f for f in present if f in wanted):
        idx = [i for i, f in enumerate(fams) if f == fam]
        n = own_limit.get(fam, limit)
        if n is not None:
            idx = idx[:n]
        rows += [ds[i] for i in idx]
    return rows, failures


def load_agent(model):
    import alphagrad

    return alphagrad.from_pretrained(model)


def params_digest(agent) -> str:
    """sha256 of the agent's parameters (leaf paths, shapes and bytes): identifies the
    weights whatever the source."""
    import jax

    h = hashlib.sha256()
    for path, leaf in jax.tree_util.tree_flatten_with_path(agent.params)[0]:
        a = np.asarray(leaf)
        h.update(jax.tree_util.keystr(path).encode())
        h.update(str(a.shape).encode() + str(a.dtype).encode())
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


# --------------------------------------------------------------------------------------
# Running the methods.


def _evaluator_cost(graph, order) -> int:
    from alphagrad.evaluator import Evaluator

    return int(Evaluator(graph, "exact").cost(order))


def _timed(fn):
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


class _Context:
    def __init__(self, config):
        self.config = config
        self.agent = None
        self.agent_error = None
        self.warmup: dict = {}  # (method, graph fingerprint) -> seconds of its untimed warm-up
        self.best_orders: dict = {}  # graph_hash -> (method, order) of the cheapest valid order

    def context(self) -> dict:
        """What the methods' runners may need (see :mod:`eval.methods`)."""
        return {"agent": self.agent, "max_intermediates": self.config.optimal_max,
                "simulations": self.config.search_simulations}


def _produce(method, graph, budget, ctx: _Context):
    """``(found, seconds, compile seconds)`` of one run: the method's untimed warm-up the
    first time it meets this graph, then the timed call (its own clock where it keeps one)."""
    if method.needs_model and ctx.agent is None:
        raise RuntimeError(f"model not loaded: {ctx.agent_error}")
    seed, context = ctx.config.seed, ctx.context()
    key = (method.name, graph.fingerprint)
    compile_s = 0.0
    if method.warmup is not None and key not in ctx.warmup:
        _, compile_s = _timed(lambda: method.warmup(graph, seed=seed, **context))
        ctx.warmup[key] = compile_s
    found, secs = _timed(lambda: method.run(graph, budget_s=budget, seed=seed, **context))
    return (found, secs if found.seconds is None else found.seconds,
            compile_s if found.compile_seconds is None else found.compile_seconds)


def _claim(method, row: dict, found, graph, order) -> tuple[int, str]:
    """The cost ``order`` must have and where that claim comes from: the dataset's record
    of the method's cost, else the method's own claim, else the evaluator's count."""
    recorded = row.get(method.dataset_cost) if method.dataset_cost else None
    if recorded is not None:
        return int(recorded), f"dataset {method.dataset_cost}"
    if found.cost is not None:
        return int(found.cost), "method"
    return _evaluator_cost(graph, order), "evaluator"


def evaluate_graph(row: dict, ctx: _Context) -> tuple[list[dict], dict]:
    """Every method on one dataset row: (records, orders by method id)."""
    import alphagrad
    from data_gen.dataset import row_to_graph

    config = ctx.config
    base = {k: row[k] for k in ("family", "name", "graph_hash", "num_vertices", "num_intermediates")}
    records, orders = [], {}
    try:
        graph = row_to_graph(row)
        if graph.fingerprint != row["graph_hash"]:
            raise ValueError(f"the rebuilt graph's fingerprint {graph.fingerprint} differs from graph_hash")
    except Exception as e:  # noqa: BLE001 - a broken row is a failure of every method
        for mid in method_ids(config):
            records.append({**base, "method": mid, "status": "failed", "reason": f"row_to_graph: {_reason(e)}"})
        return records, orders

    context = ctx.context()
    plan = [(m, None) for n, m in METHODS.items() if not m.budgeted and (m.baseline or n in config.methods)
            and (m.applies is None or m.applies(graph, **context))]
    runs = [(kind, b) for b in config.budgets for kind in BUDGETED if kind in config.methods]
    plan += [(METHODS[kind], b) for kind, b in runs + [run for run in config.extra if run not in runs]]

    for method, budget in plan:
        mid = method_id(method.name, budget)
        rec = {**base, "method": mid, "kind": method.name,
               "budget_s": config.zero_shot_budget if method.time_bound else budget,
               "seed": config.seed if method.seeded else None}
        try:
            found, secs, compile_s = _produce(method, graph, budget, ctx)
            order = [int(v) for v in found.order]
            claimed, source = _claim(method, row, found, graph, order)
            rec.update(call=found.call, claimed_cost=claimed, claim_source=source, seconds=round(float(secs), 4),
                       compile_seconds=round(float(compile_s), 4), **found.details)
            try:
                rescored = int(alphagrad.cost(graph, order))
            except Exception as e:  # noqa: BLE001 - an invalid order
                rec.update(status="failed", reason=f"re-scoring failed: {_reason(e)}")
            else:
                rec["cost"] = rescored
                if rescored != claimed:
                    rec.update(status="mismatch", reason=f"claimed {claimed} multiplications, "
                               f"alphagrad.cost gives {rescored}")
                else:
                    rec["status"] = "ok"
                    orders[mid] = order
        except Exception as e:  # noqa: BLE001 - a crashing method is a failure row
            rec.update(status="failed", reason=_reason(e))
            if not config.quiet:
                traceback.print_exc(limit=3, file=sys.stderr)
        records.append(rec)
        _log(config, f"  {mid:<14} {rec['status']:<8} "
                     + (f"{rec['cost']:>10} mults" if rec.get("status") == "ok" else rec.get("reason", ""))
                     + (f"  {rec['seconds']:.2f}s" if "seconds" in rec else ""))

    _add_ratios(records, row)
    return records, orders


def _add_ratios(records: list[dict], row: dict) -> None:
    """Reference costs of one graph, and every ok record's ratios to them."""
    ok = {r["method"]: r["cost"] for r in records if r.get("status") == "ok"}
    if all(k in ok for k in BASELINES):
        best, best_src = min(ok[k] for k in BASELINES), "re-scored"
    else:
        best, best_src = int(row["best_baseline"]), "dataset"
    if "optimal" in ok:
        opt, opt_src = ok["optimal"], "re-scored"
    elif row.get("cost_optimal") is not None:
        opt, opt_src = int(row["cost_optimal"]), "dataset"
    else:
        opt, opt_src = None, None
    for r in records:
        r.update(best_baseline=best, best_baseline_source=best_src, optimum=opt, optimum_source=opt_src)
        if r.get("status") == "ok":
            r["ratio_best"] = _ratio(r["cost"], best)
            r["ratio_opt"] = _ratio(r["cost"], opt) if opt is not None else None


def _ratio(cost, ref):
    if ref is None:
        return None
    if ref == 0:
        return 1.0 if cost == 0 else math.inf
    return cost / ref



# --------------------------------------------------------------------------------------
# Honesty checks.


def split_hashes(path: str, splits=TRAINING_SPLITS) -> dict[str, dict]:
    """``{split: {graph_hash: name}}`` of the given splits of a dataset directory (all rows of
    a single Dataset, as split ``"all"``)."""
    import datasets as hf

    d = hf.load_from_disk(path)
    parts = {"all": d} if isinstance(d, hf.Dataset) else {s: d[s] for s in splits if s in d}
    out = {}
    for s, ds in parts.items():
        names = ds["name"] if "name" in ds.column_names else [""] * len(ds)
        out[s] = dict(zip(ds["graph_hash"], names))
    return out


def leakage_check(evaluated: dict, sources: dict) -> dict:
    """Held-out hashes (``{hash: name}``) that occur in any training source
    (``{label: {hash: name}}``)."""
    hits = []
    for label, hashes in sources.items():
        for h, name in evaluated.items():
            if h in hashes:
                hits.append({"graph_hash": h, "name": name, "found_in": label, "name_there": hashes[h]})
    detail = (f"{len(evaluated)} evaluated-split hashes against "
              + (", ".join(f"{k} ({len(v)})" for k, v in sources.items()) or "no training splits"))
    if hits:
        detail += "; duplicates: " + "; ".join(f"{x['name']} ({x['graph_hash'][:12]}) in {x['found_in']}"
                                               for x in hits[:10])
    return {"check": "no held-out graph in train/validation", "status": "FAIL" if hits else "pass",
            "detail": detail, "duplicates": hits}


def _leakage(config, dd, ds) -> dict:
    evaluated = dict(zip(ds["graph_hash"], ds["name"]))
    sources, errors = {}, []
    for s in TRAINING_SPLITS:
        if s != config.split and s in dd:
            label = EXAMPLES_SOURCE if config.data is None else display_path(config.data)
            sources[f"{label}:{s}"] = dict(zip(dd[s]["graph_hash"], dd[s]["name"]))
    for path in config.train_data:
        try:
            for s, hashes in split_hashes(path).items():
                sources[f"{display_path(path)}:{s}"] = hashes
        except Exception as e:  # noqa: BLE001
            errors.append(f"--train-data {display_path(path)}: {_reason(e)}")
    result = leakage_check(evaluated, sources)
    if errors:
        result["status"] = "FAIL"
        result["detail"] += "; could not read " + "; ".join(errors)
    return result


def _consistency_checks(records: list[dict], config: EvalConfig) -> list[dict]:
    checks = []
    scored = [r for r in records if "claimed_cost" in r]
    bad = [r for r in records if r.get("status") == "mismatch"]
    invalid = [r for r in records if str(r.get("reason", "")).startswith("re-scoring failed")]
    checks.append({
        "check": "every order re-scored by alphagrad.cost equals the cost its method claimed",
        "status": "FAIL" if bad or invalid else ("pass" if scored else "n/a"),
        "detail": f"{len(scored) - len(bad) - len(invalid)} of {len(scored)} orders match"
        + "".join(f"; {r['name']} {r['method']}: {r['reason']}" for r in (bad + invalid)[:10])})
    budgeted = [r for r in records if r.get("kind") in BUDGETED]
    extra = set(config.extra)
    wrong = [r for r in budgeted if r.get("seed") != config.seed
             or (r.get("budget_s") not in config.budgets and (r.get("kind"), r.get("budget_s")) not in extra)]
    kinds = [k for k in BUDGETED if k in config.methods]
    missing = []
    for gh in dict.fromkeys(r["graph_hash"] for r in records):
        have = {(r["kind"], r["budget_s"]) for r in budgeted if r["graph_hash"] == gh}
        for b in config.budgets:
            for k in kinds:
                if (k, b) not in have:
                    missing.append(f"{gh[:12]} {method_id(k, b)}")
    time_bound = [r for r in records if r.get("kind") in METHODS and METHODS[r["kind"]].time_bound]
    zs_wrong = [r for r in time_bound if r.get("seed") != config.seed]
    checks.append({
        "check": "same seed and budgets for every method",
        "status": "FAIL" if wrong or missing or zs_wrong else ("pass" if budgeted or kinds == [] else "n/a"),
        "detail": f"seed {config.seed}; budgets {', '.join(f'{b:g} s' for b in config.budgets)} for "
                  f"{', '.join(kinds) or 'no budgeted method'} ({len(budgeted)} runs)"
                  + (f"; also {', '.join(method_id(k, b) for k, b in config.extra)}" if config.extra else "")
                  + (f"; wrong seed/budget: {len(wrong) + len(zs_wrong)}" if wrong or zs_wrong else "")
                  + (f"; missing runs: {', '.join(missing[:10])}" if missing else "")})
    below = [r for r in records if r.get("status") == "ok" and r.get("optimum") is not None
             and r["cost"] < r["optimum"]]
    timed = budgeted + time_bound
    over = [r for r in timed if r.get("seconds") is not None and r["seconds"] > 1.2 * r["budget_s"] + 0.5]
    checks.append({
        "check": "budgeted methods (and zero-shot) stopped within their budget (+20% + 0.5 s)",
        "status": "WARN" if over else ("pass" if timed else "n/a"),
        "detail": f"{len(timed) - len(over)} of {len(timed)} runs"
        + "".join(f"; {r['name']} {r['method']}: {r['seconds']:.1f} s" for r in over[:10])
        + ("; the agent's first batch of games always runs, and a batch expected to fit may not" if over else "")})
    with_opt = {r["graph_hash"] for r in records if r.get("optimum") is not None}
    checks.append({
        "check": "no order is cheaper than the known optimum",
        "status": "FAIL" if below else ("pass" if with_opt else "n/a"),
        "detail": f"{len(with_opt)} graphs with a known optimum"
        + "".join(f"; {r['name']} {r['method']}: {r['cost']} < {r['optimum']}" for r in below[:10])})
    return checks


def jacobian_check(name: str, graph_hash: str, order, method: str) -> dict:
    """The Jacobian of ``order`` on the published task ``name`` against ``jax.jacrev``."""
    import jax

    import alphagrad

    ex = alphagrad.examples.get(name)
    graph = alphagrad.trace(ex.fn, *ex.args)
    res = {"task": name, "method": method, "cost": None}
    if graph.fingerprint != graph_hash:
        return {**res, "status": "FAIL", "detail": "tracing the example gives another graph than the "
                "dataset's (different JAX version?); the order cannot be applied"}
    res["cost"] = int(alphagrad.cost(graph, order))
    argnums = tuple(range(len(ex.args)))
    got = alphagrad.jacobian(ex.fn, order=order, argnums=argnums)(*ex.args)
    want = jax.jacrev(ex.fn, argnums=argnums)(*ex.args)
    g_leaves, g_tree = jax.tree_util.tree_flatten(got)
    w_leaves, w_tree = jax.tree_util.tree_flatten(want)
    if g_tree != w_tree:
        return {**res, "status": "FAIL", "detail": f"output structure {g_tree} differs from jacrev's {w_tree}"}
    err = 0.0
    for g, w in zip(g_leaves, w_leaves):
        g, w = np.asarray(g, np.float64), np.asarray(w, np.float64)
        scale = max(1.0, float(np.max(np.abs(w)))) if w.size else 1.0
        try:
            np.testing.assert_allclose(g, w, rtol=JAC_RTOL, atol=JAC_ATOL * scale)
        except AssertionError as e:
            return {**res, "status": "FAIL", "detail": " ".join(str(e).split())[:300]}
        if w.size:
            err = max(err, float(np.max(np.abs(g - w))))
    return {**res, "status": "pass", "detail": f"max abs error {err:.3g} ({len(w_leaves)} blocks)"}


# --------------------------------------------------------------------------------------
# Jacobian runtime (eval/bench_jacobian.py's timing helpers).


def jacobian_runtime(name: str, order, batches=(1, 512), repeats: int = 50) -> list[dict]:
    """Median seconds of ``jax.jit(jax.vmap(J))`` for jacfwd, jacrev and
    ``alphagrad.jacobian`` with the forward, reverse, Markowitz and ``order`` orders, as in
    ``python -m eval.bench_jacobian``; one dict per batch size."""
    import jax

    import alphagrad
    from eval.bench_jacobian import _batch, _median_times

    ex = alphagrad.examples.get(name)
    argnums = tuple(range(len(ex.args)))
    fns = {
        "jacfwd": jax.jacfwd(ex.fn, argnums=argnums),
        "jacrev": jax.jacrev(ex.fn, argnums=argnums),
        "fwd": alphagrad.jacobian(ex.fn, "fwd", argnums=argnums),
        "rev": alphagrad.jacobian(ex.fn, "rev", argnums=argnums),
        "markowitz": alphagrad.jacobian(ex.fn, "markowitz", argnums=argnums),
        "best": alphagrad.jacobian(ex.fn, list(order), argnums=argnums),
    }
    out = []
    for batch in batches:
        inputs = _batch(ex.args, batch)
        times = _median_times({k: jax.jit(jax.vmap(fn)) for k, fn in fns.items()}, inputs, repeats)
        ref = min(times["jacfwd"], times["jacrev"])
        out.append({"task": name, "batch": int(batch), "repeats": int(repeats),
                    "ms": {k: round(t * 1e3, 4) for k, t in times.items()},
                    "ratio": {k: round(t / ref, 4) for k, t in times.items()}})
    return out


# --------------------------------------------------------------------------------------
# Summaries.


def summarize(records: list[dict], methods: list[str]) -> list[dict]:
    """Geometric means of the ratios per family (and over all graphs) and method."""
    fams = list(dict.fromkeys(r["family"] for r in records))
    out = []
    for fam in fams + (["all"] if fams else []):
        rs = [r for r in records if fam == "all" or r["family"] == fam]
        graphs = len({r["graph_hash"] for r in rs})
        for m in methods:
            mr = [r for r in rs if r["method"] == m]
            if not mr:
                continue
            ok = [r for r in mr if r.get("status") == "ok"]
            opt = [r["ratio_opt"] for r in ok if r.get("ratio_opt") is not None]
            secs = [r["seconds"] for r in ok if r.get("seconds") is not None]
            out.append({
                "family": fam, "method": m, "graphs": graphs, "runs": len(mr), "ok": len(ok),
                "failed": len(mr) - len(ok),
                "gm_ratio_best": _round(geomean([r["ratio_best"] for r in ok])),
                "gm_ratio_opt": _round(geomean(opt)), "with_optimum": len(opt),
                "median_seconds": _round(float(np.median(secs)), 3) if secs else None,
                "beats_best_baseline": sum(1 for r in ok if r["ratio_best"] < 1),
            })
    return out


def _round(x, nd=4):
    return None if x is None else round(float(x), nd)


def published_comparison(records: list[dict], methods: list[str]) -> list[dict]:
    from eval.published import PUBLISHED

    rows = []
    pub_recs = [r for r in records if r["family"] == "published"]
    for name in dict.fromkeys(r["name"] for r in pub_recs):
        rs = {r["method"]: r for r in pub_recs if r["name"] == name}
        any_r = next(iter(rs.values()))
        row = {"task": name, "intermediates": any_r["num_intermediates"],
               "best_baseline": any_r.get("best_baseline"),
               "costs": {m: rs[m].get("cost") if rs.get(m, {}).get("status") == "ok" else None for m in methods},
               "ratios": {m: _round(rs[m].get("ratio_best")) if rs.get(m, {}).get("status") == "ok" else None
                          for m in methods}}
        pub = PUBLISHED.get(name)
        if pub:
            inter, fwd, rev, mk, ppo, az = pub
            best = min(fwd, rev, mk)
            row["published"] = {"intermediates": inter, "forward": fwd, "reverse": rev, "markowitz": mk,
                                "ppo": ppo, "alphazero": az, "best_baseline": best,
                                "ppo_ratio": _round(ppo / best), "alphazero_ratio": _round(az / best)}
        else:
            row["published"] = None
        rows.append(row)
    return rows


def _best_ok(records, graph_hash):
    ok = [r for r in records if r["graph_hash"] == graph_hash and r.get("status") == "ok"]
    return min(ok, key=lambda r: (r["cost"], r["method"] in BASELINES)) if ok else None  # ties: not a baseline


# --------------------------------------------------------------------------------------
# Writing.


def _write_csv(path, header, rows):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows([["" if v is None else v for v in r] for r in rows])


def _cell(r):
    if r is None:
        return "-"
    if r.get("status") != "ok":
        return f"failed: {r.get('reason', r.get('status'))}"[:80]
    return f"{r['cost']} ({fmt(r['ratio_best'])})"


def tables(report: dict) -> dict:
    """Every table of the report as ``{name: (header, rows)}``."""
    methods = report["methods"]
    recs = report["records"]
    out = {}
    long_cols = ["family", "name", "graph_hash", "num_vertices", "num_intermediates", "method", "budget_s", "seed",
                 "status", "cost", "claimed_cost", "best_baseline", "optimum", "ratio_best", "ratio_opt", "seconds",
                 "compile_seconds", "found_by", "call", "reason"]
    out["per_graph_long"] = (long_cols, [[r.get(c) for c in long_cols] for r in recs])
    graphs = list(dict.fromkeys(r["graph_hash"] for r in recs))
    by = {(r["graph_hash"], r["method"]): r for r in recs}
    first = {r["graph_hash"]: r for r in reversed(recs)}
    head = ["family", "name", "intermediates", "optimum"] + methods
    rows = []
    for gh in graphs:
        f = first[gh]
        rows.append([f["family"], f["name"], f["num_intermediates"], fmt(f.get("optimum"))]
                    + [_cell(by.get((gh, m))) for m in methods])
    out["per_graph"] = (head, rows)
    secs = []
    for gh in graphs:
        f = first[gh]
        secs.append([f["family"], f["name"], f["num_intermediates"]]
                    + [(fmt(by[(gh, m)].get("seconds"), 2)
                        + (f" (+{by[(gh, m)]['compile_seconds']:.1f} compile)"
                           if by[(gh, m)].get("compile_seconds") else "")) if (gh, m) in by and
                       by[(gh, m)].get("seconds") is not None else "-" for m in methods])
    out["seconds"] = (["family", "name", "intermediates"] + methods, secs)
    ratio_opt = [[first[gh]["family"], first[gh]["name"], first[gh]["num_intermediates"],
                  fmt(first[gh].get("optimum"))]
                 + [fmt(by[(gh, m)].get("ratio_opt")) if (gh, m) in by else "-" for m in methods]
                 for gh in graphs if first[gh].get("optimum") is not None]
    out["ratio_to_optimum"] = (head, ratio_opt)
    s_head = ["family", "method", "graphs", "ok", "failed", "geomean / best baseline", "beats best baseline",
              "geomean / optimum (graphs)", "median seconds"]
    out["summary"] = (s_head, [[s["family"], s["method"], s["graphs"], s["ok"], s["failed"],
                                fmt(s["gm_ratio_best"]), s["beats_best_baseline"],
                                f"{fmt(s['gm_ratio_opt'])} ({s['with_optimum']})", fmt(s["median_seconds"], 2)]
                               for s in report["summary"]])
    ours = [m for m in methods if m not in BASELINES  # (methods without a result on any task left out)
            and any(p["ratios"].get(m) is not None for p in report["published"])]
    p_head = (["task", "intermediates (pub.)", "fwd / rev / Markowitz (pub.)", "best baseline (pub.)"]
              + [f"{m} / best" for m in ours] + ["PPO / best (pub.)", "AlphaZero / best (pub.)"])
    p_rows = []
    for p in report["published"]:
        pub = p["published"]
        c = p["costs"]
        base = " / ".join(fmt(c.get(k)) for k in BASELINES)
        if pub:
            base += f" ({pub['forward']} / {pub['reverse']} / {pub['markowitz']})"
        p_rows.append([p["task"], f"{p['intermediates']} ({pub['intermediates'] if pub else 'n/a'})", base,
                       f"{fmt(p['best_baseline'])} ({pub['best_baseline'] if pub else 'n/a'})"]
                      + [f"{fmt(p['ratios'].get(m))} ({fmt(c.get(m))})" for m in ours]
                      + [fmt(pub["ppo_ratio"]) if pub else "n/a", fmt(pub["alphazero_ratio"]) if pub else "n/a"])
    if report["published"]:
        gm = ["geometric mean", "", "", ""] + [fmt(geomean([p["ratios"].get(m) for p in report["published"]]))
                                               for m in ours]
        gm += [fmt(geomean([p["published"]["ppo_ratio"] for p in report["published"] if p["published"]])),
               fmt(geomean([p["published"]["alphazero_ratio"] for p in report["published"] if p["published"]]))]
        p_rows.append(gm)
    out["published"] = (p_head, p_rows)
    j_cols = ["jacfwd", "jacrev", "fwd", "rev", "markowitz", "best"]
    out["jacobian_runtime"] = (["task", "batch"] + j_cols + ["best order (method, multiplications)"],
                               [[j["task"], j["batch"]] + [f"{j['ms'][k]:.3f} ms ({j['ratio'][k]:.2f}x)"
                                                           for k in j_cols]
                                + [f"{j.get('method')}, {j.get('cost')}"] for j in report["jacobian_runtime"]])
    out["failures"] = (["stage", "family", "name", "method", "reason"],
                       [[f.get("stage", ""), f.get("family", ""), f.get("name", ""), f.get("method", ""), f["reason"]]
                        for f in report["failures"]])
    out["checks"] = (["check", "status", "detail"], [[c["check"], c["status"], c["detail"]] for c in report["checks"]])
    found = collections.Counter((r["method"], r["found_by"]) for r in recs if r.get("status") == "ok" and r.get("found_by"))
    stages = sorted({st for _, st in found})
    out["found_by"] = (["method"] + stages, [[m] + [found.get((m, st), 0) for st in stages] for m in methods
                                             if any((m, st) in found for st in stages)])
    return out


def render_markdown(report: dict, tabs: dict) -> str:
    env, cfg = report["environment"], report["config"]
    L = ["# alphagrad evaluation report", "",
         f"Produced by `{report['command']}` ({report['started']}, {report['wall_seconds']:.0f} s).", "",
         f"* model: {report['model']['id']}" + (f", parameters sha256 `{report['model']['params_sha256'][:16]}`"
                                               if report["model"].get("params_sha256") else "")
         + (f" ({report['model']['error']})" if report["model"].get("error") else ""),
         f"* dataset: `{dataset_label(cfg['data'])}`, split `{cfg['split']}`: {report['dataset'].get('rows_in_split', 'n/a')} rows, "
         f"{report['dataset']['rows_evaluated']} evaluated"
         + (f" (at most {cfg['limit']} per family)" if cfg["limit"] is not None else "")
         + (f"; families {', '.join(cfg['families'])}" if cfg["families"] else "")
         + (" (the examples shipped in the package, split as `python -m data_gen build` splits them: "
            "heldout = the published tasks, train/validation = the rest of the zoo, which a dataset built "
            "with the default `--zoo all` trains on)" if cfg["data"] is None else ""),
         f"* seed {cfg['seed']}; budgets {', '.join(f'{b:g} s' for b in cfg['budgets'])}; methods "
         f"{', '.join(report['methods'])}; network-free search with {cfg['search_simulations']} simulations "
         f"per move and the uniform prior",
         f"* alphagrad {env['alphagrad']}, JAX {env['jax']} ({env['backend']}: {env['devices']}), Python "
         f"{env['python']}, {env['platform']}, {env['cpus']} CPUs", "",
         "Multiplications are counted by `alphagrad.cost` (exact convention). Ratios are to the best "
         "baseline, min(forward, reverse, Markowitz) of the same graph, and to the exact optimum where "
         "known. Seconds are wall time of the call, except the agent's: the `seconds` it reports, "
         "which leave out the compilation it measures (shown as `+N compile`). Annealing and the "
         "network-free search are compiled by an untimed warm-up call per graph (shown the same "
         "way); the baselines' times include JAX compilation.", "",
         "## Honesty checks", "", md_table(*tabs["checks"]), ""]
    if report["jacobian_checks"]:
        L += ["Jacobian of each published task's cheapest order against `jax.jacrev` "
              f"(float32, rtol {JAC_RTOL:g}, atol {JAC_ATOL:g} x max(1, max |J|)):", "",
              md_table(["task", "order (method)", "multiplications", "status", "detail"],
                       [[j["task"], j["method"], fmt(j.get("cost")), j["status"], j["detail"]]
                        for j in report["jacobian_checks"]]), ""]
    L += ["## Summary", "", "Geometric means over the graphs where the method succeeded "
          "(`ok` of `graphs`); `beats best baseline` counts graphs with a ratio below 1.", "",
          md_table(*tabs["summary"]) if report["summary"] else "Nothing was evaluated.", ""]
    if report["published"]:
        L += ["## Published tasks", "",
              "Our ratios (multiplications in parentheses) are to our best baseline on our graph; the "
              "published ones (Lohoff & Neftci, NeurIPS 2024; `eval/published.py`) to the published best "
              "baseline on the published graph, so the ratios compare although graphs and cost models "
              "differ.", "", md_table(*tabs["published"]), ""]
    L += ["## Per graph", "", "Multiplications (ratio to the best baseline); files `per_graph.csv` "
          "(wide) and `per_graph_long.csv` (one row per graph and method).", "",
          md_table(*tabs["per_graph"]) if tabs["per_graph"][1] else "No graph evaluated.", ""]
    if tabs["ratio_to_optimum"][1]:
        L += ["### Ratio to the optimum", "", md_table(*tabs["ratio_to_optimum"]), ""]
    if tabs["seconds"][1]:
        L += ["### Seconds", "", md_table(*tabs["seconds"]), ""]
    if tabs["found_by"][1]:
        L += ["### Which stage found the order", "", "Graphs per method and stage (`OrderResult.method`; "
              "\"anneal from the network's order\": a chain that took the network's order late; for a control, "
              "\"network\" is its prior's player).", "",
              md_table(*tabs["found_by"]), ""]
    L += ["## Failures", ""]
    L += [md_table(*tabs["failures"]), ""] if report["failures"] else ["None.", ""]
    L += ["## Jacobian runtime", ""]
    if report["jacobian_runtime"]:
        L += [f"Median of `jax.jit(jax.vmap(J))` per batch ({cfg['jac_repeats']} repeats, round-robin, "
              "`eval/bench_jacobian.py`'s timing); ratio to min(jacfwd, jacrev); `best` = the cheapest "
              "order of this evaluation.", "", md_table(*tabs["jacobian_runtime"]), ""]
    else:
        L += [report.get("jacobian_runtime_note", "Not run."), ""]
    L += ["## Plots", ""]
    L += [f"![{p}]({p})" for p in report["plots"]] or ["None."]
    L += [""]
    return "\n".join(L)


def environment() -> dict:
    import jax

    import alphagrad

    try:
        devices = ", ".join(str(d) for d in jax.devices())
        backend = jax.default_backend()
    except Exception as e:  # noqa: BLE001
        devices, backend = _reason(e), "unknown"
    return {"alphagrad": alphagrad.__version__, "jax": jax.__version__, "backend": backend, "devices": devices,
            "python": platform.python_version(), "platform": platform.platform(), "cpus": os.cpu_count()}


def write_report(report: dict, out: str) -> None:
    os.makedirs(out, exist_ok=True)
    tabs = tables(report)
    for name in ("per_graph", "per_graph_long", "summary", "published", "jacobian_runtime", "failures"):
        _write_csv(os.path.join(out, f"{name}.csv"), *tabs[name])
        if name != "per_graph_long":
            with open(os.path.join(out, f"{name}.md"), "w") as f:
                f.write(md_table(*tabs[name]) + "\n")
    report["plots"] = plots.make_all(report, os.path.join(out, "plots"))
    report["plots"] = [os.path.relpath(p, out) for p in report["plots"]]
    with open(os.path.join(out, "report.json"), "w") as f:
        json.dump(_jsonable(report), f, indent=1, default=_json_default, allow_nan=False)
    with open(os.path.join(out, "report.md"), "w") as f:
        f.write(render_markdown(report, tabs))


def _json_default(x):
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (np.floating,)):
        return float(x)
    return str(x)


def _jsonable(x):
    """A copy of ``x`` with infinite ratios (a zero best baseline) as "inf": JSON has no
    infinity."""
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    return x


# --------------------------------------------------------------------------------------
# The run.


def run(config: EvalConfig, agent=None) -> tuple[dict, int]:
    """Evaluates, writes everything under ``config.out``; returns (report, exit code):
    0 when at least one method gave a valid order on one graph, else 1. ``agent``: the
    model of ``config.model``, if the caller loaded it (else it is loaded here when a
    method needs it, and a load error fails that method's rows)."""
    t0 = time.perf_counter()
    os.makedirs(config.out, exist_ok=True)
    started = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    ctx = _Context(config)
    failures, checks, records = [], [], []
    dataset_info = {"path": display_path(config.data), "source": dataset_label(config.data),
                    "split": config.split, "rows_evaluated": 0}
    model_info = {"id": config.model if config.model else "bundled (alphagrad/pretrained, "
                  "alphagrad.from_pretrained())"}
    methods = method_ids(config)

    rows = []
    try:
        dd, ds = load_split(config.data, config.split)
        dataset_info["rows_in_split"] = len(ds)
        dataset_info["families_in_split"] = {str(f): int(c) for f, c in
                                             zip(*np.unique(ds["family"], return_counts=True))} if len(ds) else {}
        if len(ds) == 0:
            raise ValueError(f"split {config.split!r} of {config.data!r} is empty")
        rows, fam_failures = select_rows(ds, config.families, config.limit)
        failures += fam_failures
        checks.append(_leakage(config, dd, ds))
    except Exception as e:  # noqa: BLE001 - a missing dataset still gives a report
        failures.append({"stage": "dataset", "reason": _reason(e)})
        checks.append({"check": "no held-out graph in train/validation", "status": "n/a",
                       "detail": "no dataset", "duplicates": []})
    dataset_info["rows_evaluated"] = len(rows)
    dataset_info["families_evaluated"] = {f: sum(r["family"] == f for r in rows)
                                          for f in dict.fromkeys(r["family"] for r in rows)}

    if rows and any(METHODS[k].needs_model for k in config.methods):
        try:
            ctx.agent = agent if agent is not None else load_agent(config.model)
            model_info["params_sha256"] = params_digest(ctx.agent)
            model_info["config"] = ctx.agent.config
        except Exception as e:  # noqa: BLE001 - a missing model fails the agent's rows only
            ctx.agent_error = _reason(e)
            model_info["error"] = ctx.agent_error
            failures.append({"stage": "model", "reason": ctx.agent_error})

    orders_path = os.path.join(config.out, "orders.jsonl")
    with open(orders_path, "w") as orders_file:
        for i, row in enumerate(rows):
            _log(config, f"[{i + 1}/{len(rows)}] {row['family']} {row['name']} "
                         f"({row['num_intermediates']} intermediates)")
            recs, orders = evaluate_graph(row, ctx)
            records += recs
            for mid, order in orders.items():
                orders_file.write(json.dumps({"graph_hash": row["graph_hash"], "name": row["name"],
                                              "method": mid, "order": order}) + "\n")
            orders_file.flush()
            best = _best_ok(recs, row["graph_hash"])
            if best is not None:
                ctx.best_orders[row["graph_hash"]] = (best["method"], orders[best["method"]])
    failures += [{"stage": "method", "family": r["family"], "name": r["name"], "method": r["method"],
                  "reason": r.get("reason", r["status"])} for r in records if r.get("status") != "ok"]
    checks += _consistency_checks(records, config)

    best_orders = ctx.best_orders
    jac_checks = []
    for row in (r for r in rows if r["family"] == "published"):
        if row["graph_hash"] not in best_orders:
            continue
        method, order = best_orders[row["graph_hash"]]
        try:
            jac_checks.append(jacobian_check(row["name"], row["graph_hash"], order, method))
        except Exception as e:  # noqa: BLE001
            jac_checks.append({"task": row["name"], "method": method, "status": "FAIL", "detail": _reason(e)})
    if jac_checks:
        bad = [j for j in jac_checks if j["status"] != "pass"]
        checks.append({"check": "Jacobian of each published task's cheapest order equals jax.jacrev",
                       "status": "FAIL" if bad else "pass",
                       "detail": f"{len(jac_checks) - len(bad)} of {len(jac_checks)} tasks match"
                       + "".join(f"; {j['task']}: {j['detail']}" for j in bad)})
    else:
        checks.append({"check": "Jacobian of each published task's cheapest order equals jax.jacrev",
                       "status": "n/a", "detail": "no published task evaluated"})

    from eval.bench_jacobian import TASKS

    jac_runtime, jac_note = [], None
    if not config.jacobian_bench:
        jac_note = "Skipped (`--no-jacobian-bench`)."
    else:
        tasks = [r for r in rows if r["family"] == "published" and r["name"] in TASKS
                 and r["graph_hash"] in best_orders]
        if not tasks:
            jac_note = f"No evaluated published task among {', '.join(TASKS)}."
        for row in tasks:
            method, order = best_orders[row["graph_hash"]]
            _log(config, f"jacobian runtime: {row['name']}")
            try:
                for j in jacobian_runtime(row["name"], order, config.jac_batches, config.jac_repeats):
                    jac_runtime.append({**j, "method": method, "cost": _cost_of(records, row, method)})
            except Exception as e:  # noqa: BLE001
                failures.append({"stage": "jacobian runtime", "name": row["name"], "reason": _reason(e)})

    summary = summarize(records, methods)
    published = published_comparison(records, methods)
    report = {
        "command": config.command or "python -m eval (called from Python)",
        "started": started,
        "wall_seconds": round(time.perf_counter() - t0, 1),
        "config": {**dataclasses.asdict(config), "budgets": list(config.budgets),
                   "out": display_path(config.out), "data": display_path(config.data),
                   "model": display_path(config.model),
                   "extra": [method_id(k, b) for k, b in config.extra],
                   "families": list(config.families) if config.families else None,
                   "train_data": [display_path(p) for p in config.train_data], "methods": list(config.methods),
                   "jac_batches": list(config.jac_batches)},
        "environment": environment(),
        "model": model_info,
        "dataset": dataset_info,
        "methods": methods,
        "checks": checks,
        "jacobian_checks": jac_checks,
        "records": records,
        "summary": summary,
        "published": published,
        "jacobian_runtime": jac_runtime,
        "failures": failures,
        "evaluated_ok": sum(1 for r in records if r.get("status") == "ok"),
    }
    if jac_note:
        report["jacobian_runtime_note"] = jac_note
    write_report(report, config.out)
    _log(config, f"wrote {os.path.join(config.out, 'report.md')} ({report['evaluated_ok']} valid orders, "
                 f"{len(failures)} failures)")
    return report, 0 if report["evaluated_ok"] else 1


def _cost_of(records, row, method):
    for r in records:
        if r["graph_hash"] == row["graph_hash"] and r["method"] == method:
            return r.get("cost")
    return None

