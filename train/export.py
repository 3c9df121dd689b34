"""``python -m train.export --workdir RUN --out DIR``: a run's best network as a model
directory (config.json, model.safetensors, README.md), with a model card that records the
training config, the data, the steps, the wall time and the validation curve, all read
from the run directory. ``--out alphagrad/pretrained`` replaces the bundled model.
``--step N`` exports the checkpoint of step N instead (one the run kept, e.g. its last):
to set a checkpoint the validation did not choose against the one it chose. The card's
evaluation section holds an empty results block (:data:`RESULTS_START` ... :data:`RESULTS_END`)
that ``python -m eval.readme_results REPORT --card DIR/README.md`` fills from a report."""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys

from alphagrad import hub


#: The markers of a model card's results block (and of README's main one).
RESULTS_START, RESULTS_END = "<!-- results:start -->", "<!-- results:end -->"


def validation_curve(rows: list[dict]) -> str:
    """The validation rows of ``metrics.csv`` (as ``csv.DictReader`` reads them) as a
    Markdown table."""
    rows = [r for r in rows if r.get("val_ratio")]
    cols = ["step", "epoch", "val_ratio", "val_label_ratio", "val_policy_loss", "val_excess", "val_accuracy",
            "val_value_loss", "wall_s"]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        lines.append("| " + " | ".join(r[c] if c == "step" else f"{float(r[c]):.4g}" if r.get(c) else ""
                                       for c in cols) + " |")
    return "\n".join(lines)


def lineage(train_config: dict, limit: int = 32) -> str:
    """The runs the model's weights went through before this one (``init_from``, then
    that run's, ...), each with its steps and wall time from its ``metrics.csv``; a
    start that is not a run directory (e.g. the model bundled at the time) ends it."""
    parts, seen = [], set()
    init = train_config.get("init_from")
    while init and len(parts) < limit:
        run = os.path.dirname(os.path.normpath(init))
        cfg, metrics = os.path.join(run, "config.json"), os.path.join(run, "metrics.csv")
        if os.path.basename(os.path.normpath(init)) != "best_model" or run in seen or not (
                os.path.isfile(cfg) and os.path.isfile(metrics)):
            parts.append(f"{init} (as it was then)")
            break
        seen.add(run)
        with open(metrics) as f:
            rows = list(csv.DictReader(f))
        last = rows[-1] if rows else {}
        parts.append(f"{run} ({last.get('step', '?')} steps, {float(last.get('wall_s') or 0) / 3600:.2f} h)")
        with open(cfg) as f:
            init = json.load(f).get("init_from")
    return " <- ".join(parts) if parts else "none (random initialisation)"


def data_record(workdir: str, train_config: dict) -> str:
    """What the run was trained on, from ``WORKDIR/data.json`` (written by the trainer
    when it starts: each label set's rows and the policy whose states it labels); a run
    without one names its datasets and label sets only (the data on this machine may be
    another build's)."""
    path = os.path.join(workdir, "data.json")
    if not os.path.exists(path):
        data = train_config["data"]
        sets = [f"{data['path']} ({', '.join(data.get('labels', ['labels']))})"]
        sets += [f"{p} ({', '.join(data.get('extra_labels', ['labels']))})" for p in data.get("extra_paths", [])]
        return "; ".join(sets) + " (rows not recorded: the run predates data.json)"
    with open(path) as f:
        record = json.load(f)
    sets = []
    for m in record["label_sets"]:
        policy = m.get("config", {}).get("policy_sha256")
        sets.append(f"{m['path']}/{m['name']}: {m.get('rows', '?')}" + (f", states of policy {policy[:12]}" if policy else ""))
    return (f"{'; '.join(sets)}; trained on {record['train_graphs']} graphs ({record['labelled_states']} labelled "
            f"states; left out: {record['left_out'] or 'none'}), validated on {record['validation_graphs']}")


def checkpoint_model(workdir: str, step: int) -> tuple[dict, dict]:
    """The model config and the network's parameters in the run's checkpoint of ``step``
    (the config the trainer writes beside its best model); a step the run did not keep
    is an error naming those it kept."""
    import jax
    import numpy as np

    from alphagrad.hub.format import model_config
    from train import config as C
    from train import loop

    config = C.load(os.path.join(workdir, "config.json"))
    manager = loop._manager(workdir, config)
    kept = sorted(manager.all_steps())
    if step not in kept:
        raise ValueError(f"{workdir} keeps checkpoints of steps {kept}, not {step}: pass one of those to --step")
    template = loop.initial_state(config, loop.init_params(config, jax.random.key(0)), loop.optimizer(config))
    state, _ = loop.restore_at(manager, step, template)
    return (model_config(config.network, config.max_vertices),
            jax.tree_util.tree_map(np.asarray, state["params"]))


def export(workdir: str, out: str, step: int | None = None) -> list[str]:
    """Writes the run's best model (``WORKDIR/best_model``), or its checkpoint of ``step``,
    with a full card to ``out``."""
    if step is None:
        config, params = hub.load_files(os.path.join(workdir, "best_model"))
    else:
        config, params = checkpoint_model(workdir, step)
    with open(os.path.join(workdir, "config.json")) as f:
        train_config = json.load(f)
    with open(os.path.join(workdir, "metrics.csv")) as f:
        rows = list(csv.DictReader(f))
    last = rows[-1]
    scored = [r for r in rows if r.get("val_ratio")]
    if step is None:
        best_row = min(scored, key=lambda r: float(r["val_ratio"]))
    else:
        best_row = next((r for r in scored if int(r["step"]) == step), None)
        if best_row is None:
            raise ValueError(f"{workdir}/metrics.csv has no validation row at step {step}")
    training = {
        "data": data_record(workdir, train_config),
        "started from": train_config.get("init_from") or "random initialisation",
        "earlier runs (latest first)": lineage(train_config),
        "steps run": f"{last['step']} ({float(last['epoch']):.2f} epochs, {last['samples']} labelled states)",
        "wall time (h)": round(float(last["wall_s"]) / 3600, 2),
        ("best step (validation)" if step is None else "exported step (not the best by validation)"): best_row["step"],
        "validation greedy cost / best baseline (geomean)": round(float(best_row["val_ratio"]), 4),
        "validation annealed label cost / best baseline (geomean)": round(float(best_row["val_label_ratio"]), 4),
        "validation policy loss above its floor (nat)": round(float(best_row["val_excess"]), 4),
        "config": "`" + json.dumps(train_config, sort_keys=True) + "`",
    }
    evaluation = (f"{RESULTS_START}\nNot evaluated yet: `python -m eval --model {out} --out REPORT` evaluates it "
                  f"and `python -m eval.readme_results REPORT --card {out}/README.md` puts the results here.\n"
                  f"{RESULTS_END}")
    card = hub.model_card(config, {"training": training, "evaluation": evaluation})
    card += "\n## Validation curve\n\nGreedy policy (no search, no annealing) on the validation split, " \
            "and the loss on its labelled states, from `metrics.csv`:\n\n" + validation_curve(rows) + "\n"
    return hub.save_files(out, config, params, card)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m train.export", description=__doc__)
    p.add_argument("--workdir", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--step", type=int, default=None, help="export this kept checkpoint instead of the best model")
    args = p.parse_args(argv)
    try:
        written = export(args.workdir, args.out, args.step)
    except ValueError as err:
        p.error(str(err))
    print(f"wrote {', '.join(written)} to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
