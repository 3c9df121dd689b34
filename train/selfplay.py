"""AlphaZero self-play (``mode: selfplay``): Gumbel MuZero over the JAX game, the network
as prior, and updates on what the search found.

A step plays one batch of games (``selfplay.games``, all padded to one size) under one
``jit``: the encoder runs once per graph, then every move is a Gumbel MuZero search
(:func:`mctx.gumbel_muzero_policy`) whose ``recurrent_fn`` steps the JAX game
(:mod:`alphagrad.observe`) and scores each state with the decoder
(:func:`alphagrad.search.make_network_recurrent_fn`); the reward is minus a move's
multiplications over the graph's scale (the best baseline's cost), the value minus the
scaled cost still to come. Each game leaves ``states_per_game`` of its states in a replay
buffer: the search's improved policy (mctx's ``action_weights``) as the policy target and
the scaled cost the game then really spent as the value target; the updates (the
supervised trainer's, :func:`train.loop.update_fn`) draw batches of games from it.

The batch axis is split over the devices (``jax.sharding``: a mesh over
``jax.devices()``, the parameters replicated), so a slice of more chips runs the same
config. Everything random derives from ``(seed, step)``, the graph pool is rebuilt from
the seed, and a checkpoint (orbax, written atomically) holds the parameters, the
optimiser state, the replay buffer and the step: a resumed run, on any machine, continues
exactly as an uninterrupted one.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
import time
import warnings

import jax
import jax.numpy as jnp
import mctx
import numpy as np
from flax import struct
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from alphagrad import engine, observe, search
from alphagrad.evaluator import Evaluator
from alphagrad.features import ENCODER_ARGS, NUM_DYNAMIC, dynamic_features, graph_inputs, pad_inputs, padded
from alphagrad.network import PolicyNet
from alphagrad.scoring import best_baseline
from data_gen import random_programs as rp
from train import loop
from train.config import ConfigError, SelfPlayConfig, TrainConfig

log = logging.getLogger("train")

#: What the replay buffer keeps of each recorded state ([replay, states_per_game, ...]).
STATE_KEYS = ("dynamic", "legal", "target", "value", "progress", "weight")


# ----------------------------------------------------------------------------------
# The graphs


@dataclasses.dataclass
class Pool:
    """The graphs self-play draws from, each padded to the game's size (host arrays,
    ``[N, ...]``): the encoder's inputs, the initial games, the cost scale and the best
    baseline's cost."""

    graphs: list
    inputs: dict
    games: observe.Game
    scale: np.ndarray
    baseline: np.ndarray

    def __len__(self):
        return len(self.graphs)

    def take(self, idx) -> tuple:
        """``(inputs, games, scale)`` of the graphs ``idx``."""
        pick = lambda x: x[idx]
        return {k: self.inputs[k][idx] for k in ENCODER_ARGS}, jax.tree.map(pick, self.games), self.scale[idx]


def too_large(graph, ev: Evaluator, sp: SelfPlayConfig) -> str | None:
    """Why ``graph`` does not fit the game's padded size, or None."""
    if graph.num_vertices > sp.vertices:
        return (f"the graph has {graph.num_vertices} vertices, more than the game's padded size "
                f"selfplay.vertices={sp.vertices}")
    if ev.tables.size > sp.structures:
        return (f"the graph has {ev.tables.size} Jacobian structures, more than selfplay.structures="
                f"{sp.structures}")
    return None


def prepare(graph, sp: SelfPlayConfig) -> tuple:
    """One graph's ``(encoder inputs, initial game, scale, best baseline)`` at the
    game's padded size; :class:`alphagrad.engine.GraphTooLargeError` if it does not fit."""
    ev = Evaluator(graph, sp.convention)
    reason = too_large(graph, ev, sp)
    if reason:
        raise engine.GraphTooLargeError(f"{reason}; raise that setting (vertices up to {engine.MAX_VERTICES}) "
                                        f"or leave the graph out")
    baseline = best_baseline(graph, sp.convention, ev)
    scale = float(max(baseline, 1))
    game = observe.start(graph, sp.convention, num_vertices=sp.vertices, num_structures=sp.structures, rule_tables=ev.tables)
    return graph_inputs(graph, ev, scale), jax.tree.map(np.asarray, game), scale, baseline


