"""The ``alphagrad`` command line.

    alphagrad demo [--example RoeFlux_3d] [--budget 5] [--chain 3]   # the README example, offline
    alphagrad order path/to/file.py:function --args "f32[3,4] f32[]" [--model ID] [--budget 10] [--json]

Exit status: 0 done; 1 the Jacobian check of ``demo`` failed (a wrong Jacobian: please
report it); 2 a wrong argument, file, function or model (the one-line message on stderr
says what to do). With ``--json``, stdout holds the JSON result and nothing else.
"""

from __future__ import annotations

import argparse
import contextlib
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


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def _seed(text: str) -> int:
    value = _count(text)
    if value >= 2**32:
        raise argparse.ArgumentTypeError(f"must be below 2**32 (jax.random.key keeps 32 bits), got {value}")
    return value


_DTYPES = {"f16": "float16", "bf16": "bfloat16", "f32": "float32", "f64": "float64"}


def parse_args_spec(spec: str) -> list:
    """``"f32[3,4] f32[]"`` -> example arrays of those dtypes and shapes (ones)."""
    import re

    import jax.numpy as jnp

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
        if m.group(1) == "f64":
            import jax

            if not jax.config.jax_enable_x64:
                raise UsageError(f"{token}: float64 needs 64-bit JAX; set JAX_ENABLE_X64=1 in the environment, "
                                 "or use f32")
        out.append(jnp.ones(shape, _DTYPES[m.group(1)]))
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
    except (alphagrad.TraceError, alphagrad.UnsupportedPrimitiveError) as e:
        raise UsageError(f"cannot trace {name}: {e}") from None
    except Exception as e:  # an error in the user's function on these shapes (JAX's shape checks)
        first = str(e).strip().splitlines()[0].rstrip(".") if str(e).strip() else ""
        raise UsageError(f"calling {name} on --args {spec!r} raised {type(e).__name__}: {first}; check that "
                         f"--args gives the shapes and dtypes {name} expects") from None


