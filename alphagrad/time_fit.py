"""Fitting the time model (:mod:`alphagrad.time_model`) on this machine:
``alphagrad timemodel fit``.

For each program (zoo examples), several distinct orders (:func:`candidate_orders`:
forward, reverse, Markowitz, annealed under multiplications and under the stored time
model, and random perturbations of them) are compiled as ``jax.jit(jax.vmap(J))`` at the
batch and timed round robin, medians (:func:`alphagrad.autotune.time_candidates`); the
coefficients are fitted to the times (:func:`alphagrad.time_model.fit`) and the model is
written atomically to the user's cache (a stored model is replaced only by a complete
fit: a run that cannot measure raises :class:`FitError` and leaves it as it was).
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import os
import re
import time

import numpy as np

from alphagrad import rules
from alphagrad import time_model as tm


class FitError(RuntimeError):
    """The fit could not measure (no device, an order that fails to compile or run)."""


_OPCODE = re.compile(r"(?<![\w.%\-])([a-z][a-z0-9\-]*)\(")
#: Instructions that launch no kernel.
FREE_OPS = frozenset({"parameter", "constant", "tuple", "get-tuple-element", "bitcast"})


def hlo_counts(text: str) -> dict:
    """Instruction counts of an optimised HLO module's text: ``instr`` (all), ``entry``
    (those of the entry computation that launch work: its kernels, fusions counted once),
    ``fusions``, ``dot`` (dots and convolutions), ``ops`` and ``entry_ops`` (per opcode)."""
    ops = collections.Counter()
    entry = collections.Counter()
    in_entry = False
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("ENTRY"):
            in_entry = True
            continue
        if stripped == "}":
            in_entry = False
            continue
        if " = " not in stripped or stripped.startswith(("HloModule", "//")):
            continue
        m = _OPCODE.search(stripped.split(" = ", 1)[1])
        if not m:
            continue
        ops[m.group(1)] += 1
        if in_entry:
            entry[m.group(1)] += 1
    return {"instr": sum(ops.values()), "entry": sum(n for op, n in entry.items() if op not in FREE_OPS),
            "fusions": ops["fusion"], "dot": ops["dot"] + ops["convolution"], "ops": ops, "entry_ops": entry}


def program_features(compiled) -> dict:
    """What XLA says of a compiled program: its entry kernels, fusions and instructions
    (:func:`hlo_counts`) and its cost analysis (flops, transcendentals, bytes accessed),
    the compiled program's own view of what a call does."""
    counts = hlo_counts(compiled.as_text())
    cost = compiled.cost_analysis()
    cost = (cost[0] if cost else {}) if isinstance(cost, list) else (cost or {})
    return {"kernels": counts["entry"], "fusions": counts["fusions"], "instructions": counts["instr"],
            **{k: float(cost.get(src, 0.0)) for k, src in (("flops", "flops"), ("transcendentals", "transcendentals"),
                                                           ("bytes", "bytes accessed"))}}


@dataclasses.dataclass(frozen=True)
class FitSettings:
    """What a fit measures. No program is started after ``time_limit_s`` (6 min): on 2
    CPU cores shared with 2-3 other jobs the 16 default programs took 16 min (the fit
    then measures the first 6-8); a program takes most of its time compiling its ~14
    orders, side by side in ``compile_threads``. ``quick()``: about 2 min."""

    programs: tuple = ("RoeFlux_1d", "RoeFlux_3d", "RobotArm_6DOF", "HumanHeartDipole", "PropaneCombustion",
                       "BlackScholes_Jacobian", "MLP", "Encoder", "RandomF", "RandomG", "Lorenz96_RK4_10",
                       "NBody_RK4_4", "GRU_h8", "MultiHeadAttention_h2", "KalmanCV3D", "ShallowWater_16")
    batch: int = 256
    #: Random perturbations of each of forward, reverse, Markowitz and the annealed order.
    perturbations: int = 2
    #: The share of an order's vertices a perturbation moves to random positions.
    moved: float = 0.1
    anneal_s: float = 0.3
    #: Orders that write more entries than this per call are left out (a forward order of
    #: HeatFTCS_32 writes 2e10 at batch 256: seconds a call, and memory to match).
    max_entries: float = 2e8
    #: Timing (see :class:`alphagrad.autotune.AutoSettings`): rounds, the least a sample lasts.
    repeats: int = 7
    sample_s: float = 0.01
    #: Programs stop being measured after this many seconds (the fit then uses those done).
    time_limit_s: float = 360.0
    seed: int = 0
    #: Orders of a program compile side by side in this many threads.
    compile_threads: int = min(8, os.cpu_count() or 1)

    @classmethod
    def quick(cls) -> "FitSettings":
        """Six programs whose orders differ in time, fewer orders and rounds."""
        return cls(programs=("RoeFlux_3d", "MLP", "Encoder", "Lorenz96_RK4_10", "RandomG", "MultiHeadAttention_h2"),
                   perturbations=1, repeats=5, time_limit_s=120.0)


