"""AlphaZero self-play (train/selfplay.py): a step's policy targets are distributions over
the legal moves of the recorded states, its value targets the scaled cost each game then
really spent; a run stopped after two steps, its workdir moved, and resumed ends bit for
bit where an uninterrupted one does; bad settings, graphs over the game's size and
missing devices are clear errors before any work."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import jax
import numpy as np
import pytest

from alphagrad import engine, orders, selfplay
from alphagrad.evaluator import Evaluator
from train import __main__ as cli
from train import config as C
from train import loop
from train import selfplay as SP

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SMOKE = os.path.join(ROOT, "train", "configs", "alphazero_smoke.yaml")
#: The smoke config, a step shorter and smaller still.
TINY = {"steps": 3, "checkpoint_every": 2, "eval_every": 3, "network": {"dim": 16, "heads": 2, "layers": 1},
        "selfplay.random_ops": [8, 16], "selfplay.graphs": 2, "selfplay.simulations": 3}


def tiny(**changes) -> C.TrainConfig:
    return C.load(SMOKE, {**TINY, **changes})


@pytest.fixture(scope="module")
def played():
    config = tiny()
    pool = SP.graph_pool(config)
    net = loop.network(config)
    params = loop.init_params(config, jax.random.key(0))
    sp = config.selfplay
    mesh = SP.device_mesh(sp)
    play = selfplay.selfplay_fn(net, mesh, sp.simulations, sp.max_considered, sp.gumbel_scale, sp.states_per_game)
    idx = np.arange(sp.games) % len(pool)  # the batch, and its placement, the runs below play: one compile
    out = play(SP.replicate(params, mesh), jax.random.key(1), *SP.shard(pool.take(idx), mesh))
    return pool, idx, jax.device_get(out)


def test_policy_targets_are_distributions_over_the_legal_moves(played):
    pool, idx, out = played
    for b, g in enumerate(idx):
        order = [int(a) for a in out.actions[:, b] if a >= 0]
        assert sorted(order) == sorted(pool.graphs[g].intermediates)  # every move legal, the game played out
        for k in range(out.weight.shape[1]):
            if not out.weight[b, k]:
                continue
            t = int(out.at[b, k])
            legal = set(np.flatnonzero(out.legal[b, k]))
            assert legal == set(order[t:])  # the state before move t
            target = out.target[b, k]
            assert not target[~out.legal[b, k]].any()
            np.testing.assert_allclose(target.sum(), 1.0, rtol=1e-5)
    assert out.weight.sum(1).min() >= 1


def test_value_targets_are_the_realised_scaled_costs_to_go(played):
    pool, idx, out = played
    for b, g in enumerate(idx):
        graph = pool.graphs[g]
        ev = Evaluator(graph, "exact")
        state, spent = ev.new_state(), [0]
        order = [int(a) for a in out.actions[:, b] if a >= 0]
        for v in order:
            spent.append(spent[-1] + ev.step(state, v))
        assert spent[-1] == ev.cost(order) == out.total[b]
        for k in np.flatnonzero(out.weight[b]):
            want = (spent[-1] - spent[int(out.at[b, k])]) / pool.scale[g]
            np.testing.assert_allclose(out.value[b, k], want, rtol=1e-6)


def test_the_reward_can_count_the_time_model(played):
    """selfplay.convention time:cpu: the games' costs are the time model's picoseconds
    (the evaluator's, in float32), the scale the best baseline's modelled time."""
    _, idx, _ = played
    config = tiny(**{"selfplay.convention": "time:cpu"})
    pool = SP.graph_pool(config)
    net, sp = loop.network(config), config.selfplay
    mesh = SP.device_mesh(sp)
    play = selfplay.selfplay_fn(net, mesh, sp.simulations, sp.max_considered, sp.gumbel_scale, sp.states_per_game)
    params = loop.init_params(config, jax.random.key(0))
    out = jax.device_get(play(SP.replicate(params, mesh), jax.random.key(1), *SP.shard(pool.take(idx), mesh)))
    for b, g in enumerate(idx):
        ev = Evaluator(pool.graphs[g], "time:cpu")
        order = [int(a) for a in out.actions[:, b] if a >= 0]
        np.testing.assert_allclose(out.total[b], ev.cost(order), rtol=1e-5)
        classic = orders.classic(pool.graphs[g], "time:cpu", ev)
        assert pool.scale[g] == np.float32(min(ev.cost(o) for o in classic.values()))


def _leaves(tree):
    return [np.asarray(x) for x in jax.tree_util.tree_leaves(jax.device_get(tree))]


def test_a_moved_run_resumes_bit_for_bit(tmp_path):
    config = tiny()
    whole = SP.train(config, str(tmp_path / "whole"), progress=False, tensorboard=False)
    first = str(tmp_path / "first")
    SP.train(config, first, stop_after=2, progress=False, tensorboard=False)
    moved = str(tmp_path / "elsewhere" / "run")
    shutil.move(first, moved)
    assert cli.main(["--workdir", moved, "--resume", "--no-progress"]) == 0  # the workdir alone
    resumed = SP.train(config, moved, resume=True, progress=False, tensorboard=False)  # a no-op: already done
    assert resumed["step"] == whole["step"] == config.steps
    for key in ("params", "opt_state", "replay"):
        for a, b in zip(_leaves(whole[key]), _leaves(resumed[key]), strict=True):
            np.testing.assert_array_equal(a, b)
    assert int(whole["replay"]["count"]) == config.steps * config.selfplay.games
    assert os.path.isfile(os.path.join(moved, "model", "model.safetensors"))
    assert os.path.isfile(os.path.join(moved, "best_model", "model.safetensors"))
    assert "val_random_ratio" in whole and whole["val_ratio"] == whole["val_random_ratio"] > 0


def test_a_run_out_of_time_stops_with_a_checkpoint_and_resumes(tmp_path):
    config = tiny()
    workdir = str(tmp_path / "run")
    assert SP.train(config, workdir, max_seconds=0, progress=False, tensorboard=False)["step"] == 1
    assert SP.train(config, workdir, resume=True, progress=False, tensorboard=False)["step"] == config.steps


def test_the_alphazero_configs_load():
    """alphazero.yaml starts from the shipped model (same network); the smoke config from scratch."""
    import dataclasses

    import alphagrad as ag

    real, smoke = (C.load(os.path.join(ROOT, "train", "configs", f"{name}.yaml"))
                   for name in ("alphazero", "alphazero_smoke"))
    for config in (real, smoke):
        config.validate(check_paths=False)
        assert config.mode == "selfplay"
    assert real.init_from == "alphagrad/pretrained" and smoke.init_from == ""
    assert ag.from_pretrained().config["network"] == dataclasses.asdict(real.network)


@pytest.mark.parametrize("key, value, message", [
    ("selfplay.simulations", 0, "selfplay.simulations must be positive"),
    ("selfplay.games", -2, "selfplay.games must be positive"),
    ("selfplay.gumbel_scale", float("nan"), "selfplay.gumbel_scale must be a finite number"),
    ("selfplay.gumbel_scale", -1.0, "must be >= 0"),
    ("selfplay.vertices", 4096, "over the game's padded limit"),
    ("selfplay.random_ops", [30, 10], "selfplay.random_ops"),
    ("selfplay.replay", 1, "holds fewer games than one update reads"),
    ("selfplay.families", ["random", "nonsense"], None),
    ("selfplay.convention", "seconds", "selfplay.convention must be exact, published .* or time"),
    ("mode", "alphago", "mode must be supervised or selfplay"),
    ("selfplay.validation_graphs", -1, "selfplay.validation_graphs must be >= 0"),
])
def test_bad_settings_are_clear_errors(key, value, message):
    config = tiny(**{key: value})
    if message is None:  # families are checked when the pool is built, before any game
        with pytest.raises(C.ConfigError, match="selfplay.families names \\['nonsense'\\]"):
            SP.graph_pool(config)
        return
    with pytest.raises(C.ConfigError, match=message.replace("(", "\\(")):
        config.validate()


def test_validation_families_must_be_held_out_of_the_pool():
    config = tiny(**{"selfplay.families": ["random", "published"], "selfplay.validation": ["published"]})
    with pytest.raises(C.ConfigError, match="selfplay.validation \\['published'\\] also in selfplay.families"):
        config.validate()


def test_validation_graphs_are_held_out_of_the_pool_and_scored_by_the_greedy_order():
    import alphagrad as ag
    from alphagrad.player import Player

    config = tiny(**{"selfplay.validation": ["published"], "selfplay.validation_graphs": 3})
    pool = SP.graph_pool(config)
    val = SP.validation_set(config, pool)
    names = [r[0] for r in val.rows]
    assert [r[4] for r in val.rows].count(True) == 3 and {"RoeFlux_1d", "MLP"} <= set(names)
    assert not {r[1].fingerprint for r in val.rows} & {g.fingerprint for g in pool.graphs}
    net = loop.network(config)
    params = loop.init_params(config, jax.random.key(0))
    got = val.ratios(net, params)
    ratios = [r[2].cost(Player(net, params, r[1], r[3], r[2]).play()) / r[3] for r in val.rows]
    np.testing.assert_allclose(got["val_ratio"], np.exp(np.mean(np.log(ratios))), rtol=1e-12)
    np.testing.assert_allclose(got["val_random_ratio"], np.exp(np.mean(np.log(ratios[-3:]))), rtol=1e-12)
    with pytest.raises(C.ConfigError, match="selfplay.validation names \\['nonsense'\\]"):
        SP.validation_set(tiny(**{"selfplay.validation": ["nonsense"]}), pool)


def test_a_graph_over_the_game_size_is_a_clear_error():
    import alphagrad as ag

    ex = ag.examples.get("RoeFlux_1d")
    graph = ag.trace(ex.fn, *ex.args)
    with pytest.raises(engine.GraphTooLargeError, match="more than the game's padded size selfplay.vertices=64"):
        SP.prepare(graph, tiny().selfplay)


def test_too_many_devices_stop_before_any_work(tmp_path, capsys):
    workdir = str(tmp_path / "run")
    n = len(jax.devices()) + 1
    with pytest.raises(C.ConfigError, match=f"selfplay.devices={n} asks for more devices than this machine has"):
        SP.train(tiny(**{"selfplay.devices": n, "selfplay.games": 2 * n, "selfplay.batch_games": n}), workdir)
    assert not os.path.exists(workdir)
    assert cli.main(["--config", SMOKE, "--workdir", workdir, "--set", "selfplay.devices=64", "--set",
                     "selfplay.games=64", "--set", "selfplay.batch_games=64", "--set", "selfplay.replay=64"]) == 2
    assert "asks for more devices" in capsys.readouterr().err
    assert not os.path.exists(workdir)


@pytest.mark.slow
def test_the_batch_splits_over_two_devices(tmp_path):
    """The smoke config on two (forced host) devices: the same run, the batch split in two."""
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=2", "JAX_PLATFORMS": "cpu"}
    run = lambda *more: subprocess.run(
        [sys.executable, "-m", "train", "--config", SMOKE, "--workdir", str(tmp_path / "run"), "--no-progress",
         "--set", "steps=2", *more], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    out = run("--set", "selfplay.devices=4", "--set", "selfplay.games=4", "--set", "selfplay.batch_games=4")
    assert out.returncode == 2 and "more devices than this machine has: 2 cpu device(s)" in out.stderr
    out = run("--set", "selfplay.devices=2")
    assert out.returncode == 0, out.stderr[-2000:]
    assert "self-play on 2 cpu device(s)" in out.stderr
