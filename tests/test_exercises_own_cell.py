"""The checkers of the chapter "Writing your own cell": the solutions pass, and plausible
wrong attempts are rejected with a message that names the problem."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from rnnlib.exercises.own_cell import (
    IndRNNParams,
    check_flax_indrnn_cell,
    check_indrnn_cell,
)


class IndRNN(IndRNNParams):
    def initialize_carry(self, rng, input_shape):
        return jnp.zeros(tuple(input_shape[:-1]) + (self.features,))

    def update(self, h, a):
        h = jax.nn.relu(a["i"] + a["u"] * h)
        return h, h


def test_the_rnnlib_solution_passes():
    feedback = check_indrnn_cell(IndRNN)
    assert feedback, str(feedback)
    assert str(feedback).startswith("✔ check_indrnn_cell")


def test_the_stub_is_told_that_its_carry_holds_no_arrays():
    class Stub(IndRNNParams):
        def initialize_carry(self, rng, input_shape):
            return None

        def update(self, h, a):
            return None

    feedback = check_indrnn_cell(Stub)
    assert not feedback
    assert "part 'initialize_carry'" in str(feedback)
    assert "returned None, a carry with no arrays" in str(feedback)


def test_a_carry_built_from_the_first_axis_only_is_named():
    class FirstAxis(IndRNN):
        def initialize_carry(self, rng, input_shape):
            return jnp.zeros((input_shape[0], self.features))

    feedback = check_indrnn_cell(FirstAxis)
    assert not feedback
    assert "part 'initialize_carry'" in str(feedback)
    assert "expected it to start with the batch dims (2, 3)" in str(feedback)


def test_a_matrix_product_with_u_changes_the_carry_shape_and_is_named():
    class MatrixU(IndRNN):
        def update(self, h, a):  # u is a vector: h @ u sums the units away
            h = jax.nn.relu(a["i"] + h @ a["u"])
            return h, h

    feedback = check_indrnn_cell(MatrixU)
    assert not feedback
    assert "part 'one step'" in str(feedback)


def test_tanh_instead_of_relu_gives_other_numbers_and_a_hint():
    class Tanh(IndRNN):
        def update(self, h, a):
            h = jnp.tanh(a["i"] + a["u"] * h)
            return h, h

    feedback = check_indrnn_cell(Tanh)
    assert not feedback
    assert "on the same parameters and inputs, outputs" in str(feedback)
    assert "is the activation relu?" in str(feedback)


def test_forgetting_the_recurrence_gives_other_numbers():
    class NoRecurrence(IndRNN):
        def update(self, h, a):
            h = jax.nn.relu(a["i"])
            return h, h

    feedback = check_indrnn_cell(NoRecurrence)
    assert not feedback
    assert "expected" in str(feedback) and "largest difference" in str(feedback)


class FlaxIndRNN(nn.RNNCellBase):
    features: int

    @nn.compact
    def __call__(self, h, x):
        u = self.param("u", nn.initializers.uniform(), (self.features,))
        h = jax.nn.relu(nn.Dense(self.features, name="i")(x) + u * h)
        return h, h

    @nn.nowrap
    def initialize_carry(self, rng, input_shape):
        return jnp.zeros(tuple(input_shape[:-1]) + (self.features,))

    @property
    def num_feature_axes(self):
        return 1


def test_the_flax_solution_passes():
    feedback = check_flax_indrnn_cell(FlaxIndRNN)
    assert feedback, str(feedback)


def test_a_flax_stub_returning_none_is_told_to_return_a_pair():
    class Stub(FlaxIndRNN):
        @nn.compact
        def __call__(self, h, x):
            return None

    feedback = check_flax_indrnn_cell(Stub)
    assert not feedback
    assert "part 'one step'" in str(feedback)
    assert "expected the cell's call to return a pair (carry, y); got NoneType" in str(feedback)


def test_flax_parameters_named_otherwise_are_named_with_the_expected_names():
    class Unnamed(FlaxIndRNN):
        @nn.compact
        def __call__(self, h, x):
            u = self.param("u", nn.initializers.uniform(), (self.features,))
            h = jax.nn.relu(nn.Dense(self.features)(x) + u * h)  # named Dense_0
            return h, h

    feedback = check_flax_indrnn_cell(Unnamed)
    assert not feedback
    assert "['Dense_0']['bias']" in str(feedback) and "['i']['bias']" in str(feedback)


def test_a_flax_cell_without_bias_is_told_which_parameter_is_missing():
    class NoBias(FlaxIndRNN):
        @nn.compact
        def __call__(self, h, x):
            u = self.param("u", nn.initializers.uniform(), (self.features,))
            h = jax.nn.relu(nn.Dense(self.features, use_bias=False, name="i")(x) + u * h)
            return h, h

    feedback = check_flax_indrnn_cell(NoBias)
    assert not feedback
    assert "expected" in str(feedback) and "['i']['bias']" in str(feedback)
