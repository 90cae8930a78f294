"""The checkers of the chapter "Linear recurrences and parallel scans": right attempts pass, and
each usual wrong attempt is rejected with a message that names what is wrong."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rnnlib.exercises import linear_recurrences as lr

# --- Exercise 1: the operator ---------------------------------------------------------------------


def combine(first, second):
    """The chapter's solution, written independently of the checker's reference."""
    a1, b1 = first
    a2, b2 = second
    return a1 * a2, a2 * b1 + b2


def combine_as_lists(first, second):
    """Another right answer: a list instead of a tuple, NumPy instead of jax.numpy."""
    return [np.multiply(first[0], second[0]), np.add(np.multiply(second[0], first[1]), second[1])]


@pytest.mark.parametrize("solution", [combine, combine_as_lists])
def test_right_operators_pass_every_case(solution):
    feedback = lr.check_combine(solution)
    assert feedback, str(feedback)
    assert str(feedback) == "✔ check_combine: all 3 cases match the reference."


@pytest.mark.parametrize(
    ("wrong", "named"),
    [
        (lambda p, q: (p[0] * q[0], p[0] * q[1] + p[1]), "composed in the wrong order"),
        (lambda p, q: (p[0] * q[0], p[1] + q[1]), "b1 is added without going through"),
        (lambda p, q: (p[0] * q[0], p[0] * p[1] + q[1]), "b1 is multiplied by a1"),
        (lambda p, q: (p[0] + q[0], q[0] * p[1] + q[1]), "the coefficients are added"),
        (lambda p, q: (q[0] * p[1] + q[1], p[0] * q[0]), "returned as (b, a)"),
    ],
)
def test_usual_wrong_operators_are_named(wrong, named):
    message = str(lr.check_combine(wrong))
    assert message.startswith("✘ check_combine")
    assert "case 'two steps, one pair': h after the pair" in message
    assert "case 'jax.lax.associative_scan over 9 steps'" in message
    assert named in message


def test_an_operator_that_is_not_associative_is_told_so():
    message = str(lr.check_combine(lambda p, q: (p[0] + q[0], q[0] * p[1] + q[1])))
    assert "case 'associativity, three steps'" in message
    assert "the operator is not associative" in message


def test_a_right_operator_is_not_called_unassociative():
    assert "associativity" not in str(lr.check_combine(combine))


def test_an_operator_returning_one_array_is_asked_for_a_pair():
    message = str(lr.check_combine(lambda p, q: p[0] * q[0]))
    assert "combine(p, q) should be a pair (a, b); got a ndarray" in message


def test_an_operator_that_jit_cannot_trace_is_judged_as_it_runs():
    def with_python_branch(first, second):
        if float(np.sum(first[0])) > 1e6:  # a concrete value: jax.jit cannot trace this
            raise ValueError("unreachable")
        return combine(first, second)

    feedback = lr.check_combine(with_python_branch)
    assert feedback, str(feedback)


def test_an_operator_that_raises_is_reported():
    def stub(first, second):
        raise NotImplementedError("combine two stretches of steps")

    message = str(lr.check_combine(stub))
    assert message.count("calling it raised NotImplementedError") == 3


def test_each_known_wrong_operator_changes_the_checked_value():
    """A mistake that gave the right h on the checker's steps could never be caught."""
    h, p, q = lr._H, lr._P, lr._Q
    right = combine(p, q)
    for mistake, _ in lr._COMBINE_MISTAKES:
        wrong = mistake(p, q)
        assert not np.allclose(wrong[0] * h + wrong[1], right[0] * h + right[1])


# --- Exercise 2: minLSTM's parallel form ---------------------------------------------------------


def log_g(v):
    return jnp.where(v >= 0, jnp.log(jnp.maximum(v, 0.0) + 0.5), -jax.nn.softplus(-v))


def log_combine(first, second):
    return first[0] + second[0], jnp.logaddexp(second[0] + first[1], second[1])


def log_scan(log_a, log_b, h0, axis):
    log_A, log_B = jax.lax.associative_scan(log_combine, (log_a, log_b), axis=axis)
    h0_term = log_A + jnp.log(jnp.expand_dims(h0, axis))
    return jnp.exp(jnp.logaddexp(h0_term, log_B))


