"""Baselines: forward, reverse, Markowitz, the exact optimum and annealing."""

import dataclasses
import functools
import itertools
import signal
import threading
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import alphagrad as ag
from alphagrad import baselines, engine
from alphagrad.anneal import AnnealSettings, default_threads, temperatures
from alphagrad.evaluator import Evaluator
from data_gen import random_programs as rp


def small_scalar(x, y, z):
    a = jnp.sin(x * y)
    b = jnp.exp(a + z)
    c = a * b
    d = jnp.cos(c - x)
    return d * b, c + z * d


def small_tensor(x, W, v):
    h = jnp.tanh(W @ x)
    s = jnp.sum(h * v)
    g = jnp.exp(h) * s
    return g, jnp.sin(s) * x


SMALL = [
    (small_scalar, (0.3, 0.5, 0.7)),
    (small_tensor, (jnp.ones(3), jnp.ones((4, 3)) * 0.1, jnp.arange(4.0))),
]


def _brute_force(graph, convention):
    ev = Evaluator(graph, convention)
    return min(ev.cost(p) for p in itertools.permutations(graph.intermediates))


@pytest.mark.parametrize("f,args", SMALL)
@pytest.mark.parametrize("convention", ["exact", "published"])
def test_optimal_equals_brute_force_and_beats_every_baseline(f, args, convention):
    g = ag.trace(f, *args)
    assert 3 <= len(g.intermediates) <= 8
    best = _brute_force(g, convention)
    opt = baselines.optimal(g, convention)
    assert ag.cost(g, opt, convention=convention) == best
    for fn in (baselines.forward, baselines.reverse):
        assert best <= ag.cost(g, fn(g), convention=convention)
    assert best <= ag.cost(g, baselines.markowitz(g, convention), convention=convention)


def test_optimal_refuses_large_graphs_with_advice():
    ex = ag.examples.get("RoeFlux_1d")
    g = ag.trace(ex.fn, *ex.args)
    with pytest.raises(ValueError, match="max_intermediates.*anneal"):
        baselines.optimal(g)


def test_markowitz_is_greedy_and_deterministic():
    ex = ag.examples.get("HumanHeartDipole")
    g = ag.trace(ex.fn, *ex.args)
    o1, o2 = baselines.markowitz(g), baselines.markowitz(g)
    assert o1 == o2 and sorted(o1) == sorted(g.intermediates)
    # each step picks a vertex of minimal current cost, the smallest id on ties
    ev = Evaluator(g)
    E = ev.new_state()
    remaining = set(g.intermediates)
    for v in o1:
        costs = {u: ev.vertex_cost(E, u) for u in remaining}
        assert v == min(remaining, key=lambda u: (costs[u], u))
        ev.step(E, v)
        remaining.remove(v)


def test_anneal_never_worse_than_its_start_and_deterministic_with_iterations():
    ex = ag.examples.get("RoeFlux_1d")
    g = ag.trace(ex.fn, *ex.args)
    start = min((baselines.forward(g), baselines.reverse(g), baselines.markowitz(g)), key=lambda o: ag.cost(g, o))
    a1 = baselines.anneal(g, iterations=20000, seed=3)
    a2 = baselines.anneal(g, iterations=20000, seed=3)
    assert a1 == a2
    assert ag.cost(g, a1) <= ag.cost(g, start)
    assert sorted(a1) == sorted(g.intermediates)
    assert ag.cost(g, baselines.anneal(g, budget_s=0.5, seed=0)) <= ag.cost(g, start)


def test_annealing_climbs_when_hot_never_when_cold_and_beats_the_descent_alone():
    """What annealing is for: the Metropolis rule takes dearer orders at a high
    temperature (to leave a local optimum) and none near zero."""
    for name in ("RoeFlux_1d", "RandomG"):
        ex = ag.examples.get(name)
        g = ag.trace(ex.fn, *ex.args)
        ev = Evaluator(g)
        descended = baselines.descend(g, "reverse")
        start = np.asarray(descended, np.int64)  # a local optimum: most moves climb
        c0 = ev.cost(start)
        order, best = start.copy(), start.copy()
        cur, best_cost, _ = ev.anneal(order, best, 300, 1e9, 1e9, seed=0)
        assert cur == ev.cost(order) > c0 and best_cost == ev.cost(best) <= c0, name
        order, costs = start.copy(), [c0]
        for seed in range(100):  # move by move, near zero: never dearer
            costs.append(ev.anneal(order, start.copy(), 1, 1e-9, 1e-9, seed=seed)[0])
        assert costs == sorted(costs, reverse=True) and costs[-1] == ev.cost(order), name
        # from the same start, annealing ends cheaper than the descent alone
        annealed = baselines.anneal(g, iterations=3000, seed=0, threads=1, start="reverse")
        assert ag.cost(g, annealed) < c0, name


