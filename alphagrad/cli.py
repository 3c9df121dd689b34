"""The ``alphagrad`` command line.

    alphagrad demo [--example RoeFlux_3d] [--budget 5] [--chain 3]   # the README example, offline
    alphagrad order path/to/file.py:function --args "f32[3,4] f32[]" [--model ID] [--budget 10] [--finetune S] [--json]
    alphagrad cache list|clear|export FILE|import FILE   # the orders alphagrad.jacobian(f) keeps
    alphagrad timemodel fit [--quick] [--batch 256] | show   # the time model of convention="time"

``order`` traces the function from the shapes in ``--args`` (no array is allocated), so a
function whose ``lax.cond`` branch depends on argument values is refused. ``demo`` says on
each graph it shows how the model's order compares with annealing's and whether the
Jacobian computed in it equals ``jax.jacrev``'s. ``cache`` lists, clears, exports (one
JSON file, to ship with code) or imports (an entry replacing one only if cheaper) the
orders that ``alphagrad.jacobian(f)`` keeps (:mod:`alphagrad.order_cache`). ``timemodel fit``
times orders of zoo programs on this machine and fits the time model
(:mod:`alphagrad.time_fit`); exit status 1, the stored model unchanged, if it cannot measure.

Exit status: 0 done; 1 a Jacobian check of ``demo`` failed (a wrong Jacobian: please
report it); 2 a wrong argument, file, function or model (the one-line message on stderr
says what to do). With ``--json``, stdout holds the JSON result and nothing else.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import sys
import time


class UsageError(Exception):
    """A problem with what the user gave (file, function, arguments, model): exit status 2."""


# ------------------------------------------------------------------------------- arguments


def _seconds(allow_zero: bool):
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
        if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
            bound = ">= 0 (0: skip)" if allow_zero else "> 0"
            raise argparse.ArgumentTypeError(f"must be a finite number of seconds {bound}, got {text!r}")
        return value

    return parse


def _finetune_seconds(text: str) -> float:
    from alphagrad.selfplay import MAX_FINETUNE_S

    value = _seconds(False)(text)
    if value > MAX_FINETUNE_S:
        raise argparse.ArgumentTypeError(f"at most {MAX_FINETUNE_S:g} s (longer adaptation is training: "
                                         f"python -m train), got {text!r}")
    return value


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def _positive(text: str) -> int:
    value = _count(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _names(text: str) -> tuple:
    names = tuple(x.strip() for x in text.split(",") if x.strip())
    if not names:
        raise argparse.ArgumentTypeError(f"expected comma-separated names, got {text!r}")
    return names


def _seed(text: str) -> int:
    value = _count(text)
    if value >= 2**32:
        raise argparse.ArgumentTypeError(f"must be below 2**32 (jax.random.key keeps 32 bits), got {value}")
    return value


_DTYPES = {"f16": "float16", "bf16": "bfloat16", "f32": "float32", "f64": "float64"}


def parse_args_spec(spec: str) -> list:
    """``"f32[3,4] f32[]"`` -> ``jax.ShapeDtypeStruct``s of those dtypes and shapes: the
    function is traced from shapes alone, so no array is allocated (any size traces)."""
    import re

    import jax

    if not spec.split():
        raise UsageError('--args is empty: give one dtype[shape] per argument of the function, e.g. '
                         '--args "f32[3,4] f32[]"')
    out = []
    for token in spec.split():
        m = re.fullmatch(r"(f16|bf16|f32|f64)\[([0-9, ]*)\]", token)
        if not m:
            raise UsageError(f"cannot read argument {token!r} in --args: write each as dtype[shape], e.g. "
                             f"f32[3,4] or f32[] for a scalar (dtypes: {', '.join(_DTYPES)})")
        try:
            shape = tuple(int(d) for d in m.group(2).replace(" ", "").split(",") if d or m.group(2).strip())
        except ValueError:
            raise UsageError(f"cannot read the shape of {token!r} in --args: write the sizes separated by "
                             "commas, e.g. f32[3,4]") from None
        if m.group(1) == "f64" and not jax.config.jax_enable_x64:
            raise UsageError(f"{token}: float64 needs 64-bit JAX; set JAX_ENABLE_X64=1 in the environment, "
                             "or use f32")
        out.append(jax.ShapeDtypeStruct(shape, _DTYPES[m.group(1)]))
    return out


def _source_line(error: BaseException, path: str) -> str:
    """' (line N: `code`)' for the innermost frame of ``error``'s traceback in ``path``."""
    import linecache
    import os
    import traceback

    frames = [f for f in traceback.extract_tb(error.__traceback__)
              if os.path.abspath(f.filename) == os.path.abspath(path)]
    if not frames:
        return ""
    line = (frames[-1].line or linecache.getline(path, frames[-1].lineno)).strip()
    return f" (line {frames[-1].lineno}: `{line}`)" if line else f" (line {frames[-1].lineno})"


