"""Supervised training of the policy-value network on labelled states.

The data (``python -m data_gen build`` + ``python -m data_gen label``) holds, for every
training graph, an annealed order and states along it, each with the set of moves that
keep the completed cost minimal (the soft policy target) and the cost still to come (the
value target). A step makes one AdamW update on a batch of graphs of one size bucket,
several labelled states per graph (they share the graph's encoder pass); every labelled
state is used once per epoch (``train/data.py``). Validation plays the network's greedy
order on validation graphs (``val_ratio``: geometric mean of its cost over the best
baseline's) and measures the loss on their labels.

Everything random derives from ``(config.seed, step)``; a checkpoint holds the parameters,
the optimiser state, the average of the weights (``ema_decay``) and the step, so a resumed
run continues exactly as an uninterrupted one, on any machine with the same data (which
``data_gen`` rebuilds from its seeds).
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import json
import logging
import os
import shutil
import time
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import optax

from alphagrad.network import PolicyNet, policy_loss, update_fn
from alphagrad.player import Player
from train.config import ConfigError, TrainConfig
from train.data import LabelledGraphs, batch_shape, epoch_batches, large_graphs, load_split, make_batch

log = logging.getLogger("train")


# ----------------------------------------------------------------------------------
# Network, optimiser, update


def network(config: TrainConfig) -> PolicyNet:
    return PolicyNet(config.network)


def init_params(config: TrainConfig, key):
    from alphagrad.hub.format import init_params

    return init_params(network(config), key)


def start_params(config: TrainConfig, template):
    """The weights of the model in ``config.init_from``, checked against the run's network."""
    from alphagrad.agent import from_pretrained

    agent = from_pretrained(config.init_from)
    sizes = lambda net: {k: v for k, v in net.items() if k != "encodings"}  # how it plays may change
    if sizes(agent.config["network"]) != sizes(dataclasses.asdict(config.network)):
        raise ConfigError(f"init_from {config.init_from!r} is a network {sizes(agent.config['network'])}, this run "
                          f"trains {sizes(dataclasses.asdict(config.network))}; set network to match or init_from "
                          f"to \"\"")
    shapes = jax.tree_util.tree_map(jnp.shape, template)
    if jax.tree_util.tree_map(jnp.shape, agent.params) != shapes:
        raise ConfigError(f"init_from {config.init_from!r} has weights of other shapes than this network's")
    if not config.fresh_inputs:
        return agent.params
    # the inputs the model was saved without are its input layers' all-zero rows (a
    # trained row is never exactly zero): they start as the template's
    from alphagrad.hub.format import input_layers

    params = jax.tree_util.tree_map(np.asarray, agent.params)
    for path, _, _ in input_layers(params, config.network.dim):
        node, fresh = params["params"], template["params"]
        for key in path:
            node, fresh = node[key], fresh[key]
        kernel = node["kernel"]
        new = ~kernel.reshape(kernel.shape[0], -1).any(axis=1)
        node["kernel"] = np.where(new.reshape(-1, *[1] * (kernel.ndim - 1)), np.asarray(fresh["kernel"]), kernel)
        if new.any():
            log.info("fresh_inputs: %d input rows of %s start from the random initialisation", new.sum(), "/".join(path))
    return params


def initial_state(config: TrainConfig, params, tx) -> dict:
    """What a checkpoint holds before the first update: the weights, ``tx``'s state and,
    with ``ema_decay``, the weights' average (which starts at the first weights)."""
    state = {"params": params, "opt_state": tx.init(params)}
    if config.ema_decay:
        state["ema"] = params
    return state


def optimizer(config: TrainConfig):
    schedule = optax.warmup_cosine_decay_schedule(0.0, config.learning_rate, max(config.warmup_steps, 1),
                                                  max(config.steps, config.warmup_steps + 1),
                                                  end_value=0.1 * config.learning_rate)
    return optax.chain(optax.clip_by_global_norm(config.grad_clip),
                       optax.adamw(schedule, weight_decay=config.weight_decay))


