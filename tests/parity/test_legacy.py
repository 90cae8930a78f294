"""rnnlib.legacy: the Flax 0.6.11 recurrent API, computed by the new cells.

Given the same variables, every legacy module must produce exactly the numbers of
its new-API equivalent; every entry point warns with the new-API spelling; the
FLIP 3099 ConvLSTM example fails where 0.6.11 failed. Comparison with the real
Flax 0.6.11 lives in test_legacy_oracle.py. These tests need only jax and numpy.
"""

from __future__ import annotations

import re
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rnnlib
from rnnlib import legacy

# Building legacy modules warns by design; the tests of the warnings use pytest.warns.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

DENSE = {
    "LSTMCell": (legacy.LSTMCell, rnnlib.LSTMCell),
    "OptimizedLSTMCell": (legacy.OptimizedLSTMCell, rnnlib.OptimizedLSTMCell),
    "GRUCell": (legacy.GRUCell, rnnlib.GRUCell),
}


def normal_carry(key, shape):
    """A carry initializer with non-zero values, so the carry really enters the math."""
    return jax.random.normal(key, shape)


def assert_trees_equal(actual, expected):
    assert jax.tree_util.tree_structure(actual) == jax.tree_util.tree_structure(expected)
    for a, b in zip(jax.tree_util.tree_leaves(actual), jax.tree_util.tree_leaves(expected)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def keys(n, seed=0):
    return jax.random.split(jax.random.PRNGKey(seed), n)


# -- cells: the same variables give the same numbers ----------------------------------------


@pytest.mark.parametrize("name", DENSE)
@pytest.mark.parametrize("batch_dims", [(), (3,), (2, 3)], ids=["no-batch", "batch", "2x3"])
def test_dense_cell_matches_new_cell_given_the_same_variables(name, batch_dims):
    old_cls, new_cls = DENSE[name]
    k_carry, k_init, k_x = keys(3)
    carry = old_cls.initialize_carry(k_carry, batch_dims, 5, normal_carry)
    x = jax.random.normal(k_x, batch_dims + (4,))
    old = old_cls()
    variables = old.init(k_init, carry, x)
    new = new_cls(features=5)
    assert_trees_equal(old.apply(variables, carry, x), new.apply(variables, carry, x))


@pytest.mark.parametrize("name", DENSE)
def test_legacy_init_creates_the_new_cells_parameter_tree_and_values(name):
    old_cls, new_cls = DENSE[name]
    k_init, k_x = keys(2)
    x = jax.random.normal(k_x, (3, 4))
    carry = old_cls.initialize_carry(k_x, (3,), 6)
    old_vars = old_cls().init(k_init, carry, x)
    new = new_cls(features=6)
    new_vars = new.init(k_init, new.initialize_carry(k_x, x.shape), x)
    assert_trees_equal(old_vars, new_vars)


@pytest.mark.parametrize("name", DENSE)
def test_dense_cell_fields_reach_the_new_cell(name):
    old_cls, new_cls = DENSE[name]
    fields = dict(
        gate_fn=jax.nn.hard_sigmoid,
        activation_fn=jax.nn.soft_sign,
        kernel_init=jax.nn.initializers.normal(0.5),
        recurrent_kernel_init=jax.nn.initializers.normal(0.3),
        bias_init=jax.nn.initializers.normal(0.2),
        param_dtype=jnp.float32,
    )
    k_carry, k_init, k_x = keys(3, seed=1)
    carry = old_cls.initialize_carry(k_carry, (2,), 3, normal_carry)
    x = jax.random.normal(k_x, (2, 4))
    old_out, variables = old_cls(**fields).init_with_output(k_init, carry, x)
    new = new_cls(features=3, **fields)
    assert_trees_equal(variables, new.init(k_init, new.initialize_carry(k_x, x.shape), x))
    assert_trees_equal(old_out, new.apply(variables, carry, x))
    # The defaults would give different numbers, so the fields were really used.
    default_out = old_cls().apply(variables, carry, x)
    assert not np.allclose(jax.tree_util.tree_leaves(default_out)[-1], old_out[-1])


def test_dense_cell_computes_in_the_requested_dtype_like_the_new_cell():
    k_carry, k_init, k_x = keys(3)
    carry = legacy.LSTMCell.initialize_carry(k_carry, (2,), 3, normal_carry)
    x = jax.random.normal(k_x, (2, 4))
    old = legacy.LSTMCell(dtype=jnp.bfloat16)
    variables = old.init(k_init, carry, x)
    out = old.apply(variables, carry, x)
    new = rnnlib.LSTMCell(features=3, dtype=jnp.bfloat16).apply(variables, carry, x)
    assert_trees_equal(out, new)
    assert [leaf.dtype for leaf in jax.tree_util.tree_leaves(out)] == [
        leaf.dtype for leaf in jax.tree_util.tree_leaves(new)
    ]
    # the gates are computed in bfloat16; h = o * tanh(c) then meets the float32 carry c
    assert out[1].dtype == jnp.float32


@pytest.mark.parametrize(
    "kernel_size, feature_shape",
    [((3,), (7, 2)), ((3, 3), (5, 4, 2)), ((2, 2, 2), (2, 3, 2, 2))],
    ids=["1d", "2d", "3d"],
)
def test_conv_lstm_cell_matches_new_cell_given_the_same_variables(kernel_size, feature_shape):
    k_carry, k_init, k_x = keys(3)
    signal = feature_shape[:-1]
    carry = legacy.ConvLSTMCell.initialize_carry(k_carry, (2,), signal + (4,), normal_carry)
    x = jax.random.normal(k_x, (2,) + feature_shape)
    old = legacy.ConvLSTMCell(features=4, kernel_size=kernel_size)
    old_out, variables = old.init_with_output(k_init, carry, x)
    new = rnnlib.ConvLSTMCell(features=4, kernel_size=kernel_size)
    assert_trees_equal(variables, new.init(k_init, new.initialize_carry(k_x, x.shape), x))
    assert_trees_equal(old_out, new.apply(variables, carry, x))
    assert old_out[1].shape == (2,) + signal + (4,)


def test_conv_lstm_cell_passes_strides_padding_and_use_bias_to_the_new_cell():
    k_carry, k_init, k_x = keys(3)
    carry = legacy.ConvLSTMCell.initialize_carry(k_carry, (2,), (6, 3), normal_carry)
    x = jax.random.normal(k_x, (2, 6, 2))
    config = dict(features=3, kernel_size=(3,), strides=(1,), padding=((1, 1),), use_bias=False)
    old = legacy.ConvLSTMCell(**config)
    old_out, variables = old.init_with_output(k_init, carry, x)
    assert "bias" not in variables["params"]["ih"]
    assert_trees_equal(old_out, rnnlib.ConvLSTMCell(**config).apply(variables, carry, x))


def test_legacy_cell_runs_under_jit_and_grad():
    k_carry, k_init, k_x = keys(3)
    carry = legacy.GRUCell.initialize_carry(k_carry, (2,), 3, normal_carry)
    x = jax.random.normal(k_x, (2, 4))
    cell = legacy.GRUCell()
    variables = cell.init(k_init, carry, x)
    jitted = jax.jit(cell.apply)(variables, carry, x)
    # both compiled: XLA may fuse differently from eager execution, by an ulp
    assert_trees_equal(jitted, jax.jit(rnnlib.GRUCell(features=3).apply)(variables, carry, x))

    def loss(v, cell):
        return jnp.sum(cell.apply(v, carry, x)[1])

    assert_trees_equal(
        jax.grad(loss)(variables, cell), jax.grad(loss)(variables, rnnlib.GRUCell(features=3))
    )


# -- static initialize_carry ----------------------------------------------------------------


@settings(max_examples=25, deadline=None)
@given(
    batch_dims=st.lists(st.integers(0, 4), max_size=3).map(tuple),
    size=st.integers(1, 6),
    name=st.sampled_from(sorted(DENSE)),
)
def test_dense_initialize_carry_is_shaped_batch_dims_plus_size(batch_dims, size, name):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        carry = DENSE[name][0].initialize_carry(jax.random.PRNGKey(0), batch_dims, size)
    leaves = jax.tree_util.tree_leaves(carry)
    assert len(leaves) == (1 if name == "GRUCell" else 2)
    for leaf in leaves:
        assert leaf.shape == batch_dims + (size,)
        assert leaf.dtype == jnp.float32
        assert not np.any(np.asarray(leaf))


@settings(max_examples=25, deadline=None)
@given(
    batch_dims=st.lists(st.integers(0, 4), max_size=2).map(tuple),
    size=st.lists(st.integers(1, 5), min_size=2, max_size=4).map(tuple),
)
def test_conv_lstm_initialize_carry_is_shaped_batch_dims_plus_size(batch_dims, size):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        c, h = legacy.ConvLSTMCell.initialize_carry(jax.random.PRNGKey(0), batch_dims, size)
    assert c.shape == h.shape == batch_dims + size


def recording_init(record):
    """An init_fn that notes the key it was given and returns that key's first word."""

    def init(key, shape):
        record.append(np.asarray(jax.random.key_data(key) if _typed(key) else key))
        return jnp.full(shape, float(record[-1].ravel()[0] % 1000), jnp.float32)

    return init


def _typed(key):
    return jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key)


