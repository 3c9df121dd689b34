"""``python -m train.export --workdir RUN --out DIR``: a run's best network as a model
directory (config.json, model.safetensors, README.md), with a model card that records the
training config, the data, the steps, the wall time and the validation curve, all read
from the run directory. ``--out alphagrad/pretrained`` replaces the bundled model."""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys

from alphagrad import hub


def validation_curve(rows: list[dict]) -> str:
    """The validation rows of ``metrics.csv`` (as ``csv.DictReader`` reads them) as a
    Markdown table."""
    rows = [r for r in rows if r.get("val_ratio")]
    cols = ["step", "val_ratio", "val_geomean", "val_ratio_optimal", "val_beats_best", "wall_s"]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        lines.append("| " + " | ".join(r[c] if c == "step" else f"{float(r[c]):.4g}" if r.get(c) else ""
                                       for c in cols) + " |")
    return "\n".join(lines)


def export(workdir: str, out: str) -> list[str]:
    """Writes the run's best model (``WORKDIR/best_model``) with a full card to ``out``."""
    best = os.path.join(workdir, "best_model")
    config, params = hub.load_files(best)
    with open(os.path.join(workdir, "config.json")) as f:
        train_config = json.load(f)
    with open(os.path.join(workdir, "metrics.csv")) as f:
        rows = list(csv.DictReader(f))
    last = rows[-1]
    best_row = min((r for r in rows if r.get("val_ratio")), key=lambda r: float(r["val_ratio"]))
    warm = train_config["warm_start"]["steps"]
    training = {
        "data": train_config["data"]["path"],
        "steps run": f"{last['step']} ({min(int(last['step']), warm)} warm-start + "
                     f"{max(0, int(last['step']) - warm)} self-play)",
        "wall time (h)": round(float(last["wall_s"]) / 3600, 2),
        "best step (validation)": best_row["step"],
        "validation greedy cost / best baseline (mean)": round(float(best_row["val_ratio"]), 4),
        "validation greedy cost / best baseline (geomean)": round(float(best_row["val_geomean"]), 4),
        "validation share beating the best baseline": round(float(best_row["val_beats_best"]), 4),
        "config": "`" + json.dumps(train_config, sort_keys=True) + "`",
    }
    from eval import readme_results

    start, end = readme_results.markers()
    evaluation = (f"{start}\nNot evaluated yet: `python -m eval --model {out} --out REPORT` evaluates it and "
                  f"`python -m eval.readme_results REPORT --card {out}/README.md` puts the results here.\n{end}")
    card = hub.model_card(config, {"training": training, "evaluation": evaluation})
    card += "\n## Validation curve\n\nGreedy policy (no search) on the validation split, " \
            "from `metrics.csv`:\n\n" + validation_curve(rows) + "\n"
    return hub.save_files(out, config, params, card)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m train.export", description=__doc__)
    p.add_argument("--workdir", required=True)
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    written = export(args.workdir, args.out)
    print(f"wrote {', '.join(written)} to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
