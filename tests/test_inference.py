"""The budgeted schedule and its network-free controls."""

from __future__ import annotations

import time

import pytest

import alphagrad as ag
from alphagrad import inference
from alphagrad.evaluator import Evaluator
from alphagrad.inference import InferenceSettings, find_order
from alphagrad.player import ControlPlayer


@pytest.fixture(scope="module")
def graph():
    ex = ag.examples.get("RoeFlux_1d")
    return ag.trace(ex.fn, *ex.args)


@pytest.fixture
def anneal_calls(monkeypatch):
    """The keyword arguments of every call the schedule makes to anneal (which still runs)."""
    calls = []
    original = inference.anneal

    def spy(g, **kw):
        calls.append(kw)
        return original(g, **kw)

    monkeypatch.setattr(inference, "anneal", spy)
    return calls


def _scale(graph):
    return max(min(ag.cost(graph, o) for o in ("fwd", "rev", "markowitz")), 1)


def test_control_priors_play_what_they_say(graph):
    ev = Evaluator(graph)
    s = _scale(graph)
    assert ControlPlayer("markowitz", graph, s, ev).play() == ag.baselines.markowitz(graph)
    assert ControlPlayer("uniform", graph, s, ev).play() == sorted(graph.intermediates)
    a, b = ControlPlayer("random", graph, s, ev, seed=1), ControlPlayer("random", graph, s, ev, seed=2)
    assert a.play() != b.play() and a.play() == ControlPlayer("random", graph, s, ev, seed=1).play()
    sampled = {tuple(ControlPlayer("uniform", graph, s, ev).play(1.0, k)) for k in range(5)}
    assert len(sampled) == 5 and all(sorted(o) == sorted(graph.intermediates) for o in sampled)
    with pytest.raises(ValueError, match="unknown control 'learned'"):
        ControlPlayer("learned", graph, s, ev)


def test_the_schedule_with_a_control_is_never_worse_than_the_baselines_and_records_its_stages(graph):
    settings = InferenceSettings(samples=4, anneal=False)
    r = find_order(graph, lambda g, s, ev, encode=True: ControlPlayer("random", g, s, ev, 3), 0.5, 0, settings)
    assert r.cost == ag.cost(graph, r.order) <= r.best_baseline
    assert r.network_cost is not None and r.cost == min(r.network_cost, r.best_baseline)
    assert {stage for _, _, stage in r.history} <= {"forward", "reverse", "markowitz", "network greedy",
                                                     "network sampled"}
    annealed = find_order(graph, lambda g, s, ev, encode=True: ControlPlayer("uniform", g, s, ev), 0.3, 0)
    assert annealed.cost <= annealed.best_baseline and annealed.seconds < 0.3 * 1.1 + 0.05
    without = find_order(graph, lambda *a, **k: None, 0.3, 0)  # no player at all: baselines and annealing
    assert without.network_cost is None and without.cost <= without.best_baseline


