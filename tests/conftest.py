"""Test settings: XLA's optimisations are turned down, since the tests check results, not
speed (benchmarks live in eval/), and compile time dominates the suite otherwise.

The flag is read when a function is compiled and is not part of JAX's compilation cache
keys, so it is never flipped inside this process. What users run, JAX's default XLA
settings, is checked in a separate process: every zoo entry's Jacobian
(tests/test_zoo.py::test_every_jacobian_under_default_xla_settings)."""

import os

import jax

jax.config.update("jax_disable_most_optimizations", True)

# Rule tables stay in memory (the commands would keep them in ~/.cache/alphagrad); the
# disk cache is tested on its own, in temporary directories.
os.environ.setdefault("ALPHAGRAD_CACHE_DIR", "")

# Property tests draw the same examples on every run, so that CI passes or fails on the code,
# not on the draw (run hypothesis with another profile to explore new examples).
from hypothesis import settings  # noqa: E402

settings.register_profile("alphagrad", derandomize=True)
settings.load_profile("alphagrad")
