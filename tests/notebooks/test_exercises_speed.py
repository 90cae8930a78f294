"""The speed chapter's checker: a hand-hoisted Elman RNN, right in values and in matmul counts."""

import jax
import jax.numpy as jnp

from rnnlib.exercises.speed import check_hoisted_elman, matmuls


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


def test_matmuls_counts_a_loop_nested_inside_a_call():
    """``matmuls`` follows nested calls: wrapped in a ``jax.jit`` and a ``jax.custom_jvp``, a
    two-matmul loop still counts (2, 0), and a matmul before it 1."""

    def loop(w, xs):
        step = lambda h, x: (jnp.tanh(x @ w + h @ w), h)  # noqa: E731
        return jax.lax.scan(step, xs[0], xs)[1]

    nested = jax.custom_jvp(loop)
    nested.defjvp(lambda primals, tangents: (loop(*primals), loop(*primals)))
    w, xs = jnp.ones((3, 3)), jnp.ones((5, 2, 3))
    assert matmuls(jax.jit(nested), w, xs) == (2, 0)
    assert matmuls(lambda w, xs: jax.jit(nested)(w, xs @ w), w, xs) == (2, 1)
    assert matmuls(lambda w, xs: xs @ w, w, xs) == (0, 1)


def test_matmuls_counts_a_while_loop_and_both_branches_of_a_cond():
    def body(carry):
        i, h, w = carry
        h = jax.lax.cond(i % 2 == 0, lambda h: h @ w, lambda h: h @ w.T, h)
        return i + 1, h, w

    def run(w, h):
        return jax.lax.while_loop(lambda c: c[0] < 4, body, (0, h @ w, w))[1]

    assert matmuls(run, jnp.ones((3, 3)), jnp.ones((2, 3))) == (2, 1)


def test_matmuls_counts_flax_lstm_cells_per_step():
    """Flax's gate-by-gate LSTMCell runs 8 matmuls per step, OptimizedLSTMCell 2."""
    import flax.linen as nn

    x = jnp.ones((2, 5, 3))
    for cell, per_step in ((nn.LSTMCell, 8), (nn.OptimizedLSTMCell, 2)):
        rnn = nn.RNN(cell(features=4))
        variables = jax.eval_shape(rnn.init, jax.random.key(0), x)
        assert matmuls(rnn.apply, variables, x) == (per_step, 0)