def min_lstm_parallel(k_f, k_i, v, h0):
    """The solution, normalised with logaddexp instead of softplus: another right answer."""
    log_f, log_i = jax.nn.log_sigmoid(k_f), jax.nn.log_sigmoid(k_i)
    log_sum = jnp.logaddexp(log_f, log_i)
    return log_scan(log_f - log_sum, log_i - log_sum + log_g(v), h0, v.ndim - 2)


def min_lstm_loop(k_f, k_i, v, h0):
    """A right answer that is not parallel: the checker judges values, not the algorithm."""
    f, i = jax.nn.sigmoid(k_f), jax.nn.sigmoid(k_i)
    a, b = f / (f + i), i / (f + i) * jnp.exp(log_g(v))
    a, b = jnp.moveaxis(a, -2, 0), jnp.moveaxis(b, -2, 0)

    def step(h, ab):
        h = ab[0] * h + ab[1]
        return h, h

    return jnp.moveaxis(jax.lax.scan(step, h0, (a, b))[1], 0, -2)


@pytest.mark.parametrize("solution", [min_lstm_parallel, min_lstm_loop])
def test_right_min_lstms_pass_every_case(solution):
    feedback = lr.check_min_lstm_parallel(solution)
    assert feedback, str(feedback)
    assert str(feedback) == "✔ check_min_lstm_parallel: all 2 cases match the reference."


def unnormalised(k_f, k_i, v, h0):
    return log_scan(jax.nn.log_sigmoid(k_f), jax.nn.log_sigmoid(k_i) + log_g(v), h0, v.ndim - 2)


def swapped(k_f, k_i, v, h0):
    return min_lstm_parallel(k_i, k_f, v, h0)


def carry_ignored(k_f, k_i, v, h0):
    return min_lstm_parallel(k_f, k_i, v, jnp.zeros_like(h0))


def one_step_late(k_f, k_i, v, h0):
    hs = min_lstm_parallel(k_f, k_i, v, h0)
    return jnp.concatenate([h0[..., None, :], hs[..., :-1, :]], axis=-2)


def min_gru(k_f, k_i, v, h0):
    return log_scan(-jax.nn.softplus(k_f), -jax.nn.softplus(-k_f) + log_g(v), h0, v.ndim - 2)


def along_axis_0(k_f, k_i, v, h0):
    log_f, log_i = jax.nn.log_sigmoid(k_f), jax.nn.log_sigmoid(k_i)
    log_sum = jnp.logaddexp(log_f, log_i)
    log_a, log_b = log_f - log_sum, log_i - log_sum + log_g(v)
    log_A, log_B = jax.lax.associative_scan(log_combine, (log_a, log_b), axis=0)
    return jnp.exp(jnp.logaddexp(log_A + jnp.log(h0)[..., None, :], log_B))


def log_of_the_candidate(k_f, k_i, v, h0):
    log_f, log_i = jax.nn.log_sigmoid(k_f), jax.nn.log_sigmoid(k_i)
    log_sum = jnp.logaddexp(log_f, log_i)
    return log_scan(log_f - log_sum, log_i - log_sum + jnp.log(v), h0, v.ndim - 2)


@pytest.mark.parametrize(
    ("wrong", "named"),
    [
        (unnormalised, "the gates are not normalised"),
        (swapped, "f' and i' are swapped"),
        (one_step_late, "the outputs are one step late"),
        (min_gru, "this is minGRU's update"),
        (along_axis_0, "the scan runs along axis 0, the batch"),
        (log_of_the_candidate, "take the candidate's log as log_g(v)"),
    ],
)
def test_usual_wrong_min_lstms_are_named(wrong, named):
    message = str(lr.check_min_lstm_parallel(wrong))
    assert message.startswith("✘ check_min_lstm_parallel")
    assert "case 'batch 2, 7 steps, 3 features, h0 > 0'" in message
    assert named in message


def test_an_ignored_carry_is_named_only_where_the_carry_is_not_zero():
    message = str(lr.check_min_lstm_parallel(carry_ignored))
    assert "case 'batch 2, 7 steps, 3 features, h0 > 0': h[" in message
    assert "no batch axes" not in message  # h0 = 0 there: ignoring it is right
    assert "the initial carry is ignored" in message


