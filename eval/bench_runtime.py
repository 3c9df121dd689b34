"""Jacobian wall time of alphagrad's orders against JAX's (not a test): ``python -m eval.bench_runtime``.

For each program and batch size, the per-sample Jacobian ``jax.jit(jax.vmap(J))`` (the batch
a leading axis of every argument) of

* ``jacfwd`` and ``jacrev``: ``jax.jacfwd(f)`` and ``jax.jacrev(f)``;
* ``forward``, ``reverse``, ``markowitz``, ``anneal`` (``alphagrad.baselines.anneal(graph,
  budget_s=--anneal-s, seed=0)``), ``periodic`` (``alphagrad.baselines.periodic(graph,
  budget_s=--anneal-s, seed=0)``, in programs with a traced loop: one pattern for every
  iteration, run as a ``lax.scan``) and ``agent`` (``alphagrad.from_pretrained().order(graph,
  budget_s=--agent-s, seed=0)``), each found by its entry in :data:`eval.methods.METHODS`:
  ``alphagrad.jacobian(f, order)`` in that order;
* ``auto``: ``alphagrad.jacobian(f, batch=B)`` with no order (``--no-auto`` leaves it out),
  made anew for each batch B as a user who states their batch would: its first call
  (outside the benchmark's jit) searches for ``--anneal-s`` seconds and times its
  candidates against jacfwd and jacrev as ``jax.jit(jax.vmap(.))`` at batch B; the
  benchmark's vmap then runs the choice kept for B,

all with the same ``argnums`` (every argument) on the same inputs, in one process. Per
method it records the compile time (``jit(...).lower(...).compile()``), the median time of
the compiled call (``block_until_ready``) over ``--repeats`` rounds in which the methods
take turns (round-robin, so that drifting load hits all alike; each round in an order
rotated by one; a sample repeats a fast call for ``SAMPLE_S``, on warm caches), the executable's memory
(temp + output + argument bytes of ``memory_analysis()``; None where the backend does not
say), the multiplications per sample (``alphagrad.cost``; None for JAX's own), the ratio of
its time to min(jacfwd, jacrev), and whether its Jacobian equals jacrev's (max abs
difference over max(1, max |jacrev|), allclose at the dtype's tolerance).

Programs (``--programs``, comma-separated names or families): ``published`` (the ten
published tasks), ``attention`` (zoo examples whose names say attention, transformer or
encoder) and ``large_real`` (real-sized programs); any zoo example or family by name.
A batch whose Jacobian alone would take more than half the free memory, or whose
executable needs more than is free, is reported as skipped. ``--time-limit`` bounds the
seconds per program for compiling and timing (the order searches come on top), shared
equally by the batches still to run: a method is compiled only while its batch has time
left (JAX's first, then alphagrad's orders from the cheapest), and not at all where its
compile and a call at the previous batch (scaled to this one) would not fit; timed rounds
stop when the next would pass it. It is a soft bound: a compile or round once started runs
to its end. Runs on whatever JAX sees (CPU, TPU, GPU): the report names it.

    python -m eval.bench_runtime --out DIR [--programs published,attention,large_real]
        [--batches 1,256,4096] [--repeats 20] [--anneal-s 10] [--agent-s 10]
        [--time-limit 300] [--note TEXT] [--resume] [--quick]

``--quick``: two tiny published tasks at batches 1 and 2, 3 repeats, 0.2 s of annealing,
no agent (explicit options override it). Writes ``report.json`` (every row) and
``report.md`` (platform, versions, the command, a summary and one table per program) under
``--out`` and prints the tables. Exit status: 2 for bad arguments (before any work), 1 when
nothing could be timed or a Jacobian differs from jacrev's, else 0.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import math
import os
import platform as host
import shlex
import statistics
import sys
import time

#: Pseudo-family of the zoo's attention blocks: examples whose lowercase name contains one of these.
ATTENTION_WORDS = ("attention", "transformer", "encoder")
#: JAX's Jacobians (the references) first, then alphagrad's orders, in table order.
JAX_METHODS = ("jacrev", "jacfwd")
ORDER_METHODS = ("forward", "reverse", "markowitz", "anneal", "periodic", "agent")
#: ``alphagrad.jacobian(f, batch=B)`` with no order: it chooses for the batch on its first
#: call (outside the benchmark's jit, as a user's first call would), then runs its choice.
AUTO = "auto"
#: (rtol, atol relative to max(1, max |jacrev|)) of the Jacobian check per dtype; float32 as
#: in tests/test_interpreter.py. On a TPU, float32 matrix products run at JAX's default
#: precision in bfloat16 passes (about three digits), so two orders differ by up to ~1e-2 there
#: (8e-3 seen on MultiHeadAttention_h4): ``float32@tpu``.
TOLERANCES = {"float64": (1e-9, 1e-11), "float32": (2e-4, 2e-5), "float32@tpu": (2e-2, 2e-2),
              "bfloat16": (5e-2, 5e-2), "float16": (5e-2, 5e-2)}


@dataclasses.dataclass(frozen=True)
class Settings:
    """What one run measures (see the module doc for each option)."""

    programs: tuple = ("published", "attention", "large_real")
    batches: tuple = (1, 256, 4096)
    repeats: int = 20
    anneal_s: float = 10.0
    agent_s: float = 10.0
    auto: bool = True  # also alphagrad.jacobian(f, batch=B) with no order (searching --anneal-s seconds)
    time_limit_s: float = 300.0
    out: str | None = None
    note: str = ""
    resume: bool = False  # keep the programs already in out's report (same settings, same device)


#: ``--quick``: a small run for tests and smoke checks.
QUICK = Settings(programs=("PropaneCombustion", "HumanHeartDipole"), batches=(1, 2), repeats=3, anneal_s=0.2,
                 agent_s=0.0, time_limit_s=60.0)


# --------------------------------------------------------------------------------------
# Arguments.


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2 (argparse prints the usage too)
        self.exit(2, f"{self.prog}: error: {message}\n")


def _names(text: str) -> tuple:
    vals = tuple(x.strip() for x in text.split(",") if x.strip())
    if not vals:
        raise argparse.ArgumentTypeError(f"{text!r}: expected comma-separated program names or families")
    return vals


def _batches(text: str) -> tuple:
    try:
        vals = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        vals = ()
    if not vals or any(v < 1 for v in vals):
        raise argparse.ArgumentTypeError(f"{text!r}: expected comma-separated positive integers, e.g. 1,256,4096")
    return tuple(sorted(set(vals)))


def _number(low: float, strict: bool):
    def parse(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            v = math.nan
        if not math.isfinite(v) or v < low or (strict and v == low):
            raise argparse.ArgumentTypeError(f"{text!r}: expected a number {'>' if strict else '>='} {low:g}")
        return v
    return parse


def _repeats(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        v = 0
    if v < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected an integer >= 1")
    return v


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m eval.bench_runtime", description=__doc__,
                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--programs", type=_names, help="comma-separated example names or families (default: "
                   + ",".join(Settings.programs) + ")")
    p.add_argument("--batches", type=_batches, help="comma-separated batch sizes (default: 1,256,4096)")
    p.add_argument("--repeats", type=_repeats, help=f"timed rounds per batch (default: {Settings.repeats})")
    p.add_argument("--anneal-s", type=_number(0, False), help="seconds of annealing (and of the periodic "
                   f"order's); 0 leaves both out (default: {Settings.anneal_s:g})")
    p.add_argument("--agent-s", type=_number(0, False), help="seconds of the pretrained agent's search; 0 leaves "
                   f"the agent out (default: {Settings.agent_s:g})")
    p.add_argument("--no-auto", action="store_true", help="leave out alphagrad.jacobian(f) with no order (auto)")
    p.add_argument("--time-limit", type=_number(0, True), help="seconds per program for compiling and timing "
                   f"(default: {Settings.time_limit_s:g})")
    p.add_argument("--out", help="directory for report.json and report.md")
    p.add_argument("--note", help="a line for the report's header (e.g. what else ran on the machine)")
    p.add_argument("--resume", action="store_true", default=None,
                   help="keep the programs that --out's report already holds (made with the same settings on the "
                        "same kind of device) and measure the rest: a run cut short goes on where it stopped")
    p.add_argument("--quick", action="store_true", help="a small run: " + ", ".join(
        f"{f.name}={getattr(QUICK, f.name)}" for f in dataclasses.fields(QUICK) if f.name not in ("out", "note")))
    return p


def parse(argv) -> Settings:
    """Settings from the command line; bad arguments exit 2 with one line."""
    p = parser()
    args = p.parse_args(argv)
    given = {"programs": args.programs, "batches": args.batches, "repeats": args.repeats, "anneal_s": args.anneal_s,
             "agent_s": args.agent_s, "auto": False if args.no_auto else None, "time_limit_s": args.time_limit, "out": args.out, "note": args.note,
             "resume": args.resume}
    base = QUICK if args.quick else Settings()
    settings = dataclasses.replace(base, **{k: v for k, v in given.items() if v is not None})
    try:
        select_programs(settings.programs)
    except KeyError as e:
        p.error(e.args[0])
    if settings.resume and not settings.out:
        p.error("--resume needs --out (the report to continue)")
    if settings.resume:
        try:
            resumed(settings)
        except ValueError as e:
            p.error(str(e))
    return settings


#: Settings a resumed run may change: where the report goes, its note, and resuming itself.
_FREE_SETTINGS = ("out", "note", "resume")


def resumed(settings: Settings, platform: tuple | None = None) -> tuple[dict, list]:
    """``(environment, rows)`` of ``settings.out``'s report to continue (empty when there is
    none); ValueError where it was made with other settings or, given ``platform``
    ``(platform, device_kind)``, on another kind of device."""
    path = os.path.join(settings.out, "report.json")
    if not os.path.exists(path):
        return {}, []
    with open(path) as f:
        report = json.load(f)
    env = report["environment"]
    mine = {k: v for k, v in json.loads(json.dumps(dataclasses.asdict(settings))).items() if k not in _FREE_SETTINGS}
    theirs = {k: v for k, v in env.get("settings", {}).items() if k not in _FREE_SETTINGS}
    if mine != theirs:
        changed = sorted(k for k in set(mine) | set(theirs) if mine.get(k) != theirs.get(k))
        raise ValueError(f"{path} was made with other settings ({', '.join(changed)} differ); "
                         f"use another --out, or leave out --resume to start anew")
    if platform is not None and (env["platform"], env["device_kind"]) != platform:
        raise ValueError(f"{path} was measured on {env['platform']} ({env['device_kind']}), this run would be on "
                         f"{platform[0]} ({platform[1]}); use another --out")
    return env, report["rows"]


def select_programs(names) -> list:
    """The zoo examples named by ``names`` (example names or families, ``attention`` for the
    attention blocks), in zoo order; KeyError (one line) for a name that is neither."""
    from alphagrad.examples import all_examples

    zoo = all_examples()
    families = {e.family for e in zoo}
    wanted = set()
    for name in names:
        if name == "attention":
            wanted |= {e.name for e in zoo if any(w in e.name.lower() for w in ATTENTION_WORDS)}
        elif name in families:
            wanted |= {e.name for e in zoo if e.family == name}
        elif any(e.name == name for e in zoo):
            wanted.add(name)
        else:
            raise KeyError(f"--programs: {name!r} is neither an example nor a family (families: attention, "
                           f"{', '.join(sorted(families))})")
    return [e for e in zoo if e.name in wanted]


# --------------------------------------------------------------------------------------
# Measurement.


def _available_bytes(device) -> int | None:
    """Free memory of ``device``: the accelerator's own where it says, else the host's."""
    stats = device.memory_stats() if hasattr(device, "memory_stats") else None
    if stats and "bytes_limit" in stats:
        return int(stats["bytes_limit"]) - int(stats.get("bytes_in_use", 0))
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _memory_bytes(compiled) -> int | None:
    """temp + output + argument bytes of a compiled executable, None where unknown."""
    try:
        m = compiled.memory_analysis()
    except (NotImplementedError, RuntimeError, ValueError, AttributeError):
        return None
    if m is None:
        return None
    return int(m.temp_size_in_bytes + m.output_size_in_bytes + m.argument_size_in_bytes)


def _is_oom(err: BaseException) -> bool:
    text = str(err)
    return isinstance(err, MemoryError) or "RESOURCE_EXHAUSTED" in text or "out of memory" in text.lower()


def _one_line(err: BaseException) -> str:
    return f"{type(err).__name__}: " + " ".join(str(err).split())[:300]


def _check(got, want, platform: str) -> dict:
    """Max abs difference of two Jacobian pytrees over max(1, max |want|), and whether they
    are allclose at their dtype's tolerance (:data:`TOLERANCES`)."""
    import jax
    import jax.numpy as jnp

    g_leaves, g_tree = jax.tree_util.tree_flatten(got)
    w_leaves, w_tree = jax.tree_util.tree_flatten(want)
    if g_tree != w_tree:
        return {"ok": False, "detail": f"output structure {g_tree} differs from the reference's {w_tree}"}
    diff, scale, ok, rtol, atol = 0.0, 1.0, True, 0.0, 0.0
    for g, w in zip(g_leaves, w_leaves):
        if not w.size:
            continue
        dtype = str(w.dtype)
        r, a = TOLERANCES.get(f"{dtype}@{platform}", TOLERANCES.get(dtype, TOLERANCES["float32"]))
        s = max(1.0, float(jnp.max(jnp.abs(w))))
        err = jnp.abs(g.astype(w.dtype) - w)
        ok = ok and bool(jnp.all(err <= a * s + r * jnp.abs(w)))
        diff, scale, rtol, atol = max(diff, float(jnp.max(err))), max(scale, s), max(rtol, r), max(atol, a)
    return {"ok": ok, "max_abs_diff": diff, "scale": scale, "rel": diff / scale, "rtol": rtol, "atol": atol}


