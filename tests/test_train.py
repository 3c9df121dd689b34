"""Training: config errors, learning on a tiny run, exact resume (inside the warm start, and
after self-play has wrapped the replay buffer, in process and after a real SIGKILL),
corrupted checkpoints, and data parallelism over two (host-platform) devices."""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import jax
import numpy as np
import pytest
import yaml

from data_gen import dataset as D
from train import __main__ as cli
from train import config as C
from train import loop


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("train_data"))
    config = D.BuildConfig(seed=5, num_random=14, num_heldout=0, large=0, chunk_size=8, zoo="none",
                           train=D.TRAIN.replace(num_ops=(10, 24), max_rank=(0, 1), max_dim=(1, 4)))
    D.build(out, config, num_proc=1, progress=False, quiet=True)
    return out


def tiny_config(path, **changes) -> C.TrainConfig:
    base = dict(
        seed=0, steps=3, games=2, updates_per_step=2, batch_size=8, learning_rate=3e-3, buckets=[32],
        max_vertices=64, max_structures=256, replay_capacity=400, checkpoint_every=1, keep_checkpoints=2,
        eval_every=100, network=dict(dim=16, heads=2, layers=1), search=dict(simulations=2, max_considered=2),
        warm_start=dict(steps=12, graphs=8, anneal_iterations=500),
        data=dict(path=path, validation_split="train", max_train_graphs=8, max_validation_graphs=8,
                  max_vertices=32),
    )
    for key, value in changes.items():
        node = base
        *parents, leaf = key.split("__")
        for p in parents:
            node = node[p]
        node[leaf] = value
    return C.from_dict(base)


def _params(out):
    return jax.tree_util.tree_leaves(jax.device_get(out["params"]))


@pytest.fixture(scope="module")
def full_run(data, tmp_path_factory):
    workdir = str(tmp_path_factory.mktemp("full"))
    return workdir, loop.train(tiny_config(data), workdir, progress=False, tensorboard=False)


# ---------------------------------------------------------------------------------
# config errors


def test_unknown_key_wrong_type_and_missing_dataset_are_config_errors(tmp_path):
    with pytest.raises(C.ConfigError, match=r"unknown key\(s\) search.simulatoins"):
        C.from_dict({"search": {"simulatoins": 3}})
    with pytest.raises(C.ConfigError, match="steps must be of type int"):
        C.from_dict({"steps": "many"})
    with pytest.raises(C.ConfigError, match="buckets must be a list of integers"):
        C.from_dict({"buckets": 64})
    with pytest.raises(C.ConfigError, match="does not exist; build a dataset first"):
        C.from_dict({"data": {"path": str(tmp_path / "nowhere")}}).validate()
    with pytest.raises(C.ConfigError, match="larger than the largest bucket"):
        C.from_dict({"buckets": [64], "max_vertices": 64, "data": {"max_vertices": 100}}).validate(check_paths=False)
    config = tmp_path / "bad.yaml"
    config.write_text("steps: 3\nnetwork: {width: 3}\n")
    assert cli.main(["--config", str(config), "--workdir", str(tmp_path / "run")]) == 2
    assert not (tmp_path / "run").exists()  # stopped before training started


