"""Test settings: XLA's optimisations are turned down, since the tests check results, not
speed (benchmarks live in eval/), and compile time dominates the suite otherwise.

The flag is read when a function is compiled and is not part of JAX's compilation cache
keys, so it is never flipped inside this process. What users run, JAX's default XLA
settings, is checked in a separate process: every zoo entry's Jacobian
(tests/test_zoo.py::test_every_jacobian_under_default_xla_settings)."""

import jax

jax.config.update("jax_disable_most_optimizations", True)