def _orders(graph, settings: Settings, agent) -> dict:
    """method -> (order, wall seconds to find it, the stage that found it) for alphagrad's
    methods, each run by its entry in :data:`eval.methods.METHODS` (seed 0)."""
    from eval.methods import METHODS

    budgets = {"anneal": settings.anneal_s, "periodic": settings.anneal_s, "agent": settings.agent_s}
    out = {}
    for name in ORDER_METHODS:
        applies = METHODS[name].applies
        if budgets.get(name) == 0 or (name == "agent" and agent is None) or (applies and not applies(graph)):
            continue
        t = time.perf_counter()
        found = METHODS[name].run(graph, budget_s=budgets.get(name), seed=0, agent=agent)
        out[name] = (found.order, time.perf_counter() - t, found.details.get("found_by"))
    return out


@dataclasses.dataclass
class _Program:
    """One program under test: its Jacobian functions and what is known of them so far."""

    example: object
    graph: object
    fns: dict  # method -> per-sample Jacobian function
    orders: dict  # method -> (order, seconds, found by)
    mults: dict  # method -> multiplications per sample (alphagrad.cost)
    jac_bytes: int  # bytes of one sample's Jacobian (jacrev's output)
    deadline: float  # perf_counter time by which compiling and timing of all batches should end
    last: dict = dataclasses.field(default_factory=dict)  # method -> (batch, seconds per call, compile seconds)


