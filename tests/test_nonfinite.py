"""Jacobians at inputs where a partial is inf or NaN (README, "Use": non-finite values).

``jax.jacrev`` pulls every cotangent through every partial, so a structural zero of the
Jacobian times an inf or NaN partial becomes NaN. alphagrad multiplies only the partials
an edge's structure holds: where the true derivative is structurally zero it gives an
exact 0 (plus whatever other paths contribute), and wherever jacrev is finite the two
agree. Index maps (slices, reverses, ...) are gathers and scatters, never products with
their 0/1 entries, so they do not spread NaN either.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import alphagrad

ORDERS = ("fwd", "rev", "markowitz")

# inf partial (log' at 0), NaN partial (NaN input), zero partial (log' at inf), NaN value
# with a finite partial (log of a negative number)
INPUTS = {
    "zero": [1.0, 0.0, 2.0, 3.0],
    "nan": [1.0, np.nan, 2.0, 3.0],
    "inf": [1.0, np.inf, 2.0, 3.0],
    "negative": [1.0, -1.0, 2.0, 3.0],
}


def log_plus_reversed(x):
    return jnp.log(x) * 2 + x[::-1]


def expected_log_plus_reversed(x):
    """d/dx of log(x) * 2 + x[::-1]: diag(2 / x) with exact zeros off the diagonal, plus
    the reversal."""
    n = len(x)
    e = np.zeros((n, n), np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        e[np.arange(n), np.arange(n)] = 2 * (np.float32(1) / x)
    e[np.arange(n), np.arange(n)[::-1]] += 1
    return e


def log_broadcast(x):
    return jnp.log(x)[:, None] * jnp.arange(1.0, 4.0)


def expected_log_broadcast(x):
    """d out[i, k] / d x[j] = (k + 1) / x[i] if i == j, exactly 0 otherwise."""
    n = len(x)
    e = np.zeros((n, 3, n), np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        for i in range(n):
            e[i, :, i] = np.arange(1.0, 4.0, dtype=np.float32) * (np.float32(1) / x[i])
    return e


@pytest.mark.parametrize("f, expected", [(log_plus_reversed, expected_log_plus_reversed),
                                         (log_broadcast, expected_log_broadcast)])
@pytest.mark.parametrize("point", sorted(INPUTS))
def test_structural_zeros_are_exact_and_finite_entries_match_jacrev(f, expected, point):
    x = np.asarray(INPUTS[point], np.float32)
    ref = np.asarray(jax.jacrev(f)(jnp.asarray(x)))
    want = expected(x)
    finite = np.isfinite(ref)
    # jacrev's NaNs are products of a structural zero with an inf/NaN partial: where the
    # true derivative is finite or structurally zero, jacrev has NaN at the bad inputs
    nan_from_zero_times_nonfinite = np.isnan(ref) & np.isfinite(want)
    assert nan_from_zero_times_nonfinite.any() == (point in ("zero", "nan"))
    for order in ORDERS:
        got = np.asarray(alphagrad.jacobian(f, order)(jnp.asarray(x)))
        np.testing.assert_allclose(got[finite], ref[finite], rtol=1e-6, err_msg=f"{order}: differs from jacrev")
        # exact zeros (and the other paths' finite values) where jacrev has NaN from 0 * inf
        np.testing.assert_array_equal(got[nan_from_zero_times_nonfinite], want[nan_from_zero_times_nonfinite],
                                      err_msg=order)
        # everywhere: the true Jacobian, inf and NaN only where a partial on the path is
        np.testing.assert_allclose(got, want, rtol=1e-6, err_msg=order)


def test_readme_example():
    x = jnp.array([1.0, 0.0, 2.0, 3.0])
    got = np.asarray(alphagrad.jacobian(log_plus_reversed, "rev")(x))
    ref = np.asarray(jax.jacrev(log_plus_reversed)(x))
    assert np.isnan(ref[[0, 2, 3], 1]).all() and ref[1, 1] == np.inf
    assert got[:, 1].tolist() == [0.0, np.inf, 1.0, 0.0]


def test_index_map_after_a_nonfinite_partial_matches_jacrev_where_finite():
    """A reverse carries its 0/1 index map as a value; composed with log' = inf at 0 it
    gives NaN where jacrev does, and agrees wherever jacrev is finite."""
    def f(x):
        return (jnp.log(x) * 2)[::-1]

    x = jnp.array([1.0, 0.0, 2.0, 3.0])
    ref = np.asarray(jax.jacrev(f)(x))
    finite = np.isfinite(ref)
    for order in ORDERS:
        got = np.asarray(alphagrad.jacobian(f, order)(x))
        np.testing.assert_allclose(got[finite], ref[finite], rtol=1e-6, err_msg=order)


def test_slice_times_nonfinite_partial_matches_jacrev_where_finite():
    """A slice is an index map: a gather, never a product with its 0/1 entries, so an inf
    partial does not turn into NaN where the slice has a zero (it did while slices
    carried their map as a value)."""
    def f(x):
        return jnp.log(x)[1:] * x[:-1]

    x = jnp.array([1.0, 0.0, 2.0, 3.0])
    ref = np.asarray(jax.jacrev(f)(x))
    finite = np.isfinite(ref)
    for order in ORDERS:
        got = np.asarray(alphagrad.jacobian(f, order)(x))
        np.testing.assert_allclose(got[finite], ref[finite], rtol=1e-6, err_msg=order)
