"""The init/apply convention, reprs, parameter sharing and the layout helper."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from flax.core import freeze

from rnnlib import (
    RNN,
    Bidirectional,
    ConvLSTMCell,
    GRUCell,
    LSTMCell,
    MGUCell,
    OptimizedLSTMCell,
    SimpleCell,
    layout,
)
from tests.tolerance import assert_close, recurrent_terms

X = jax.random.normal(jax.random.key(1), (2, 5, 3))  # (batch, time, channels)


def _leaves_equal(a, b):
    return all(jax.tree_util.tree_leaves(jax.tree_util.tree_map(np.array_equal, a, b)))


@pytest.mark.parametrize("make_key", [jax.random.key, jax.random.PRNGKey])
def test_typed_and_raw_keys_give_the_same_parameters(make_key):
    rnn = RNN(LSTMCell(features=4))
    reference = rnn.init(jax.random.key(7), X)
    variables = rnn.init(make_key(7), X)
    assert _leaves_equal(variables, reference)


def test_a_flax_style_rngs_dict_is_accepted_by_init():
    rnn = RNN(GRUCell(features=4))
    assert _leaves_equal(rnn.init({"params": jax.random.key(3)}, X), rnn.init(jax.random.key(3), X))


def test_apply_accepts_a_frozen_dict():
    rnn = RNN(GRUCell(features=4))
    variables = rnn.init(jax.random.key(0), X)
    # Frozen or not, the variables feed one computation: the same bits.
    np.testing.assert_array_equal(rnn.apply(freeze(variables), X), rnn.apply(variables, X))


def test_init_with_output_returns_what_apply_computes_with_the_new_variables():
    rnn = RNN(MGUCell(features=4), return_carry=True)
    (carry, y), variables = rnn.init_with_output(jax.random.key(0), X)
    carry2, y2 = rnn.apply(variables, X)
    # init_with_output's output is apply's computation on the same variables: the same bits.
    np.testing.assert_array_equal(y, y2)
    assert _leaves_equal(carry, carry2)


def test_different_keys_give_different_parameters():
    rnn = RNN(SimpleCell(features=4))
    a = rnn.init(jax.random.key(0), X)["params"]["cell"]["i"]["kernel"]
    b = rnn.init(jax.random.key(1), X)["params"]["cell"]["i"]["kernel"]
    assert not np.allclose(a, b)


def test_every_parameter_of_a_cell_gets_its_own_random_values():
    kernels = RNN(LSTMCell(features=4)).init(jax.random.key(0), X)["params"]["cell"]
    inputs = [np.asarray(kernels[name]["kernel"]) for name in ("ii", "if", "ig", "io")]
    for i in range(4):
        for j in range(i + 1, 4):
            assert not np.allclose(inputs[i], inputs[j])


def test_param_dtype_sets_the_dtype_of_parameters_and_of_the_initial_carry():
    # The default recurrent initializer draws in float32 and casts: jax's own orthogonal
    # initializer (and so Flax's linen cells) cannot run a bfloat16 QR on CPU.
    cell = GRUCell(features=4, param_dtype=jnp.bfloat16)
    carry = cell.initialize_carry(jax.random.key(0), (2, 3))
    variables = cell.init(jax.random.key(0), carry, jnp.ones((2, 3), jnp.bfloat16))
    assert carry.dtype == jnp.bfloat16
    assert {x.dtype for x in jax.tree_util.tree_leaves(variables)} == {jnp.dtype(jnp.bfloat16)}


@pytest.mark.parametrize("cls", [LSTMCell, GRUCell, MGUCell, SimpleCell])
def test_default_recurrent_kernels_are_orthogonal_in_every_dtype(cls):
    for dtype in (jnp.float32, jnp.bfloat16):
        cell = cls(features=5, param_dtype=dtype)
        params = cell.create_params(jax.random.key(0), (2, 3))
        name = {"LSTMCell": "hi", "GRUCell": "hr", "MGUCell": "hf", "SimpleCell": "h"}[cls.__name__]
        kernel = np.asarray(params[name]["kernel"], np.float32)
        assert params[name]["kernel"].dtype == dtype
        # Orthogonal up to rounding: QR and this product sum about 5 * 5 terms per element,
        # and a bfloat16 kernel was rounded to bfloat16's epsilon.
        assert_close(kernel.T @ kernel, jnp.eye(5, dtype=dtype), terms=kernel.size)


def test_repr_shows_required_fields_and_the_ones_changed_from_defaults():
    assert repr(LSTMCell(4)) == "LSTMCell(features=4)"
    assert repr(SimpleCell(3, residual=True)) == "SimpleCell(features=3, residual=True)"
    assert repr(RNN(GRUCell(2), reverse=True)) == "RNN(cell=GRUCell(features=2), reverse=True)"
    assert (
        repr(GRUCell(2, gate_fn=jax.nn.hard_sigmoid)) == "GRUCell(features=2, gate_fn=hard_sigmoid)"
    )


def test_cells_with_equal_configuration_are_equal_and_hashable():
    assert LSTMCell(4) == LSTMCell(4)
    assert hash(ConvLSTMCell(2, [3, 3])) == hash(ConvLSTMCell(2, (3, 3)))
    assert ConvLSTMCell(2, [3]).kernel_size == (3,)


def test_optimized_lstm_cell_is_an_lstm_cell_with_the_same_numbers():
    x = X[:, 0]
    carry = LSTMCell(4).initialize_carry(jax.random.key(0), x.shape)
    variables = LSTMCell(4).init(jax.random.key(0), carry, x)
    a = LSTMCell(4).apply(variables, carry, x)
    b = OptimizedLSTMCell(4).apply(variables, carry, x)
    assert isinstance(OptimizedLSTMCell(4), LSTMCell)
    assert _leaves_equal(a, b)  # one class under two names: one computation, the same bits


@pytest.mark.parametrize("same", ["rnn", "cell"])
def test_bidirectional_directions_sharing_a_cell_share_one_parameter_set(same):
    cell = GRUCell(features=4)
    rnn = RNN(cell)
    bi = Bidirectional(rnn, rnn) if same == "rnn" else Bidirectional(RNN(cell), RNN(cell))
    variables = bi.init(jax.random.key(0), X)
    assert bi.shares_parameters
    assert list(variables["params"]) == ["forward_rnn"]
    # The backward direction reads the forward parameters: it equals a hand-run reverse pass.
    backward = rnn.apply(
        {"params": variables["params"]["forward_rnn"]}, X, reverse=True, keep_order=True
    )
    assert_close(
        bi.apply(variables, X)[..., 4:], backward, terms=recurrent_terms(cell, X.shape, steps=5)
    )


def test_bidirectional_with_equal_but_distinct_cells_keeps_two_parameter_sets():
    bi = Bidirectional(RNN(GRUCell(4)), RNN(GRUCell(4)))
    variables = bi.init(jax.random.key(0), X)
    assert sorted(variables["params"]) == ["backward_rnn", "forward_rnn"]
    forward, backward = variables["params"]["forward_rnn"], variables["params"]["backward_rnn"]
    assert not np.allclose(forward["cell"]["ir"]["kernel"], backward["cell"]["ir"]["kernel"])


def test_rnn_promotes_a_float32_carry_to_complex_inputs():
    rnn = RNN(GRUCell(features=4))
    x = (X + 1j * X[::-1]).astype(jnp.complex64)
    variables = rnn.init(jax.random.key(0), X)
    carry, y = rnn.apply(variables, x, return_carry=True)
    assert y.dtype == jnp.complex64 and carry.dtype == jnp.complex64
    # Step by step with the cell gives the same numbers.
    h = jnp.zeros((2, 4), jnp.complex64)
    for t in range(x.shape[1]):
        h, _ = GRUCell(4).apply({"params": variables["params"]["cell"]}, h, x[:, t])
    assert_close(carry, h, terms=recurrent_terms(GRUCell(4), x.shape, steps=x.shape[1]))


@pytest.mark.parametrize(
    "module, shape, time_major, roles, carry",
    [
        (LSTMCell(4), (2, 3), False, ("batch", "channels"), ((2, 4), (2, 4))),
        (RNN(GRUCell(4)), (6, 2, 5, 3), False, ("batch", "batch", "time", "channels"), (6, 2, 4)),
        (RNN(GRUCell(4)), (5, 2, 3), True, ("time", "batch", "channels"), (2, 4)),
        (
            RNN(ConvLSTMCell(6, kernel_size=(3, 3))),
            (16, 10, 64, 64, 3),
            False,
            ("batch", "time", "signal", "signal", "channels"),
            ((16, 64, 64, 6), (16, 64, 64, 6)),
        ),
        (
            RNN(ConvLSTMCell(2, kernel_size=(3, 3, 3))),
            (4, 5, 6, 7, 3),
            False,
            ("time", "signal", "signal", "signal", "channels"),
            ((5, 6, 7, 2), (5, 6, 7, 2)),
        ),
    ],
)
def test_layout_assigns_each_axis_its_role(module, shape, time_major, roles, carry):
    result = layout(module, shape, time_major=time_major)
    assert result.roles == roles
    assert result.carry_shapes == carry
    assert result.batch_dims == tuple(n for n, r in zip(shape, roles) if r == "batch")
    assert result.signal_dims == tuple(n for n, r in zip(shape, roles) if r == "signal")
    assert result.num_feature_axes == len(shape) - roles.index("channels") + sum(
        r == "signal" for r in roles
    )


def test_layout_reports_the_output_shape_the_module_produces():
    bi = Bidirectional(RNN(GRUCell(4)), RNN(LSTMCell(5)))
    result = layout(bi, (3, 7, 2))
    variables = bi.init(jax.random.key(0), jnp.ones((3, 7, 2)))
    assert result.output_shape == bi.apply(variables, jnp.ones((3, 7, 2))).shape == (3, 7, 9)
    assert result.carry_shapes == ((3, 4), ((3, 5), (3, 5)))


@pytest.mark.pinned_env
def test_layout_repr_and_plot_show_every_axis():
    import matplotlib

    matplotlib.use("Agg")
    result = layout(RNN(ConvLSTMCell(6, kernel_size=(3, 3))), (16, 10, 64, 64, 3))
    text = repr(result)
    assert "axis 1  size 10  time" in text and "signal_dims=(64, 64)" in text
    ax = result.plot()
    labels = [t.get_text() for t in ax.texts]
    assert labels.count("signal") == 2 and "time" in labels and "axis 4" in labels


class _ReadersCell(nn.RNNCellBase):
    """A reader's own flax.linen cell: layout needs only its num_feature_axes."""

    features: int

    @nn.compact
    def __call__(self, carry, x):
        h = jnp.tanh(nn.Dense(self.features)(x) + carry)
        return h, h

    def initialize_carry(self, rng, input_shape):
        return jnp.zeros((*input_shape[:-1], self.features))

    @property
    def num_feature_axes(self):
        return 1