def _program(ex, settings: Settings, agent) -> _Program:
    import jax

    import alphagrad as ag

    graph = ag.trace(ex.fn, *ex.args)
    argnums = tuple(range(len(ex.args)))
    orders = _orders(graph, settings, agent)
    fns = {"jacrev": jax.jacrev(ex.fn, argnums=argnums), "jacfwd": jax.jacfwd(ex.fn, argnums=argnums)}
    fns.update({m: ag.jacobian(ex.fn, orders[m][0], argnums=argnums) for m in ORDER_METHODS if m in orders})
    mults = {m: int(ag.cost(graph, order)) for m, (order, _, _) in orders.items()}
    out = jax.eval_shape(fns["jacrev"], *ex.args)
    jac_bytes = sum(leaf.size * leaf.dtype.itemsize for leaf in jax.tree_util.tree_leaves(out))
    return _Program(ex, graph, fns, orders, mults, int(jac_bytes), time.perf_counter() + settings.time_limit_s)


def _tune_auto(prog: _Program, batch: int, settings: Settings) -> None:
    """``alphagrad.jacobian(f, batch=batch)``, its choice made by a first call at one
    sample's arguments (outside any trace, as a user's would be), as ``prog``'s auto."""
    import jax

    import alphagrad as ag

    ex = prog.example
    t = time.perf_counter()
    auto = ag.jacobian(ex.fn, argnums=tuple(range(len(ex.args))), budget=settings.anneal_s, cache=False,
                       batch=batch)
    jax.block_until_ready(auto(*ex.args))
    (choice,) = auto.choices
    prog.fns[AUTO] = auto
    prog.orders[AUTO] = (choice.order, time.perf_counter() - t, choice.name)
    if choice.name not in ("jax.jacfwd", "jax.jacrev"):
        prog.mults[AUTO] = int(choice.cost)


