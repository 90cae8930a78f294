"""``flip_sequences``: reverse each sequence in time while its padding stays at the end."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np


def flip_sequences(inputs, seq_lengths, num_batch_dims: int, time_major: bool):
    """``inputs`` with the first ``seq_lengths[b]`` steps of every sequence ``b`` reversed.

    A plain ``jnp.flip`` of a padded batch would move the padding to the front, so a backward RNN
    would read padding before the real data. Here the valid steps are reversed in place and the
    padding block stays at the end (itself reversed, which no correct computation looks at)::

        inputs       [[1, 2, 3, 0, 0],        seq_lengths [3, 5]
                      [1, 2, 3, 4, 5]]
        flipped      [[3, 2, 1, 0, 0],
                      [5, 4, 3, 2, 1]]

    Arguments:
        inputs: ``(*batch, time, *signal, channels)``, or ``(time, *batch, *signal, channels)`` when
            ``time_major``.
        seq_lengths: ints shaped ``(*batch)``, each in ``[0, time]``; ``None`` flips each whole.
        num_batch_dims: ``len(batch)``.
        time_major: whether time is the first axis.
    """
    time_axis = 0 if time_major else num_batch_dims
    if inputs.ndim <= time_axis:
        raise ValueError(
            f"flip_sequences expects inputs with a time axis at position {time_axis} "
            f"({num_batch_dims} batch dims, time_major={time_major}); got shape {inputs.shape}."
        )
    if seq_lengths is None:
        return jnp.flip(inputs, axis=time_axis)
    batch = inputs.shape[1 : 1 + num_batch_dims] if time_major else inputs.shape[:num_batch_dims]
    if tuple(np.shape(seq_lengths)) != tuple(batch):
        raise ValueError(
            f"flip_sequences expects seq_lengths shaped like the batch dims {tuple(batch)} of "
            f"inputs {inputs.shape}; got seq_lengths of shape {tuple(np.shape(seq_lengths))}."
        )
    steps = inputs.shape[time_axis]
    if steps == 0:
        return inputs
    lengths = jnp.expand_dims(jnp.asarray(seq_lengths), time_axis)
    batch_axes = tuple(i for i in range(num_batch_dims + 1) if i != time_axis)
    t = jnp.expand_dims(jnp.arange(steps), batch_axes)
    # Step t reads L - 1 - t while t < L; padding steps read T - 1 - t + L (reversed in place).
    source = (lengths - 1 - t) % steps
    source = source.reshape(source.shape + (1,) * (inputs.ndim - source.ndim))
    return jnp.take_along_axis(inputs, source, axis=time_axis)
