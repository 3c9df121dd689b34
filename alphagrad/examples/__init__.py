"""The benchmark zoo: real, recognisable JAX functions to eliminate.

Each entry is an :class:`Example` with a plain JAX function ``fn`` and example
arguments ``args`` (a tuple, passed as ``fn(*args)``). ``all_examples()`` lists
every entry; ``get(name)`` returns one.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable


@dataclasses.dataclass(frozen=True)
class Example:
    """One benchmark function.

    Attributes:
      name: unique name, e.g. ``"RoeFlux_1d"``.
      fn: a plain JAX function, called as ``fn(*args)``.
      args: example arguments (tuple of arrays or pytrees of arrays).
      family: the field or group it belongs to (e.g. ``"published"``).
      description: one or two sentences: what it computes and its source.
    """

    name: str
    fn: Callable[..., Any]
    args: tuple
    family: str
    description: str


def all_examples() -> list[Example]:
    """Every example of the zoo, in a fixed order: the published tasks, the rest of the
    zoo, then the real-sized programs (family ``large_real``)."""
    from alphagrad.examples import published, real, zoo

    return list(published.EXAMPLES) + list(zoo.EXAMPLES) + list(real.EXAMPLES)


def get(name: str) -> Example:
    """The example called ``name``; KeyError lists the known names."""
    examples = {e.name: e for e in all_examples()}
    if name not in examples:
        raise KeyError(f"no example named {name!r}; known: {sorted(examples)}")
    return examples[name]


def chain(fn: Callable, copies: int, carry: int | None = None) -> Callable:
    """``fn`` iterated ``copies`` times (a graph ``copies`` times larger with the same
    local structure, e.g. ``trace(chain(get("RoeFlux_3d").fn, 3), *args)``: 459
    intermediates): each float argument of the next copy is the previous
    argument plus 0.1 * tanh of an output of the same shape (round robin), or of the sum of
    the outputs' means where no output has its shape. The last copy's outputs are returned.
    With ``carry``, only the first ``carry`` float arguments are fed back this way; the
    others reach every copy unchanged, as the weights of a recurrent cell or the
    parameters of a time-stepping solver do."""
    import jax
    import jax.numpy as jnp

    def is_float(x):
        return jnp.issubdtype(jnp.result_type(x), jnp.floating)

    def chained(*args):
        leaves, treedef = jax.tree_util.tree_flatten(args)
        for t in range(copies):
            out = fn(*jax.tree_util.tree_unflatten(treedef, leaves))
            if t == copies - 1:
                return out
            outs = [o for o in jax.tree_util.tree_leaves(out) if is_float(o)]
            if not outs:
                raise ValueError("the function has no float output to feed back")
            total = sum(jnp.mean(o) for o in outs)
            new, floats = [], 0
            for j, x in enumerate(leaves):
                if not is_float(x) or (carry is not None and floats >= carry):
                    new.append(x)
                    continue
                floats += 1
                same = [o for o in outs if jnp.shape(o) == jnp.shape(x)]
                feed = same[j % len(same)] if same else total
                new.append(x + (0.1 * jnp.tanh(feed)).astype(jnp.result_type(x)))
            leaves = new

    return chained
