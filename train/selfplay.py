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
supervised trainer's, :func:`alphagrad.network.update_fn`) draw batches of games from it.

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
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from alphagrad import engine, observe, selfplay
from alphagrad.evaluator import Evaluator
from alphagrad.features import ENCODER_ARGS, graph_inputs, pad_inputs, padded
from alphagrad.network import update_fn
from alphagrad.scoring import best_baseline
from data_gen import random_programs as rp
from train import loop
from train.config import ConfigError, SelfPlayConfig, TrainConfig

log = logging.getLogger("train")


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


def _zoo(families, setting: str, extra=()) -> list:
    """The zoo's examples of ``families``; a :class:`ConfigError` names unknown ones."""
    import alphagrad as ag

    zoo = ag.examples.all_examples()
    known = set(extra) | {e.family for e in zoo}
    unknown = sorted(set(families) - known)
    if unknown:
        raise ConfigError(f"{setting} names {unknown}; known: {sorted(known)}")
    return [e for e in zoo if e.family in families]


def _random_programs(sp: SelfPlayConfig, seed: int, stream: int):
    """``(name, graph)`` of random programs of ``sp.random_ops`` operations drawn from
    ``(seed, stream)`` without end (stream 1: the pool's, 2: validation's)."""
    import alphagrad as ag

    rng = np.random.default_rng([seed, stream])
    while True:
        spec = rp.ProgramSpec(num_inputs=int(rng.integers(1, 5)), num_outputs=int(rng.integers(1, 4)),
                              num_ops=int(rng.integers(sp.random_ops[0], sp.random_ops[1] + 1)), max_rank=2,
                              max_dim=int(rng.integers(2, 5)), width=int(rng.integers(3, 13)))
        program_seed = int(rng.integers(2**31))
        f, args = rp.generate(spec, program_seed)
        yield f"random-{program_seed}", ag.trace(f, *args)


def _candidates(sp: SelfPlayConfig, seed: int):
    """``(name, graph)`` of the zoo's families in ``sp.families``, then random programs
    (``random``) drawn from ``seed`` without end."""
    import alphagrad as ag

    for e in _zoo(sp.families, "selfplay.families", ("random",)):
        yield e.name, ag.trace(e.fn, *e.args)
    if "random" in sp.families:
        yield from _random_programs(sp, seed, 1)


@dataclasses.dataclass
class Validation:
    """The graphs that validate the network, none in the pool: ``(name, graph,
    evaluator, scale, random)`` each (scale: the best baseline's cost in the convention
    the reward counts, graphs whose best baseline costs 0 left out: nothing to gain)."""

    rows: list

    def ratios(self, net, params) -> dict:
        """``val_ratio``: geometric mean over every graph of the network's greedy order's
        cost over the best baseline's; ``val_zoo_ratio`` and ``val_random_ratio``: the
        same over the zoo's graphs and over the random programs (where there are any)."""
        from alphagrad.player import Player

        got = {True: [], False: []}
        for _, graph, ev, scale, random in self.rows:
            got[random].append(ev.cost(Player(net, params, graph, scale, ev).play()) / scale)
        geomean = lambda xs: float(np.exp(np.mean(np.log(xs))))  # noqa: E731
        out = {"val_ratio": geomean(got[True] + got[False])} if self.rows else {}
        out.update({name: geomean(got[k]) for name, k in (("val_zoo_ratio", False), ("val_random_ratio", True))
                    if got[k]})
        return out


def validation_set(config: TrainConfig, pool: Pool) -> Validation:
    """The zoo graphs of ``selfplay.validation`` and ``selfplay.validation_graphs`` random
    programs of the pool's sizes from a stream of their own, any graph of the pool left out."""
    import alphagrad as ag

    sp = config.selfplay
    seen = {g.fingerprint for g in pool.graphs}
    graphs = [(e.name, ag.trace(e.fn, *e.args), False) for e in _zoo(sp.validation, "selfplay.validation")]
    tries, programs = 0, _random_programs(sp, config.seed, 2)
    while sum(r for *_, r in graphs) < sp.validation_graphs:
        tries += 1
        if tries > 20 * sp.validation_graphs:
            raise ConfigError(f"random programs of {list(sp.random_ops)} operations rarely differ from the pool's; "
                              f"lower selfplay.validation_graphs")
        name, graph = next(programs)
        if graph.fingerprint not in seen and graph.intermediates:
            graphs.append((name, graph, True))
    rows = []
    for name, graph, random in graphs:
        if graph.intermediates:
            ev = Evaluator(graph, sp.convention)  # the cost the reward counts
            baseline = best_baseline(graph, sp.convention, ev)
            if baseline > 0:
                rows.append((name, graph, ev, float(baseline), random))
    return Validation(rows)


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
    """An empty replay buffer of ``sp.replay`` games (:func:`alphagrad.selfplay.new_replay`)."""
    return selfplay.new_replay(sp.replay, sp.states_per_game, sp.vertices)


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
    the compiled update (:func:`alphagrad.network.update_fn`) is reused within a process."""
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
    return 0, template, {"wall_s": 0.0, "games": 0, "window": [], "best_val_ratio": None}


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
    selfplay.add_games(state["replay"], picks.astype(np.int32), played)
    moves = int((played.actions >= 0).sum())
    real = pool.baseline[picks] > 0
    out = {"games_per_s": sp.games / seconds, "simulations_per_s": moves * sp.simulations / seconds,
           "selfplay_ratio": float(np.exp(np.mean(np.log(played.total[real] / pool.baseline[picks][real]))))
           if real.any() else 1.0}
    for _ in range(sp.updates_per_step):
        if min(int(state["replay"]["count"]), sp.replay) < sp.batch_games:
            break
        batch = shard(selfplay.replay_batch(state["replay"], pool.inputs, rng, sp.batch_games), mesh)
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
    fns = (selfplay.selfplay_fn(net, mesh, sp.simulations, sp.max_considered, sp.gumbel_scale, sp.states_per_game),
           update_fn(net, config.value_weight, config.regret_weight, config.reinforce_weight, tx),
           loop.ema_fn(config.ema_decay))
    metrics_out = loop.Metrics(workdir, step, tensorboard)
    validation = validation_set(config, pool)
    log.info("validation: %d graphs", len(validation.rows))
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
            model = jax.device_get(state.get("ema", state["params"]))
            last.update(validation.ratios(net, model))
            last.update(wall_s=meta["wall_s"], games=meta["games"])
            window = []
            metrics_out.log(step, last)
            info = {"step": step, "games": meta["games"], "wall_s": round(meta["wall_s"], 1),
                    **{k: round(v, 5) for k, v in last.items() if k.startswith("val_")}}
            loop.export_model(os.path.join(workdir, "model"), config, model, info)
            best = meta.get("best_val_ratio")
            if "val_ratio" in last and (best is None or last["val_ratio"] <= best):  # ties: the newest
                meta["best_val_ratio"] = last["val_ratio"]
                loop.export_model(os.path.join(workdir, "best_model"), config, model, info)
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
