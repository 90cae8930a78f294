"""rnnlib's Dropout and RecurrentDropoutCell against flax.linen, masks included.

Dropout in rnnlib draws its masks from the keys flax.linen's ``make_rng`` derives
(``rnnlib.dropout.linen_key``), so the same ``rngs`` give the same masks. Recurrent
dropout is checked two ways: through ``rngs`` against a flax.linen cell wrapper made of
``nn.Dropout`` submodules, and, independent of how either library draws keys, with one
fixed mask injected into both.
"""

import re

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rnnlib import RNN, GRUCell, LSTMCell, Plan, RNNCellBase
from rnnlib.dropout import Dropout, linen_key
from rnnlib.linear import Dense
from rnnlib.recurrent_dropout import RecurrentDropoutCell
from rnnlib.stacked import StackedRNN
from tests import tolerance
from tests.parity_helpers import random_array, random_like, random_variables

KEY = jax.random.key(0)
DROPOUT_KEY = jax.random.key(42)
# split_rngs of an nn.RNN whose cell drops values: the same dropout key at every step.
SAME_KEY_EVERY_STEP = {"params": False, "dropout": False}


def _raises(exc, *fragments):
    return pytest.raises(exc, match="(?s)" + "".join(f"(?=.*{re.escape(f)})" for f in fragments))


class LinenRecurrentDropout(nn.RNNCellBase):
    """The flax.linen cell wrapper rnnlib's RecurrentDropoutCell mirrors: dropout on the h
    the wrapped cell reads and on its input, one mask per sequence when its nn.RNN has
    split_rngs={'params': False, 'dropout': False}."""

    cell: nn.RNNCellBase
    recurrent_rate: float = 0.0
    input_rate: float = 0.0
    deterministic: bool = False

    @nn.compact
    def __call__(self, carry, x):
        drop_h = nn.Dropout(self.recurrent_rate, name="recurrent_dropout")
        drop_x = nn.Dropout(self.input_rate, name="input_dropout")
        if isinstance(carry, tuple):
            carry = (carry[0], drop_h(carry[1], deterministic=self.deterministic))
        else:
            carry = drop_h(carry, deterministic=self.deterministic)
        return self.cell(carry, drop_x(x, deterministic=self.deterministic))

    def initialize_carry(self, rng, input_shape):
        return self.cell.initialize_carry(rng, input_shape)

    @property
    def num_feature_axes(self):
        return self.cell.num_feature_axes


class LinenFixedMasks(nn.RNNCellBase):
    """A flax.linen cell wrapper that applies given masks (True = kept) at every step."""

    cell: nn.RNNCellBase
    recurrent_mask: jax.Array
    input_mask: jax.Array
    recurrent_rate: float
    input_rate: float

    @nn.compact
    def __call__(self, carry, x):
        c, h = carry
        h = jnp.where(self.recurrent_mask, h / (1 - self.recurrent_rate), 0.0)
        x = jnp.where(self.input_mask, x / (1 - self.input_rate), 0.0)
        return self.cell((c, h), x)

    def initialize_carry(self, rng, input_shape):
        return self.cell.initialize_carry(rng, input_shape)

    @property
    def num_feature_axes(self):
        return 1


def _terms(features, width, steps):
    return steps * (width + features + 1)


# -- Dropout --------------------------------------------------------------------------------


@pytest.mark.parametrize("broadcast_dims", [(), (0,), (-1,)])
def test_dropout_draws_the_same_mask_as_flax_from_the_same_rngs(broadcast_dims):
    x = random_array(0, (4, 6, 5))
    rngs = {"dropout": DROPOUT_KEY}
    got = Dropout(0.3, broadcast_dims=broadcast_dims).apply({}, x, deterministic=False, rngs=rngs)
    want = nn.Dropout(0.3, broadcast_dims=broadcast_dims).apply(
        {}, x, deterministic=False, rngs=rngs
    )
    # The same mask selects the same x / 0.7: one computation, done by both.
    tolerance.assert_identical(got, want)
    assert 0 < int((got == 0).sum()) < x.size


def test_dropout_keeps_the_mean_and_is_the_identity_when_deterministic():
    x = jnp.ones((20_000,))
    y = Dropout(0.25).apply({}, x, deterministic=False, rngs={"dropout": DROPOUT_KEY})
    assert set(np.unique(np.asarray(y)).tolist()) == {0.0, np.float32(1 / 0.75)}
    assert abs(float((y == 0).mean()) - 0.25) < 0.02
    tolerance.assert_identical(Dropout(0.25, deterministic=True).apply({}, x), x)


