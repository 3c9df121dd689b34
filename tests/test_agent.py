"""The pretrained agent: orders, results, caching, limits, argument and config checks,
loading, and the ``python -m hub`` tool (which loads agents)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import safetensors.numpy

import alphagrad as ag
from alphagrad import engine, hub
from alphagrad.agent import Agent, OrderResult
from alphagrad.hub.card import is_model_card
from alphagrad.hub.format import CONFIG_SIZE_LIMIT, init_params, model_config
from alphagrad.inference import InferenceSettings
from alphagrad.network import NetworkConfig, PolicyNet
from test_baselines import small_scalar


def tiny_agent(max_vertices=1024) -> Agent:
    config = NetworkConfig(dim=16, heads=2, layers=1)
    return Agent(model_config(config, max_vertices), init_params(PolicyNet(config), jax.random.key(0)))


@pytest.fixture(scope="module")
def agent():
    return tiny_agent()


@pytest.fixture(scope="module")
def graph():
    """Big enough for the network to play (more than AnnealSettings().exact_limit intermediates)."""
    ex = ag.examples.get("RoeFlux_1d")
    return ag.trace(ex.fn, *ex.args)


def test_order_is_valid_never_worse_than_the_baselines_and_cached(agent, graph):
    r = agent.order(graph, budget_s=1.0, progress=False)
    assert isinstance(r, OrderResult)
    assert sorted(r.order) == sorted(graph.intermediates)
    assert r.cost == ag.cost(graph, r.order)
    assert r.baselines == {"forward": ag.cost(graph, "fwd"), "reverse": ag.cost(graph, "rev"),
                           "markowitz": ag.cost(graph, "markowitz")}
    assert r.cost <= r.best_baseline and r.savings >= 0
    assert r.network_cost is not None and r.cost <= r.network_cost
    assert r.history[-1][1] == r.cost and r.history[-1][2] == r.method
    assert [c for _, c, _ in r.history] == sorted((c for _, c, _ in r.history), reverse=True)
    assert r.fingerprint == graph.fingerprint
    assert "savings vs the best baseline" in str(r)
    assert agent.order(graph, budget_s=1.0, progress=False) is r  # cached by graph and settings


def test_order_returns_within_its_budget(agent, graph):
    import time

    agent.order(graph, budget_s=0.2, seed=5, progress=False)  # compiled
    t = time.perf_counter()
    r = agent.order(graph, budget_s=0.5, seed=6, progress=False)
    assert time.perf_counter() - t < 0.5 * 1.1 + 0.2  # the budget, plus tracing-free setup
    assert r.seconds <= 0.55


_FIRST_CALLS = {
    "agent": "r = ag.from_pretrained().order(g, budget_s=1.0, progress=False)\n"
             "out = {'seconds': r.seconds, 'compile': r.compile_seconds, 'cost': r.cost,\n"
             "       'stages': [h[2] for h in r.history]}\n",
    "anneal": "out = {'cost': ag.cost(g, ag.baselines.anneal(g, budget_s=1.0))}\n",
}


@pytest.mark.parametrize("call", [
    "agent",
    # baselines.anneal's kernels are among those the agent's first call compiles
    pytest.param("anneal", marks=pytest.mark.slow),
])
def test_a_first_call_on_a_fresh_machine_compiles_outside_its_budget(call, tmp_path):
    """With numba's disk cache empty (a fresh install), compiling the kernels takes many
    seconds; it once ran inside the budget, so the first ``order`` returned long after it
    with a baseline's order and annealing never ran, and the first ``anneal`` ran 16
    moves. The kernels now compile before the clock starts (reported as compile_seconds
    by the agent)."""
    code = ("import json, alphagrad as ag\n"
            "ex = ag.examples.get('RoeFlux_3d')\n"
            "g = ag.trace(ex.fn, *ex.args)\n"
            "best = min(ag.cost(g, o) for o in ('fwd', 'rev', 'markowitz'))\n"
            + _FIRST_CALLS[call] + "out['best'] = best\nprint(json.dumps(out))\n")
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba"))
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    assert r["cost"] < 0.9 * r["best"]  # 1 s of annealing: about 0.82
    if call == "agent":
        assert r["seconds"] <= 1.1 and r["compile"] > 1.0
        assert any(s.startswith("anneal") for s in r["stages"])


def test_without_annealing_the_result_is_the_networks_or_a_baselines(agent, graph):
    settings = InferenceSettings(samples=3, anneal=False)
    r = agent.order(graph, budget_s=1.0, seed=1, progress=False, settings=settings)
    assert r.method in ("forward", "reverse", "markowitz", "network greedy", "network sampled")
    assert r.cost == min(r.network_cost, r.best_baseline)
    assert r.network_cost <= ag.cost(graph, agent.greedy_order(graph))


def test_the_schedule_anneals_with_the_annealing_settings_it_is_given(agent, graph, monkeypatch):
    from alphagrad import inference
    from alphagrad.anneal import AnnealSettings

    nested, seen = AnnealSettings(schedule="nested"), []

    def recording(*args, **kwargs):
        seen.append(kwargs["settings"])
        return inference.__dict__["_real_anneal"](*args, **kwargs)

    monkeypatch.setitem(inference.__dict__, "_real_anneal", inference.anneal)
    monkeypatch.setattr(inference, "anneal", recording)
    r = agent.order(graph, budget_s=0.5, seed=2, progress=False, settings=InferenceSettings(annealing=nested))
    assert seen == [nested]
    assert r.cost <= r.best_baseline
    with pytest.raises(ValueError, match="annealing = .* must be an alphagrad.anneal.AnnealSettings"):
        InferenceSettings(annealing={"schedule": "nested"})


def test_a_graph_small_enough_gets_the_proven_optimum_at_once(agent):
    import time

    args = (jnp.asarray(0.3), jnp.asarray(0.5), jnp.asarray(0.7))
    t = time.perf_counter()
    r = agent.order(small_scalar, *args, budget_s=10, progress=False)
    assert time.perf_counter() - t < 5
    g = ag.trace(small_scalar, *args)
    assert r.cost == ag.cost(g, ag.baselines.optimal(g))
    jac = ag.jacobian(small_scalar, order=r, argnums=(0, 1, 2))(*args)
    ref = jax.jacrev(small_scalar, argnums=(0, 1, 2))(*args)
    for a, b in zip(jax.tree_util.tree_leaves(jac), jax.tree_util.tree_leaves(ref)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_graph_over_the_limit_errors_or_falls_back(graph):
    small = tiny_agent(max_vertices=32)
    big = ag.examples.get("RoeFlux_1d")
    with pytest.raises(engine.GraphTooLargeError, match="fallback='markowitz'"):
        small.order(big.fn, *big.args, progress=False)
    with pytest.warns(UserWarning, match="without the network"):
        r = small.order(big.fn, *big.args, fallback="markowitz", budget_s=0.3, progress=False)
    assert r.network_cost is None
    assert r.cost <= min(ag.cost(graph, o) for o in ("fwd", "rev", "markowitz"))


def test_save_and_load_round_trip_and_bad_models(agent, tmp_path):
    agent.save_pretrained(tmp_path / "m")
    assert sorted(os.listdir(tmp_path / "m")) == ["README.md", "config.json", "model.safetensors"]
    loaded = ag.from_pretrained(str(tmp_path / "m"))
    for a, b in zip(jax.tree_util.tree_leaves(agent.params), jax.tree_util.tree_leaves(loaded.params)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    # weights that do not match the config
    cfg = json.loads((tmp_path / "m" / "config.json").read_text())
    cfg["network"]["dim"] = 32
    (tmp_path / "m" / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="do not match the config"):
        ag.from_pretrained(str(tmp_path / "m"))
    # a config this version cannot read
    cfg["network"] = {"width": 3}
    (tmp_path / "m" / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(hub.NotAnAlphagradModelError, match="upgrade alphagrad"):
        ag.from_pretrained(str(tmp_path / "m"))
    with pytest.raises(hub.ModelLoadError, match="does not exist"):
        ag.from_pretrained(str(tmp_path / "missing"))


def test_bundled_model_loads_offline_and_gives_an_order(graph, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    agent = ag.from_pretrained()
    assert agent.max_vertices >= 2048
    r = agent.order(graph, budget_s=0.5, progress=False)
    assert r.cost <= r.best_baseline and r.network_cost is not None


def test_a_model_of_the_old_dense_network_is_refused_with_what_to_do(agent, tmp_path):
    agent.save_pretrained(tmp_path / "m")
    cfg = json.loads((tmp_path / "m" / "config.json").read_text())
    cfg.update(format_version=1, max_structures=1024)
    (tmp_path / "m" / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(hub.UnsupportedFormatError, match="old dense network .* retrain with `python -m train`"):
        ag.from_pretrained(str(tmp_path / "m"))


# ------------------------------------------------------------------- arguments at the door


@pytest.mark.parametrize("kwargs, error, match", [
    ({"budget_s": -1.0}, ValueError, "budget_s must be a finite number of seconds > 0"),
    ({"budget_s": 0}, ValueError, "budget_s must be a finite number of seconds > 0"),
    ({"budget_s": math.nan}, ValueError, r"got nan"),
    ({"budget_s": math.inf}, ValueError, r"got inf"),
    ({"budget_s": "10"}, TypeError, "budget_s is a number of seconds .* of type str"),
    ({"budget_s": True}, TypeError, "of type bool"),
    ({"seed": -1}, ValueError, "seed must be an int >= 0, got -1"),
    ({"seed": 2**32}, ValueError, r"seed must be an int in \[0, 2\*\*32\)"),
    ({"seed": 1.0}, TypeError, "seed must be an int, got 1.0 of type float"),
    ({"seed": None}, TypeError, "of type NoneType"),
    ({"progress": "no"}, TypeError, "progress must be True or False"),
    ({"settings": {"samples": 3}}, TypeError, "settings must be an alphagrad.inference.InferenceSettings"),
    ({"fallback": "anneal"}, ValueError, "fallback must be None or 'markowitz'"),
])
def test_order_checks_its_arguments_before_any_work(agent, graph, monkeypatch, kwargs, error, match):
    def no_search(*args, **kw):
        raise AssertionError("the search started")
    monkeypatch.setattr("alphagrad.agent.find_order", no_search)
    kwargs = {"progress": False, **kwargs}
    with pytest.raises(error, match=match):
        agent.order(graph, **kwargs)


def test_order_checks_what_it_is_given(agent, graph):
    with pytest.raises(TypeError, match="takes no example arguments"):
        agent.order(graph, jnp.ones(3), progress=False)
    with pytest.raises(TypeError, match="must be a JAX function .* not int"):
        agent.order(3, progress=False)
    r = agent.order(graph, budget_s=np.float64(0.2), seed=np.uint32(7), progress=False)
    assert sorted(r.order) == sorted(graph.intermediates)  # numpy scalars are numbers too


# ------------------------------------------------------------------------ model configs


def _saved(agent, path, **config_changes):
    agent.save_pretrained(path)
    cfg = json.loads((path / "config.json").read_text())
    for key, value in config_changes.items():
        node = cfg
        *parents, leaf = key.split("__")
        for p in parents:
            node = node[p]
        node[leaf] = value
    (path / "config.json").write_text(json.dumps(cfg))
    return path


@pytest.mark.parametrize("changes, match", [
    ({"max_vertices": "1024"}, r"max_vertices must be an integer, got '1024' \(str\)"),
    ({"max_vertices": 1024.0}, r"max_vertices must be an integer, got 1024.0 \(float\)"),
    ({"max_vertices": True}, r"max_vertices must be an integer, got True \(bool\)"),
    ({"max_vertices": -5}, f"max_vertices must be from 1 to {CONFIG_SIZE_LIMIT}, got -5"),
    ({"max_vertices": 0}, "max_vertices must be from 1 to"),
    ({"max_vertices": 10**12}, f"max_vertices must be from 1 to {CONFIG_SIZE_LIMIT}, got 1000000000000"),
    ({"max_structures": 1024}, r"unknown keys \['max_structures'\]"),
    ({"network__dim": 1024}, "network.dim must be from 1 to 512"),
    ({"network__dim": "16"}, "network.dim must be an integer, got '16'"),
    ({"network__heads": 3}, r"network.dim \(16\) must be a multiple of network.heads \(3\)"),
    ({"network__layers": 0}, "network.layers must be from 1 to 12, got 0"),
    ({"network__encodings": 0}, "network.encodings must be from 1 to 64, got 0"),
    ({"network__width": 3}, r"network has unknown keys \['width'\]"),
    ({"network": [16, 2, 1]}, "'network' must be a dict"),
    ({"max_vertex": 64}, r"unknown keys \['max_vertex'\]"),
    ({"convention": "published"}, "convention must be 'exact'"),
])
def test_bad_model_configs_are_refused_with_the_reason(agent, tmp_path, changes, match):
    path = _saved(agent, tmp_path / "m", **changes)
    with pytest.raises(hub.NotAnAlphagradModelError, match=match) as info:
        ag.from_pretrained(str(path))
    assert "as `alphagrad.hub.format.model_config` writes it" in str(info.value)


def test_a_model_saved_before_encodings_encodes_its_graph_once(agent, tmp_path):
    """A config without ``network.encodings`` (saved before it existed) loads as a network
    that encodes the traced graph once a game, as it was trained to."""
    path = _saved(agent, tmp_path / "m")
    cfg = json.loads((path / "config.json").read_text())
    del cfg["network"]["encodings"]
    (path / "config.json").write_text(json.dumps(cfg))
    loaded = ag.from_pretrained(str(path))
    assert loaded.config["network"]["encodings"] == 1 and loaded.net.config.encodings == 1


def test_nan_weights_are_refused_through_from_pretrained(agent, tmp_path):
    agent.save_pretrained(tmp_path / "m")
    flat = safetensors.numpy.load_file(tmp_path / "m" / "model.safetensors")
    name = sorted(flat)[0]
    flat[name] = flat[name].copy()
    flat[name].flat[0] = np.nan
    meta = {"format": "np", "model_type": hub.MODEL_TYPE, "format_version": str(hub.FORMAT_VERSION)}
    (tmp_path / "m" / "model.safetensors").write_bytes(safetensors.numpy.save(flat, metadata=meta))
    with pytest.raises(hub.NotAnAlphagradModelError, match=f"NaN or infinite weights \\({name}: 1 of"):
        ag.from_pretrained(str(tmp_path / "m"))


def test_save_pretrained_keeps_a_users_readme(agent, tmp_path):
    (tmp_path / "README.md").write_text("# my project\n")
    with pytest.raises(FileExistsError, match="overwrite=True"):
        agent.save_pretrained(tmp_path)
    assert os.listdir(tmp_path) == ["README.md"]
    agent.save_pretrained(tmp_path, overwrite=True)
    assert is_model_card((tmp_path / "README.md").read_text())


# ------------------------------------------------------------------ the python -m hub tool


def test_hub_tool_checks_and_dry_run_pushes_a_saved_model(agent, tmp_path, capsys):
    from hub.__main__ import main

    model = tmp_path / "m"
    agent.save_pretrained(model)
    assert main(["check", str(model)]) == 0
    out = capsys.readouterr().out
    assert "an alphagrad model" in out and '"max_vertices": 1024' in out

    assert main(["push", str(model), "--repo-id", "org/name", "--dry-run", str(tmp_path / "dry")]) == 0
    assert "nothing was uploaded" in capsys.readouterr().out
    assert {p.name: p.read_bytes() for p in (tmp_path / "dry").iterdir()} == \
        {p.name: p.read_bytes() for p in model.iterdir()}

    # weights that do not fit the config's network are caught before anything is written
    cfg = json.loads((model / "config.json").read_text())
    cfg["network"]["dim"] = 32
    (model / "config.json").write_text(json.dumps(cfg))
    assert main(["push", str(model), "--repo-id", "org/name", "--dry-run", str(tmp_path / "dry2")]) == 2
    assert "do not match the config" in capsys.readouterr().err
    assert not (tmp_path / "dry2").exists()
    assert main(["push", str(tmp_path / "missing"), "--repo-id", "org/name", "--dry-run", str(tmp_path / "x")]) == 2
    assert "is not a directory" in capsys.readouterr().err
    assert main(["check", str(tmp_path / "missing")]) == 2


def test_hub_tool_runs_from_the_repository_root(agent, tmp_path):
    model = tmp_path / "m"
    agent.save_pretrained(model)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.run([sys.executable, "-m", "hub", "push", str(model), "--repo-id", "org/name",
                           "--dry-run", str(tmp_path / "dry")], cwd=root, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 0, proc.stderr
    assert sorted(os.listdir(tmp_path / "dry")) == ["README.md", "config.json", "model.safetensors"]


def test_greedy_order_is_the_networks_own_argmax_game(agent, graph):
    """greedy_order plays the network's most likely legal move at every step, from the
    function or its graph alike, and returns it as is (not the best baseline)."""
    from alphagrad import features
    from alphagrad.evaluator import Evaluator
    from alphagrad.player import embed

    order = agent.greedy_order(graph)
    assert sorted(order) == sorted(graph.intermediates)
    ex = ag.examples.get("RoeFlux_1d")
    assert agent.greedy_order(ex.fn, *ex.args) == order
    # replay: at every state the chosen vertex is the argmax of the network's logits
    ev = Evaluator(graph)
    scale = max(min(ag.cost(graph, o) for o in ("fwd", "rev", ag.baselines.markowitz(graph))), 1)
    inputs = features.graph_inputs(graph, ev, scale)
    h, _ = embed(agent.net, agent.params, inputs)
    o = np.asarray(order, np.int64)
    raw, _, _ = features.observe_along(ev.initial, o, np.arange(len(o)), features.Tables.of(ev))
    for t, v in enumerate(order):
        legal = np.zeros(graph.num_vertices, bool)
        legal[o[t:]] = True
        logits, _ = agent.net.apply(agent.params, h, features.dynamic_features(raw[t], scale, jnp), legal,
                                    jnp.float32(t / len(o)), method=PolicyNet.decode)
        logits = np.where(legal, np.asarray(logits), -np.inf)
        assert logits[v] >= logits.max() - 1e-4 * max(1.0, abs(logits.max()))
    with pytest.raises(engine.GraphTooLargeError, match="limit"):
        tiny_agent(max_vertices=8).greedy_order(graph)
