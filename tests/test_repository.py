"""The repository stays a library: small tracked tree, no machine's absolute paths, no
import cycles, nothing importing up the pipeline, no overlong functions in the library."""
from __future__ import annotations

import ast
import os
import subprocess

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir))
PACKAGES = ("alphagrad", "data_gen", "train", "eval", "hub")
# a package may import only those listed (and itself); tests import anything
ALLOWED = {
    "alphagrad": set(),
    "data_gen": {"alphagrad"},
    "train": {"alphagrad", "data_gen"},
    "hub": {"alphagrad"},
    "eval": {"alphagrad", "data_gen", "train"},
}


def tracked_files() -> list[str]:
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return [p for p in out.decode().split("\0") if p and os.path.isfile(os.path.join(ROOT, p))]


def test_tracked_tree_is_small():
    total = sum(os.path.getsize(os.path.join(ROOT, p)) for p in tracked_files())
    assert total <= 20 * 2**20, f"tracked files hold {total / 2**20:.1f} MiB (at most 20 MiB)"
    big = [p for p in tracked_files() if os.path.getsize(os.path.join(ROOT, p)) > 2**20
           and not p.startswith("alphagrad/pretrained/")]
    assert not big, f"files over 1 MiB are tracked (artefacts belong out of git): {big}"


def test_no_absolute_paths_in_tracked_files():
    pattern = rb"(?<![\w.~/-])/(?:home|root|Users|work|tmp|mnt|opt|var/folders)/[\w.-]"
    import re
    offenders = []
    for p in tracked_files():
        with open(os.path.join(ROOT, p), "rb") as f:
            data = f.read()
        if b"\0" in data[:4096]:
            continue  # binary
        if p in ("tests/test_repository.py",):
            continue
        for m in re.finditer(pattern, data):
            line = data.count(b"\n", 0, m.start()) + 1
            offenders.append(f"{p}:{line}")
    assert not offenders, f"absolute paths of a machine in tracked files: {offenders[:20]}"


def module_imports() -> dict[str, set[str]]:
    """Every first-party module and the first-party modules it imports (anywhere in it)."""
    modules: dict[str, str] = {}
    for pkg in PACKAGES:
        for d, _, files in os.walk(os.path.join(ROOT, pkg)):
            for name in files:
                if name.endswith(".py"):
                    rel = os.path.relpath(os.path.join(d, name), ROOT)[:-3].replace(os.sep, ".")
                    modules[rel.removesuffix(".__init__")] = os.path.join(d, name)
    graph: dict[str, set[str]] = {}
    for mod, path in modules.items():
        with open(path) as f:
            tree = ast.parse(f.read(), path)
        package = mod if path.endswith("__init__.py") else mod.rpartition(".")[0]
        found = set()
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
                names = [base] + [f"{base}.{a.name}" for a in node.names]
            for n in names:
                while n and n not in modules:
                    n = n.rpartition(".")[0]
                if n and n != mod:
                    found.add(n)
        graph[mod] = found
    return graph


def test_packages_import_only_down_the_pipeline():
    bad = []
    for mod, deps in module_imports().items():
        top = mod.split(".")[0]
        for dep in deps:
            other = dep.split(".")[0]
            if other != top and other not in ALLOWED[top]:
                bad.append(f"{mod} -> {dep}")
    assert not bad, f"imports pointing up the pipeline: {bad}"


def test_no_import_cycles():
    graph = module_imports()
    # a package's __init__ re-exporting its submodules is not a cycle of ideas
    edges = {m: {d for d in deps if not (m == d.rpartition(".")[0] or m.startswith(d + ".") and d in PACKAGES)}
             for m, deps in graph.items()}
    state: dict[str, int] = {}
    cycles = []

    def visit(node, stack):
        state[node] = 1
        stack.append(node)
        for dep in sorted(edges.get(node, ())):
            if state.get(dep) == 1:
                cycles.append(stack[stack.index(dep):] + [dep])
            elif dep not in state:
                visit(dep, stack)
        stack.pop()
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node, [])
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_library_functions_are_short():
    long = []
    for d, _, files in os.walk(os.path.join(ROOT, "alphagrad")):
        for name in files:
            if not name.endswith(".py"):
                continue
            path = os.path.join(d, name)
            with open(path) as f:
                tree = ast.parse(f.read(), path)
            for node in ast.walk(tree):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    kernel = any("njit" in ast.unparse(dec) or "jit" == ast.unparse(dec).split("(")[0].split(".")[-1]
                                 for dec in node.decorator_list)
                    length = node.end_lineno - node.lineno + 1
                    if length > 100 and not kernel:
                        long.append(f"{os.path.relpath(path, ROOT)}:{node.lineno} {node.name} ({length} lines)")
    assert not long, f"functions over 100 lines in alphagrad/ (numba kernels excepted): {long}"


# alphagrad's pipeline, bottom to top: a module imports only modules of lower layers
LAYERS = (
    ("alphagrad.structure", "alphagrad.network", "alphagrad.examples", "alphagrad.examples.published",
     "alphagrad.examples.real", "alphagrad.examples.zoo"),
    ("alphagrad.primitives", "alphagrad.rules", "alphagrad.graph"),
    ("alphagrad.time_model",),
    ("alphagrad.trace", "alphagrad.checks", "alphagrad.evaluator", "alphagrad.canonical", "alphagrad.order_cache"),
    ("alphagrad.engine", "alphagrad.orders", "alphagrad.features"),
    ("alphagrad.scoring", "alphagrad.player", "alphagrad.observe"),
    ("alphagrad.anneal", "alphagrad.periodic", "alphagrad.search", "alphagrad.hub.format"),
    ("alphagrad.baselines", "alphagrad.inference", "alphagrad.interpreter", "alphagrad.hub.card", "alphagrad.selfplay"),
    ("alphagrad.hub.files",),
    ("alphagrad.hub",),
    ("alphagrad.agent",),
    ("alphagrad.autotune",),
    ("alphagrad.time_fit",),
    ("alphagrad.cli",),
    ("alphagrad", "alphagrad.__main__"),
)


def test_library_modules_import_only_lower_layers():
    layer = {m: k for k, mods in enumerate(LAYERS) for m in mods}
    graph = {m: deps for m, deps in module_imports().items() if m.split(".")[0] == "alphagrad"}
    assert set(graph) == set(layer), f"modules missing from LAYERS (add each where it belongs): {set(graph) ^ set(layer)}"
    bad = []
    for mod, deps in graph.items():
        for dep in deps:
            # "from alphagrad import x" names the package too; a package's own submodules are below it
            if dep == "alphagrad" or (dep.startswith(mod + ".")) or (mod.startswith(dep + ".") and dep != "alphagrad"):
                continue
            if layer[dep] >= layer[mod]:
                bad.append(f"{mod} (layer {layer[mod]}) -> {dep} (layer {layer[dep]})")
    assert not bad, f"imports that do not point down the pipeline: {bad}"
