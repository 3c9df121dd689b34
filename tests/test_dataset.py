"""Tests of the dataset builder (data_gen.dataset, ``python -m data_gen build``)."""

from __future__ import annotations

import collections
import dataclasses
import json
import os
import re
import shutil

import datasets
import numpy as np
import pyarrow.parquet as pq
import pytest
import yaml

import alphagrad
from alphagrad import baselines
from alphagrad.evaluator import Evaluator
from alphagrad.examples import chain
from data_gen import __main__ as cli
from data_gen import dataset as D
from data_gen import random_programs as rp

LARGE_SIZE = (30, 100)  # a held-out chain needs a published task of at most half of it (MLP, chained twice: 94)


def _zoo_names() -> tuple:
    """Two published tasks and a few cheap zoo examples of other families."""
    exs = alphagrad.examples.all_examples()
    names = {e.name for e in exs}
    published = [n for n in ("RoeFlux_1d", "RobotArm_6DOF", "MLP") if n in names]
    others = [n for n in ("Lorenz63_RK4", "HeatFTCS_8", "DHArm_3", "Pendulum_RK4") if n in names]
    if not others:
        others = [e.name for e in exs if e.family != "published"][:2]
    return tuple(published + others)


def _tiny_config(**changes) -> D.BuildConfig:
    base = D.BuildConfig(
        seed=3, num_random=12, num_heldout=2, large=2, large_size=LARGE_SIZE, chunk_size=8,
        zoo=_zoo_names(), train=D.TRAIN.replace(num_ops=(5, 30)),
        heldout=D.HELDOUT.replace(num_ops=(20, 30)),
    )
    return dataclasses.replace(base, **changes)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("tiny"))
    config = _tiny_config()
    summary = D.build(out, config, num_proc=1, progress=False, quiet=True)
    return out, config, summary


def _rows(dd):
    return [dict(r, split=s) for s in dd for r in dd[s]]


def test_load_splits_and_columns(tiny):
    out, config, summary = tiny
    dd = datasets.load_from_disk(out)
    assert list(dd) == list(D.SPLITS)
    for split in D.SPLITS:
        assert dd[split].features == D.features()
        assert list(dd[split].column_names) == list(D.COLUMNS)
        table = pq.read_table(os.path.join(out, "parquet", f"{split}.parquet"))
        assert table.num_rows == len(dd[split]) == summary["rows"][split]
        assert table.column("graph_hash").to_pylist() == dd[split]["graph_hash"]
    feats = D.features()
    assert feats["shapes"] == datasets.List(datasets.List(datasets.Value("int32")))
    assert feats["edges"] == datasets.List(datasets.List(datasets.Value("int32")))
    assert feats["kinds"] == datasets.List(datasets.Value("int8"))
    assert feats["structures"] == feats["params"] == datasets.Value("string")
    assert feats["cost_optimal"] == datasets.Value("int64")
    assert len(dd["train"]) > 0 and len(dd["heldout"]) > 0
    # Every work item is a row, a duplicate or a failure.
    items = config.num_random + config.heldout_count + config.large + len(config.zoo)
    assert sum(summary["rows"].values()) + sum(summary["duplicates_dropped"].values()) + summary["failures"] == items


def test_rows_are_consistent(tiny):
    out, _config, _ = tiny
    rows = _rows(datasets.load_from_disk(out))
    for r in rows:
        kinds = r["kinds"]
        assert r["num_vertices"] == len(r["shapes"]) == len(kinds)
        assert r["num_intermediates"] == kinds.count(1)
        assert r["num_inputs"] == kinds.count(0) and r["num_outputs"] == kinds.count(2)
        assert r["num_edges"] == len(r["edges"]) and all(len(e) == 3 for e in r["edges"])
        assert r["num_structures"] == len(json.loads(r["structures"])) <= r["table_size"]
        assert r["best_baseline"] == min(r["cost_forward"], r["cost_reverse"], r["cost_markowitz"])
        if r["num_intermediates"] <= D.OPTIMAL_MAX_INTERMEDIATES:
            assert r["cost_optimal"] is not None and r["cost_optimal"] <= r["best_baseline"]
        else:
            assert r["cost_optimal"] is None
        params = json.loads(r["params"])
        if r["source"] == "random_program":
            spec = rp.ProgramSpec.from_dict(params)
            assert params["seed"] == r["seed"]
            f, args = rp.generate(spec, r["seed"])  # the source reproduces the graph
            assert alphagrad.trace(f, *args).fingerprint == r["graph_hash"]
        else:
            assert r["seed"] is None and params["example"]
    fams = {(r["split"], r["family"]) for r in rows}
    assert ("heldout", "published") in fams and ("heldout", "random_heldout") in fams
    assert {("heldout", "large_random"), ("heldout", "large_zoo_chained")} <= fams
    for r in rows:
        if r["family"].startswith("large_"):
            assert LARGE_SIZE[0] <= r["num_intermediates"] <= LARGE_SIZE[1]
        if r["family"] == "published":
            assert r["split"] == "heldout"
        if r["family"] == "random_heldout":
            assert json.loads(r["params"])["spec"]["max_rank"] == 3