def load_function(target: str):
    """``path/to/file.py:function`` -> the function.

    The file runs as a module (its directory first on ``sys.path``, so it can import the
    files beside it, as ``python file.py`` would); an exception it raises becomes a
    :class:`UsageError` naming the file and line.
    """
    import importlib.util
    import os

    path, sep, name = target.rpartition(":")
    if not sep or not path or not name:
        raise UsageError(f"expected path/to/file.py:function, got {target!r}")
    if not os.path.isfile(path):
        raise UsageError(f"no such file: {path}")
    module_name = f"_alphagrad_cli_{os.path.splitext(os.path.basename(path))[0]}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None:
        raise UsageError(f"cannot import {path}: give a Python source file (.py)")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # dataclasses and pickling look their module up there
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    try:
        spec.loader.exec_module(module)
    except SyntaxError as e:
        sys.modules.pop(module_name, None)
        raise UsageError(f"{path} has a syntax error at line {e.lineno}: {e.msg}") from None
    except (Exception, SystemExit) as e:  # the user's code: any exception it raises is reported
        sys.modules.pop(module_name, None)
        raise UsageError(f"importing {path} raised {type(e).__name__}: {e}{_source_line(e, path)}; "
                         "fix the file so that it imports") from None
    finally:
        with contextlib.suppress(ValueError):  # unless the file removed it itself
            sys.path.remove(os.path.dirname(os.path.abspath(path)))
    fn = getattr(module, name, None)
    if fn is None:
        defined = sorted(k for k, v in vars(module).items()
                         if callable(v) and not k.startswith("_") and getattr(v, "__module__", None) == module_name)
        raise UsageError(f"{path} has no function {name!r}" + (f"; it defines {', '.join(defined)}" if defined else ""))
    if not callable(fn):
        raise UsageError(f"{path}: {name} is a {type(fn).__name__}, not a function")
    return fn


def _check_arity(fn, name: str, example: list, spec: str) -> None:
    import inspect

    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):  # no signature to read (some builtins): tracing will tell
        return
    try:
        sig.bind(*example)
    except TypeError:
        params = list(sig.parameters.values())
        positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        required = [p for p in positional if p.default is p.empty]
        if any(p.kind == p.VAR_POSITIONAL for p in params):
            takes = f"at least {len(required)}"
        elif len(required) == len(positional):
            takes = str(len(positional))
        else:
            takes = f"{len(required)} to {len(positional)}"
        raise UsageError(f"{name}{sig} takes {takes} positional argument(s), but --args {spec!r} gives "
                         f"{len(example)}; give one dtype[shape] per argument") from None


def _trace(fn, name: str, example: list, spec: str):
    import alphagrad

    try:
        return alphagrad.trace(fn, *example)
    except alphagrad.ConcreteValuesNeeded as e:
        raise UsageError(f"cannot trace {name}: {str(e).rstrip('.')}. --args gives shapes, not values: from "
                         f"Python, alphagrad.trace({name}, *arrays) takes the branch those arrays choose") from None
    except (alphagrad.TraceError, alphagrad.UnsupportedPrimitiveError) as e:
        raise UsageError(f"cannot trace {name}: {e}") from None
    except Exception as e:  # an error in the user's function on these shapes (JAX's shape checks)
        first = str(e).strip().splitlines()[0].rstrip(".") if str(e).strip() else ""
        raise UsageError(f"calling {name} on --args {spec!r} raised {type(e).__name__}: {first}; check that "
                         f"--args gives the shapes and dtypes {name} expects") from None