def _candidates(sp: SelfPlayConfig, seed: int):
    """``(name, graph)`` of the zoo's families in ``sp.families``, then random programs
    (``random``) drawn from ``seed`` without end."""
    import alphagrad as ag

    zoo = ag.examples.all_examples()
    known = {"random"} | {e.family for e in zoo}
    unknown = sorted(set(sp.families) - known)
    if unknown:
        raise ConfigError(f"selfplay.families names {unknown}; known: {sorted(known)}")
    for e in zoo:
        if e.family in sp.families:
            yield e.name, ag.trace(e.fn, *e.args)
    if "random" not in sp.families:
        return
    rng = np.random.default_rng([seed, 1])
    while True:
        spec = rp.ProgramSpec(num_inputs=int(rng.integers(1, 5)), num_outputs=int(rng.integers(1, 4)),
                              num_ops=int(rng.integers(sp.random_ops[0], sp.random_ops[1] + 1)), max_rank=2,
                              max_dim=int(rng.integers(2, 5)), width=int(rng.integers(3, 13)))
        program_seed = int(rng.integers(2**31))
        f, args = rp.generate(spec, program_seed)
        yield f"random-{program_seed}", ag.trace(f, *args)


def graph_pool(config: TrainConfig) -> Pool:
    """The pool: every zoo graph of ``selfplay.families`` that fits the game's size and
    ``selfplay.graphs`` random programs that do (graphs without intermediates, which
    have no moves, and those too large are left out)."""
    sp = config.selfplay
    graphs, rows, left_out, random = [], [], 0, 0
    for name, graph in _candidates(sp, config.seed):
        is_random = name.startswith("random-")
        if is_random and random == sp.graphs:
            break
        if is_random and left_out > 20 * sp.graphs:
            raise ConfigError(f"random programs of {list(sp.random_ops)} operations rarely fit "
                              f"{sp.vertices} vertices and {sp.structures} structures; lower selfplay.random_ops")
        if not graph.intermediates:
            continue
        try:
            rows.append(prepare(graph, sp))
        except engine.GraphTooLargeError:
            left_out += 1
            continue
        random += is_random
        graphs.append(graph)
    if not graphs:
        raise ConfigError(f"no graph of selfplay.families {list(sp.families)} fits {sp.vertices} vertices and "
                          f"{sp.structures} structures")
    log.info("self-play pool: %d graphs (%d random), %d left out as too large", len(graphs), random, left_out)
    E = max([config.edges_per_vertex * sp.vertices] + [padded(len(r[0]["src"]), 128) for r in rows])
    inputs = [pad_inputs(r[0], sp.vertices, E) for r in rows]
    return Pool(graphs, {k: np.stack([x[k] for x in inputs]) for k in ENCODER_ARGS},
                jax.tree.map(lambda *x: np.stack(x), *[r[1] for r in rows]),
                np.asarray([r[2] for r in rows], np.float32), np.asarray([r[3] for r in rows], np.float64))


# ----------------------------------------------------------------------------------
# Self-play


@struct.dataclass
class Played:
    """A batch of games: the recorded states (``[B, K, ...]``, ``weight`` 0 on slots of a
    game shorter than ``K`` moves), the move each was recorded before (``at``), and every
    move (``[V, B]``; ``actions`` -1 after a game ended)."""

    dynamic: jax.Array
    legal: jax.Array
    target: jax.Array
    value: jax.Array
    progress: jax.Array
    weight: jax.Array
    at: jax.Array
    actions: jax.Array
    mults: jax.Array
    total: jax.Array


