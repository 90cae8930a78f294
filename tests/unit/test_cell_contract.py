"""rnnlib.testing.check_cell_contract: every shipped cell passes it, and each broken part
of the contract fails it with a message that names the part, the expected and the received."""

from __future__ import annotations

import copy

import flax.linen as nn
import jax
import jax.numpy as jnp
import pytest

import rnnlib
from rnnlib import testing
from rnnlib.linear import Dense, Param
from rnnlib.testing import PARTS, CellContractError, check_cell_contract
from tests.parity_helpers import ALL_CELLS

STEP_SHAPE_BATCH = (2, 3)


def _shape(case):
    return STEP_SHAPE_BATCH + case.feature_shape


@pytest.mark.parametrize("library", ["rnnlib", "flax.linen"])
@pytest.mark.parametrize("case", ALL_CELLS, ids=lambda case: case.id)
def test_every_shipped_cell_meets_the_contract(case, library):
    cell = case.make(rnnlib if library == "rnnlib" else nn)
    report = check_cell_contract(cell, _shape(case), steps=4)
    assert report.parts == PARTS
    assert str(report).startswith("✔ ")
    assert ("flattened" in str(report)) == (library == "flax.linen")


# -- the chapter's own cell (book/md/own_cell.md), in both libraries ------------------------

PEEPHOLE_INIT = jax.nn.initializers.normal(stddev=0.5)


class FlaxPeepholeLSTMCell(nn.RNNCellBase):
    features: int

    @nn.compact
    def __call__(self, carry, x):
        c, h = carry
        z = nn.Dense(4 * self.features, name="i")(x)
        z = z + nn.Dense(4 * self.features, use_bias=False, name="h")(h)
        z_i, z_f, z_g, z_o = jnp.split(z, 4, axis=-1)
        w_ci, w_cf, w_co = self.param("peephole", PEEPHOLE_INIT, (3, self.features))
        i = jax.nn.sigmoid(z_i + w_ci * c)
        f = jax.nn.sigmoid(z_f + w_cf * c)
        c = f * c + i * jnp.tanh(z_g)
        o = jax.nn.sigmoid(z_o + w_co * c)
        h = o * jnp.tanh(c)
        return (c, h), h

    @nn.nowrap
    def initialize_carry(self, rng, input_shape):
        shape = tuple(input_shape[:-1]) + (self.features,)
        return jnp.zeros(shape), jnp.zeros(shape)

    @property
    def num_feature_axes(self):
        return 1


class PeepholeLSTMCell(rnnlib.RNNCellBase):
    features: int

    def initialize_carry(self, rng, input_shape):
        shape = tuple(input_shape[:-1]) + (self.features,)
        return jnp.zeros(shape), jnp.zeros(shape)

    def layers(self, input_shape):
        n_in, n = input_shape[-1], self.features
        lecun, zeros = jax.nn.initializers.lecun_normal(), jax.nn.initializers.zeros
        return {
            "i": Dense("x", n_in, 4 * n, lecun, zeros),
            "h": Dense("h", n, 4 * n, lecun),
            "peephole": Param((3, n), PEEPHOLE_INIT),
        }

    def update(self, carry, a):
        c, h = carry
        z_i, z_f, z_g, z_o = jnp.split(a["i"] + a["h"], 4, axis=-1)
        w_ci, w_cf, w_co = a["peephole"]
        i = jax.nn.sigmoid(z_i + w_ci * c)
        f = jax.nn.sigmoid(z_f + w_cf * c)
        c = f * c + i * jnp.tanh(z_g)
        o = jax.nn.sigmoid(z_o + w_co * c)
        h = o * jnp.tanh(c)
        return (c, h), h


@pytest.mark.parametrize("cell", [FlaxPeepholeLSTMCell(5), PeepholeLSTMCell(5)], ids=repr)
def test_the_chapters_peephole_cell_meets_the_contract(cell):
    assert check_cell_contract(cell, (2, 3, 4)).parts == PARTS


# -- broken cells, one part at a time -------------------------------------------------------


class Elman(rnnlib.RNNCellBase):
    """A small working cell; each broken cell below overrides one thing."""

    features: int = 4

    def initialize_carry(self, rng, input_shape):
        return jnp.zeros(tuple(input_shape[:-1]) + (self.features,))

    def layers(self, input_shape):
        init = jax.nn.initializers.lecun_normal()
        return {
            "i": Dense("x", input_shape[-1], self.features, init),
            "h": Dense("h", self.features, self.features, init),
        }

    def update(self, h, a):
        h = jnp.tanh(a["i"] + a["h"])
        return h, h


