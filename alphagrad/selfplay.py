"""AlphaZero self-play over the JAX game, and the per-graph fine-tune built on it.

A batch of games is played under one ``jit`` (:func:`selfplay_fn`): the encoder runs once
per graph, then every move is a Gumbel MuZero search (:func:`mctx.gumbel_muzero_policy`)
whose ``recurrent_fn`` steps the JAX game (:mod:`alphagrad.observe`) and scores each state
with the decoder (:func:`alphagrad.search.make_network_recurrent_fn`); the reward is minus
a move's multiplications over the graph's scale (the best baseline's cost). Each game
leaves some of its states in a replay buffer (:func:`new_replay`): the search's improved
policy (mctx's ``action_weights``) as the policy target and the scaled cost the game then
really spent as the value target; :func:`alphagrad.network.update_fn` learns from batches
of them (:func:`replay_batch`).

``python -m train`` (``mode: selfplay``, ``train/selfplay.py``) plays a pool of graphs
this way; :func:`finetune` plays one graph, the user's, for a few seconds and returns the
adapted weights and the cheapest order its games found
(``Agent.order(f, *args, finetune_s=S)``).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time

import jax
import jax.numpy as jnp
import mctx
import numpy as np
from flax import struct
from jax.sharding import Mesh, PartitionSpec

from alphagrad import checks, observe, search
from alphagrad.evaluator import Evaluator
from alphagrad.features import ENCODER_ARGS, NUM_DYNAMIC, dynamic_features, graph_inputs, pad_inputs, padded
from alphagrad.graph import Graph
from alphagrad.network import PolicyNet, update_fn
from alphagrad.player import Player
from alphagrad.scoring import best_baseline

#: What the replay buffer keeps of each recorded state ([replay, states_per_game, ...]).
STATE_KEYS = ("dynamic", "legal", "target", "value", "progress", "weight")

#: The longest fine-tune :func:`finetune` accepts (seconds): longer adaptation is training
#: (``python -m train`` with ``mode: selfplay``).
MAX_FINETUNE_S = 3600.0


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


def played_orders(played: Played) -> list[list[int]]:
    """The elimination order of each game of ``played`` (host arrays)."""
    actions = np.asarray(played.actions)
    return [[int(a) for a in actions[:, b] if a >= 0] for b in range(actions.shape[1])]


@functools.lru_cache(maxsize=None)
def selfplay_fn(net, mesh: Mesh, simulations: int, max_considered: int, gumbel_scale: float, states: int,
                value_scale: float = 0.1):
    """The jitted ``(params, key, inputs [B], games [B], scale [B]) -> Played``: whole
    games, one Gumbel MuZero search per move, ``states`` recorded states a game. Each
    device of ``mesh`` (one axis, ``batch``) plays its share of the batch on its own
    (``shard_map``: no communication; its games' randomness from ``key`` and its index)."""
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
                                            max_num_considered_actions=max_considered, gumbel_scale=gumbel_scale,
                                            qtransform=functools.partial(mctx.qtransform_completed_by_mix_value,
                                                                         value_scale=value_scale))
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
# Replay


def new_replay(games: int, states: int, vertices: int) -> dict:
    """An empty replay buffer of ``games`` games of ``states`` recorded states at
    ``vertices`` padded vertices: each game's graph (an index into the encoder inputs
    :func:`replay_batch` is given), the states (:data:`STATE_KEYS`) and ``count``, the
    games ever added."""
    R, K, V = games, states, vertices
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


def replay_batch(replay: dict, inputs: dict, rng, games: int) -> dict:
    """An update's batch (:func:`alphagrad.network.policy_loss`'s arrays): ``games``
    distinct games of the buffer, each with its graph's encoder inputs (``inputs[k]``:
    ``[graphs, ...]``)."""
    filled = min(int(replay["count"]), replay["graph"].shape[0])
    idx = np.sort(rng.choice(filled, games, replace=False))
    batch = {k: inputs[k][replay["graph"][idx]] for k in ENCODER_ARGS}
    batch.update({k: replay[k][idx] for k in STATE_KEYS})
    batch["regret"] = np.zeros_like(batch["target"])
    return batch


# ----------------------------------------------------------------------------------
# The fine-tune