@pytest.mark.parametrize("name", ["LSTMCell", "OptimizedLSTMCell", "ConvLSTMCell"])
def test_pair_carries_split_the_key_first_for_c_then_for_h(name):
    cls = legacy.ConvLSTMCell if name == "ConvLSTMCell" else DENSE[name][0]
    size = (4, 3) if name == "ConvLSTMCell" else 3
    rng = jax.random.PRNGKey(7)
    record = []
    c, h = cls.initialize_carry(rng, (2,), size, recording_init(record))
    key_c, key_h = jax.random.split(rng)
    np.testing.assert_array_equal(record[0], np.asarray(key_c))
    np.testing.assert_array_equal(record[1], np.asarray(key_h))
    assert not np.array_equal(np.asarray(c), np.asarray(h))


def test_gru_carry_uses_the_key_whole():
    rng = jax.random.PRNGKey(7)
    record = []
    legacy.GRUCell.initialize_carry(rng, (2,), 3, recording_init(record))
    assert len(record) == 1
    np.testing.assert_array_equal(record[0], np.asarray(rng))


def test_initialize_carry_with_a_random_init_fn_matches_the_new_cells_carry_init():
    # The new LSTMCell also splits its key into (c, h); with the same initializer the
    # old and the new carries are the same arrays.
    rng = jax.random.PRNGKey(3)
    init = jax.nn.initializers.normal(1.0)
    old = legacy.LSTMCell.initialize_carry(rng, (2,), 3, init)
    new = rnnlib.LSTMCell(features=3, carry_init=init).initialize_carry(rng, (2, 5))
    assert_trees_equal(old, new)
    old_h = legacy.GRUCell.initialize_carry(rng, (2,), 3, init)
    new_h = rnnlib.GRUCell(features=3, carry_init=init).initialize_carry(rng, (2, 5))
    assert_trees_equal(old_h, new_h)


