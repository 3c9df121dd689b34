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