def _agent(model):
    import alphagrad
    from alphagrad.hub import ModelLoadError

    t = time.perf_counter()
    try:
        agent = alphagrad.from_pretrained(model)
    except ModelLoadError as e:
        raise UsageError(f"cannot load the model {model!r}: {e}") from None
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
            result = agent.order(graph, budget_s=args.budget, fallback=args.fallback, seed=args.seed)
        except GraphTooLargeError as e:
            raise UsageError(f"{e} (on the command line: --fallback markowitz)") from None
    if args.json:
        print(json.dumps({"order": result.order, "cost": result.cost, "baselines": result.baselines,
                          "savings": result.savings, "method": result.method,
                          "network_cost": result.network_cost, "seconds": result.seconds,
                          "compile_seconds": result.compile_seconds, "fingerprint": result.fingerprint},
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


#: Tolerances of demo's Jacobian check, by dtype: |J - J_jacrev| <= atol * max(1, max|J_jacrev|)
#: + rtol * |J_jacrev|, per output/input block (summation order differs between orders).
JACOBIAN_TOLERANCE = {"float16": (1e-2, 1e-2), "bfloat16": (2e-2, 2e-2), "float32": (2e-4, 2e-5),
                      "float64": (1e-9, 1e-11)}


def jacobian_error(jac, ref) -> tuple[float, bool]:
    """(max abs difference, whether every block is within JACOBIAN_TOLERANCE) of two
    Jacobians with the same pytree layout. NaN where jacrev has NaN counts as equal;
    anywhere else it is a mismatch."""
    import jax
    import numpy as np

    a_leaves, a_tree = jax.tree_util.tree_flatten(jac)
    b_leaves, b_tree = jax.tree_util.tree_flatten(ref)
    if a_tree != b_tree:
        return math.inf, False
    worst, ok = 0.0, True
    for a, b in zip(a_leaves, b_leaves):
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape:
            return math.inf, False
        rtol, atol = JACOBIAN_TOLERANCE.get(b.dtype.name, JACOBIAN_TOLERANCE["float32"])
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        finite = np.isfinite(b64)
        scale = max(1.0, float(np.max(np.abs(b64[finite]), initial=0.0)))
        ok &= bool(np.allclose(a64, b64, rtol=rtol, atol=atol * scale, equal_nan=True))
        diff = np.abs(a64 - b64)
        diff = np.where(np.isnan(a64) & np.isnan(b64), 0.0, diff)
        worst = max(worst, float(np.max(np.where(np.isnan(diff), np.inf, diff), initial=0.0)))
    return worst, ok


def _agent_beside_annealing(graph, args) -> tuple[list, object]:
    """The baselines, annealing and the bundled model's order at the same budget (unless
    ``--anneal`` says otherwise), printed side by side; returns the table's rows and the
    model's ``OrderResult`` (None with ``--budget 0``)."""
    anneal_s = args.budget if args.anneal is None else args.anneal
    rows = _baseline_table(graph, anneal_s, args.convention)
    result = None
    if args.budget > 0:
        agent = _agent(args.model)
        result = agent.order(graph, budget_s=args.budget, seed=args.seed, progress=False)
        rows.append((f"model {args.budget:g}s", result.cost, result.seconds, result.order))
    _print_table(rows)
    if result is not None:
        net = "" if result.network_cost is None else f"; the network's own best order: {result.network_cost:,}"
        print(f"model: found by {result.method}{net}; +{result.compile_seconds:.1f} s compiling")
    return rows, result


def demo(args) -> int:
    """Traces a benchmark function, compares classic orders, annealing and the bundled
    model's at the same budget (and on the function chained ``--chain`` times, a graph
    of hundreds of intermediates), and checks the Jacobian computed in the model's order
    against jax.jacrev (exit 1 if they differ beyond JACOBIAN_TOLERANCE)."""
    import jax

    import alphagrad

    names = [e.name for e in alphagrad.examples.all_examples()]
    if args.example not in names:
        raise UsageError(f"no example named {args.example!r}; the examples are: {', '.join(names)}")
    ex = alphagrad.examples.get(args.example)
    print(f"{ex.name}: {ex.description}\n")
    graph = alphagrad.trace(ex.fn, *ex.args)
    print(graph.summary(max_rows=0), "\n")
    rows, result = _agent_beside_annealing(graph, args)
    if result is not None:
        print()
        print(result)
        checked, label = result, f"the model's order ({result.method})"
    else:
        name, _, _, checked = min(rows, key=lambda row: row[1])
        label = f"the cheapest order above ({name})"
    if args.chain > 1:
        big = alphagrad.trace(alphagrad.examples.chain(ex.fn, args.chain), *ex.args)
        print(f"\n{ex.name} chained {args.chain} times (each copy's inputs moved by the last one's outputs): "
              f"{len(big.intermediates)} intermediates\n")
        _agent_beside_annealing(big, args)
    argnums = tuple(range(len(ex.args)))
    jac = alphagrad.jacobian(ex.fn, order=checked, argnums=argnums)(*ex.args)
    ref = jax.jacrev(ex.fn, argnums=argnums)(*ex.args)
    err, ok = jacobian_error(jac, ref)
    print(f"\nJacobian of {ex.name} in {label} vs jax.jacrev: max abs difference {err:.2e}")
    if not ok:
        print(f"error: the Jacobian computed in {label} differs from jax.jacrev beyond the tolerance "
              f"(max abs difference {err:.2e}); this is a bug in alphagrad, please report it with this output",
              file=sys.stderr)
        return 1
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
    p.add_argument("--seed", type=_seed, default=0)
    p.add_argument("--json", action="store_true", help="print only the result, as JSON, on stdout")
    p.set_defaults(run=order)
    args = parser.parse_args(argv)
    _disk_caches()
    try:
        return args.run(args)
    except UsageError as e:
        print(f"alphagrad {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
