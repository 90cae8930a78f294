"""Papercuts a user met: each gives linen's behaviour or a clear error naming what was
expected and what was received."""

import builtins
import re

import jax
import jax.numpy as jnp
import pytest

from rnnlib import (
    RNN,
    ConvLSTMCell,
    GRUCell,
    MinGRUCell,
    RecurrentDropoutCell,
    StackedRNN,
    layout,
)


def _raises(exc, *fragments):
    return pytest.raises(exc, match="(?s)" + "".join(f"(?=.*{re.escape(f)})" for f in fragments))


def test_mingru_initialises_its_gate_bias_apart_from_its_candidates():
    cell = MinGRUCell(4, gate_bias_init=jax.nn.initializers.constant(-4.0))
    params = RNN(cell).init(jax.random.key(0), jnp.ones((2, 3, 5)))["params"]["cell"]
    assert bool((params["gate"]["bias"] == -4.0).all())
    assert bool((params["candidate"]["bias"] == 0.0).all())
    default = RNN(MinGRUCell(4)).init(jax.random.key(0), jnp.ones((2, 3, 5)))["params"]["cell"]
    assert bool((default["gate"]["bias"] == 0.0).all())  # bias_init for both by default


def test_layout_plot_without_matplotlib_says_to_install_it(monkeypatch):
    real_import = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name.startswith("matplotlib"):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    with _raises(ImportError, "Layout.plot", "matplotlib", "pip install matplotlib"):
        layout(RNN(MinGRUCell(4)), (2, 3, 5)).plot()


def _stack(rate):
    stack = StackedRNN((RNN(GRUCell(4)), RNN(GRUCell(4))), dropout_rate=rate)
    x = jnp.ones((2, 3, 5))
    return stack, stack.init(jax.random.key(0), x), x


def test_a_stack_that_drops_nothing_needs_no_deterministic():
    stack, variables, x = _stack(0.0)
    got = stack.apply(variables, x)
    want = stack.apply(variables, x, deterministic=True)
    assert bool((got == want).all())


def test_a_misspelt_keyword_of_a_stack_is_named():
    stack, variables, x = _stack(0.1)
    with _raises(TypeError, "unexpected keyword arguments ['determinstic']", "deterministic"):
        stack.apply(variables, x, determinstic=True)
    with _raises(TypeError, "StackedRNN", "seq_lengths"):
        stack.apply(variables, x, deterministic=True, seq_length=None)


def test_rngs_given_a_key_instead_of_a_dict_says_what_it_got():
    stack, variables, x = _stack(0.1)
    key = jax.random.key(1)
    with _raises(ValueError, "rngs={'dropout'", "not a dict"):
        stack.apply(variables, x, deterministic=False, rngs=key)


def test_an_int_kernel_size_is_refused_since_its_rank_would_be_a_guess():
    # An int used to mean 1-D: a 5-D video then ran with its time axis taken as batch.
    with _raises(TypeError, "kernel_size as a tuple", "(3,)", "(3, 3)", "got the int 3"):
        ConvLSTMCell(4, kernel_size=3)
    x = jnp.ones((2, 3, 6, 5))  # (batch, time, length, channels)
    assert RNN(ConvLSTMCell(4, kernel_size=(3,))).init(jax.random.key(0), x)["params"]


def test_masks_drawn_for_another_batch_size_name_both_shapes():
    cell = RecurrentDropoutCell(GRUCell(4), recurrent_rate=0.3, input_rate=0.2)
    h_mask, x_mask = cell.draw_masks(jax.random.key(1), (3, 5))  # a batch of 3
    x = jnp.ones((2, 6, 5))  # a batch of 2
    variables = RNN(cell.with_masks()).init(jax.random.key(0), x)
    with _raises(ValueError, "recurrent_mask shaped like h, (2, 4)", "got shape (3, 4)"):
        RNN(cell.with_masks(h_mask)).apply(variables, x)
    with _raises(ValueError, "input_mask shaped like one step's input, (2, 5)", "(3, 5)"):
        RNN(cell.with_masks(None, x_mask)).apply(variables, x)