def _agent(model):
    import alphagrad

    t = time.perf_counter()
    try:
        agent = alphagrad.from_pretrained(model)
    except ValueError as e:  # a ModelLoadError, or weights that do not match the config (hub.check_shapes)
        first, *rest = [line.strip() for line in str(e).splitlines() if line.strip()] or [type(e).__name__]
        raise UsageError(f"cannot load the model {model!r}: {first} {'; '.join(rest)}".rstrip()) from None
    print(f"model: {model or 'bundled'} ({time.perf_counter() - t:.1f} s to load)", file=sys.stderr)
    return agent


# -------------------------------------------------------------------------------- commands


def order(args) -> int:
    """Finds an elimination order for a function in a Python file."""
    import json

    from alphagrad.engine import GraphTooLargeError

    # With --json, stdout carries the JSON alone: anything else printed on the way (by the
    # user's file, JAX, the search) goes to stderr.
    quiet = contextlib.redirect_stdout(sys.stderr) if args.json else contextlib.nullcontext()
    with quiet:
        fn = load_function(args.target)
        name = args.target.rpartition(":")[2]
        example = parse_args_spec(args.args)
        _check_arity(fn, name, example, args.args)
        graph = _trace(fn, name, example, args.args)
        agent = _agent(args.model)
        try:
            result = agent.order(graph, budget_s=args.budget, fallback=args.fallback, seed=args.seed,
                                 finetune_s=args.finetune)
        except GraphTooLargeError as e:
            raise UsageError(f"{e} (on the command line: --fallback markowitz)") from None
    if args.json:
        print(json.dumps({"order": result.order, "cost": result.cost, "baselines": result.baselines,
                          "savings": result.savings, "method": result.method,
                          "network_cost": result.network_cost, "seconds": result.seconds,
                          "compile_seconds": result.compile_seconds, "fingerprint": result.fingerprint,
                          "finetune": result.finetune},
                         allow_nan=False))
    else:
        print(result)
    return 0


def _baseline_table(graph, anneal_s: float, convention: str) -> list[tuple[str, int, float, list]]:
    from alphagrad import baselines, cost
    from alphagrad.inference import compile_kernels

    compile_kernels()  # untimed (numba's first compile on a machine takes seconds), as the model's is
    rows = []
    for name, fn in (("forward", baselines.forward), ("reverse", baselines.reverse),
                     ("markowitz", lambda g: baselines.markowitz(g, convention))):
        t = time.perf_counter()
        order = fn(graph)
        secs = time.perf_counter() - t
        rows.append((name, cost(graph, order, convention=convention), secs, order))
    if anneal_s > 0:
        t = time.perf_counter()
        order = baselines.anneal(graph, budget_s=anneal_s, convention=convention)
        secs = time.perf_counter() - t
        rows.append((f"anneal {anneal_s:g}s", cost(graph, order, convention=convention), secs, order))
    return rows


def _print_table(rows):
    best = min(c for _, c, _, _ in rows[:3])
    print(f"{'order':<14}{'multiplications':>16}{'vs best baseline':>18}{'seconds':>9}")
    for name, c, secs, _ in rows:
        print(f"{name:<14}{c:>16,}{c / best if best else 1.0:>18.3f}{secs:>9.2f}")


#: Tolerances (rtol, atol) of demo's Jacobian check, by dtype: per output/input block,
#: |J - J_jacrev| <= atol * max(1, the block's largest |entry|) + rtol * |J_jacrev|
#: (summation order differs between elimination orders).
JACOBIAN_TOLERANCE = {"float16": (1e-2, 1e-2), "bfloat16": (2e-2, 2e-2), "float32": (2e-4, 2e-5),
                      "float64": (1e-9, 1e-11)}


