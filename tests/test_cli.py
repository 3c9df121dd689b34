"""The ``alphagrad`` command line: ``order`` (JSON on stdout only, one-line errors with exit
status 2 for every wrong input) and ``demo`` (exit status 1 when its Jacobian check fails)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import alphagrad as ag
from alphagrad import cli
from alphagrad.agent import Agent
from alphagrad.hub.format import init_params, model_config
from alphagrad.network import NetworkConfig, PolicyNet

SOURCE = """\
import jax.numpy as jnp

print("imported f.py")  # with --json this must not reach stdout


def f(x, y):
    return jnp.sin(x @ y) * jnp.tanh(x).sum()
"""


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    config = NetworkConfig(dim=16, heads=2, layers=1)
    params = init_params(PolicyNet(config), jax.random.key(0))
    path = tmp_path_factory.mktemp("cli") / "model"
    Agent(model_config(config, 1024), params).save_pretrained(path)
    return str(path)


@pytest.fixture
def src(tmp_path):
    path = tmp_path / "f.py"
    path.write_text(SOURCE)
    return str(path)


def run_cli(argv, capsys):
    code = cli.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_order_json_is_the_only_thing_on_stdout(src, model, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_") and k != "ALPHAGRAD_CACHE_DIR"}
    proc = subprocess.run([sys.executable, "-m", "alphagrad", "order", f"{src}:f", "--args", "f32[3,4] f32[4]",
                           "--model", model, "--budget", "0.2", "--json"],
                          capture_output=True, text=True, timeout=300,
                          env={**env, "HF_HUB_OFFLINE": "1", "XDG_CACHE_HOME": str(tmp_path / "cache")})
    assert proc.returncode == 0, proc.stderr
    # what it compiled is kept on disk for the next run (JAX's persistent cache) ...
    cached = list((tmp_path / "cache" / "alphagrad" / "jax").iterdir())
    assert cached
    # ... but never what was compiled with XLA's optimisations off (not in the cache keys)
    subprocess.run([sys.executable, "-m", "alphagrad", "order", f"{src}:f", "--args", "f32[3,4] f32[4]",
                    "--model", model, "--budget", "0.2", "--json"], capture_output=True, timeout=300, check=True,
                   env={**env, "HF_HUB_OFFLINE": "1", "XDG_CACHE_HOME": str(tmp_path / "other"),
                        "JAX_DISABLE_MOST_OPTIMIZATIONS": "1"})
    assert not (tmp_path / "other" / "alphagrad" / "jax").exists()
    result = json.loads(proc.stdout)  # the whole of stdout
    assert "imported f.py" in proc.stderr and "model:" in proc.stderr
    g = ag.trace(lambda x, y: jnp.sin(x @ y) * jnp.tanh(x).sum(), jnp.ones((3, 4)), jnp.ones(4))
    assert sorted(result["order"]) == sorted(g.intermediates)
    assert result["cost"] == ag.cost(g, result["order"]) <= min(result["baselines"].values())
    assert result["fingerprint"] == g.fingerprint
    from alphagrad import rules  # and so are the graph's rule tables

    assert (tmp_path / "cache" / "alphagrad" / "tables" / f"{rules._disk_key(g)}.npz").is_file()
    assert set(result) >= {"savings", "method", "network_cost", "seconds", "compile_seconds"}


def test_order_without_json_prints_the_result(src, model, capsys):
    code, out, err = run_cli(["order", f"{src}:f", "--args", "f32[3,4] f32[4]", "--model", model,
                              "--budget", "0.2"], capsys)
    assert code == 0, err
    assert "savings vs the best baseline" in out and "model:" in err


@pytest.mark.parametrize("args, message", [
    ("f32[3,4]", r"f\(x, y\) takes 2 positional argument\(s\), but --args 'f32\[3,4\]' gives 1"),
    ("f32[3,4] f32[4] f32[]", "takes 2 positional argument.* gives 3"),
    ("f32[3,4] f32[3]", r"calling f on --args 'f32\[3,4\] f32\[3\]' raised TypeError: dot_general .*check that "
                        r"--args gives the shapes and dtypes f expects"),
    ("", "--args is empty: give one dtype"),
    ("   ", "--args is empty"),
    ("float[3] f32[4]", r"cannot read argument 'float\[3\]'.*dtype\[shape\]"),
    ("f32[3,] f32[4]", r"cannot read the shape of 'f32\[3,\]'"),
    ("f64[3,4] f32[4]", "float64 needs 64-bit JAX; set JAX_ENABLE_X64=1"),
])
def test_order_argument_errors_are_one_line_with_status_2(src, capsys, args, message):
    code, out, err = run_cli(["order", f"{src}:f", "--args", args, "--model", "/nonexistent"], capsys)
    assert code == 2
    assert err.startswith("alphagrad order: error: ") and err.count("\n") == 1, err
    assert re.search(message, err), err
    assert "Traceback" not in err


@pytest.mark.parametrize("body, message", [
    ("import math\n\nx = 1 / 0\n", r"importing .*bad.py raised ZeroDivisionError: division by zero "
                                   r"\(line 3: `x = 1 / 0`\)"),
    ("def f(x:\n    return x\n", "bad.py has a syntax error at line 1"),
    ("import not_a_module_anywhere\n", "raised ModuleNotFoundError: No module named 'not_a_module_anywhere'"),
    ("import sys\nsys.exit(3)\n", "raised SystemExit: 3"),
    ("f = 3\n", "bad.py: f is a int, not a function"),
    ("def g(x):\n    return x\n", "bad.py has no function 'f'; it defines g"),
])
def test_order_file_errors(tmp_path, capsys, body, message):
    (tmp_path / "bad.py").write_text(body)
    code, _, err = run_cli(["order", f"{tmp_path / 'bad.py'}:f", "--args", "f32[3]"], capsys)
    assert code == 2 and re.search(message, err), err
    assert "Traceback" not in err and err.count("\n") == 1


def test_order_target_and_model_errors(src, tmp_path, capsys):
    code, _, err = run_cli(["order", str(tmp_path / "missing.py") + ":f", "--args", "f32[3]"], capsys)
    assert code == 2 and "no such file" in err
    code, _, err = run_cli(["order", "f.py", "--args", "f32[3]"], capsys)
    assert code == 2 and "expected path/to/file.py:function" in err
    code, _, err = run_cli(["order", f"{src}:f", "--args", "f32[3,4] f32[4]", "--model", str(tmp_path / "none")],
                           capsys)
    assert code == 2 and "cannot load the model" in err and "does not exist" in err


def test_order_traces_from_shapes_without_allocating(tmp_path, model, capsys):
    """--args gives shapes: 400 GB of float32 traces (nothing is allocated) and gets an order."""
    (tmp_path / "big.py").write_text("import jax.numpy as jnp\n\n\ndef f(x):\n"
                                     "    return jnp.tanh(jnp.sin(x) * x).sum()\n")
    code, out, err = run_cli(["order", f"{tmp_path / 'big.py'}:f", "--args", "f32[100000000000]", "--model", model,
                              "--budget", "0.2", "--json"], capsys)
    assert code == 0, err
    g = ag.trace(lambda x: jnp.tanh(jnp.sin(x) * x).sum(), jax.ShapeDtypeStruct((10**11,), jnp.float32))
    assert json.loads(out)["cost"] == min(ag.cost(g, o) for o in ("fwd", "rev", "markowitz")) == 2 * 10**11


def test_order_refuses_a_branch_chosen_by_argument_values_in_one_line(tmp_path, capsys):
    (tmp_path / "branchy.py").write_text("import jax\nimport jax.numpy as jnp\n\n"
                                         "def f(x):\n    return jax.lax.cond(x.sum() > 0, jnp.sin, jnp.cos, x)\n")
    code, _, err = run_cli(["order", f"{tmp_path / 'branchy.py'}:f", "--args", "f32[3]", "--model", "/nonexistent"],
                           capsys)
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert re.search(r"^alphagrad order: error: cannot trace f: `cond` .*branchy.py:5.* depends on argument \[0\], "
                     r"given as a shape only.*--args gives shapes, not values: from Python, "
                     r"alphagrad.trace\(f, \*arrays\) takes the branch those arrays choose\n$", err), err


@pytest.mark.parametrize("edit, message", [
    ({"layers": 2}, r"missing \(\d+\): params/blocks_1/"),
    ({"heads": 4}, r"shape mismatch \(\d+\): params/blocks_0/\S+ expected \(\d+, \d+\), got"),
])
def test_order_model_whose_weights_do_not_match_its_config(src, model, tmp_path, capsys, edit, message):
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(model, broken)
    config = json.loads((broken / "config.json").read_text())
    config["network"].update(edit)
    (broken / "config.json").write_text(json.dumps(config))
    code, _, err = run_cli(["order", f"{src}:f", "--args", "f32[3,4] f32[4]", "--model", str(broken)], capsys)
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(f"alphagrad order: error: cannot load the model {str(broken)!r}: The weights do not match "
                          "the config (a different architecture or a damaged file): ")
    assert re.search(message, err), err


def test_a_file_can_import_its_neighbours_and_define_dataclasses(tmp_path, model, capsys):
    (tmp_path / "helpers.py").write_text("import jax.numpy as jnp\n\ndef act(x):\n    return jnp.tanh(x)\n")
    (tmp_path / "g.py").write_text(
        "from __future__ import annotations\nimport dataclasses\nfrom helpers import act\n\n"
        "@dataclasses.dataclass\nclass P:\n    a: float = 2.0\n\ndef g(x):\n    return act(P().a * x).sum()\n")
    code, out, err = run_cli(["order", f"{tmp_path / 'g.py'}:g", "--args", "f32[3]", "--model", model,
                              "--budget", "0.2", "--json"], capsys)
    assert code == 0, err
    assert json.loads(out)["cost"] >= 0


@pytest.mark.parametrize("option, value, message", [
    ("--budget", "nan", "must be a finite number of seconds > 0, got 'nan'"),
    ("--budget", "-1", "must be a finite number of seconds > 0, got '-1'"),
    ("--budget", "0", "must be a finite number of seconds > 0"),
    ("--budget", "inf", "must be a finite number of seconds > 0"),
    ("--budget", "ten", "expected a number of seconds, got 'ten'"),
    ("--seed", "-1", "must be >= 0"),
    ("--seed", str(2**32), "must be below 2\\*\\*32"),
])
def test_order_option_errors_exit_2(src, capsys, option, value, message):
    with pytest.raises(SystemExit) as info:
        cli.main(["order", f"{src}:f", "--args", "f32[3,4] f32[4]", option, value])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert re.search(f"argument {option}: {message}", err), err


@pytest.mark.parametrize("option, value", [("--budget", "nan"), ("--budget", "-1"), ("--anneal", "-3")])
def test_demo_option_errors_exit_2(capsys, option, value):
    with pytest.raises(SystemExit) as info:
        cli.main(["demo", option, value])
    assert info.value.code == 2
    assert f"argument {option}: must be a finite number of seconds >= 0 (0: skip)" in capsys.readouterr().err


def test_demo_unknown_example_lists_the_names(capsys):
    code, _, err = run_cli(["demo", "--example", "Nope"], capsys)
    assert code == 2
    assert "no example named 'Nope'; the examples are: RoeFlux_1d, RoeFlux_3d" in err and "LennardJones_5" in err
    assert err.count("\n") == 1


DEMO = ["demo", "--example", "LennardJones_5", "--anneal", "0", "--budget", "0", "--chain", "0"]


def test_demo_checks_the_jacobian_and_says_so(capsys):
    code, out, err = run_cli(DEMO, capsys)
    assert code == 0, err
    assert re.search(r"LennardJones_5: Jacobian in the cheapest order above \(\w+\) equals jax.jacrev's: max abs "
                     r"difference \S+ on entries up to \S+, (under 1%|\d+%) of the tolerance \(float32: rtol=2e-04, "
                     r"atol=2e-05 x max\(1, the largest \|entry\| of its output/input block\)\)\.", out), out
    assert ("LennardJones_5: the cheapest order is the best classic order" in out
            and "no model (--budget 0) and no annealing (--anneal 0) to compare" in out)
    assert "... " not in out  # no summary line left under a listing that is not there


def test_demo_fails_when_the_jacobian_is_wrong(monkeypatch, capsys):
    real = ag.jacobian

    def off_by_a_little(f, order="rev", argnums=0, **kw):
        jac = real(f, order, argnums=argnums, **kw)
        return lambda *a: jax.tree_util.tree_map(lambda x: x.at[(0,) * x.ndim].add(1e-2), jac(*a))
    monkeypatch.setattr(ag, "jacobian", off_by_a_little)
    code, out, err = run_cli(DEMO, capsys)
    assert code == 1
    assert "differs from jax.jacrev beyond the tolerance" in err and "max abs difference 1.00e-02" in err
    assert re.search(r"LennardJones_5: Jacobian in .* DIFFERS from jax.jacrev's beyond jacrev's own rounding: against "
                     r"jax.jacrev's in float64, max abs difference 1.00e-02 .*x the tolerance", out), out


def test_demo_checks_the_chained_graph_too(monkeypatch, capsys):
    """Each graph shown gets its check; a wrong Jacobian on the chained graph alone exits 1."""
    real = ag.jacobian
    calls = []

    def wrong_on_the_second(f, order="rev", argnums=0, **kw):
        calls.append(order)
        jac = real(f, order, argnums=argnums, **kw)
        bad = len(calls) == 2
        return lambda *a: jax.tree_util.tree_map(lambda x: x * 2 if bad else x, jac(*a))
    monkeypatch.setattr(ag, "jacobian", wrong_on_the_second)
    argv = ["demo", "--example", "LennardJones_5", "--anneal", "0", "--budget", "0", "--chain", "2"]
    code, out, err = run_cli(argv, capsys)
    assert code == 1 and len(calls) == 2
    assert "LennardJones_5: Jacobian in the cheapest order above" in out and "equals jax.jacrev's" in out
    assert re.search(r"LennardJones_5 chained 2 times: Jacobian in .* DIFFERS from jax.jacrev's", out), out
    assert "the Jacobian of LennardJones_5 chained 2 times computed in" in err and err.count("error:") == 1


class MarkowitzAgent:
    """Stands in for a loaded model (the agent itself is tested in test_agent.py): its order
    is Markowitz's, reversed, so that it differs from the table's cheapest."""

    def order(self, graph, budget_s, seed, progress=True):
        from alphagrad.agent import OrderResult

        order = list(reversed(ag.baselines.markowitz(graph)))
        return OrderResult(order=order, cost=ag.cost(graph, order), baselines={"markowitz": 1}, method="test",
                           network_cost=None, seconds=0.0, compile_seconds=0.0, history=[],
                           fingerprint=graph.fingerprint)


def test_demo_with_the_model_checks_the_models_order(monkeypatch, capsys):
    monkeypatch.setattr(cli, "_agent", lambda model: MarkowitzAgent())
    seen = []
    real = ag.jacobian
    monkeypatch.setattr(ag, "jacobian", lambda f, order, **kw: seen.append(order) or real(f, order, **kw))
    argv = ["demo", "--example", "LennardJones_5", "--anneal", "0", "--budget", "0.2", "--chain", "0"]
    code, out, err = run_cli(argv, capsys)
    assert code == 0, err
    assert "LennardJones_5: Jacobian in the model's order (found by test) equals jax.jacrev's" in out
    assert re.search(r"LennardJones_5: the model's order \([\d,]+ multiplications\) is [\d.]+% (cheaper|dearer) "
                     r"than the best classic order \(\w+, [\d,]+ multiplications\); no annealing to compare "
                     r"\(--anneal 0\)\.", out), out
    assert seen[0].method == "test"  # the model's order is the one checked
    monkeypatch.setattr(ag, "jacobian", lambda f, order="rev", argnums=0, **kw:
                        lambda *a: jax.tree_util.tree_map(lambda x: -x, jax.jacrev(f, argnums=argnums)(*a)))
    code, _, err = run_cli(argv, capsys)
    assert code == 1 and "the model's order (found by test)" in err


def test_demo_puts_the_model_beside_annealing_at_the_same_budget_also_on_the_chained_example(monkeypatch, capsys):
    monkeypatch.setattr(cli, "_agent", lambda model: MarkowitzAgent())
    code, out, err = run_cli(["demo", "--example", "LennardJones_5", "--budget", "0.2", "--chain", "2"], capsys)
    assert code == 0, err
    one = len(ag.trace(ag.examples.get("LennardJones_5").fn, *ag.examples.get("LennardJones_5").args).intermediates)
    assert out.count("anneal 0.2s") == 2 and out.count("model 0.2s") == 2  # the same budget, on both graphs
    assert "LennardJones_5 chained 2 times (each copy's inputs" in out
    chained = int(re.search(r"LennardJones_5 chained 2 times.*?\nGraph \w+: \d+ inputs, (\d+) intermediates", out,
                            re.S).group(1))
    assert chained > 2 * one
    for title in ("LennardJones_5", "LennardJones_5 chained 2 times"):  # in words, on both graphs
        assert re.search(rf"\n{title}: the model's order (ties with|is [\d.]+% (cheaper|dearer) than) annealing's "
                         r"\([\d,]+ vs [\d,]+ multiplications; both given 0.2 s\) and (ties with|is [\d.]+% "
                         r"(cheaper|dearer) than) the best classic order", out), out
        assert f"\n{title}: Jacobian in the model's order (found by test) equals jax.jacrev's" in out
    code, out, _ = run_cli(["demo", "--example", "LennardJones_5", "--budget", "0.2", "--anneal", "0.1",
                            "--chain", "0"], capsys)
    assert code == 0 and "; the model given 0.2 s, annealing 0.1 s)" in out
    code, out, _ = run_cli(["demo", "--example", "LennardJones_5", "--budget", "0", "--anneal", "0.1",
                            "--chain", "0"], capsys)
    assert code == 0 and re.search(r"annealing's order \([\d,]+ multiplications\) .* the best classic order .*; "
                                   r"no model to compare \(--budget 0\)\.", out), out
    for bad in ("-1", "x"):
        with pytest.raises(SystemExit) as info:
            cli.main(["demo", "--chain", bad])
        assert info.value.code == 2 and "argument --chain" in capsys.readouterr().err


@pytest.mark.parametrize("cost, other, words", [
    (398, 398, "ties with"), (93, 100, "is 7% cheaper than"), (104, 100, "is 4% dearer than"),
    (1779, 1793, "is 0.8% cheaper than"), (10001, 10000, "is 0.01% dearer than"), (1, 0, "is dearer than"),
])
def test_comparisons_in_words(cost, other, words):
    assert cli._compare(cost, other) == words


def test_compare_jacobians():
    a = {"x": np.array([[1.0, 2.0], [3.0, np.nan]], np.float32)}
    check = cli.compare_jacobians(a, a)  # NaN where jacrev has NaN is equal
    assert check.ok and check.max_difference == 0.0 and check.used == 0.0 and check.scale == 3.0
    assert check.dtypes == ("float32",) and (check.entries, check.nans, check.uncompared) == (4, 1, 0)
    check = cli.compare_jacobians({"x": np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)}, a)
    assert check.ok and check.uncompared == 1  # a number where jacrev has NaN is not compared (0 * NaN)
    assert "; 1 of 4 entries, where jacrev's is NaN and this one is not, not compared" in check.describe("x")
    check = cli.compare_jacobians({"x": np.array([[1.0, 2.0], [np.nan, 4.0]], np.float32)}, a)
    assert not check.ok and check.max_difference == np.inf  # a NaN where jacrev has a number is a mismatch
    assert "a NaN or infinity where the reference differs" in check.describe("reverse")
    nan = np.full(3, np.nan, np.float32)
    check = cli.compare_jacobians(np.ones(3, np.float32), nan)
    assert check.ok and "cannot be checked: jax.jacrev's is NaN in all its 3 entries" in check.describe("x")
    big = np.full(3, 1e6, np.float32)
    check = cli.compare_jacobians(big + 10.0, big)
    assert check.ok and check.max_difference == 10.0  # within float32's relative tolerance
    assert check.used == pytest.approx(10.0 / (2e-5 * 1e6 + 2e-4 * 1e6))
    check = cli.compare_jacobians(big + 1e3, big)
    assert not check.ok and "DIFFERS" in check.describe("x") and "4.55x the tolerance" in check.describe("x")
    # the absolute tolerance scales with each block's largest entry, not with the whole Jacobian's
    small, large = np.full(2, 1e-3, np.float32), np.full(2, 1e3, np.float32)
    assert not cli.compare_jacobians((small + 1e-3, large), (small, large)).ok
    assert cli.compare_jacobians((small, large + 1e-3), (small, large)).ok
    inf = np.array([np.inf, 1.0], np.float32)
    assert cli.compare_jacobians(inf, inf).ok
    check = cli.compare_jacobians(inf[::-1], inf)
    assert not check.ok and check.max_difference == check.used == np.inf
    check = cli.compare_jacobians(np.ones(3, np.float32), np.ones(4, np.float32))
    assert not check.ok and "a block of shape (3,) where jacrev's has (4,)" in check.describe("x")
    assert not cli.compare_jacobians((np.ones(2),), [np.ones(2)]).ok
    assert "layout" in cli.compare_jacobians((np.ones(2),), [np.ones(2)]).describe("x")


def test_compare_jacobians_allows_for_jacrevs_own_rounding_against_float64():
    truth = np.array([0.5, 0.25])
    ref = (truth + [1e-4, 0.0]).astype(np.float32)  # jacrev's float32 rounding, 5x the tolerance
    assert not cli.compare_jacobians(ref - np.float32(1e-4), ref).ok
    check = cli.compare_jacobians((truth + [-1e-4, 0.0]).astype(np.float32), ref, truth)
    assert check.ok and check.reference_error == pytest.approx(1e-4, rel=1e-3)
    assert check.max_difference == pytest.approx(1e-4, rel=1e-3)
    assert check.describe("x").startswith("Jacobian in x equals jax.jacrev's up to jacrev's own rounding: against "
                                          "jax.jacrev's in float64, max abs difference 1.00e-04 (jacrev's own: "
                                          "1.00e-04) on entries up to")
    check = cli.compare_jacobians((truth + [1e-3, 0.0]).astype(np.float32), ref, truth)
    assert not check.ok and "DIFFERS from jax.jacrev's beyond jacrev's own rounding" in check.describe("x")


def test_check_jacobian_on_a_chained_graph(monkeypatch):
    """SABR_16 chained 3 times: every order's float32 Jacobian is over the tolerance from
    jacrev's, and closer than jacrev's to jacrev's in float64; above the interpreter's
    one-program size the check runs the interpreter's jitted chunks."""
    ex = ag.examples.get("SABR_16")
    fn = ag.examples.chain(ex.fn, 3)
    graph = ag.trace(fn, *ex.args)
    check = cli._check_jacobian(graph, fn, ex.args, "rev")
    assert check.ok and check.reference_error is not None, check
    lj = ag.examples.get("LennardJones_5")
    from alphagrad import interpreter

    monkeypatch.setattr(interpreter, "CHUNK_ABOVE", 4)
    graph = ag.trace(lj.fn, *lj.args)
    check = cli._check_jacobian(graph, lj.fn, lj.args, ag.baselines.markowitz(graph))
    assert check.ok and check.reference_error is None


