"""The checkers of "Long sequences": the solutions pass, the usual mistakes are named."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rnnlib.exercises.long_sequences import check_chunked_rnn, check_reset_scan


def _chunked(rnn, variables, xs, chunk, stop=True, pass_carry=True, keep_last=True):
    carry, outputs = None, []
    end = xs.shape[1] if keep_last else xs.shape[1] - xs.shape[1] % chunk
    for start in range(0, end, chunk):
        if carry is not None and stop:
            carry = jax.lax.stop_gradient(carry)
        initial = carry if pass_carry else None
        carry, ys = rnn.apply(variables, xs[:, start : start + chunk], initial_carry=initial)
        outputs.append(ys)
    return jnp.concatenate(outputs, axis=1)


def test_chunked_rnn_solution_passes():
    feedback = check_chunked_rnn(_chunked)
    assert feedback, str(feedback)
    assert str(feedback).startswith("✔ check_chunked_rnn: all 2 cases")


@pytest.mark.parametrize(
    "wrong, message",
    [
        (
            lambda rnn, v, xs, chunk: _chunked(rnn, v, xs, chunk, stop=False),
            "this is full backpropagation; apply jax.lax.stop_gradient",
        ),
        (
            lambda rnn, v, xs, chunk: _chunked(rnn, v, xs, chunk, pass_carry=False),
            "each chunk starts from a fresh carry",
        ),
        (
            lambda rnn, v, xs, chunk: _chunked(rnn, v, xs, chunk, keep_last=False),
            "the outputs have 8 steps; expected 10: the last 2 steps are missing",
        ),
        (
            lambda rnn, v, xs, chunk: rnn.apply(v, xs),
            "return only the outputs (batch, time, features), not a tuple",
        ),
        (
            lambda rnn, v, xs, chunk: _chunked(rnn, v, xs[:, ::-1], chunk),
            "the outputs",
        ),
    ],
    ids=["no-stop", "fresh-carry", "last-chunk-dropped", "tuple", "wrong-numbers"],
)
def test_chunked_rnn_names_the_mistake(wrong, message):
    feedback = check_chunked_rnn(wrong)
    assert not feedback
    assert message in str(feedback), str(feedback)


def test_chunked_rnn_judges_an_attempt_that_jit_cannot_trace():
    # Converting with NumPy cannot be traced: the outputs are judged as they are, and the
    # gradient, which cannot be taken through NumPy, is reported instead of raised.
    feedback = check_chunked_rnn(lambda rnn, v, xs, chunk: np.asarray(_chunked(rnn, v, xs, chunk)))
    assert not feedback
    assert "its gradient: calling it raised" in str(feedback), str(feedback)


def _reset_scan(cell, variables, xs, done, after=False, parts=None):
    fresh = cell.initialize_carry(jax.random.key(0), xs[:, 0].shape)

    def reset(carry, d):
        if isinstance(carry, tuple):
            return tuple(
                jnp.where(d[:, None], f, c) if parts is None or i in parts else c
                for i, (f, c) in enumerate(zip(fresh, carry))
            )
        return jnp.where(d[:, None], fresh, carry)

    def step(carry, inputs):
        x, d = inputs
        carry = carry if after else reset(carry, d)
        carry, y = cell.apply(variables, carry, x)
        return (reset(carry, d) if after else carry), y

    _, ys = jax.lax.scan(step, fresh, (xs.swapaxes(0, 1), done.swapaxes(0, 1)))
    return ys.swapaxes(0, 1)


def test_reset_scan_solution_passes():
    feedback = check_reset_scan(_reset_scan)
    assert feedback, str(feedback)
    assert str(feedback).startswith("✔ check_reset_scan: all 2 cases")


@pytest.mark.parametrize(
    "wrong, message",
    [
        (
            lambda cell, v, xs, done: _reset_scan(cell, v, xs, jnp.zeros_like(done)),
            "the carry is never reset",
        ),
        (
            lambda cell, v, xs, done: _reset_scan(cell, v, xs, done, after=True),
            "reset before calling the cell",
        ),
        (
            lambda cell, v, xs, done: _reset_scan(cell, v, xs, done, parts=(0,)),
            "only part 0 of the carry (a tuple of 2 arrays) is reset",
        ),
        (
            lambda cell, v, xs, done: _reset_scan(cell, v, xs, done).swapaxes(0, 1),
            "time first",
        ),
        (lambda cell, v, xs, done: None, "it returned None; expected the outputs"),
    ],
    ids=["never", "after-the-step", "half-the-lstm-carry", "time-major", "none"],
)
def test_reset_scan_names_the_mistake(wrong, message):
    feedback = check_reset_scan(wrong)
    assert not feedback
    assert message in str(feedback), str(feedback)
