"""The checkers of the chapter "Writing your own cell": the solutions pass, and plausible
wrong attempts are rejected with a message that names the problem."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
from flax import nnx

from rnnlib.exercises.own_cell import check_flax_indrnn_cell, check_nnx_indrnn_cell


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
    assert str(feedback).startswith("✔ check_flax_indrnn_cell")


def test_a_flax_stub_returning_none_is_told_to_return_a_pair():
    class Stub(FlaxIndRNN):
        @nn.compact
        def __call__(self, h, x):
            return None

    feedback = check_flax_indrnn_cell(Stub)
    assert not feedback
    assert "part 'one step'" in str(feedback)
    assert "expected the cell's call to return a pair (carry, y); got NoneType" in str(feedback)


def test_a_flax_carry_built_from_the_first_axis_only_is_named():
    class FirstAxis(FlaxIndRNN):
        @nn.nowrap
        def initialize_carry(self, rng, input_shape):
            return jnp.zeros((input_shape[0], self.features))

    feedback = check_flax_indrnn_cell(FirstAxis)
    assert not feedback
    assert "part 'initialize_carry'" in str(feedback)
    assert "expected it to start with the batch dims (2, 3)" in str(feedback)


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


def test_flax_tanh_instead_of_relu_gives_other_numbers_and_a_hint():
    class Tanh(FlaxIndRNN):
        @nn.compact
        def __call__(self, h, x):
            u = self.param("u", nn.initializers.uniform(), (self.features,))
            h = jnp.tanh(nn.Dense(self.features, name="i")(x) + u * h)
            return h, h

    feedback = check_flax_indrnn_cell(Tanh)
    assert not feedback
    assert "on the same parameters and inputs, outputs" in str(feedback)
    assert "is the activation relu?" in str(feedback)


class NNXIndRNN(nnx.RNNCellBase):
    def __init__(self, in_features, hidden_features, *, rngs):
        self.hidden_features = hidden_features
        self.i = nnx.Linear(in_features, hidden_features, rngs=rngs)
        self.u = nnx.Param(nnx.initializers.uniform()(rngs.params(), (hidden_features,)))

    def __call__(self, h, x):
        h = jax.nn.relu(self.i(x) + self.u[...] * h)
        return h, h

    def initialize_carry(self, input_shape, rngs=None):
        return jnp.zeros(tuple(input_shape[:-1]) + (self.hidden_features,))

    @property
    def num_feature_axes(self):
        return 1


def test_the_nnx_solution_passes():
    feedback = check_nnx_indrnn_cell(NNXIndRNN)
    assert feedback, str(feedback)
    assert str(feedback).startswith("✔ check_nnx_indrnn_cell")


def test_an_nnx_cell_without_num_feature_axes_is_told_so():
    class NoAxes(NNXIndRNN):
        num_feature_axes = nnx.RNNCellBase.num_feature_axes

    feedback = check_nnx_indrnn_cell(NoAxes)
    assert not feedback
    assert "num_feature_axes should be 1 (the channels); it is not defined" in str(feedback)


def test_an_nnx_carry_built_from_the_first_axis_only_is_named_with_both_shapes():
    class FirstAxis(NNXIndRNN):
        def initialize_carry(self, input_shape, rngs=None):
            return jnp.zeros((input_shape[0], self.hidden_features))

    feedback = check_nnx_indrnn_cell(FirstAxis)
    assert not feedback
    assert "returned shape (2, 4); expected (2, 3, 4)" in str(feedback)


def test_an_nnx_cell_with_an_extra_layer_is_named_with_the_expected_names():
    class Extra(NNXIndRNN):
        def __init__(self, in_features, hidden_features, *, rngs):
            super().__init__(in_features, hidden_features, rngs=rngs)
            self.w = nnx.Linear(in_features, hidden_features, rngs=rngs)

    feedback = check_nnx_indrnn_cell(Extra)
    assert not feedback
    assert "['w']['kernel']" in str(feedback) and "expected [\"['i']['bias']\"" in str(feedback)


def test_an_nnx_tanh_gives_other_numbers_and_a_hint():
    class Tanh(NNXIndRNN):
        def __call__(self, h, x):
            h = jnp.tanh(self.i(x) + self.u[...] * h)
            return h, h

    feedback = check_nnx_indrnn_cell(Tanh)
    assert not feedback
    assert "largest difference" in str(feedback) and "is the activation relu?" in str(feedback)


def test_an_nnx_cell_that_is_not_an_nnx_cell_is_told_its_base_class():
    feedback = check_nnx_indrnn_cell(lambda n_in, n, rngs: FlaxIndRNN(features=n))
    assert not feedback
    assert "should subclass nnx.RNNCellBase; got FlaxIndRNN" in str(feedback)
