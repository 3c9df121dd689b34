"""Training labels (data_gen/labels.py): the move scores of ``move_deltas`` equal a brute
force re-scoring of every moved order; a label row's policy target is exactly the set
of best moves and its value target the cost still to come; ``build_labels`` writes
labels the trainer loads, resumes after a lost or damaged chunk with the same rows, and
``load_labels`` refuses missing labels or labels of another schema version with a
message that says how to rebuild them."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hst

import alphagrad as ag
import alphagrad.anneal
from alphagrad import baselines
from alphagrad.evaluator import Evaluator, move_deltas
from data_gen import labels as L
from data_gen import random_programs as rp
from data_gen.__main__ import main as data_gen_main
from data_gen.dataset import row_to_graph


def _zoo(name):
    ex = ag.examples.get(name)
    return ag.trace(ex.fn, *ex.args)


def _program(seed, ops):
    spec = rp.ProgramSpec(num_inputs=3, num_outputs=2, num_ops=ops, max_rank=2, max_dim=3, width=5)
    f, args = rp.generate(spec, seed)
    return ag.trace(f, *args)


def _brute_deltas(ev, order, positions, horizon, slack=0):
    """``move_deltas`` by re-scoring ``order[:t] + [order[j]] + order[t:j] + order[j+1:]``
    from scratch for every position ``t`` and every ``j`` within the horizon."""
    order = [int(v) for v in order]
    n, base = len(order), ev.cost(order)
    out = np.full((len(positions), horizon), max(2, slack + 1), np.int64)
    for r, t in enumerate(positions):
        for j in range(t, min(n, t + horizon)):
            moved = order[:t] + [order[j]] + order[t:j] + order[j + 1:]
            d = ev.cost(moved) - base
            out[r, j - t] = d if d <= slack else slack + 1
    return out


def _move_deltas(ev, order, positions, horizon, slack=0):
    deltas, flag = move_deltas(ev.initial, np.asarray(order, np.int64), np.asarray(positions, np.int64),
                               horizon, ev.compose, ev.join, ev.cost_table, slack)
    assert flag == 0
    return deltas


@pytest.mark.parametrize("name", ["RoeFlux_1d", "BlackScholes_Jacobian"])
def test_move_deltas_equal_brute_force_on_zoo_graphs(name):
    g = _zoo(name)
    ev = Evaluator(g)
    n = len(g.intermediates)
    rng = np.random.default_rng(0)
    annealed = baselines.anneal(g, iterations=3000, seed=1)
    for order in (rng.permutation(g.intermediates), annealed):
        positions = L.positions(n, 20)
        for horizon, slack in ((256, 0), (9, 0), (256, ev.cost(order) // 3), (9, 10 ** 12)):
            got = _move_deltas(ev, order, positions, horizon, slack)
            np.testing.assert_array_equal(got, _brute_deltas(ev, order, positions, horizon, slack),
                                          err_msg=f"horizon {horizon}, slack {slack}")
            assert (got[:, 0] == 0).all()  # moving the vertex already at t changes nothing
    # the cases the labels tell apart all occur: cheaper, equal, dearer moves, and the end
    random_order = _move_deltas(ev, rng.permutation(g.intermediates), L.positions(n, 20), 256)
    assert (random_order < 0).any() and (random_order == 1).any() and (random_order == 2).any()
    assert ((random_order == 0).sum(1) > 1).any()


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
@given(seed=hst.integers(0, 10_000), ops=hst.integers(8, 40), horizon=hst.integers(1, 50),
       slack=hst.sampled_from([0, 1, 50, 10 ** 12]), data=hst.data())
def test_move_deltas_equal_brute_force_on_random_programs(seed, ops, horizon, slack, data):
    g = _program(seed, ops)
    n = len(g.intermediates)
    if n < 2:
        return
    ev = Evaluator(g)
    order = np.random.default_rng(seed).permutation(g.intermediates)
    positions = sorted(data.draw(hst.sets(hst.integers(0, n - 1), min_size=1, max_size=8)))
    np.testing.assert_array_equal(_move_deltas(ev, order, positions, horizon, slack),
                                  _brute_deltas(ev, order, positions, horizon, slack))


def test_positions_cover_short_orders_and_favour_the_endgame():
    assert L.positions(5, 64).tolist() == [0, 1, 2, 3, 4]
    assert L.positions(64, 64).tolist() == list(range(64))
    p = L.positions(1000, 64)
    assert 48 <= len(p) <= 64 and (np.diff(p) > 0).all() and p[0] >= 0 and p[-1] == 999
    assert (p >= 500).sum() > 0.6 * len(p)  # denser towards the end
    assert np.diff(p)[-5:].max() < np.diff(p)[:5].min()
    p = L.positions(70, 64)
    assert len(p) <= 64 and len(set(p)) == len(p) and p.max() <= 69


CONFIG = L.LabelConfig(moves_per_vertex=10, min_moves=300, max_moves=2000, positions=12, horizon=16, chunk_size=4)


@pytest.mark.parametrize("graph", [
    pytest.param(lambda: _program(11, 60), id="random_program"),
    pytest.param(lambda: _zoo("RoeFlux_1d"), id="RoeFlux_1d"),
])
@pytest.mark.parametrize("annealed", [True, False], ids=["annealed", "random_order"])
def test_label_row_targets_are_the_best_moves_and_the_cost_to_go(graph, annealed, monkeypatch):
    """Along the annealed order most moves tie at 0; along a random order (annealing
    replaced) many moves save multiplications, and only the best of them are targets."""
    g = graph()
    ev = Evaluator(g)
    inter = list(g.intermediates)
    n = len(inter)
    if not annealed:
        monkeypatch.setattr(alphagrad.anneal, "anneal", lambda graph, iterations, seed, threads: list(
            np.random.default_rng(seed).permutation(graph.intermediates)))
    row = L.label_graph(g, CONFIG)
    best = min(ev.cost(inter), ev.cost(inter[::-1]), ev.cost(ev.markowitz()))
    order = row["order"]
    assert sorted(order) == sorted(inter)
    assert row["graph_hash"] == g.fingerprint and row["best_baseline"] == best
    assert row["cost"] == ev.cost(order)
    assert row["cost"] <= best or not annealed  # annealing starts from the best baseline
    assert row["anneal_moves"] == int(np.clip(CONFIG.moves_per_vertex * n, CONFIG.min_moves, CONFIG.max_moves))
    assert row["positions"] == L.positions(n, CONFIG.positions).tolist()
    assert len(row["moves"]) == len(row["deltas"]) == len(row["to_go"]) == len(row["positions"]) \
        == len(row["regrets"])
    brute = _brute_deltas(ev, order, row["positions"], CONFIG.horizon)
    exact = _brute_deltas(ev, order, row["positions"], CONFIG.horizon, slack=10 ** 15)
    state, steps = ev.new_state(), []
    for v in order:
        steps.append(ev.step(state, v))
    several = 0
    for r, t in enumerate(row["positions"]):
        d = brute[r, :min(CONFIG.horizon, n - t)]
        want = [order[t + j] for j in np.flatnonzero(d == d.min())]
        assert row["moves"][r] == want, f"position {t}"
        assert row["deltas"][r] == [int(d.min())] * len(want) and d.min() <= 0
        assert row["to_go"][r] == sum(steps[t:])
        # regrets: what each candidate adds to the best move, over the order's cost, capped
        e = exact[r, :min(CONFIG.horizon, n - t)]
        want_regret = np.minimum((e - e.min()) / row["cost"], CONFIG.regret_cap)
        np.testing.assert_allclose(row["regrets"][r], want_regret, rtol=1e-6, err_msg=f"position {t}")
        several += len(want) > 1
    assert several > 0  # soft targets: several equally good moves somewhere
    if not annealed:  # positions where a move saves, and where not every saving move is best
        assert any(d[0] < 0 for d in row["deltas"])
        assert any(((brute[r] <= 0) & (brute[r] > row["deltas"][r][0])).any() for r in range(len(brute)))
    assert row["to_go"][0] == row["cost"] or row["positions"][0] > 0
    again = L.label_graph(g, CONFIG, best_baseline=best)  # deterministic
    assert {k: v for k, v in again.items() if k != "seconds"} == {k: v for k, v in row.items() if k != "seconds"}


def _vector_to_scalar():
    """Dense layers of a vector summed to a scalar: reverse is far cheaper than forward,
    and a few annealing moves from forward cannot reach it."""
    import jax.numpy as jnp

    w = jnp.linspace(-1.0, 1.0, 64).reshape(8, 8)

    def f(x):
        for _ in range(8):
            x = jnp.sin(w @ x)
        return jnp.sum(x)
    return ag.trace(f, jnp.ones(8))


@pytest.mark.parametrize("graph", [
    pytest.param(_vector_to_scalar, id="vector_to_scalar"),
    pytest.param(lambda: _program(5, 60), id="random_program"),
    pytest.param(lambda: _zoo("RoeFlux_1d"), id="RoeFlux_1d"),
])
@pytest.mark.parametrize("split_share", [0.0, 0.4])
def test_completing_a_policys_order_keeps_its_prefix_and_escapes_its_basin(graph, split_share):
    """DAgger completes the policy's order after its prefix by annealing: from the policy's
    rest alone it stays in the policy's basin; screening the rest in forward and reverse
    order too ends no dearer than any of the three starts (and than screen 0)."""
    g = graph()
    ev = Evaluator(g)
    inter = np.asarray(g.intermediates, np.int64)
    played = inter.copy()  # the policy: forward
    split = int(split_share * len(inter))
    prefix, rest = played[:split], played[split:]
    plain = L.complete(ev, played, split, 40, seed=3, screen=0)
    screened = L.complete(ev, played, split, 40, seed=3, screen=8)
    for order in (plain, screened):
        assert order[:split].tolist() == prefix.tolist() and sorted(order.tolist()) == sorted(inter.tolist())
    assert ev.cost(plain) <= ev.cost(played)
    starts = [played, np.concatenate([prefix, rest[::-1]])]
    assert ev.cost(screened) <= min(ev.cost(plain), *map(ev.cost, starts))
    if graph is _vector_to_scalar:  # forward's basin is far from reverse's
        assert ev.cost(screened) <= ev.cost(starts[1]) < ev.cost(plain)
    assert L.complete(ev, played, split, 40, seed=3, screen=8).tolist() == screened.tolist()  # deterministic


# ----------------------------------------------------------------------------------
# build_labels / load_labels on a tiny dataset


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("label_data") / "data")
    assert data_gen_main(["build", "--out", out, "--num-random", "24", "--seed", "3", "--large", "0",
                          "--num-heldout", "0", "--zoo", "none", "--no-progress", "--quiet"]) == 0
    return out


@pytest.fixture(scope="module")
def labelled(dataset):
    rows = L.build_labels(dataset, CONFIG, progress=False)
    return dataset, rows


def _rows(data_dir):
    lab = L.load_labels(data_dir)
    return {s: [{k: v for k, v in r.items() if k != "seconds"} for r in lab[s]] for s in L.LABEL_SPLITS}


def test_build_labels_writes_labels_the_trainer_loads(labelled):
    import datasets as hf

    data_dir, rows = labelled
    dd = hf.load_from_disk(data_dir)
    assert rows == {"train": len(dd["train"]), "validation": len(dd["validation"])} and rows["train"] > 8
    lab = L.load_labels(data_dir)
    for split in L.LABEL_SPLITS:
        assert lab[split]["graph_hash"] == dd[split]["graph_hash"]  # one row per graph, in order
        assert set(lab[split].features) == set(L.features())
    with open(os.path.join(data_dir, "labels", "labels.json")) as f:
        manifest = json.load(f)
    assert manifest == {"config": CONFIG.identity(), "rows": rows}
    assert manifest["config"]["label_schema_version"] == L.LABEL_SCHEMA_VERSION
    chunks = sorted(os.listdir(os.path.join(data_dir, "labels", "chunks")))
    assert len(chunks) == sum(-(-n // CONFIG.chunk_size) for n in rows.values())
    # each row is the label of its graph (with the dataset's best baseline)
    for i in (0, 3):
        r = dd["train"][i]
        want = L.label_graph(row_to_graph(r), CONFIG, r["best_baseline"])
        got = lab["train"][i]
        assert {k: v for k, v in got.items() if k != "seconds"} == {k: v for k, v in want.items() if k != "seconds"}
        assert got["best_baseline"] == r["best_baseline"] and len(got["order"]) == r["num_intermediates"]


def test_build_labels_resumes_after_a_lost_or_damaged_chunk(labelled):
    data_dir, rows = labelled
    before = _rows(data_dir)
    chunks = os.path.join(data_dir, "labels", "chunks")
    mtimes = {c: os.stat(os.path.join(chunks, c)).st_mtime_ns for c in os.listdir(chunks)}
    lost, damaged = "train-00002.parquet", "validation-00001.parquet"
    os.remove(os.path.join(chunks, lost))
    with open(os.path.join(chunks, damaged), "wb") as f:
        f.write(b"not parquet")
    with open(os.path.join(chunks, "train-00000.parquet.tmp-999"), "wb") as f:
        f.write(b"an interrupted write")
    assert L.build_labels(data_dir, CONFIG, progress=False) == rows
    assert _rows(data_dir) == before
    assert sorted(os.listdir(chunks)) == sorted(mtimes)  # redone, the leftover temp file gone
    for c, t in mtimes.items():  # only the lost and the damaged chunk were labelled again
        assert (os.stat(os.path.join(chunks, c)).st_mtime_ns == t) == (c not in (lost, damaged)), c
    # nothing to do: the same rows, no chunk rewritten
    mtimes = {c: os.stat(os.path.join(chunks, c)).st_mtime_ns for c in os.listdir(chunks)}
    assert L.build_labels(data_dir, CONFIG, progress=False) == rows
    assert {c: os.stat(os.path.join(chunks, c)).st_mtime_ns for c in os.listdir(chunks)} == mtimes
    assert _rows(data_dir) == before


def test_label_cli_labels_a_prefix_with_limit(dataset, tmp_path, capsys):
    data_dir = str(tmp_path / "data")
    shutil.copytree(dataset, data_dir, ignore=shutil.ignore_patterns("labels"))
    assert data_gen_main(["label", "--data", data_dir, "--limit", "2", "--no-progress"]) == 0
    assert "'train': 2, 'validation': 2" in capsys.readouterr().err
    lab = L.load_labels(data_dir)
    import datasets as hf

    dd = hf.load_from_disk(data_dir)
    assert lab["train"]["graph_hash"] == dd["train"]["graph_hash"][:2]
    assert json.load(open(os.path.join(data_dir, "labels", "labels.json")))["config"] == L.LabelConfig().identity()


def test_screen_without_a_policy_or_below_zero_is_a_usage_error(dataset, capsys):
    for args, message in ((["--screen", "4"], "needs --policy MODEL"),
                          (["--screen", "-1", "--policy", "alphagrad/pretrained"], "must be >= 0")):
        with pytest.raises(SystemExit):
            data_gen_main(["label", "--data", dataset, "--no-progress", *args])
        assert message in capsys.readouterr().err


def test_missing_dataset_or_labels_and_another_schema_version_are_clear_errors(tmp_path, capsys):
    missing = str(tmp_path / "nowhere")
    assert data_gen_main(["label", "--data", missing, "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "no dataset" in err and "python -m data_gen build" in err
    with pytest.raises(FileNotFoundError, match=r"no labels in .*python -m data_gen label --data"):
        L.load_labels(str(tmp_path))
    os.makedirs(tmp_path / "labels")
    with open(tmp_path / "labels" / "labels.json", "w") as f:
        json.dump({"config": {**CONFIG.identity(), "label_schema_version": L.LABEL_SCHEMA_VERSION + 1}, "rows": {}},
                  f)
    with pytest.raises(ValueError, match=rf"schema version {L.LABEL_SCHEMA_VERSION + 1}.*rebuild them with "
                                         rf"`python -m data_gen label --data {tmp_path}`"):
        L.load_labels(str(tmp_path))
    for bad in (0, 1.5, True):
        with pytest.raises(ValueError, match="num_proc"):
            L.build_labels(str(tmp_path), num_proc=bad)
