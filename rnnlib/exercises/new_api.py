"""Checker for the new-API chapter's exercise: broadcasting a learned start over the batch."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from rnnlib.exercises._check import Feedback, compare, run_cases


def _cases():
    key = jax.random.key(0)
    pair = (jax.random.normal(key, (4,)), jnp.arange(4.0))
    maps = (jnp.ones((8, 8, 6)), jnp.full((8, 8, 6), 2.0))
    return [
        ("an LSTM start (c, h), x (2, 5, 3)", (pair, (2, 5, 3), 1)),
        ("a GRU start h, x with two batch dims (3, 2, 7, 3)", (jnp.arange(4.0), (3, 2, 7, 3), 1)),
        ("a ConvLSTM start, x (2, 5, 8, 8, 3)", (maps, (2, 5, 8, 8, 3), 3)),
        ("no batch dims, x (5, 3)", (pair, (5, 3), 1)),
    ]


def check_broadcast_start(broadcast_start) -> Feedback:
    """Check ``broadcast_start(start, x_shape, num_feature_axes)``.

    ``start`` is a carry built for a step with no batch dims (a pytree of arrays), ``x_shape``
    the shape of a batch-major input ``(*batch, time, *signal, channels)``, and the cell has
    ``num_feature_axes`` trailing feature axes. Every leaf must come back broadcast to
    ``(*batch, *leaf.shape)``, the same structure as ``start``.
    """
    return run_cases("check_broadcast_start", broadcast_start, _cases(), _judge)


def _judge(got, start, x_shape, num_feature_axes) -> str | None:
    batch = x_shape[: len(x_shape) - num_feature_axes - 1]
    want = jax.tree_util.tree_map(lambda leaf: jnp.broadcast_to(leaf, batch + leaf.shape), start)
    return compare("the carry", got, want, explain=lambda: _diagnosis(got, want, batch, x_shape))


def _diagnosis(got, want, batch, x_shape) -> str:
    leaves, want_leaves = jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)
    if len(leaves) != len(want_leaves):
        return " (broadcast each leaf of the start on its own, e.g. with jax.tree_util.tree_map)"
    shape, want_shape = jnp.shape(leaves[0]), want_leaves[0].shape
    leaf = want_shape[len(batch) :]
    if shape == (x_shape[0],) + leaf and batch != (x_shape[0],):
        return (
            f" (the batch dims here are {batch}: everything before the time axis, which is"
            " not always one axis)"
        )
    if shape == tuple(x_shape[: len(batch) + 1]) + leaf:
        return " (the time axis was counted as a batch dim: the carry has no time axis)"
    return ""
