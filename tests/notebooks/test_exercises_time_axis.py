"""The time-axis chapter's checker: reversing padded sequences by hand."""

import jax.numpy as jnp

from rnnlib.exercises.time_axis import check_flip


def solution(xs, lengths):
    steps = jnp.arange(xs.shape[1])[None, :]
    source = jnp.where(steps < lengths[:, None], lengths[:, None] - 1 - steps, steps)
    return jnp.take_along_axis(xs, source[..., None], axis=1)


def test_the_solution_passes_and_padding_is_not_checked():
    assert check_flip(solution)

    def zero_padding(xs, lengths):
        valid = jnp.arange(xs.shape[1])[None, :, None] < lengths[:, None, None]
        return jnp.where(valid, solution(xs, lengths), 0.0)

    assert check_flip(zero_padding)


def test_flipping_the_whole_time_axis_is_told_it_moves_padding_to_the_front():
    feedback = check_flip(lambda xs, lengths: xs[:, ::-1])
    assert not feedback
    assert "starts with its padding: the whole time axis was reversed" in str(feedback)


def test_an_unreversed_sequence_is_named():
    feedback = check_flip(lambda xs, lengths: xs)
    assert not feedback
    assert "Sequence 0 (length 3) is not reversed at all" in str(feedback)


def test_a_wrong_shape_is_reported_with_both_shapes():
    feedback = check_flip(lambda xs, lengths: solution(xs, lengths)[..., 0])
    assert not feedback
    assert "the result has shape (4, 5); expected (4, 5, 2)" in str(feedback)
