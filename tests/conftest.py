"""Test settings: XLA's optimisations are turned down, since the tests check results, not
speed (benchmarks live in eval/), and compile time dominates the suite otherwise."""

import jax

jax.config.update("jax_disable_most_optimizations", True)