def _flax_twins():
    """``{name: (flax module, the rnnlib module with the same configuration, shape)}``."""
    rngs = nnx.Rngs(0)

    def nnx_rnn(features, **fields):
        return nnx.RNN(nnx.GRUCell(3, features, rngs=rngs), rngs=rngs, **fields)

    return {
        "linen-cell": (nn.LSTMCell(4), LSTMCell(4), (2, 3)),
        "linen-rnn-conv": (
            nn.RNN(nn.ConvLSTMCell(6, (3, 3))),
            RNN(ConvLSTMCell(6, (3, 3))),
            (2, 4, 8, 8, 3),
        ),
        "linen-rnn-time_major": (
            nn.RNN(nn.GRUCell(4), time_major=True),
            RNN(GRUCell(4), time_major=True),
            (5, 2, 3),
        ),
        "linen-bidirectional": (
            nn.Bidirectional(nn.RNN(nn.GRUCell(4)), nn.RNN(nn.LSTMCell(5))),
            Bidirectional(RNN(GRUCell(4)), RNN(LSTMCell(5))),
            (3, 7, 2),
        ),
        "linen-readers-cell": (nn.RNN(_ReadersCell(7)), RNN(SimpleCell(7)), (4, 6, 3)),
        "nnx-cell": (nnx.LSTMCell(3, 4, rngs=rngs), LSTMCell(4), (2, 3)),
        "nnx-rnn": (nnx_rnn(4), RNN(GRUCell(4)), (6, 2, 5, 3)),
        "nnx-bidirectional": (
            nnx.Bidirectional(nnx_rnn(4), nnx_rnn(5), rngs=rngs),
            Bidirectional(RNN(GRUCell(4)), RNN(GRUCell(5))),
            (2, 5, 3),
        ),
    }