def test_initialize_carry_accepts_a_new_style_typed_key():
    c, h = legacy.LSTMCell.initialize_carry(jax.random.key(0), (2,), 3, normal_carry)
    assert c.shape == h.shape == (2, 3)


def test_initialize_carry_is_a_static_method():
    for cls in (legacy.LSTMCell, legacy.OptimizedLSTMCell, legacy.GRUCell, legacy.ConvLSTMCell):
        assert isinstance(cls.__dict__["initialize_carry"], staticmethod)


# -- RNN and Bidirectional: the same variables give the same numbers ------------------------

RNN_OPTIONS = {
    "plain": {},
    "return_carry": dict(return_carry=True),
    "reverse": dict(reverse=True),
    "reverse_keep_order": dict(reverse=True, keep_order=True),
    "time_major": dict(time_major=True),
}


@pytest.mark.parametrize("name", DENSE)
@pytest.mark.parametrize("options", RNN_OPTIONS)
def test_rnn_matches_new_rnn_given_the_same_variables(name, options):
    old_cls, new_cls = DENSE[name]
    fields = RNN_OPTIONS[options]
    x = jax.random.normal(
        jax.random.PRNGKey(1), (5, 3, 4) if fields.get("time_major") else (3, 5, 4)
    )
    old = legacy.RNN(old_cls(), 6, **fields)
    variables = old.init(jax.random.PRNGKey(2), x)
    new = rnnlib.RNN(new_cls(features=6), **fields)
    assert_trees_equal(variables, new.init(jax.random.PRNGKey(2), x))
    assert_trees_equal(old.apply(variables, x), new.apply(variables, x))