def _perturbed(order, rng, share: float) -> list:
    """``order`` with a share of its vertices moved to random positions."""
    out = list(order)
    for _ in range(max(2, int(share * len(out)))):
        v = out.pop(int(rng.integers(len(out))))
        out.insert(int(rng.integers(len(out) + 1)), v)
    return out


def candidate_orders(graph, settings: FitSettings, platform: str) -> dict:
    """name -> order: forward, reverse, Markowitz (multiplications and time), annealed
    (multiplications, and time where a model is fitted for ``platform``) and
    ``settings.perturbations`` random perturbations of the first four; duplicates and
    orders over ``settings.max_entries`` dropped."""
    from alphagrad import orders
    from alphagrad.anneal import anneal

    found = dict(orders.classic(graph))
    found["anneal"] = anneal(graph, settings.anneal_s, seed=settings.seed, threads=1)
    rng = np.random.default_rng(settings.seed)
    for name in ("forward", "reverse", "markowitz", "anneal"):
        for k in range(settings.perturbations):
            found[f"{name}~{k + 1}"] = _perturbed(found[name], rng, settings.moved)
    if tm.stored(platform):  # else "time" would count multiplications: nothing new
        time_conv = f"{tm.TIME}:{platform}"
        found["markowitz@time"] = orders.markowitz(graph, time_conv)
        found["anneal@time"] = anneal(graph, settings.anneal_s, seed=settings.seed, convention=time_conv, threads=1)
    unique: dict = {}
    for name, order in found.items():
        unique.setdefault(tuple(int(v) for v in order), name)
    written = [tm.FEATURES.index(f"{k}_written_s") for k in tm.KINDS]
    return {name: list(order) for order, name in unique.items()
            if tm.order_features(graph, order)[written].sum() * settings.batch <= settings.max_entries}


def _batched(args, batch: int, seed: int):
    """Each argument stacked ``batch`` times with 1% noise (a leading batch axis)."""
    import jax
    import jax.numpy as jnp

    rng = np.random.default_rng(seed)

    def one(a):
        a = jnp.asarray(a)
        noise = jnp.asarray(rng.standard_normal((batch,) + a.shape), a.dtype)
        return a[None] * (1 + 0.01 * noise) if jnp.issubdtype(a.dtype, jnp.inexact) else jnp.stack([a] * batch)
    return tuple(jax.tree_util.tree_map(one, x) for x in args)


def time_orders(fn, args, orders: dict, settings: FitSettings) -> tuple[dict, dict]:
    """``(times, programs)``: name -> ``(a, b)``, two median seconds of
    ``jax.jit(jax.vmap(J))`` per call at ``settings.batch`` (``J`` the Jacobian of ``fn`` in
    every argument in each order), each over ``settings.repeats`` rounds of round robin:
    two passes say how far the measurement itself ranks the orders alike (on a loaded
    machine, barely, where the orders are within noise); and name ->
    :func:`program_features` of the compiled program.

    Raises:
      FitError: an order fails to compile or run."""
    import jax

    from alphagrad import interpreter
    from alphagrad.autotune import AutoSettings, time_candidates

    inputs = _batched(args, settings.batch, settings.seed)
    argnums = tuple(range(len(args)))
    def compile_one(order):
        return jax.jit(jax.vmap(interpreter.jacobian(fn, order, argnums))).lower(*inputs).compile()

    with concurrent.futures.ThreadPoolExecutor(settings.compile_threads) as pool:  # XLA compiles in parallel
        futures = {name: pool.submit(compile_one, order) for name, order in orders.items()}
    compiled = {}
    for name, fut in futures.items():
        if fut.exception() is not None:
            e = fut.exception()
            raise FitError(f"cannot compile the Jacobian in order {name!r} ({type(e).__name__}: {e})") from e
        compiled[name] = fut.result()
    timing = AutoSettings(repeats=settings.repeats, sample_s=settings.sample_s, timing_s=1e9, drop=1e9)
    try:
        a, b = (time_candidates(compiled, inputs, timing) for _ in range(2))
        return ({name: (a[name], b[name]) for name in compiled},
                {name: program_features(c) for name, c in compiled.items()})
    except Exception as e:  # noqa: BLE001
        raise FitError(f"cannot run a compiled Jacobian ({type(e).__name__}: {e})") from e


