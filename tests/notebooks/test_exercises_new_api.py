"""The new-API chapter's checker: a learned start broadcast over any batch dims."""

import jax
import jax.numpy as jnp

from rnnlib.exercises.new_api import check_broadcast_start


def solution(start, x_shape, num_feature_axes):
    batch = tuple(x_shape[: len(x_shape) - num_feature_axes - 1])
    return jax.tree_util.tree_map(lambda leaf: jnp.broadcast_to(leaf, batch + leaf.shape), start)


def test_the_solution_passes():
    feedback = check_broadcast_start(solution)
    assert feedback and "all 4 cases" in str(feedback)


def test_assuming_one_batch_dim_is_told_what_the_batch_dims_are():
    def first_axis_only(start, x_shape, num_feature_axes):
        return jax.tree_util.tree_map(
            lambda leaf: jnp.broadcast_to(leaf, (x_shape[0],) + leaf.shape), start
        )

    feedback = check_broadcast_start(first_axis_only)
    assert not feedback
    assert "the batch dims here are (3, 2)" in str(feedback)


def test_keeping_the_time_axis_is_named():
    def with_time(start, x_shape, num_feature_axes):
        leading = tuple(x_shape[: len(x_shape) - num_feature_axes])
        return jax.tree_util.tree_map(
            lambda leaf: jnp.broadcast_to(leaf, leading + leaf.shape), start
        )

    feedback = check_broadcast_start(with_time)
    assert not feedback
    assert "the time axis was counted as a batch dim" in str(feedback)


def test_broadcasting_the_pair_as_one_array_is_told_to_map_over_leaves():
    def one_array(start, x_shape, num_feature_axes):
        start = jnp.asarray(start)
        batch = tuple(x_shape[: len(x_shape) - num_feature_axes - 1])
        return jnp.broadcast_to(start, batch + start.shape)

    feedback = check_broadcast_start(one_array)
    assert not feedback
    assert "broadcast each leaf of the start on its own" in str(feedback)