def test_chained_graphs_keep_held_out_and_training_functions_apart():
    # round robin over the zoo would reach a training function by the third chained item
    config, zoo = _tiny_config(), D.zoo_examples(_zoo_names())
    family = {e.name: e.family for e in zoo}
    for group, held_out in (("large", True), ("large_train", False)):
        for index in range(1, 2 * len(zoo) + 1, 2):
            meta, _ = D._item(config, group, index, zoo)
            assert meta["family"].endswith("zoo_chained")
            assert (family[meta["params"]["example"]] in D.HELDOUT_ZOO_FAMILIES) == held_out


def test_large_random_programs_grow_past_the_default_operation_cap_when_asked():
    # 40 operations cannot make 150-200 intermediates: the failure says which flag to raise
    config = _tiny_config(large_size=(150, 200), zoo="none")
    capped = dataclasses.replace(config, large_dist=D.LARGE.replace(num_ops=(1, 40)))
    _, make = D._item(capped, "large", 0, [])
    with pytest.raises(D._Failure, match="--large-max-ops") as e:
        make()
    assert e.value.stage == "size"
    meta, make = D._item(dataclasses.replace(config, large_dist=D.LARGE.replace(num_ops=(1, 400))), "large", 0, [])
    assert 150 <= len(make().intermediates) <= 200 and meta["family"] == "large_random"


def test_row_to_graph_round_trip(tiny):
    out, _, _ = tiny
    rows = _rows(datasets.load_from_disk(out))
    for r in rows:
        g = D.row_to_graph(r)
        assert g.fingerprint == r["graph_hash"]
        ev = Evaluator(g)
        assert ev.cost(list(reversed(g.intermediates))) == r["cost_reverse"]
        assert ev.cost(list(g.intermediates)) == r["cost_forward"]
    # The JAX engine agrees (one compilation per size: a few rows only).
    picked = {r["family"]: r for r in rows if r["family"] in ("random", "published", "large_random")}
    for r in picked.values():
        g = D.row_to_graph(r)
        assert alphagrad.cost(g, "rev") == r["cost_reverse"]


def test_a_graph_with_an_argument_dependent_branch_keeps_its_fingerprint_through_a_row():
    """The branch taken enters the fingerprint; the row stores it (``branches``), so the
    graph rebuilt from the row, also after a round trip through the dataset's features,
    has the row's ``graph_hash``, and the other branch's row differs."""
    from jax import lax
    import jax.numpy as jnp

    def f(x):
        return lax.cond(x.sum() > 0, lambda y: jnp.sin(y) * y, jnp.tanh, x) * 2.0

    x = jnp.linspace(0.2, 0.9, 3)
    rows = []
    for point in (x, -x):
        g = alphagrad.trace(f, point)
        row = D.graph_to_row(g, family="test", name="branchy", source="zoo", seed=None, params={})
        assert row["branches"] == [[1 if point is x else 0, 2]]
        stored = datasets.Dataset.from_list([row], features=D.features())[0]
        for r in (row, stored):
            h = D.row_to_graph(r)
            assert h.fingerprint == g.fingerprint == r["graph_hash"]
            assert Evaluator(h).cost(list(h.intermediates)) == r["cost_forward"]
        rows.append(row)
    assert rows[0]["graph_hash"] != rows[1]["graph_hash"]
    old = {k: v for k, v in rows[1].items() if k != "branches"}  # a row of schema version 1
    assert D.row_to_graph(old).fingerprint != rows[1]["graph_hash"]