@pytest.mark.parametrize("name", ["RoeFlux_3d", "RandomG", "BlackScholes_Jacobian", "small"])
def test_anneal_reports_every_cheaper_order_it_finds_ending_with_the_one_it_returns(name, small):
    """``progress`` is told each cost below every start order's, annealing's own
    improvements included (not only the descents'), the last the returned order's."""
    if name == "small":  # solved exactly
        g = small
    else:
        ex = ag.examples.get(name)
        g = ag.trace(ex.fn, *ex.args)
    cheapest_start = min(ag.cost(g, o) for o in ("fwd", "rev", "markowitz"))
    for threads, keep in [(1, 0), (2, 0), (1, 3)]:
        seen = []
        order = baselines.anneal(g, iterations=3000, seed=0, threads=threads, keep=keep,
                                 start="reverse" if keep else None, progress=seen.append)
        start_cost = ag.cost(g, "rev") if keep else cheapest_start
        assert seen == sorted(set(seen), reverse=True) and all(c < start_cost for c in seen), (threads, keep)
        assert (seen[-1] if seen else start_cost) == ag.cost(g, order), (threads, keep)
        if name != "small":
            assert seen, (threads, keep)


def test_anneal_chains_side_by_side_only_add_to_the_chain_of_its_seed():
    g = ag.trace(*_roeflux_1d())
    one = baselines.anneal(g, iterations=3000, seed=5, threads=1)
    three = baselines.anneal(g, iterations=3000, seed=5, threads=3)
    assert three == baselines.anneal(g, iterations=3000, seed=5, threads=3)  # deterministic
    assert ag.cost(g, three) <= ag.cost(g, one)
    # from one start order, each chain is the single chain of its seed
    start = baselines.reverse(g)
    three = baselines.anneal(g, iterations=3000, seed=5, threads=3, start=start)
    costs = {ag.cost(g, baselines.anneal(g, iterations=3000, seed=s, threads=1, start=start))
             for s in (5, 5 + 7919, 5 + 2 * 7919)}
    assert ag.cost(g, three) == min(costs)  # the best of the three seeds' chains
    assert 1 <= default_threads() <= AnnealSettings().max_threads
    assert default_threads(AnnealSettings(max_threads=1)) == 1


@pytest.mark.parametrize("name", ["RoeFlux_1d", "BlackScholes_Jacobian"])
def test_nested_annealing_never_returns_a_dearer_order_for_more_moves(name):
    """The nested schedule's promise: a run of 2W moves repeats the run of W moves and goes
    on, so its order is never dearer (one chain or several, seed fixed). The schedule whose
    temperature follows the whole budget breaks this on RoeFlux_1d (192 then 194 at 500 and
    1,000 moves, one chain)."""
    ex = ag.examples.get(name)
    g = ag.trace(ex.fn, *ex.args)
    nested = AnnealSettings(schedule="nested")
    for threads in (1, 2):
        costs = [ag.cost(g, baselines.anneal(g, iterations=w, seed=3, threads=threads, settings=nested))
                 for w in (500, 1000, 2000, 4000, 8000)]
        assert costs == sorted(costs, reverse=True), (threads, costs)
        assert costs[-1] < costs[0]  # the moves are spent, not skipped
    with pytest.raises(ValueError, match="schedule must be 'budget' or 'nested'"):
        AnnealSettings(schedule="doubling")
    # a late start lands at a fixed cycle of the last chain, so it keeps the promise
    good = baselines.anneal(g, iterations=50000, seed=9, threads=2)  # cheaper than a chain at its 3rd cycle
    asked = []

    def late():
        asked.append(1)
        return good

    for threads in (1, 2):
        taking = dataclasses.replace(nested, late_margin=1.0)
        runs = [baselines.anneal(g, iterations=w, seed=3, threads=threads, settings=taking, late=late, info=True)
                for w in (1000, 2000, 4000)]
        costs = [ag.cost(g, order) for order, _ in runs]
        assert costs == sorted(costs, reverse=True) and all(where["late"] for _, where in runs), costs
        assert costs[0] <= ag.cost(g, good)
    assert len(asked) == 6  # once a run
    with pytest.raises(ValueError, match="late starts arrive on the clock"):
        baselines.anneal(g, iterations=1000, late=late)
    timed = baselines.anneal(g, budget_s=0.2, seed=0, settings=nested)
    assert sorted(timed) == sorted(g.intermediates)
    assert ag.cost(g, timed) <= min(ag.cost(g, o) for o in (baselines.forward(g), baselines.reverse(g)))


