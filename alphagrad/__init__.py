"""alphagrad: cheaper Jacobians for JAX functions by cross-country vertex elimination.

    graph = alphagrad.trace(f, *args)              # the computational graph
    alphagrad.cost(graph, order)                   # multiplications of an elimination order
    alphagrad.baselines.markowitz(graph)           # classic orders (fwd, rev, Markowitz, ...)
    alphagrad.jacobian(f, order)(*args)            # the Jacobian, computed in that order
    alphagrad.from_pretrained().order(f, *args)    # a learned order, in seconds
"""

from alphagrad import baselines, examples
from alphagrad.agent import from_pretrained
from alphagrad.engine import cost
from alphagrad.graph import Graph
from alphagrad.interpreter import jacobian
from alphagrad.primitives import UnsupportedPrimitiveError
from alphagrad.trace import TraceError, trace

__all__ = ["trace", "cost", "jacobian", "from_pretrained", "baselines", "examples", "Graph", "TraceError",
           "UnsupportedPrimitiveError"]
__version__ = "0.1.0"
