"""The speed chapter's checker: a hand-hoisted Elman RNN, right in values and in matmul counts."""

import jax
import jax.numpy as jnp

from rnnlib.exercises.speed import check_hoisted_elman


def _run(step, h0, xs_time_major):
    return jnp.swapaxes(jax.lax.scan(step, h0, xs_time_major)[1], 0, 1)


def solution(p, x):
    batch, time, channels = x.shape
    rows = jnp.swapaxes(x, 0, 1).reshape(time * batch, channels)
    projected = (rows @ p["i"]["kernel"] + p["i"]["bias"]).reshape(time, batch, -1)

    def step(h, projected_t):
        h = jnp.tanh(projected_t + h @ p["h"]["kernel"])
        return h, h

    return _run(step, jnp.zeros((batch, p["h"]["kernel"].shape[0])), projected)


def in_the_loop(p, x):
    def step(h, x_t):
        h = jnp.tanh(x_t @ p["i"]["kernel"] + p["i"]["bias"] + h @ p["h"]["kernel"])
        return h, h

    h0 = jnp.zeros((x.shape[0], p["h"]["kernel"].shape[0]))
    return _run(step, h0, jnp.swapaxes(x, 0, 1))


def test_the_solution_passes():
    feedback = check_hoisted_elman(solution)
    assert feedback and "all 3 cases" in str(feedback)


def test_right_values_with_the_input_matmul_still_in_the_loop_are_told_apart():
    feedback = check_hoisted_elman(in_the_loop)
    assert not feedback
    assert "the outputs are right, but there are 2 matmul(s) per step" in str(feedback)
    assert "the input side is still inside the loop" in str(feedback)


def test_a_forgotten_bias_is_a_wrong_value():
    def no_bias(p, x):
        return solution({"i": {**p["i"], "bias": jnp.zeros_like(p["i"]["bias"])}, "h": p["h"]}, x)

    feedback = check_hoisted_elman(no_bias)
    assert not feedback
    assert "the outputs[" in str(feedback) and "expected" in str(feedback)


def test_outputs_left_time_major_are_a_wrong_shape():
    def time_major(p, x):
        return jnp.swapaxes(solution(p, x), 0, 1)

    feedback = check_hoisted_elman(time_major)
    assert not feedback
    assert "the outputs has shape (5, 2, 4); expected (2, 5, 4)" in str(feedback)