def test_markowitz_and_optimal_match_baselines():
    spec = rp.ProgramSpec(num_inputs=3, num_outputs=2, num_ops=14, max_rank=2, max_dim=3, width=4)
    f, args = rp.generate(spec, 5)
    g = alphagrad.trace(f, *args)
    assert 0 < len(g.intermediates) <= D.OPTIMAL_MAX_INTERMEDIATES
    costs = D.baseline_costs(g)
    assert costs["cost_markowitz"] == Evaluator(g).cost(baselines.markowitz(g))
    assert costs["cost_optimal"] == Evaluator(g).cost(baselines.optimal(g))
    ex = alphagrad.examples.get("RobotArm_6DOF")  # many ties (scalar graph)
    g = alphagrad.trace(ex.fn, *ex.args)
    assert D.baseline_costs(g)["cost_markowitz"] == alphagrad.cost(g, "markowitz")


def test_no_heldout_graph_in_train_or_validation(tiny):
    out, _, _ = tiny
    dd = datasets.load_from_disk(out)
    held = set(dd["heldout"]["graph_hash"])
    assert held
    for split in D.SPLITS:
        hashes = dd[split]["graph_hash"]
        assert len(hashes) == len(set(hashes)), f"duplicates within {split}"
    assert not held & set(dd["train"]["graph_hash"])
    assert not held & set(dd["validation"]["graph_hash"])
    assert not set(dd["train"]["graph_hash"]) & set(dd["validation"]["graph_hash"])


def test_heldout_split_does_not_depend_on_the_training_part(tiny, tmp_path):
    # README's eval reports run on a held-out-only build (--num-random 1): the same
    # held-out rows as the full build's
    out, config, _ = tiny
    small = dataclasses.replace(config, num_random=1)
    D.build(str(tmp_path), small, progress=False, quiet=True)
    full, held = datasets.load_from_disk(out)["heldout"], datasets.load_from_disk(str(tmp_path))["heldout"]
    assert sorted(zip(held["name"], held["graph_hash"])) == sorted(zip(full["name"], full["graph_hash"]))


def test_duplicates_across_splits_go_to_the_priority_split(tmp_path, monkeypatch):
    # Every random program is the same: one row survives, in heldout.
    monkeypatch.setattr(D, "generate_program", lambda spec, seed: rp.generate(
        rp.ProgramSpec(num_inputs=2, num_ops=6, max_rank=1, max_dim=3), 0))
    config = _tiny_config(num_random=6, num_heldout=2, large=0, zoo="none", validation_fraction=0.5)
    summary = D.build(str(tmp_path), config, progress=False, quiet=True)
    assert summary["rows"] == {"train": 0, "validation": 0, "heldout": 1}
    assert sum(summary["duplicates_dropped"].values()) == 7


def test_dataset_card(tiny):
    out, _, summary = tiny
    text = open(os.path.join(out, "README.md")).read()
    assert text.startswith("---\n")
    header = yaml.safe_load(text.split("---\n")[1])
    assert [s["split"] for s in header["configs"][0]["data_files"]] == list(D.SPLITS)
    assert {s["name"]: s["num_examples"] for s in header["dataset_info"]["splits"]} == summary["rows"]
    assert "| heldout | published |" in text and "| train | random |" in text
    stats = summary["statistics"]["train"]["random"]
    assert stats["intermediates_min"] <= stats["intermediates_median"] <= stats["intermediates_max"]
    failures = json.load(open(os.path.join(out, "failures.json")))
    assert failures["count"] == summary["failures"] == len(failures["failures"])


def test_resume_recomputes_only_missing_chunks(tmp_path):
    out = str(tmp_path)
    config = _tiny_config(num_random=10, num_heldout=1, large=0, zoo="none", chunk_size=4)
    first = D.build(out, config, num_proc=2, progress=False, quiet=True)  # spawn workers
    before = datasets.load_from_disk(out)
    hashes = {s: before[s]["graph_hash"] for s in D.SPLITS}
    chunk_dir = os.path.join(out, "chunks")
    files = sorted(f for f in os.listdir(chunk_dir) if f.endswith(".parquet"))
    assert len(files) == len(first["chunks_computed"]) == 4 and not first["chunks_reused"]
    mtimes = {f: os.stat(os.path.join(chunk_dir, f)).st_mtime_ns for f in files}
    victim = "random-00001.parquet"
    os.remove(os.path.join(chunk_dir, victim))
    os.remove(os.path.join(out, "dataset_dict.json"))
    for s in D.SPLITS:
        shutil.rmtree(os.path.join(out, s))
    with pytest.raises(FileNotFoundError):
        datasets.load_from_disk(out)
    second = D.build(out, config, num_proc=1, progress=False, quiet=True)
    assert second["chunks_computed"] == ["random-00001"]
    assert sorted(second["chunks_reused"]) == sorted(f[:-8] for f in files if f != victim)
    for f in files:
        if f != victim:
            assert os.stat(os.path.join(chunk_dir, f)).st_mtime_ns == mtimes[f]
    assert os.path.exists(os.path.join(chunk_dir, victim))
    after = datasets.load_from_disk(out)
    assert {s: after[s]["graph_hash"] for s in D.SPLITS} == hashes
    # A third run computes nothing.
    third = D.build(out, config, num_proc=1, progress=False, quiet=True)
    assert third["chunks_computed"] == [] and third["rows"] == first["rows"]
    # Other parameters in the same directory are refused before any work.
    with pytest.raises(D.BuildDirectoryError, match="seed"):
        D.build(out, dataclasses.replace(config, seed=4), progress=False, quiet=True)


