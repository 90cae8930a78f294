"""Bad input gets a clear error from rnnlib itself: the right type, and a message that
names what was expected and what was received."""

import re

import flax.linen as nn
import jax
import jax.numpy as jnp
import pytest

import rnnlib
from rnnlib import (
    RNN,
    Bidirectional,
    ConvLSTMCell,
    GRUCell,
    LSTMCell,
    MGUCell,
    SimpleCell,
    flip_sequences,
    layout,
)

KEY = jax.random.key(0)


def _raises(exc, *fragments):
    """pytest.raises that also requires every fragment, literally, in the message."""
    return pytest.raises(exc, match="(?s)" + "".join(f"(?=.*{re.escape(f)})" for f in fragments))


def test_rnn_input_without_room_for_a_time_axis_names_the_layout_and_the_shape():
    rnn = RNN(ConvLSTMCell(features=6, kernel_size=(3, 3)))
    with _raises(
        ValueError, "(*batch, time, height, width, channels)", "(4, 4, 3)", "no time axis"
    ):
        rnn.init(KEY, jnp.ones((4, 4, 3)))


def test_time_major_rnn_input_without_a_time_axis_names_the_time_major_layout():
    rnn = RNN(LSTMCell(features=4), time_major=True)
    with _raises(ValueError, "(time, *batch, channels)", "(3,)"):
        rnn.init(KEY, jnp.ones((3,)))


@pytest.mark.parametrize(
    "kernel_size, shape", [((3,), (5,)), ((3, 3), (4, 3)), ((3, 3, 3), (4, 4, 3))]
)
def test_conv_lstm_cell_input_with_too_few_axes_names_the_feature_axes(kernel_size, shape):
    cell = ConvLSTMCell(features=2, kernel_size=kernel_size)
    with _raises(ValueError, f"({len(kernel_size) + 1} feature axes)", str(shape)):
        cell.initialize_carry(KEY, shape)


def test_cell_apply_with_a_scalar_input_is_rejected():
    cell = GRUCell(features=3)
    with _raises(ValueError, "(*batch, channels)", "got shape ()"):
        cell.init(KEY, jnp.zeros((3,)), jnp.float32(1.0))


@pytest.mark.parametrize("cell", [LSTMCell(4), GRUCell(4), MGUCell(4), SimpleCell(4)])
def test_rnn_inputs_with_a_different_feature_size_than_the_variables_are_rejected(cell):
    rnn = RNN(cell)
    variables = rnn.init(KEY, jnp.ones((2, 5, 3)))
    with _raises(ValueError, "shape (7, 4)", "shape (3, 4)", "params/cell/"):
        rnn.apply(variables, jnp.ones((2, 5, 7)))


def test_conv_lstm_channels_different_from_the_variables_are_rejected():
    rnn = RNN(ConvLSTMCell(features=2, kernel_size=(3,)))
    variables = rnn.init(KEY, jnp.ones((2, 5, 8, 3)))
    with _raises(ValueError, "params/cell/ih/kernel", "(3, 5, 8)", "(3, 3, 8)"):
        rnn.apply(variables, jnp.ones((2, 5, 8, 5)))


def test_cell_apply_with_a_carry_of_the_wrong_width_names_both_shapes():
    cell = GRUCell(features=4)
    x = jnp.ones((2, 3))
    variables = cell.init(KEY, cell.initialize_carry(KEY, x.shape), x)
    with _raises(ValueError, "(2, 4)", "(2, 5)"):
        cell.apply(variables, jnp.zeros((2, 5)), x)


def test_initial_carry_with_the_wrong_structure_is_rejected():
    rnn = RNN(LSTMCell(features=4))
    x = jnp.ones((2, 5, 3))
    variables = rnn.init(KEY, x)
    with _raises(ValueError, "initial_carry", "((2, 4), (2, 4)) (as initialize_carry gives)"):
        rnn.apply(variables, x, initial_carry=jnp.zeros((2, 4)))


def test_initial_carry_with_the_wrong_shapes_names_expected_and_received():
    rnn = RNN(LSTMCell(features=4))
    x = jnp.ones((2, 5, 3))
    variables = rnn.init(KEY, x)
    with _raises(ValueError, "((2, 4), (2, 4))", "((3, 4), (3, 4))"):
        rnn.apply(variables, x, initial_carry=(jnp.zeros((3, 4)), jnp.zeros((3, 4))))


