"""The training chapter's checker: a mean over valid steps, told apart from its usual mistakes."""

import jax.numpy as jnp

from rnnlib.exercises.training import check_masked_mean


def solution(per_step, mask):
    return jnp.sum(jnp.where(mask, per_step, 0.0)) / jnp.sum(mask)


def test_the_solution_passes():
    feedback = check_masked_mean(solution)
    assert feedback and "all 3 cases" in str(feedback)


def test_dividing_by_batch_times_time_is_named():
    feedback = check_masked_mean(lambda p, mask: jnp.mean(p * mask))
    assert not feedback
    assert "divided by batch * time, so padding still counts" in str(feedback)


def test_a_mean_of_per_sequence_means_is_named():
    def per_sequence(p, mask):
        return jnp.mean(jnp.sum(p * mask, axis=1) / jnp.sum(mask, axis=1))

    feedback = check_masked_mean(per_sequence)
    assert not feedback
    assert "a short sequence's steps weigh more" in str(feedback)


def test_ignoring_the_mask_is_named():
    feedback = check_masked_mean(lambda p, mask: jnp.mean(p))
    assert not feedback
    assert "the mean over every step, padding included" in str(feedback)


def test_returning_an_array_instead_of_a_number_is_reported():
    feedback = check_masked_mean(lambda p, mask: p * mask)
    assert not feedback
    assert "has shape (3, 6); expected ()" in str(feedback)


def test_returning_no_number_at_all_is_reported_not_raised():
    feedback = check_masked_mean(lambda p, mask: None)
    assert not feedback
    assert "the mean should be one number; got NoneType" in str(feedback)
    assert "(return one number: the mean over every valid step" in str(feedback)