@pytest.mark.parametrize("name", DENSE)
def test_rnn_with_seq_lengths_and_initial_carry_matches_new_rnn(name):
    old_cls, new_cls = DENSE[name]
    k_x, k_init, k_carry = keys(3, seed=4)
    x = jax.random.normal(k_x, (2, 3, 6, 4))  # two batch dims
    lengths = jnp.array([[6, 2, 0], [1, 5, 3]])
    carry = old_cls.initialize_carry(k_carry, (2, 3), 5, normal_carry)
    old, new = legacy.RNN(old_cls(), cell_size=5), rnnlib.RNN(new_cls(features=5))
    variables = old.init(k_init, x)
    for kwargs in (
        dict(seq_lengths=lengths, return_carry=True),
        dict(seq_lengths=lengths, reverse=True, keep_order=True, return_carry=True),
        dict(initial_carry=carry, return_carry=True),
        dict(initial_carry=carry, seq_lengths=lengths, return_carry=True),
    ):
        assert_trees_equal(old.apply(variables, x, **kwargs), new.apply(variables, x, **kwargs))


def test_rnn_builds_its_carry_from_cell_size_and_init_key_with_zeros():
    x = jnp.ones((2, 5, 4))
    rnn = legacy.RNN(legacy.LSTMCell(), cell_size=3, return_carry=True)
    variables = rnn.init(jax.random.PRNGKey(0), x)
    default = rnn.apply(variables, x)
    zeros = (jnp.zeros((2, 3)), jnp.zeros((2, 3)))
    assert_trees_equal(default, rnn.apply(variables, x, initial_carry=zeros))
    assert_trees_equal(default, rnn.apply(variables, x, init_key=jax.random.PRNGKey(9)))


def test_rnn_accepts_seq_lengths_without_return_carry():
    # Flax 0.6.11 crashed here (its scan expected a (carry, output) pair).
    x = jax.random.normal(jax.random.PRNGKey(0), (3, 5, 4))
    lengths = jnp.array([5, 2, 4])
    rnn = legacy.RNN(legacy.GRUCell(), cell_size=6)
    variables = rnn.init(jax.random.PRNGKey(1), x)
    outputs = rnn.apply(variables, x, seq_lengths=lengths)
    _, with_carry = rnn.apply(variables, x, seq_lengths=lengths, return_carry=True)
    assert outputs.shape == (3, 5, 6)
    assert_trees_equal(outputs, with_carry)
    reversed_outputs = rnn.apply(variables, x, seq_lengths=lengths, reverse=True)
    new = rnnlib.RNN(rnnlib.GRUCell(features=6))
    assert_trees_equal(reversed_outputs, new.apply(variables, x, seq_lengths=lengths, reverse=True))