@pytest.mark.parametrize("threads,error,message", [(0, ValueError, "threads must be an int >= 1"),
                                                   (1.5, TypeError, "threads must be an int")])
def test_anneal_refuses_a_bad_thread_count(small, threads, error, message):
    with _Deadline(5), pytest.raises(error, match=message):
        baselines.anneal(small, iterations=5, threads=threads)


def test_anneal_with_keep_anneals_only_what_follows_the_kept_opening():
    ex = ag.examples.get("RoeFlux_1d")
    g = ag.trace(ex.fn, *ex.args)
    start = baselines.reverse(g)
    k = len(start) // 2
    out = baselines.anneal(g, iterations=20000, seed=3, start=start, keep=k)
    assert out[:k] == start[:k] and sorted(out) == sorted(g.intermediates)
    assert ag.cost(g, out) < ag.cost(g, start)
    assert out == baselines.anneal(g, iterations=20000, seed=3, start=start, keep=k)
    assert out != baselines.anneal(g, iterations=20000, seed=3, start=start)  # the opening moves otherwise
    timed = baselines.anneal(g, budget_s=0.2, seed=0, start=start, keep=k)
    assert timed[:k] == start[:k] and ag.cost(g, timed) <= ag.cost(g, start)
    assert baselines.anneal(g, iterations=10, start=start, keep=len(start)) == start  # nothing left to anneal
    with pytest.raises(ValueError, match="keep = 999 is more than"):
        baselines.anneal(g, iterations=10, start=start, keep=999)
    with pytest.raises((TypeError, ValueError), match="keep"):
        baselines.anneal(g, iterations=10, start=start, keep=-1)


@jax.jit
def _engine_greedy(state):
    """Markowitz on the JAX engine: at each step the eliminable vertex of least current cost
    (engine.vertex_costs), the smallest id on ties."""

    def step(state, _):
        costs = jnp.where(state.eliminable, engine.vertex_costs(state), jnp.inf)
        v = jnp.argmin(costs)
        return engine.eliminate(state, v)[0], v

    return jax.lax.scan(step, state, None, length=state.eliminable.shape[0])[1]


def test_markowitz_equals_a_greedy_run_on_the_jax_engine():
    """baselines.markowitz runs on the compiled evaluator; the same greedy rule played on the
    JAX engine (one padded size: one compile) gives the same order."""
    for name in ("RoeFlux_1d", "RobotArm_6DOF", "HumanHeartDipole", "MLP"):
        ex = ag.examples.get(name)
        g = ag.trace(ex.fn, *ex.args)
        state = engine.encode(g, num_vertices=128, num_structures=256)
        order = [int(v) for v in np.asarray(_engine_greedy(state))[: len(g.intermediates)]]
        assert order == baselines.markowitz(g) == Evaluator(g).markowitz(), name


# ---------------------------------------------------------------- arguments checked at the door


class _Deadline:
    """Fails (instead of hanging) if the block takes longer than ``seconds``."""

    def __init__(self, seconds):
        self.seconds = seconds

    def __enter__(self):
        def fail(*_):
            raise TimeoutError(f"took more than {self.seconds} s: the argument was not refused at the door")
        self.old = signal.signal(signal.SIGALRM, fail)
        signal.alarm(self.seconds)

    def __exit__(self, *exc):
        signal.alarm(0)
        signal.signal(signal.SIGALRM, self.old)


@pytest.fixture(scope="module")
def small():
    return ag.trace(small_scalar, 0.3, 0.5, 0.7)