@pytest.mark.parametrize("lengths_shape", [(3,), (2, 1), ()])
def test_seq_lengths_whose_shape_is_not_the_batch_dims_is_rejected(lengths_shape):
    rnn = RNN(GRUCell(features=4))
    x = jnp.ones((2, 5, 3))
    variables = rnn.init(KEY, x)
    with _raises(ValueError, "batch dims (2,)", f"got shape {lengths_shape}"):
        rnn.apply(variables, x, seq_lengths=jnp.ones(lengths_shape, jnp.int32))


@pytest.mark.parametrize("bad", [-1, 6])
def test_concrete_seq_lengths_outside_zero_to_time_are_rejected(bad):
    rnn = RNN(GRUCell(features=4))
    x = jnp.ones((2, 5, 3))
    variables = rnn.init(KEY, x)
    with _raises(ValueError, "[0, 5]", f"seq_lengths[1] is {bad}"):
        rnn.apply(variables, x, seq_lengths=jnp.array([3, bad]))


def test_float_seq_lengths_are_rejected():
    rnn = RNN(GRUCell(features=4))
    x = jnp.ones((2, 5, 3))
    variables = rnn.init(KEY, x)
    with _raises(TypeError, "integers", "float32"):
        rnn.apply(variables, x, seq_lengths=jnp.array([3.0, 2.0]))


def test_flip_sequences_rejects_seq_lengths_that_do_not_match_the_batch():
    with _raises(ValueError, "batch dims (2, 3)", "shape (2,)"):
        flip_sequences(
            jnp.ones((2, 3, 5, 1)), jnp.array([1, 2]), num_batch_dims=2, time_major=False
        )


@pytest.mark.parametrize("cls", [LSTMCell, rnnlib.OptimizedLSTMCell, GRUCell, MGUCell, SimpleCell])
@pytest.mark.parametrize("features", [0, -3, 2.5, True])
def test_features_must_be_a_positive_int(cls, features):
    with _raises(ValueError, "features >= 1", repr(features)):
        cls(features)


@pytest.mark.parametrize("kernel_size", [(), [], (0, 3), (3, 1.5)])
def test_conv_lstm_rejects_an_empty_or_non_positive_kernel_size(kernel_size):
    with _raises(ValueError, "kernel_size", repr(kernel_size)):
        ConvLSTMCell(features=4, kernel_size=kernel_size)


def test_conv_lstm_rejects_strides_of_the_wrong_length():
    with _raises(ValueError, "2 strides", "(1, 1, 1)"):
        ConvLSTMCell(features=4, kernel_size=(3, 3), strides=(1, 1, 1))


@pytest.mark.parametrize("padding", ["FULL", ((1, 1),), ((1, 2, 3), (1, 1))])
def test_conv_lstm_rejects_malformed_padding(padding):
    with _raises(ValueError, "padding", repr(padding)):
        ConvLSTMCell(features=4, kernel_size=(3, 3), padding=padding)


@pytest.mark.parametrize(
    "config, got",
    [
        (dict(strides=(2, 2)), "(4, 4)"),
        (dict(padding="VALID"), "(6, 6)"),
        (dict(padding=((0, 0), (1, 1))), "(6, 8)"),
    ],
)
def test_conv_lstm_configurations_that_shrink_the_carry_are_rejected(config, got):
    rnn = RNN(ConvLSTMCell(features=4, kernel_size=(3, 3), **config))
    with _raises(ValueError, "(8, 8)", got, "keep the input's spatial size"):
        rnn.init(KEY, jnp.ones((2, 5, 8, 8, 3)))


def test_variables_without_params_are_rejected():
    rnn = RNN(GRUCell(features=4))
    variables = rnn.init(KEY, jnp.ones((2, 5, 3)))
    with _raises(ValueError, "'params' collection", "['weights']"):
        rnn.apply({"weights": variables["params"]}, jnp.ones((2, 5, 3)))


def test_variables_that_are_not_a_mapping_are_rejected():
    with _raises(TypeError, "{'params': {...}}", "list"):
        RNN(GRUCell(features=4)).apply([1, 2], jnp.ones((2, 5, 3)))


def test_variables_missing_a_parameter_name_it():
    rnn = RNN(LSTMCell(features=4))
    x = jnp.ones((2, 5, 3))
    params = rnn.init(KEY, x)["params"]
    del params["cell"]["hf"]["bias"]
    with _raises(ValueError, "params/cell/hf/bias"):
        rnn.apply({"params": params}, x)