@functools.lru_cache(maxsize=None)
def ema_fn(decay: float):
    """The jitted ``(average, params) -> average``: ``decay * average + (1 - decay) * params``."""
    return jax.jit(lambda average, params: optax.incremental_update(params, average, 1.0 - decay))


@functools.lru_cache(maxsize=None)
def _eval_fn(net, value_weight: float, regret_weight: float, reinforce_weight: float):
    return jax.jit(lambda params, batch: policy_loss(net, params, batch, value_weight, regret_weight,
                                                     reinforce_weight))


def validate(net, params, data: LabelledGraphs, config: TrainConfig) -> dict:
    """``val_ratio``: geometric mean over the validation graphs of the network's greedy
    order's cost over the best baseline's; ``val_label_ratio``: the same for the labels'
    annealed orders (what the targets could reach); ``val_large_ratio``: ``val_ratio`` of
    the graphs of ``data.large_from`` or more intermediates, when there are any
    (``data.large_validation``); ``val_loss``/``val_excess``/``val_accuracy`` on their
    labelled states. Graphs whose best baseline costs 0 have no ratio."""
    ratios, label_ratios, large = [], [], []
    for i in range(len(data)):
        if data.rows[i]["best_baseline"] == 0:  # nothing to gain: no ratio
            continue
        g, ev = data.evaluated(i, keep=True)
        player = Player(net, params, g, data.scale(i), ev)
        ratios.append(ev.cost(player.play()) / data.scale(i))
        label_ratios.append(data.rows[i]["cost"] / data.scale(i))
        large.append(data.rows[i]["num_intermediates"] >= config.data.large_from)

    def geomean(xs):
        return float(np.exp(np.mean(np.log(xs)))) if len(xs) else 1.0

    ratios, large = np.asarray(ratios), np.asarray(large, bool)
    out = {"val_ratio": geomean(ratios), "val_label_ratio": geomean(label_ratios)}
    if large.any():
        out["val_large_ratio"] = geomean(ratios[large])
    metrics = []
    for visits in epoch_batches(data, 0, 0, config.tokens_per_batch, config.states_per_graph):
        V, E, K, G = batch_shape(data, visits, config)
        _, aux = _eval_fn(net, config.value_weight, config.regret_weight, config.reinforce_weight)(
            params, make_batch(data, visits, V, E, K, G))
        metrics.append({k: float(v) for k, v in aux.items()})
    for k in metrics[0]:
        out[f"val_{k}"] = float(np.mean([m[k] for m in metrics]))
    return out


# ----------------------------------------------------------------------------------
# Checkpoints


def _manager(workdir: str, config: TrainConfig):
    import orbax.checkpoint as ocp

    cm = ocp.checkpoint_managers
    policy = cm.AnyPreservationPolicy([
        cm.LatestN(n=config.keep_checkpoints),
        cm.BestN(get_metric_fn=lambda m: -m["val_ratio"], n=1, keep_checkpoints_without_metrics=False),
    ])
    options = ocp.CheckpointManagerOptions(preservation_policy=policy, enable_async_checkpointing=False,
                                           create=True)
    return ocp.CheckpointManager(os.path.abspath(os.path.join(workdir, "checkpoints")), options=options)


def _save(manager, step: int, state: dict, meta: dict, metrics: dict | None):
    import orbax.checkpoint as ocp

    manager.save(step, args=ocp.args.Composite(
        train_state=ocp.args.StandardSave(state),
        meta=ocp.args.JsonSave(meta),
    ), metrics=metrics, force=True)


def restore_at(manager, step: int, template: dict) -> tuple[dict, dict]:
    """The checkpoint of ``step``: ``(train state shaped like template, meta)``."""
    import orbax.checkpoint as ocp

    out = manager.restore(step, args=ocp.args.Composite(
        train_state=ocp.args.StandardRestore(template), meta=ocp.args.JsonRestore()))
    return out["train_state"], dict(out["meta"])