def test_nan_is_named_once():
    message = str(lr.check_min_lstm_parallel(log_of_the_candidate))
    assert message.count("the result contains NaN") == 2
    assert message.count("a logarithm of a negative number") == 1


def test_a_result_of_the_wrong_shape_is_named():
    def last_step_only(k_f, k_i, v, h0):
        return min_lstm_parallel(k_f, k_i, v, h0)[..., -1, :]

    message = str(lr.check_min_lstm_parallel(last_step_only))
    assert "h has shape (2, 3); expected (2, 7, 3)" in message


def test_a_min_lstm_that_jit_cannot_trace_is_judged_as_it_runs():
    def with_python_branch(k_f, k_i, v, h0):
        if float(jnp.abs(h0).max()) == 0.0:  # a concrete value: jax.jit cannot trace this
            h0 = jnp.zeros_like(h0)
        return min_lstm_parallel(k_f, k_i, v, h0)

    feedback = lr.check_min_lstm_parallel(with_python_branch)
    assert feedback, str(feedback)


def test_a_min_lstm_that_raises_is_reported():
    def stub(k_f, k_i, v, h0):
        raise NotImplementedError("the log-space coefficients, then one scan")

    message = str(lr.check_min_lstm_parallel(stub))
    assert message.count("calling it raised NotImplementedError") == 2


# --- Exercise 3: parity with a negative coefficient ----------------------------------------------


def parity_coefficients(bits):
    a = 1.0 - 2.0 * bits
    return a, jnp.zeros_like(a)


def parity_coefficients_scaled(bits):
    """Another right answer: |a| below one keeps the sign; NumPy arrays."""
    bits = np.asarray(bits)
    return np.where(bits == 1, -0.5, 0.9), np.zeros(bits.shape)


@pytest.mark.parametrize("solution", [parity_coefficients, parity_coefficients_scaled])
def test_right_parity_coefficients_pass_every_case(solution):
    feedback = lr.check_parity_coefficients(solution)
    assert feedback, str(feedback)
    assert str(feedback) == "✔ check_parity_coefficients: all 4 cases match the reference."


def test_positive_coefficients_are_named():
    def positive(bits):
        return jnp.full(bits.shape, 0.5), -1.0 * bits

    message = str(lr.check_parity_coefficients(positive))
    assert message.startswith("✘ check_parity_coefficients")
    assert "but the number of ones so far is" in message
    assert "every a_t is >= 0" in message


def test_a_zero_coefficient_is_named():
    message = str(lr.check_parity_coefficients(lambda bits: (1.0 - bits, 0.0 * bits)))
    assert "is 0, which has no sign" in message
    assert "a zero coefficient forgets the parity" in message


def test_a_flip_on_zeros_is_named():
    message = str(lr.check_parity_coefficients(lambda bits: (2.0 * bits - 1, 0.0 * bits)))
    assert "the sign flips on every zero" in message
    assert "every a_t is >= 0" not in message  # the all-ones case has a >= 0, but not all


def test_an_inverted_sign_is_named():
    def inverted(bits):
        a, b = parity_coefficients(bits)
        return a.at[..., 0].multiply(-1.0), b  # one extra flip at the start

    message = str(lr.check_parity_coefficients(inverted))
    assert "the sign is the wrong way round" in message


def test_coefficients_of_the_wrong_shape_are_named():
    message = str(lr.check_parity_coefficients(lambda bits: (1.0 - 2.0 * bits, jnp.zeros(1))))
    assert "a and b should each have the bits' shape (3, 10); got ((3, 10), (1,))" in message


def test_one_array_is_asked_to_be_a_pair():
    message = str(lr.check_parity_coefficients(lambda bits: 1.0 - 2.0 * bits))
    assert "the result should be a pair (a, b); got a ArrayImpl" in message


def test_parity_coefficients_that_raise_are_reported():
    def stub(bits):
        raise NotImplementedError("a and b from the bits")

    message = str(lr.check_parity_coefficients(stub))
    assert message.count("calling it raised NotImplementedError") == 4