def test_bidirectional_variables_missing_a_direction_name_it():
    bi = Bidirectional(RNN(GRUCell(4)), RNN(GRUCell(4)))
    x = jnp.ones((2, 5, 3))
    params = bi.init(KEY, x)["params"]
    del params["backward_rnn"]
    with _raises(ValueError, "params/backward_rnn"):
        bi.apply({"params": params}, x)


def test_bidirectional_initial_carry_must_be_a_pair():
    bi = Bidirectional(RNN(GRUCell(4)), RNN(GRUCell(4)))
    x = jnp.ones((2, 5, 3))
    variables = bi.init(KEY, x)
    with _raises(ValueError, "(forward, backward) pair", "length 3"):
        bi.apply(variables, x, initial_carry=(jnp.zeros((2, 4)),) * 3)


def test_init_rejects_something_that_is_not_a_key():
    with _raises(TypeError, "PRNG key", "int"):
        RNN(GRUCell(4)).init(0, jnp.ones((2, 5, 3)))


def test_init_rejects_an_rngs_dict_without_params():
    with _raises(ValueError, "{'params': key}", "['dropout']"):
        RNN(GRUCell(4)).init({"dropout": KEY}, jnp.ones((2, 5, 3)))


def test_rnn_rejects_a_cell_that_is_not_a_cell():
    with _raises(TypeError, "RNNCellBase", "function"):
        RNN(lambda carry, x: (carry, x))


def test_layout_rejects_objects_that_are_not_modules():
    with _raises(TypeError, "a cell, an RNN or a Bidirectional", "got builtins.tuple"):
        layout((1, 2), (2, 3))
    with _raises(TypeError, "from rnnlib, flax.linen or flax.nnx", "flax.linen.linear.Dense"):
        layout(nn.Dense(3), (2, 3))


def test_layout_of_a_flax_rnn_without_room_for_time_names_the_flax_module():
    with _raises(ValueError, "flax.linen.RNN(cell=ConvLSTMCell(", "got shape (4, 4, 3)"):
        layout(nn.RNN(nn.ConvLSTMCell(6, (3, 3))), (4, 4, 3))


def test_layout_rejects_time_major_for_a_lone_cell():
    with _raises(ValueError, "time_major", "one step"):
        layout(LSTMCell(4), (2, 3), time_major=True)


def test_layout_raises_the_same_error_as_rnn_for_a_shape_that_cannot_fit():
    rnn = RNN(ConvLSTMCell(features=6, kernel_size=(3, 3)))
    with pytest.raises(ValueError) as from_layout:
        layout(rnn, (4, 4, 3))
    with pytest.raises(ValueError) as from_rnn:
        rnn.init(KEY, jnp.ones((4, 4, 3)))
    assert str(from_layout.value) == str(from_rnn.value)


def test_rnn_rejects_cell_size_passed_where_time_major_now_stands():
    with _raises(TypeError, "time_major to be a bool", "got 64", "cell_size"):
        RNN(LSTMCell(features=64), 64)


@pytest.mark.parametrize("flag", ["return_carry", "reverse", "keep_order"])
def test_rnn_rejects_flags_that_are_not_bools(flag):
    with _raises(TypeError, f"{flag} to be a bool", "'yes'"):
        RNN(GRUCell(4), **{flag: "yes"})


@pytest.mark.parametrize("unroll, exc", [(0, ValueError), (2.0, TypeError), (True, TypeError)])
def test_rnn_rejects_an_unroll_that_is_not_a_positive_int(unroll, exc):
    with _raises(exc, "unroll", repr(unroll) if exc is TypeError else "got 0"):
        RNN(GRUCell(4), unroll=unroll)


@pytest.mark.parametrize("field", ["hoist_inputs", "join_layers", "kernel_gradients_after_loop"])
@pytest.mark.parametrize("value", ["yes", 1, 0.0])
def test_a_plan_rejects_a_choice_that_is_not_a_bool_or_none(field, value):
    with _raises(TypeError, field, "True, False or None", repr(value)):
        rnnlib.Plan(**{field: value})


def test_rnn_rejects_a_plan_that_is_not_a_plan():
    with _raises(TypeError, "plan to be an rnnlib.Plan", "{'hoist_inputs': True}"):
        RNN(GRUCell(4), plan={"hoist_inputs": True})


def test_rnn_given_a_legacy_cell_points_at_legacy_rnn():
    from rnnlib import legacy

    with pytest.warns(DeprecationWarning):
        cell = legacy.LSTMCell()
    with _raises(TypeError, "rnnlib.legacy.LSTMCell", "legacy.RNN(cell, cell_size)"):
        RNN(cell)