def test_the_opening_stage_anneals_after_the_players_opening_and_is_off_by_default(graph, monkeypatch,
                                                                                    anneal_calls):
    from alphagrad import anneal, baselines

    calls = anneal_calls
    player = ControlPlayer("markowitz", graph, _scale(graph), Evaluator(graph))
    r = find_order(graph, lambda *a, **k: player, 0.4, 0, InferenceSettings(samples=0, opening=0.5))
    n = len(graph.intermediates)
    assert [c.get("keep", 0) for c in calls] == [n // 2, 0]  # the opening stage, then the whole order
    assert calls[0]["start"] == player.play() and calls[0]["budget_s"] < 0.25
    assert r.cost == ag.cost(graph, r.order) <= r.best_baseline and r.seconds < 0.4 * 1.1 + 0.05
    assert {stage for _, _, stage in r.history} <= {"forward", "reverse", "markowitz", "network greedy",
                                                     "anneal after the network's opening", "anneal"}
    calls.clear()
    find_order(graph, lambda *a, **k: player, 0.2, 0)  # the default: no opening stage
    assert [c.get("keep", 0) for c in calls] == [0]
    # the last stage starts from the baselines, as annealing alone does, whatever the cores
    ev = Evaluator(graph)
    orders = [baselines.forward(graph), baselines.reverse(graph), ev.markowitz()]
    for threads in (2, 4):
        monkeypatch.setattr(anneal, "default_threads", lambda settings=None: threads)
        calls.clear()
        find_order(graph, lambda *a, **k: player, 0.2, 0)
        assert [list(map(int, o)) for o in calls[0]["start"]] == [list(map(int, o)) for o in orders]


class _Fixed:
    """A player that plays one given order (or raises ``error``), slowly."""

    compile_seconds = 0.0

    def __init__(self, order=None, error=None):
        self.order, self.error = order, error

    def play(self, temperature=0.0, seed=0):
        import time

        time.sleep(0.05)
        if self.error is not None:
            raise self.error
        return list(self.order)


def test_the_network_plays_beside_annealing_and_its_order_counts(graph):
    """The network's orders are played on a thread of their own while annealing runs: an
    order cheaper than the baselines is recorded as the network's, and the result is the
    cheapest of everything offered."""
    good = ag.baselines.anneal(graph, iterations=20000, seed=1)
    r = find_order(graph, lambda *a, **k: _Fixed(good), 0.3, 0, InferenceSettings(samples=2))
    assert r.network_cost == ag.cost(graph, good) < r.best_baseline
    assert ("network greedy" in {stage for _, _, stage in r.history}) and r.cost <= r.network_cost
    assert r.cost == ag.cost(graph, r.order) and r.seconds < 0.3 * 1.1 + 0.05


def test_the_networks_order_reaches_annealing_as_a_late_start(graph, monkeypatch):
    """While annealing runs, the network's order is handed to it once it is played
    (``late_start``, on by default), and not when the setting is off."""
    from alphagrad import baselines

    real, handed = baselines.anneal, []

    def spy(g, late=None, **kw):
        got = []
        handed.append(got if late is not None else None)

        def watched():
            order = late()
            if order is not None:
                got.append([int(v) for v in order])
            return order
        return real(g, late=watched if late is not None else None, **kw)

    good = real(graph, iterations=20000, seed=1)
    monkeypatch.setattr(inference, "anneal", spy)
    r = find_order(graph, lambda *a, **k: _Fixed(good), 0.5, 0, InferenceSettings(samples=0))
    assert handed == [[good]] and r.cost <= ag.cost(graph, good)
    handed.clear()
    find_order(graph, lambda *a, **k: _Fixed(good), 0.3, 0, InferenceSettings(samples=0, late_start=False))
    assert handed == [None]


@pytest.mark.parametrize("from_late", [True, False])
def test_history_tells_annealing_from_the_networks_order_apart(graph, monkeypatch, from_late):
    """When annealing's order comes from a chain that took the network's order late
    (``anneal(info=True)`` says so), the stage is "anneal from the network's order", else
    "anneal"."""
    from alphagrad import baselines

    good = baselines.anneal(graph, iterations=300, seed=1)
    better = baselines.anneal(graph, iterations=20000, seed=1)
    assert ag.cost(graph, better) < ag.cost(graph, good)

    def fake(g, late=None, info=False, **kw):
        while late() is None:  # until the network's order arrives
            time.sleep(0.001)
        return better, {"late": from_late}

    monkeypatch.setattr(inference, "anneal", fake)
    r = find_order(graph, lambda *a, **k: _Fixed(good), 0.3, 0, InferenceSettings(samples=0))
    stage = "anneal from the network's order" if from_late else "anneal"
    assert r.order == better and r.method == stage and [h[2] for h in r.history][-2:] == ["network greedy", stage]


@pytest.mark.parametrize("cheaper", [True, False])
def test_sampling_stops_once_annealing_beats_every_order_the_network_played(graph, monkeypatch, cheaper):
    """Sampled orders take a core from annealing: once annealing reports an order
    cheaper than every order the network played, the network stops sampling."""
    from alphagrad import baselines

    good = baselines.anneal(graph, iterations=20000, seed=1)
    network_cost = ag.cost(graph, good)

    def fake(g, late=None, progress=None, info=False, **kw):
        while late() is None:  # until the network's greedy order arrives
            time.sleep(0.001)
        progress(network_cost - 1 if cheaper else network_cost + 1)
        time.sleep(0.3)
        return good, {"late": False}

    class Counting(_Fixed):
        plays = 0

        def play(self, temperature=0.0, seed=0):
            Counting.plays += 1
            return super().play(temperature, seed)

    monkeypatch.setattr(inference, "anneal", fake)
    find_order(graph, lambda *a, **k: Counting(good), 1.0, 0, InferenceSettings(samples=8, sample_fraction=1.0))
    if cheaper:  # the greedy order, and at most one sample begun before the report
        assert Counting.plays <= 2
    else:
        assert Counting.plays == 9


def test_an_error_in_the_networks_thread_reaches_the_caller(graph):
    with pytest.raises(RuntimeError, match="the player broke"):
        find_order(graph, lambda *a, **k: _Fixed(error=RuntimeError("the player broke")), 0.2, 0)


@pytest.mark.parametrize("field, value", [("samples", -1), ("samples", 1.5), ("temperature", 0.0),
                                          ("temperature", float("nan")), ("sample_fraction", 1.5),
                                          ("opening", -0.1), ("opening_share", True), ("late_start", 1),
                                          ("anneal", "yes"), ("periodic_above", -1), ("periodic_share", 2.0),
                                          ("periodic_max_s", float("inf"))])
def test_settings_out_of_range_are_clear_errors(field, value):
    with pytest.raises(ValueError, match=f"{field} = "):
        InferenceSettings(**{field: value})


def test_the_progress_bar_shows_annealings_cheapest_cost_while_it_runs(graph, capsys):
    """A user watching a long call sees the seconds and the cheapest cost move during the
    annealing stage (most of the budget), not only when it returns."""
    make = lambda g, s, ev, encode=True: ControlPlayer("markowitz", g, s, ev)  # noqa: E731
    find_order(graph, make, 0.2, 0, InferenceSettings(samples=0))  # compiled before the clock
    capsys.readouterr()
    r = find_order(graph, make, 1.5, 0, InferenceSettings(samples=0), progress=True)
    shown = [int(part.split("best=")[1].split("]")[0].replace(",", ""))
             for part in capsys.readouterr().err.replace("\r", "\n").splitlines() if "best=" in part]
    assert r.method == "anneal" and r.cost < r.best_baseline
    assert len(shown) >= 4 and min(shown) < r.best_baseline  # ticks, and annealing's improvements, shown


def test_anneal_reports_each_cheaper_order_to_a_progress_function(graph, capsys):
    seen: list = []
    order = ag.baselines.anneal(graph, iterations=3000, seed=0, progress=seen.append)
    assert seen and seen == sorted(set(seen), reverse=True)  # strictly cheaper each time
    assert seen[-1] == ag.cost(graph, order)
    assert capsys.readouterr().err == ""  # reported to the function, not printed


def test_ctrl_c_during_annealing_returns_the_best_complete_order_with_a_warning(graph, monkeypatch):
    """Ctrl-C while the network plays beside annealing: the cheapest complete order offered
    so far comes back, with a warning, never a half-made one."""
    from alphagrad import baselines

    def interrupted(g, **kw):
        import time

        time.sleep(0.1)  # the network's thread offers its order meanwhile
        raise KeyboardInterrupt

    good = baselines.anneal(graph, iterations=20000, seed=1)
    monkeypatch.setattr(inference, "anneal", interrupted)
    with pytest.warns(UserWarning, match="interrupted"):
        r = find_order(graph, lambda *a, **k: _Fixed(good), 5.0, 0, InferenceSettings(samples=0))
    assert r.cost == ag.cost(graph, r.order) == ag.cost(graph, good) and r.method == "network greedy"
    assert sorted(r.order) == sorted(graph.intermediates) and r.seconds < 1.0


def test_a_large_looped_graph_gets_a_loop_periodic_start(anneal_calls):
    """Above ``periodic_above`` intermediates, in a graph with a traced loop, the best
    loop-periodic order is searched, offered and handed to annealing: as its only start
    where it is cheaper than every baseline, else beside them. Below the threshold, or
    without a loop, annealing starts from the baselines as before."""
    from alphagrad.examples import real

    calls = anneal_calls
    ex = real.make_pendulum_chain(n=4, steps=4)
    looped = ag.trace(ex.fn, *ex.args)
    none = lambda *a, **k: None  # noqa: E731 - no network: baselines, the periodic start, annealing
    r = find_order(looped, none, 0.6, 0, InferenceSettings(periodic_above=0))
    assert "loop-periodic" in {stage for _, _, stage in r.history}
    periodic = ag.baselines.periodic(looped, moves=2000, seed=0)
    baselines = min(ag.cost(looped, o) for o in ("fwd", "rev", "markowitz"))
    assert ag.cost(looped, periodic) < baselines  # so it is annealing's only start
    (call,) = calls
    assert len(call["start"]) == 1 and ag.cost(looped, call["start"][0]) < baselines
    assert r.cost == ag.cost(looped, r.order) <= ag.cost(looped, call["start"][0])
    calls.clear()
    r = find_order(looped, none, 0.3, 0)  # the default threshold: a graph this small has none
    assert "loop-periodic" not in {stage for _, _, stage in r.history} and len(calls[0]["start"]) == 3
