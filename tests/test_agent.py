"""The pretrained agent: orders, results, caching, limits, loading, the CLI."""

from __future__ import annotations

import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import alphagrad as ag
import hub
from alphagrad import engine
from alphagrad.agent import Agent, OrderResult, _dummy_input, model_config
from alphagrad.network import NetworkConfig, PolicyValueNet
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
    r = agent.order(graph, budget_s=0.0, seed=1, progress=False)  # fine-tuning on, but no time for it
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


def test_cli_order_prints_costs(tmp_path, capsys):
    from alphagrad import cli

    src = tmp_path / "f.py"
    src.write_text("import jax.numpy as jnp\n\ndef f(x, y):\n    return jnp.sin(x @ y) * jnp.tanh(x).sum()\n")
    model = tmp_path / "model"
    tiny_agent().save_pretrained(model)
    assert cli.main(["order", f"{src}:f", "--args", "f32[3,4] f32[4]", "--model", str(model),
                     "--budget", "0.5", "--json"]) == 0
    out = json.loads(capsys.readouterr().out.splitlines()[-1])
    g = ag.trace(lambda x, y: jnp.sin(x @ y) * jnp.tanh(x).sum(), jnp.ones((3, 4)), jnp.ones(4))
    assert out["cost"] == ag.cost(g, out["order"])
    assert cli.main(["order", f"{src}:g", "--args", "f32[3]"]) == 2
    assert cli.main(["order", f"{src}:f", "--args", "float[3]"]) == 2
    assert "dtype[shape]" in capsys.readouterr().err