BAD_BUDGETS = [(float("nan"), ValueError, "finite number of seconds > 0"),
               (-1.0, ValueError, "finite number of seconds > 0"),
               (0, ValueError, "finite number of seconds > 0"),
               (0.0, ValueError, "finite number of seconds > 0"),
               (float("inf"), ValueError, "finite number of seconds > 0"),
               ("10", TypeError, "a number of seconds"),
               (True, TypeError, "a number of seconds"),
               (None, TypeError, "a number of seconds")]
BAD_SEEDS = [(1.0, TypeError, "seed must be an int"), (True, TypeError, "seed must be an int"),
             ("0", TypeError, "seed must be an int"), (None, TypeError, "seed must be an int"),
             (-1, ValueError, r"seed must be an int (>= 0|in \[0, 2\*\*32\))"),
             (2**32, ValueError, r"seed must be an int in \[0, 2\*\*32\)")]


@pytest.mark.parametrize("budget,error,message", BAD_BUDGETS)
def test_anneal_refuses_a_bad_budget_at_once(small, budget, error, message):
    with _Deadline(5), pytest.raises(error, match=f"budget_s.*{message}"):
        baselines.anneal(small, budget_s=budget)
    with _Deadline(5), pytest.raises(error, match="budget_s"):  # checked even with iterations
        baselines.anneal(small, budget_s=budget, iterations=10)


@pytest.mark.parametrize("seed,error,message", BAD_SEEDS)
def test_anneal_refuses_a_bad_seed(small, seed, error, message):
    with _Deadline(5), pytest.raises(error, match=message):
        baselines.anneal(small, budget_s=0.1, seed=seed)


@pytest.mark.parametrize("iterations,error,message", [(-1, ValueError, "iterations must be an int >= 0"),
                                                      (10.0, TypeError, "iterations must be an int"),
                                                      (True, TypeError, "iterations must be an int"),
                                                      ("5", TypeError, "iterations must be an int")])
def test_anneal_refuses_a_bad_iteration_count(small, iterations, error, message):
    with _Deadline(5), pytest.raises(error, match=message):
        baselines.anneal(small, iterations=iterations)


def test_anneal_accepts_numpy_ints_and_zero_iterations(small):
    big = ag.trace(*_roeflux_1d())
    start = baselines.reverse(big)
    assert baselines.anneal(big, iterations=0, start=start) == start
    # a graph of at most EXACT_LIMIT intermediates is solved exactly, moves or not
    assert len(small.intermediates) <= AnnealSettings().exact_limit
    optimum = ag.cost(small, baselines.optimal(small))
    assert ag.cost(small, baselines.anneal(small, iterations=0, start=baselines.reverse(small))) == optimum
    assert baselines.anneal(small, iterations=np.int64(50), seed=np.uint32(7)) == \
        baselines.anneal(small, iterations=50, seed=7)
    with pytest.raises(TypeError, match="has no order"):
        baselines.anneal(small, iterations=5, start=set(start))


def _roeflux_1d():
    ex = ag.examples.get("RoeFlux_1d")
    return (ex.fn, *ex.args)


def test_anneal_runs_cold_on_small_graphs_and_on_few_moves_per_vertex_and_hot_otherwise():
    s = AnnealSettings()
    cold, hot = s.cold, s.hot
    cost = 1000 * 500  # 1000 multiplications per vertex on 500 vertices: no floor applies
    assert temperatures(100_000, 100) == (cold[0] * 1000, cold[1] * 1000)
    assert temperatures(cost, 500) == (hot[0] * 1000, hot[1] * 1000)
    assert temperatures(cost, 500, moves=500 * s.few_moves) == (hot[0] * 1000, hot[1] * 1000)
    assert temperatures(cost, 500, moves=500 * s.few_moves - 1) == (cold[0] * 1000, cold[1] * 1000)
    mid = temperatures(275 * 1000, 275)  # halfway between cold_up_to and hot_from
    assert mid[0] == pytest.approx(1000 * (cold[0] * hot[0]) ** 0.5)