def measure(settings: FitSettings, platform: str, log=print) -> list[dict]:
    """One row per program and order: ``program``, ``name`` and ``order``, ``seconds`` (the
    mean of the two ``passes`` of :func:`time_orders`), ``mults`` (exact multiplications),
    ``features`` (the summed :data:`alphagrad.time_model.FEATURES`) and ``xla``
    (:func:`program_features` of its compiled program). Stops
    starting programs after ``settings.time_limit_s``.

    Raises:
      FitError: JAX has no ``platform`` device, a program is unknown, or an order cannot be
        measured."""
    import jax

    import alphagrad as ag
    from alphagrad.evaluator import Evaluator
    from alphagrad.examples import all_examples

    try:
        jax.devices(platform)
    except RuntimeError as e:
        raise FitError(f"no {platform!r} device to measure on ({e})") from e
    examples = {e.name: e for e in all_examples()}
    unknown = [p for p in settings.programs if p not in examples]
    if unknown:
        raise FitError(f"unknown programs {unknown}; use names of alphagrad.examples.all_examples()")
    rows, t0 = [], time.perf_counter()
    with jax.default_device(jax.devices(platform)[0]):
        for name in settings.programs:
            if time.perf_counter() - t0 > settings.time_limit_s:
                log(f"time limit reached: {len(rows)} orders of {len({r['program'] for r in rows})} programs")
                break
            ex = examples[name]
            graph = ag.trace(ex.fn, *ex.args)
            orders = candidate_orders(graph, settings, platform)
            seconds, programs = time_orders(ex.fn, ex.args, orders, settings)
            ev = Evaluator(graph)
            for oname, order in orders.items():
                rows.append({"program": name, "name": oname, "order": order, "seconds": sum(seconds[oname]) / 2,
                             "passes": seconds[oname], "mults": ev.cost(order),
                             "features": tm.order_features(graph, order).tolist(), "xla": programs[oname]})
            means = [sum(t) / 2 for t in seconds.values()]
            log(f"{name}: {len(orders)} orders, {min(means) * 1e3:.3f}-{max(means) * 1e3:.3f} ms "
                f"({time.perf_counter() - t0:.0f} s)")
    if not rows:
        raise FitError("nothing was measured")
    return rows


def model_from(rows: list[dict], platform: str, batch: int, note: dict | None = None) -> tm.TimeModel:
    """The model fitted to ``rows`` (:func:`measure`)."""
    coefficients = tm.fit([r["features"] for r in rows], [r["seconds"] for r in rows],
                          [r["program"] for r in rows], batch)
    return tm.TimeModel(platform, batch, coefficients, fit=dict(note or {}))


def refit(settings: FitSettings = FitSettings(), platform: str | None = None, path: str | None = None,
          log=print) -> tuple[tm.TimeModel, str]:
    """Measures, fits and writes the model of ``platform`` (default: JAX's default
    backend) to ``path`` (default: :func:`alphagrad.time_model.user_path`); returns the
    model and the path. Raises :class:`FitError` before writing anything if it cannot
    measure or has nowhere to write."""
    platform = tm.platform_of(tm.TIME, platform)
    path = path or tm.user_path(platform)
    if path is None:
        raise FitError(f"${rules.CACHE_ENV} is empty (no cache): pass a path to write the model to")
    rows = measure(settings, platform, log)
    model = model_from(rows, platform, settings.batch,
                       {"programs": sorted({r["program"] for r in rows}), "orders": len(rows)})
    tm.save(model, path)
    return model, path