def test_rnn_returns_the_initial_carry_for_a_sequence_of_length_zero():
    # Flax 0.6.11 indexed step -1 here, returning the carry after the last padded step.
    x = jax.random.normal(jax.random.PRNGKey(0), (2, 4, 3))
    rnn = legacy.RNN(legacy.GRUCell(), cell_size=5, return_carry=True)
    variables = rnn.init(jax.random.PRNGKey(1), x)
    start = legacy.GRUCell.initialize_carry(jax.random.PRNGKey(2), (2,), 5, normal_carry)
    carry, _ = rnn.apply(variables, x, initial_carry=start, seq_lengths=jnp.array([0, 4]))
    np.testing.assert_array_equal(np.asarray(carry[0]), np.asarray(start[0]))


@pytest.mark.parametrize("options", ["plain", "return_carry", "reverse_keep_order"])
def test_conv_lstm_rnn_matches_new_rnn_given_the_same_variables(options):
    fields = RNN_OPTIONS[options]
    x = jax.random.normal(jax.random.PRNGKey(1), (2, 3, 5, 4, 2))  # (batch, time, h, w, c)
    old = legacy.RNN(legacy.ConvLSTMCell(3, kernel_size=(3, 3)), cell_size=(5, 4, 3), **fields)
    new = rnnlib.RNN(rnnlib.ConvLSTMCell(3, kernel_size=(3, 3)), **fields)
    variables = old.init(jax.random.PRNGKey(2), x)
    assert_trees_equal(variables, new.init(jax.random.PRNGKey(2), x))
    out = old.apply(variables, x)
    assert_trees_equal(out, new.apply(variables, x))
    assert jax.tree_util.tree_leaves(out)[-1].shape == (2, 3, 5, 4, 3)


def make_bidirectional(lib, cells, **fields):
    if lib is legacy:
        return legacy.Bidirectional(
            legacy.RNN(cells[0](), cell_size=5), legacy.RNN(cells[1](), cell_size=4), **fields
        )
    return rnnlib.Bidirectional(
        rnnlib.RNN(cells[0](features=5)), rnnlib.RNN(cells[1](features=4)), **fields
    )


@pytest.mark.parametrize("fields", [{}, dict(return_carry=True), dict(time_major=True)])
def test_bidirectional_matches_new_bidirectional_given_the_same_variables(fields):
    shape = (6, 3, 4) if fields.get("time_major") else (3, 6, 4)
    x = jax.random.normal(jax.random.PRNGKey(0), shape)
    old = make_bidirectional(legacy, (legacy.LSTMCell, legacy.GRUCell), **fields)
    new = make_bidirectional(rnnlib, (rnnlib.LSTMCell, rnnlib.GRUCell), **fields)
    variables = old.init(jax.random.PRNGKey(1), x)
    assert_trees_equal(variables, new.init(jax.random.PRNGKey(1), x))
    assert_trees_equal(old.apply(variables, x), new.apply(variables, x))
    lengths = jnp.array([6, 1, 4])
    assert_trees_equal(
        old.apply(variables, x, seq_lengths=lengths), new.apply(variables, x, seq_lengths=lengths)
    )


def test_bidirectional_with_one_cell_object_shares_its_parameters_under_forward_rnn():
    cell = legacy.GRUCell()
    bi = legacy.Bidirectional(legacy.RNN(cell, 4), legacy.RNN(cell, 4), return_carry=True)
    x = jax.random.normal(jax.random.PRNGKey(0), (2, 5, 3))
    variables = bi.init(jax.random.PRNGKey(1), x)
    assert sorted(variables["params"]) == ["forward_rnn"]
    shared = rnnlib.GRUCell(features=4)
    new = rnnlib.Bidirectional(rnnlib.RNN(shared), rnnlib.RNN(shared), return_carry=True)
    assert_trees_equal(bi.apply(variables, x), new.apply(variables, x))