def _restore(manager, workdir: str, template: dict):
    """The newest checkpoint that restores; a corrupted one is moved aside with a warning
    and the previous one is used."""
    for step in sorted(manager.all_steps(), reverse=True):
        try:
            return (step, *restore_at(manager, step, template))
        except Exception as e:  # noqa: BLE001 - orbax raises many types for bad files
            bad = os.path.join(workdir, "corrupt_checkpoints", str(step))
            warnings.warn(f"checkpoint at step {step} cannot be restored ({type(e).__name__}: "
                          f"{str(e)[:200]}); moved it to {bad} and trying the previous one",
                          stacklevel=2)
            os.makedirs(os.path.dirname(bad), exist_ok=True)
            shutil.move(os.path.join(manager.directory, str(step)), bad)
            manager.reload()
    return None


# ----------------------------------------------------------------------------------
# Metrics


class Metrics:
    """Metrics to a CSV (rows past a resumed step are dropped), TensorBoard and the log."""

    def __init__(self, workdir: str, resume_step: int, tensorboard: bool = True):
        self.path = os.path.join(workdir, "metrics.csv")
        rows = []
        if os.path.exists(self.path):
            with open(self.path) as f:
                rows = [r for r in csv.DictReader(f) if int(r["step"]) <= resume_step]
        self.rows = rows
        self._write()
        self.writer = None
        if tensorboard:
            from tensorboardX import SummaryWriter

            self.writer = SummaryWriter(os.path.join(workdir, "tensorboard"), purge_step=resume_step + 1)

    def _write(self):
        keys = sorted({k for r in self.rows for k in r} - {"step"})
        tmp = self.path + ".tmp"
        with open(tmp, "w", newline="") as f:
            w = csv.DictWriter(f, ["step"] + keys)
            w.writeheader()
            w.writerows(self.rows)
        os.replace(tmp, self.path)

    def log(self, step: int, values: dict):
        values = {k: float(v) for k, v in values.items()}
        log.info("step %d: %s", step, " ".join(f"{k}={v:.4g}" for k, v in sorted(values.items())))
        self.rows.append({"step": step, **values})
        self._write()
        if self.writer is not None:
            for k, v in values.items():
                self.writer.add_scalar(k, v, step)
            self.writer.flush()

    def close(self):
        if self.writer is not None:
            self.writer.close()



# ----------------------------------------------------------------------------------
# The loop


class Schedule:
    """Step -> batch: epochs of :func:`train.data.epoch_batches`, drawn from the seed."""

    def __init__(self, data: LabelledGraphs, config: TrainConfig):
        self.data, self.config = data, config
        self.epochs: dict = {}

    def __call__(self, step: int) -> tuple[float, list]:
        """``(epochs done after this batch, the batch)``."""
        per_epoch = len(self.epoch(0))
        epoch, k = divmod(step, per_epoch)
        return epoch + (k + 1) / per_epoch, self.epoch(epoch)[k]

    def epoch(self, e: int) -> list:
        if e not in self.epochs:
            self.epochs = {e: epoch_batches(self.data, self.config.seed, e, self.config.tokens_per_batch,
                                            self.config.states_per_graph)}
        return self.epochs[e]


