"""Gated cells with a single-array carry: ``GRUCell`` and ``MGUCell``."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from rnnlib import fast
from rnnlib.cell_base import RNNCellBase, check_features
from rnnlib.linear import DenseLayer, create_dense_layers, dense_layer_shapes, orthogonal


def _single_carry(cell, rng, input_shape):
    shape = tuple(input_shape[:-1]) + (cell.features,)
    return cell.carry_init(rng, shape, cell.param_dtype)


@dataclasses.dataclass(frozen=True, repr=False)
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
        """``h`` shaped ``(*batch, features)``; ``rng`` goes whole to ``carry_init``."""
        return _single_carry(self, rng, input_shape)

    def _layers(self, input_shape):
        n_in, n = input_shape[-1], self.features
        layers = {
            name: DenseLayer(n_in, n, self.kernel_init, self.bias_init)
            for name in ("ir", "iz", "in")
        }
        for name in ("hr", "hz", "hn"):
            bias_init = self.bias_init if name == "hn" else None
            layers[name] = DenseLayer(n, n, self.recurrent_kernel_init, bias_init)
        return layers

    def create_params(self, key, input_shape):
        return create_dense_layers(key, self._layers(input_shape), self.param_dtype)

    def param_shapes(self, input_shape):
        return dense_layer_shapes(self._layers(input_shape), self.param_dtype)

    def prepare(self, params, input_shape):
        """``Sides``: ``ir, iz, in`` with their biases, and ``hr, hz, hn`` (only ``hn``
        has a bias; the fusion pads the others with zeros)."""
        return fast.gate_layers(
            self, params, input_shape, input=("ir", "iz", "in"), hidden=("hr", "hz", "hn")
        )

    def project_inputs(self, weights, inputs):
        """``x W_i + b_i`` for the three gates at once (``rnnlib.fast.Gates``)."""
        return fast.gates(inputs, weights.input, dtype=self.dtype)

    def step(self, weights, h, projected):
        x_r, x_z, x_n = projected.split()
        h_r, h_z, h_n = fast.gates(h, weights.hidden, dtype=self.dtype).split()
        r = self.gate_fn(x_r + h_r)
        z = self.gate_fn(x_z + h_z)
        n = self.activation_fn(x_n + r * h_n)
        h = (1.0 - z) * n + z * h
        return h, h


@dataclasses.dataclass(frozen=True, repr=False)
class MGUCell(RNNCellBase):
    r"""A minimal gated unit: a GRU whose single gate ``f`` both resets and updates.

    .. math::

        f &= \sigma(x W_{if} + b_{if} + h W_{hf}) \\
        n &= \tanh(x W_{in} + b_{in} + f \odot (h W_{hn} + b_{hn})) \\
        h' &= (1 - f) \odot n + f \odot h

    With ``reset_gate=False``, ``n = tanh(x W_in + b_in + h W_hn)`` (no gate, no ``b_hn``).

    Example::

        cell = MGUCell(features=4)
        x = jnp.ones((2, 3))
        h = cell.initialize_carry(jax.random.key(0), x.shape)  # (2, 4)
        variables = cell.init(jax.random.key(1), h, x)
        h, y = cell.apply(variables, h, x)

    Arguments:
        features: width of ``h``.
        gate_fn: squashing function of ``f`` (default ``sigmoid``).
        activation_fn: squashing function of ``n`` (default ``tanh``).
        kernel_init: initializer of ``if`` and ``in``, ``(channels, features)``.
        recurrent_kernel_init: initializer of ``hf`` and ``hn``, ``(features, features)``.
        forget_bias_init: initializer of ``b_if`` (default ones, so the cell starts out
            keeping most of its state).
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
    dtype: Any = None
    param_dtype: Any = jnp.float32
    carry_init: Callable[..., Any] = jax.nn.initializers.zeros
    reset_gate: bool = True

    def __post_init__(self):
        check_features(self, self.features)

    @property
    def num_feature_axes(self) -> int:
        return 1

    def initialize_carry(self, rng, input_shape):
        """``h`` shaped ``(*batch, features)``; ``rng`` goes whole to ``carry_init``."""
        return _single_carry(self, rng, input_shape)

    def _layers(self, input_shape):
        n_in, n = input_shape[-1], self.features
        hn_bias = self.activation_bias_init if self.reset_gate else None
        return {
            "if": DenseLayer(n_in, n, self.kernel_init, self.forget_bias_init),
            "in": DenseLayer(n_in, n, self.kernel_init, self.activation_bias_init),
            "hf": DenseLayer(n, n, self.recurrent_kernel_init, None),
            "hn": DenseLayer(n, n, self.recurrent_kernel_init, hn_bias),
        }

    def create_params(self, key, input_shape):
        return create_dense_layers(key, self._layers(input_shape), self.param_dtype)

    def param_shapes(self, input_shape):
        return dense_layer_shapes(self._layers(input_shape), self.param_dtype)

    def prepare(self, params, input_shape):
        """``Sides``: ``if, in`` with their biases, and ``hf, hn`` (``hn`` has a bias
        with ``reset_gate``)."""
        return fast.gate_layers(self, params, input_shape, input=("if", "in"), hidden=("hf", "hn"))

    def project_inputs(self, weights, inputs):
        """``x W_i + b_i`` for both gates (``rnnlib.fast.Gates``)."""
        return fast.gates(inputs, weights.input, dtype=self.dtype)

    def step(self, weights, h, projected):
        x_f, x_n = projected.split()
        h_f, h_n = fast.gates(h, weights.hidden, dtype=self.dtype).split()
        f = self.gate_fn(x_f + h_f)
        if self.reset_gate:
            h_n = f * h_n
        n = self.activation_fn(x_n + h_n)
        h = (1.0 - f) * n + f * h
        return h, h
