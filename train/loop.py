"""Multi-task AlphaZero training: self-play with Gumbel MuZero, replay, optax updates,
orbax checkpoints, validation, data parallelism over a device mesh.

One *step* plays ``config.games`` games on training graphs of one size bucket (the
network is the search's prior and value), stores every move's network input with the
search's improved policy and the normalised cost-to-go in that bucket's replay buffer,
and makes ``config.updates_per_step`` gradient updates on samples from the buffers. An
optional warm start first fills the buffers with moves of annealed orders and makes
``warm_start.steps`` supervised updates (those steps count in the step numbering).

Everything random derives from ``(config.seed, step)``, and a checkpoint holds the
parameters, the optimiser state and the replay buffers, so a resumed run continues
exactly as an uninterrupted one.
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
from jax.sharding import PartitionSpec as P

from alphagrad import baselines, search
from alphagrad.evaluator import Evaluator
from alphagrad.network import NUM_FEATURES, PolicyValueNet, loss
from train.config import ConfigError, TrainConfig
from train.data import GraphPool, load_pool

log = logging.getLogger("train")


# ----------------------------------------------------------------------------------
# Replay


@dataclasses.dataclass
class Replay:
    """One ring buffer per bucket of (network input, policy target, value target)."""

    capacity: int
    buffers: dict = dataclasses.field(default_factory=dict)  # bucket -> dict of arrays
    count: dict = dataclasses.field(default_factory=dict)  # bucket -> samples ever added

    FIELDS = ("tokens", "edges", "mask", "policy", "value")

    def add(self, bucket: int, samples: dict) -> None:
        n = len(samples["value"])
        if bucket not in self.buffers:
            self.buffers[bucket] = {k: np.zeros((self.capacity,) + v.shape[1:], v.dtype)
                                    for k, v in samples.items()}
            self.count[bucket] = 0
        buf, start = self.buffers[bucket], self.count[bucket]
        idx = (start + np.arange(n)) % self.capacity
        for k in self.FIELDS:
            buf[k][idx] = samples[k]
        self.count[bucket] = start + n

    def size(self, bucket: int) -> int:
        return min(self.count.get(bucket, 0), self.capacity)

    def sample(self, rng: np.random.Generator, batch: int):
        """A batch from one bucket, chosen in proportion to the buckets' fill."""
        buckets = sorted(b for b in self.buffers if self.size(b) > 0)
        sizes = np.asarray([self.size(b) for b in buckets], np.float64)
        bucket = buckets[rng.choice(len(buckets), p=sizes / sizes.sum())]
        idx = rng.integers(0, self.size(bucket), batch)
        return bucket, {k: self.buffers[bucket][k][idx] for k in self.FIELDS}

    def state(self) -> dict:
        """What a checkpoint stores (only the filled part of each buffer)."""
        return {str(b): {"count": np.asarray(self.count[b], np.int64),
                         **{k: v[: self.size(b)] for k, v in buf.items()}}
                for b, buf in self.buffers.items()}

    @classmethod
    def from_state(cls, capacity: int, state: dict) -> "Replay":
        replay = cls(capacity)
        for b, d in state.items():
            n = len(d["value"])
            replay.buffers[int(b)] = {k: np.zeros((capacity,) + np.shape(d[k])[1:], np.asarray(d[k]).dtype)
                                      for k in cls.FIELDS}
            for k in cls.FIELDS:
                replay.buffers[int(b)][k][:n] = np.asarray(d[k])
            replay.count[int(b)] = int(d["count"])
        return replay


# ----------------------------------------------------------------------------------
# Network, losses, parallel steps


def network(config: TrainConfig) -> PolicyValueNet:
    return PolicyValueNet(config.network)


def init_params(config: TrainConfig, key):
    V = config.buckets[0]
    dummy = (jnp.zeros((V, NUM_FEATURES)), jnp.zeros((V, V), jnp.int8), jnp.ones((V,), bool))
    return network(config).init(key, *dummy)


def optimizer(config: TrainConfig):
    return optax.chain(optax.clip_by_global_norm(config.grad_clip),
                       optax.adamw(config.learning_rate, weight_decay=config.weight_decay))


