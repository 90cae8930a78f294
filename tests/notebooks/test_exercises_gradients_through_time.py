"""The checkers of "Gradients through time": the solutions pass, plausible mistakes are named."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rnnlib.exercises.gradients_through_time import (
    check_checkpointed_rnn,
    check_gradient_norms,
)


def _jacobian_norms(rnn, variables, xs, output):
    def one(x):  # (time, channels)
        jacobian = jax.jacrev(lambda x: output(rnn.apply(variables, x)))(x)
        return jnp.sqrt(jnp.sum(jacobian.reshape(-1, *x.shape) ** 2, axis=(0, 2)))

    return jax.vmap(one)(xs)


def norms_solution(rnn, variables, xs):
    return _jacobian_norms(rnn, variables, xs, lambda ys: ys[-1])


def _scan(cell, variables, xs, wrap_step=lambda step: step):
    carry = cell.initialize_carry(jax.random.key(0), xs.shape[1:])

    def step(carry, x):
        return cell.apply(variables, carry, x)

    return jax.lax.scan(wrap_step(step), carry, xs)


def checkpointed_solution(cell, variables, xs):
    return _scan(cell, variables, xs, jax.checkpoint)[1]


def test_gradient_norms_solution_passes():
    feedback = check_gradient_norms(norms_solution)
    assert feedback, str(feedback)
    assert str(feedback).startswith("✔ check_gradient_norms: all 2 cases")


def test_gradient_norms_judges_an_attempt_that_jit_cannot_trace():
    # The checker compiles the attempt; one that converts its arrays with NumPy cannot be
    # traced, and is run as it is instead.
    feedback = check_gradient_norms(lambda rnn, v, xs: np.asarray(norms_solution(rnn, v, xs)))
    assert feedback, str(feedback)


@pytest.mark.parametrize(
    "wrong, message",
    [
        (lambda rnn, v, xs: norms_solution(rnn, v, xs)[:, ::-1], "reverse order"),
        (lambda rnn, v, xs: norms_solution(rnn, v, xs) ** 2, "squared norms"),
        (
            lambda rnn, v, xs: _jacobian_norms(rnn, v, xs, lambda ys: jnp.sum(ys[-1])),
            "gradient of sum(h_T)",
        ),
        (
            lambda rnn, v, xs: _jacobian_norms(rnn, v, xs, lambda ys: ys[0]),
            "first output ys[0]",
        ),
        (lambda rnn, v, xs: norms_solution(rnn, v, xs).sum(axis=0), "add up or merge"),
        (lambda rnn, v, xs: norms_solution(rnn, v, xs).T, "transposed"),
        (lambda rnn, v, xs: rnn.apply(v, xs, return_carry="yes")[2], "raised"),
    ],
    ids=["reversed", "squared", "sum", "first-output", "batch-summed", "transposed", "raises"],
)
def test_gradient_norms_names_the_mistake(wrong, message):
    feedback = check_gradient_norms(wrong)
    assert not feedback
    assert message in str(feedback), str(feedback)


def test_checkpointed_rnn_untraceable_attempt_is_told_about_its_gradient():
    # Right outputs, run as they are when jit cannot trace them; the gradient cannot be
    # taken through NumPy, and the checker says so instead of crashing.
    feedback = check_checkpointed_rnn(
        lambda cell, v, xs: np.asarray(checkpointed_solution(cell, v, xs))
    )
    assert not feedback
    assert "its gradient: calling it raised" in str(feedback), str(feedback)


def test_checkpointed_rnn_solution_passes():
    feedback = check_checkpointed_rnn(checkpointed_solution)
    assert feedback, str(feedback)
    assert str(feedback).startswith("✔ check_checkpointed_rnn: all 2 cases")


@pytest.mark.parametrize(
    "wrong, message",
    [
        # Right numbers, but nothing is recomputed: every step's residuals are stored.
        (lambda cell, v, xs: _scan(cell, v, xs)[1], "does not recompute the step"),
        # Checkpointing the whole scan recomputes the forward scan, storing it all again.
        (
            lambda cell, v, xs: jax.checkpoint(lambda v: _scan(cell, v, xs)[1])(v),
            "does not recompute the step",
        ),
        # The final carry instead of the outputs.
        (
            lambda cell, v, xs: _scan(cell, v, xs, jax.checkpoint)[0],
            "the outputs",
        ),
        (lambda cell, v, xs: _scan(cell, v, xs[::-1], jax.checkpoint)[1], "the outputs"),
    ],
    ids=["no-checkpoint", "whole-scan", "carry", "reversed-input"],
)
def test_checkpointed_rnn_names_the_mistake(wrong, message):
    feedback = check_checkpointed_rnn(wrong)
    assert not feedback
    assert message in str(feedback), str(feedback)
