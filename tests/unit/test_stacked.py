"""rnnlib.StackedRNN against the same deep RNN written in flax.linen, given the same
variables and the same ``rngs``: stacking (RNN and Bidirectional layers), residual
connections, dropout between layers and recurrent dropout inside them."""

import re
from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import pytest

from rnnlib import RNN, Bidirectional, GRUCell, LSTMCell
from rnnlib.recurrent_dropout import RecurrentDropoutCell
from rnnlib.stacked import StackedRNN
from tests import tolerance
from tests.parity_helpers import random_array, random_like, sequence_lengths
from tests.unit.test_dropout import SAME_KEY_EVERY_STEP, LinenRecurrentDropout

KEY = jax.random.key(0)
RNGS = {"dropout": jax.random.key(42)}
TIME = 5


class LinenStack(nn.Module):
    """The deep RNN in flax.linen: each layer reads the previous one's output; dropout on
    the output of every layer but the last; a residual adds a layer's input to its output."""

    layers: Sequence[nn.Module]
    dropout_rate: float = 0.0
    residual: Sequence[bool] = ()

    @nn.compact
    def __call__(self, x, *, deterministic, seq_lengths=None):
        for i, layer in enumerate(self.layers):
            y = layer(x, seq_lengths=seq_lengths)
            if self.residual and self.residual[i]:
                y = x + y
            if i < len(self.layers) - 1:
                y = nn.Dropout(self.dropout_rate)(y, deterministic=deterministic)
            x = y
        return x


def _raises(exc, *fragments):
    return pytest.raises(exc, match="(?s)" + "".join(f"(?=.*{re.escape(f)})" for f in fragments))


def _twins(widths, *, kinds=None, rate=0.0, residual=(), recurrent=(0.0, 0.0), fixed=None):
    """The same stack in flax.linen and in rnnlib: layer i is an LSTM of widths[i], or a
    bidirectional GRU pair of widths[i] // 2 each where kinds[i] == 'bi' (an LSTM pair where it
    is 'bi-lstm'). Every LSTM (and GRU) gets the recurrent dropout ``recurrent`` asks for; a
    GRU's differs from the linen wrapper's, which drops h in its carry path too.

    flax.linen's nn.RNN passes nothing but (carry, x) to its cell, so a linen cell that
    drops values takes deterministic as a field: ``fixed`` sets it."""
    kinds = kinds or ("rnn",) * len(widths)

    def flax_rnn(features, cell_type=nn.LSTMCell):
        cell = cell_type(features)
        if recurrent != (0.0, 0.0):
            cell = LinenRecurrentDropout(cell, *recurrent, deterministic=bool(fixed))
            return nn.RNN(cell, split_rngs=SAME_KEY_EVERY_STEP)
        return nn.RNN(cell)

    def rnnlib_rnn(features, cell_type=LSTMCell):
        cell = cell_type(features)
        if recurrent != (0.0, 0.0):
            cell = RecurrentDropoutCell(cell, *recurrent)
        return RNN(cell)

    flax_layers, layers = [], []
    for width, kind in zip(widths, kinds):
        if kind in ("bi", "bi-lstm"):
            half = width // 2
            flax_cell, cell = (nn.GRUCell, GRUCell) if kind == "bi" else (nn.LSTMCell, LSTMCell)
            flax_layers.append(
                nn.Bidirectional(flax_rnn(half, flax_cell), flax_rnn(half, flax_cell))
            )
            layers.append(Bidirectional(rnnlib_rnn(half, cell), rnnlib_rnn(half, cell)))
        else:
            flax_layers.append(flax_rnn(width))
            layers.append(rnnlib_rnn(width))
    flax_stack = LinenStack(tuple(flax_layers), rate, tuple(residual))
    stack = StackedRNN(tuple(layers), dropout_rate=rate, residual=tuple(residual) or False)
    return flax_stack, stack


def _variables(flax_stack, x, seed):
    shapes = jax.eval_shape(
        lambda: flax_stack.init({"params": KEY, "dropout": KEY}, x, deterministic=False)
    )
    return random_like(seed, shapes)


def _terms(widths, in_width):
    # Each layer's longest sum, over the steps, summed over the layers it feeds through.
    terms, width = 0, in_width
    for features in widths:
        terms += TIME * (width + features + 1)
        width = features
    return terms