def make_mesh(devices: int):
    available = jax.devices()
    n = devices or len(available)
    if n > len(available):
        raise ConfigError(f"devices={n} but only {len(available)} are available")
    return jax.make_mesh((n,), ("data",), devices=available[:n])


@functools.lru_cache(maxsize=None)
def _update_fn(net, value_weight, tx, mesh):
    def local(params, batch):
        (value, aux), grads = jax.value_and_grad(functools.partial(loss, net), has_aux=True)(
            params, batch, value_weight)
        grads = jax.lax.pmean(grads, "data")
        aux = jax.lax.pmean(dict(aux, loss=value), "data")
        return grads, aux

    sharded = jax.shard_map(local, mesh=mesh, in_specs=(P(), P("data")), out_specs=(P(), P()))

    @jax.jit
    def update(params, opt_state, batch):
        grads, aux = sharded(params, batch)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, aux

    return update


@functools.lru_cache(maxsize=None)
def _play_fn(net, simulations, max_considered, mesh):
    prior = search.network_prior(net)

    def local(params, keys, state, scale):
        return search.play(params, keys[0], state, scale, prior=prior, simulations=simulations,
                           max_considered=max_considered, record=True)

    batch = P("data")
    out = search.Trajectory(*(P(None, "data"),) * 7)
    return jax.jit(jax.shard_map(local, mesh=mesh, in_specs=(P(), batch, batch, batch), out_specs=out,
                                 check_vma=False))  # mctx loops are not varying-axis aware


@functools.lru_cache(maxsize=None)
def _greedy_fn(net):
    prior = search.network_prior(net)
    return jax.jit(lambda params, state, scale: search.rollout(params, jax.random.key(0), state, scale,
                                                               prior=prior))


# ----------------------------------------------------------------------------------
# Validation


def greedy_orders(net, params, pool: GraphPool, indices, num_vertices, max_structures, batch: int = 16):
    """The network's greedy order (no search) for each graph."""
    out = []
    for start in range(0, len(indices), batch):
        chunk = list(indices[start:start + batch])
        pad = chunk + [chunk[-1]] * (batch - len(chunk))  # one compiled shape per bucket
        state, scale = pool.encode(pad, num_vertices, max_structures)
        out += search.orders(_greedy_fn(net)(params, state, scale))[: len(chunk)]
    return out


def validate(net, params, pool: GraphPool, max_structures: int) -> dict:
    """Greedy-policy cost / best baseline (mean and geometric mean) and cost / optimum
    where the optimum is known, on every graph of ``pool``."""
    ratios, to_opt = np.zeros(len(pool)), []
    for bucket, idx in pool.by_bucket().items():
        for i, order in zip(idx, greedy_orders(net, params, pool, idx, bucket, max_structures)):
            cost = Evaluator(pool.graphs[i], "exact", pool.tables.get(i)).cost(order)
            ratios[i] = cost / pool.scale[i]
            if pool.optimal[i] > 0:
                to_opt.append(cost / pool.optimal[i])
    return {"val_ratio": float(ratios.mean()), "val_geomean": float(np.exp(np.log(ratios).mean())),
            "val_ratio_optimal": float(np.mean(to_opt)) if to_opt else float("nan"),
            "val_beats_best": float((ratios < 1 - 1e-9).mean())}


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


def _save(manager, step: int, params, opt_state, replay: Replay, meta: dict, metrics: dict | None):
    import orbax.checkpoint as ocp

    manager.save(step, args=ocp.args.Composite(
        train_state=ocp.args.StandardSave({"params": params, "opt_state": opt_state}),
        replay=ocp.args.StandardSave(replay.state()),
        meta=ocp.args.JsonSave(meta),
    ), metrics=metrics, force=True)


def _restore(manager, workdir: str, template: dict, capacity: int):
    """The newest checkpoint that restores; a corrupted one is moved aside with a warning
    and the previous one is used."""
    import orbax.checkpoint as ocp

    for step in sorted(manager.all_steps(), reverse=True):
        try:
            out = manager.restore(step, args=ocp.args.Composite(
                train_state=ocp.args.StandardRestore(template), replay=ocp.args.StandardRestore(),
                meta=ocp.args.JsonRestore()))
            replay = Replay.from_state(capacity, jax.tree_util.tree_map(np.asarray, dict(out["replay"])))
            return step, out["train_state"], replay, dict(out["meta"])
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