def broken(name, **methods):
    """An ``Elman`` subclass with ``methods`` replaced (a subclass needs no decorator)."""
    return type(name, (Elman,), methods)()


def _failure(cell, input_shape=(2, 3, 3)):
    with pytest.raises(CellContractError) as caught:
        check_cell_contract(cell, input_shape)
    return caught.value


def test_the_working_cell_passes():
    assert check_cell_contract(Elman(), (2, 3, 3)).parts == PARTS


def test_a_cell_that_leaves_out_num_feature_axes_is_a_dense_cell():
    assert Elman().num_feature_axes == 1
    assert "num_feature_axes" not in vars(Elman)


def test_a_cell_without_update_names_the_hook_and_what_it_must_return():
    class NoUpdate(rnnlib.RNNCellBase):
        features: int = 4
        initialize_carry = Elman.initialize_carry
        layers = Elman.layers

    error = _failure(NoUpdate())
    assert error.part == "one step"
    assert "raised NotImplementedError" in str(error)
    assert "NoUpdate does not define update" in str(error)  # rnnlib's own message
    assert "returns (new_carry, y)" in str(error)


def test_a_flax_cell_without_num_feature_axes_fails_the_first_part():
    class NoAxes(nn.RNNCellBase):
        features: int = 4

        @nn.compact
        def __call__(self, h, x):
            h = jnp.tanh(nn.Dense(self.features)(x) + h)
            return h, h

        @nn.nowrap
        def initialize_carry(self, rng, input_shape):
            return jnp.zeros(tuple(input_shape[:-1]) + (self.features,))

    error = _failure(NoAxes())
    assert error.part == "num_feature_axes"
    # A user's subclass is named as a flax.linen module, not as if flax.linen shipped it.
    assert str(error).startswith("flax.linen module ")
    assert "NoAxes(features=4) breaks the cell contract" in str(error)


def test_num_feature_axes_must_be_a_positive_int():
    error = _failure(broken("ZeroAxes", num_feature_axes=property(lambda self: 0)))
    assert error.part == "num_feature_axes" and "expected an int >= 1" in str(error)
    assert "got 0" in str(error)


def test_a_carry_without_batch_dims_is_named_with_the_batch_dims_it_needs():
    cell = broken(
        "NoBatchCarry", initialize_carry=lambda self, rng, shape: jnp.zeros((self.features,))
    )
    error = _failure(cell)
    assert error.part == "initialize_carry"
    assert "returned carry of shape (4,)" in str(error)
    assert "expected it to start with the batch dims (2, 3)" in str(error)


def test_a_carry_with_only_the_first_batch_dim_fails():
    def first_axis_only(self, rng, shape):  # right for one batch dim, wrong for two
        return jnp.zeros((shape[0], self.features))

    error = _failure(broken("FirstAxis", initialize_carry=first_axis_only))
    assert error.part == "initialize_carry"
    assert "of shape (2, 4); expected it to start with the batch dims (2, 3)" in str(error)


def test_a_carry_that_ignores_input_shape_fails_when_the_batch_dims_change():
    cell = broken(
        "FixedBatch", initialize_carry=lambda self, rng, shape: jnp.zeros((2, 3, self.features))
    )
    error = _failure(cell)
    assert error.part == "initialize_carry"
    assert "initialize_carry(rng, (3, 4, 3))" in str(error)
    assert "of shape (2, 3, 4); expected it to start with the batch dims (3, 4)" in str(error)


def test_a_step_that_returns_no_pair_fails_one_step():
    def output_only(self, h, a):
        return jnp.tanh(a["i"] + a["h"])

    error = _failure(broken("OutputOnly", update=output_only))
    assert error.part == "one step"
    assert "expected the cell's call to return a pair (carry, y); got ArrayImpl" in str(error)


def test_a_step_that_changes_the_carry_dtype_names_both_dtypes():
    cell = broken(
        "HalfCarry",
        initialize_carry=lambda self, rng, shape: jnp.zeros(
            tuple(shape[:-1]) + (self.features,), jnp.bfloat16
        ),
    )
    error = _failure(cell)
    assert error.part == "one step"
    assert "one step turned carry of dtype bfloat16 into float32" in str(error)


