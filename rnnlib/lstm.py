"""Long short-term memory cells: ``LSTMCell`` and its alias ``OptimizedLSTMCell``."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from rnnlib import fast
from rnnlib.cell_base import RNNCellBase, check_features
from rnnlib.linear import DenseLayer, create_dense_layers, dense_layer_shapes, orthogonal

_INPUT = ("ii", "if", "ig", "io")
_HIDDEN = ("hi", "hf", "hg", "ho")


@dataclasses.dataclass(frozen=True, repr=False)
class LSTMCell(RNNCellBase):
    r"""A long short-term memory cell; its carry is ``(c, h)`` and its output is ``h``.

    .. math::

        i &= \sigma(x W_{ii} + h W_{hi} + b_{hi}) \\
        f &= \sigma(x W_{if} + h W_{hf} + b_{hf}) \\
        g &= \tanh(x W_{ig} + h W_{hg} + b_{hg}) \\
        o &= \sigma(x W_{io} + h W_{ho} + b_{ho}) \\
        c' &= f \odot c + i \odot g \\
        h' &= o \odot \tanh(c')

    Example::

        cell = LSTMCell(features=4)
        x = jnp.ones((2, 3))                                 # (batch, channels)
        carry = cell.initialize_carry(jax.random.key(0), x.shape)  # ((2, 4), (2, 4))
        variables = cell.init(jax.random.key(1), carry, x)
        (c, h), y = cell.apply(variables, carry, x)          # y is h, shape (2, 4)

    Arguments:
        features: width of ``c``, ``h`` and the output.
        gate_fn: squashing function of ``i``, ``f`` and ``o`` (default ``sigmoid``).
        activation_fn: function applied to ``g`` and to ``c'`` (default ``tanh``).
        kernel_init: initializer of the input kernels ``ii, if, ig, io``, each
            ``(channels, features)``.
        recurrent_kernel_init: initializer of the hidden kernels ``hi, hf, hg, ho``,
            each ``(features, features)``.
        bias_init: initializer of the biases, which live on the hidden side, ``(features,)``.
        dtype: dtype of the computation (default: promoted from inputs and parameters).
        param_dtype: dtype of the parameters and of the initial carry.
        carry_init: initializer of ``c`` and ``h``, each ``(*batch, features)``.

    The parameter tree holds the eight separate kernels Flax uses, so variables
    interchange. ``prepare`` fuses each side's four kernels so that one matmul per side
    computes every gate; ``rnnlib.fast`` decides how (on CPU, large inputs take one
    matmul per gate), never the numbers.
    """

    features: int
    gate_fn: Callable[..., Any] = jax.nn.sigmoid
    activation_fn: Callable[..., Any] = jnp.tanh
    kernel_init: Callable[..., Any] = jax.nn.initializers.lecun_normal()
    recurrent_kernel_init: Callable[..., Any] = orthogonal()
    bias_init: Callable[..., Any] = jax.nn.initializers.zeros
    dtype: Any = None
    param_dtype: Any = jnp.float32
    carry_init: Callable[..., Any] = jax.nn.initializers.zeros

    def __post_init__(self):
        check_features(self, self.features)

    @property
    def num_feature_axes(self) -> int:
        return 1

    def initialize_carry(self, rng, input_shape):
        """``(c, h)``, each ``(*batch, features)`` for ``input_shape = (*batch, channels)``.

        ``rng`` is split in two: one key for ``c``, one for ``h``.
        """
        shape = tuple(input_shape[:-1]) + (self.features,)
        key_c, key_h = jax.random.split(rng)
        return (
            self.carry_init(key_c, shape, self.param_dtype),
            self.carry_init(key_h, shape, self.param_dtype),
        )

    def _layers(self, input_shape):
        n_in, n = input_shape[-1], self.features
        layers = {name: DenseLayer(n_in, n, self.kernel_init, None) for name in _INPUT}
        for name in _HIDDEN:
            layers[name] = DenseLayer(n, n, self.recurrent_kernel_init, self.bias_init)
        return layers

    def create_params(self, key, input_shape):
        return create_dense_layers(key, self._layers(input_shape), self.param_dtype)

    def param_shapes(self, input_shape):
        return dense_layer_shapes(self._layers(input_shape), self.param_dtype)

    def prepare(self, params, input_shape):
        """``Sides``: the input kernels ``ii, if, ig, io`` and the hidden kernels and
        biases ``hi, hf, hg, ho``, each side ready for ``fast.gates``."""
        return fast.gate_layers(self, params, input_shape, input=_INPUT, hidden=_HIDDEN)

    def project_inputs(self, weights, inputs):
        """``x W_i`` for the four gates at once (``rnnlib.fast.Gates``)."""
        return fast.gates(inputs, weights.input, dtype=self.dtype)

    def step(self, weights, carry, projected):
        c, h = carry
        gates = projected + fast.gates(h, weights.hidden, dtype=self.dtype)
        i, f, g, o = gates.split()  # x W_. + h W_h. + b_h. for each gate
        i = self.gate_fn(i)
        f = self.gate_fn(f)
        g = self.activation_fn(g)
        o = self.gate_fn(o)
        c = f * c + i * g
        h = o * self.activation_fn(c)
        return (c, h), h


@dataclasses.dataclass(frozen=True, repr=False)
class OptimizedLSTMCell(LSTMCell):
    """The same cell as ``LSTMCell``, with the same parameters and numbers.

    In Flax this class concatenates the gate kernels for speed while ``LSTMCell``
    runs eight separate matmuls. rnnlib's ``LSTMCell`` chooses between the two forms
    by backend and size (``rnnlib.fast.plan``), so the two names are
    interchangeable; this one exists so Flax code ports unchanged.
    """
