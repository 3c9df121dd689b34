"""Supervised training on labelled states: config errors before any work (including labels
of another schema version or of another build, and networks over the family's limits),
every labelled state once per epoch, a tiny run that lowers the loss and writes metrics,
checkpoints and a loadable best model, and exact resume (after ``stop_after``, from a
corrupted checkpoint, after ``max_seconds`` and after a SIGKILL of ``python -m train``)."""

from __future__ import annotations

import collections
import csv
import dataclasses
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import jax
import numpy as np
import pytest
import yaml

from data_gen import labels as L
from data_gen.__main__ import main as data_gen_main
from train import __main__ as cli
from train import config as C
from train import data as TD
from train import loop

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SMOKE = os.path.join(ROOT, "train", "configs", "smoke.yaml")
LABELS = L.LabelConfig(moves_per_vertex=10, min_moves=300, max_moves=2000, positions=16, horizon=32, chunk_size=8)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """A tiny dataset (24 random programs), labelled once for the module."""
    out = str(tmp_path_factory.mktemp("train_data") / "data")
    assert data_gen_main(["build", "--out", out, "--num-random", "24", "--seed", "3", "--large", "0",
                          "--num-heldout", "0", "--zoo", "none", "--no-progress", "--quiet"]) == 0
    L.build_labels(out, LABELS, progress=False)
    return out


#: The smoke config shrunk to one bucket and a small network: one compiled update.
TINY = {"steps": 20, "buckets": [64], "tokens_per_batch": 1024, "states_per_graph": 8, "learning_rate": 0.003,
        "eval_every": 5, "checkpoint_every": 2, "keep_checkpoints": 2,
        "network": {"dim": 16, "heads": 2, "layers": 1},
        "data.max_vertices": 64, "data.max_validation_graphs": 4}


def tiny_config(path, **changes) -> C.TrainConfig:
    return C.load(SMOKE, {**TINY, "data.path": path, **changes})


def _params(out):
    return jax.tree_util.tree_leaves(jax.device_get(out["params"]))


@pytest.fixture(scope="module")
def full_run(data, tmp_path_factory):
    workdir = str(tmp_path_factory.mktemp("full"))
    return workdir, loop.train(tiny_config(data), workdir, progress=False, tensorboard=False)


# ---------------------------------------------------------------------------------
# config errors


def test_unknown_key_wrong_type_and_missing_dataset_are_config_errors(tmp_path):
    with pytest.raises(C.ConfigError, match=r"unknown key\(s\) data.pth"):
        C.from_dict({"data": {"pth": "x"}})
    with pytest.raises(C.ConfigError, match=r"unknown key\(s\) warm_start"):  # self-play settings are gone
        C.from_dict({"warm_start": {"steps": 3}})
    with pytest.raises(C.ConfigError, match="steps must be of type int"):
        C.from_dict({"steps": "many"})
    with pytest.raises(C.ConfigError, match="buckets must be a non-empty list of integers"):
        C.from_dict({"buckets": 64})
    with pytest.raises(C.ConfigError, match="data.labels must be a non-empty list of names"):
        C.from_dict({"data": {"labels": []}})
    with pytest.raises(C.ConfigError, match="buckets must be increasing powers of two"):
        C.from_dict({"buckets": [64, 96]}).validate(check_paths=False)
    with pytest.raises(C.ConfigError, match="learning_rate must be a number"):
        C.from_dict({"learning_rate": "fast"})
    with pytest.raises(C.ConfigError, match="states_per_graph must be positive"):
        C.from_dict({"states_per_graph": 0}).validate(check_paths=False)
    with pytest.raises(C.ConfigError, match="does not exist; build a dataset first"):
        C.from_dict({"data": {"path": str(tmp_path / "nowhere")}}).validate()
    with pytest.raises(C.ConfigError, match="larger than the largest bucket"):
        C.from_dict({"buckets": [64], "data": {"max_vertices": 100}}).validate(check_paths=False)
    config = tmp_path / "bad.yaml"
    config.write_text("steps: 3\nnetwork: {width: 3}\n")
    assert cli.main(["--config", str(config), "--workdir", str(tmp_path / "run")]) == 2
    assert not (tmp_path / "run").exists()  # stopped before training started


@pytest.mark.parametrize("network,message", [
    ({"dim": C.MAX_DIM * 2, "heads": 4, "layers": 2}, "larger than this model family's limits"),
    ({"dim": 32, "heads": 4, "layers": C.MAX_LAYERS + 1}, "larger than this model family's limits"),
    ({"dim": 30, "heads": 4, "layers": 2}, "must be a positive multiple of network.heads"),
    ({"dim": 32, "heads": 4, "layers": 2, "encodings": 0}, "network.encodings=0 must be from 1"),
    ({"dim": 32, "heads": 4, "layers": 2, "encodings": C.MAX_ENCODINGS + 1}, "must be from 1"),
])
def test_networks_over_the_limits_are_config_errors(network, message, tmp_path, capsys):
    with pytest.raises(C.ConfigError, match=message):
        C.from_dict({"network": network}).validate(check_paths=False)
    at_limit = C.from_dict({"network": {"dim": C.MAX_DIM, "heads": 8, "layers": C.MAX_LAYERS}})
    at_limit.validate(check_paths=False)
    config = tmp_path / "big.yaml"
    config.write_text(yaml.safe_dump({"network": network}))
    assert cli.main(["--config", str(config), "--workdir", str(tmp_path / "run")]) == 2
    assert message in capsys.readouterr().err and not (tmp_path / "run").exists()


@pytest.mark.parametrize("setting,message", [
    ("learning_rate=.nan", "learning_rate must be a finite number, got nan"),
    ("learning_rate=.inf", "learning_rate must be a finite number, got inf"),
    ("learning_rate=0", "learning_rate must be positive"),
    ("value_weight=.nan", "value_weight must be a finite number"),
    ("weight_decay=-0.1", "weight_decay must be >= 0"),
    ("grad_clip=0", "grad_clip must be positive"),
    ("ema_decay=.nan", "ema_decay must be a finite number"),
    ("seed=-1", "seed must be >= 0"),
])
def test_numeric_settings_out_of_range_are_refused_before_training(setting, message, tmp_path, capsys):
    """NaN passes every comparison, so each number is checked finite, then in range: a
    run on a NaN learning rate used to train until its export failed."""
    assert cli.main(["--config", SMOKE, "--set", setting, "--set", f"data.path={tmp_path}",
                     "--workdir", str(tmp_path / "run")]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "run").exists()  # stopped before training started


