"""The per-graph fine-tune (alphagrad.selfplay.finetune, Agent.finetune, Agent.order's
finetune_s, ``alphagrad order --finetune``): it adapts a copy of the weights, the same
seed gives the same weights, its games' cheapest order competes in the schedule, and bad
lengths, settings and graphs too large are clear errors before any work."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import alphagrad as ag
from alphagrad import cli, engine, selfplay
from alphagrad.selfplay import FinetuneSettings
from test_agent import tiny_agent

#: A few small games and updates: what each step does is checked, not how much it learns.
SMALL = FinetuneSettings(games=2, simulations=2, max_considered=2, states_per_game=4, replay=4, batch_games=2,
                         updates_per_step=2, learning_rate=1e-3, max_steps=2)


def f(x, y):
    h = jnp.tanh(x * y) + jnp.sin(x)
    return jnp.stack([(h * jnp.cos(y)).sum(), (jnp.exp(-h) * x).sum(), jnp.log1p(h * h).sum()])


@pytest.fixture(scope="module")
def graph():
    return ag.trace(f, jnp.ones(3), jnp.ones(3))


@pytest.fixture(scope="module")
def agent():
    return tiny_agent()


def _leaves(params):
    return [np.asarray(x) for x in jax.tree_util.tree_leaves(params)]


def test_finetune_adapts_a_copy_the_same_seed_the_same_weights(agent, graph):
    before = _leaves(agent.params)
    tuned = agent.finetune(graph, seconds=600, seed=3, settings=SMALL)
    again = agent.finetune(graph, seconds=600, seed=3, settings=SMALL)
    for a, b in zip(_leaves(agent.params), before, strict=True):  # the agent's own weights untouched
        np.testing.assert_array_equal(a, b)
    for a, b in zip(_leaves(tuned.params), _leaves(again.params), strict=True):
        np.testing.assert_array_equal(a, b)
    ft = tuned.finetuned
    assert agent.finetuned is None and (ft.steps, ft.games, ft.updates) == (2, 4, 4)
    assert len(ft.history) == 2 and ft.compile_seconds >= 0 and ft.seconds > 0
    assert sorted(ft.order) == sorted(graph.intermediates) and ft.cost == ag.cost(graph, ft.order)
    assert again.finetuned.compile_seconds < ft.compile_seconds  # compiled once per shapes and settings
    # the weights kept are those whose greedy order is cheapest: never dearer than before
    assert ag.cost(graph, agent.greedy_order(graph)) == ft.greedy_before
    assert ag.cost(graph, tuned.greedy_order(graph)) == ft.greedy_cost <= ft.greedy_before
    scale = max(min(ag.cost(graph, m) for m in ("fwd", "rev", "markowitz")), 1)
    assert ft.greedy_cost == min([ft.greedy_before] + [round(h[2] * scale) for h in ft.history])
    assert ft.cost <= ft.greedy_cost
    unchanged = all(np.array_equal(a, b) for a, b in zip(_leaves(tuned.params), before, strict=True))
    assert unchanged == (ft.greedy_cost == ft.greedy_before)


def test_a_finetune_stops_when_its_time_is_up(agent, graph):
    settings = FinetuneSettings(**{**SMALL.__dict__, "max_steps": None})
    ft = agent.finetune(graph, seconds=0.01, settings=settings).finetuned
    assert ft.steps == 1  # the first step ends past the time


def test_order_after_a_finetune_keeps_the_cheapest_and_says_what_was_done(agent, graph):
    from alphagrad.inference import InferenceSettings

    plain = agent.order(graph, budget_s=0.3, progress=False)
    r = agent.order(graph, budget_s=0.3, progress=False, finetune_s=0.2,
                    settings=InferenceSettings(finetune=FinetuneSettings(**{**SMALL.__dict__, "max_steps": None})))
    assert r is not plain  # cached apart
    assert set(r.finetune) == {"seconds", "compile_seconds", "games", "updates", "cost", "greedy_before",
                               "greedy_cost"}
    assert r.finetune["games"] >= 2 and r.cost <= min(r.finetune["cost"], r.best_baseline)
    assert sorted(r.order) == sorted(graph.intermediates) and r.cost == ag.cost(graph, r.order)
    assert "fine-tune: " in str(r)
    assert plain.finetune is None and "fine-tune" not in str(plain)


def test_the_fine_tunes_order_competes_in_the_schedule(graph):
    from alphagrad.inference import find_order

    reverse = ag.baselines.reverse(graph)
    r = find_order(graph, lambda *a, **k: None, 0.05, extra={"fine-tune self-play": reverse[::-1], "none": None})
    assert r.history[0][2] == "forward" and any(stage == "fine-tune self-play" for _, _, stage in r.history) == (
        ag.cost(graph, reverse[::-1]) < min(r.baselines.values()))


@pytest.mark.parametrize("seconds, error, message", [
    (0, ValueError, "finite number of seconds > 0"),
    (-1.0, ValueError, "finite number of seconds > 0"),
    (math.nan, ValueError, "finite number of seconds > 0"),
    (math.inf, ValueError, "finite number of seconds > 0"),
    (3601, ValueError, "longer than a fine-tune is meant to run.*python -m train"),
    ("5", TypeError, "is a number of seconds"),
    (True, TypeError, "is a number of seconds"),
])
def test_bad_finetune_lengths_are_refused_before_any_work(agent, seconds, error, message):
    def untraceable(x):
        raise AssertionError("traced")

    with pytest.raises(error, match=message):
        agent.order(untraceable, jnp.ones(3), finetune_s=seconds)
    with pytest.raises(error, match=message):
        agent.finetune(untraceable, jnp.ones(3), seconds=seconds)


@pytest.mark.parametrize("changes, message", [
    ({"games": 0}, "FinetuneSettings.games must be an int >= 1"),
    ({"simulations": 2.5}, "FinetuneSettings.simulations must be an int"),
    ({"learning_rate": math.nan}, "FinetuneSettings.learning_rate must be a finite number > 0"),
    ({"gumbel_scale": -1.0}, "FinetuneSettings.gumbel_scale must be a finite number"),
    ({"replay": 4, "batch_games": 8}, "batch_games=8 is more games than the buffer holds"),
])
def test_bad_finetune_settings(changes, message):
    with pytest.raises((ValueError, TypeError), match=message):
        FinetuneSettings(**changes)


def test_settings_of_the_wrong_kind(agent, graph):
    from alphagrad.inference import InferenceSettings

    with pytest.raises(TypeError, match="settings must be an alphagrad.selfplay.FinetuneSettings"):
        agent.finetune(graph, seconds=1, settings={"games": 2})
    with pytest.raises(ValueError, match="finetune = .* must be an alphagrad.selfplay.FinetuneSettings or None"):
        InferenceSettings(finetune={"games": 2})


def test_a_graph_over_the_games_size_is_a_clear_error(agent):
    def long(x):
        for _ in range(700):
            x = jnp.sin(x) * x
        return x

    graph = ag.trace(long, jnp.ones(()))
    assert engine.MAX_VERTICES < graph.num_vertices <= agent.max_vertices * 4
    big = tiny_agent(max_vertices=4 * engine.MAX_VERTICES)
    with pytest.raises(engine.GraphTooLargeError, match="more than the fine-tune's limit of 1024"):
        big.finetune(graph, seconds=1)
    with pytest.raises(engine.GraphTooLargeError, match="leave finetune_s out"):
        selfplay.finetune(big.net, big.params, graph, 1.0)


@pytest.mark.parametrize("value, message", [("0", "must be a finite number of seconds > 0"),
                                            ("5000", "at most 3600 s"), ("abc", "expected a number of seconds")])
def test_cli_finetune_lengths(value, message, capsys, tmp_path):
    src = tmp_path / "f.py"
    src.write_text("def f(x):\n    return x * 2\n")
    with pytest.raises(SystemExit) as e:
        cli.main(["order", f"{src}:f", "--args", "f32[3]", "--finetune", value])
    assert e.value.code == 2 and message in capsys.readouterr().err


def test_bench_finetune_resumes_only_a_report_of_the_same_settings(tmp_path, capsys):
    """A fine-tune benchmark cut short (by a device's time limit) goes on with --resume:
    graphs already in OUT are kept and not measured again; a report made with other
    settings is refused, never mixed in."""
    import argparse
    import json

    from eval import bench_finetune

    args = argparse.Namespace(seconds="60", anneal=5.0, budget=5.0, seed=0, schedule=False)
    row = {"name": "MLP", "intermediates": 33, "greedy": 1.121, "anneal @5s": 1.0, "ft 60s: greedy": 1.085}
    report = {"rows": [row], "settings": bench_finetune.run_settings(args, FinetuneSettings())}
    (tmp_path / "report.json").write_text(json.dumps(report))
    common = ["--programs", "MLP", "--seconds", "60", "--no-schedule", "--resume", "--out", str(tmp_path)]
    assert bench_finetune.main(common) == 0
    assert "nothing left to measure" in capsys.readouterr().err
    assert json.loads((tmp_path / "report.json").read_text()) == report
    with pytest.raises(SystemExit) as e:
        bench_finetune.main(common + ["--games", "32"])
    assert e.value.code == 2 and "made with other settings" in capsys.readouterr().err