def _rng(config: TrainConfig, step: int, stream: int) -> np.random.Generator:
    return np.random.default_rng([config.seed, step, stream])


def _key(config: TrainConfig, step: int):
    """Step ``step``'s key; ``step=-1``: the initialisation's."""
    return jax.random.fold_in(jax.random.key(config.seed), step + 1)


def warm_start_samples(config: TrainConfig, pool: GraphPool, progress=None) -> dict:
    """{bucket: samples} of the moves of annealed orders on the first
    ``warm_start.graphs`` training graphs (in a seeded random selection)."""
    rng = _rng(config, 0, 3)
    chosen = rng.permutation(len(pool))[: config.warm_start.graphs]
    out: dict = {}
    for bucket, idx in pool.by_bucket().items():
        idx = [i for i in idx if i in set(chosen.tolist())]
        for start in range(0, len(idx), config.games):
            chunk = idx[start:start + config.games]
            state, scale = pool.encode(chunk, bucket, config.max_structures)
            order = np.zeros((bucket, len(chunk)), np.int32)
            for b, i in enumerate(chunk):
                o = baselines.anneal(pool.graphs[i], iterations=config.warm_start.anneal_iterations,
                                     seed=config.seed)
                order[: len(o), b] = o
                if progress:
                    progress(1)
            s = search.samples(search.follow(state, scale, jnp.asarray(order)), scale)
            prev = out.get(bucket)
            out[bucket] = s if prev is None else {k: np.concatenate([prev[k], s[k]]) for k in s}
    return out


def _self_play(config, net, params, pool: GraphPool, step: int, mesh):
    rng = _rng(config, step, 1)
    buckets = pool.by_bucket()
    names = sorted(buckets)
    sizes = np.asarray([len(buckets[b]) for b in names], np.float64)
    bucket = names[rng.choice(len(names), p=sizes / sizes.sum())]
    idx = rng.choice(buckets[bucket], config.games, replace=len(buckets[bucket]) < config.games)
    state, scale = pool.encode(idx, bucket, config.max_structures)
    keys = jax.random.split(_key(config, step), mesh.size)
    keys, state, scale = jax.device_put((keys, state, scale), jax.sharding.NamedSharding(mesh, P("data")))
    play = _play_fn(net, config.search.simulations, config.search.max_considered, mesh)
    traj = play(params, keys, state, scale)
    costs = np.asarray(traj.mults, np.float64).sum(0) / np.asarray(scale)
    return bucket, search.samples(traj, scale), float(costs.mean())