def test_bidirectional_initial_carry_and_init_key_match_new_bidirectional():
    x = jax.random.normal(jax.random.PRNGKey(0), (2, 5, 3))
    old = make_bidirectional(legacy, (legacy.LSTMCell, legacy.GRUCell), return_carry=True)
    new = make_bidirectional(rnnlib, (rnnlib.LSTMCell, rnnlib.GRUCell), return_carry=True)
    variables = old.init(jax.random.PRNGKey(1), x)
    start = (
        legacy.LSTMCell.initialize_carry(jax.random.PRNGKey(2), (2,), 5, normal_carry),
        legacy.GRUCell.initialize_carry(jax.random.PRNGKey(3), (2,), 4, normal_carry),
    )
    assert_trees_equal(
        old.apply(variables, x, initial_carry=start), new.apply(variables, x, initial_carry=start)
    )
    key = jax.random.PRNGKey(5)
    assert_trees_equal(old.apply(variables, x, init_key=key), new.apply(variables, x, init_key=key))


# -- the FLIP 3099 example ------------------------------------------------------------------


def test_flip_3099_conv_lstm_example_fails_at_the_sum_with_both_shapes():
    key1, key2 = jax.random.split(jax.random.PRNGKey(0))
    carry = legacy.ConvLSTMCell.initialize_carry(key1, (16,), (64, 64, 16))
    cell = legacy.ConvLSTMCell(features=6, kernel_size=(3, 3))
    with pytest.raises(TypeError) as raised:
        cell.init_with_output(key2, carry, jnp.ones((2, 4, 4, 3)))
    message = str(raised.value)
    assert message.startswith("add got incompatible shapes for broadcasting")
    assert "(2, 4, 4, 24), (16, 64, 64, 24)" in message
    assert "initialize_carry(rng, batch_dims, size)" in message


def test_flip_3099_conv_lstm_example_runs_once_the_carry_is_fixed():
    key1, key2 = jax.random.split(jax.random.PRNGKey(0))
    carry = legacy.ConvLSTMCell.initialize_carry(key1, (2,), (4, 4, 6))
    cell = legacy.ConvLSTMCell(features=6, kernel_size=(3, 3))
    ((c, h), y), variables = cell.init_with_output(key2, carry, jnp.ones((2, 4, 4, 3)))
    assert c.shape == h.shape == y.shape == (2, 4, 4, 6)
    assert variables["params"]["hh"]["kernel"].shape == (3, 3, 6, 24)
    new = rnnlib.ConvLSTMCell(features=6, kernel_size=(3, 3))
    assert_trees_equal(((c, h), y), new.apply(variables, carry, jnp.ones((2, 4, 4, 3))))


def test_dense_cell_with_a_carry_for_another_batch_fails_at_the_sum_like_0_6_11():
    # 0.6.11 added gate by gate, (2, 4) + (16, 4); so does a cell's own step in rnnlib.
    carry = legacy.LSTMCell.initialize_carry(jax.random.PRNGKey(0), (16,), 4)
    with pytest.raises(TypeError, match=re.escape("(2, 4), (16, 4)")):
        legacy.LSTMCell().init(jax.random.PRNGKey(1), carry, jnp.ones((2, 3)))


# -- warnings -------------------------------------------------------------------------------


def warns(match):
    return pytest.warns(DeprecationWarning, match=re.escape(match))


def test_static_initialize_carry_warns_with_the_new_call_and_the_callers_numbers():
    rng = jax.random.PRNGKey(0)
    with warns("LSTMCell(features=64).initialize_carry(rng, (16, <input channels>))") as record:
        legacy.LSTMCell.initialize_carry(rng, (16,), 64)
    assert record[0].filename == __file__  # it points at the caller's line
    with warns("OptimizedLSTMCell(features=8).initialize_carry(rng, (4, 2, <input channels>))"):
        legacy.OptimizedLSTMCell.initialize_carry(rng, (4, 2), 8)
    with warns("GRUCell(features=32).initialize_carry(rng, (<input channels>,))") as record:
        legacy.GRUCell.initialize_carry(rng, (), 32)
    assert record[0].filename == __file__
    with warns(
        "ConvLSTMCell(features=16, kernel_size=<kernel_size>).initialize_carry(rng, "
        "(16, 64, 64, <input channels>))"
    ):
        legacy.ConvLSTMCell.initialize_carry(rng, (16,), (64, 64, 16))
    with warns("GRUCell(features=3, carry_init=<your init_fn>)"):
        legacy.GRUCell.initialize_carry(rng, (2,), 3, normal_carry)


