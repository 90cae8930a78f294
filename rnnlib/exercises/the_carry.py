"""Checker for the carry chapter's exercise: a scan written as a Python loop.

One of its steps is a ``flax.linen`` cell's ``apply``, so the check needs flax, as the chapter
does; flax is imported only when the check runs.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from rnnlib.exercises._check import Feedback, compare, run_cases


def _elman(carry, x):
    h = jnp.tanh(x @ jnp.full((3, 4), 0.3) + carry @ jnp.eye(4) * 0.5)
    return h, h


def _lstm_like(carry, x):
    c, h = carry
    c = 0.9 * c + jnp.tanh(x.sum(-1, keepdims=True) + h)
    h = jnp.tanh(c)
    return (c, h), h


def _two_outputs(carry, x):
    total = carry + x
    return total, (total, x.sum(-1))


def _flax_lstm(xs):
    """A ``flax.linen`` LSTMCell's ``apply`` as a step, and its initial carry."""
    import flax.linen as nn

    cell = nn.LSTMCell(features=2)
    carry = cell.initialize_carry(jax.random.key(1), xs.shape[1:])
    variables = cell.init(jax.random.key(2), carry, xs[0])

    def step(carry, x):
        return cell.apply(variables, carry, x)

    return step, carry


def _cases():
    key = jax.random.key(0)
    xs = jax.random.normal(key, (5, 2, 3))  # (time, batch, channels): time first, like scan
    return [
        ("an Elman step, carry (2, 4)", (_elman, jnp.zeros((2, 4)), xs)),
        (
            "an LSTM-like step, carry (c, h)",
            (_lstm_like, (jnp.ones((2, 1)), jnp.zeros((2, 1))), xs),
        ),
        ("a step with two outputs", (_two_outputs, jnp.zeros((2, 3)), xs[:4])),
        ("flax.linen's nn.LSTMCell(2).apply, carry (c, h)", (*_flax_lstm(xs), xs)),
    ]


def check_scan(my_scan) -> Feedback:
    """Check ``my_scan(step, carry, xs)`` against ``jax.lax.scan(step, carry, xs)``.

    It must return ``(final_carry, ys)``, with every leaf of the step's outputs stacked along
    a new leading time axis, as ``lax.scan`` does.
    """
    return run_cases("check_scan", my_scan, _cases(), _judge)


def _judge(result, step, carry, xs) -> str | None:
    want_carry, want_ys = jax.lax.scan(step, carry, xs)
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        return f"return a pair (final_carry, ys); got {type(result).__name__}"
    got_carry, got_ys = result
    problem = compare("the final carry", got_carry, want_carry)
    if problem and compare("", got_carry, carry) is None:
        problem += " (it equals the carry you started from: assign the step's new carry)"
    if problem is None:
        problem = compare("ys", got_ys, want_ys)
        if problem and isinstance(got_ys, list) and isinstance(want_ys, tuple):
            problem += (
                " (ys is a list of per-step outputs: stack each output leaf along a"
                " new first axis, e.g. with jax.tree.map(lambda *a: jnp.stack(a), *ys))"
            )
        elif problem and _is_transposed(got_ys, want_ys):
            problem += " (the outputs are stacked on the wrong axis: time goes first)"
    return problem


def _is_transposed(got, want) -> bool:
    try:
        got, want = np.asarray(got), np.asarray(want)
    except Exception:  # not an array at all: nothing to say about its axes
        return False
    return got.shape != want.shape and sorted(got.shape) == sorted(want.shape)
