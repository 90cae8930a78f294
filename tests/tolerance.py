"""How far apart two correct computations of the same numbers may be, and one rule for it.

Two programs that compute the same mathematical values in a different order (hoisted
against in-loop projections, fused against per-gate matmuls, rnnlib against Flax, one
CPU's vector width or thread split against another's) round differently. The rule every
such test uses:

    |actual - expected| <= SLACK * eps * sqrt(terms) * scale      for every element

- ``eps`` is the machine epsilon of the compared leaf's dtype (float32 1.2e-7, bfloat16
  7.8e-3; a complex dtype uses its real part's).
- ``terms`` is how many rounded terms feed one element: the length of the longest sum
  in one step (a dense cell sums ``input features + features + 1`` terms, a ConvLSTM
  ``window * (input channels + features) + 1``) times the steps the element depends on,
  plus, for a gradient of parameters, the rows it sums (batch, time and signal
  positions). Rounding errors of mixed sign add up like a random walk, so their sum
  grows with ``sqrt(terms)``; ``terms * eps`` is the worst case, which real data do not
  reach. ``recurrent_terms`` counts them for an RNN.
- ``scale`` is the magnitude of the values: by default the largest ``|expected|`` of the
  leaf, since the terms summed into any element are products of values of about that
  size, so an element near zero may be off by as much as the largest one.
- ``SLACK`` = 4 covers the two sides each rounding (the difference of two errors) and
  the random walk's spread. It is a constant of the rule, not a per-test knob: on this
  suite the largest difference measured is well below it (see CONTRIBUTING, "Orders of
  arithmetic", for the XLA settings it was checked under).

A test whose two sides must be the same computation (the same program run twice, a
value copied through, a rewrite that must not touch the arithmetic) compares with
``assert_identical`` instead, and says why in a comment.
"""

from __future__ import annotations

import math
import os

import jax
import jax.numpy as jnp
import numpy as np

SLACK = 4.0

# Set to a file path to record every comparison's measured error in units of
# ``eps * sqrt(terms) * scale`` (one line per leaf): how the SLACK above was checked.
_RECORD = os.environ.get("RNNLIB_TOLERANCE_RECORD")


def epsilon(dtype) -> float:
    """Machine epsilon of ``dtype``; a complex dtype's is its real part's."""
    dtype = jnp.dtype(dtype)
    if jnp.issubdtype(dtype, jnp.complexfloating):
        dtype = jnp.finfo(dtype).dtype
    if not jnp.issubdtype(dtype, jnp.floating):
        return 0.0
    return float(jnp.finfo(dtype).eps)


def step_terms(cell, input_features: int) -> int:
    """The length of the longest sum in one step of ``cell`` (an rnnlib or Flax cell).

    A dense cell's gate sums ``input_features + features`` products and a bias; a
    convolutional cell's sums that over each position of its window.
    """
    window = math.prod(getattr(cell, "kernel_size", None) or ())
    return window * (input_features + cell.features) + 1


def recurrent_terms(cell, x_shape, *, steps: int, gradient: bool = False) -> int:
    """``terms`` for the outputs (or, with ``gradient``, the gradients) of an RNN of ``cell``.

    ``x_shape`` is the input's shape, ``(*batch, time, *signal, channels)`` or time-major;
    its last axis is the input width. A gradient also sums over every row of the input
    (all axes but the channels).
    """
    terms = step_terms(cell, x_shape[-1]) * steps
    if gradient:
        terms += math.prod(x_shape[:-1])
    return terms


def log_space_terms(steps: int, largest_log_b: float) -> float:
    """Extra ``terms`` for a scan in log space (``rnnlib.linear_rnn.log_combine``) against
    the same recurrence run in linear space.

    The scan adds logarithms and exponentiates their sums. A contribution ``exp(L)`` with
    ``L = log b_j + (log a_{j+1} + ... + log a_t)`` carries an absolute error of about
    ``eps * |L|`` in ``L``, so a relative error of ``eps * |L|`` after ``exp``: an error
    ``eps * exp(L) * |L|``. The decays' logs are negative, and ``s * exp(-s) <= 1/e``, so
    with ``K = 1 + max(0, largest log b_j)`` each contribution's error is at most about
    ``eps * K`` times its size: ``K**2`` terms per step, over ``steps`` steps.
    """
    return steps * (1.0 + max(0.0, float(largest_log_b))) ** 2