def test_anneal_settings_default_to_the_measured_schedule_reach_the_search_and_are_checked(small):
    s = AnnealSettings()
    assert (s.exact_limit, s.late_margin, s.descent_share, s.start_share, s.max_threads) == (10, 0.95, 0.2, 0.25, 8)
    # with no exact solve, zero moves from one start give that start back
    start = baselines.reverse(small)
    assert baselines.anneal(small, iterations=0, start=start, settings=AnnealSettings(exact_limit=0)) == start
    assert temperatures(100_000, 100, settings=AnnealSettings(cold=(1.0, 0.5))) == (1000.0, 500.0)
    with pytest.raises(TypeError, match="settings must be an AnnealSettings"):
        baselines.anneal(small, iterations=1, settings={"exact_limit": 0})
    with pytest.raises(ValueError, match="late_margin must be a share"):
        AnnealSettings(late_margin=1.5)
    with pytest.raises(ValueError, match="hot_from"):
        AnnealSettings(cold_up_to=400, hot_from=150)
    with pytest.raises(ValueError, match="max_threads must be an int >= 1"):
        AnnealSettings(max_threads=0)


def test_anneal_keeps_to_a_short_budget():
    ex = ag.examples.get("RoeFlux_3d")
    g = ag.trace(ex.fn, *ex.args)
    baselines.anneal(g, iterations=1)  # compiled (numba's cache) before timing
    for budget in (0.05, 0.3):
        t0 = time.perf_counter()
        order = baselines.anneal(g, budget_s=budget, seed=1)
        took = time.perf_counter() - t0
        assert sorted(order) == sorted(g.intermediates)
        # it may end early: once the descent that ends it converges
        assert budget * (1 - AnnealSettings().descent_share) <= took < budget + 0.25, (budget, took)


def test_anneal_ends_where_no_vertex_moved_later_makes_the_order_cheaper():
    ex = ag.examples.get("RoeFlux_1d")
    g = ag.trace(ex.fn, *ex.args)
    order = baselines.anneal(g, iterations=3000, seed=2)  # without the descent: 7 such moves
    cost = ag.cost(g, order)
    for i in range(len(order)):
        for j in range(i + 1, len(order)):
            moved = list(order)
            moved.insert(j, moved.pop(i))
            assert ag.cost(g, moved) >= cost


@pytest.mark.parametrize("value,error,message", [(-1, ValueError, "max_intermediates must be an int >= 0"),
                                                 (20.0, TypeError, "max_intermediates must be an int"),
                                                 (None, TypeError, "max_intermediates must be an int")])
def test_optimal_refuses_a_bad_max_intermediates(small, value, error, message):
    with pytest.raises(error, match=message):
        baselines.optimal(small, max_intermediates=value)


@pytest.mark.parametrize("fn", [baselines.markowitz, baselines.optimal, baselines.anneal])
def test_baselines_refuse_an_unknown_convention(small, fn):
    with pytest.raises(ValueError, match=r"unknown cost convention 'flops'; use one of \['exact', 'published'\]"):
        fn(small, convention="flops")


@pytest.mark.parametrize("fn", [baselines.forward, baselines.reverse, baselines.markowitz,
                                baselines.optimal, baselines.anneal])
def test_baselines_given_a_function_say_trace_it_first(fn):
    with pytest.raises(TypeError, match=r"trace it first: baselines\.\w+\(alphagrad\.trace\(f, \*args\)\)"):
        fn(small_scalar)


def test_optimal_and_anneal_refuse_orders_past_64_bits_instead_of_ranking_capped_counts():
    """n = 2**21: every order costs more than 2**64 multiplications; the int64 searches say
    so rather than compare saturated counts."""
    S = jax.ShapeDtypeStruct((2**21, 2**21), jnp.float32)
    g = ag.trace(lambda A, B: jnp.tanh(jnp.sin(A @ B)), S, S)
    with pytest.raises(OverflowError, match=r"2\*\*62 - 1.*alphagrad.cost"):
        baselines.optimal(g)
    with pytest.raises(OverflowError, match=r"2\*\*62 - 1.*alphagrad.cost"):
        baselines.anneal(g, iterations=5)
    assert ag.cost(g, baselines.markowitz(g)) == 2 * 2**63 + 2**42  # exact, as Markowitz compares


