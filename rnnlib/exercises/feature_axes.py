"""Checker for the feature-axes chapter's exercise: a ConvLSTM's carry shape from the rule.

The reference is ``flax.linen.ConvLSTMCell``'s own ``initialize_carry`` (flax is imported only
when the check runs).
"""

from __future__ import annotations

import jax

from rnnlib.exercises._check import Feedback, run_cases

CASES = [
    # (one step's input shape, kernel_size, features)
    ((2, 8, 8, 3), (3, 3), 6),
    ((4, 16, 2), (5,), 8),
    ((8, 8, 3), (3, 3), 4),  # no batch dims at all
    ((3, 2, 10, 12, 1), (3, 3), 5),  # two batch dims
    ((2, 4, 6, 6, 2), (3, 3, 3), 7),  # 3-D signal
]


def check_carry_shape(carry_shape) -> Feedback:
    """Check ``carry_shape(input_shape, kernel_size, features)`` for a ConvLSTM step.

    ``input_shape`` is one step's input, ``(*batch, *signal, channels)``; the answer is the
    shape of each of the carry's two arrays ``c`` and ``h``, as ``flax.linen.ConvLSTMCell(
    features, kernel_size).initialize_carry`` builds them.
    """
    cases = [(_name(*case), case) for case in CASES]
    return run_cases("check_carry_shape", carry_shape, cases, _judge)


def _name(input_shape, kernel_size, features) -> str:
    return f"input {input_shape}, kernel_size={kernel_size}, features={features}"


def _judge(got, input_shape, kernel_size, features) -> str | None:
    import flax.linen as nn

    cell = nn.ConvLSTMCell(features=features, kernel_size=kernel_size)
    want = tuple(cell.initialize_carry(jax.random.key(0), input_shape)[0].shape)
    try:
        got = tuple(int(n) for n in got)
    except (TypeError, ValueError):
        return f"return a tuple of ints; got {got!r}"
    if got != want:
        return f"got {got}; expected {want}{_diagnosis(got, want, input_shape, kernel_size)}"
    return None


def _diagnosis(got, want, input_shape, kernel_size) -> str:
    if got[:-1] == want[:-1] and got[-1] == input_shape[-1]:
        return " (the last axis is the cell's features, not the input's channels)"
    if len(got) == len(want) - len(kernel_size) and got[-1] == want[-1]:
        return " (the signal dims are kept: a ConvLSTM's carry has one value per position)"
    n_batch = len(input_shape) - len(kernel_size) - 1
    if got[-1] == want[-1] and len(got) != len(want):
        return (
            f" (there are {n_batch} batch dims here: everything before the last"
            f" {len(kernel_size) + 1} axes, which are the cell's feature axes)"
        )
    return ""
