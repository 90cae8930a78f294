"""Checker for the time-axis chapter's exercise: reversing padded sequences by hand.

The reference is Flax's own ``flax.linen.recurrent.flip_sequences``, the function
``nn.RNN(reverse=True)`` calls.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from rnnlib.exercises._check import Feedback, compare, run_cases


def _cases():
    xs = jnp.arange(1, 1 + 4 * 5 * 2, dtype=jnp.float32).reshape(4, 5, 2)
    longer = jax.random.normal(jax.random.key(0), (3, 9, 1))
    return [
        ("lengths [3, 5, 1, 4]", (xs, jnp.array([3, 5, 1, 4]))),
        ("every sequence full", (xs[:2], jnp.array([5, 5]))),
        ("an empty sequence, lengths [0, 2]", (xs[:2], jnp.array([0, 2]))),
        ("a longer batch", (longer, jnp.array([9, 4, 7]))),
    ]


def check_flip(my_flip) -> Feedback:
    """Check ``my_flip(xs, lengths)`` on batch-major ``xs`` shaped ``(batch, time, channels)``.

    Sequence ``b`` must have its first ``lengths[b]`` steps reversed in place. What the attempt
    puts at padded steps (``t >= lengths[b]``) is not checked: nothing correct reads them.
    """
    return run_cases("check_flip", my_flip, _cases(), _judge)


def _judge(got, xs, lengths) -> str | None:
    from flax.linen.recurrent import flip_sequences

    want = flip_sequences(xs, lengths, num_batch_dims=1, time_major=False)
    if np.shape(got) != want.shape:
        return f"the result has shape {np.shape(got)}; expected {want.shape}"
    valid = (jnp.arange(xs.shape[1])[None, :] < lengths[:, None])[..., None]
    got_valid, want_valid = jnp.where(valid, got, 0), jnp.where(valid, want, 0)
    return compare(
        "the valid steps",
        got_valid,
        want_valid,
        explain=lambda: _diagnosis(xs, lengths, got, valid),
    )


def _diagnosis(xs, lengths, got, valid) -> str:
    for b, length in enumerate(np.asarray(lengths)):
        length = int(length)
        if length == 0:
            continue
        mine = np.asarray(got[b, :length])
        if np.array_equal(mine, np.asarray(xs[b, ::-1][:length])) and length < xs.shape[1]:
            return (
                f". Sequence {b} (length {length}) now starts with its padding: the whole time"
                " axis was reversed. Reverse only the first lengths[b] steps"
            )
        if length > 1 and np.array_equal(mine, np.asarray(xs[b, :length])):
            return f". Sequence {b} (length {length}) is not reversed at all"
    return ""