@pytest.mark.parametrize("name", list(_flax_twins()))
def test_layout_reads_flax_modules_as_it_reads_the_same_rnnlib_module(name):
    flax_module, twin, shape = _flax_twins()[name]
    got, want = layout(flax_module, shape), layout(twin, shape)
    assert got.module.startswith("flax.nnx." if name.startswith("nnx") else "flax.linen.")
    for field in ("roles", "time_axis", "signal_dims", "channels", "carry_shapes"):
        assert getattr(got, field) == getattr(want, field), field
    # The output shape is the one the Flax module itself produces.
    x = jnp.ones(shape)
    if name.startswith("nnx"):
        out = (
            flax_module(x)
            if got.time_axis is not None
            else flax_module(flax_module.initialize_carry(shape, rngs=nnx.Rngs(1)), x)[1]
        )
    elif got.time_axis is None:
        carry = flax_module.initialize_carry(jax.random.key(0), shape)
        out = flax_module.init_with_output(jax.random.key(0), carry, x)[0][1]
    else:
        out = flax_module.init_with_output(jax.random.key(0), x)[0]
    assert got.output_shape == out.shape == want.output_shape


def test_layout_of_a_flax_rnn_follows_its_time_major_field_unless_told_otherwise():
    rnn = nn.RNN(nn.GRUCell(4), time_major=True)
    assert layout(rnn, (5, 2, 3)).roles == ("time", "batch", "channels")
    assert layout(rnn, (5, 2, 3), time_major=False).roles == ("batch", "time", "channels")