def test_an_interrupted_anneal_returns_the_best_complete_order_so_far_with_a_warning(monkeypatch):
    """Ctrl-C during a timed anneal: a whole order at least as cheap as the start, and a
    warning saying it was interrupted (never a half-made order)."""
    ex = ag.examples.get("RoeFlux_1d")
    g = ag.trace(ex.fn, *ex.args)
    start = baselines.markowitz(g)
    real = Evaluator.anneal
    calls = []

    def interrupted(self, *args, **kwargs):  # Ctrl-C reaches the main thread only
        if threading.current_thread() is threading.main_thread():
            calls.append(1)
            if len(calls) == 4:
                raise KeyboardInterrupt
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Evaluator, "anneal", interrupted)
    for threads in (1, 2):
        calls.clear()
        t0 = time.perf_counter()
        with pytest.warns(UserWarning, match="interrupted"):
            order = baselines.anneal(g, budget_s=60.0, seed=0, start=start, threads=threads)
        assert time.perf_counter() - t0 < 30  # the other chains stopped too (a loaded machine took 12 s)
        assert len(calls) == 4
    assert sorted(order) == sorted(g.intermediates)
    assert ag.cost(g, order) <= ag.cost(g, start)


def _twins_example():
    def f(x, y):
        a, b = jnp.sin(x), jnp.cos(x)  # false twins: same predecessor and successor, same structures
        u = a + b + jnp.exp(x * y)
        return u * y, jnp.tanh(u)
    return ag.trace(f, jnp.arange(1.0, 4.0), jnp.arange(2.0, 5.0))


def _optimum(g, units, convention):
    """Cheapest cost over orders of ``units`` (each eliminated whole), by DP over subsets."""
    ev = Evaluator(g, convention)

    @functools.lru_cache(None)
    def best(done):
        prefix = [v for k, u in enumerate(units) if done >> k & 1 for v in u]
        rest = [best(done | 1 << k) + ev.cost(prefix + list(u)) - ev.cost(prefix)
                for k, u in enumerate(units) if not done >> k & 1]
        return min(rest, default=0)
    return best(0)


def test_false_twins_are_found_and_grouping_them_keeps_the_optimum():
    g = _twins_example()
    (twins,) = g.false_twins
    assert [g.sources[v].split()[0] for v in twins] == ["sin", "cos"]
    graphs = [g]
    for seed, ops in ((450, 6), (632, 8), (1294, 10), (55, 11)):
        spec = rp.ProgramSpec(num_inputs=2, num_outputs=2, num_ops=ops, max_rank=2, max_dim=3, width=4)
        f, args = rp.generate(spec, seed)
        graphs.append(ag.trace(f, *args))
    for g in graphs:
        assert g.false_twins
        grouped = {v for t in g.false_twins for v in t}
        units = [tuple(t) for t in g.false_twins] + [(v,) for v in g.intermediates if v not in grouped]
        for convention in ("exact", "published"):
            assert _optimum(g, units, convention) == _optimum(g, [(v,) for v in g.intermediates], convention)


def test_anneal_eliminates_false_twins_consecutively():
    ex = ag.examples.get("ShallowWater_16")
    g = ag.trace(ex.fn, *ex.args)
    assert sum(len(t) for t in g.false_twins) == 8
    start = min((baselines.forward(g), baselines.reverse(g), baselines.markowitz(g)), key=lambda o: ag.cost(g, o))
    for kwargs in ({"iterations": 5000, "seed": 2, "threads": 2}, {"budget_s": 0.2}):
        order = baselines.anneal(g, **kwargs)
        assert sorted(order) == sorted(g.intermediates) and ag.cost(g, order) <= ag.cost(g, start)
        for t in g.false_twins:
            at = sorted(order.index(v) for v in t)
            assert at == list(range(at[0], at[0] + len(t))), (t, at)
    assert baselines.anneal(g, iterations=5000, seed=2, threads=2) == baselines.anneal(g, iterations=5000, seed=2,
                                                                                      threads=2)


