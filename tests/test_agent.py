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
from alphagrad.agent import CONFIG_SIZE_LIMIT, Agent, OrderResult, _dummy_input, model_config
from alphagrad.card import is_model_card
from alphagrad.network import NetworkConfig, PolicyValueNet, observe
from test_baselines import small_scalar


def tiny_agent(max_vertices=1024) -> Agent:
    config = NetworkConfig(dim=16, heads=2, layers=1)
    params = PolicyValueNet(config).init(jax.random.key(0), *_dummy_input())
    return Agent(model_config(config, max_vertices, 1024), params)


@pytest.fixture(scope="module")
def agent():
    return tiny_agent()


@pytest.fixture(scope="module")
def graph():
    return ag.trace(small_scalar, 0.3, 0.5, 0.7)


def test_order_is_valid_never_worse_than_the_baselines_and_cached(agent, graph):
    r = agent.order(graph, budget_s=1.0, progress=False)
    assert isinstance(r, OrderResult)
    assert sorted(r.order) == sorted(graph.intermediates)
    assert r.cost == ag.cost(graph, r.order)
    assert r.baselines == {"forward": ag.cost(graph, "fwd"), "reverse": ag.cost(graph, "rev"),
                           "markowitz": ag.cost(graph, "markowitz")}
    assert r.cost <= r.best_baseline and r.savings >= 0
    assert r.cost <= r.zero_shot_cost
    assert r.history[-1][1] == r.cost
    assert r.fingerprint == graph.fingerprint
    assert "savings vs the best baseline" in str(r)
    assert agent.order(graph, budget_s=1.0, progress=False) is r  # cached by graph and settings


def test_a_spent_budget_still_plays_the_network_once_and_starts_nothing_more(agent, graph):
    r = agent.order(graph, budget_s=1e-6, seed=1, progress=False)  # fine-tuning on, but no time for it
    assert r.cost == r.zero_shot_cost
    assert r.method in ("forward", "reverse", "markowitz", "zero-shot greedy", "zero-shot sampled")
    assert sorted(r.order) == sorted(graph.intermediates)


def test_zero_shot_and_jacobian_takes_the_result(agent):
    args = (jnp.asarray(0.3), jnp.asarray(0.5), jnp.asarray(0.7))
    r = agent.order(small_scalar, *args, finetune=False, simulations=2, budget_s=0.5, progress=False)
    assert r.method in ("forward", "reverse", "markowitz") or r.method.startswith("zero-shot")
    jac = ag.jacobian(small_scalar, order=r, argnums=(0, 1, 2))(*args)
    ref = jax.jacrev(small_scalar, argnums=(0, 1, 2))(*args)
    for a, b in zip(jax.tree_util.tree_leaves(jac), jax.tree_util.tree_leaves(ref)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_graph_over_the_limit_errors_or_falls_back(graph):
    small = tiny_agent(max_vertices=32)
    big = ag.examples.get("RoeFlux_1d")
    with pytest.raises(engine.GraphTooLargeError, match="fallback='markowitz'"):
        small.order(big.fn, *big.args, progress=False)
    with pytest.warns(UserWarning, match="Markowitz order"):
        r = small.order(big.fn, *big.args, fallback="markowitz", progress=False)
    g = ag.trace(big.fn, *big.args)
    assert r.cost == min(ag.cost(g, o) for o in ("fwd", "rev", "markowitz"))


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
    assert agent.max_vertices >= 512
    r = agent.order(graph, budget_s=0.5, progress=False)
    assert r.cost <= r.best_baseline


# ------------------------------------------------------------------- arguments at the door


@pytest.mark.parametrize("kwargs, error, match", [
    ({"budget_s": -1.0}, ValueError, "budget_s must be a finite number of seconds > 0"),
    ({"budget_s": 0}, ValueError, "budget_s must be a finite number of seconds > 0"),
    ({"budget_s": math.nan}, ValueError, r"got nan"),
    ({"budget_s": math.inf}, ValueError, r"got inf"),
    ({"budget_s": "10"}, TypeError, "budget_s is a number of seconds .* of type str"),
    ({"budget_s": True}, TypeError, "of type bool"),
    ({"simulations": -1}, ValueError, "simulations must be an int >= 0, got -1"),
    ({"simulations": 2.5}, TypeError, "simulations must be an int, got 2.5 of type float"),
    ({"seed": -1}, ValueError, "seed must be an int >= 0, got -1"),
    ({"seed": 2**32}, ValueError, r"seed must be an int in \[0, 2\*\*32\)"),
    ({"seed": 1.0}, TypeError, "seed must be an int, got 1.0 of type float"),
    ({"seed": None}, TypeError, "of type NoneType"),
    ({"finetune": "no"}, TypeError, "finetune must be True or False"),
    ({"fallback": "anneal"}, ValueError, "fallback must be None or 'markowitz'"),
])
def test_order_checks_its_arguments_before_any_work(agent, graph, monkeypatch, kwargs, error, match):
    def no_search(*args, **kw):
        raise AssertionError("the search started")
    monkeypatch.setattr("alphagrad.agent._Search", no_search)
    with pytest.raises(error, match=match):
        agent.order(graph, progress=False, **kwargs)


def test_order_checks_what_it_is_given(agent, graph):
    with pytest.raises(TypeError, match="takes no example arguments"):
        agent.order(graph, jnp.ones(3), progress=False)
    with pytest.raises(TypeError, match="must be a JAX function .* not int"):
        agent.order(3, progress=False)
    r = agent.order(graph, budget_s=np.float64(0.2), simulations=np.int64(0), seed=np.uint32(7), progress=False)
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
    ({"max_structures": 10**9}, "max_structures must be from 1 to"),
    ({"network__dim": "16"}, "network.dim must be an integer, got '16'"),
    ({"network__heads": 3}, r"network.dim \(16\) must be a multiple of network.heads \(3\)"),
    ({"network__layers": 0}, "network.layers must be >= 1"),
    ({"network__width": 3}, r"network has unknown keys \['width'\]"),
    ({"network": [16, 2, 1]}, "'network' must be a dict"),
    ({"max_vertex": 64}, r"unknown keys \['max_vertex'\]"),
    ({"convention": "published"}, "convention must be 'exact'"),
])
def test_bad_model_configs_are_refused_with_the_reason(agent, tmp_path, changes, match):
    path = _saved(agent, tmp_path / "m", **changes)
    with pytest.raises(hub.NotAnAlphagradModelError, match=match) as info:
        ag.from_pretrained(str(path))
    assert "as `alphagrad.agent.model_config` writes it" in str(info.value)


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
    order = agent.greedy_order(graph)
    assert sorted(order) == sorted(graph.intermediates)
    assert agent.greedy_order(small_scalar, 0.3, 0.5, 0.7) == order
    # replay: at every state the chosen vertex is the argmax of the network's logits
    ev_scale = max(min(ag.cost(graph, o) for o in ("fwd", "rev", ag.baselines.markowitz(graph))), 1)
    state = engine.encode(graph, "exact", max_vertices=agent.max_vertices)
    for v in order:
        tokens, edges, mask = observe(state, jnp.float32(ev_scale))
        logits, _ = agent.net.apply(agent.params, tokens, edges, mask)
        legal = np.asarray(state.eliminable)
        assert int(np.argmax(np.where(legal, np.asarray(logits), -np.inf))) == v
        state, _ = engine.eliminate(state, v)
    with pytest.raises(engine.GraphTooLargeError, match="limit"):
        tiny_agent(max_vertices=8).greedy_order(graph)
