"""The order producers an evaluation can run, each registered once in :data:`METHODS`.

A :class:`Method` is a name, a runner with the one signature
``run(graph, *, budget_s, seed, **context) -> Found`` and what a report needs to know
about it: is it a baseline (always run; the cheapest baseline is what ratios are taken
to), is it run by default, once per budget, does it need the model, which dataset column
records its cost, what compiles it before the timed call. ``context`` carries what some
runners need and the others ignore: ``agent`` (the loaded model), ``max_intermediates``
(the exact optimum's limit), ``simulations`` (the network-free search's) and ``settings``
(the agent's schedule, :class:`alphagrad.inference.InferenceSettings`).

``python -m eval`` (:mod:`eval.report`: its columns, runs and checks; its CLI's
``--methods`` choices) and :mod:`eval.bench_schedule` take their methods from here, so a
new method is one entry in :data:`METHODS`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable


@dataclasses.dataclass(frozen=True)
class Found:
    """A method's order, and what the method itself says about it."""

    order: list  # vertex ids in elimination order
    call: str  # the call that made it, as a report shows it
    cost: int | None = None  # multiplications it claims (None: no claim of its own)
    seconds: float | None = None  # its own clock, compilation excluded (None: the caller times the call)
    compile_seconds: float | None = None  # compilation it measured (None: the caller's warm-up)
    details: dict = dataclasses.field(default_factory=dict)  # more for the report, e.g. the stage that found it


@dataclasses.dataclass(frozen=True)
class Method:
    """An order producer and what a report needs to know about it."""

    name: str
    run: Callable[..., Found]  # (graph, *, budget_s, seed, **context) -> Found
    baseline: bool = False  # always run; the cheapest baseline is the reference of every ratio
    default: bool = False  # run when no methods are chosen
    budgeted: bool = False  # run once per budget (budget_s in seconds; None for the others)
    time_bound: bool = False  # not budgeted, yet held to the report's zero-shot time bound
    needs_model: bool = False  # needs context["agent"]
    dataset_cost: str | None = None  # the dataset column recording its cost: the claim its order must match
    warmup: Callable | None = None  # (graph, *, seed, **context): an untimed call once per graph, compiling
    applies: Callable | None = None  # (graph, **context) -> whether it runs on graph (None: always)
    color: str | None = None  # its colour in the report's plots

    @property
    def seeded(self) -> bool:
        """Whether its runs record the seed and are held to a time bound."""
        return self.budgeted or self.time_bound


def _classic(name: str):
    def run(graph, *, budget_s=None, seed=0, **context) -> Found:
        from alphagrad import baselines

        return Found(getattr(baselines, name)(graph), f"baselines.{name}(graph)")

    return run


def _optimal(graph, *, budget_s=None, seed=0, max_intermediates: int = 16, **context) -> Found:
    from alphagrad import baselines

    return Found(baselines.optimal(graph, max_intermediates=max_intermediates), "baselines.optimal(graph)")


def _small_enough(graph, *, max_intermediates: int = 16, **context) -> bool:
    return len(graph.intermediates) <= max_intermediates


def _zero_shot(graph, *, budget_s=None, seed=0, agent, **context) -> Found:
    return Found(agent.greedy_order(graph), "agent.greedy_order(graph)")


def _zero_shot_warmup(graph, *, seed=0, agent, **context) -> None:
    agent.greedy_order(graph)  # the encoder's compilation for this graph's size


def _agent(graph, *, budget_s, seed, agent, settings=None, **context) -> Found:
    res = agent.order(graph, budget_s=budget_s, seed=seed, progress=False, settings=settings)
    call = f"agent.order(graph, budget_s={budget_s:g}, seed={seed}" + (f", settings={settings}" if settings else "")
    return Found(res.order, call + ")", cost=int(res.cost), seconds=float(res.seconds),
                 compile_seconds=float(res.compile_seconds),
                 details={"found_by": res.method, "network_cost": res.network_cost, "history": res.history})


def _agent_budget(graph, *, budget_s, seed, agent, settings=None, **context) -> Found:
    """The agent's schedule with annealing's budget schedule (``AnnealSettings()``, the
    default before the nested one): a longer budget is another run, not a continuation."""
    import dataclasses

    from alphagrad.anneal import AnnealSettings
    from alphagrad.inference import InferenceSettings

    budget = dataclasses.replace(settings or InferenceSettings(), annealing=AnnealSettings())
    found = _agent(graph, budget_s=budget_s, seed=seed, agent=agent, settings=budget)
    short = "settings=InferenceSettings(annealing=AnnealSettings())"
    return dataclasses.replace(found, call=found.call.replace(f"settings={budget}", short))


def _anneal(graph, *, budget_s, seed, **context) -> Found:
    from alphagrad import baselines

    return Found(baselines.anneal(graph, budget_s=budget_s, seed=seed),
                 f"baselines.anneal(graph, budget_s={budget_s:g}, seed={seed})")


