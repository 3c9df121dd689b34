"""What ``import alphagrad`` does: it imports nothing from the user's working directory
(only ``alphagrad`` is installed; ``hub``, ``train``, ``eval`` and ``data_gen`` are tools run
from the repository root), and tracing, costs and Jacobians load neither the agent's stack
(flax, optax, mctx) nor huggingface_hub."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import alphagrad


def run_python(code: str, cwd) -> dict:
    """Run ``python -c code`` in ``cwd`` (which Python puts first on sys.path) and return
    the JSON object it prints last."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # as a user's shell has it
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env={**env, "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_import_alphagrad_ignores_hub_eval_train_in_the_working_directory(tmp_path):
    marker = tmp_path / "executed.txt"
    trap = f"open({str(marker)!r}, 'a').write(__name__ + '\\n')\nraise RuntimeError('user file executed')\n"
    (tmp_path / "hub").mkdir()
    (tmp_path / "hub" / "__init__.py").write_text(trap)
    (tmp_path / "eval.py").write_text(trap)
    (tmp_path / "train").mkdir()
    (tmp_path / "train" / "__init__.py").write_text(trap)
    (tmp_path / "data_gen.py").write_text(trap)
    out = run_python("""
        import json, sys
        import alphagrad
        from alphagrad import from_pretrained          # the agent, which needs the hub code
        import alphagrad.hub, alphagrad.hub.card
        agent = from_pretrained()                      # the bundled model, through alphagrad.hub
        print(json.dumps({"hub": alphagrad.hub.__file__, "card": alphagrad.hub.card.__file__,
                          "loaded": sorted(m for m in ("hub", "eval", "train", "data_gen") if m in sys.modules),
                          "max_vertices": agent.max_vertices}))
    """, cwd=tmp_path)
    package = Path(alphagrad.__file__).parent
    assert Path(out["hub"]) == package / "hub" / "__init__.py" and Path(out["card"]) == package / "hub" / "card.py"
    assert out["loaded"] == [] and out["max_vertices"] > 0
    assert not marker.exists()


def test_only_alphagrad_is_installed(tmp_path):
    # From an empty directory (not the repository root), the tools' names are not importable.
    out = run_python("""
        import importlib.util, json
        print(json.dumps({n: importlib.util.find_spec(n) is not None
                          for n in ("alphagrad", "hub", "train", "eval", "data_gen")}))
    """, cwd=tmp_path)
    assert out == {"alphagrad": True, "hub": False, "train": False, "eval": False, "data_gen": False}


HEAVY = ("flax", "optax", "mctx", "huggingface_hub")
LAZY_CHECK = """
    import json, sys
    import jax.numpy as jnp
    import alphagrad

    def f(x, W):
        return jnp.tanh(W @ x).sum()

    args = (jnp.ones(3), jnp.ones((4, 3)))
    g = alphagrad.trace(f, *args)
    alphagrad.cost(g, "rev"), alphagrad.cost(g, alphagrad.baselines.markowitz(g))
    alphagrad.jacobian(f, "markowitz", argnums=(0, 1))(*args)
    before = sorted(m for m in ("flax", "optax", "mctx", "huggingface_hub") if m in sys.modules)
    alphagrad.from_pretrained                           # first use loads the agent
    after = sorted(m for m in ("flax", "optax", "mctx", "huggingface_hub") if m in sys.modules)
    print(json.dumps({"before": before, "after": after}))
"""


def test_trace_cost_jacobian_do_not_import_the_agents_stack(tmp_path):
    out = run_python(LAZY_CHECK, cwd=tmp_path)
    assert out["before"] == [], out
    assert out["after"] == ["flax", "huggingface_hub"]  # from_pretrained loads what the agent uses; no mctx, no optax


def test_lazy_names_are_the_real_ones():
    from alphagrad import agent

    assert alphagrad.from_pretrained is agent.from_pretrained
    assert alphagrad.Agent is agent.Agent and alphagrad.OrderResult is agent.OrderResult
    assert {"from_pretrained", "hub", "card", "agent"} <= set(dir(alphagrad))
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        alphagrad.nope  # noqa: B018


def test_the_errors_users_catch_are_exported():
    """The exceptions trace and jacobian raise on user input are public: ``__all__`` names
    them and ``from alphagrad import *`` gives the module's own classes."""
    import importlib

    from alphagrad import primitives

    trace = importlib.import_module("alphagrad.trace")  # the module (alphagrad.trace is the function)
    names: dict = {}
    exec("from alphagrad import *", names)
    assert names["TraceError"] is trace.TraceError
    assert names["ConcreteValuesNeeded"] is trace.ConcreteValuesNeeded
    assert names["UnsupportedPrimitiveError"] is primitives.UnsupportedPrimitiveError
    assert issubclass(alphagrad.ConcreteValuesNeeded, alphagrad.TraceError)
    assert all(hasattr(alphagrad, n) for n in alphagrad.__all__)
