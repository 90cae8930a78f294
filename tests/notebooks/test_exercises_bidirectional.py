"""The Bidirectional chapter's checker: the backward direction written by hand."""

import jax.numpy as jnp
from flax.linen.recurrent import flip_sequences

from rnnlib.exercises.bidirectional import check_backward


def _flip(a, lengths):
    return flip_sequences(a, lengths, num_batch_dims=1, time_major=False)


def solution(run, xs, lengths):
    return _flip(run(_flip(xs, lengths), lengths), lengths)


def test_the_solution_passes():
    feedback = check_backward(solution)
    assert feedback and "all 3 cases" in str(feedback)


def test_outputs_left_in_processing_order_are_told_to_flip_back():
    feedback = check_backward(lambda run, xs, lengths: run(_flip(xs, lengths), lengths))
    assert not feedback
    assert "in processing order (last step first): flip them back" in str(feedback)


def test_reversing_the_whole_time_axis_is_told_it_reads_padding_first():
    def whole(run, xs, lengths):
        return jnp.flip(run(jnp.flip(xs, 1), lengths), 1)

    feedback = check_backward(whole)
    assert not feedback
    assert "read padding first" in str(feedback)
    # Without padding the whole-axis flip is right, so only the padded cases are reported.
    assert "case 'no padding'" not in str(feedback)


def test_the_forward_outputs_are_not_the_backward_ones():
    feedback = check_backward(lambda run, xs, lengths: run(xs, lengths))
    assert not feedback
    assert "the outputs at valid steps" in str(feedback)