@functools.lru_cache(maxsize=None)
def selfplay_fn(net, mesh: Mesh, simulations: int, max_considered: int, gumbel_scale: float, states: int):
    """The jitted ``(params, key, inputs [B], games [B], scale [B]) -> Played``: whole
    games, one Gumbel MuZero search per move, ``states`` recorded states a game. Each
    device of ``mesh`` plays its share of the batch on its own (``shard_map``: no
    communication; its games' randomness from ``key`` and its index)."""
    recurrent_fn = search.make_network_recurrent_fn(net)

    def run(params, key, inputs, game, scale):
        B, V = game.state.eliminable.shape
        key = jax.random.fold_in(key, jax.lax.axis_index("batch"))
        h = jax.vmap(lambda *a: net.apply(params, *a, method=PolicyNet.encode))(*(inputs[k] for k in ENCODER_ARGS))
        static = search.split_game(game)[1]
        key, sub = jax.random.split(key)
        n = game.state.eliminable.sum(-1)
        order = jnp.where(jnp.arange(V) < n[:, None], jax.random.uniform(sub, (B, V)), 2.0)
        at = jnp.argsort(order, -1)[:, :states].astype(jnp.int32)  # distinct moves of each game
        rec = {"dynamic": jnp.zeros((B, states, V, NUM_DYNAMIC)), "legal": jnp.zeros((B, states, V), bool),
               "target": jnp.zeros((B, states, V)), "before": jnp.zeros((B, states)),
               "progress": jnp.zeros((B, states))}
        moves = {"actions": jnp.full((V, B), -1, jnp.int32), "mults": jnp.zeros((V, B))}

        def body(carry):
            t, game, key, rec, moves = carry
            key, sub = jax.random.split(key)
            root, raw = search.network_root(net, params, h, game, scale)
            legal = game.state.eliminable
            out = mctx.gumbel_muzero_policy((params, h, static, scale), sub, root, recurrent_fn,
                                            num_simulations=simulations, invalid_actions=~legal,
                                            max_num_considered_actions=max_considered, gumbel_scale=gumbel_scale)
            active = legal.any(-1)
            hit = (at == t) & active[:, None]
            now = {"dynamic": jax.vmap(lambda r, s: dynamic_features(r, jnp.maximum(s, 1.0), jnp))(raw, scale),
                   "legal": legal, "target": out.action_weights, "before": game.state.mults,
                   "progress": jax.vmap(observe.progress)(game)}
            rec = {k: jnp.where(hit.reshape(hit.shape + (1,) * (v.ndim - 2)), now[k][:, None], v)
                   for k, v in rec.items()}
            game, mults = jax.vmap(observe.play)(game, out.action)
            moves = {"actions": moves["actions"].at[t].set(jnp.where(active, out.action, -1)),
                     "mults": moves["mults"].at[t].set(mults)}
            return t + 1, game, key, rec, moves

        cond = lambda carry: (carry[0] < V) & carry[1].state.eliminable.any()
        _, game, _, rec, moves = jax.lax.while_loop(cond, body, (0, game, key, rec, moves))
        weight = (at < n[:, None]).astype(jnp.float32)
        total = game.state.mults
        value = (total[:, None] - rec["before"]) / scale[:, None] * weight
        return Played(dynamic=rec["dynamic"], legal=rec["legal"], target=rec["target"] * rec["legal"], value=value,
                      progress=rec["progress"], weight=weight, at=at, total=total, **moves)

    rows, moves = PartitionSpec("batch"), PartitionSpec(None, "batch")
    out = Played(**{f.name: moves if f.name in ("actions", "mults") else rows for f in dataclasses.fields(Played)})
    return jax.jit(jax.shard_map(run, mesh=mesh, in_specs=(PartitionSpec(), PartitionSpec(), rows, rows, rows),
                                 out_specs=out, check_vma=False))


# ----------------------------------------------------------------------------------
# Devices


def device_mesh(sp: SelfPlayConfig) -> Mesh:
    """A one-axis mesh (``batch``) over ``sp.devices`` devices (0: all); a
    :class:`ConfigError` where they are not there or do not divide the batches."""
    there = jax.devices()
    n = sp.devices or len(there)
    if n > len(there):
        raise ConfigError(f"selfplay.devices={n} asks for more devices than this machine has: {len(there)} "
                          f"{there[0].platform} device(s); lower selfplay.devices (0: all there are)")
    if sp.games % n or sp.batch_games % n:
        raise ConfigError(f"selfplay.games={sp.games} and selfplay.batch_games={sp.batch_games} must be multiples "
                          f"of the {n} devices the batch is split over (set selfplay.devices)")
    return Mesh(np.asarray(there[:n]), ("batch",))


def shard(tree, mesh: Mesh):
    """``tree`` on the mesh, its leading (batch) axis split over the devices."""
    return jax.device_put(tree, NamedSharding(mesh, PartitionSpec("batch")))


def replicate(tree, mesh: Mesh):
    return jax.device_put(tree, NamedSharding(mesh, PartitionSpec()))