def test_cache_list_clear_export_import(tmp_path, monkeypatch, capsys):
    """``alphagrad cache``: the orders alphagrad.jacobian(f) keeps, shipped as one file."""
    from alphagrad import order_cache

    monkeypatch.setenv("ALPHAGRAD_CACHE_DIR", str(tmp_path / "cache"))
    folder = order_cache.directory()
    for k, (name, choice) in enumerate([("f", "jax.jacrev"), ("g", "order")]):
        order_cache.store(folder, order_cache.Entry(
            key=f"{k:032d}", graph="h", spec="(f32[3],) d/d args 0", device="cpu:cpu", order=(1, 2), cost=40 + k,
            choice=choice, times={choice: 2e-5}, search_s=1.0, function=name))
    (tmp_path / "cache" / "orders" / "broken.json").write_text("{")
    code, out, _ = run_cli(["cache", "list"], capsys)
    assert code == 0 and out.startswith(f"3 orders in {folder}")
    assert "f at (f32[3],) d/d args 0 on cpu:cpu: jax.jacrev, order of 40 multiplications" in out
    assert "g at" in out and "broken.json: damaged" in out
    bundle = str(tmp_path / "shipped.json")
    assert run_cli(["cache", "export", bundle], capsys)[:2] == (0, f"exported 2 orders from {folder} to {bundle}\n")
    assert run_cli(["cache", "clear"], capsys)[:2] == (0, f"removed 3 orders from {folder}\n")
    assert run_cli(["cache", "list"], capsys)[1] == f"0 orders in {folder}\n"
    code, out, _ = run_cli(["cache", "import", bundle], capsys)
    assert code == 0 and out.startswith(f"imported 2 orders from {bundle}")
    code, out, _ = run_cli(["cache", "import", bundle], capsys)
    assert code == 0 and out.startswith("imported 0 orders") and "2 not, an order at least as cheap" in out
    code, _, err = run_cli(["cache", "import", str(tmp_path / "missing.json")], capsys)
    assert code == 2 and "alphagrad cache: error:" in err and "missing.json" in err
    code, _, err = run_cli(["cache", "import", str(tmp_path / "cache" / "orders" / f"{0:032d}.json")], capsys)
    assert code == 2 and "not an alphagrad order bundle" in err
    monkeypatch.setenv("ALPHAGRAD_CACHE_DIR", "")
    code, _, err = run_cli(["cache", "list"], capsys)
    assert code == 2 and "the order cache is off" in err