def _row(prog: _Program, batch: int, method: str) -> dict:
    _, order_s, found_by = prog.orders.get(method, (None, None, None))
    return {"program": prog.example.name, "family": prog.example.family,
            "intermediates": len(prog.graph.intermediates), "batch": batch, "method": method, "status": "ok",
            "reason": None, "compile_s": None, "first_call_s": None, "time_ms": None, "repeats": 0, "ratio": None,
            "memory_bytes": None, "memory_mib": None, "mults": prog.mults.get(method), "order_s": order_s,
            "order_by": found_by, "check": None}


def _skip(row: dict, status: str, reason: str) -> None:
    row.update(status=status, reason=reason)


def _compile_all(prog: _Program, rows: dict, inputs, free: int | None, deadline: float) -> dict:
    """method -> compiled executable for every row still ok; the others marked skipped.
    JAX's Jacobians come first, then alphagrad's orders from the cheapest (``mults``), so
    that the time limit leaves out the most expensive orders first."""
    import jax

    compiled = {}
    ours = sorted((m for m in rows if m in ORDER_METHODS), key=lambda m: rows[m]["mults"])
    for method in [m for m in JAX_METHODS if m in rows] + [m for m in (AUTO,) if m in rows] + ours:
        row = rows[method]
        if row["status"] != "ok":
            continue
        left = deadline - time.perf_counter()
        if left <= 0:
            _skip(row, "skipped", "time limit reached")
            continue
        if method in prog.last:  # calls scale with the batch, compiles hardly
            b, per_call, compile_s = prog.last[method]
            est = per_call * row["batch"] / b
            if compile_s + 2 * est > left:  # a compile, a warm-up and one timed call
                _skip(row, "skipped", f"about {compile_s:.3g} s to compile and {est:.3g} s per call (from batch "
                                      f"{b}), {max(left, 0):.0f} s left")
                continue
        t = time.perf_counter()
        try:
            exe = jax.jit(jax.vmap(prog.fns[method])).lower(*inputs).compile()
        except Exception as e:  # noqa: BLE001 - reported in the row
            _skip(row, "skipped" if _is_oom(e) else "error", _one_line(e))
            continue
        row["compile_s"] = time.perf_counter() - t
        row["memory_bytes"] = _memory_bytes(exe)
        if row["memory_bytes"] is not None:
            row["memory_mib"] = row["memory_bytes"] / 2**20
            if free is not None and row["memory_bytes"] > free:
                _skip(row, "skipped", f"needs {row['memory_mib']:.0f} MiB, {free / 2**20:.0f} MiB free")
                continue
        compiled[method] = exe
    return compiled