# ----------------------------------------------------------------------------------
# Replay


def new_replay(sp: SelfPlayConfig) -> dict:
    """An empty replay buffer of ``sp.replay`` games: their graph's index in the pool, the
    recorded states (:data:`STATE_KEYS`) and ``count``, the games ever added."""
    R, K, V = sp.replay, sp.states_per_game, sp.vertices
    return {"graph": np.zeros(R, np.int32), "dynamic": np.zeros((R, K, V, NUM_DYNAMIC), np.float32),
            "legal": np.zeros((R, K, V), bool), "target": np.zeros((R, K, V), np.float32),
            **{k: np.zeros((R, K), np.float32) for k in ("value", "progress", "weight")},
            "count": np.zeros((), np.int64)}


def add_games(replay: dict, graphs, played: Played) -> None:
    """Adds a batch of games (in place), over the oldest once the buffer is full."""
    R = replay["graph"].shape[0]
    at = (int(replay["count"]) + np.arange(len(graphs))) % R
    replay["graph"][at] = graphs
    for k in STATE_KEYS:
        replay[k][at] = np.asarray(getattr(played, k))
    replay["count"] = np.asarray(int(replay["count"]) + len(graphs), np.int64)


def replay_batch(replay: dict, pool: Pool, rng, games: int) -> dict:
    """An update's batch (:func:`alphagrad.network.policy_loss`'s arrays): ``games``
    distinct games of the buffer, each with its graph's encoder inputs."""
    filled = min(int(replay["count"]), replay["graph"].shape[0])
    idx = np.sort(rng.choice(filled, games, replace=False))
    batch = {k: pool.inputs[k][replay["graph"][idx]] for k in ENCODER_ARGS}
    batch.update({k: replay[k][idx] for k in STATE_KEYS})
    batch["regret"] = np.zeros_like(batch["target"])
    return batch


# ----------------------------------------------------------------------------------
# The loop


def _open_run(config: TrainConfig, workdir: str, resume: bool) -> None:
    """Checks ``workdir`` against ``resume`` and writes the run's config.json."""
    ckpt = os.path.join(workdir, "checkpoints")
    if os.path.isdir(ckpt) and os.listdir(ckpt) and not resume:
        raise ConfigError(f"{workdir} already holds a run; pass --resume to continue it or use a new --workdir")
    os.makedirs(workdir, exist_ok=True)
    saved = os.path.join(workdir, "config.json")
    if resume and os.path.exists(saved):
        with open(saved) as f:
            changed = loop._changed_keys(json.load(f), config.to_dict())
        if changed:
            warnings.warn(f"resuming with a changed config: {', '.join(changed)}; the run is no longer "
                          f"the same as an uninterrupted one", stacklevel=3)
    with open(saved, "w") as f:
        json.dump(config.to_dict(), f, indent=2, sort_keys=True)


@functools.lru_cache(maxsize=None)
def _optimizer(config: TrainConfig):
    """The run's optimiser (its schedule over every update), one object per config so that
    the compiled update (:func:`train.loop.update_fn`) is reused within a process."""
    return loop.optimizer(dataclasses.replace(config, steps=config.steps * config.selfplay.updates_per_step))


def _initial(config: TrainConfig, net, tx, manager, workdir: str, resume: bool) -> tuple:
    """``(step, state, meta)``: the newest checkpoint's with ``resume``, else the start
    (``init_from``'s weights or a random initialisation, an empty replay buffer)."""
    params = jax.jit(functools.partial(loop.init_params, config))(jax.random.key(config.seed))  # one compile
    template = {**loop.initial_state(config, params, tx), "replay": new_replay(config.selfplay)}
    if resume:
        restored = loop._restore(manager, workdir, template)
        if restored is not None:
            step, state, meta = restored
            log.info("resumed from step %d", step)
            state["replay"] = jax.tree.map(np.asarray, state["replay"])
            return step, state, meta
    if config.init_from:
        template.update(loop.initial_state(config, loop.start_params(config, params), tx))
    return 0, template, {"wall_s": 0.0, "games": 0, "window": []}