def test_linen_key_is_the_key_flax_gives_a_named_submodule():
    class Two(nn.Module):
        @nn.compact
        def __call__(self):
            return self.make_rng("dropout"), nn.Dropout(0.5, name="inner").make_rng("dropout")

    class Probe(nn.Module):
        @nn.compact
        def __call__(self):
            first = self.make_rng("dropout")
            second = self.make_rng("dropout")
            return first, second

    first, second = Probe().apply({}, rngs={"dropout": DROPOUT_KEY})
    for got, count in ((first, 1), (second, 2)):
        want = linen_key(DROPOUT_KEY, count)
        tolerance.assert_identical(jax.random.key_data(got), jax.random.key_data(want))


@pytest.mark.parametrize("rate", [-0.1, 1.0, 1.5])
def test_dropout_rate_outside_zero_to_one_is_rejected(rate):
    with _raises(ValueError, "rate in [0, 1)", repr(rate)):
        Dropout(rate)
    with _raises(ValueError, "recurrent_rate in [0, 1)"):
        RecurrentDropoutCell(LSTMCell(4), recurrent_rate=rate)
    with _raises(ValueError, "input_rate in [0, 1)"):
        RecurrentDropoutCell(LSTMCell(4), input_rate=rate)


def test_dropout_rate_that_is_not_a_number_is_a_type_error():
    with _raises(TypeError, "rate to be a number", "'0.5'"):
        Dropout("0.5")


def test_dropout_without_a_dropout_key_says_how_to_pass_one():
    x = jnp.ones((3,))
    with _raises(ValueError, "rngs={'dropout': jax.random.key(seed)}", "got no rngs"):
        Dropout(0.5).apply({}, x, deterministic=False)
    with _raises(ValueError, "rngs={'dropout'", "got rngs with keys ['params']"):
        Dropout(0.5).apply({}, x, deterministic=False, rngs={"params": KEY})
    with _raises(TypeError, "rngs['dropout'] to be a PRNG key"):
        Dropout(0.5).apply({}, x, deterministic=False, rngs={"dropout": 3})


def test_deterministic_must_be_given_exactly_once():
    x = jnp.ones((3,))
    with _raises(ValueError, "needs deterministic=True", "or deterministic=False"):
        Dropout(0.5).apply({}, x)
    with _raises(ValueError, "both as a field and at call time"):
        Dropout(0.5, deterministic=True).apply({}, x, deterministic=True)
    with _raises(TypeError, "deterministic to be a bool", "'yes'"):
        Dropout(0.5).apply({}, x, deterministic="yes")


# -- Recurrent dropout ------------------------------------------------------------------------


def _recurrent_twins(cell_name, features, recurrent_rate, input_rate):
    flax_cell = getattr(nn, cell_name)(features)
    flax_rnn = nn.RNN(
        LinenRecurrentDropout(flax_cell, recurrent_rate, input_rate),
        split_rngs=SAME_KEY_EVERY_STEP,
    )
    cell = RecurrentDropoutCell(
        {"LSTMCell": LSTMCell, "GRUCell": GRUCell}[cell_name](features),
        recurrent_rate=recurrent_rate,
        input_rate=input_rate,
    )
    return flax_rnn, StackedRNN((RNN(cell),))


@pytest.mark.parametrize(
    "cell_name, rates",
    [("LSTMCell", (0.3, 0.4)), ("GRUCell", (0.0, 0.4))],
    ids=["LSTM-h-and-x", "GRU-x"],
)
def test_recurrent_dropout_matches_a_flax_cell_wrapper_given_the_same_rngs(cell_name, rates):
    flax_rnn, stack = _recurrent_twins(cell_name, 4, *rates)
    x = random_array(1, (3, 6, 5))
    rngs = {"dropout": DROPOUT_KEY}

    # rnnlib's stack puts the layer under 'layers_0', so Flax's RNN goes there too.
    class Root(nn.Module):
        layers: tuple

        def __call__(self, x):
            return self.layers[0](x)

    root = Root((flax_rnn,))
    shapes = jax.eval_shape(lambda: root.init({"params": KEY, "dropout": KEY}, x))
    variables = random_like(2, shapes)
    want = jax.jit(lambda v, x: root.apply(v, x, rngs=rngs))(variables, x)
    got = jax.jit(lambda v, x: stack.apply(v, x, deterministic=False, rngs=rngs))(variables, x)
    tolerance.assert_close(got, want, terms=_terms(4, 5, 6))
    plain = stack.apply(variables, x, deterministic=True)
    assert float(jnp.abs(plain - got).max()) > 1e-2, "the dropout changed nothing"


