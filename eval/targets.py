"""The targets of the open issues (13: the network alone; 14: the agent), measured from
an evaluation's records.

Each target is ``met``, ``missed`` or ``not measured`` (the run lacks the methods,
budgets or graphs it needs), with the number it was judged on. Nothing here is typed in
by hand: :func:`evaluate` reads the records :func:`eval.report.run` wrote.
"""

from __future__ import annotations

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


def _ok(records, **match):
    return [r for r in records if r.get("status") == "ok" and all(r.get(k) == v for k, v in match.items())]


def _row(target, measured, met, detail):
    status = "not measured" if met is None else ("met" if met else "missed")
    return {"target": target, "measured": measured, "status": status, "detail": detail}


def _large(records):
    lo, hi = LARGE
    return [r for r in records if lo <= r.get("num_intermediates", 0) <= hi]


def _versus(records, kind: str, others, budget: float):
    """Geometric mean over graphs of ``kind``'s cost / the cheapest of ``others``' costs
    (one kind or several), all at ``budget``, and how many graphs had both."""
    from eval.report import geomean

    others = (others,) if isinstance(others, str) else others
    theirs = {}
    for other in others:
        for r in _ok(records, kind=other, budget_s=budget):
            theirs[r["graph_hash"]] = min(theirs.get(r["graph_hash"], r["cost"]), r["cost"])
    ours = [r for r in _ok(records, kind=kind, budget_s=budget) if r["graph_hash"] in theirs]
    return geomean([r["cost"] / theirs[r["graph_hash"]] for r in ours if theirs[r["graph_hash"]]]), len(ours)


def _rounded(x):
    return None if x is None else round(x, 4)


def evaluate(records: list[dict]) -> list[dict]:
    """Every target, judged on ``records`` (``report.json``'s ``records``)."""
    from eval.report import geomean

    out, large = [], _large(records)
    for fam, bound in ZERO_SHOT_BOUNDS:
        rs = _ok(large, kind="zero-shot") if fam == "large" else _ok(records, kind="zero-shot", family=fam)
        gm = geomean([r["ratio_best"] for r in rs])
        where = f"graphs of {LARGE[0]}-{LARGE[1]} intermediates" if fam == "large" else fam
        out.append(_row(f"13: zero-shot geomean / best baseline on {where} <= {bound:g}", _rounded(gm),
                        None if gm is None else gm <= bound, f"{len(rs)} graphs"))
    for (lo, hi), bound in ZERO_SHOT_SECONDS:
        secs = [r["seconds"] for r in _ok(records, kind="zero-shot") if lo <= r["num_intermediates"] <= hi]
        out.append(_row(f"13: zero-shot <= {bound:g} s on graphs of {lo}-{hi} intermediates (compile excluded)",
                        _rounded(max(secs)) if secs else None, max(secs) <= bound if secs else None,
                        f"{len(secs)} graphs" if secs else "no such graph"))

    for b in sorted({r["budget_s"] for r in _ok(large, kind="agent")}):
        for others, bound, what in ((("anneal",), VS_ANNEAL, f"anneal@{b:g}s"),
                                    (CONTROLS, VS_CONTROLS, f"the best control@{b:g}s ({', '.join(CONTROLS)})")):
            present = [c for c in others if _ok(large, kind=c, budget_s=b)]
            gm, n = _versus(large, "agent", present, b) if present else (None, 0)
            enough = gm is not None and n >= LARGE_GRAPHS
            out.append(_row(f"14: graphs of {LARGE[0]}-{LARGE[1]} intermediates: agent@{b:g}s geomean cost <= "
                            f"{bound:g} x {what}", _rounded(gm), gm <= bound if enough else None,
                            f"{n} graphs (at least {LARGE_GRAPHS})" + (f"; controls run: {', '.join(present)}"
                                                                         if len(others) > 1 else "")))

    pub = [r for r in records if r.get("family") == "published"]
    pairs = [(a, n) for a in _ok(pub, kind="agent") for n in _ok(pub, kind="anneal")
             if a["graph_hash"] == n["graph_hash"] and a["budget_s"] == n["budget_s"] and a["budget_s"] >= MIN_BUDGET]
    worse = [f"{a['name']}@{a['budget_s']:g}s" for a, n in pairs if a["cost"] > n["cost"]]
    out.append(_row(f"14: agent never worse than anneal at the same budget >= {MIN_BUDGET:g} s (published tasks)",
                    f"worse on {len(worse)} of {len(pairs)}" if pairs else None, None if not pairs else not worse,
                    ", ".join(worse[:10]) or "-"))
    rs = _ok(pub, kind="agent", budget_s=PUBLISHED_BUDGET)
    gm = geomean([r["ratio_best"] for r in rs])
    out.append(_row(f"14: agent@{PUBLISHED_BUDGET:g}s geomean / best baseline on published <= {PUBLISHED_BOUND:g}",
                    _rounded(gm), None if gm is None else gm <= PUBLISHED_BOUND, f"{len(rs)} graphs"))
    rand = [r for r in records if r.get("family") == "random_heldout"]
    gm, n = _versus(rand, "agent", "anneal", RANDOM_BUDGET)
    out.append(_row(f"14: agent@{RANDOM_BUDGET:g}s geomean cost <= anneal@{RANDOM_BUDGET:g}s on random_heldout",
                    _rounded(gm), None if gm is None else gm <= 1.0, f"{n} graphs"))

    for b in sorted({r["budget_s"] for r in _ok(records, kind="agent")}):
        for control in ("search",) + CONTROLS:
            gm, n = _versus(records, "agent", control, b)
            if gm is not None:
                label = {"search": f"uniform-prior search@{b:g}s", "anneal": f"anneal@{b:g}s alone"}.get(
                    control, f"{control}@{b:g}s, the same schedule without the network")
                out.append({"target": f"what learning adds: agent@{b:g}s / {label} (geomean, all graphs)",
                            "measured": round(gm, 4), "status": "info", "detail": f"{n} graphs"})
    return out


def table(rows: list[dict]) -> tuple[list, list]:
    """``(header, rows)`` for :func:`eval.report.md_table`."""
    return (["target", "measured", "status", "detail"],
            [[r["target"], "-" if r["measured"] is None else str(r["measured"]), r["status"], r["detail"]]
             for r in rows])