def _numpy(x):
    x = jnp.asarray(x)
    if x.dtype == jnp.bfloat16:
        x = x.astype(jnp.float32)
    return np.asarray(x)


def bound(expected, *, terms: int, scale: float | None = None, compute_dtype=None) -> float:
    """The largest difference the rule allows for one leaf ``expected``."""
    if scale is None:
        scale = float(np.max(np.abs(_numpy(expected)), initial=0.0))
    dtype = jnp.result_type(expected) if compute_dtype is None else compute_dtype
    return SLACK * epsilon(dtype) * math.sqrt(terms) * scale


def _leaves(actual, expected, label):
    """``(where, got, want)`` for each leaf; structures and shapes must match."""
    flat, treedef = jax.tree_util.tree_flatten_with_path(expected)
    got_leaves, got_def = jax.tree_util.tree_flatten(actual)
    assert got_def == treedef, f"{label}: structures differ:\n{got_def}\n{treedef}"
    for (path, want), got in zip(flat, got_leaves):
        where = f"{label}{jax.tree_util.keystr(path) or ' output'}"
        assert np.shape(got) == np.shape(want), (
            f"{where}: shape {np.shape(got)}, expected {np.shape(want)}"
        )
        yield where, got, want


def assert_close(
    actual, expected, *, terms: int, scale: float | None = None, compute_dtype=None, label=""
):
    """Every leaf of ``actual`` is within ``bound`` of the same leaf of ``expected``.

    Structures and shapes must match, and NaNs must sit in the same places. ``scale``
    replaces the leaf's own magnitude when the terms summed are known to be larger
    than the result (a sum that cancels, such as a scalar loss). ``compute_dtype`` is
    the dtype the computation rounds in when it is not the result's (a cell computing
    in bfloat16 returns a float32 carry): its epsilon is the one that counts.
    """
    for where, got, want in _leaves(actual, expected, label):
        got, want_np = _numpy(got), _numpy(want)
        nan = np.isnan(want_np)
        assert np.array_equal(np.isnan(got), nan), f"{where}: NaNs in other places"
        dtype = jnp.result_type(want) if compute_dtype is None else jnp.dtype(compute_dtype)
        magnitude = float(np.max(np.abs(want_np[~nan]), initial=0.0)) if scale is None else scale
        limit = bound(want, terms=terms, scale=magnitude, compute_dtype=dtype)
        error = np.where(nan, 0.0, np.abs(got - want_np))
        worst = float(np.max(error, initial=0.0))
        if _RECORD:
            unit = limit / SLACK
            test = os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0]
            with open(_RECORD, "a") as record:
                record.write(f"{worst / unit if unit else 0.0:.4g}\t{dtype}\t{test}{where}\n")
        assert worst <= limit, (
            f"{where}: differs by up to {worst:.3g} (at index "
            f"{tuple(map(int, np.unravel_index(np.argmax(error), error.shape)))}), more than "
            f"the {limit:.3g} "
            f"that rounding explains: {SLACK:g} * eps({dtype}) * sqrt({terms} terms) * "
            f"scale {magnitude:.3g}"
        )


def assert_identical(actual, expected, *, label=""):
    """Same structure, shapes, dtypes and values: for two runs of one computation."""
    for where, got, want in _leaves(actual, expected, label):
        assert jnp.result_type(got) == jnp.result_type(want), (
            f"{where}: dtype {jnp.result_type(got)}, expected {jnp.result_type(want)}"
        )
        np.testing.assert_array_equal(_numpy(got), _numpy(want), err_msg=where)
