"""A developer's command: the targets of issues 13 (the network alone) and 14 (the agent),
both closed, and issue 63's portfolio (the agent never loses what annealing alone finds,
and more budget never gives a dearer order), judged on the records of ``python -m eval``
runs. The report itself no longer shows them; the generated results blocks ``xl-seeds``,
``random-seeds`` and ``portfolio-xl`` are made by this command.

Each target is ``met``, ``missed`` or ``not measured`` (the run lacks the methods,
budgets or graphs it needs), with the number it was judged on. Nothing here is typed in
by hand: :func:`evaluate` reads the records :func:`eval.report.run` wrote.

    python -m eval.targets REPORT_DIR [REPORT_DIR ...] [--readme README.md --block NAME]

judges the targets on several runs of ``python -m eval`` together (the same model, data
and split at different ``--seed``): a method's cost at one seed is set against the other
methods' at the same seed, graph by graph, and the geometric means run over every
(graph, seed) pair, so a target is not met or missed by one seed's luck. It prints the
targets per seed and over all of them, and with ``--readme`` puts that table in the
file's block ``NAME``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from eval.common import geomean, load_report, md_table, put_block
from eval.readme_results import markers

#: Issue 13: the network's greedy order alone (zero-shot), geometric mean / best baseline.
ZERO_SHOT_BOUNDS = (("published", 0.92), ("random_heldout", 0.90), ("large", 0.95))
#: Issue 13: seconds per greedy order (compilation excluded) by size (intermediates).
ZERO_SHOT_SECONDS = (((400, 600), 0.3), ((1500, 2500), 2.0))
#: Graphs of these sizes (intermediates) are "large"; issue 14 wants at least
#: LARGE_GRAPHS of them.
LARGE, LARGE_GRAPHS = (300, 2000), 12
#: Issue 14 on large graphs: agent@B / anneal@B and agent@B / the best control@B
#: (geometric means over graphs), at every budget B the run has.
VS_ANNEAL, VS_CONTROLS = 0.95, 0.97
#: The agent's schedule with a network-free prior, and annealing alone.
CONTROLS = ("uniform-prior", "markowitz-prior", "random-prior", "anneal")
#: Issue 14 on the published tasks: never worse than anneal at budgets >= MIN_BUDGET;
#: agent@PUBLISHED_BUDGET geomean / best baseline <= PUBLISHED_BOUND.
MIN_BUDGET, PUBLISHED_BUDGET, PUBLISHED_BOUND = 0.5, 1.0, 0.87
#: Issue 14 on the random held-out family: agent@RANDOM_BUDGET <= anneal@RANDOM_BUDGET.
RANDOM_BUDGET = 5.0
#: Issue 63's portfolio: the agent (with either annealing schedule) at most this share
#: dearer than anneal@B on every graph, budget and seed; and for every budgeted method,
#: whether a longer budget ever gave a dearer order (the agent's a target, the rest info).
PORTFOLIO_SLACK = 0.01
AGENTS = ("agent", "agent-budget")
ANYTIME = AGENTS + ("anneal", "anneal-nested")


def _ok(records, **match):
    return [r for r in records if r.get("status") == "ok" and all(r.get(k) == v for k, v in match.items())]


def _row(target, measured, met, detail):
    status = "not measured" if met is None else ("met" if met else "missed")
    return {"target": target, "measured": measured, "status": status, "detail": detail}


def _large(records):
    lo, hi = LARGE
    return [r for r in records if lo <= r.get("num_intermediates", 0) <= hi]


def _pair(r):
    """What a comparison pairs records on: the graph and the seed (one seed per run)."""
    return r["graph_hash"], r.get("seed")


def _graphs(records) -> int:
    return len({r["graph_hash"] for r in records})


def _count(records) -> str:
    """``N graphs``, and the seeds where the records hold more than one."""
    seeds = {r.get("seed") for r in records}
    return f"{_graphs(records)} graphs" + (f" x {len(seeds)} seeds" if len(seeds) > 1 else "")


def _versus(records, kind: str, others, budget: float):
    """Geometric mean over (graph, seed) pairs of ``kind``'s cost / the cheapest of
    ``others``' costs (one kind or several) on the same graph at the same seed, all at
    ``budget``, and ``kind``'s records that had such a pair."""
    others = (others,) if isinstance(others, str) else others
    theirs = {}
    for other in others:
        for r in _ok(records, kind=other, budget_s=budget):
            theirs[_pair(r)] = min(theirs.get(_pair(r), r["cost"]), r["cost"])
    ours = [r for r in _ok(records, kind=kind, budget_s=budget) if _pair(r) in theirs]
    return geomean([r["cost"] / theirs[_pair(r)] for r in ours if theirs[_pair(r)]]), ours


def _rounded(x):
    return None if x is None else round(x, 4)