@dataclasses.dataclass(frozen=True)
class JacobianCheck:
    """A Jacobian compared with ``jax.jacrev``'s, entry by entry (see :func:`compare_jacobians`)."""

    max_difference: float  # the largest |J - reference| over the entries compared; inf: a NaN or infinity differs
    scale: float  # the largest finite |entry| of jacrev's
    used: float  # the largest |J - reference| / tolerance over the entries compared: within tolerance iff <= 1
    dtypes: tuple[str, ...]  # the dtypes of jacrev's blocks, whose tolerances applied
    entries: int = 0
    nans: int = 0  # entries where jacrev's is NaN
    uncompared: int = 0  # of those, where J's is a number
    reference_error: float | None = None  # against jacrev's in float64: the largest |jacrev's own - float64's|
    mismatch: str | None = None  # a different layout or block shape, where there is one

    @property
    def ok(self) -> bool:
        return self.mismatch is None and self.used <= 1.0

    def describe(self, label: str) -> str:
        """One sentence: whether the Jacobian computed in ``label`` equals jax.jacrev's, by how much."""
        if self.mismatch is not None:
            return f"Jacobian in {label} DIFFERS from jax.jacrev's: {self.mismatch}"
        if self.entries and self.nans == self.entries:
            return (f"Jacobian in {label} cannot be checked: jax.jacrev's is NaN in all its {self.entries:,} "
                    "entries (the function is NaN somewhere at the example point)")
        if self.ok:
            margin = f"{'under 1%' if self.used < 0.01 else f'{self.used:.0%}'} of the tolerance"
        elif math.isfinite(self.used):
            margin = f"{self.used:.3g}x the tolerance"
        else:
            margin = "a NaN or infinity where the reference differs, beyond the tolerance"
        tolerance = "; ".join(f"{d}: rtol={JACOBIAN_TOLERANCE[d][0]:.0e}, atol={JACOBIAN_TOLERANCE[d][1]:.0e}"
                              for d in self.dtypes) + " x max(1, the largest |entry| of its output/input block)"
        verdict = f"{'equals' if self.ok else 'DIFFERS from'} jax.jacrev's"
        difference = f"max abs difference {self.max_difference:.2e}"
        if self.reference_error is not None:
            verdict += f" {'up to' if self.ok else 'beyond'} jacrev's own rounding"
            difference = f"against jax.jacrev's in float64, {difference} (jacrev's own: {self.reference_error:.2e})"
            tolerance += ", + jacrev's rounding, entry by entry"
        skipped = (f"; {self.uncompared:,} of {self.entries:,} entries, where jacrev's is NaN and this one is not, "
                   "not compared (a NaN times a structural zero, which elimination skips)") if self.uncompared else ""
        return (f"Jacobian in {label} {verdict}: {difference} on entries up to {self.scale:.1e}, {margin} "
                f"({tolerance}){skipped}")