def test_a_flax_step_that_returns_a_carry_of_another_structure_fails_one_step():
    class TupleCarry(nn.RNNCellBase):
        features: int = 4

        @nn.compact
        def __call__(self, h, x):
            h = jnp.tanh(nn.Dense(self.features)(x) + h)
            return (h,), h  # the carry came in as an array, leaves as a tuple

        @nn.nowrap
        def initialize_carry(self, rng, input_shape):
            return jnp.zeros(tuple(input_shape[:-1]) + (self.features,))

        @property
        def num_feature_axes(self):
            return 1

    error = _failure(TupleCarry())
    assert error.part == "one step"
    assert "the carry returned by one step is structured as PyTreeDef((*,))" in str(error)


def test_a_step_that_mixes_the_sequences_of_a_batch_fails_batch_dims():
    def batch_mean(self, h, a):  # a batch-norm-like slip: the mean over axis 0
        h = jnp.tanh(a["i"] + a["h"] + h.mean(axis=0))
        return h, h

    error = _failure(broken("BatchMean", update=batch_mean))
    assert error.part == "batch dims"
    assert "RNN's outputs for sequence [0, 0] differs from the sequence run alone" in str(error)
    assert "rounding explains at most" in str(error)


def test_a_step_with_nan_gradients_fails_jit_and_grad():
    def where_sqrt(self, h, a):  # the where-trap: sqrt's nan gradient where z < 0
        z = a["i"] + a["h"]
        h = jnp.where(z > 0, jnp.sqrt(z), 0.0)
        return h, h

    error = _failure(broken("WhereSqrt", update=where_sqrt))
    assert error.part == "jit and grad"
    assert "holds non-finite values; expected finite" in str(error)


# -- parts a cell that passes 1-4 can only fail through the library ------------------------


class _RNNIgnoring(rnnlib.RNN):
    """rnnlib.RNN, except that it gets one of its call's options wrong."""

    ignore = ""

    def _call(self, params, inputs, **kwargs):
        if self.ignore == "time_major" and (kwargs.get("time_major") or self.time_major):
            carry, y = super()._call(params, inputs, **kwargs)
            return carry, jnp.flip(y, 0)  # time-major outputs, last step first
        if self.ignore == "seq_lengths" and not kwargs.get("reverse"):
            kwargs["seq_lengths"] = None
        if self.ignore == "reverse_seq_lengths" and kwargs.get("reverse"):
            kwargs["seq_lengths"] = None  # the backward direction reads the padding first
        return super()._call(params, inputs, **kwargs)


@pytest.mark.parametrize(
    "ignore, part, words",
    [
        ("time_major", "time_major", "RNN(time_major=True)'s outputs for sequence [0, 0]"),
        ("seq_lengths", "seq_lengths", "RNN's returned carry for sequence [0, 1] (length 0"),
        ("reverse_seq_lengths", "Bidirectional", "the backward carry for sequence [0, 1]"),
    ],
)
def test_a_library_that_drops_an_option_fails_the_part_that_uses_it(
    monkeypatch, ignore, part, words
):
    rnn = type("BrokenRNN", (_RNNIgnoring,), {"ignore": ignore})
    library = testing._Library("rnnlib", rnn, rnnlib.Bidirectional, copy.copy, False)
    monkeypatch.setattr(testing, "_library", lambda cell: library)
    error = _failure(Elman())
    assert error.part == part
    assert words in str(error)


# -- wrong arguments are the caller's mistake, not the cell's --------------------------------


def test_too_few_batch_dims_is_a_value_error_saying_how_many_are_needed():
    with pytest.raises(ValueError, match=r"at least two batch dims.*got \(2, 3\), which has 1"):
        check_cell_contract(Elman(), (2, 3))


def test_something_that_is_not_a_cell_is_a_type_error():
    with pytest.raises(TypeError, match="expects a flax.linen or rnnlib cell.*got builtins.int"):
        check_cell_contract(3, (2, 3, 3))


def test_steps_must_be_at_least_two():
    with pytest.raises(ValueError, match="steps >= 2"):
        check_cell_contract(Elman(), (2, 3, 3), steps=1)


def test_the_rnnlib_base_class_names_every_hook_a_cell_must_write():
    class Bare(rnnlib.RNNCellBase):
        pass

    cell = Bare()
    for call, words in [
        (
            lambda: cell.initialize_carry(None, (2, 3)),
            "Bare has no features field and does not define initialize_carry",
        ),
        (lambda: cell.create_params(None, (2, 3)), "Bare does not define layers"),
        (lambda: cell.update(None, {}), "Bare does not define update"),
    ]:
        with pytest.raises(NotImplementedError, match=words):
            call()