def evaluate(records: list[dict]) -> list[dict]:
    """Every target, judged on ``records`` (``report.json``'s ``records``)."""
    out, large = [], _large(records)
    for fam, bound in ZERO_SHOT_BOUNDS:
        rs = _ok(large, kind="zero-shot") if fam == "large" else _ok(records, kind="zero-shot", family=fam)
        gm = geomean([r["ratio_best"] for r in rs])
        where = f"graphs of {LARGE[0]}-{LARGE[1]} intermediates" if fam == "large" else fam
        out.append(_row(f"13: zero-shot geomean / best baseline on {where} <= {bound:g}", _rounded(gm),
                        None if gm is None else gm <= bound, f"{_graphs(rs)} graphs"))
    for (lo, hi), bound in ZERO_SHOT_SECONDS:
        rs = [r for r in _ok(records, kind="zero-shot") if lo <= r["num_intermediates"] <= hi]
        secs = [r["seconds"] for r in rs]
        out.append(_row(f"13: zero-shot <= {bound:g} s on graphs of {lo}-{hi} intermediates (compile excluded)",
                        _rounded(max(secs)) if secs else None, max(secs) <= bound if secs else None,
                        f"{_graphs(rs)} graphs" if secs else "no such graph"))

    for b in sorted({r["budget_s"] for r in _ok(large, kind="agent")}):
        for others, bound, what in ((("anneal",), VS_ANNEAL, f"anneal@{b:g}s"),
                                    (CONTROLS, VS_CONTROLS, f"the best control@{b:g}s ({', '.join(CONTROLS)})")):
            present = [c for c in others if _ok(large, kind=c, budget_s=b)]
            gm, rs = _versus(large, "agent", present, b) if present else (None, [])
            enough = gm is not None and _graphs(rs) >= LARGE_GRAPHS
            out.append(_row(f"14: graphs of {LARGE[0]}-{LARGE[1]} intermediates: agent@{b:g}s geomean cost <= "
                            f"{bound:g} x {what}", _rounded(gm), gm <= bound if enough else None,
                            f"{_count(rs)} (at least {LARGE_GRAPHS} graphs)"
                            + (f"; controls run: {', '.join(present)}" if len(others) > 1 else "")))

    pub = [r for r in records if r.get("family") == "published"]
    pairs = [(a, n) for a in _ok(pub, kind="agent") for n in _ok(pub, kind="anneal")
             if _pair(a) == _pair(n) and a["budget_s"] == n["budget_s"] and a["budget_s"] >= MIN_BUDGET]
    seeds = len({a.get("seed") for a, _ in pairs}) > 1
    worse = [f"{a['name']}@{a['budget_s']:g}s" + (f" (seed {a.get('seed')})" if seeds else "")
             for a, n in pairs if a["cost"] > n["cost"]]
    out.append(_row(f"14: agent never worse than anneal at the same budget >= {MIN_BUDGET:g} s (published tasks)",
                    f"worse on {len(worse)} of {len(pairs)}" if pairs else None, None if not pairs else not worse,
                    ", ".join(worse[:10]) or "-"))
    rs = _ok(pub, kind="agent", budget_s=PUBLISHED_BUDGET)
    gm = geomean([r["ratio_best"] for r in rs])
    out.append(_row(f"14: agent@{PUBLISHED_BUDGET:g}s geomean / best baseline on published <= {PUBLISHED_BOUND:g}",
                    _rounded(gm), None if gm is None else gm <= PUBLISHED_BOUND, _count(rs)))
    rand = [r for r in records if r.get("family") == "random_heldout"]
    gm, rs = _versus(rand, "agent", "anneal", RANDOM_BUDGET)
    out.append(_row(f"14: agent@{RANDOM_BUDGET:g}s geomean cost <= anneal@{RANDOM_BUDGET:g}s on random_heldout",
                    _rounded(gm), None if gm is None else gm <= 1.0, _count(rs)))

    out += _portfolio(records)

    for b in sorted({r["budget_s"] for r in _ok(records, kind="agent")}):
        for control in ("search",) + CONTROLS:
            gm, rs = _versus(records, "agent", control, b)
            if gm is not None:
                label = {"search": f"uniform-prior search@{b:g}s", "anneal": f"anneal@{b:g}s alone"}.get(
                    control, f"{control}@{b:g}s, the same schedule without the network")
                out.append({"target": f"what learning adds: agent@{b:g}s / {label} (geomean, all graphs)",
                            "measured": round(gm, 4), "status": "info", "detail": _count(rs)})
    return out


