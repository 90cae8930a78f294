"""Gated cells with a single-array carry: ``GRUCell`` and ``MGUCell``."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from rnnlib.cell_base import RNNCellBase
from rnnlib.initializers import orthogonal
from rnnlib.linear import Dense


class GRUCell(RNNCellBase):
    r"""A gated recurrent unit; its carry is ``h`` and its output is the new ``h``.

    .. math::

        r &= \sigma(x W_{ir} + b_{ir} + h W_{hr}) \\
        z &= \sigma(x W_{iz} + b_{iz} + h W_{hz}) \\
        n &= \tanh(x W_{in} + b_{in} + r \odot (h W_{hn} + b_{hn})) \\
        h' &= (1 - z) \odot n + z \odot h

    Example::

        cell = GRUCell(features=4)
        x = jnp.ones((2, 3))                                 # (batch, channels)
        h = cell.initialize_carry(jax.random.key(0), x.shape)  # (2, 4)
        variables = cell.init(jax.random.key(1), h, x)
        h, y = cell.apply(variables, h, x)                   # y is h

    Arguments:
        features: width of ``h``.
        gate_fn: squashing function of ``r`` and ``z`` (default ``sigmoid``).
        activation_fn: squashing function of ``n`` (default ``tanh``).
        kernel_init: initializer of the input kernels ``ir, iz, in``, ``(channels, features)``.
        recurrent_kernel_init: initializer of ``hr, hz, hn``, ``(features, features)``.
        bias_init: initializer of the biases of ``ir, iz, in`` and ``hn``, ``(features,)``.
        dtype: dtype of the computation (default: promoted from inputs and parameters).
        param_dtype: dtype of the parameters and of the initial carry.
        carry_init: initializer of ``h``, ``(*batch, features)``.
    """

    cpu_slow_when_joined = ((0, math.inf, 160, 480), (32, 128, 64, 128), (64, 256, 32, 64))
    cpu_slow_after_loop = ((128, math.inf, 256, 512),)

    features: int
    gate_fn: Callable[..., Any] = jax.nn.sigmoid
    activation_fn: Callable[..., Any] = jnp.tanh
    kernel_init: Callable[..., Any] = jax.nn.initializers.lecun_normal()
    recurrent_kernel_init: Callable[..., Any] = orthogonal()
    bias_init: Callable[..., Any] = jax.nn.initializers.zeros

    def layers(self, input_shape):
        n_in, n = input_shape[-1], self.features
        x = Dense("x", n_in, n, self.kernel_init, self.bias_init)
        h, hn = Dense("h", n, n, self.recurrent_kernel_init), self.bias_init
        return {"ir": x, "iz": x, "in": x, "hr": h, "hz": h, "hn": h._replace(bias_init=hn)}

    def update(self, h, a):
        r = self.gate_fn(a["ir"] + a["hr"])
        z = self.gate_fn(a["iz"] + a["hz"])
        n = self.activation_fn(a["in"] + r * a["hn"])
        h = (1.0 - z) * n + z * h
        return h, h


class MGUCell(RNNCellBase):
    r"""A minimal gated unit: a GRU whose single gate ``f`` both resets and updates.

    .. math::

        f &= \sigma(x W_{if} + b_{if} + h W_{hf}) \\
        n &= \tanh(x W_{in} + b_{in} + f \odot (h W_{hn} + b_{hn})) \\
        h' &= (1 - f) \odot n + f \odot h

    With ``reset_gate=False``, ``n = tanh(x W_in + b_in + h W_hn)`` (no gate, no ``b_hn``).

    It is used as ``GRUCell`` is. Arguments:
        features: width of ``h``.
        gate_fn: squashing function of ``f`` (default ``sigmoid``).
        activation_fn: squashing function of ``n`` (default ``tanh``).
        kernel_init: initializer of ``if`` and ``in``, ``(channels, features)``.
        recurrent_kernel_init: initializer of ``hf`` and ``hn``, ``(features, features)``.
        forget_bias_init: initializer of ``b_if`` (ones: the cell starts keeping most of ``h``).
        activation_bias_init: initializer of ``b_in`` and ``b_hn`` (default zeros).
        dtype: dtype of the computation (default: promoted from inputs and parameters).
        param_dtype: dtype of the parameters and of the initial carry.
        carry_init: initializer of ``h``, ``(*batch, features)``.
        reset_gate: whether ``f`` gates the candidate's recurrent term.
    """

    features: int
    gate_fn: Callable[..., Any] = jax.nn.sigmoid
    activation_fn: Callable[..., Any] = jnp.tanh
    kernel_init: Callable[..., Any] = jax.nn.initializers.lecun_normal()
    recurrent_kernel_init: Callable[..., Any] = orthogonal()
    forget_bias_init: Callable[..., Any] = jax.nn.initializers.ones
    activation_bias_init: Callable[..., Any] = jax.nn.initializers.zeros
    reset_gate: bool = True

    def layers(self, input_shape):
        n_in, n = input_shape[-1], self.features
        hn_bias = self.activation_bias_init if self.reset_gate else None
        return {
            "if": Dense("x", n_in, n, self.kernel_init, self.forget_bias_init),
            "in": Dense("x", n_in, n, self.kernel_init, self.activation_bias_init),
            "hf": Dense("h", n, n, self.recurrent_kernel_init),
            "hn": Dense("h", n, n, self.recurrent_kernel_init, hn_bias),
        }

    def update(self, h, a):
        f = self.gate_fn(a["if"] + a["hf"])
        h_n = f * a["hn"] if self.reset_gate else a["hn"]
        n = self.activation_fn(a["in"] + h_n)
        h = (1.0 - f) * n + f * h
        return h, h
