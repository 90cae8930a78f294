"""The encoder-decoder chapter's checkers accept right answers and name wrong ones in words."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from rnnlib.exercises.encoder_decoder import (
    GREEDY_CASES,
    _decode,
    _toy_decoder,
    check_greedy_decode,
    check_shift_right,
)


def shift_right(targets, start):
    first = jnp.full(targets.shape[:-1] + (1,), start, targets.dtype)
    return jnp.concatenate([first, targets[:, :-1]], axis=1)


def greedy_loop(step, carry, start, steps):
    tokens = jnp.full(carry.shape[:-1], start, jnp.int32)
    out = []
    for _ in range(steps):
        carry, logits = step(carry, tokens)
        tokens = jnp.argmax(logits, axis=-1).astype(jnp.int32)
        out.append(tokens)
    return jnp.stack(out, axis=1)


def greedy_scan(step, carry, start, steps):
    def body(state, _):
        carry, tokens = state
        carry, logits = step(carry, tokens)
        tokens = jnp.argmax(logits, axis=-1).astype(jnp.int32)
        return (carry, tokens), tokens

    tokens = jnp.full(carry.shape[:-1], start, jnp.int32)
    _, out = jax.lax.scan(body, (carry, tokens), length=steps)
    return out.T


def test_shift_right_accepts_the_solution():
    feedback = check_shift_right(shift_right)
    assert feedback and "all 2 cases match" in str(feedback)


def test_shift_right_names_a_shift_to_the_left():
    def left(targets, start):
        last = jnp.full(targets.shape[:-1] + (1,), start, targets.dtype)
        return jnp.concatenate([targets[:, 1:], last], axis=1)

    feedback = check_shift_right(left)
    assert not feedback and "shifted left" in str(feedback) and "wrong way" in str(feedback)


def test_shift_right_names_a_forgotten_start_token():
    def zeros_first(targets, start):
        return jnp.concatenate([jnp.zeros_like(targets[:, :1]), targets[:, :-1]], axis=1)

    feedback = check_shift_right(zeros_first)
    assert not feedback and "not the start token" in str(feedback)


def test_shift_right_names_a_kept_last_target_and_an_unshifted_input():
    def too_long(targets, start):
        first = jnp.full(targets.shape[:-1] + (1,), start, targets.dtype)
        return jnp.concatenate([first, targets], axis=1)

    assert "one more than" in str(check_shift_right(too_long))
    assert "not shifted" in str(check_shift_right(lambda targets, start: targets))


def test_greedy_decode_accepts_a_python_loop_and_a_scan():
    assert check_greedy_decode(greedy_loop)
    assert check_greedy_decode(greedy_scan)
    assert check_greedy_decode(jax.jit(greedy_scan, static_argnums=(0, 2, 3)))


def test_greedy_decode_names_a_prediction_not_fed_back():
    def no_feedback(step, carry, start, steps):
        tokens = jnp.full(carry.shape[:-1], start, jnp.int32)
        out = []
        for _ in range(steps):
            carry, logits = step(carry, tokens)
            out.append(jnp.argmax(logits, axis=-1))
        return jnp.stack(out, axis=1)

    feedback = check_greedy_decode(no_feedback)
    assert not feedback and "not fed back" in str(feedback)
    assert "read the start token again" in str(feedback)


def test_greedy_decode_names_a_carry_not_threaded_in_a_loop_and_in_a_scan():
    def first_carry(step, carry, start, steps):
        tokens = jnp.full(carry.shape[:-1], start, jnp.int32)
        out = []
        for _ in range(steps):
            _, logits = step(carry, tokens)
            tokens = jnp.argmax(logits, axis=-1).astype(jnp.int32)
            out.append(tokens)
        return jnp.stack(out, axis=1)

    def scan_first_carry(step, carry, start, steps):
        def body(tokens, _):
            _, logits = step(carry, tokens)
            tokens = jnp.argmax(logits, axis=-1).astype(jnp.int32)
            return tokens, tokens

        tokens = jnp.full(carry.shape[:-1], start, jnp.int32)
        return jax.lax.scan(body, tokens, length=steps)[1].T

    for attempt in (first_carry, scan_first_carry):
        feedback = check_greedy_decode(attempt)
        assert not feedback and "carry is not threaded" in str(feedback), attempt.__name__


def test_greedy_decode_names_a_forgotten_start_token_and_an_off_by_one():
    def zero_first(step, carry, start, steps):
        return greedy_loop(step, carry, 0 if start else 1, steps)

    def with_start(step, carry, start, steps):
        tokens = greedy_loop(step, carry, start, steps)
        first = jnp.full(tokens.shape[:-1] + (1,), start, tokens.dtype)
        return jnp.concatenate([first, tokens[:, :-1]], axis=1)

    assert "not the start token" in str(check_greedy_decode(zero_first))
    assert "off by one" in str(check_greedy_decode(with_start))


def test_greedy_decode_reports_what_an_attempt_raised():
    def broken(step, carry, start, steps):
        raise ValueError("not written yet")

    feedback = check_greedy_decode(broken)
    assert not feedback and "raised ValueError: not written yet" in str(feedback)


def test_the_checker_cases_tell_each_mistake_apart_from_the_right_answer():
    """Each wrong variant changes the tokens on every case, so none passes by luck."""
    for index, (_, batch, steps, start) in enumerate(GREEDY_CASES):
        step, carry = _toy_decoder(index, batch)
        right = np.asarray(_decode(step, carry, start, steps))
        for wrong in (dict(feed_back=False), dict(thread=False)):
            assert not np.array_equal(
                np.asarray(_decode(step, carry, start, steps, **wrong)), right
            )
        assert not np.all(right[:, 0] == start) and not np.array_equal(right[:, 1:], right[:, :-1])


def test_greedy_decode_names_an_attempt_that_never_calls_step():
    def stub(step, carry, start, steps):
        return jnp.full(carry.shape[:-1] + (steps,), start, jnp.int32)

    assert "step was never called" in str(check_greedy_decode(stub))