def train(config: TrainConfig, workdir: str, resume: bool = False, *, stop_after: int | None = None,
          progress: bool = True, tensorboard: bool = True) -> dict:
    """Runs (or resumes) training in ``workdir``; returns the final metrics.

    ``stop_after`` stops after that many steps of this call (tests use it to simulate a
    crash); the run can be resumed with ``resume=True``.
    """
    from tqdm.auto import tqdm

    config.validate()
    if os.path.isdir(os.path.join(workdir, "checkpoints")) and os.listdir(os.path.join(workdir, "checkpoints")) \
            and not resume:
        raise ConfigError(f"{workdir} already holds a run; pass --resume to continue it or use a new --workdir")
    mesh = make_mesh(config.devices)
    for name in ("games", "batch_size"):
        if getattr(config, name) % mesh.size:
            raise ConfigError(f"{name}={getattr(config, name)} is not a multiple of the {mesh.size} devices")
    os.makedirs(workdir, exist_ok=True)
    d = config.data
    train_pool = load_pool(d.path, d.train_split, config.buckets, d.max_vertices, config.max_structures,
                           d.max_train_graphs)
    val_pool = load_pool(d.path, d.validation_split, config.buckets, d.max_vertices, config.max_structures,
                         d.max_validation_graphs)
    log.info("train graphs: %d (left out: %s); validation graphs: %d; devices: %d", len(train_pool),
             train_pool.skipped or "none", len(val_pool), mesh.size)
    saved = os.path.join(workdir, "config.json")
    if resume and os.path.exists(saved):
        with open(saved) as f:
            changed = _changed_keys(json.load(f), config.to_dict())
        if changed:
            warnings.warn(f"resuming with a changed config: {', '.join(changed)}; the run is no longer "
                          f"the same as an uninterrupted one", stacklevel=2)
    with open(saved, "w") as f:
        json.dump(config.to_dict(), f, indent=2, sort_keys=True)

    net, tx = network(config), optimizer(config)
    params = init_params(config, _key(config, -1))
    opt_state = tx.init(params)
    replay = Replay(config.replay_capacity)
    manager = _manager(workdir, config)
    start, meta = 0, {"best_val_ratio": None, "wall_s": 0.0}
    if resume:
        restored = _restore(manager, workdir, {"params": params, "opt_state": opt_state}, config.replay_capacity)
        if restored is not None:
            start, state, replay, meta = restored
            params, opt_state = state["params"], state["opt_state"]
            log.info("resumed from step %d", start)
    metrics_out = Metrics(workdir, start, tensorboard)
    total = config.warm_start.steps + config.steps
    update = _update_fn(net, config.value_weight, tx, mesh)
    replicated = jax.sharding.NamedSharding(mesh, P())
    batch_sharding = jax.sharding.NamedSharding(mesh, P("data"))
    params, opt_state = jax.device_put((params, opt_state), replicated)

    if start == 0 and config.warm_start.steps and not replay.buffers:
        with tqdm(total=min(config.warm_start.graphs, len(train_pool)), desc="warm start: annealing",
                  disable=not progress, leave=False) as bar:
            for bucket, s in warm_start_samples(config, train_pool, bar.update).items():
                replay.add(bucket, s)

    last, t0, wall0 = {}, time.time(), meta.get("wall_s", 0.0)
    bar = tqdm(total=total, initial=start, desc="train", disable=not progress)
    step = start
    done_here = 0
    while step < total and (stop_after is None or done_here < stop_after):
        row = {}
        if step >= config.warm_start.steps:
            bucket, s, ratio = _self_play(config, net, params, train_pool, step, mesh)
            replay.add(bucket, s)
            row["selfplay_ratio"] = ratio
        rng = _rng(config, step, 2)
        aux_all = []
        for _ in range(config.updates_per_step):
            _, batch = replay.sample(rng, config.batch_size)
            batch = jax.device_put(batch, batch_sharding)
            params, opt_state, aux = update(params, opt_state, batch)
            aux_all.append(aux)
        row.update({k: float(np.mean([a[k] for a in aux_all])) for k in aux_all[0]})
        step += 1
        done_here += 1
        ckpt_metrics = None
        if step % config.eval_every == 0 or step == total:
            row.update(validate(net, params, val_pool, config.max_structures))
            ckpt_metrics = {"val_ratio": row["val_ratio"]}
            if meta["best_val_ratio"] is None or row["val_ratio"] < meta["best_val_ratio"]:
                meta["best_val_ratio"] = row["val_ratio"]
                meta["best_step"] = step
                export_model(os.path.join(workdir, "best_model"), config, params,
                             {"step": step, **{k: round(v, 5) for k, v in row.items()}})
        meta["wall_s"] = wall0 + time.time() - t0
        row["wall_s"] = meta["wall_s"]
        metrics_out.log(step, row)
        last = row
        bar.update(1)
        bar.set_postfix({k: f"{v:.3g}" for k, v in row.items() if k in ("loss", "val_ratio", "selfplay_ratio")})
        if step % config.checkpoint_every == 0 or step == total or ckpt_metrics is not None:
            _save(manager, step, params, opt_state, replay, meta, ckpt_metrics)
    bar.close()
    metrics_out.close()
    manager.wait_until_finished()
    return {"step": step, "params": params, "devices": mesh.size, **last}


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
    from alphagrad.agent import model_config

    from alphagrad import hub

    cfg = model_config(config.network, config.max_vertices, config.max_structures)
    params = jax.tree_util.tree_map(np.asarray, jax.device_get(params))
    hub.save_files(directory, cfg, params, hub.model_card(cfg, {"training": info}))
