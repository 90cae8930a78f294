"""Checker for the old-API chapter's exercise: porting an old initialize_carry call.

The old call runs through ``rnnlib.legacy`` (rnnlib's reproduction of Flax 0.6.11), the new one
through current ``flax.linen``: the reader ports to Flax.
"""

from __future__ import annotations

import warnings

import jax

from rnnlib import legacy
from rnnlib.exercises._check import Feedback, attempt, run_cases

# (batch_dims, size, the input's channels, kernel_size or None for a dense cell)
CASES = [
    ((16,), 64, 3, None),
    ((4, 2), 32, 10, None),
    ((2,), (8, 8, 6), 3, (3, 3)),
    ((5,), (16, 8), 2, (5,)),
]


def check_port(input_shape_for) -> Feedback:
    """Check ``input_shape_for(batch_dims, size, channels, kernel_size)``.

    The old call was ``Cell.initialize_carry(rng, batch_dims, size)``; the attempt returns
    the ``input_shape`` that the new ``cell.initialize_carry(rng, input_shape)`` needs to build
    the same carry: one step's input, ``(*batch, *signal, channels)``. ``kernel_size`` is None
    for a dense cell (``size`` is then the width) and a tuple for a ConvLSTM (``size`` is then
    ``(*signal, features)``).
    """
    cases = [(_name(*case), case) for case in CASES]
    return run_cases("check_port", input_shape_for, cases, _judge)


def _name(batch_dims, size, channels, kernel_size) -> str:
    return f"batch_dims={batch_dims}, size={size}, channels={channels}, kernel_size={kernel_size}"


def _judge(got, batch_dims, size, channels, kernel_size) -> str | None:
    signal = () if kernel_size is None else tuple(size[:-1])
    want = tuple(batch_dims) + signal + (channels,)
    try:
        got = tuple(int(n) for n in got)
    except (TypeError, ValueError):
        return f"return a tuple of ints; got {got!r}"
    problem = _carry_problem(got, batch_dims, size, kernel_size)
    if problem:
        return problem
    if got != want:
        return f"got {got}; expected {want}{_diagnosis(got, want, size)}"
    return None


def _carry_problem(input_shape, batch_dims, size, kernel_size) -> str | None:
    """Build the carry both ways, old call and new, and compare the shapes."""
    key = jax.random.key(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        old_cell = legacy.LSTMCell if kernel_size is None else legacy.ConvLSTMCell
        old = old_cell.initialize_carry(key, batch_dims, size)[0].shape
    import flax.linen as nn

    if kernel_size is None:
        cell = nn.LSTMCell(features=size)
    else:
        cell = nn.ConvLSTMCell(features=size[-1], kernel_size=kernel_size)
    new, error = attempt(cell.initialize_carry, key, input_shape)
    if error:
        return f"cell.initialize_carry(rng, {input_shape}) fails: {error}"
    if new[0].shape != old:
        return (
            f"cell.initialize_carry(rng, {input_shape}) builds a carry of shape"
            f" {new[0].shape}; the old call built {old}"
            + (
                " (a ConvLSTM's step input keeps its signal dims, the first entries of the old size)"
                if len(new[0].shape) < len(old)
                else ""
            )
        )
    return None


def _diagnosis(got, want, size) -> str:
    width = size if isinstance(size, int) else size[-1]
    if got[:-1] == want[:-1] and got[-1] == width:
        return (
            ". That builds the right carry, because the carry ignores the last axis, but"
            " input_shape is one step's input: its last axis is the input's channels, not the"
            " carry's width (which is the cell's features now)"
        )
    return ""