def test_recurrent_dropout_with_injected_masks_matches_flax_with_the_same_masks():
    """Independent of how keys are drawn: both libraries get the same boolean masks."""
    x = random_array(3, (3, 6, 5))
    h_mask = jax.random.bernoulli(jax.random.key(5), 0.7, (3, 4))
    x_mask = jax.random.bernoulli(jax.random.key(6), 0.6, (3, 5))
    flax_rnn = nn.RNN(LinenFixedMasks(nn.LSTMCell(4), h_mask, x_mask, 0.3, 0.4))
    variables = random_variables(flax_rnn, 4, x)
    cell = RecurrentDropoutCell(LSTMCell(4), recurrent_rate=0.3, input_rate=0.4)
    for hoist in (False, True):  # the input mask applies before the projection, either way
        rnn = RNN(cell.with_masks(h_mask, x_mask), plan=Plan(hoist_inputs=hoist))
        got = rnn.apply(variables, x)
        tolerance.assert_close(got, flax_rnn.apply(variables, x), terms=_terms(4, 5, 6))


class EchoCell(RNNCellBase):
    """A cell whose output is the h its one layer reads (through an identity kernel), and
    whose next h is its carry plus 1."""

    features: int

    def initialize_carry(self, rng, input_shape):
        return jnp.ones((*input_shape[:-1], self.features))

    def layers(self, input_shape):
        eye = lambda key, shape, dtype: jnp.eye(shape[0], dtype=dtype)  # noqa: E731
        return {"h": Dense("h", self.features, self.features, eye)}

    def update(self, carry, a):
        return carry + 1.0, a["h"]


def test_recurrent_masks_are_drawn_per_layer_shaped_like_h():
    cell = RecurrentDropoutCell(GRUCell(6), recurrent_rate=0.5)
    recurrent, input_ = cell.draw_masks(DROPOUT_KEY, (4, 3), ("layers_0", "cell"))
    assert input_ is None  # input_rate 0: no mask
    assert recurrent.shape == (4, 6) and recurrent.dtype == jnp.bool_
    other, _ = cell.draw_masks(DROPOUT_KEY, (4, 3), ("layers_1", "cell"))
    assert not bool((other == recurrent).all()), "another layer must get another mask"


def test_the_mask_of_h_zeroes_the_same_units_at_every_step_of_a_sequence():
    cell = RecurrentDropoutCell(EchoCell(6), recurrent_rate=0.5)
    x = jnp.ones((4, 7, 3))
    stack = StackedRNN((RNN(cell),))
    y = stack.apply(
        stack.init(KEY, x),
        x,
        deterministic=False,
        rngs={"dropout": DROPOUT_KEY},
    )
    zeroed = np.asarray(y == 0)  # (batch, time, features): the units h lost at each step
    assert zeroed[:, 0].any() and not zeroed[:, 0].all()
    for t in range(1, 7):
        assert (zeroed[:, t] == zeroed[:, 0]).all(), f"step {t} dropped other units"
    assert not (zeroed[0] == zeroed[1]).all(), "two sequences should get their own masks"


def test_recurrent_dropout_cell_without_masks_refuses_to_run_in_a_plain_rnn():
    rnn = RNN(RecurrentDropoutCell(LSTMCell(4), recurrent_rate=0.2))
    with _raises(ValueError, "has no dropout masks", "rnnlib.StackedRNN", "with_masks"):
        rnn.init(KEY, jnp.ones((2, 3, 5)))


def test_recurrent_dropout_cell_wraps_only_rnnlib_cells():
    with _raises(TypeError, "expects an rnnlib cell", "flax.linen"):
        RecurrentDropoutCell(nn.LSTMCell(4))


