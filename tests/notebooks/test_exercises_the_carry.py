"""The carry chapter's checker: the solution passes, plausible wrong loops are told what is wrong."""

import jax
import jax.numpy as jnp

from rnnlib.exercises.the_carry import check_scan


def _stack(ys):
    return jax.tree_util.tree_map(lambda *leaves: jnp.stack(leaves), *ys)


def solution(step, carry, xs):
    ys = []
    for x in xs:
        carry, y = step(carry, x)
        ys.append(y)
    return carry, _stack(ys)


def test_the_solution_passes():
    feedback = check_scan(solution)
    assert feedback and "all 4 cases match" in str(feedback)


def test_a_loop_that_never_updates_the_carry_is_told_so():
    def stale(step, carry, xs):
        ys = []
        for x in xs:
            _, y = step(carry, x)
            ys.append(y)
        return carry, _stack(ys)

    feedback = check_scan(stale)
    assert not feedback
    assert "final carry" in str(feedback) and "equals the carry you started from" in str(feedback)
    # every case is judged, the flax.linen cell's step included
    assert len(feedback.problems) == 4
    assert "case 'flax.linen's nn.LSTMCell(2).apply, carry (c, h)'" in str(feedback)


def test_outputs_stacked_batch_first_are_told_time_goes_first():
    def batch_first(step, carry, xs):
        carry, ys = solution(step, carry, xs)
        return carry, jax.tree_util.tree_map(lambda a: jnp.swapaxes(a, 0, 1), ys)

    feedback = check_scan(batch_first)
    assert not feedback
    assert "has shape (2, 5, 4); expected (5, 2, 4)" in str(feedback)
    assert "time goes first" in str(feedback)


def test_unstacked_outputs_are_told_to_stack_each_leaf():
    def unstacked(step, carry, xs):
        ys = []
        for x in xs:
            carry, y = step(carry, x)
            ys.append(y)
        return carry, ys

    feedback = check_scan(unstacked)
    assert not feedback
    assert "stack each output leaf" in str(feedback)


def test_a_loop_that_raises_is_reported_with_the_error():
    def unfinished(step, carry, xs):
        raise NotImplementedError("write the loop")

    feedback = check_scan(unfinished)
    assert "raised NotImplementedError: write the loop" in str(feedback)
    assert not feedback