@dataclasses.dataclass(frozen=True)
class FinetuneSettings:
    """How :func:`finetune` plays and learns (the AlphaZero loop on one graph). The
    defaults are what measured best on RoeFlux_1d with the shipped model (30 s on 2 CPU
    cores; ``docs/experiments.md``): with mctx's default value scale (0.1) and Gumbel noise
    1 the searched games cost more than the network's greedy order (the value head is too
    coarse to outweigh the prior), and at learning rates of 1e-4 and more the greedy order
    got dearer.

    Attributes:
      games: games a step plays at once (one batch under ``jit``).
      simulations: Gumbel MuZero simulations per move; max_considered: actions it
        considers at the root; gumbel_scale: its Gumbel noise (0: none); value_scale:
        the weight of the searched values against the prior's logits
        (:func:`mctx.qtransform_completed_by_mix_value`).
      states_per_game: states of each game kept as targets (drawn at random along it).
      replay: games the buffer holds; batch_games: games per update;
        updates_per_step: updates after each step's games.
      learning_rate, grad_clip, value_weight: the Adam update on
        :func:`alphagrad.network.policy_loss`.
      replay_best: add the cheapest game played so far to the buffer again after each
        step (self-imitation, as Efficient Active Search adapts a policy to one instance).
      max_steps: stop after this many steps even with time left (None: time alone).
    """

    games: int = 8
    simulations: int = 8
    max_considered: int = 8
    gumbel_scale: float = 0.3
    value_scale: float = 0.02
    states_per_game: int = 16
    replay: int = 64
    batch_games: int = 8
    updates_per_step: int = 4
    learning_rate: float = 3e-5
    grad_clip: float = 1.0
    value_weight: float = 0.25
    replay_best: bool = True
    max_steps: int | None = None

    def __post_init__(self):
        for f in dataclasses.fields(self):
            value, name = getattr(self, f.name), f"FinetuneSettings.{f.name}"
            if f.type == "bool" or (f.name == "max_steps" and value is None):
                continue
            if f.type == "float":
                if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                        or value < 0 or (value == 0 and f.name != "gumbel_scale"):
                    raise ValueError(f"{name} must be a finite number > 0 (gumbel_scale: >= 0), got {value!r}")
            else:
                checks.check_int(value, name, 0 if f.name == "updates_per_step" else 1)
        if self.batch_games > self.replay:
            raise ValueError(f"FinetuneSettings.batch_games={self.batch_games} is more games than the buffer "
                             f"holds (replay={self.replay})")


@dataclasses.dataclass
class Finetuned:
    """What :func:`finetune` returns.

    Attributes:
      params: the adapted weights (a new pytree; the given ones are unchanged): of the
        weights after each step, those whose greedy order costs least (the given ones if
        none is cheaper than theirs), so a fine-tune never makes the greedy order dearer.
      order, cost: the cheapest order played (the self-play games and the greedy orders
        after each step), and its multiplications (``exact``); None for a graph without
        intermediates.
      greedy_before, greedy_cost: the cost of the greedy order of the given weights and
        of the returned ones.
      steps, games, updates: what was done.
      seconds: wall time of the self-play and updates; compile_seconds: compiling
        them first (once per padded size and settings in a process).
      history: ``(seconds, mean cost of the step's games, cost of the greedy order after
        the step)`` per step, costs over the best baseline's.
    """

    params: dict
    order: list | None
    cost: int | None
    greedy_before: int | None
    greedy_cost: int | None
    steps: int
    games: int
    updates: int
    seconds: float
    compile_seconds: float
    history: list


def check_finetune_s(value, name: str = "finetune_s") -> float:
    """``value`` as seconds if a finite number in (0, :data:`MAX_FINETUNE_S`]; TypeError or
    ValueError saying what to pass otherwise."""
    value = checks.check_budget(value, name)
    if value > MAX_FINETUNE_S:
        raise ValueError(f"{name}={value:g} s is longer than a fine-tune is meant to run (at most "
                         f"{MAX_FINETUNE_S:g} s); to train for hours, run self-play training "
                         f"(python -m train --config train/configs/alphazero.yaml) and load its model")
    return value


@functools.lru_cache(maxsize=None)
def _optimizer(learning_rate: float, grad_clip: float):
    import optax

    return optax.chain(optax.clip_by_global_norm(grad_clip), optax.adam(learning_rate))


#: Compiled self-play and update programs of this process, by network, settings and shapes.
_COMPILED: dict = {}


def _compiled(net, s: FinetuneSettings, tx, play_args: tuple, update_args: tuple) -> tuple:
    """The fine-tune's self-play and update programs compiled ahead of time for these
    arguments' shapes (so that compiling stays out of the budget), kept for later calls."""
    shapes = jax.tree.map(lambda x: (np.shape(x), str(getattr(x, "dtype", type(x).__name__))),
                          (play_args, update_args))
    key = (net, s.games, s.simulations, s.max_considered, s.gumbel_scale, s.value_scale, s.states_per_game,
           s.value_weight, s.learning_rate, s.grad_clip, str(shapes))
    if key not in _COMPILED:
        mesh = Mesh(np.asarray(jax.devices()[:1]), ("batch",))
        play = selfplay_fn(net, mesh, s.simulations, s.max_considered, s.gumbel_scale, s.states_per_game,
                           s.value_scale)
        update = update_fn(net, s.value_weight, 0.0, 0.0, tx)
        _COMPILED[key] = (play.lower(*play_args).compile(), update.lower(*update_args).compile())
    return _COMPILED[key]