def test_cli_reports_config_errors(tmp_path, capsys):
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({"data": {"path": str(tmp_path / "missing")}}))
    assert cli.main(["--config", str(config), "--workdir", str(tmp_path / "run")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_the_kept_configs_are_valid_diffs_over_base():
    """smoke, main and shipped load over base.yaml; the shipped config's starting model is
    not in the tree, so its header says which commit holds it (and git has it there)."""
    configs = {name: C.load(os.path.join(ROOT, "train", "configs", f"{name}.yaml"))
               for name in ("base", "smoke", "main", "shipped")}
    for config in configs.values():
        config.validate(check_paths=False)
    assert configs["main"] == configs["base"]
    assert configs["smoke"].data.path == "data/smoke" and configs["smoke"].steps == 6
    assert configs["smoke"].data.max_validation_graphs == 8
    shipped = configs["shipped"]
    # nested keys merge: the data path and limits come from base, the label sets from shipped
    assert shipped.data.path == "data/train" and shipped.data.max_vertices == 2048
    assert shipped.data.labels[-1] == "improve-r3" and shipped.seed == 27
    header = open(os.path.join(ROOT, "train", "configs", "shipped.yaml")).read()
    commit = re.search(r"git restore --source=(\w+) --worktree -- (\S+)", header)
    assert commit and commit.group(2) == shipped.init_from
    has_commit = shutil.which("git") and subprocess.run(
        ["git", "cat-file", "-e", commit.group(1)], cwd=ROOT, capture_output=True).returncode == 0
    if has_commit:  # a shallow clone lacks the history; a full one must hold the model
        probe = subprocess.run(["git", "cat-file", "-e", f"{commit.group(1)}:{shipped.init_from}/model.safetensors"],
                               cwd=ROOT, capture_output=True)
        assert probe.returncode == 0, f"commit {commit.group(1)} does not hold {shipped.init_from}"


def test_base_keys_merge_and_bad_bases_are_clear_errors(tmp_path):
    (tmp_path / "a.yaml").write_text("steps: 7\nnetwork: {dim: 32, heads: 4, layers: 2}\ndata: {path: x, max_vertices: 512}\n")
    (tmp_path / "b.yaml").write_text("base: a.yaml\nnetwork: {layers: 3}\ndata: {path: y}\n")
    config = C.load(str(tmp_path / "b.yaml"))
    assert (config.steps, config.network.dim, config.network.layers) == (7, 32, 3)
    assert (config.data.path, config.data.max_vertices) == ("y", 512)
    (tmp_path / "c.yaml").write_text("base: c.yaml\n")
    with pytest.raises(C.ConfigError, match="its own base"):
        C.load(str(tmp_path / "c.yaml"))
    (tmp_path / "d.yaml").write_text("base: nope.yaml\n")
    with pytest.raises(C.ConfigError, match="does not exist"):
        C.load(str(tmp_path / "d.yaml"))
    (tmp_path / "e.yaml").write_text("- 1\n- 2\n")
    with pytest.raises(C.ConfigError, match="mapping"):
        C.load(str(tmp_path / "e.yaml"))


def test_fresh_inputs_start_the_inputs_a_model_lacks_from_the_random_initialisation(data, full_run, tmp_path):
    """A model saved before the decoder read the last move's touch (and the encoder the
    edges' costs in multiplications) loads with zero weights on them (it plays as before);
    with fresh_inputs the run starts those weights from its own random initialisation
    instead, and every other weight from the model."""
    from safetensors.numpy import load_file, save_file

    workdir, _ = full_run
    narrow = str(tmp_path / "narrow")
    shutil.copytree(os.path.join(workdir, "best_model"), narrow)
    with open(os.path.join(narrow, "config.json")) as f:  # saved before checksums were recorded too
        saved = {k: v for k, v in json.load(f).items() if k != "weights_sha256"}
    with open(os.path.join(narrow, "config.json"), "w") as f:
        json.dump(saved, f)
    weights = load_file(os.path.join(narrow, "model.safetensors"))
    weights["params/first/kernel"] = weights["params/first/kernel"][:-1]  # without the touch
    edge = "params/blocks_0/ek/kernel"  # and without the edges' costs in multiplications
    weights[edge] = weights[edge][:-2]
    save_file(weights, os.path.join(narrow, "model.safetensors"))
    config = tiny_config(data, init_from=narrow)
    template = loop.init_params(config, jax.random.key(config.seed))
    start = loop.start_params(config, template)
    fresh = loop.start_params(tiny_config(data, init_from=narrow, fresh_inputs=True), template)
    kernel = lambda p: np.asarray(p["params"]["first"]["kernel"])
    assert not kernel(start)[-1].any()  # zero: plays as the saved model
    np.testing.assert_array_equal(kernel(fresh)[-1], kernel(template)[-1])
    assert kernel(fresh)[-1].any()
    np.testing.assert_array_equal(kernel(fresh)[:-1], kernel(start)[:-1])
    ek = lambda p: np.asarray(p["params"]["blocks_0"]["ek"]["kernel"])
    assert not ek(start)[-2:].any() and ek(fresh)[-2:].any()
    np.testing.assert_array_equal(ek(fresh)[-2:], ek(template)[-2:])
    np.testing.assert_array_equal(ek(fresh)[:-2], ek(start)[:-2])
    same = jax.tree_util.tree_map(lambda a, b: bool(np.array_equal(a, b)), start["params"]["second"],
                                  fresh["params"]["second"])
    assert all(jax.tree_util.tree_leaves(same))
    with pytest.raises(C.ConfigError, match="fresh_inputs .* init_from is"):
        tiny_config(data, fresh_inputs=True).validate()


def _copy(data, tmp_path):
    out = str(tmp_path / "data")
    shutil.copytree(data, out)
    return out


def test_labels_of_another_schema_version_are_a_config_error(data, tmp_path):
    copy = _copy(data, tmp_path)
    manifest = os.path.join(copy, "labels", "labels.json")
    with open(manifest) as f:
        m = json.load(f)
    m["config"]["label_schema_version"] = L.LABEL_SCHEMA_VERSION + 1
    with open(manifest, "w") as f:
        json.dump(m, f)
    workdir = tmp_path / "run"
    with pytest.raises(C.ConfigError, match=rf"schema version {L.LABEL_SCHEMA_VERSION + 1}.*rebuild them with "
                                            rf"`python -m data_gen label --data {copy}`"):
        loop.train(tiny_config(copy), str(workdir), progress=False, tensorboard=False)
    assert not (workdir / "checkpoints").exists()
    shutil.rmtree(os.path.join(copy, "labels"))
    with pytest.raises(C.ConfigError, match=rf"no labels in .*python -m data_gen label --data {copy}"):
        loop.train(tiny_config(copy), str(tmp_path / "run2"), progress=False, tensorboard=False)


def test_labels_that_do_not_match_their_graph_are_a_config_error(data, tmp_path):
    """Labels of another build of the dataset (here: one graph's best baseline differs)."""
    import datasets as hf

    copy = _copy(data, tmp_path)
    lab = L.load_labels(copy)
    changed = lab["train"].map(lambda r, i: {"best_baseline": r["best_baseline"] + (i == 1)}, with_indices=True)
    tmp = str(tmp_path / "labels_tmp")
    hf.DatasetDict({"train": changed, "validation": lab["validation"]}).save_to_disk(tmp)
    del lab, changed
    shutil.rmtree(os.path.join(copy, "labels", "train"))
    shutil.move(os.path.join(tmp, "train"), os.path.join(copy, "labels", "train"))
    hash1 = hf.load_from_disk(copy)["train"][1]["graph_hash"]
    with pytest.raises(C.ConfigError, match=rf"labels 'labels' of graph {hash1} .* do not match the graph.*rebuild them"):
        TD.load_split(copy, "train", (64, 128, 256), 256)
    with pytest.raises(C.ConfigError, match="do not match the graph"):
        loop.train(tiny_config(copy, **{"data.max_vertices": 256, "buckets": [64, 128, 256]}),
                   str(tmp_path / "run"), progress=False, tensorboard=False)


def test_graphs_over_the_limit_are_left_out_and_counted(data):
    d = TD.load_split(data, "train", (64,), 30)
    assert all(r["num_vertices"] <= 30 for r in d.rows)
    assert d.skipped["more than max_vertices"] > 0
    full = TD.load_split(data, "train", (64, 128, 256), 256)
    assert len(full) == len(d) + d.skipped["more than max_vertices"] and not full.skipped
    assert (full.bucket == [TD.bucket_of(r["num_vertices"], (64, 128, 256)) for r in full.rows]).all()
    with pytest.raises(C.ConfigError, match="no labelled graph"):
        TD.load_split(data, "train", (64,), 4)


def test_extra_datasets_join_the_training_graphs_without_duplicates(data, tmp_path, caplog):
    """data.extra_paths: another labelled dataset's training graphs are trained on beside
    data.path's (graphs already there left out and counted); validation stays on data.path."""
    other = str(tmp_path / "other")
    assert data_gen_main(["build", "--out", other, "--num-random", "6", "--seed", "4", "--large", "0",
                          "--num-heldout", "0", "--zoo", "none", "--no-progress", "--quiet"]) == 0
    L.build_labels(other, LABELS, progress=False)
    buckets = (64, 128, 256)
    base, extra = TD.load_split(data, "train", buckets, 256), TD.load_split(other, "train", buckets, 256)
    both = base.joined(extra)
    assert [r["graph_hash"] for r in both.rows] == [r["graph_hash"] for r in base.rows + extra.rows]
    assert (both.bucket == np.concatenate([base.bucket, extra.bucket])).all()
    same = base.joined(base)
    assert [r["graph_hash"] for r in same.rows] == [r["graph_hash"] for r in base.rows]
    assert same.skipped["duplicate"] == len({r["graph_hash"] for r in base.rows})
    with caplog.at_level("INFO", logger="train"):
        loop.train(tiny_config(data, **{"data.extra_paths": [other], "steps": 1}), str(tmp_path / "run"),
                   progress=False, tensorboard=False)
    fits = TD.load_split(data, "train", (64,), 64).joined(TD.load_split(other, "train", (64,), 64))
    assert f"train graphs: {len(fits)} " in caplog.text and len(fits) > len(TD.load_split(data, "train", (64,), 64))
    with pytest.raises(C.ConfigError, match="dagger-9"):  # extra_labels names the label sets read there
        loop.train(tiny_config(data, **{"data.extra_paths": [other], "data.extra_labels": ["labels", "dagger-9"],
                                        "steps": 1}), str(tmp_path / "run2"), progress=False, tensorboard=False)
    with pytest.raises(C.ConfigError, match="extra_paths names .* not a dataset directory"):
        C.from_dict({"data": {"path": data, "extra_paths": [str(tmp_path / "nowhere")]}}).validate()


def test_large_validation_moves_large_training_graphs_to_validation(data, tmp_path, caplog):
    """data.large_validation: the validation split holds small graphs only, so that many
    training graphs of data.large_from+ intermediates (the smallest hashes) leave training,
    join validation and are reported apart (val_large_ratio)."""
    base = TD.load_split(data, "train", (64,), 64)
    sizes = sorted(r["num_intermediates"] for r in base.rows)
    large_from = sizes[len(sizes) // 2]
    chosen = TD.large_graphs(base, 3, large_from, "labels")
    big = sorted(r["graph_hash"] for r in base.rows if r["num_intermediates"] >= large_from)
    assert chosen == set(big[:3])
    shuffled = TD.LabelledGraphs(base.rows[::-1], base.bucket[::-1], {})
    assert TD.large_graphs(shuffled, 3, large_from, "labels") == chosen  # whatever order the rows come in
    kept, held = base.split_off(chosen, "labels")
    assert {r["graph_hash"] for r in held.rows} == chosen and len(held) == 3
    assert not chosen & {r["graph_hash"] for r in kept.rows} and len(kept) == len(base) - 3
    assert kept.skipped["large validation"] == 3
    workdir = str(tmp_path / "run")
    with caplog.at_level("INFO", logger="train"):
        loop.train(tiny_config(data, **{"data.large_validation": 3, "data.large_from": large_from, "steps": 1}),
                   workdir, progress=False, tensorboard=False)
    assert f"train graphs: {len(base) - 3} " in caplog.text and "'large validation': 3" in caplog.text
    validation = len(TD.load_split(data, "validation", (64,), 64, 4))  # data.max_validation_graphs 4
    assert f"validation graphs: {validation + 3};" in caplog.text
    row = _metrics(workdir)[-1]
    assert 0 < float(row["val_large_ratio"]) and row["val_ratio"] != ""
    with pytest.raises(C.ConfigError, match="large_validation=99 asks for more training graphs"):
        loop.train(tiny_config(data, **{"data.large_validation": 99, "steps": 1}), str(tmp_path / "run2"),
                   progress=False, tensorboard=False)
    with pytest.raises(C.ConfigError, match="large_validation must be >= 0"):
        tiny_config(data, **{"data.large_validation": -1}).validate()


# ---------------------------------------------------------------------------------
# batches


@pytest.mark.parametrize("encodings", [1, 3])
def test_every_labelled_state_appears_once_per_epoch(data, encodings):
    """Once per epoch, in batches of one bucket; a graph's states in one visit share its
    encoder pass, so they lie in one stretch of the order where the network encodes the
    graph ``encodings`` times a game."""
    d = TD.load_split(data, "train", (64, 128, 256), 256, encodings=encodings)
    assert len(np.unique(d.bucket)) > 1
    tokens, K = 2048, 8
    everything = collections.Counter((i, int(w)) for i, r in enumerate(d.rows) for w in range(len(r["positions"])))
    epochs = []
    for epoch in range(3):
        batches = TD.epoch_batches(d, 0, epoch, tokens, K)
        seen = collections.Counter((i, int(w)) for b in batches for i, which in b for w in which)
        assert seen == everything  # every (graph, position) exactly once
        for b in batches:
            assert len({int(d.bucket[i]) for i, _ in b}) == 1  # one bucket per batch
            assert len(b) <= max(1, tokens // (int(d.bucket[b[0][0]]) * K))
            assert all(1 <= len(which) <= K for _, which in b)
            for i, which in b:
                n, pos = len(d.rows[i]["order"]), np.asarray(d.rows[i]["positions"])[which]
                assert len(set(pos // -(-n // encodings))) == 1
        epochs.append([[(i, list(map(int, w))) for i, w in b] for b in batches])
    assert epochs[0] != epochs[1]  # a new order every epoch
    again = TD.epoch_batches(d, 0, 1, tokens, K)
    assert [[(i, list(map(int, w))) for i, w in b] for b in again] == epochs[1]  # drawn from (seed, epoch)
    assert [[(i, list(map(int, w))) for i, w in b] for b in TD.epoch_batches(d, 1, 1, tokens, K)] != epochs[1]


@pytest.mark.parametrize("encodings", [1, 4])
def test_a_batch_holds_the_labels_of_its_states(data, encodings):
    """Each graph slot holds the encoder inputs of the graph left at the start of its
    states' stretch (the traced graph with one encoding a game) and their labels."""
    from alphagrad import features

    config = tiny_config(data)
    d = TD.load_split(data, "train", (64,), 64, encodings=encodings)
    batches = TD.epoch_batches(d, 0, 0, config.tokens_per_batch, config.states_per_graph)
    visits = next(b for b in batches if encodings == 1 or min(d.stretch(i, np.asarray(d.rows[i]["positions"])[w]).min()
                                                              for i, w in b) > 0)
    V, E, K, G = TD.batch_shape(d, visits, config)
    assert (V, K, G) == (64, 8, 2) and E >= 4 * 64
    batch = TD.make_batch(d, visits, V, E, K, G)
    for g, (i, which) in enumerate(visits):
        row, n = d.rows[i], d.rows[i]["num_vertices"]
        order = row["order"]
        start = int(d.stretch(i, [row["positions"][min(which)]])[0])
        graph, ev = d.evaluated(i)
        inputs = features.graph_inputs(graph, ev, d.scale(i), order[:start])
        assert batch["vmask"][g].sum() == n - start and batch["num_edges"][g] == len(inputs["src"])
        if start == 0:
            assert batch["num_edges"][g] == row["num_edges"]
        np.testing.assert_array_equal(batch["static"][g, :n], inputs["static"])
        np.testing.assert_array_equal(batch["src"][g, :len(inputs["src"])], inputs["src"])
        assert batch["weight"][g].tolist() == [1.0] * len(which) + [0.0] * (K - len(which))
        for k, w in enumerate(sorted(which)):
            t = row["positions"][w]
            assert set(np.flatnonzero(batch["legal"][g, k])) == set(order[t:])
            assert set(np.flatnonzero(batch["target"][g, k])) == set(row["moves"][w])
            assert batch["target"][g, k].sum() == pytest.approx(1.0)
            r = row["regrets"][w]  # regrets of the candidates order[t:t + len(r)], log1p'd; 0 elsewhere
            np.testing.assert_allclose(batch["regret"][g, k, order[t:t + len(r)]], np.log1p(r), rtol=1e-6)
            assert not batch["regret"][g, k, order[t + len(r):]].any() and min(r) == 0
            assert all(batch["regret"][g, k, v] == 0 for v in row["moves"][w])  # the best moves cost nothing more
            assert batch["value"][g, k] == pytest.approx(row["to_go"][w] / max(row["best_baseline"], 1), rel=1e-6)
            assert batch["progress"][g, k] == pytest.approx(t / len(order), rel=1e-6)
        assert not batch["legal"][g, len(which):].any()


def test_stakes_weigh_the_states_of_graphs_where_markowitz_loses_most(data):
    config = tiny_config(data)
    d = TD.load_split(data, "train", (64,), 64)
    visits = TD.epoch_batches(d, 0, 0, config.tokens_per_batch, config.states_per_graph)[0]
    shape = TD.batch_shape(d, visits, config)
    plain, weighted = TD.make_batch(d, visits, *shape), TD.make_batch(d, visits, *shape, stakes_weight=2.0)
    for g, (i, which) in enumerate(visits):
        r = d.rows[i]
        ratio = min(max(r["cost_markowitz"], r["cost"], 1) / max(r["cost"], 1), TD.STAKES_CAP)
        assert plain["weight"][g, :len(which)].tolist() == [1.0] * len(which)
        np.testing.assert_allclose(weighted["weight"][g, :len(which)], ratio ** 2, rtol=1e-6)
        assert not weighted["weight"][g, len(which):].any()
    assert max(d.stakes(i) for i in range(len(d))) > 0  # some graph where Markowitz loses
    with pytest.raises(C.ConfigError, match="stakes_weight must be >= 0"):
        tiny_config(data, stakes_weight=-1.0).validate()
    with pytest.raises(C.ConfigError, match="regret_weight must be >= 0"):
        tiny_config(data, regret_weight=-0.5).validate()
    with pytest.raises(C.ConfigError, match="regret_weight must be a finite number, got nan"):
        tiny_config(data, regret_weight=float("nan")).validate()


# ---------------------------------------------------------------------------------
# learning, outputs


def test_tiny_run_lowers_the_loss_on_the_training_states(data, full_run):
    """The loss over every labelled training state, before and after the 20 steps."""
    from alphagrad.network import policy_loss

    _, out = full_run
    config = tiny_config(data)
    d = TD.load_split(data, "train", tuple(config.buckets), config.data.max_vertices)
    net = loop.network(config)
    fn = jax.jit(lambda p, b: policy_loss(net, p, b, config.value_weight, config.regret_weight)[1])

    def average(params):
        ms = [fn(params, TD.make_batch(d, v, *TD.batch_shape(d, v, config)))
              for v in TD.epoch_batches(d, 0, 0, config.tokens_per_batch, config.states_per_graph)]
        return {k: float(np.mean([m[k] for m in ms])) for k in ms[0]}

    before = average(loop.init_params(config, jax.random.key(config.seed)))
    after = average(out["params"])
    assert after["policy_loss"] < before["policy_loss"] - 0.03, (before, after)
    assert after["excess"] < before["excess"] and after["accuracy"] > before["accuracy"]
    assert after["value_loss"] < 0.6 * before["value_loss"]
    assert out["step"] == config.steps
    assert np.isfinite(out["loss"]) and np.isfinite(out["val_ratio"]) and out["val_ratio"] > 0


def _metrics(workdir):
    with open(os.path.join(workdir, "metrics.csv")) as f:
        return list(csv.DictReader(f))


def test_run_writes_metrics_checkpoints_and_the_best_model(data, full_run):
    import alphagrad
    from alphagrad import hub

    workdir, out = full_run
    rows = _metrics(workdir)
    assert [int(r["step"]) for r in rows] == [5, 10, 15, 20]  # every eval_every steps
    for key in ("loss", "policy_loss", "value_loss", "accuracy", "val_ratio", "val_label_ratio", "val_policy_loss",
                "val_value_loss", "val_accuracy", "epoch", "samples", "wall_s"):
        assert all(r[key] != "" for r in rows), key
    assert float(rows[-1]["epoch"]) > 1  # more than one pass over the tiny data
    steps = sorted(int(s) for s in os.listdir(os.path.join(workdir, "checkpoints")) if s.isdigit())
    assert steps[-2:] == [18, 20]  # the last K (K=2), plus the best by validation
    best_step = min(reversed(rows), key=lambda r: float(r["val_ratio"]))["step"]  # the newest of tied bests
    assert int(best_step) in steps
    assert sorted(os.listdir(os.path.join(workdir, "best_model"))) == ["README.md", "config.json",
                                                                       "model.safetensors"]
    with open(os.path.join(workdir, "config.json")) as f:
        assert C.from_dict(json.load(f)) == tiny_config(data)
    agent = alphagrad.from_pretrained(os.path.join(workdir, "best_model"))
    assert agent.config["network"] == {"dim": 16, "heads": 2, "layers": 1, "encodings": 1}
    assert agent.max_vertices == tiny_config(data).max_vertices
    # the best model holds the parameters of the best validation step's checkpoint
    meta = _final_state(workdir, tiny_config(data))[2]
    assert meta["best_step"] == int(best_step) and meta["best_val_ratio"] == float(
        min(rows, key=lambda r: float(r["val_ratio"]))["val_ratio"])
    _, state, _ = _final_state(workdir, tiny_config(data), step=int(best_step))
    _, params = hub.load_files(os.path.join(workdir, "best_model"))
    for a, b in zip(jax.tree_util.tree_leaves(params), jax.tree_util.tree_leaves(jax.device_get(state["params"]))):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    # and plays: a complete order on a new function
    import jax.numpy as jnp

    order = agent.greedy_order(lambda x, y: jnp.sin(x * y) + jnp.cos(x) * y, 0.5, 0.3)
    assert len(order) >= 2


def test_export_writes_a_loadable_model_with_its_training_record(full_run, tmp_path):
    import alphagrad
    from train import export

    workdir, out = full_run
    written = export.export(workdir, str(tmp_path / "model"))
    assert sorted(written) == ["README.md", "config.json", "model.safetensors"]
    card = (tmp_path / "model" / "README.md").read_text()
    assert "## Validation curve" in card and f"| {out['step']} |" in card and "wall time" in card
    assert "warm-start" not in card and "self-play" not in card
    evaluation = card[card.index("## Evaluation"):card.index("## Configuration")]
    assert "<!-- results:start -->" in evaluation and "<!-- results:end -->" in evaluation  # for eval.readme_results
    agent = alphagrad.from_pretrained(str(tmp_path / "model"))
    best = alphagrad.from_pretrained(os.path.join(workdir, "best_model"))
    for a, b in zip(jax.tree_util.tree_leaves(agent.params), jax.tree_util.tree_leaves(best.params)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_export_step_writes_that_checkpoints_network_and_refuses_a_step_not_kept(full_run, tmp_path):
    """``--step`` exports a kept checkpoint (the last one here: its parameters, not the best
    model's unless they are the same step) and names the steps kept when given another."""
    import alphagrad
    from train import export

    workdir, out = full_run
    kept = sorted(int(d) for d in os.listdir(os.path.join(workdir, "checkpoints")) if d.isdigit())
    assert kept[-1] == out["step"]
    export.export(workdir, str(tmp_path / "last"), step=kept[-1])
    card = (tmp_path / "last" / "README.md").read_text()
    assert "exported step (not the best by validation)" in card
    last = alphagrad.from_pretrained(str(tmp_path / "last"))
    for a, b in zip(jax.tree_util.tree_leaves(last.params), _params(out)):  # the run's final parameters
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    with pytest.raises(SystemExit):
        export.main(["--workdir", workdir, "--out", str(tmp_path / "none"), "--step", str(kept[-1] + 1)])
    assert not (tmp_path / "none").exists()


def test_export_card_says_what_the_run_trained_on_from_its_own_record(full_run, tmp_path):
    """The card's data row comes from the run's data.json (label sets and what the trainer
    took from them), not from whatever data this machine holds now; a run without one
    names its datasets only."""
    from train import export

    workdir, _ = full_run
    with open(os.path.join(workdir, "data.json")) as f:
        record = json.load(f)
    [labels] = record["label_sets"]
    assert labels["name"] == "labels" and labels["rows"]["train"] > 0 and record["train_graphs"] > 0
    config = json.load(open(os.path.join(workdir, "config.json")))
    text = export.data_record(workdir, config)
    assert f"{labels['path']}/labels: {labels['rows']}" in text and f"trained on {record['train_graphs']} graphs" in text
    old = tmp_path / "old_run"
    shutil.copytree(workdir, old)
    os.remove(old / "data.json")
    assert export.data_record(str(old), {"data": {"path": "data/a", "labels": ["labels", "d1"], "extra_paths": ["data/b"],
                                                  "extra_labels": ["labels"]}}) == (
        "data/a (labels, d1); data/b (labels) (rows not recorded: the run predates data.json)")


def test_export_lineage_names_every_earlier_run_until_one_that_is_not_a_run(tmp_path):
    """The card's "earlier runs": each ``init_from`` run with its steps and wall time,
    ending at a start that is not a run directory (or one already named: no loop)."""
    from train import export

    def run(name, init, step, wall):
        d = tmp_path / name
        (d / "best_model").mkdir(parents=True)
        (d / "config.json").write_text(json.dumps({"init_from": init}))
        (d / "metrics.csv").write_text(f"step,wall_s\n{step // 2},1\n{step},{wall}\n")
        return str(d / "best_model")

    first = run("first", "alphagrad/pretrained", 100, 3600)
    second = run("second", first, 20, 720)
    assert export.lineage({"init_from": second}) == (
        f"{tmp_path / 'second'} (20 steps, 0.20 h) <- {tmp_path / 'first'} (100 steps, 1.00 h) <- "
        "alphagrad/pretrained (as it was then)")
    assert export.lineage({}) == "none (random initialisation)"
    (tmp_path / "first" / "config.json").write_text(json.dumps({"init_from": second}))  # a loop
    assert export.lineage({"init_from": second}).endswith(f"<- {second} (as it was then)")


def test_refuses_to_overwrite_a_run(data, full_run):
    workdir, _ = full_run
    before = _metrics(workdir)
    with pytest.raises(C.ConfigError, match="--resume"):
        loop.train(tiny_config(data), workdir, progress=False, tensorboard=False)
    assert _metrics(workdir) == before


# ---------------------------------------------------------------------------------
# resume


@pytest.fixture(scope="module")
def interrupted(data, tmp_path_factory):
    """A run stopped after 8 of its 20 steps (as if killed after its checkpoint): between
    two metrics rows (every 5 steps), so every piece of its state is under way."""
    workdir = str(tmp_path_factory.mktemp("interrupted"))
    out = loop.train(tiny_config(data), workdir, stop_after=8, progress=False, tensorboard=False)
    assert out["step"] == 8
    return workdir


def _final_state(workdir, config, step=None):
    """(step, {params, opt_state}, meta) of the newest checkpoint (or of ``step``)."""
    import orbax.checkpoint as ocp

    template = loop.initial_state(config, loop.init_params(config, jax.random.key(config.seed)), loop.optimizer(config))
    manager = loop._manager(workdir, config)
    try:
        step = manager.latest_step() if step is None else step
        out = manager.restore(step, args=ocp.args.Composite(
            train_state=ocp.args.StandardRestore(template), meta=ocp.args.JsonRestore()))
    finally:
        manager.close()
    return step, out["train_state"], dict(out["meta"])


def _assert_same_run(workdir, reference, config):
    """Same final parameters, optimiser state, checkpoint metadata, metrics (every column
    but wall time) and best model as the run in ``reference``."""
    from alphagrad import hub

    step, state, meta = _final_state(workdir, config)
    ref_step, ref_state, ref_meta = _final_state(reference, config)
    assert step == ref_step == config.steps
    flat, tree = jax.tree_util.tree_flatten(jax.device_get(state))
    ref_flat, ref_tree = jax.tree_util.tree_flatten(jax.device_get(ref_state))
    assert tree == ref_tree
    assert len(flat) > len(jax.tree_util.tree_leaves(state["params"]))  # optimiser state included
    for a, b in zip(flat, ref_flat):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    drop = lambda m: {k: v for k, v in m.items() if k != "wall_s"}
    assert drop(meta) == drop(ref_meta)
    rows, ref_rows = map(_metrics, (workdir, reference))
    assert [int(r["step"]) for r in rows] == list(range(config.eval_every, step + 1, config.eval_every))
    assert [drop(r) for r in rows] == [drop(r) for r in ref_rows]
    for a, b in zip(*(jax.tree_util.tree_leaves(hub.load_files(os.path.join(w, "best_model"))[1])
                      for w in (workdir, reference))):
        np.testing.assert_array_equal(a, b)


def test_resumed_run_equals_an_uninterrupted_one(data, full_run, interrupted, tmp_path):
    """Resumed where nothing the checkpoint holds is empty: the weights and the optimiser
    state moved, a best model, a count of samples and the metrics of the steps since the
    last row (which the next row averages)."""
    workdir = str(tmp_path / "run")
    shutil.copytree(interrupted, workdir)
    step, state, meta = _final_state(workdir, tiny_config(data))
    assert step == 8 and len(meta["window"]) == 3  # steps 6, 7 and 8
    assert meta["best_val_ratio"] is not None and meta["best_step"] == 5 and meta["samples"] > 0
    assert any(np.any(np.asarray(a) != 0) for a in jax.tree_util.tree_leaves(jax.device_get(state["opt_state"])))
    out = loop.train(tiny_config(data), workdir, resume=True, progress=False, tensorboard=False)
    for a, b in zip(_params(out), _params(full_run[1])):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    _assert_same_run(workdir, full_run[0], tiny_config(data))


def test_corrupted_latest_checkpoint_falls_back_to_the_previous_one(data, full_run, interrupted, tmp_path):
    workdir = str(tmp_path / "run")
    shutil.copytree(interrupted, workdir)
    latest = os.path.join(workdir, "checkpoints", "8")
    for path in glob.glob(os.path.join(latest, "**", "*"), recursive=True):
        if os.path.isfile(path):
            with open(path, "wb") as f:
                f.write(b"\x00garbage")
    with pytest.warns(UserWarning, match="checkpoint at step 8 cannot be restored"):
        out = loop.train(tiny_config(data), workdir, resume=True, progress=False, tensorboard=False)
    assert os.path.isdir(os.path.join(workdir, "corrupt_checkpoints", "8"))
    for a, b in zip(_params(out), _params(full_run[1])):  # resumed from step 6: same result
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    _assert_same_run(workdir, full_run[0], tiny_config(data))  # the row of step 10 averages steps 6-10


def test_max_seconds_stops_with_a_checkpoint_and_the_run_resumes(data, full_run, tmp_path):
    workdir = str(tmp_path / "run")
    config = tiny_config(data)
    out = loop.train(config, workdir, progress=False, tensorboard=False, max_seconds=0)
    assert out["step"] == 1  # the first step always runs
    assert "val_ratio" in out  # validated before stopping
    assert _final_state(workdir, config)[0] == 1
    assert [int(r["step"]) for r in _metrics(workdir)] == [1]
    out = loop.train(config, workdir, resume=True, progress=False, tensorboard=False, stop_after=3)
    assert out["step"] == 4 and _final_state(workdir, config)[0] == 4


def test_weight_average_is_what_validation_measures_and_resumes_exactly(data, interrupted, tmp_path):
    """``ema_decay``: the checkpoints carry the running average of the weights, each step
    moves it ``1 - ema_decay`` of the way to the new weights, the best model is the average
    at the best step (validation measures it), and a resumed run equals an uninterrupted
    one; turning the average on or off mid-run, or a decay outside [0, 1), is an error."""
    from alphagrad import hub

    config = tiny_config(data, ema_decay=0.5)
    full, part = str(tmp_path / "full"), str(tmp_path / "part")
    loop.train(config, full, progress=False, tensorboard=False)
    loop.train(config, part, stop_after=8, progress=False, tensorboard=False)
    _, before, _ = _final_state(part, config)
    out = loop.train(config, part, resume=True, stop_after=1, progress=False, tensorboard=False)
    assert out["step"] == 9
    for avg, old, new in zip(*(jax.tree_util.tree_leaves(jax.device_get(t))
                               for t in (out["ema"], before["ema"], out["params"]))):
        np.testing.assert_allclose(np.asarray(avg), 0.5 * np.asarray(old) + 0.5 * np.asarray(new), rtol=1e-6)
    loop.train(config, part, resume=True, progress=False, tensorboard=False)
    _assert_same_run(part, full, config)
    rows = _metrics(full)
    best_step = int(min(rows, key=lambda r: float(r["val_ratio"]))["step"])
    _, state, _ = _final_state(full, config, step=best_step)
    _, params = hub.load_files(os.path.join(full, "best_model"))
    best = jax.tree_util.tree_leaves(params)
    for a, b in zip(best, jax.tree_util.tree_leaves(jax.device_get(state["ema"]))):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert any(not np.array_equal(a, b) for a, b in zip(best, jax.tree_util.tree_leaves(state["params"])))
    with pytest.raises(C.ConfigError, match="ema_decay"):
        loop.train(tiny_config(data), full, resume=True, progress=False, tensorboard=False)
    plain = str(tmp_path / "plain")
    shutil.copytree(interrupted, plain)
    with pytest.raises(C.ConfigError, match="ema_decay"):
        loop.train(tiny_config(data, ema_decay=0.9), plain, resume=True, progress=False, tensorboard=False)
    for bad in (1.0, -0.1):
        with pytest.raises(C.ConfigError, match="ema_decay must be in"):
            tiny_config(data, ema_decay=bad).validate()


def test_changed_config_keys_are_listed_for_the_resume_warning(data, interrupted, tmp_path):
    assert loop._changed_keys({"a": 1, "n": {"b": 2}}, {"a": 1, "n": {"b": 3}}) == ["n.b 2 -> 3"]
    assert loop._changed_keys({"a": 1}, {"a": 1, "c": 2}) == ["c None -> 2"]
    workdir = str(tmp_path / "run")
    shutil.copytree(interrupted, workdir)
    with pytest.warns(UserWarning, match=r"resuming with a changed config: learning_rate 0.003 -> 0.002"):
        loop.train(tiny_config(data, learning_rate=0.002), workdir, resume=True, stop_after=1, progress=False,
                   tensorboard=False)


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
    # a second training process (~30 s more on 2 busy cores); the resume is the same call
    pytest.param("process", marks=pytest.mark.slow),
])
def test_resume_after_sigkill_of_a_training_process(data, full_run, tmp_path, resume_in):
    """``python -m train`` killed with SIGKILL mid-run, then resumed (``--resume``): the
    same run as an uninterrupted one (parameters, optimiser state, checkpoint metadata,
    metrics, best model)."""
    config = tiny_config(data)
    cfg_path = tmp_path / "config.yaml"
    cfg_path.write_text(yaml.safe_dump(config.to_dict()))
    workdir = tmp_path / "run"
    cmd = [sys.executable, "-m", "train", "--config", str(cfg_path), "--workdir", str(workdir), "--no-progress"]
    # the in-process reference runs with the test settings (conftest.py)
    env = dict(os.environ, JAX_PLATFORMS="cpu", JAX_DISABLE_MOST_OPTIMIZATIONS="1")
    with open(tmp_path / "killed.log", "w") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            killed = _kill_after_checkpoint(proc, workdir / "checkpoints", 6)
            assert killed, f"the run ended before it was killed: {(tmp_path / 'killed.log').read_text()[-2000:]}"
            assert proc.wait(timeout=60) == -signal.SIGKILL
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    killed_at = _final_state(str(workdir), config)[0]  # what the resume will restore
    assert 6 <= killed_at < config.steps
    if resume_in == "process":
        resumed = subprocess.run(cmd + ["--resume"], cwd=ROOT, env=env, capture_output=True, text=True,
                                 timeout=900)
        assert resumed.returncode == 0, resumed.stderr[-3000:]
        assert f"resumed from step {killed_at}" in resumed.stderr
    else:
        loop.train(config, str(workdir), resume=True, progress=False, tensorboard=False)
    _assert_same_run(str(workdir), full_run[0], config)


# ---------------------------------------------------------------------------------
# DAgger rounds: labels on the policy's own states, trained beside the annealed ones


def test_a_dagger_round_labels_the_policys_own_states_and_trains_beside_the_first_labels(data, full_run, tmp_path):
    import datasets as hf

    import alphagrad
    from data_gen.dataset import row_to_graph

    workdir, _ = full_run
    model = os.path.join(workdir, "best_model")
    copy = _copy(data, tmp_path)
    rows = L.build_labels(copy, LABELS, progress=False, policy=model, name="dagger-1")
    dd = hf.load_from_disk(copy)
    assert rows == {"train": len(dd["train"]), "validation": 0}
    manifest = json.load(open(os.path.join(copy, "dagger-1", "labels.json")))
    assert manifest["config"]["policy_sha256"] == L.policy_digest(model)
    assert manifest["config"]["screen"] == LABELS.screen  # how the rest was completed
    lab = L.load_labels(copy, "dagger-1")
    agent = alphagrad.from_pretrained(model)
    splits = set()
    for i in range(len(dd["train"])):
        r, label = dd["train"][i], lab["train"][i]
        g = row_to_graph(r)
        player = agent.player(g, r["best_baseline"])
        played = player.play(0.0)
        split = label["positions"][0]
        splits.add(split > 0)
        assert label["order"][:split] == played[:split]  # the policy's own prefix
        assert sorted(label["order"]) == sorted(g.intermediates)
        assert label["cost"] == alphagrad.cost(g, label["order"]) <= alphagrad.cost(g, played)  # annealed rest
        assert all(split <= t < len(played) for t in label["positions"])
    assert True in splits  # splits are drawn from the graphs' hashes, not all at the start
    # the trainer reads both sets: one entry per (graph, label set), every state once per epoch
    base = TD.load_split(copy, "train", (64,), 64)
    both = TD.load_split(copy, "train", (64,), 64, labels=("labels", "dagger-1"))
    assert len(both) == len(base) + sum(1 for r in base.rows if r["graph_hash"] in set(lab["train"]["graph_hash"]))
    everything = collections.Counter((i, int(w)) for i, r in enumerate(both.rows) for w in range(len(r["positions"])))
    pair = next(both.siblings(i) for i in range(len(both)) if len(both.siblings(i)) == 2)
    a, b = (both.prepared(j) for j in pair)  # one graph's entries share its encoder inputs
    assert a["inputs"][0] is b["inputs"][0] and both.rows[pair[0]]["order"] != both.rows[pair[1]]["order"]
    batches = TD.epoch_batches(both, 0, 0, 1024, 8)
    assert collections.Counter((i, int(w)) for b in batches for i, which in b for w in which) == everything
    # a run started from the model starts from its weights and trains on both sets
    config = tiny_config(copy, **{"data.labels": ["labels", "dagger-1"], "init_from": model, "steps": 2})
    start = loop.start_params(config, loop.init_params(config, jax.random.key(0)))
    for a, b in zip(jax.tree_util.tree_leaves(start), jax.tree_util.tree_leaves(agent.params)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    out = loop.train(config, str(tmp_path / "run"), progress=False, tensorboard=False)
    assert out["step"] == 2
    with pytest.raises(C.ConfigError, match="init_from"):
        other = tiny_config(copy, **{"init_from": model, "network": {"dim": 32, "heads": 2, "layers": 1}})
        loop.start_params(other, loop.init_params(other, jax.random.key(0)))
    with pytest.raises(C.ConfigError, match="not a model directory"):
        tiny_config(copy, init_from=str(tmp_path)).validate()
    with pytest.raises(C.ConfigError, match="twice"):
        tiny_config(copy, **{"data.labels": ["labels", "labels"]}).validate()
    with pytest.raises(C.ConfigError, match=r"no labels in .*--name dagger-2 --policy MODEL"):
        TD.load_split(copy, "train", (64,), 64, labels=("labels", "dagger-2"))


def test_a_dagger_round_with_splits_labels_states_spread_over_the_policys_game(data, full_run, tmp_path, capsys):
    """``splits`` K: K rows per graph, each completing the policy's own game from a state
    at its own depth (strata of the same hash-drawn distribution: part 0 is the one-split
    state); the trainer reads every row; one split is the round as before."""
    import datasets as hf

    import alphagrad
    from data_gen.dataset import row_to_graph

    workdir, _ = full_run
    model = os.path.join(workdir, "best_model")
    copy = _copy(data, tmp_path)
    three = dataclasses.replace(LABELS, splits=3)
    limit = 6
    assert L.build_labels(copy, three, progress=False, policy=model, name="dagger-3", limit=limit) == \
        {"train": 3 * limit, "validation": 0}
    assert L.build_labels(copy, LABELS, progress=False, policy=model, name="dagger-1", limit=limit) == \
        {"train": limit, "validation": 0}
    assert json.load(open(os.path.join(copy, "dagger-3", "labels.json")))["config"]["splits"] == 3
    assert "splits" not in json.load(open(os.path.join(copy, "dagger-1", "labels.json")))["config"]
    lab, one = L.load_labels(copy, "dagger-3")["train"], L.load_labels(copy, "dagger-1")["train"]
    dd = hf.load_from_disk(copy)["train"]
    agent = alphagrad.from_pretrained(model)
    deeper, greedy = 0, []
    for i in range(limit):
        r = dd[i]
        g = row_to_graph(r)
        played = agent.player(g, r["best_baseline"]).play(0.0)
        greedy.append(played)
        rows = [lab[3 * i + k] for k in range(3)]
        assert {x["graph_hash"] for x in rows} == {r["graph_hash"]}
        n = len(played)
        firsts = [x["positions"][0] for x in rows]
        seed = L._seed(r["graph_hash"])
        assert firsts == [L.split_position(n, seed, k, 3) for k in range(3)] == sorted(firsts)
        deeper += firsts[-1] > firsts[0]
        for x, split in zip(rows, firsts):
            assert x["order"][:split] == played[:split]  # the policy's own state at each depth
            assert x["cost"] == alphagrad.cost(g, x["order"]) and len(x["positions"]) <= LABELS.positions // 3
        assert one[i]["positions"][0] == L.split_position(n, seed)  # one split: the state it always was
    assert deeper >= limit // 2
    late = dataclasses.replace(LABELS, splits=2, depth=(0.6, 0.95))  # the late game only
    assert L.build_labels(copy, late, progress=False, policy=model, name="dagger-late", limit=limit)["train"] == \
        2 * limit
    assert json.load(open(os.path.join(copy, "dagger-late", "labels.json")))["config"]["depth"] == [0.6, 0.95]
    assert "depth" not in json.load(open(os.path.join(copy, "dagger-3", "labels.json")))["config"]
    for i, x in enumerate(L.load_labels(copy, "dagger-late")["train"]):
        n, split = len(x["order"]), x["positions"][0]
        assert split == L.split_position(n, L._seed(x["graph_hash"]), i % 2, 2, (0.6, 0.95))
        assert int(0.6 * n) <= split <= max(int(0.95 * n), n - 2)
        assert x["graph_hash"] == dd[i // 2]["graph_hash"] and x["order"][:split] == greedy[i // 2][:split]
    entries = TD.load_split(copy, "train", (64,), 64, labels=("labels", "dagger-3"))
    per_graph = collections.Counter(e["graph_hash"] for e in entries.rows if e["label_set"] == "dagger-3")
    assert per_graph and set(per_graph.values()) == {3}  # every row of a graph it keeps
    with pytest.raises(ValueError, match="splits"):
        L.LabelConfig(splits=0)
    for depth in ((0.9, 0.6), (0.0, 1.5), (0.5,), "late"):
        with pytest.raises(ValueError, match="two fractions of the game"):
            L.LabelConfig(depth=depth)
    with pytest.raises(ValueError, match="give depth with neither"):
        L.LabelConfig(depth=(0.5, 1.0), rollouts=4)
    with pytest.raises(ValueError, match="give the model with policy=MODEL"):
        L.build_labels(copy, late, progress=False, name="late-without-policy")
    for args, message in ((["--splits", "2"], "needs --policy MODEL"),
                          (["--depth", "0.6", "0.95"], "needs --policy MODEL"),
                          (["--depth", "0.95", "0.6", "--policy", model], "0 <= lo < hi <= 1"),
                          (["--splits", "0", "--policy", model], "must be >= 1")):
        with pytest.raises(SystemExit):
            data_gen_main(["label", "--data", copy, "--no-progress", *args])
        assert message in capsys.readouterr().err


def test_a_rollout_set_stores_the_policys_sampled_orders_and_trains_on_their_advantage(data, full_run, tmp_path,
                                                                                       capsys):
    """``rollouts`` N: up to N rows per graph, each an order the policy samples at the
    set's temperature (seeded by the graph's hash), the move taken at each labelled
    depth as the target and the order's advantage over the graph's samples (cheaper:
    higher; zero mean); the trainer reads them as REINFORCE states beside the labels."""
    import datasets as hf

    import alphagrad
    from data_gen.dataset import row_to_graph

    workdir, _ = full_run
    model = os.path.join(workdir, "best_model")
    copy = _copy(data, tmp_path)
    config = dataclasses.replace(LABELS, rollouts=4, temperature=2.0, positions=6)
    rows = L.build_labels(copy, config, progress=False, policy=model, name="rollouts", limit=8)
    manifest = json.load(open(os.path.join(copy, "rollouts", "labels.json")))["config"]
    assert (manifest["rollouts"], manifest["temperature"]) == (4, 2.0) and "screen" not in manifest
    lab = L.load_labels(copy, "rollouts")["train"]
    assert rows == {"train": len(lab), "validation": 0} and 0 < len(lab) <= 4 * 8
    dd = hf.load_from_disk(copy)["train"]
    agent = alphagrad.from_pretrained(model)
    by_graph = collections.defaultdict(list)
    for label in lab:
        by_graph[label["graph_hash"]].append(label)
    for r in dd.select(range(8)):
        group = by_graph.get(r["graph_hash"], [])
        g = row_to_graph(r)
        player = agent.player(g, r["best_baseline"])
        orders = [player.play(2.0, L._seed(g.fingerprint) + k) for k in range(4)]
        costs = [alphagrad.cost(g, o) for o in orders]
        if len(set(costs)) == 1:  # nothing to compare: no rows
            assert group == []
            continue
        assert [x["order"] for x in group] == orders and [x["cost"] for x in group] == costs
        adv = np.asarray([x["advantage"] for x in group])
        assert abs(adv.mean()) < 1e-5 and np.argmax(adv) == np.argmin(costs) and np.argmin(adv) == np.argmax(costs)
        for x in group:
            assert x["temperature"] == 2.0 and len(x["positions"]) == min(6, len(x["order"]))
            assert x["moves"] == [[x["order"][t]] for t in x["positions"]]
    # the trainer: one entry per graph holds its samples' states, each with its order's
    # advantage; a batch slot takes states of several samples under one encoder pass
    both = TD.load_split(copy, "train", (64,), 64, labels=("labels", "rollouts"))
    entries = [i for i, r in enumerate(both.rows) if r["label_set"] == "rollouts"]
    base = TD.load_split(copy, "train", (64,), 64)
    kept = {r["graph_hash"] for r in base.rows} & set(by_graph)  # those that fit the bucket
    assert len(entries) == len(kept) > 0 and len(both) == len(base) + len(entries)
    for i in entries:
        row, group = both.rows[i], by_graph[both.rows[i]["graph_hash"]]
        assert row["orders"] == [x["order"] for x in group]
        which = np.arange(len(row["positions"]))
        s = both.states(i, which)
        assert s["sampled"].all() and np.all(s["temperature"] == 2.0)
        k = 0
        for n, x in enumerate(group):
            for t, move in zip(x["positions"], x["moves"]):
                assert s["advantage"][k] == np.float32(x["advantage"]) and s["target"][k, move[0]] == 1.0
                assert sorted(np.flatnonzero(s["legal"][k])) == sorted(x["order"][t:])
                k += 1
        raw = both.prepared(i)["dynamic"]
        assert raw.shape[0] == len(row["positions"])
    assert not any(both.states(i, [0])["sampled"].any() for i in range(len(both)) if i not in entries)
    with pytest.raises(C.ConfigError, match="encodings 1"):
        TD.load_split(copy, "train", (64,), 64, labels=("labels", "rollouts"), encodings=2)
    run = tiny_config(copy, **{"data.labels": ["labels", "rollouts"], "init_from": model, "steps": 4,
                               "reinforce_weight": 2.0})
    out = loop.train(run, str(tmp_path / "run"), progress=False, tensorboard=False)
    assert out["step"] == 4 and "reinforce" in out
    # bad input: a rollout set needs a policy and two samples to compare
    with pytest.raises(ValueError, match="needs a policy|policy=MODEL"):
        L.build_labels(copy, config, progress=False, name="rollouts-2")
    with pytest.raises(ValueError, match="at least 2 samples"):
        dataclasses.replace(LABELS, rollouts=1)
    for args, message in ((["--rollouts", "4"], "needs --policy MODEL"),
                          (["--temperature", "0.5", "--policy", model], "needs one of them"),
                          (["--rollouts", "4", "--temperature", "0", "--policy", model], "must be a finite number")):
        with pytest.raises(SystemExit):
            data_gen_main(["label", "--data", copy, "--no-progress", *args])
        assert message in capsys.readouterr().err


def test_a_candidates_set_labels_the_greedy_states_by_the_policys_own_completions(data, full_run, tmp_path):
    """``candidates`` K: one row per graph, the policy's greedy order; at each labelled
    state the targets are the candidate moves whose completion by the policy's greedy
    play is cheapest (``deltas``: that cost less the greedy order's), the greedy move
    among them exactly when no candidate beats it; the trainer reads them as labels."""
    import datasets as hf

    import alphagrad
    from data_gen.dataset import row_to_graph

    workdir, _ = full_run
    model = os.path.join(workdir, "best_model")
    copy = _copy(data, tmp_path)
    config = dataclasses.replace(LABELS, candidates=3, temperature=2.0, positions=6)
    assert L.build_labels(copy, config, progress=False, policy=model, name="improve", limit=6) == \
        {"train": 6, "validation": 0}
    manifest = json.load(open(os.path.join(copy, "improve", "labels.json")))["config"]
    assert (manifest["candidates"], manifest["temperature"]) == (3, 2.0) and "rollouts" not in manifest
    lab = L.load_labels(copy, "improve")["train"]
    dd = hf.load_from_disk(copy)["train"]
    agent = alphagrad.from_pretrained(model)
    for r, label in zip(dd.select(range(6)), lab):
        g = row_to_graph(r)
        player = agent.player(g, r["best_baseline"])
        played = player.play(0.0)
        assert label["order"] == played and label["cost"] == alphagrad.cost(g, played)
        for t, good, gain in zip(label["positions"], label["moves"], label["deltas"]):
            assert t < len(played) - 1 and good == sorted(good) and set(gain) == {gain[0]} and gain[0] <= 0
            for m in good:
                done = played[:t] + [m]
                assert alphagrad.cost(g, done + player.play_from(done)) == label["cost"] + gain[0]
            assert (played[t] in good) == (gain[0] == 0)
    both = TD.load_split(copy, "train", (64,), 64, labels=("labels", "improve"))
    run = tiny_config(copy, **{"data.labels": ["labels", "improve"], "init_from": model, "steps": 2})
    assert loop.train(run, str(tmp_path / "run"), progress=False, tensorboard=False)["step"] == 2
    assert any(r["label_set"] == "improve" for r in both.rows)
    with pytest.raises(ValueError, match="two kinds"):
        dataclasses.replace(LABELS, candidates=2, rollouts=2)


def test_repeats_use_a_label_sets_states_that_many_times_an_epoch(data, tmp_path):
    copy = _copy(data, tmp_path)
    shutil.copytree(os.path.join(copy, "labels"), os.path.join(copy, "again"))
    both = TD.load_split(copy, "train", (64,), 64, labels=("labels", "again"), repeats=(1, 3))
    once = TD.load_split(copy, "train", (64,), 64, labels=("labels", "again"))
    count = collections.Counter((i, int(w)) for b in TD.epoch_batches(both, 0, 0, 1024, 8) for i, which in b
                                for w in which)
    for i, r in enumerate(both.rows):
        for w in range(len(r["positions"])):
            assert count[i, w] == (3 if r["label_set"] == "again" else 1)
    def plain(batches):
        return [[(i, which.tolist()) for i, which in b] for b in batches]

    assert plain(TD.epoch_batches(once, 0, 0, 1024, 8)) == plain(TD.epoch_batches(  # without repeats, as before
        TD.load_split(copy, "train", (64,), 64, labels=("labels", "again"), repeats=(1, 1)), 0, 0, 1024, 8))
    # an extra dataset's sets get theirs from data.extra_repeats (its graphs beyond the two of
    # data.path the run keeps; the rest are duplicates)
    extra, _ = loop.training_sets(tiny_config(copy, **{"data.max_train_graphs": 2, "data.extra_paths": [copy],
                                                      "data.extra_labels": ["labels", "again"],
                                                      "data.extra_repeats": [1, 3]}))
    assert len(extra) > 2
    assert all(r.get("repeat", 1) == (3 if r["label_set"] == "again" else 1) for r in extra.rows)
    assert any(r["label_set"] == "again" for r in extra.rows[2:])
    for bad in ([2], [1, 0]):
        with pytest.raises(C.ConfigError, match="data.repeats"):
            tiny_config(copy, **{"data.labels": ["labels", "again"], "data.repeats": bad}).validate()
        with pytest.raises(C.ConfigError, match="data.extra_repeats"):
            tiny_config(copy, **{"data.extra_paths": [copy], "data.extra_labels": ["labels", "again"],
                                 "data.extra_repeats": bad}).validate()
