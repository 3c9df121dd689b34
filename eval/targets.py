"""The pretrained agent's targets (issue #6), measured from an evaluation's records.

Each target is ``met``, ``missed`` or ``not measured`` (the run lacks the methods,
budgets or graphs it needs), with the number it was judged on. Nothing here is typed in
by hand: :func:`evaluate` reads the records :func:`eval.report.run` wrote.
"""

from __future__ import annotations

import statistics

#: Zero-shot geometric mean / best baseline on the ten published tasks (the published
#: per-task AlphaZero's result) and on the random held-out graphs.
ZERO_SHOT_PUBLISHED, ZERO_SHOT_RANDOM = 0.88, 0.90
#: Zero-shot seconds (compilation excluded) on graphs of about 100 vertices.
ZERO_SHOT_SECONDS, ABOUT_100 = 5.0, (80, 120)
#: Time to quality: the cost anneal reaches at REFERENCE_S, reached by the agent within
#: QUALITY_S on at least QUALITY_TASKS published tasks.
REFERENCE_S, QUALITY_S, QUALITY_TASKS = 60.0, 10.0, 7
#: Large graphs (intermediates): the agent's geometric-mean cost at least 5% below
#: anneal's at the same budget.
LARGE, LARGE_FACTOR, LARGE_BUDGET = (300, 500), 0.95, 60.0


def _ok(records, **match):
    return [r for r in records if r.get("status") == "ok" and all(r.get(k) == v for k, v in match.items())]


def _row(target, measured, met, detail):
    status = "not measured" if met is None else ("met" if met else "missed")
    return {"target": target, "measured": measured, "status": status, "detail": detail}


def _by_graph(rs):
    return {r["graph_hash"]: r for r in rs}


def _versus(records, kind: str, other: str, budget: float):
    """Geometric mean over graphs of ``kind``'s cost / ``other``'s cost, both at ``budget``,
    and how many graphs had both."""
    from eval.report import geomean

    theirs = _by_graph(_ok(records, kind=other, budget_s=budget))
    ours = [r for r in _ok(records, kind=kind, budget_s=budget) if r["graph_hash"] in theirs]
    return geomean([r["cost"] / theirs[r["graph_hash"]]["cost"] for r in ours
                    if theirs[r["graph_hash"]]["cost"]]), len(ours)


def evaluate(records: list[dict]) -> list[dict]:
    """Every target, judged on ``records`` (``report.json``'s ``records``)."""
    from eval.report import geomean

    out = []
    for fam, bound in (("published", ZERO_SHOT_PUBLISHED), ("random_heldout", ZERO_SHOT_RANDOM)):
        rs = _ok(records, kind="zero-shot", family=fam)
        gm = geomean([r["ratio_best"] for r in rs])
        out.append(_row(f"zero-shot geomean / best baseline on {fam} <= {bound:g}",
                        None if gm is None else round(gm, 4), None if gm is None else gm <= bound,
                        f"{len(rs)} graphs"))
    rs = _ok(records, kind="zero-shot")
    worst = max((r["ratio_best"] for r in rs), default=None)
    out.append(_row("zero-shot never worse than the best baseline", worst, None if worst is None else worst <= 1.0,
                    f"largest ratio over {len(rs)} graphs"))
    lo, hi = ABOUT_100
    rs = [r for r in _ok(records, kind="zero-shot") if lo <= r["num_intermediates"] <= hi]
    secs = [r["seconds"] for r in rs]
    out.append(_row(f"zero-shot <= {ZERO_SHOT_SECONDS:g} s on graphs of {lo}-{hi} intermediates (compile excluded)",
                    max(secs) if secs else None, max(secs) <= ZERO_SHOT_SECONDS if secs else None,
                    f"{len(secs)} graphs; median {statistics.median(secs):.2f} s" if secs else "no such graph"))

    pub = [r for r in records if r.get("family") == "published"]
    ref = _by_graph(_ok(pub, kind="anneal", budget_s=REFERENCE_S))
    agent = [r for r in _ok(pub, kind="agent") if r["budget_s"] <= QUALITY_S]
    best = {}
    for r in agent:
        if r["graph_hash"] in ref:
            best[r["graph_hash"]] = min(best.get(r["graph_hash"], r["cost"]), r["cost"])
    hits = sum(best[g] <= ref[g]["cost"] for g in best)
    out.append(_row(f"agent within {QUALITY_S:g} s reaches anneal@{REFERENCE_S:g}s's cost on >= {QUALITY_TASKS} "
                    f"published tasks", f"{hits} of {len(best)}" if best else None,
                    None if len(best) < QUALITY_TASKS else hits >= QUALITY_TASKS,
                    f"budgets {sorted({r['budget_s'] for r in agent})} vs anneal@{REFERENCE_S:g}s"))
    pairs = [(a, n) for a in _ok(pub, kind="agent") for n in _ok(pub, kind="anneal")
             if a["graph_hash"] == n["graph_hash"] and a["budget_s"] == n["budget_s"]]
    worse = [f"{a['name']}@{a['budget_s']:g}s" for a, n in pairs if a["cost"] > n["cost"]]
    out.append(_row("agent never worse than anneal at the same budget (published tasks)",
                    f"worse on {len(worse)} of {len(pairs)}" if pairs else None, None if not pairs else not worse,
                    ", ".join(worse[:10]) or "-"))

    lo, hi = LARGE
    large = [r for r in records if lo <= r.get("num_intermediates", 0) <= hi]
    gm, n = _versus(large, "agent", "anneal", LARGE_BUDGET)
    out.append(_row(f"graphs of {lo}-{hi} intermediates: agent@{LARGE_BUDGET:g}s geomean cost <= "
                    f"{LARGE_FACTOR:g} x anneal@{LARGE_BUDGET:g}s", None if gm is None else round(gm, 4),
                    None if gm is None else gm <= LARGE_FACTOR, f"{n} graphs"))

    for b in sorted({r["budget_s"] for r in _ok(records, kind="agent")}):
        gm, n = _versus(records, "agent", "search", b)
        if gm is not None:
            out.append({"target": f"what learning adds: agent@{b:g}s / uniform-prior search@{b:g}s (geomean)",
                        "measured": round(gm, 4), "status": "info", "detail": f"{n} graphs"})
        for control in ("uniform-prior", "markowitz-prior", "random-prior", "anneal"):
            gm, n = _versus(records, "agent", control, b)
            if gm is not None:
                out.append({"target": f"what learning adds: agent@{b:g}s / {control}@{b:g}s, the same schedule "
                                      f"without the network (geomean)" if control != "anneal" else
                                      f"what learning adds: agent@{b:g}s / anneal@{b:g}s alone (geomean)",
                            "measured": round(gm, 4), "status": "info", "detail": f"{n} graphs"})
    return out


def table(rows: list[dict]) -> tuple[list, list]:
    """``(header, rows)`` for :func:`eval.report.md_table`."""
    return (["target", "measured", "status", "detail"],
            [[r["target"], "-" if r["measured"] is None else str(r["measured"]), r["status"], r["detail"]]
             for r in rows])