def compare_jacobians(jac, ref, truth=None) -> JacobianCheck:
    """How ``jac`` compares with ``ref`` (jax.jacrev's, the same pytree layout) under
    JACOBIAN_TOLERANCE; with ``truth`` (jacrev's in float64), how it compares with
    ``truth``, each entry's tolerance widened by ``ref``'s own distance from it (so a
    Jacobian that is off only as much as jacrev's own rounding passes). Entries where
    ``ref`` is NaN and ``jac`` a number are not compared (counted in ``uncompared``); a
    NaN or infinity anywhere else must be matched."""
    import jax
    import numpy as np

    a_leaves, a_tree = jax.tree_util.tree_flatten(jac)
    b_leaves, b_tree = jax.tree_util.tree_flatten(ref)
    if a_tree != b_tree:
        return JacobianCheck(math.inf, math.nan, math.inf, (),
                             mismatch=f"its layout {a_tree} is not jacrev's {b_tree}")
    t_leaves = [None] * len(b_leaves) if truth is None else jax.tree_util.tree_leaves(truth)
    worst = scale = used = reference_error = 0.0
    dtypes, entries, nans, uncompared = [], 0, 0, 0
    for a, b, t in zip(a_leaves, b_leaves, t_leaves):
        a, b = np.asarray(a, np.float64), np.asarray(b)
        if a.shape != b.shape:
            return JacobianCheck(math.inf, math.nan, math.inf, (),
                                 mismatch=f"a block of shape {a.shape} where jacrev's has {b.shape}")
        dtype = b.dtype.name if b.dtype.name in JACOBIAN_TOLERANCE else "float32"
        dtypes += [dtype] if dtype not in dtypes else []
        rtol, atol = JACOBIAN_TOLERANCE[dtype]
        b = b.astype(np.float64)
        target = b if t is None else np.asarray(t, np.float64)
        block = float(np.max(np.abs(b[np.isfinite(b)]), initial=0.0))
        skip = np.isnan(b) & ~np.isnan(a)
        with np.errstate(all="ignore"):  # NaN (from a NaN, inf - inf or inf / inf) unless same: inf
            slack = np.nan_to_num(np.abs(b - target), nan=0.0)  # jacrev's own rounding (0 without truth)
            diff = np.abs(a - target)
            ratio = diff / (atol * max(1.0, block) + rtol * np.abs(target) + slack)
        same = (a == target) | (np.isnan(a) & np.isnan(target)) | skip
        diff, ratio = (np.where(same, 0.0, np.where(np.isnan(x), np.inf, x)) for x in (diff, ratio))
        worst = max(worst, float(np.max(diff, initial=0.0)))
        used = max(used, float(np.max(ratio, initial=0.0)))
        reference_error = max(reference_error, float(np.max(slack, initial=0.0)))
        scale, entries, nans = max(scale, block), entries + a.size, nans + int(np.isnan(b).sum())
        uncompared += int(skip.sum())
    return JacobianCheck(worst, scale, used, tuple(dtypes), entries, nans, uncompared,
                         None if truth is None else reference_error)


def _compare(cost: int, other: int) -> str:
    """'ties with', 'is 7% cheaper than' or 'is 4% dearer than' (``cost`` against ``other``)."""
    if cost == other:
        return "ties with"
    word = "cheaper" if cost < other else "dearer"
    if other == 0:
        return f"is {word} than"
    percent = abs(1 - cost / other) * 100
    return f"is {percent:.{0 if percent >= 1 else 1 if percent >= 0.1 else 2}f}% {word} than"


def _agent_beside_annealing(graph, agent, args) -> tuple[list, object]:
    """The baselines, annealing and the agent's order at the same budget (unless
    ``--anneal`` says otherwise), printed side by side; returns the table's rows and the
    agent's ``OrderResult`` (None without an agent: ``--budget 0``)."""
    anneal_s = args.budget if args.anneal is None else args.anneal
    rows = _baseline_table(graph, anneal_s, args.convention)
    result = None
    if agent is not None:
        result = agent.order(graph, budget_s=args.budget, seed=args.seed, progress=False)
        rows.append((f"model {args.budget:g}s", result.cost, result.seconds, result.order))
    _print_table(rows)
    if result is not None:
        net = "" if result.network_cost is None else f"; the network's own best order: {result.network_cost:,}"
        print(f"model: found by {result.method}{net}; +{result.compile_seconds:.1f} s compiling")
    return rows, result