def _anneal_nested(graph, *, budget_s, seed, **context) -> Found:
    from alphagrad import baselines
    from alphagrad.anneal import AnnealSettings

    return Found(baselines.anneal(graph, budget_s=budget_s, seed=seed, settings=AnnealSettings(schedule="nested")),
                 f"baselines.anneal(graph, budget_s={budget_s:g}, seed={seed}, "
                 f"settings=AnnealSettings(schedule='nested'))")


def _periodic(graph, *, budget_s, seed, **context) -> Found:
    from alphagrad import baselines

    return Found(baselines.periodic(graph, budget_s=budget_s, seed=seed),
                 f"baselines.periodic(graph, budget_s={budget_s:g}, seed={seed})")


def _has_loop(graph, **context) -> bool:
    from alphagrad.periodic import iterations

    return iterations(graph) is not None


def _anneal_warmup(graph, *, seed=0, **context) -> None:
    from alphagrad import baselines

    baselines.anneal(graph, iterations=1, seed=seed)  # rule tables and compiled kernels


def _search(graph, *, budget_s, seed, simulations: int = 8, **context) -> Found:
    from alphagrad import search

    order = search.search_order(graph, simulations=simulations, prior="uniform", seed=seed, budget_s=budget_s)
    return Found(order, f"search.search_order(graph, simulations={simulations}, prior='uniform', seed={seed}, "
                        f"budget_s={budget_s:g})")


def _search_warmup(graph, *, seed=0, simulations: int = 8, **context) -> None:
    from alphagrad import search

    search.search_order(graph, simulations=simulations, prior="uniform", seed=seed)  # compiles, plays one batch


def _control(prior: str):
    """The agent's schedule (:func:`alphagrad.inference.find_order`) with the network-free
    prior ``prior`` (:class:`alphagrad.player.ControlPlayer`) in place of the network."""
    def run(graph, *, budget_s, seed, settings=None, **context) -> Found:
        from alphagrad.inference import InferenceSettings, find_order
        from alphagrad.player import ControlPlayer

        res = find_order(graph, lambda g, scale, ev, encode=True: ControlPlayer(prior, g, scale, ev, seed),
                         budget_s, seed, settings or InferenceSettings())
        call = (f"inference.find_order(graph, ControlPlayer({prior!r}, ...), budget_s={budget_s:g}, seed={seed}"
                + (f", settings={settings}" if settings else "") + ")")
        return Found(res.order, call, cost=int(res.cost), seconds=float(res.seconds),
                     details={"found_by": res.method, "network_cost": res.network_cost})

    return run


#: Every method, in report order.
METHODS: dict[str, Method] = {m.name: m for m in (
    Method("forward", _classic("forward"), baseline=True, dataset_cost="cost_forward", color="#bbbbbb"),
    Method("reverse", _classic("reverse"), baseline=True, dataset_cost="cost_reverse", color="#888888"),
    Method("markowitz", _classic("markowitz"), baseline=True, dataset_cost="cost_markowitz", color="#555555"),
    Method("optimal", _optimal, default=True, dataset_cost="cost_optimal", applies=_small_enough, color="#000000"),
    Method("zero-shot", _zero_shot, default=True, time_bound=True, needs_model=True, warmup=_zero_shot_warmup,
           color="#9ecae1"),
    Method("agent", _agent, default=True, budgeted=True, needs_model=True, color="#3182bd"),
    Method("anneal", _anneal, default=True, budgeted=True, warmup=_anneal_warmup, color="#e6550d"),
    Method("agent-budget", _agent_budget, budgeted=True, needs_model=True, color="#08519c"),
    Method("anneal-nested", _anneal_nested, budgeted=True, warmup=_anneal_warmup, color="#a63603"),
    Method("periodic", _periodic, budgeted=True, applies=_has_loop, color="#756bb1"),
    Method("search", _search, default=True, budgeted=True, warmup=_search_warmup, color="#31a354"),
    Method("uniform-prior", _control("uniform"), budgeted=True, color="#a1d99b"),
    Method("markowitz-prior", _control("markowitz"), budgeted=True, color="#fdae6b"),
    Method("random-prior", _control("random"), budgeted=True, color="#d9d9d9"),
)}

#: The classic orders: always run (they define the best baseline).
BASELINES = tuple(n for n, m in METHODS.items() if m.baseline)
#: The methods one can choose (``--methods``).
OPTIONAL = tuple(n for n, m in METHODS.items() if not m.baseline)
#: The methods run when none are chosen.
DEFAULT = tuple(n for n, m in METHODS.items() if m.default)
#: The methods run once per budget.
BUDGETED = tuple(n for n, m in METHODS.items() if m.budgeted)


def method_id(name: str, budget: float | None = None) -> str:
    """A run's column name: ``name``, or ``name@Bs`` for a budget of B seconds."""
    return name if budget is None else f"{name}@{budget:g}s"


def choose(names) -> tuple:
    """The optional methods among ``names``, in report order; an unknown name is a
    ValueError naming the choices."""
    names = tuple(names)
    unknown = sorted(set(names) - set(OPTIONAL))
    if unknown:
        raise ValueError(f"unknown methods {unknown}; choose from {', '.join(OPTIONAL)} "
                         f"({', '.join(BASELINES)} always run)")
    return tuple(m for m in OPTIONAL if m in names)
