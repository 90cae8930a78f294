"""Long short-term memory cells: ``LSTMCell`` and its alias ``OptimizedLSTMCell``."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from rnnlib.cell_base import RNNCellBase
from rnnlib.initializers import orthogonal
from rnnlib.linear import Dense


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
        kernel_init: initializer of the kernels ``ii, if, ig, io``, ``(channels, features)``.
        recurrent_kernel_init: initializer of ``hi, hf, hg, ho``, ``(features, features)``.
        bias_init: initializer of the biases, which live on the hidden side, ``(features,)``.
        dtype: dtype of the computation (default: promoted from inputs and parameters).
        param_dtype: dtype of the parameters and of the initial carry.
        carry_init: initializer of ``c`` and ``h``, each ``(*batch, features)``.

    The parameter tree holds the eight separate kernels Flax uses, so variables interchange; how
    many matmuls compute them is ``RNN``'s ``plan``, never the numbers.
    """

    cpu_slow_when_joined = ((0, math.inf, 256, 416), (0, 63, 160, 256))

    features: int
    gate_fn: Callable[..., Any] = jax.nn.sigmoid
    activation_fn: Callable[..., Any] = jnp.tanh
    kernel_init: Callable[..., Any] = jax.nn.initializers.lecun_normal()
    recurrent_kernel_init: Callable[..., Any] = orthogonal()
    bias_init: Callable[..., Any] = jax.nn.initializers.zeros

    def initialize_carry(self, rng, input_shape):
        """``(c, h)``, each ``(*batch, features)`` for inputs ``(*batch, channels)``;
        ``rng`` is split in two, one key for ``c`` and one for ``h``."""
        make = super().initialize_carry
        return tuple(make(k, input_shape) for k in jax.random.split(rng))

    def layers(self, input_shape):
        x = Dense("x", input_shape[-1], self.features, self.kernel_init)
        h = Dense("h", self.features, self.features, self.recurrent_kernel_init, self.bias_init)
        return {"ii": x, "if": x, "ig": x, "io": x, "hi": h, "hf": h, "hg": h, "ho": h}

    def update(self, carry, a):
        c, _ = carry
        i = self.gate_fn(a["ii"] + a["hi"])
        f = self.gate_fn(a["if"] + a["hf"])
        g = self.activation_fn(a["ig"] + a["hg"])
        o = self.gate_fn(a["io"] + a["ho"])
        c = f * c + i * g
        h = o * self.activation_fn(c)
        return (c, h), h


class OptimizedLSTMCell(LSTMCell):
    """``LSTMCell`` under Flax's other name (Flax's two differ in speed only; rnnlib's ``RNN``
    chooses the program by its ``plan``, for either), so Flax code ports unchanged."""
