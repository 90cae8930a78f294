"""Checker for the Bidirectional chapter's exercise: the backward direction by hand.

The reader's attempt gets a forward ``flax.linen.RNN`` bound to its parameters, and is
compared with ``nn.RNN(cell, reverse=True, keep_order=True)`` on the same parameters.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from rnnlib.exercises._check import Feedback, compare, run_cases


def _cases():
    # NumPy draws the inputs: a jax.random draw would compile a program for its shape.
    xs = np.random.default_rng(0).standard_normal((3, 6, 2), dtype=np.float32)
    return [
        ("lengths [6, 4, 1]", xs, np.array([6, 4, 1])),
        ("no padding", xs[:2], np.array([6, 6])),
        ("an empty sequence, lengths [0, 3]", xs[1:], np.array([0, 3])),
    ], jax.random.key(0)


def check_backward(backward_by_hand) -> Feedback:
    """Check ``backward_by_hand(run, xs, lengths)`` against a backward ``nn.RNN``.

    ``run(xs, lengths)`` runs an ordinary, left-to-right ``nn.RNN`` (outputs in input order).
    The attempt must return what ``nn.RNN(cell, reverse=True, keep_order=True)`` returns with
    the same parameters and ``seq_lengths=lengths``: at every valid step ``t`` of sequence
    ``b``, the output after reading steps ``lengths[b] - 1`` down to ``t``. Padded steps are
    not checked.
    """
    import flax.linen as nn

    cases, key = _cases()
    cell = nn.GRUCell(features=4)
    params = nn.RNN(cell).init(key, cases[0][1])
    forward = nn.RNN(cell)
    reference = nn.RNN(cell, reverse=True, keep_order=True)

    # Compiled once per input shape, so the attempt's calls and the diagnosis's reuse it.
    @jax.jit
    def run(xs, lengths):
        return forward.apply(params, xs, seq_lengths=lengths)

    backward = jax.jit(lambda xs, lengths: reference.apply(params, xs, seq_lengths=lengths))
    cases = [(name, (run, xs, lengths), backward(xs, lengths)) for name, xs, lengths in cases]
    return run_cases("check_backward", backward_by_hand, cases, _judge)


def _judge(got, run, xs, lengths, want) -> str | None:
    if np.shape(got) != want.shape:
        return f"the outputs have shape {np.shape(got)}; expected {want.shape}"
    valid = (jnp.arange(xs.shape[1])[None, :] < lengths[:, None])[..., None]
    return compare(
        "the outputs at valid steps",
        jnp.where(valid, got, 0),
        jnp.where(valid, want, 0),
        explain=lambda: _diagnosis(got, want, run, xs, lengths, valid),
    )


def _diagnosis(got, want, run, xs, lengths, valid) -> str:
    from flax.linen.recurrent import flip_sequences

    def same(a, b):
        return compare("", jnp.where(valid, a, 0), jnp.where(valid, b, 0)) is None

    if same(got, flip_sequences(want, lengths, num_batch_dims=1, time_major=False)):
        return (
            ". These are the right outputs in processing order (last step first): flip them"
            " back with the same lengths, so that index t belongs to input step t"
        )
    whole = jnp.flip(run(jnp.flip(xs, 1), lengths), 1)
    if same(got, whole):
        return (
            ". The whole time axis was reversed, so each padded sequence was read padding"
            " first: reverse only each sequence's valid steps (flip_sequences with lengths)"
        )
    return ""
