"""Training: config errors, learning on a tiny run, exact resume, corrupted checkpoints,
and data parallelism over two (host-platform) devices."""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import shutil
import subprocess
import sys
import textwrap

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
    with open(os.path.join(workdir, "metrics.csv")) as f:
        steps = [int(line.split(",")[0]) for line in f.read().splitlines()[1:]]
    assert steps == list(range(1, out["step"] + 1))  # no duplicated rows after the resume


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