@pytest.mark.parametrize("argv, message", [
    (["--train-max-rank", "0", "5"], r"max_rank.*\[0, 3\]"),
    (["--heldout-num-ops", "100", "3500"], r"num_ops.*\[1, 3000\]"),
    (["--large-max-ops", "0"], r"large-max-ops.*\[1, 3000\]"),
    (["--train-num-ops", "50", "10"], "low is larger than high"),
    (["--num-random", "-1"], "num_random"),
    (["--num-proc", "0"], "num-proc"),
    (["--large-size", "60", "30"], "large_size"),
    (["--large-size", "1500", "6000"], r"large_size.*<= 5000"),  # 1,500-2,400 builds (the xl report)
    (["--validation-fraction", "1.5"], "validation_fraction"),
    (["--zoo", "NoSuchExample"], "NoSuchExample"),
])
def test_bad_parameters_are_rejected_before_work(tmp_path, capsys, argv, message):
    out = tmp_path / "never"
    base = ["build", "--out", str(out), "--num-random", "4", "--seed", "0"]
    with pytest.raises(SystemExit) as e:
        cli.main(base + argv)
    assert e.value.code == 2
    assert re.search(message, capsys.readouterr().err)
    assert not out.exists()


def test_out_that_is_a_file_is_rejected(tmp_path, capsys):
    out = tmp_path / "a_file"
    out.write_text("keep me")
    with pytest.raises(SystemExit) as e:
        cli.main(["build", "--out", str(out), "--num-random", "4", "--seed", "0"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "is a file" in err and "give a directory" in err
    assert out.read_text() == "keep me"


def test_bad_mix_is_rejected():
    bad = D.TRAIN.replace(mix=(("dot", (0.5, 0.1)),))
    with pytest.raises(ValueError, match="mix"):
        D.BuildConfig(train=bad).validate()
    with pytest.raises(ValueError, match="unknown categories"):
        D.BuildConfig(train=D.TRAIN.replace(mix=(("conv", (0.1, 0.2)),))).validate()


def test_failing_function_is_reported_not_dropped(tmp_path, monkeypatch, capsys):
    config = _tiny_config(num_random=6, num_heldout=0, large=0, zoo="none")
    bad_seed = D._random_item(config, "random", 3)[0]["seed"]
    real = D.generate_program

    def flaky(spec, seed):
        if seed == bad_seed:
            raise RuntimeError("injected failure")
        return real(spec, seed)

    monkeypatch.setattr(D, "generate_program", flaky)
    out = str(tmp_path)
    summary = D.build(out, config, progress=False, quiet=False)
    assert summary["failures"] == 1
    assert sum(summary["rows"].values()) + sum(summary["duplicates_dropped"].values()) == 5
    failures = json.load(open(os.path.join(out, "failures.json")))
    (f,) = failures["failures"]
    assert (f["family"], f["name"], f["seed"], f["stage"]) == ("random", "random_000003", bad_seed, "generate")
    assert "injected failure" in f["reason"] and f["error"] == "RuntimeError"
    assert failures["by_family_stage"] == {"random/generate": 1}
    err = capsys.readouterr().err
    assert "failures: 1" in err and "random/generate: 1" in err
    assert "random/generate: 1" in open(os.path.join(out, "README.md")).read()


def test_too_many_structures_is_a_reported_failure(tmp_path):
    config = _tiny_config(num_random=4, num_heldout=0, large=0, zoo="none", max_structures=6,
                          train=D.TRAIN.replace(num_ops=(20, 30), max_rank=(2, 2), max_dim=(3, 4)))
    summary = D.build(str(tmp_path), config, progress=False, quiet=True)
    failures = json.load(open(os.path.join(str(tmp_path), "failures.json")))["failures"]
    assert failures and all(f["stage"] == "tables" and f["error"] == "TooManyStructuresError" for f in failures)
    assert sum(summary["rows"].values()) + sum(summary["duplicates_dropped"].values()) + len(failures) == 4
    dd = datasets.load_from_disk(str(tmp_path))
    assert all(t <= 6 for s in D.SPLITS for t in dd[s]["table_size"])


def test_chain_feeds_outputs_back():
    ex = alphagrad.examples.get("RobotArm_6DOF")
    one = len(alphagrad.trace(ex.fn, *ex.args).intermediates)
    three = alphagrad.trace(chain(ex.fn, 3), *ex.args)
    assert len(three.intermediates) > 3 * one
    assert np.all(np.isfinite(np.asarray(chain(ex.fn, 3)(*ex.args))))


def test_chain_with_carry_feeds_back_the_state_and_shares_the_rest():
    """``carry=1``: the first argument is the state, the second reaches every copy as it
    is (a weight), so it is an input with an edge into each copy."""
    import jax.numpy as jnp

    def step(x, w):
        return jnp.tanh(w @ x)

    x, w = jnp.ones(3), jnp.eye(3) * 0.5
    got = chain(step, 4, carry=1)(x, w)
    want = x
    for _ in range(3):
        want = want + 0.1 * jnp.tanh(step(want, w))
    np.testing.assert_allclose(got, step(want, w), rtol=1e-6)
    graph = alphagrad.trace(chain(step, 4, carry=1), x, w)
    weight = graph.inputs[1]
    assert sum(e.src == weight for e in graph.edges) == 4  # one use per copy, no update of w


def test_stepped_training_graphs_iterate_a_program_and_every_other_is_a_scalar_loss(tmp_path):
    """Stepped graphs (deep, like time-stepping solvers) go to train, reach the size asked
    for, are built again from their seeds alone, and odd ones return one scalar; the
    held-out rows and the build identity of a build without them are unchanged."""
    config = _tiny_config(num_random=1, num_heldout=1, large=0, zoo="none", stepped_train=2,
                          large_train_size=(60, 120))
    D.build(str(tmp_path), config, progress=False, quiet=True)
    rows = [r for r in _rows(datasets.load_from_disk(str(tmp_path))) if r["family"] == "stepped_train_random"]
    assert sorted(r["name"] for r in rows) == ["stepped_train_00000", "stepped_train_00001"]
    for r in rows:
        params = json.loads(r["params"])
        assert r["split"] == "train" and r["source"] == "random_program_chained" and params["copies"] >= 2
        assert 60 <= r["num_intermediates"] <= 120
        assert params["loss"] == r["name"].endswith("1")
        if params["loss"]:
            assert r["num_outputs"] == 1 and r["shapes"][-1] == []
        row, failure = D.compute_item(config, "stepped_train", int(r["name"][-1]))
        assert failure is None and row["graph_hash"] == r["graph_hash"]
    without = dataclasses.replace(config, stepped_train=0)
    assert "step_dist" in config.identity() and "large_train_size" in config.identity()
    assert "step_dist" not in without.identity() and "large_train_size" not in without.identity()


def test_shared_training_graphs_carry_one_state_and_share_the_other_inputs(tmp_path):
    """Shared-weight graphs go to train at the size asked for, rebuilt from their seeds
    alone: only one input is carried, so some input feeds several steps; a build without
    them keeps its identity."""
    config = _tiny_config(num_random=1, num_heldout=1, large=0, zoo="none", shared_train=4,
                          large_train_size=(60, 120))
    D.build(str(tmp_path), config, progress=False, quiet=True)
    rows = [r for r in _rows(datasets.load_from_disk(str(tmp_path))) if r["family"] == "shared_train_random"]
    assert rows and all(r["name"].startswith("shared_train_") for r in rows)
    for r in rows:
        params = json.loads(r["params"])
        assert r["split"] == "train" and params["carry"] == 1 and params["copies"] >= 2
        assert 60 <= r["num_intermediates"] <= 120
        graph = D.row_to_graph(r)
        uses = collections.Counter(e.src for e in graph.edges if e.src in graph.inputs)
        assert max(uses.values()) >= params["copies"]  # a shared input reaches every copy
        row, failure = D.compute_item(config, "shared_train", int(r["name"][-1]))
        assert failure is None and row["graph_hash"] == r["graph_hash"]
    without = dataclasses.replace(config, shared_train=0)
    assert "shared_dist" in config.identity() and "shared_dist" not in without.identity()