def _warm_up_and_check(compiled: dict, rows: dict, inputs, platform: str) -> None:
    """Calls each executable once (the first call's time), and checks its Jacobian against
    jacrev's (jacfwd's where jacrev did not run). Drops what fails from ``compiled``."""
    import jax

    ref_name = next((m for m in JAX_METHODS if m in compiled), None)
    ref = None
    for method in list(compiled):
        t = time.perf_counter()
        try:
            out = jax.block_until_ready(compiled[method](*inputs))
        except Exception as e:  # noqa: BLE001 - reported in the row
            _skip(rows[method], "skipped" if _is_oom(e) else "error", _one_line(e))
            del compiled[method]
            continue
        rows[method]["first_call_s"] = time.perf_counter() - t
        if method == ref_name:
            ref = out
        elif ref is not None and (method in ORDER_METHODS or method == AUTO):
            rows[method]["check"] = {"reference": ref_name, **_check(out, ref, platform)}
        del out


#: A timed sample repeats a call until it lasts this long (at most ``MAX_CALLS`` calls),
#: so that a call is timed on warm caches, as a loop calling it runs; one call per sample
#: let whichever method followed a large one pay for its cache misses (MLP at batch 256,
#: 2 cores: the reverse order 1.44x jax.jacrev's time after jax.jacfwd's and the forward
#: order, 1.01x side by side alone).
SAMPLE_S, MAX_CALLS = 0.01, 1000