def _against_annealing(rows, result, args) -> str:
    """In words: how the model's order (``result``; None: no model) compares with
    annealing's and with the best classic order of ``rows`` (``_baseline_table``'s)."""
    name, best, _, _ = min(rows[:3], key=lambda row: row[1])
    classic = f"the best classic order ({name}, {best:,} multiplications)"
    anneal_s = args.budget if args.anneal is None else args.anneal
    annealed = rows[3][1] if anneal_s > 0 else None
    if result is None:
        if annealed is None:
            return f"the cheapest order is {classic}; no model (--budget 0) and no annealing (--anneal 0) to compare"
        return (f"annealing's order ({annealed:,} multiplications) {_compare(annealed, best)} {classic}; "
                "no model to compare (--budget 0)")
    beside = f"{_compare(result.cost, best)} {classic}"
    if annealed is None:
        return f"the model's order ({result.cost:,} multiplications) {beside}; no annealing to compare (--anneal 0)"
    budgets = (f"both given {args.budget:g} s" if anneal_s == args.budget
               else f"the model given {args.budget:g} s, annealing {anneal_s:g} s")
    return (f"the model's order {_compare(result.cost, annealed)} annealing's ({result.cost:,} vs {annealed:,} "
            f"multiplications; {budgets}) and {beside}")


def _summary(graph) -> str:
    """The graph's counts and primitives (``Graph.summary`` without its vertex listing)."""
    return "\n".join(line for line in graph.summary(max_rows=0).splitlines() if not line.startswith("  ... "))