def finetune(net: PolicyNet, params, graph: Graph, seconds: float, seed: int = 0,
             settings: FinetuneSettings = FinetuneSettings(), max_vertices: int | None = None) -> Finetuned:
    """Adapts ``params`` to ``graph`` by ``seconds`` of AlphaZero self-play on it.

    Each step plays ``settings.games`` games of the graph with Gumbel MuZero (the network
    as prior), adds them to a replay buffer and makes ``updates_per_step`` Adam updates
    towards the search's policy and the realised cost to go, then plays the network's
    greedy order. A step plays whole games under one ``jit`` (on 2 CPU cores 2-20 s for
    graphs of 50-150 intermediates), so the fine-tune takes ``seconds`` to within about
    half a step: a step starts only if it is expected to end nearer ``seconds`` than
    stopping now would (the first always runs; compiling is excluded, reported as
    ``compile_seconds``; ``Finetuned.seconds`` says what it took). It returns the weights whose
    greedy order was cheapest (the given ones included).
    Everything random derives from ``seed``.

    Raises:
      TypeError, ValueError: ``seconds`` not a finite number in (0, MAX_FINETUNE_S], or
        ``seed`` not an integer in [0, 2**32).
      alphagrad.engine.GraphTooLargeError: the graph has more vertices than
        ``max_vertices`` (the model's limit) or the JAX game holds.
    """
    from alphagrad import engine

    seconds = check_finetune_s(seconds)
    seed = checks.check_seed(seed)
    limit = min(engine.MAX_VERTICES, max_vertices or engine.MAX_VERTICES)
    if graph.num_vertices > limit:
        raise engine.GraphTooLargeError(
            f"the graph has {graph.num_vertices} vertices, more than the fine-tune's limit of {limit} (the model's "
            f"and the JAX game's); leave finetune_s out to order it without a fine-tune")
    t_compile = time.perf_counter()
    if not graph.intermediates:
        return Finetuned(params, None, None, None, None, 0, 0, 0, 0.0, 0.0, [])
    ev = Evaluator(graph, "exact")
    baseline = best_baseline(graph, "exact", ev)
    scale = float(max(baseline, 1))
    V = padded(graph.num_vertices, 64)
    game = observe.start(graph, "exact", num_vertices=V, num_structures=padded(ev.tables.size, 64),
                         rule_tables=ev.tables)
    one = graph_inputs(graph, ev, scale)
    inputs = {k: v[None] for k, v in pad_inputs(one, V, padded(len(one["src"]), 128)).items()}
    s = settings
    G = s.games
    batch = ({k: np.repeat(inputs[k], G, 0) for k in ENCODER_ARGS},
             jax.tree.map(lambda x: np.repeat(np.asarray(x)[None], G, 0), game), np.full(G, scale, np.float32))
    tx = _optimizer(s.learning_rate, s.grad_clip)
    params = jax.tree.map(jnp.array, params)  # a copy: the caller's weights stay as they are
    opt_state = tx.init(params)
    key = jax.random.key(seed)
    replay = new_replay(s.replay, s.states_per_game, V)
    rng = np.random.default_rng(seed)
    example = replay_batch({**replay, "count": np.asarray(s.batch_games)}, inputs, np.random.default_rng(0),
                           s.batch_games)
    play, update = _compiled(net, s, tx, (params, key, *batch), (params, opt_state, example))

    def greedy(params) -> tuple[int, list]:
        order = Player(net, params, graph, scale, ev).play()
        return int(ev.cost(order)), order

    greedy_before = kept = greedy(params)  # compiles the player too
    kept_params = params
    compile_s = time.perf_counter() - t_compile
    t0 = time.perf_counter()
    best, history, steps, updates = (*kept, None), [], 0, 0
    last = 0.0  # the last step's seconds: a step starts only if it is expected to end nearer the budget
    while time.perf_counter() - t0 + last / 2 < seconds and (s.max_steps is None or steps < s.max_steps):
        started = time.perf_counter()
        played = jax.device_get(play(params, jax.random.fold_in(key, steps), *batch))
        for b, order in enumerate(played_orders(played)):
            cost = ev.cost(order)
            if best[2] is None or cost < best[0]:
                best = (int(cost), order, played.replace(**{k: getattr(played, k)[b:b + 1] for k in STATE_KEYS}))
        add_games(replay, np.zeros(G, np.int32), played)
        if s.replay_best:  # self-imitation: the cheapest game so far, once more each step
            add_games(replay, np.zeros(1, np.int32), best[2])
        for _ in range(s.updates_per_step):
            if min(int(replay["count"]), s.replay) < s.batch_games:
                break
            params, opt_state, _ = update(params, opt_state, replay_batch(replay, inputs, rng, s.batch_games))
            updates += 1
        steps += 1
        now = greedy(params)
        if now[0] < kept[0]:  # the weights whose greedy order is cheapest so far
            kept, kept_params = now, params
        if now[0] < best[0]:
            best = (*now, best[2])
        history.append((round(time.perf_counter() - t0, 3), float(np.mean(played.total)) / scale, now[0] / scale))
        last = time.perf_counter() - started
    return Finetuned(kept_params, best[1], best[0], greedy_before[0], kept[0], steps, steps * G, updates,
                     round(time.perf_counter() - t0, 3), round(compile_s, 3), history)
