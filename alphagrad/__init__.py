"""alphagrad: cheaper Jacobians for JAX functions by cross-country vertex elimination.

    graph = alphagrad.trace(f, *args)              # the computational graph
    alphagrad.cost(graph, order)                   # multiplications of an elimination order
    alphagrad.baselines.markowitz(graph)           # classic orders (fwd, rev, Markowitz, ...)
    alphagrad.jacobian(f, order)(*args)            # the Jacobian, computed in that order
    alphagrad.jacobian(f)(*args)                   # auto: the fastest of jacfwd, jacrev and orders found
    alphagrad.from_pretrained().order(f, *args)    # a learned order, in seconds

Tracing, costs and Jacobians need only JAX and numba: the pretrained agent's stack (flax,
optax, mctx, huggingface_hub) is imported on first use of ``from_pretrained`` (or of the
``agent``, ``hub``, ``network`` and ``search`` modules), not by ``import alphagrad``.
"""

import importlib

from alphagrad import baselines, examples
from alphagrad.scoring import cost
from alphagrad.graph import Graph
from alphagrad.autotune import jacobian
from alphagrad.primitives import UnsupportedPrimitiveError
from alphagrad.trace import ConcreteValuesNeeded, TraceError, trace

__all__ = ["trace", "cost", "jacobian", "from_pretrained", "baselines", "examples", "Graph", "TraceError",
           "ConcreteValuesNeeded", "UnsupportedPrimitiveError"]
__version__ = "0.2.0"

#: Names loaded on first access: attribute -> (module, attribute in it or None for the module).
_LAZY = {
    "from_pretrained": ("alphagrad.agent", "from_pretrained"),
    "Agent": ("alphagrad.agent", "Agent"),
    "OrderResult": ("alphagrad.agent", "OrderResult"),
    "agent": ("alphagrad.agent", None),
    "card": ("alphagrad.hub.card", None),
    "hub": ("alphagrad.hub", None),
    "network": ("alphagrad.network", None),
    "search": ("alphagrad.search", None),
}


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'alphagrad' has no attribute {name!r}")
    module_name, attr = _LAZY[name]
    module = importlib.import_module(module_name)
    value = module if attr is None else getattr(module, attr)
    globals()[name] = value  # later accesses skip __getattr__
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