def test_recurrent_dropout_params_are_the_wrapped_cells_under_cell():
    cell = RecurrentDropoutCell(LSTMCell(4), recurrent_rate=0.2)
    x = jnp.ones((2, 3, 5))
    variables = StackedRNN((RNN(cell),)).init(KEY, x)
    flax_rnn = nn.RNN(LinenRecurrentDropout(nn.LSTMCell(4), 0.2), split_rngs=SAME_KEY_EVERY_STEP)
    flax_shapes = jax.eval_shape(
        lambda: flax_rnn.init({"params": KEY, "dropout": KEY}, x)["params"]
    )
    got = jax.tree_util.tree_map(jnp.shape, variables["params"]["layers_0"])
    assert got == jax.tree_util.tree_map(lambda s: s.shape, dict(flax_shapes))
    assert set(got["cell"]["cell"]) == {"ii", "if", "ig", "io", "hi", "hf", "hg", "ho"}


# -- h is dropped in the recurrent matmuls only ------------------------------------------------


def _gru_dropping_h_in_matmuls(p, x, h_mask, rate):
    """A GRU written out by hand that drops h where W_hr, W_hz, W_hn read it, and nowhere
    else: the update z * h keeps the undropped h."""
    dense = lambda name, v: v @ p[name]["kernel"] + p[name].get("bias", 0.0)  # noqa: E731
    h = jnp.zeros((x.shape[0], p["hr"]["kernel"].shape[0]))
    ys = []
    for t in range(x.shape[1]):
        xt, hd = x[:, t], jnp.where(h_mask, h / (1 - rate), 0.0)
        r = jax.nn.sigmoid(dense("ir", xt) + dense("hr", hd))
        z = jax.nn.sigmoid(dense("iz", xt) + dense("hz", hd))
        n = jnp.tanh(dense("in", xt) + r * dense("hn", hd))
        h = (1 - z) * n + z * h
        ys.append(h)
    return jnp.stack(ys, axis=1)


def test_a_gru_drops_h_in_its_recurrent_matmuls_only():
    x = random_array(7, (3, 6, 5))
    h_mask = jax.random.bernoulli(jax.random.key(8), 0.7, (3, 4))
    cell = RecurrentDropoutCell(GRUCell(4), recurrent_rate=0.3)
    rnn = RNN(cell.with_masks(h_mask))
    variables = random_like(9, jax.eval_shape(lambda: rnn.init(KEY, x)))
    want = _gru_dropping_h_in_matmuls(variables["params"]["cell"]["cell"], x, h_mask, 0.3)
    for plan in (Plan(), Plan(hoist_inputs=True), Plan(False, False, False, "sequential")):
        got = RNN(cell.with_masks(h_mask), plan=plan).apply(variables, x)
        tolerance.assert_close(got, want, terms=_terms(4, 5, 6))


def test_a_gru_with_recurrent_dropout_stays_bounded_over_1000_steps():
    # Dropping h on the GRU's carry path too (z * h, rescaled by 1/(1-p) at every step)
    # made |h| reach 1e13 after 100 steps and overflow before 1,000.
    x = jax.random.normal(jax.random.key(1), (8, 1000, 16))
    stack = StackedRNN((RNN(RecurrentDropoutCell(GRUCell(16), recurrent_rate=0.3)),))
    variables = stack.init(KEY, x)
    rngs = {"dropout": DROPOUT_KEY}

    def loss(v):
        return jnp.mean(stack.apply(v, x, deterministic=False, rngs=rngs) ** 2)

    y = jax.jit(lambda v: stack.apply(v, x, deterministic=False, rngs=rngs))(variables)
    # h' = (1 - z) n + z h with |n| < 1 and h_0 = 0: every |h_t| stays below 1.
    assert bool(jnp.isfinite(y).all()) and float(jnp.abs(y).max()) <= 1.0
    grads = jax.jit(jax.grad(loss))(variables)
    assert all(bool(jnp.isfinite(g).all()) for g in jax.tree_util.tree_leaves(grads))
    plain = stack.apply(variables, x, deterministic=True)
    assert float(jnp.abs(plain - y).max()) > 1e-2, "the dropout changed nothing"


def test_recurrent_dropout_of_a_cell_whose_layers_never_read_h_is_refused():
    from rnnlib import MinGRUCell

    cell = RecurrentDropoutCell(MinGRUCell(4), recurrent_rate=0.2)
    x = jnp.ones((2, 3, 5))
    with _raises(ValueError, "none of", "reads 'h'", "recurrent_rate=0", "0.2"):
        StackedRNN((RNN(cell),)).apply(
            StackedRNN((RNN(cell),)).init(KEY, x), x, deterministic=False, rngs={"dropout": KEY}
        )