def _portfolio(records) -> list[dict]:
    """Issue 63's portfolio targets: each agent against anneal@B, pair by pair; each
    budgeted method against itself at every longer budget (same graph and seed)."""
    out, seeds = [], len({r.get("seed") for r in records}) > 1
    anneal = {(_pair(r), r["budget_s"]): r["cost"] for r in _ok(records, kind="anneal")}
    for kind in AGENTS:
        pairs = [(r, anneal[_pair(r), r["budget_s"]]) for r in _ok(records, kind=kind)
                 if (_pair(r), r["budget_s"]) in anneal]
        if not pairs:
            continue
        worse = sorted(((r["cost"] / c, r) for r, c in pairs if r["cost"] > (1 + PORTFOLIO_SLACK) * c),
                       key=lambda x: -x[0])
        out.append(_row(f"63: {kind}@B at most {100 * PORTFOLIO_SLACK:g}% dearer than anneal@B on every graph, "
                        f"budget and seed", f"dearer on {len(worse)} of {len(pairs)}", not worse,
                        ", ".join(f"{r['name']}@{r['budget_s']:g}s" + (f" (seed {r.get('seed')})" if seeds else "")
                                  + f" {x:.3f}x" for x, r in worse[:6]) or "-"))
    for kind in ANYTIME:
        runs = {}
        for r in _ok(records, kind=kind):
            runs.setdefault(_pair(r), []).append(r)
        runs = {k: sorted(v, key=lambda r: r["budget_s"]) for k, v in runs.items() if len(v) > 1}
        if not runs:
            continue
        dearer = [(rs[j], rs[i]) for rs in runs.values() for i in range(len(rs)) for j in range(i)
                  if rs[i]["cost"] > rs[j]["cost"]]
        graphs = {_pair(a) for a, _ in dearer}
        row = _row(f"63: {kind}: a longer budget never gives a dearer order (same graph and seed)",
                   f"dearer on {len(graphs)} of {len(runs)}", not dearer,
                   ", ".join(f"{b['name']} {a['budget_s']:g}s {a['cost']} -> {b['budget_s']:g}s {b['cost']}"
                             for a, b in dearer[:6]) or "-")
        if kind not in AGENTS:
            row["status"] = "info"
        out.append(row)
    return out


def over_seeds(reports: list[dict]) -> tuple[list, list]:
    """``(header, rows)``: each target measured on each report (one seed each) and on all
    their records together, with the status and detail of the latter. The reports must
    share the model, data and split and differ in seed."""
    for what, get in (("models", lambda r: r["model"].get("params_sha256") or r["model"]["id"]),
                      ("data sets", lambda r: (r["config"]["data"], r["config"]["split"]))):
        if len({json.dumps(get(r)) for r in reports}) > 1:
            raise ValueError(f"the reports evaluate different {what}: judge each on its own")
    seeds = [r["config"]["seed"] for r in reports]
    if len(set(seeds)) < len(seeds):
        raise ValueError(f"two reports ran the same seed ({seeds}): pass runs of different --seed")
    together = evaluate([rec for r in reports for rec in r["records"]])
    each = [{t["target"]: t["measured"] for t in evaluate(r["records"])} for r in reports]
    rows = [[t["target"]] + ["-" if e.get(t["target"]) is None else str(e[t["target"]]) for e in each]
            + ["-" if t["measured"] is None else str(t["measured"]), t["status"], t["detail"]]
            for t in together if t["measured"] is not None]
    return ["target"] + [f"seed {s}" for s in seeds] + ["all seeds", "status (all seeds)", "detail"], rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m eval.targets", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("report_dirs", nargs="+", help="output directories of `python -m eval` (each holding report.json)")
    p.add_argument("--readme", default=None, help="file whose block --block gets the table")
    p.add_argument("--block", default=None, help="name of the block to replace (with --readme)")
    args = p.parse_args(argv)
    if (args.readme is None) != (args.block is None):
        p.error("--readme and --block go together")
    try:
        reports = [load_report(d) for d in args.report_dirs]
        header, rows = over_seeds(reports)
    except (OSError, ValueError, KeyError) as e:
        print(f"eval.targets: {e}", file=sys.stderr)
        return 2
    command = "python -m eval.targets " + " ".join(args.report_dirs) + (
        f" --readme {args.readme} --block {args.block}" if args.readme else "")
    where = os.path.dirname(args.readme) if args.readme else "."
    links = ", ".join(f"[{d}]({os.path.relpath(os.path.join(d, 'report.md'), where)})" for d in args.report_dirs)
    judged = (f"The targets judged on one run ({links})." if len(reports) == 1 else
              f"The targets judged on {len(reports)} runs together ({links}: the same model, data and "
              "split at different seeds): each method at one seed against the others at that seed, graph "
              "by graph; geometric means over (graph, seed) pairs; a seed's column is its run alone.")
    text = "\n".join(["<!-- generated by `python -m eval.targets`; edit the reports, not this block -->", "",
                      f"`{command}`", "", judged, "",
                      md_table(header, rows), ""])
    print(text)
    if args.readme:
        try:
            put_block(args.readme, text, *markers(args.block))
        except (OSError, ValueError) as e:
            print(f"eval.targets: {args.readme}: {e}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