def _round_robin(compiled: dict, inputs, repeats: int, deadline: float, first_call: dict,
                 cheap_s: float = 1.0) -> dict:
    """Seconds per call of each method: per round one sample of every method in turn, the
    order rotated by one each round (each method follows every other alike), a sample
    ``ceil(SAMPLE_S / first_call[method])`` calls in a row (at most ``MAX_CALLS``); for
    ``repeats`` rounds or until the next (as long as the last) would end past
    ``deadline``. Cheap calls get three rounds even then (while the rounds so far took
    under ``cheap_s``): a median of three, not one sample."""
    import jax

    names = list(compiled)
    calls = {m: max(1, min(MAX_CALLS, math.ceil(SAMPLE_S / max(first_call[m], 1e-9)))) for m in names}
    times = {m: [] for m in names}
    first = time.perf_counter()
    for r in range(repeats):
        start = time.perf_counter()
        for method in names[r % len(names):] + names[:r % len(names)]:
            exe, n = compiled[method], calls[method]
            t = time.perf_counter()
            for _ in range(n):
                out = exe(*inputs)
            jax.block_until_ready(out)
            times[method].append((time.perf_counter() - t) / n)
        now = time.perf_counter()
        if now + (now - start) > deadline and (r >= 2 or now - first > cheap_s):
            break
    return times


def bench_batch(prog: _Program, batch: int, settings: Settings, device, deadline: float) -> list[dict]:
    """Rows of every method of ``prog`` at ``batch`` (see the module doc), compiled and
    timed by ``deadline`` (a ``time.perf_counter()`` time) as far as it allows."""
    from eval.bench_jacobian import _batch

    for kept in (prog.fns, prog.orders, prog.mults):  # auto is tuned per batch
        kept.pop(AUTO, None)
    rows = {m: _row(prog, batch, m) for m in [*prog.fns, *([AUTO] if settings.auto else [])]}
    free = _available_bytes(device)
    if free is not None and prog.jac_bytes * batch > free / 2:
        for row in rows.values():
            _skip(row, "skipped", f"does not fit: the Jacobian alone takes {prog.jac_bytes * batch / 2**30:.2f} GiB, "
                                  f"{free / 2**30:.2f} GiB free")
        return list(rows.values())
    if settings.auto:
        try:
            _tune_auto(prog, batch, settings)
            rows[AUTO] = _row(prog, batch, AUTO)
        except Exception as e:  # noqa: BLE001 - reported in the row
            _skip(rows[AUTO], "skipped" if _is_oom(e) else "error", _one_line(e))
    inputs = _batch(prog.example.args, batch)
    compiled = _compile_all(prog, rows, inputs, free, deadline)
    _warm_up_and_check(compiled, rows, inputs, device.platform)
    compiled = {m: compiled[m] for m in rows if m in compiled}  # table order, JAX's reference first
    first_call = {m: rows[m]["first_call_s"] for m in compiled}
    times = _round_robin(compiled, inputs, settings.repeats, deadline, first_call) if compiled else {}
    for method, ts in times.items():
        rows[method].update(time_ms=statistics.median(ts) * 1e3, repeats=len(ts))
        prog.last[method] = (batch, statistics.median(ts), rows[method]["compile_s"])
    refs = [rows[m]["time_ms"] for m in JAX_METHODS if rows[m]["time_ms"] is not None]
    for row in rows.values():
        if refs and row["time_ms"] is not None:
            row["ratio"] = row["time_ms"] / min(refs)
    del compiled, inputs
    gc.collect()
    return list(rows.values())