def test_building_legacy_modules_warns_with_the_new_call():
    with warns("the new API is LSTMCell(features=<hidden size>)") as record:
        cell = legacy.LSTMCell()
    assert record[0].filename == __file__
    with warns("GRUCell(features=<hidden size>, gate_fn=hard_sigmoid)"):
        legacy.GRUCell(gate_fn=jax.nn.hard_sigmoid)
    with warns("ConvLSTMCell(features=6, kernel_size=(3, 3)), the same constructor") as record:
        legacy.ConvLSTMCell(features=6, kernel_size=(3, 3))
    assert record[0].filename == __file__
    with warns(
        "RNN(LSTMCell(), cell_size=64) is the Flax <= 0.6.11 API; the new API is "
        "RNN(LSTMCell(features=64))"
    ) as record:
        rnn = legacy.RNN(cell, cell_size=64)
    assert record[0].filename == __file__
    with warns("RNN(GRUCell(features=8), return_carry=True, reverse=True)"):
        legacy.RNN(legacy.GRUCell(), 8, return_carry=True, reverse=True)
    with warns("RNN(ConvLSTMCell(features=6, kernel_size=(3, 3)))"):
        legacy.RNN(legacy.ConvLSTMCell(6, kernel_size=(3, 3)), cell_size=(4, 4, 6))
    with warns("Bidirectional(RNN(LSTMCell(features=64)), RNN(LSTMCell(features=64)))") as record:
        legacy.Bidirectional(rnn, rnn)
    assert record[0].filename == __file__


def test_applying_legacy_modules_does_not_warn_again():
    x = jnp.ones((2, 5, 3))
    rnn = legacy.RNN(legacy.LSTMCell(), cell_size=4)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        rnn.apply(rnn.init(jax.random.PRNGKey(0), x), x)


# -- errors ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "cls, batch_dims, size, error, match",
    [
        (legacy.LSTMCell, 16, 64, TypeError, "batch_dims as a tuple of ints >= 0, such as (16,)"),
        (legacy.GRUCell, (16,), (64,), TypeError, "the hidden width, an int such as 64; got (64,)"),
        (legacy.LSTMCell, (16,), 0, ValueError, "size >= 1 (the hidden width); got 0"),
        (legacy.ConvLSTMCell, (16,), 16, TypeError, "size = signal dims + (features,)"),
        (legacy.ConvLSTMCell, (16,), (16,), ValueError, "at least two ints >= 1"),
        (legacy.GRUCell, (2, -1), 3, TypeError, "got (2, -1) (tuple)"),
    ],
)
def test_initialize_carry_rejects_malformed_arguments(cls, batch_dims, size, error, match):
    with pytest.raises(error, match=re.escape(match)):
        cls.initialize_carry(jax.random.PRNGKey(0), batch_dims, size)


def test_rnn_rejects_a_new_api_cell():
    with pytest.raises(TypeError, match=re.escape("rnnlib.RNN(LSTMCell(features=4)), without")):
        legacy.RNN(rnnlib.LSTMCell(features=4), cell_size=4)