def test_cli_reports_config_errors(tmp_path, capsys):
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({"data": {"path": str(tmp_path / "missing")}}))
    assert cli.main(["--config", str(config), "--workdir", str(tmp_path / "run")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_graphs_over_the_limit_are_left_out_and_counted(data):
    pool = loop.load_pool(data, "train", (32,), 20, 256)
    assert all(g.num_vertices <= 20 for g in pool.graphs)
    assert sum(pool.skipped.values()) > 0


def test_smoke_config_is_valid():
    config = C.load("train/configs/smoke.yaml")
    config.validate(check_paths=False)
    C.load("train/configs/main.yaml").validate(check_paths=False)


# ---------------------------------------------------------------------------------
# learning, outputs


def test_tiny_run_lowers_the_greedy_policy_cost(data, full_run):
    _workdir, out = full_run
    config = tiny_config(data)
    pool = loop.load_pool(data, "train", (32,), 32, 256, limit=8)
    net = loop.network(config)
    before = loop.validate(net, loop.init_params(config, loop._key(config, -1)), pool, 256)
    after = loop.validate(net, out["params"], pool, 256)
    assert after["val_ratio"] < before["val_ratio"]
    assert out["step"] == config.warm_start.steps + config.steps
    assert np.isfinite(out["loss"]) and np.isfinite(out["val_ratio"])


def test_run_writes_metrics_checkpoints_and_the_best_model(full_run):
    workdir, out = full_run
    import csv

    with open(os.path.join(workdir, "metrics.csv")) as f:
        rows = list(csv.DictReader(f))
    assert [int(r["step"]) for r in rows] == list(range(1, out["step"] + 1))
    assert rows[-1]["val_ratio"] and rows[-1]["selfplay_ratio"]
    steps = sorted(int(s) for s in os.listdir(os.path.join(workdir, "checkpoints")) if s.isdigit())
    assert steps[-2:] == [out["step"] - 1, out["step"]]  # the last K (K=2), plus the best
    assert sorted(os.listdir(os.path.join(workdir, "best_model"))) == ["README.md", "config.json",
                                                                       "model.safetensors"]
    import alphagrad

    agent = alphagrad.from_pretrained(os.path.join(workdir, "best_model"))
    assert agent.config["network"] == {"dim": 16, "heads": 2, "layers": 1}


def test_refuses_to_overwrite_a_run(data, full_run):
    workdir, _ = full_run
    with pytest.raises(C.ConfigError, match="--resume"):
        loop.train(tiny_config(data), workdir, progress=False, tensorboard=False)


# ---------------------------------------------------------------------------------
# resume


@pytest.fixture(scope="module")
def interrupted(data, tmp_path_factory):
    """A run stopped after 10 of its 15 steps (as if killed after its checkpoint)."""
    workdir = str(tmp_path_factory.mktemp("interrupted"))
    loop.train(tiny_config(data), workdir, stop_after=10, progress=False, tensorboard=False)
    return workdir


def test_resumed_run_equals_an_uninterrupted_one(data, full_run, interrupted, tmp_path):
    workdir = str(tmp_path / "run")
    shutil.copytree(interrupted, workdir)
    out = loop.train(tiny_config(data), workdir, resume=True, progress=False, tensorboard=False)
    for a, b in zip(_params(out), _params(full_run[1])):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    # optimiser state, replay, metrics (no duplicated rows after the resume) too
    _assert_same_run(workdir, full_run[0], tiny_config(data))


def test_corrupted_latest_checkpoint_falls_back_to_the_previous_one(data, full_run, interrupted, tmp_path):
    workdir = str(tmp_path / "run")
    shutil.copytree(interrupted, workdir)
    latest = os.path.join(workdir, "checkpoints", "10")
    for path in glob.glob(os.path.join(latest, "**", "*"), recursive=True):
        if os.path.isfile(path):
            with open(path, "wb") as f:
                f.write(b"\x00garbage")
    with pytest.warns(UserWarning, match="checkpoint at step 10 cannot be restored"):
        out = loop.train(tiny_config(data), workdir, resume=True, progress=False, tensorboard=False)
    assert os.path.isdir(os.path.join(workdir, "corrupt_checkpoints", "10"))
    for a, b in zip(_params(out), _params(full_run[1])):  # resumed from step 9: same result
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def _final_state(workdir, config):
    """(step, params, optimiser state, replay, meta) of the newest checkpoint in ``workdir``."""
    params = loop.init_params(config, loop._key(config, -1))
    template = {"params": params, "opt_state": loop.optimizer(config).init(params)}
    manager = loop._manager(workdir, config)
    try:
        step, state, replay, meta = loop._restore(manager, workdir, template, config.replay_capacity)
    finally:
        manager.close()
    return step, state, replay, meta


def _stored_replay_count(workdir, config):
    """(step, samples ever added) as the newest checkpoint stores them, read with orbax
    directly (not through the code under test)."""
    import orbax.checkpoint as ocp

    manager = loop._manager(workdir, config)
    try:
        step = manager.latest_step()
        replay = manager.restore(step, args=ocp.args.Composite(replay=ocp.args.StandardRestore()))["replay"]
    finally:
        manager.close()
    (bucket,) = replay.values()
    return step, int(bucket["count"])


def _metrics(workdir):
    import csv

    with open(os.path.join(workdir, "metrics.csv")) as f:
        return [{k: v for k, v in r.items() if k != "wall_s"} for r in csv.DictReader(f)]


def _assert_same_run(workdir, reference, config):
    """Same final parameters, optimiser state, replay buffers and counts, checkpoint
    metadata and metrics (every column but wall time) as the run in ``reference``."""
    step, state, replay, meta = _final_state(workdir, config)
    ref_step, ref_state, ref_replay, ref_meta = _final_state(reference, config)
    assert step == ref_step == config.warm_start.steps + config.steps
    flat, tree = jax.tree_util.tree_flatten(jax.device_get(state))
    ref_flat, ref_tree = jax.tree_util.tree_flatten(jax.device_get(ref_state))
    assert tree == ref_tree
    assert len(flat) > len(jax.tree_util.tree_leaves(state["params"]))  # optimiser state included
    for a, b in zip(flat, ref_flat):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert replay.count == ref_replay.count
    assert replay.buffers.keys() == ref_replay.buffers.keys()
    for bucket, buf in replay.buffers.items():
        assert buf.keys() == ref_replay.buffers[bucket].keys()
        for k, v in buf.items():
            np.testing.assert_array_equal(v, ref_replay.buffers[bucket][k], err_msg=f"replay {bucket} {k}")
    drop = lambda m: {k: v for k, v in m.items() if k != "wall_s"}
    assert drop(meta) == drop(ref_meta)
    rows, ref_rows = _metrics(workdir), _metrics(reference)
    assert [int(r["step"]) for r in rows] == list(range(1, step + 1))
    assert rows == ref_rows


#: The warm start's 12 steps fill the replay buffer with 114 samples; with this capacity
#: the first self-play step (step 13) wraps it.
CAPACITY = 128


@pytest.fixture(scope="module")
def full_run_wrapped(data, tmp_path_factory):
    """An uninterrupted run whose replay buffer wraps during self-play."""
    workdir = str(tmp_path_factory.mktemp("full_wrapped"))
    loop.train(tiny_config(data, replay_capacity=CAPACITY), workdir, progress=False, tensorboard=False)
    return workdir


def _kill_after_checkpoint(proc, checkpoints, step, deadline_s=600):
    """SIGKILLs ``proc`` as soon as a checkpoint of ``step`` or later exists (polled every
    20 ms); returns whether it did."""
    deadline = time.time() + deadline_s
    while time.time() < deadline and proc.poll() is None:
        done = [int(p.name) for p in checkpoints.glob("*") if p.name.isdigit()] if checkpoints.exists() else []
        if done and max(done) >= step:
            proc.send_signal(signal.SIGKILL)
            return True
        time.sleep(0.02)
    return False


@pytest.mark.parametrize("resume_in", [
    "this process",
    # a second training process (~45 s more on 2 busy cores); the resume is the same call
    pytest.param("process", marks=pytest.mark.slow),
])
def test_resume_after_sigkill_of_a_training_process(data, tmp_path, resume_in, request):
    """``python -m train`` killed with SIGKILL after self-play wrapped the replay buffer,
    then resumed (``--resume``): the same run as an uninterrupted one (parameters,
    optimiser state, replay buffer and count, checkpoint metadata, metrics)."""
    import concurrent.futures

    config = tiny_config(data, replay_capacity=CAPACITY)
    cfg_path = tmp_path / "config.yaml"
    cfg_path.write_text(yaml.safe_dump(config.to_dict()))
    workdir = tmp_path / "run"
    cmd = [sys.executable, "-m", "train", "--config", str(cfg_path), "--workdir", str(workdir), "--no-progress"]
    # the in-process reference runs with the test settings (conftest.py)
    env = dict(os.environ, JAX_PLATFORMS="cpu", JAX_DISABLE_MOST_OPTIMIZATIONS="1")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    wrapped = config.warm_start.steps + 1  # the first self-play step wraps the buffer
    with open(tmp_path / "killed.log", "w") as log, concurrent.futures.ThreadPoolExecutor(1) as pool:
        proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            killed = pool.submit(_kill_after_checkpoint, proc, workdir / "checkpoints", wrapped)
            reference = request.getfixturevalue("full_run_wrapped")  # meanwhile, on the other core
            log_tail = lambda: (tmp_path / "killed.log").read_text()[-2000:]
            assert killed.result(), f"the run ended before it was killed: {log_tail()}"
            assert proc.wait(timeout=60) == -signal.SIGKILL
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    killed_at, count = _stored_replay_count(str(workdir), config)  # what the resume will restore
    assert wrapped <= killed_at < config.warm_start.steps + config.steps
    assert count > CAPACITY and count % CAPACITY  # wrapped, and the next sample does not go to slot 0
    if resume_in == "process":
        resumed = subprocess.run(cmd + ["--resume"], cwd=root, env=env, capture_output=True, text=True,
                                 timeout=900)
        assert resumed.returncode == 0, resumed.stderr[-3000:]
        assert f"resumed from step {killed_at}" in resumed.stderr
    else:
        loop.train(config, str(workdir), resume=True, progress=False)
    _assert_same_run(str(workdir), reference, config)


# ---------------------------------------------------------------------------------
# data parallelism


def test_two_devices_data_parallel(data, tmp_path):
    config = dataclasses.replace(tiny_config(data), steps=2, devices=2)
    cfg_path = tmp_path / "c.json"
    cfg_path.write_text(json.dumps(config.to_dict()))
    script = textwrap.dedent(f"""
        import json, jax
        from train import config as C, loop
        config = C.from_dict(json.load(open({str(cfg_path)!r})))
        out = loop.train(config, {str(tmp_path / 'run')!r}, progress=False, tensorboard=False)
        leaf = jax.tree_util.tree_leaves(out["params"])[0]
        print("RESULT", len(jax.devices()), out["devices"], len(leaf.sharding.device_set), out["loss"])
    """)
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2", JAX_PLATFORMS="cpu")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env,
                          cwd=os.path.dirname(os.path.dirname(__file__)), timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT")][-1].split()
    assert line[1:4] == ["2", "2", "2"]  # two devices, a 2-device mesh, parameters replicated on both
    assert np.isfinite(float(line[4]))


def test_export_writes_a_loadable_model_with_its_training_record(full_run, tmp_path):
    from train import export

    import alphagrad

    workdir, out = full_run
    written = export.export(workdir, str(tmp_path / "model"))
    assert sorted(written) == ["README.md", "config.json", "model.safetensors"]
    card = (tmp_path / "model" / "README.md").read_text()
    assert "## Validation curve" in card and f"| {out['step']} |" in card
    assert "warm-start" in card and "wall time" in card
    evaluation = card[card.index("## Evaluation"):card.index("## Configuration")]
    assert "<!-- results:start -->" in evaluation and "<!-- results:end -->" in evaluation  # for eval.readme_results
    agent = alphagrad.from_pretrained(str(tmp_path / "model"))
    best = alphagrad.from_pretrained(os.path.join(workdir, "best_model"))
    for a, b in zip(jax.tree_util.tree_leaves(agent.params), jax.tree_util.tree_leaves(best.params)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_changed_config_keys_are_listed_for_the_resume_warning():
    assert loop._changed_keys({"a": 1, "n": {"b": 2}}, {"a": 1, "n": {"b": 3}}) == ["n.b 2 -> 3"]
