"""Argument checks shared by every public entry point, and the errors they raise.

Each returns the value it checked (converted where that is safe: a numpy int to an int,
a budget to a float) or raises a TypeError or ValueError that names the argument, what it
must be and what it got, so that a bad argument fails at the door rather than deep in a
compiled kernel.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from alphagrad.graph import Graph


def check_graph(graph, where: str = "this function", example: str | None = None) -> Graph:
    """Returns ``graph`` if it is a :class:`~alphagrad.graph.Graph`; a function (or
    anything else) gets told to trace it first, with ``example`` showing how (default:
    ``where(alphagrad.trace(f, *args))``)."""
    if isinstance(graph, Graph):
        return graph
    example = example or f"{where}(alphagrad.trace(f, *args))"
    got = "a function" if callable(graph) else f"a {type(graph).__name__}"
    raise TypeError(f"{where} takes a traced graph, not {got}: trace it first: {example}")


def check_budget(value, name: str = "budget_s", allow_none: bool = False):
    """Returns ``value`` as a float if it is a finite number of seconds > 0 (or None when
    ``allow_none``); raises TypeError for a non-number (bools included), ValueError for
    NaN, infinities, zero and negative budgets."""
    if value is None and allow_none:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} is a number of seconds (a finite float > 0), got {value!r} "
                        f"of type {type(value).__name__}")
    value = float(value)
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a finite number of seconds > 0, got {value!r}")
    return value


def check_int(value, name: str, minimum: int = 0) -> int:
    """Returns ``value`` as an int if it is an integer (Python or numpy, not a bool or a
    float) of at least ``minimum``; raises TypeError or ValueError saying so."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {value!r} of type {type(value).__name__}")
    value = int(value)
    if value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value}")
    return value


def check_batch(batch, name: str = "batch") -> int | None:
    """Returns ``batch`` (None, or an int >= 1: the ``jax.vmap`` batch size a function will
    run at); raises TypeError for a non-int (a float, NaN, a bool) and ValueError for
    ``batch <= 0``, saying what it is for."""
    if batch is None:
        return None
    what = f"{name} is the jax.vmap batch size the Jacobian will run at (an int >= 1, or None)"
    if isinstance(batch, (bool, np.bool_)) or not isinstance(batch, numbers.Integral):
        raise TypeError(f"{what}, got {batch!r} of type {type(batch).__name__}")
    if batch < 1:
        raise ValueError(f"{what}, got {int(batch)}")
    return int(batch)


def check_seed(seed, name: str = "seed") -> int:
    """Returns ``seed`` if it is an int in ``[0, 2**32)`` (Python or numpy, not a bool or
    a float): the range every random generator here uses without aliasing."""
    seed = check_int(seed, name, 0)
    if seed >= 2**32:
        raise ValueError(f"{name} must be an int in [0, 2**32), got {seed}")
    return seed