@pytest.mark.parametrize(
    "cell, cell_size, error, match",
    [
        (legacy.LSTMCell, (64,), TypeError, "cell_size to be the hidden width, an int"),
        (legacy.GRUCell, 0, ValueError, "cell_size >= 1"),
        (lambda: legacy.ConvLSTMCell(6, (3, 3)), 6, TypeError, "cell_size = signal dims"),
        (lambda: legacy.ConvLSTMCell(6, (3, 3)), (4, 6), ValueError, "2 signal dims + (features,)"),
        (lambda: legacy.ConvLSTMCell(6, (3, 3)), (4, 4, 5), ValueError, "got (4, 4, 5)"),
    ],
)
def test_rnn_rejects_a_cell_size_that_cannot_fit_the_cell(cell, cell_size, error, match):
    with pytest.raises(error, match=re.escape(match)):
        legacy.RNN(cell(), cell_size=cell_size)


def test_rnn_rejects_flags_that_are_not_bools_and_a_bad_unroll():
    with pytest.raises(
        TypeError, match=re.escape("legacy.RNN expects reverse to be a bool; got 1")
    ):
        legacy.RNN(legacy.LSTMCell(), 4, reverse=1)
    with pytest.raises(ValueError, match=re.escape("unroll >= 1")):
        legacy.RNN(legacy.LSTMCell(), 4, unroll=0)


def test_conv_lstm_rnn_names_the_cell_size_that_fits_the_input():
    rnn = legacy.RNN(legacy.ConvLSTMCell(6, (3, 3)), cell_size=(32, 32, 6))
    with pytest.raises(ValueError, match=re.escape("use cell_size=(4, 4, 6)")):
        rnn.init(jax.random.PRNGKey(0), jnp.ones((2, 5, 4, 4, 3)))


def test_rnn_rejects_an_input_without_a_time_axis():
    rnn = legacy.RNN(legacy.LSTMCell(), cell_size=4)
    with pytest.raises(ValueError, match=r"got shape \(3,\), which has no time axis"):
        rnn.init(jax.random.PRNGKey(0), jnp.ones((3,)))


@pytest.mark.parametrize(
    "cell, carry, match",
    [
        (legacy.LSTMCell, jnp.zeros((2, 4)), "carry as a pair (c, h) of arrays"),
        (
            legacy.GRUCell,
            (jnp.zeros((2, 4)), jnp.zeros((2, 4))),
            "expects the carry h, one array shaped batch_dims + (size,) as GRUCell.initialize_carry returns; got a tuple of length 2",
        ),
        (lambda: legacy.ConvLSTMCell(4, (3,)), jnp.zeros((2, 5, 4)), "carry as a pair (c, h)"),
    ],
)
def test_cells_reject_a_carry_of_the_wrong_structure(cell, carry, match):
    with pytest.raises(TypeError, match=re.escape(match)):
        cell().init(jax.random.PRNGKey(0), carry, jnp.ones((2, 3)))


def test_cells_reject_a_carry_without_axes():
    with pytest.raises(ValueError, match=re.escape("got h with shape (), which has no axes")):
        legacy.GRUCell().init(jax.random.PRNGKey(0), jnp.zeros(()), jnp.ones((2, 3)))


def test_cells_reject_variables_made_for_another_width():
    carry = legacy.LSTMCell.initialize_carry(jax.random.PRNGKey(0), (2,), 4)
    x = jnp.ones((2, 3))
    variables = legacy.LSTMCell().init(jax.random.PRNGKey(1), carry, x)
    wider = legacy.LSTMCell.initialize_carry(jax.random.PRNGKey(0), (2,), 5)
    with pytest.raises(
        ValueError, match=r"expects params/h\w/\w+ with shape \(5,.*hold shape \(4,"
    ):
        legacy.LSTMCell().apply(variables, wider, x)


def test_conv_lstm_cell_rejects_a_malformed_kernel_size_when_built():
    with pytest.raises(ValueError, match=re.escape("one positive int per spatial dim")):
        legacy.ConvLSTMCell(features=4, kernel_size=(3, 0))


def test_bidirectional_rejects_a_cell_in_place_of_an_rnn():
    with pytest.raises(TypeError, match=re.escape("expects forward_rnn to be an RNN")):
        legacy.Bidirectional(legacy.LSTMCell(), legacy.RNN(legacy.LSTMCell(), 4))