def train(config: TrainConfig, workdir: str, resume: bool = False, *, stop_after: int | None = None,
          progress: bool = True, tensorboard: bool = True, max_seconds: float | None = None) -> dict:
    """Runs (or resumes) training in ``workdir``; returns the final metrics.

    ``stop_after`` stops after that many steps of this call, ``max_seconds`` after that
    much wall time (a checkpoint is written first); resume with ``resume=True``.
    """
    from tqdm.auto import tqdm

    config.validate()
    if os.path.isdir(os.path.join(workdir, "checkpoints")) and os.listdir(os.path.join(workdir, "checkpoints")) \
            and not resume:
        raise ConfigError(f"{workdir} already holds a run; pass --resume to continue it or use a new --workdir")
    os.makedirs(workdir, exist_ok=True)
    train_data, val_data = training_sets(config)
    samples = sum(len(r["positions"]) for r in train_data.rows)
    log.info("train graphs: %d (%d labelled states; left out: %s); validation graphs: %d; device: %s",
             len(train_data), samples, train_data.skipped or "none", len(val_data), jax.devices()[0].platform)
    _record_data(workdir, config, len(train_data), samples, train_data.skipped, len(val_data))
    saved = os.path.join(workdir, "config.json")
    if resume and os.path.exists(saved):
        with open(saved) as f:
            old = json.load(f)
        if bool(old.get("ema_decay", 0.0)) != bool(config.ema_decay):
            raise ConfigError(f"{workdir}'s checkpoints were written with ema_decay {old.get('ema_decay', 0.0)}, "
                              f"this config has {config.ema_decay}: the average of the weights cannot be "
                              f"turned on or off mid-run; resume with the run's ema_decay or use a new --workdir")
        changed = _changed_keys(old, config.to_dict())
        if changed:
            warnings.warn(f"resuming with a changed config: {', '.join(changed)}; the run is no longer "
                          f"the same as an uninterrupted one", stacklevel=2)
    with open(saved, "w") as f:
        json.dump(config.to_dict(), f, indent=2, sort_keys=True)

    net, tx = network(config), optimizer(config)
    params = init_params(config, jax.random.key(config.seed))
    if config.init_from:
        params = start_params(config, params)
    state = initial_state(config, params, tx)
    manager = _manager(workdir, config)
    start, meta = 0, {"best_val_ratio": None, "wall_s": 0.0, "samples": 0}
    if resume:
        restored = _restore(manager, workdir, state)
        if restored is not None:
            start, state, meta = restored
            log.info("resumed from step %d", start)
    metrics_out = Metrics(workdir, start, tensorboard)
    update = update_fn(net, config.value_weight, config.regret_weight, config.reinforce_weight, tx)
    average = ema_fn(config.ema_decay)
    schedule = Schedule(train_data, config)
    last, t0, wall0 = {}, time.time(), meta.get("wall_s", 0.0)
    bar = tqdm(total=config.steps, initial=start, desc="train", disable=not progress)
    step, done_here, window = start, 0, list(meta.get("window", []))  # training metrics since the last row
    while step < config.steps and (stop_after is None or done_here < stop_after):
        epoch, visits = schedule(step)
        V, E, K, G = batch_shape(train_data, visits, config)
        batch = make_batch(train_data, visits, V, E, K, G, config.stakes_weight)
        state["params"], state["opt_state"], aux = update(state["params"], state["opt_state"], batch)
        if config.ema_decay:
            state["ema"] = average(state["ema"], state["params"])
        window.append({k: float(v) for k, v in aux.items()})
        meta["samples"] = meta.get("samples", 0) + int(batch["weight"].sum())
        step += 1
        done_here += 1
        out_of_time = max_seconds is not None and time.time() - t0 >= max_seconds
        ckpt_metrics = None
        row = None
        if step % config.eval_every == 0 or step == config.steps or out_of_time:
            row = {k: float(np.mean([w[k] for w in window])) for k in window[0]}
            window = []
            model = state.get("ema", state["params"])  # what validation measures and the best model holds
            row.update(validate(net, model, val_data, config))
            row["epoch"] = epoch
            ckpt_metrics = {"val_ratio": row["val_ratio"]}
            # ties go to the newest step: the checkpoint orbax's BestN keeps of equal metrics
            if meta["best_val_ratio"] is None or row["val_ratio"] <= meta["best_val_ratio"]:
                meta["best_val_ratio"] = row["val_ratio"]
                meta["best_step"] = step
                export_model(os.path.join(workdir, "best_model"), config, model,
                             {"step": step, "wall_s": round(wall0 + time.time() - t0, 1),
                              "samples": meta["samples"], **{k: round(v, 5) for k, v in row.items()}})
        meta["wall_s"] = wall0 + time.time() - t0
        if row is not None:
            row["wall_s"] = meta["wall_s"]
            row["samples"] = meta["samples"]
            metrics_out.log(step, row)
            last = row
        bar.update(1)
        bar.set_postfix(loss=f"{window[-1]['loss']:.3g}" if window else "", epoch=f"{epoch:.2f}")
        if step % config.checkpoint_every == 0 or step == config.steps or ckpt_metrics is not None:
            meta["window"] = window  # so that a resumed run's next row averages the same steps
            _save(manager, step, state, meta, ckpt_metrics)
        if out_of_time:
            log.info("stopping after %.0f s at step %d (max_seconds); resume with --resume", time.time() - t0, step)
            break
    bar.close()
    metrics_out.close()
    manager.wait_until_finished()
    return {"step": step, **state, **last}


