"""The plots of the evaluation report (matplotlib, Agg backend, PNG): the published tasks'
ratios beside the published figures, ratios against graph size, and cost against budget,
drawn from a report's records (see :mod:`eval.report`); a plot without data says so on its
canvas."""

from __future__ import annotations

import math
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from eval.common import geomean
from eval.methods import BASELINES, BUDGETED, METHODS

#: Families whose ratios are plotted against graph size.
SIZE_FAMILIES = ("random_heldout", "large_random", "large_zoo_chained", "large_real")
_COLORS = {**{n: m.color for n, m in METHODS.items()}, "AlphaZero (pub.)": "#756bb1", "PPO (pub.)": "#bcbddc"}


def _kind(method: str) -> str:
    return method.split("@")[0]


def _empty(ax, text):
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="#666666")
    ax.set_xticks([])
    ax.set_yticks([])


def _ok(records):
    return [r for r in records if r.get("status") == "ok" and isinstance(r.get("ratio_best"), float)
            and math.isfinite(r["ratio_best"])]


def published_bars(report: dict, path: str) -> str:
    """Per published task, each method's ratio to its best baseline (bars), beside the
    published AlphaZero and PPO ratios to the published best baseline."""
    pub = report["published"]
    methods = [m for m in report["methods"] if m not in BASELINES]
    series = [(m, [p["ratios"].get(m) for p in pub]) for m in methods]
    series += [("PPO (pub.)", [p["published"]["ppo_ratio"] if p["published"] else None for p in pub]),
               ("AlphaZero (pub.)", [p["published"]["alphazero_ratio"] if p["published"] else None for p in pub])]
    series = [(name, vals) for name, vals in series if any(v is not None for v in vals)]
    fig, ax = plt.subplots(figsize=(max(7, 1.3 * len(pub) + 3), 4.5))
    if not pub:
        _empty(ax, "no published task evaluated")
    else:
        width = 0.8 / len(series)
        budgets = sorted({m.split("@")[1] for m in methods if "@" in m})
        for k, (name, vals) in enumerate(series):
            xs = [i + (k - (len(series) - 1) / 2) * width for i in range(len(pub))]
            kind = _kind(name)
            alpha = 1.0
            if "@" in name and len(budgets) > 1:  # lighter for smaller budgets
                alpha = 0.45 + 0.55 * (budgets.index(name.split("@")[1]) / (len(budgets) - 1))
            ax.bar([x for x, v in zip(xs, vals) if v is not None], [v for v in vals if v is not None], width,
                   label=name, color=_COLORS.get(kind, None), alpha=alpha)
        ax.axhline(1.0, color="k", lw=0.8, ls="--")
        ax.set_xticks(range(len(pub)))
        ax.set_xticklabels([p["task"] for p in pub], rotation=30, ha="right")
        ax.set_ylabel("multiplications / best baseline")
        lo = min([v for _, vals in series for v in vals if v is not None] + [1.0])
        ax.set_ylim(max(0.0, lo - 0.1), 1.1)
        ax.legend(fontsize=7, ncol=3)
    ax.set_title("Published tasks: multiplications / best baseline (lower is better)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def size_ratios(report: dict, path: str) -> str:
    """Ratio to the best baseline and to the optimum vs intermediates, for the random
    held-out and large families; methods at the largest budget, plus zero-shot."""
    recs = [r for r in _ok(report["records"]) if r["family"] in SIZE_FAMILIES]
    budgeted = [m for m in report["methods"] if "@" in m]
    top = report["config"]["budgets"][-1] if report["config"]["budgets"] else None
    shown = [m for m in report["methods"] if m in ("zero-shot",) or
             (top is not None and "@" in m and m.endswith(f"@{top:g}s"))] or budgeted
    markers = {"random_heldout": "o", "large_random": "s", "large_zoo_chained": "^"}
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for ax, key, label in ((axes[0], "ratio_best", "best baseline"), (axes[1], "ratio_opt", "optimum")):
        pts = [r for r in recs if r["method"] in shown and isinstance(r.get(key), float) and math.isfinite(r[key])]
        if not pts:
            _empty(ax, f"no graph of {', '.join(SIZE_FAMILIES)} with a known {label}")
        else:
            for m in shown:
                for fam, mk in markers.items():
                    sel = [r for r in pts if r["method"] == m and r["family"] == fam]
                    if sel:
                        ax.scatter([r["num_intermediates"] for r in sel], [r[key] for r in sel], marker=mk,
                                   color=_COLORS.get(_kind(m)), alpha=0.75, s=22, label=f"{m} ({fam})")
            ax.axhline(1.0, color="k", lw=0.8, ls="--")
            ax.set_xlabel("intermediate vertices")
            ax.set_ylabel(f"multiplications / {label}")
            ax.legend(fontsize=7)
        ax.set_title(f"Ratio to the {label} vs graph size")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def budget_curves(report: dict, path: str) -> str:
    """Ratio to the best baseline vs budget (geometric mean over the graphs where every
    budgeted method succeeded at every budget), agent / anneal / network-free search on
    the same axes; zero-shot as a horizontal line."""
    budgets = report["config"]["budgets"]
    recs = _ok(report["records"])
    kinds = [k for k in BUDGETED if any(r.get("kind") == k for r in report["records"])]
    want = {f"{k}@{b:g}s" for k in kinds for b in budgets}
    by_graph: dict = {}
    for r in recs:
        by_graph.setdefault(r["graph_hash"], {})[r["method"]] = r["ratio_best"]
    common = [g for g, ms in by_graph.items() if want <= set(ms)]
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    if not kinds or not common:
        _empty(ax, "no graph where every budgeted method succeeded at every budget")
    else:
        for k in kinds:
            ys = [geomean([by_graph[g][f"{k}@{b:g}s"] for g in common]) for b in budgets]
            ax.plot(budgets, ys, marker="o", color=_COLORS.get(k), label=k)
        zs = [by_graph[g]["zero-shot"] for g in common if "zero-shot" in by_graph[g]]
        if zs:
            ax.axhline(geomean(zs), color=_COLORS["zero-shot"], ls=":", label="zero-shot")
        ax.axhline(1.0, color="k", lw=0.8, ls="--", label="best baseline")
        if len(budgets) > 1 and min(budgets) > 0:
            ax.set_xscale("log")
        ax.set_xticks(budgets)
        ax.set_xticklabels([f"{b:g}" for b in budgets])
        ax.set_xlabel("budget (seconds per graph, compilation excluded)")
        ax.set_ylabel("geometric mean of multiplications / best baseline")
        ax.legend(fontsize=8)
    ax.set_title(f"Cost vs time ({len(common)} graphs)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def make_all(report: dict, out_dir: str) -> list[str]:
    """Every plot, as PNG files under ``out_dir``; returns their paths."""
    os.makedirs(out_dir, exist_ok=True)
    return [published_bars(report, os.path.join(out_dir, "published_tasks.png")),
            size_ratios(report, os.path.join(out_dir, "ratio_vs_size.png")),
            budget_curves(report, os.path.join(out_dir, "ratio_vs_budget.png"))]