def environment(argv, settings: Settings) -> dict:
    """Where and how the run happens: the report's header."""
    import jax
    import jaxlib

    import alphagrad

    dev = jax.devices()[0]
    return {"platform": dev.platform, "device_kind": dev.device_kind, "devices": jax.device_count(),
            "cpu_cores": os.cpu_count(), "jax": jax.__version__, "jaxlib": jaxlib.__version__,
            "alphagrad": alphagrad.__version__, "python": host.python_version(),
            "command": "python -m eval.bench_runtime" + ("" if not argv else " " + shlex.join(argv)),
            "load_start": os.getloadavg()[0], "note": settings.note, "settings": dataclasses.asdict(settings),
            "started": time.strftime("%Y-%m-%d %H:%M:%S")}


def run(settings: Settings, argv=()) -> tuple[dict, list]:
    """Benchmarks every selected program; writes the reports after each when ``settings.out``."""
    import jax

    import alphagrad as ag

    env = environment(list(argv), settings)
    device = jax.devices()[0]
    rows: list = []
    if settings.resume:
        before, rows = resumed(settings, (device.platform, device.device_kind))
        if before:
            env = dict(before, resumed=before.get("resumed", []) + [env["started"]])
    done = {r["program"] for r in rows}
    agent = ag.from_pretrained() if settings.agent_s > 0 else None
    for ex in select_programs(settings.programs):
        if ex.name in done:
            continue
        t = time.perf_counter()
        try:
            prog = _program(ex, settings, agent)
        except Exception as e:  # noqa: BLE001 - reported as the program's one row
            rows.append({"program": ex.name, "family": ex.family, "batch": None, "method": None, "status": "error",
                         "reason": _one_line(e)})
            continue
        for i, batch in enumerate(settings.batches):  # each batch gets an equal share of the time left
            now = time.perf_counter()
            deadline = now + (prog.deadline - now) / (len(settings.batches) - i)
            rows += bench_batch(prog, batch, settings, device, deadline)
            print(f"{ex.name} batch {batch}: done at {time.perf_counter() - t:.0f} s", file=sys.stderr, flush=True)
        del prog
        jax.clear_caches()
        gc.collect()
        env["load_end"] = os.getloadavg()[0]
        if settings.out:
            write(settings.out, env, rows)
    return env, rows


# --------------------------------------------------------------------------------------
# Report.


def _fmt(v, spec: str, none: str = "-") -> str:
    return none if v is None else format(v, spec)


def _cell(row: dict) -> str:
    if row["status"] != "ok":
        return row["status"]
    return f"{row['ratio']:.2f}x" if row["ratio"] is not None else f"{row['time_ms']:.3f} ms"


