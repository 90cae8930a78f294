"""The one rule for comparing two computations that round differently (tests/tolerance.py)."""

from pathlib import Path

import flax.linen as nn
import jax.numpy as jnp
import numpy as np
import pytest

import rnnlib
from tests.tolerance import (
    SLACK,
    assert_close,
    assert_identical,
    bound,
    epsilon,
    recurrent_terms,
    step_terms,
)


def test_two_summation_orders_of_a_long_dot_product_are_within_the_bound():
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((64, 4096)).astype(np.float32) for _ in range(2))
    forward = np.einsum("ij,ij->i", a, b)
    pairwise = np.sum((a * b).reshape(64, 64, 64), axis=(1, 2), dtype=np.float32)
    backward = np.zeros(64, np.float32)
    for j in reversed(range(4096)):  # one term at a time, last to first: another rounding
        backward += a[:, j] * b[:, j]
    assert not np.array_equal(forward, backward)  # they really do round differently
    # A sum rounds at the size of its partial sums, which grow like the results: the
    # results' magnitude (the default scale) is what the errors are measured against.
    assert_close(backward, forward, terms=4096)
    assert_close(pairwise, forward, terms=4096)
    with pytest.raises(AssertionError):  # and a quarter of one term more is too much
        assert_close(backward + 0.25 * a[:, 0] * b[:, 0], forward, terms=4096)


def test_a_wrong_value_fails_with_the_size_and_the_reason_of_the_bound():
    expected = jnp.linspace(-30.0, 30.0, 216).reshape(6, 36)
    wrong = expected.at[2, 5].add(1e-3)  # a real bug moves a value by far more than rounding
    with pytest.raises(AssertionError) as failure:
        assert_close(wrong, expected, terms=230, label="grads")
    message = str(failure.value)
    assert "grads output: differs by up to 0.001" in message
    assert "(2, 5)" in message and "sqrt(230 terms)" in message and "scale 30" in message


def test_the_bound_scales_with_epsilon_terms_and_magnitude():
    x = jnp.array([3.0, -30.0])
    assert bound(x, terms=100) == pytest.approx(SLACK * epsilon(jnp.float32) * 10 * 30)
    assert bound(x.astype(jnp.bfloat16), terms=100) > 60_000 * bound(x, terms=100)
    assert epsilon(jnp.complex64) == epsilon(jnp.float32)
    assert epsilon(jnp.int32) == 0.0  # integers compare exactly
    assert bound(x, terms=100, scale=1.0) == pytest.approx(SLACK * epsilon(jnp.float32) * 10)


def test_the_case_that_failed_on_an_avx512_machine_is_within_the_bound():
    """One ConvLSTM-2d gradient element of 216 off by 1.3e-5, in values reaching 30: the
    old fixed tolerance (1e-5) called it a failure; it is 3.6 units of eps * 30."""
    cell = rnnlib.ConvLSTMCell(features=3, kernel_size=(3, 3))
    terms = recurrent_terms(cell, (3, 5, 4, 5, 2), steps=5, gradient=True)
    expected = jnp.linspace(-30.0, 30.0, 216)
    assert_close(expected.at[7].add(1.3e-5), expected, terms=terms)


def test_nans_must_sit_in_the_same_places():
    expected = jnp.array([1.0, jnp.nan, 2.0])
    assert_close(jnp.array([1.0, jnp.nan, 2.0]), expected, terms=1)
    with pytest.raises(AssertionError, match="NaNs in other places"):
        assert_close(jnp.array([1.0, 0.0, 2.0]), expected, terms=1)


def test_structures_and_shapes_must_match():
    with pytest.raises(AssertionError, match="structures differ"):
        assert_close((jnp.ones(2),), [jnp.ones(2)], terms=1)
    with pytest.raises(AssertionError, match=r"shape \(2,\), expected \(3,\)"):
        assert_close({"a": jnp.ones(2)}, {"a": jnp.ones(3)}, terms=1)


def test_identical_rejects_one_unit_in_the_last_place_and_another_dtype():
    x = jnp.array([1.0, 2.0])
    assert_identical({"w": x}, {"w": x + 0.0})
    with pytest.raises(AssertionError):
        assert_identical(jnp.nextafter(x, 3.0), x)
    with pytest.raises(AssertionError, match="dtype bfloat16, expected float32"):
        assert_identical(x.astype(jnp.bfloat16), x)


def test_terms_count_one_step_sum_over_the_steps_plus_the_rows_of_a_gradient():
    dense = rnnlib.LSTMCell(features=4)
    assert step_terms(dense, 3) == 3 + 4 + 1
    conv = rnnlib.ConvLSTMCell(features=3, kernel_size=(3, 3))
    assert step_terms(conv, 2) == 9 * (2 + 3) + 1
    assert recurrent_terms(dense, (2, 5, 3), steps=5) == 5 * 8
    assert recurrent_terms(dense, (2, 5, 3), steps=5, gradient=True) == 5 * 8 + 2 * 5
    assert step_terms(nn.ConvLSTMCell(3, (3, 3)), 2) == step_terms(conv, 2)  # Flax's fields


def test_every_comparison_in_the_suite_goes_through_the_rule():
    """No test compares floats with a tolerance of its own making."""
    words = ("assert" + "_allclose", "rtol" + "=", "atol" + "=")
    offenders = [
        f"{path.name}:{number}"
        for path in sorted(Path(__file__).parents[1].glob("**/*.py"))
        if "migrate_corpus" not in path.parts
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if any(word in line for word in words)
    ]
    assert not offenders, offenders


def test_contributing_lists_every_arithmetic_setting_that_tests_arithmetic_runs():
    from tests.arithmetic import COMPARISON_TESTS, SETTINGS

    text = (Path(__file__).parents[2] / "CONTRIBUTING.md").read_text()
    section = text.split("## Orders of arithmetic", 1)[1].split("\n## ", 1)[0]
    for name, flags in SETTINGS.items():
        assert f"| `{name}` | `{flags}` |" in section, name
    # Every module that compares through the rule is among the comparison tests.
    users = {
        f"tests/{path.parent.name}/{path.name}"
        for path in Path(__file__).parents[1].glob("*/test_*.py")
        if "assert_close(" in path.read_text() or "assert_matches_flax(" in path.read_text()
    }
    assert users <= set(COMPARISON_TESTS), users - set(COMPARISON_TESTS)


def test_make_test_under_a_setting_runs_every_target_and_spares_the_lowest_jaxlib_its_isa_cap(
    monkeypatch,
):
    """The lowest jaxlib stops on --xla_cpu_max_isa; the other targets must still get it."""
    from tests import arithmetic

    calls = []

    def fake_run(command, env):
        calls.append((command[-1], env["XLA_FLAGS"]))
        return arithmetic.subprocess.CompletedProcess(command, 0)

    monkeypatch.setattr(arithmetic.subprocess, "run", fake_run)
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    assert arithmetic.main(["avx", "fast-math", "--make-test"]) == 0
    assert calls == [
        ("test-pinned", "--xla_cpu_max_isa=AVX"),
        ("test-lowest", ""),
        ("test-floor", "--xla_cpu_max_isa=AVX"),
        ("test-pinned", "--xla_cpu_enable_fast_math=true"),
        ("test-lowest", "--xla_cpu_enable_fast_math=true"),
        ("test-floor", "--xla_cpu_enable_fast_math=true"),
    ]