def training_sets(config: TrainConfig):
    """The run's (training, validation) :class:`LabelledGraphs`: ``data.path``'s label sets
    and ``data.extra_paths``' (each with its repeats), less the large graphs moved to
    validation (``data.large_validation``)."""
    d, encodings = config.data, config.network.encodings
    train_data = load_split(d.path, d.train_split, config.buckets, d.max_vertices, d.max_train_graphs, d.labels,
                            encodings, d.repeats)
    for extra in d.extra_paths:
        train_data = train_data.joined(load_split(extra, d.train_split, config.buckets, d.max_vertices, 0,
                                                  d.extra_labels, encodings, d.extra_repeats))
    val_data = load_split(d.path, d.validation_split, config.buckets, d.max_vertices, d.max_validation_graphs,
                          d.labels[:1], encodings)
    if d.large_validation:
        large = large_graphs(train_data, d.large_validation, d.large_from, d.labels[0])
        train_data, held = train_data.split_off(large, d.labels[0])
        val_data = val_data.joined(held)
    return train_data, val_data


def _record_data(workdir: str, config: TrainConfig, graphs: int, states: int, skipped: dict, validation: int):
    """Writes ``WORKDIR/data.json``: each label set the run reads (its ``labels.json``:
    rows per split and how it was made) and what the trainer took from them, so the
    model card says what the model was trained on even where the data was later rebuilt."""
    d = config.data
    sets = [(d.path, name) for name in d.labels] + [(p, name) for p in d.extra_paths for name in d.extra_labels]
    manifests = []
    for path, name in sets:
        with open(os.path.join(path, name, "labels.json")) as f:
            manifests.append({"path": path, "name": name, **json.load(f)})
    record = {"label_sets": manifests, "train_graphs": graphs, "labelled_states": states,
              "left_out": dict(skipped), "validation_graphs": validation}
    with open(os.path.join(workdir, "data.json"), "w") as f:
        json.dump(record, f, indent=2, sort_keys=True)


def _changed_keys(old: dict, new: dict, prefix: str = "") -> list[str]:
    out = []
    for k in sorted(set(old) | set(new)):
        a, b = old.get(k), new.get(k)
        if isinstance(a, dict) and isinstance(b, dict):
            out += _changed_keys(a, b, f"{prefix}{k}.")
        elif a != b:
            out.append(f"{prefix}{k} {a!r} -> {b!r}")
    return out


def export_model(directory: str, config: TrainConfig, params, info: dict) -> None:
    """Writes the network in the hub format (config.json, model.safetensors, README.md)."""
    from alphagrad.hub.format import model_config

    from alphagrad import hub

    cfg = model_config(config.network, config.max_vertices)
    params = jax.tree_util.tree_map(np.asarray, jax.device_get(params))
    hub.save_files(directory, cfg, params, hub.model_card(cfg, {"training": info}))