def markdown(env: dict, rows: list) -> str:
    """report.md: the header, a summary (alphagrad's best order per program and batch) and
    one table per program."""
    s = env["settings"]
    lines = ["# Jacobian runtime: alphagrad's orders against jax.jacfwd / jax.jacrev", "",
             f"- platform: **{env['platform']}** ({env['device_kind']}, {env['devices']} device(s)); host "
             f"{env['cpu_cores']} CPU cores; load average {env['load_start']:.2f} at the start, "
             f"{env.get('load_end', env['load_start']):.2f} at the end",
             f"- JAX {env['jax']} (jaxlib {env['jaxlib']}), alphagrad {env['alphagrad']}, Python {env['python']}; "
             f"started {env['started']}" + "".join(f", resumed {t}" for t in env.get("resumed", [])),
             f"- command: `{env['command']}`" + (" (then again with --resume)" if env.get("resumed") else "")]
    if env["note"]:
        lines.append(f"- note: {env['note']}")
    lines += [f"- per-sample Jacobians `jax.jit(jax.vmap(J))`, median of up to {s['repeats']} round-robin rounds "
              f"(order rotated each round; a sample repeats a call for {SAMPLE_S * 1e3:g} ms, on warm caches); "
              f"annealing {s['anneal_s']:g} s, agent {s['agent_s']:g} s; time limit {s['time_limit_s']:g} s per "
              "program",
              "- ratio = time / min(jacfwd, jacrev) at the same program and batch; memory = temp + output + argument "
              "bytes of the compiled executable; mults = `alphagrad.cost` per sample; check = max |J - jacrev| / "
              "max(1, max |jacrev|)", ""]
    progs = list(dict.fromkeys(r["program"] for r in rows))
    batches = sorted({r["batch"] for r in rows if r["batch"] is not None})
    lines += [] if not batches else ["## Summary: alphagrad's fastest order, ratio to JAX's best", "",
              "| program | intermediates | " + " | ".join(f"batch {b}" for b in batches) + " |",
              "|---|---|" + "---|" * len(batches)]
    for p in progs if batches else ():
        cells = []
        for b in batches:
            ours = [r for r in rows if r["program"] == p and r["batch"] == b and r["method"] in ORDER_METHODS
                    and r["ratio"] is not None]
            best = min(ours, key=lambda r: r["ratio"], default=None)
            cells.append("-" if best is None else f"{best['ratio']:.2f}x ({best['method']})")
        n = next((r.get("intermediates") for r in rows if r["program"] == p), None)
        lines.append(f"| {p} | {_fmt(n, 'd')} | " + " | ".join(cells) + " |")
    for p in progs:
        lines += [""] + _program_table(p, [r for r in rows if r["program"] == p])
    return "\n".join(lines) + "\n"


def _program_table(program: str, rows: list) -> list:
    if rows[0]["method"] is None:
        return [f"## {program}", "", f"error: {rows[0]['reason']}"]
    head = rows[0]
    lines = [f"## {program} ({head['family']}, {head['intermediates']} intermediates)", "",
             "| batch | method | time ms | ratio | compile s | memory MiB | mults | check | note |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        c = r["check"]
        check = "-" if c is None else (f"{'ok' if c['ok'] else 'FAIL'} {c['rel']:.1e}" if "rel" in c else "FAIL")
        note = r["reason"] if r["status"] == "ok" or r["reason"] is None else f"{r['status']}: {r['reason']}"
        note = note or ""
        if r["order_by"] and r["method"] in ("agent", AUTO):
            verb = "chose" if r["method"] == AUTO else "found by"
            note = f"{verb} {r['order_by']}" + (f"; {note}" if note else "")
        lines.append(f"| {r['batch']} | {r['method']} | {_fmt(r['time_ms'], '.3f')} | {_fmt(r['ratio'], '.2f')} | "
                     f"{_fmt(r['compile_s'], '.2f')} | {_fmt(r['memory_mib'], '.3g')} | {_fmt(r['mults'], 'd')} | "
                     f"{check} | {note.replace('|', '/')} |")
    return lines


def write(out: str, env: dict, rows: list) -> None:
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "report.json"), "w") as f:
        json.dump({"environment": env, "rows": rows}, f, indent=1)
    with open(os.path.join(out, "report.md"), "w") as f:
        f.write(markdown(env, rows))


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    settings = parse(argv)
    env, rows = run(settings, argv)
    print(markdown(env, rows))
    timed = [r for r in rows if r.get("time_ms") is not None]
    failed = [r for r in rows if r.get("check") and not r["check"]["ok"]]
    return 1 if not timed or failed else 0


if __name__ == "__main__":
    sys.exit(main())