def _step(config: TrainConfig, step: int, state: dict, pool: Pool, mesh: Mesh, fns: tuple) -> dict:
    """One step: a batch of self-play games into the replay buffer, then the updates.
    Returns its metrics."""
    sp, (play, update, average) = config.selfplay, fns
    rng = np.random.default_rng([config.seed, step])
    picks = rng.integers(len(pool), size=sp.games)
    t = time.perf_counter()
    played = jax.device_get(play(state["params"], jax.random.fold_in(jax.random.key(config.seed), step),
                                 *shard(pool.take(picks), mesh)))
    seconds = time.perf_counter() - t
    add_games(state["replay"], picks.astype(np.int32), played)
    moves = int((played.actions >= 0).sum())
    real = pool.baseline[picks] > 0
    out = {"games_per_s": sp.games / seconds, "simulations_per_s": moves * sp.simulations / seconds,
           "selfplay_ratio": float(np.exp(np.mean(np.log(played.total[real] / pool.baseline[picks][real]))))
           if real.any() else 1.0}
    for _ in range(sp.updates_per_step):
        if min(int(state["replay"]["count"]), sp.replay) < sp.batch_games:
            break
        batch = shard(replay_batch(state["replay"], pool, rng, sp.batch_games), mesh)
        state["params"], state["opt_state"], aux = update(state["params"], state["opt_state"], batch)
        if config.ema_decay:
            state["ema"] = average(state["ema"], state["params"])
        out.update({k: float(v) for k, v in aux.items()})
    return out


def train(config: TrainConfig, workdir: str, resume: bool = False, *, stop_after: int | None = None,
          progress: bool = True, tensorboard: bool = True, max_seconds: float | None = None) -> dict:
    """Runs (or resumes) self-play training in ``workdir``; returns the final state and
    metrics. ``stop_after``/``max_seconds`` as :func:`train.loop.train` has them."""
    from tqdm.auto import tqdm

    config.validate()
    sp = config.selfplay
    mesh = device_mesh(sp)  # before any work
    _open_run(config, workdir, resume)
    pool = graph_pool(config)
    net = loop.network(config)
    tx = _optimizer(config)
    manager = loop._manager(workdir, config)
    step, state, meta = _initial(config, net, tx, manager, workdir, resume)
    replay = state.pop("replay")
    state = replicate(state, mesh)
    state["replay"] = replay
    fns = (selfplay_fn(net, mesh, sp.simulations, sp.max_considered, sp.gumbel_scale, sp.states_per_game),
           loop.update_fn(net, config.value_weight, config.regret_weight, config.reinforce_weight, tx),
           loop.ema_fn(config.ema_decay))
    metrics_out = loop.Metrics(workdir, step, tensorboard)
    log.info("self-play on %d %s device(s): %d games a step, %d simulations a move, %d vertices",
             mesh.size, mesh.devices.flat[0].platform, sp.games, sp.simulations, sp.vertices)
    t0, wall0, done_here, last, window = time.time(), meta["wall_s"], 0, {}, list(meta["window"])
    bar = tqdm(total=config.steps, initial=step, desc="self-play", disable=not progress)
    while step < config.steps and (stop_after is None or done_here < stop_after):
        window.append(_step(config, step, state, pool, mesh, fns))
        step, done_here = step + 1, done_here + 1
        meta["games"] += sp.games
        meta["wall_s"] = wall0 + time.time() - t0
        out_of_time = max_seconds is not None and time.time() - t0 >= max_seconds
        if step % config.eval_every == 0 or step == config.steps or out_of_time:
            keys = set.intersection(*[set(w) for w in window])
            last = {k: float(np.mean([w[k] for w in window])) for k in keys}
            last.update(wall_s=meta["wall_s"], games=meta["games"])
            window = []
            metrics_out.log(step, last)
            loop.export_model(os.path.join(workdir, "model"), config, state.get("ema", state["params"]),
                              {"step": step, "games": meta["games"], "wall_s": round(meta["wall_s"], 1)})
        bar.update(1)
        if step % config.checkpoint_every == 0 or step == config.steps or out_of_time:
            meta["window"] = window
            loop._save(manager, step, state, meta, None)
        if out_of_time:
            log.info("stopping after %.0f s at step %d (max_seconds); resume with --resume", time.time() - t0, step)
            break
    bar.close()
    metrics_out.close()
    manager.wait_until_finished()
    return {"step": step, **state, **last}