def _check_jacobian(graph, fn, example_args, order) -> JacobianCheck:
    """The Jacobian of ``fn`` computed in ``order``, compared with jax.jacrev's; if they
    differ, compared again with jacrev's in float64, allowing for jacrev's own rounding.

    A graph the interpreter runs as one program runs op by op here (``jax.disable_jit``):
    the check is of the elimination's arithmetic, and compiling the chained graph's whole
    program would take longer than the rest of the demo (larger graphs run in the
    interpreter's jitted chunks, a bounded compile each)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    import alphagrad
    from alphagrad import interpreter

    argnums = tuple(range(len(example_args)))
    small = len(graph.intermediates) <= interpreter.CHUNK_ABOVE
    with jax.disable_jit() if small else contextlib.nullcontext():
        jac = alphagrad.jacobian(fn, order=order, argnums=argnums)(*example_args)
    ref = jax.jacrev(fn, argnums=argnums)(*example_args)
    check = compare_jacobians(jac, ref)
    if check.ok or check.mismatch is not None:
        return check
    with jax.enable_x64(True):
        wide = jax.tree_util.tree_map(
            lambda a: np.asarray(a, np.float64) if jnp.issubdtype(jnp.result_type(a), jnp.floating) else a,
            example_args)
        truth = jax.jacrev(fn, argnums=argnums)(*wide)
    return compare_jacobians(jac, ref, truth)


def _demo_graph(title: str, fn, example_args, agent, args) -> bool:
    """Traces ``fn``, prints the orders' table and, in words, how the model's order
    compares with annealing's and whether the Jacobian computed in it equals jax.jacrev's;
    returns whether it does."""
    import alphagrad

    graph = alphagrad.trace(fn, *example_args)
    print(f"{_summary(graph)}\n")
    rows, result = _agent_beside_annealing(graph, agent, args)
    if result is not None:
        checked, label = result, f"the model's order (found by {result.method})"
    else:
        name, _, _, checked = min(rows, key=lambda row: row[1])
        label = f"the cheapest order above ({name})"
    check = _check_jacobian(graph, fn, example_args, checked)
    print(f"\n{title}: {_against_annealing(rows, result, args)}.")
    print(f"{title}: {check.describe(label)}.")
    if not check.ok:
        print(f"error: the Jacobian of {title} computed in {label} differs from jax.jacrev beyond the tolerance "
              f"(max abs difference {check.max_difference:.2e}); this is a bug in alphagrad, please report it "
              "with this output", file=sys.stderr)
    return check.ok


def demo(args) -> int:
    """Traces a benchmark function, compares classic orders, annealing and the bundled
    model's at the same budget, and checks the Jacobian computed in the model's order
    against jax.jacrev; then the same on the function chained ``--chain`` times (a graph
    of hundreds of intermediates). Exit status 1 if a Jacobian differs beyond
    JACOBIAN_TOLERANCE."""
    import alphagrad

    names = [e.name for e in alphagrad.examples.all_examples()]
    if args.example not in names:
        raise UsageError(f"no example named {args.example!r}; the examples are: {', '.join(names)}")
    ex = alphagrad.examples.get(args.example)
    print(f"{ex.name}: {ex.description}\n")
    agent = _agent(args.model) if args.budget > 0 else None
    ok = _demo_graph(ex.name, ex.fn, ex.args, agent, args)
    if args.chain > 1:
        title = f"{ex.name} chained {args.chain} times"
        print(f"\n{title} (each copy's inputs moved by the last one's outputs):\n")
        ok &= _demo_graph(title, alphagrad.examples.chain(ex.fn, args.chain), ex.args, agent, args)
    return 0 if ok else 1


def cache(args) -> int:
    """Lists, clears, exports or imports the order cache of ``alphagrad.jacobian(f)``."""
    from alphagrad import order_cache

    folder = order_cache.directory()
    if folder is None:
        raise UsageError("the order cache is off: $ALPHAGRAD_CACHE_DIR is empty (unset it for "
                         "~/.cache/alphagrad, or name a directory)")
    try:
        if args.action == "list":
            found = order_cache.entries(folder)
            print(f"{len(found)} orders in {folder}")
            for path, e in found:
                if isinstance(e, str):
                    print(f"  {path}: damaged ({e})")
                    continue
                times = ", ".join(f"{n} {t * 1e6:.1f} us" for n, t in sorted(e.times.items(), key=lambda kv: kv[1]))
                print(f"  {e.key[:12]}  {e.function or '?'} at {e.spec} on {e.device}: {e.choice}, order of "
                      f"{e.cost} multiplications ({times or 'not timed'}; {e.search_s:.1f} s of search)")
        elif args.action == "clear":
            print(f"removed {order_cache.clear(folder)} orders from {folder}")
        elif args.action == "export":
            print(f"exported {order_cache.export(folder, args.file)} orders from {folder} to {args.file}")
        else:
            written, kept = order_cache.import_bundle(folder, args.file)
            print(f"imported {written} orders from {args.file} into {folder}; {kept} not, an order at least "
                  f"as cheap being kept for them")
    except (OSError, ValueError) as e:
        raise UsageError(str(e)) from None
    return 0


def timemodel(args) -> int:
    """Fits the time model (convention ``"time"``) on this machine and keeps it in the
    cache directory, where it overrides the packaged one; or shows the model in use.
    Exit status 1, the stored model untouched, when it cannot measure."""
    from alphagrad import time_fit, time_model

    try:
        platform = time_model.platform_of(time_model.TIME, args.platform)
    except ValueError as e:
        raise UsageError(str(e)) from None
    if args.action == "show":
        model = time_model.load(platform)
        print(json.dumps({"source": model.source, **model.to_json()}, indent=1))
        return 0
    settings = time_fit.FitSettings.quick() if args.quick else time_fit.FitSettings()
    changes = {k: v for k, v in (("batch", args.batch), ("programs", args.programs)) if v is not None}
    try:
        model, path = time_fit.refit(dataclasses.replace(settings, **changes), platform, args.out,
                                     log=lambda line: print(line, file=sys.stderr))
    except time_fit.FitError as e:
        print(f"alphagrad timemodel fit: error: {e}; the stored model is unchanged", file=sys.stderr)
        return 1
    print(f"wrote the {platform} time model (batch {model.batch}) to {path}")
    return 0


def _disk_caches() -> None:
    """Keeps the command's one-time work on disk for its next runs, under ``alphagrad``
    in ``$XDG_CACHE_HOME`` (default ``~/.cache``): a graph's rule tables
    (:func:`alphagrad.rules.tables`; ``$ALPHAGRAD_CACHE_DIR`` when set, left as it is:
    empty turns it off) and the compiled XLA programs (the network's encoder, one per
    padded graph size) in JAX's persistent compilation cache (``$JAX_COMPILATION_CACHE_DIR``
    when set, JAX's own setting). A second run then loads them (TransformerStack: tables
    1.3 s building, 0.1 s loading; its encoder 0.95 s compiling, 0.28 s loading). XLA
    programs are not kept with XLA's optimisations off: that flag is not part of JAX's
    cache keys, so such programs would later be served to runs that want them optimised."""
    import os

    import jax

    from alphagrad import rules

    root = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
                        "alphagrad")
    os.environ.setdefault(rules.CACHE_ENV, root)
    if os.environ.get("JAX_COMPILATION_CACHE_DIR") or jax.config.read("jax_disable_most_optimizations"):
        return
    jax.config.update("jax_compilation_cache_dir", os.path.join(root, "jax"))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="alphagrad", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("demo", help="trace a benchmark function and compare elimination orders")
    p.add_argument("--example", default="RoeFlux_3d", help="a name from alphagrad.examples")
    p.add_argument("--budget", type=_seconds(True), default=5.0,
                   help="seconds for the pretrained model and for annealing beside it (0: skip the model)")
    p.add_argument("--anneal", type=_seconds(True), default=None,
                   help="seconds of simulated annealing, if not --budget's (0: skip)")
    p.add_argument("--chain", type=_count, default=3,
                   help="also compare on the example chained this many times (default 3: ~460 intermediates "
                        "for RoeFlux_3d; 0 or 1: skip)")
    p.add_argument("--model", default=None, help="model directory or hub repo id (default: bundled)")
    p.add_argument("--seed", type=_seed, default=0)
    p.add_argument("--convention", default="exact", choices=["exact", "published"])
    p.set_defaults(run=demo)
    p = sub.add_parser("order", help="an elimination order for a function in a Python file")
    p.add_argument("target", help="path/to/file.py:function")
    p.add_argument("--args", required=True, help='example arguments, e.g. "f32[3,4] f32[]"')
    p.add_argument("--model", default=None, help="model directory or hub repo id (default: bundled)")
    p.add_argument("--budget", type=_seconds(False), default=10.0,
                   help="seconds of network orders and annealing (> 0)")
    p.add_argument("--fallback", choices=["markowitz"], default=None,
                   help="graphs over the model's limit: annealing from the classic orders, without the network")
    p.add_argument("--finetune", type=_finetune_seconds, default=None, metavar="S",
                   help="first adapt the network to this function by S seconds of self-play (at most 3600)")
    p.add_argument("--seed", type=_seed, default=0)
    p.add_argument("--json", action="store_true", help="print only the result, as JSON, on stdout")
    p.set_defaults(run=order)
    p = sub.add_parser("cache", help="list, clear, export or import the orders alphagrad.jacobian(f) keeps")
    actions = p.add_subparsers(dest="action", required=True)
    actions.add_parser("list", help="every order kept, with its function, shapes, device, choice and times")
    actions.add_parser("clear", help="remove every order kept")
    actions.add_parser("export", help="write every order kept into one JSON file").add_argument("file")
    actions.add_parser("import", help="merge a file written by export (an order replaces one only if "
                                      "cheaper)").add_argument("file")
    p.set_defaults(run=cache)
    p = sub.add_parser("timemodel", help="fit the time model (convention 'time') on this machine, or show it")
    actions = p.add_subparsers(dest="action", required=True)
    actions.add_parser("show", help="the model convention 'time' uses here, and where it comes from")
    fit = actions.add_parser("fit", help="time orders of zoo programs, fit the model, keep it in the cache")
    fit.add_argument("--quick", action="store_true", help="6 small programs, fewer orders (about a minute)")
    fit.add_argument("--batch", type=_positive, default=None, help="the batch a call is timed at (default 256)")
    fit.add_argument("--programs", type=_names, default=None, help="comma-separated zoo example names")
    fit.add_argument("--out", default=None, help="the file to write (default: in the cache directory)")
    for q in (p, fit):
        q.add_argument("--platform", default=None, help="JAX backend (default: jax.default_backend())")
    p.set_defaults(run=timemodel)
    args = parser.parse_args(argv)
    if args.command != "cache":  # the cache's commands need no JAX
        _disk_caches()
    try:
        return args.run(args)
    except UsageError as e:
        print(f"alphagrad {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