CASES = {
    "two-lstm": dict(widths=(6, 4)),
    "three-lstm-dropout": dict(widths=(6, 6, 4), rate=0.3),
    "bidirectional-dropout": dict(widths=(6, 6, 4), kinds=("bi", "bi", "rnn"), rate=0.25),
    "residual-dropout": dict(widths=(6, 6, 6), rate=0.2, residual=(False, True, True)),
    "recurrent-dropout": dict(widths=(6, 4), rate=0.2, recurrent=(0.3, 0.2)),
    "bidirectional-recurrent-dropout": dict(
        widths=(6, 4), kinds=("bi-lstm", "rnn"), rate=0.2, recurrent=(0.3, 0.2)
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_stacked_rnn_matches_the_same_stack_in_flax_linen_with_and_without_dropout(case):
    flax_stack, stack = _twins(**CASES[case])
    x = random_array(0, (3, TIME, 5))
    variables = _variables(flax_stack, x, seed=1)
    assert jax.tree_util.tree_structure(stack.init(KEY, x)) == jax.tree_util.tree_structure(
        variables
    )
    terms = _terms(CASES[case]["widths"], 5)

    flax_stacks = {flag: _twins(**CASES[case], fixed=flag)[0] for flag in (True, False)}

    def both(variables, x):
        return {
            flag: (
                stack.apply(variables, x, deterministic=flag, rngs=RNGS),
                flax_stacks[flag].apply(variables, x, deterministic=flag, rngs=RNGS),
            )
            for flag in (True, False)
        }

    results = jax.jit(both)(variables, x)
    for deterministic, (got, want) in results.items():
        tolerance.assert_close(got, want, terms=terms, label=f"deterministic={deterministic}")
    dropped, kept = results[False][0], results[True][0]
    drops = CASES[case].get("rate", 0) > 0 or "recurrent" in CASES[case]
    assert (float(jnp.abs(dropped - kept).max()) > 1e-3) == drops


def test_stacked_rnn_passes_seq_lengths_to_every_layer_as_flax_does():
    flax_stack, stack = _twins((6, 6, 4), kinds=("bi", "rnn", "rnn"), rate=0.3)
    x = random_array(2, (3, TIME, 5))
    lengths = sequence_lengths((3,))
    variables = _variables(flax_stack, x, seed=3)
    got = stack.apply(variables, x, deterministic=False, rngs=RNGS, seq_lengths=lengths)
    want = jax.jit(
        lambda v, x, n: flax_stack.apply(v, x, deterministic=False, rngs=RNGS, seq_lengths=n)
    )(variables, x, lengths)
    tolerance.assert_close(got, want, terms=_terms((6, 6, 4), 5))


def test_return_carry_gives_each_layers_final_carry():
    _, stack = _twins((6, 4), kinds=("bi", "rnn"))
    x = random_array(4, (3, TIME, 5))
    variables = stack.init(KEY, x)
    carries, y = stack.apply(variables, x, deterministic=True, return_carry=True)
    (forward, backward), (c, h) = carries
    assert forward.shape == backward.shape == (3, 3) and h.shape == (3, 4)
    # The last layer's carry is what that layer alone returns from the first's outputs.
    first = stack.layers[0].apply({"params": variables["params"]["layers_0"]}, x)
    alone, outputs = stack.layers[1].apply(
        {"params": variables["params"]["layers_1"]}, first, return_carry=True
    )
    # The same computation run twice: the stack calls the layer on the same inputs.
    tolerance.assert_identical((c, h), alone)
    tolerance.assert_identical(y, outputs)


def test_initial_carry_takes_one_carry_per_layer():
    _, stack = _twins((6, 4))
    x = random_array(5, (3, TIME, 5))
    variables = stack.init(KEY, x)
    carries, _ = stack.apply(variables, x, deterministic=True, return_carry=True)
    again, _ = stack.apply(
        variables, x, deterministic=True, return_carry=True, initial_carry=carries
    )
    assert not bool(jnp.allclose(again[1][1], carries[1][1]))
    with _raises(ValueError, "one carry per layer (2)", "length 1"):
        stack.apply(variables, x, deterministic=True, initial_carry=(carries[0],))


# -- errors -------------------------------------------------------------------------------


def test_dropout_between_layers_without_a_dropout_key_says_how_to_pass_one():
    _, stack = _twins((6, 4), rate=0.5)
    x = jnp.ones((2, TIME, 5))
    variables = stack.init(KEY, x)
    with _raises(ValueError, "rngs={'dropout': jax.random.key(seed)}", "got no rngs"):
        stack.apply(variables, x, deterministic=False)
    with _raises(ValueError, "got rngs with keys ['params']"):
        stack.apply(variables, x, deterministic=False, rngs={"params": KEY})
    # Deterministic runs need no key.
    assert stack.apply(variables, x, deterministic=True).shape == (2, TIME, 4)


def test_recurrent_dropout_alone_also_needs_the_key():
    _, stack = _twins((4,), recurrent=(0.3, 0.0))
    x = jnp.ones((2, TIME, 5))
    variables = stack.init(KEY, x)
    with _raises(ValueError, "rngs={'dropout'"):
        stack.apply(variables, x, deterministic=False)


def test_a_bidirectional_sharing_one_recurrent_dropout_cell_is_refused_at_init():
    cell = RecurrentDropoutCell(LSTMCell(4), 0.3)
    stack = StackedRNN((Bidirectional(RNN(cell), RNN(cell)),))
    x = jnp.ones((2, TIME, 5))
    with _raises(ValueError, "layer 0, a Bidirectional", "in both directions", "a cell of its own"):
        stack.init(KEY, x)
    own = StackedRNN((Bidirectional(RNN(cell), RNN(RecurrentDropoutCell(LSTMCell(4), 0.3))),))
    variables = own.init(KEY, x)
    assert own.apply(variables, x, deterministic=False, rngs=RNGS).shape == (2, TIME, 8)


def test_residual_with_mismatched_widths_names_the_layer_and_both_widths():
    _, stack = _twins((6, 4), residual=(False, True))
    x = jnp.ones((2, TIME, 5))
    with _raises(ValueError, "layer 1", "adds its input to its output", "6 and 4", "residual"):
        stack.init(KEY, x)
    _, first = _twins((6, 6), residual=(True, True))
    with _raises(ValueError, "layer 0", "widths 5 and 6"):
        first.init(KEY, x)


@pytest.mark.parametrize("rate", [-0.5, 1.0, 2.0])
def test_dropout_rate_outside_zero_to_one_is_rejected(rate):
    with _raises(ValueError, "dropout_rate in [0, 1)", repr(rate)):
        StackedRNN((RNN(LSTMCell(4)), RNN(LSTMCell(4))), dropout_rate=rate)


def test_residual_flags_must_be_one_per_layer():
    with _raises(ValueError, "2 layers", "3 flags"):
        StackedRNN((RNN(LSTMCell(4)), RNN(LSTMCell(4))), residual=(True, True, False))
    with _raises(TypeError, "residual to be a bool or one bool per layer"):
        StackedRNN((RNN(LSTMCell(4)),), residual="yes")


def test_layers_must_be_rnnlib_rnns_or_bidirectionals():
    with _raises(TypeError, "layer 1 is flax.linen"):
        StackedRNN((RNN(LSTMCell(4)), nn.RNN(nn.LSTMCell(4))))
    with _raises(TypeError, "non-empty tuple"):
        StackedRNN(())


def test_missing_layer_params_name_the_layer():
    _, stack = _twins((6, 4))
    x = jnp.ones((2, TIME, 5))
    variables = _twins((6,))[1].init(KEY, x)
    with _raises(ValueError, "params/layers_1", "fewer layers"):
        stack.apply(variables, x, deterministic=True)


def test_deterministic_given_twice_or_never_is_an_error():
    stack = StackedRNN((RNN(LSTMCell(4)),), deterministic=True)
    x = jnp.ones((2, TIME, 5))
    variables = stack.init(KEY, x)
    with _raises(ValueError, "both as a field and at call time"):
        stack.apply(variables, x, deterministic=False)
    dropping = StackedRNN((RNN(LSTMCell(4)), RNN(LSTMCell(4))), dropout_rate=0.1)
    with _raises(ValueError, "needs deterministic=True"):
        dropping.apply(dropping.init(KEY, x), x)