def test_anneal_descends_each_start_and_anneals_from_the_cheapest_result():
    # RoeFlux_3d: reverse is the cheapest start, but forward descends to a cheaper order
    ex = ag.examples.get("RoeFlux_3d")
    g = ag.trace(ex.fn, *ex.args)
    assert not g.false_twins
    limit = 100_000
    descended = {name: baselines.descend(g, name, limit=limit) for name in ("reverse", "forward")}
    assert ag.cost(g, "reverse") < ag.cost(g, "forward")
    assert ag.cost(g, descended["forward"]) < ag.cost(g, descended["reverse"])
    out = baselines.anneal(g, iterations=limit, seed=4, threads=1, start=["reverse", "forward"])
    assert out == baselines.anneal(g, iterations=limit, seed=4, threads=1, start=descended["forward"])
    two = baselines.anneal(g, iterations=limit, seed=4, threads=2, start=["forward", "reverse"])
    assert ag.cost(g, two) <= ag.cost(g, out)  # the same chain, and one more
    # a list of orders in any form resolve_order takes
    mixed = baselines.anneal(g, iterations=10, start=[tuple(baselines.reverse(g)), "markowitz"])
    assert ag.cost(g, mixed) <= min(ag.cost(g, "reverse"), ag.cost(g, "markowitz"))
    with pytest.raises(ValueError, match="not a permutation|intermediate"):
        baselines.anneal(g, iterations=10, start=["reverse", [1, 2, 3]])
    with pytest.raises(ValueError, match="keep = 5 keeps the opening of one start order.*pass one"):
        baselines.anneal(g, iterations=10, start=["reverse", "forward"], keep=5)


def test_descend_reaches_an_order_no_later_move_improves():
    ex = ag.examples.get("RobotArm_6DOF")
    g = ag.trace(ex.fn, *ex.args)
    start = baselines.reverse(g)
    order = baselines.descend(g, start)
    assert sorted(order) == sorted(g.intermediates) and order == baselines.descend(g, order)
    cost = ag.cost(g, order)
    assert cost < ag.cost(g, start)
    for i in range(len(order)):
        for j in range(i + 1, len(order)):
            moved = list(order)
            moved.insert(j, moved.pop(i))
            assert ag.cost(g, moved) >= cost
    assert baselines.descend(g, start, limit=0) == start
    partial = baselines.descend(g, start, limit=len(start) ** 2)  # about two passes
    assert sorted(partial) == sorted(g.intermediates) and cost <= ag.cost(g, partial) < ag.cost(g, start)
    with pytest.raises(ValueError, match="limit must be an int >= 0"):
        baselines.descend(g, start, limit=-1)


def test_a_late_order_cheaper_than_every_chain_is_annealed_on():
    """An order handed to annealing while it runs (``late``, e.g. a network's from another
    thread) that is cheaper than what every chain holds is taken by one of them: the
    result is at least as cheap, though the budget is far too short to find it."""
    ex = ag.examples.get("RoeFlux_3d")
    g = ag.trace(ex.fn, *ex.args)
    good = baselines.anneal(g, iterations=200_000, seed=1, threads=1)
    baselines.anneal(g, budget_s=0.05, start="reverse")  # compiled before the clock
    arrivals = [None, None, good]  # arrives at the third poll, after annealing has begun
    polls = []

    def late():
        polls.append(len(arrivals))
        return arrivals.pop(0) if arrivals else None

    out = baselines.anneal(g, budget_s=0.3, seed=0, start="reverse", late=late, threads=2)
    assert len(polls) > 3 and sorted(out) == sorted(g.intermediates)
    assert ag.cost(g, out) <= ag.cost(g, good) < ag.cost(g, baselines.anneal(g, iterations=2000, start="reverse"))
    # with info, anneal says where its order comes from: one chain, so from the late order
    arrivals[:] = [None, good]
    out, where = baselines.anneal(g, budget_s=0.2, seed=0, start="reverse", late=late, threads=1, info=True)
    assert where == {"late": True} and ag.cost(g, out) <= ag.cost(g, good)
    out, where = baselines.anneal(g, budget_s=0.1, seed=0, start="reverse", late=lambda: None, info=True)
    assert where == {"late": False} and sorted(out) == sorted(g.intermediates)
    small = ag.trace(lambda x: jnp.sin(jnp.cos(x)), 1.0)  # solved exactly at once
    assert baselines.anneal(small, info=True) == (baselines.optimal(small), {"late": False})
    with pytest.raises(TypeError, match="info must be True or False"):
        baselines.anneal(g, budget_s=0.1, info=1)


def test_late_orders_are_checked_and_only_come_on_the_clock():
    g = ag.trace(*_roeflux_1d())
    with pytest.raises(TypeError, match="late must be a function"):
        baselines.anneal(g, budget_s=0.1, late=[1, 2])
    with pytest.raises(ValueError, match="late starts arrive on the clock"):
        baselines.anneal(g, iterations=10, late=lambda: None)
    with pytest.raises(ValueError, match="not a permutation|intermediate"):
        baselines.anneal(g, budget_s=0.2, start="reverse", late=lambda: [1, 2, 3])
