"""``SimpleCell``: the Elman recurrence, the simplest cell with a carry."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from rnnlib.cell_base import RNNCellBase, check_features
from rnnlib.linear import (
    DenseLayer,
    affine,
    create_dense_layers,
    dense_layer_shapes,
    orthogonal,
)


@dataclasses.dataclass(frozen=True, repr=False)
class SimpleCell(RNNCellBase):
    r"""An Elman cell; its carry is ``h`` and its output is the new ``h``.

    .. math::

        h' = \tanh(x W_i + b_i + h W_h)
        \qquad\text{or, with } \texttt{residual=True},\qquad
        h' = \tanh(x W_i + b_i + h W_h + h)

    Example::

        cell = SimpleCell(features=4)
        x = jnp.ones((2, 3))                                 # (batch, channels)
        h = cell.initialize_carry(jax.random.key(0), x.shape)  # (2, 4)
        variables = cell.init(jax.random.key(1), h, x)
        h, y = cell.apply(variables, h, x)

    Arguments:
        features: width of ``h``.
        activation_fn: the squashing function (default ``tanh``).
        kernel_init: initializer of ``i/kernel``, ``(channels, features)``.
        recurrent_kernel_init: initializer of ``h/kernel``, ``(features, features)``.
        bias_init: initializer of ``i/bias``, ``(features,)``.
        dtype: dtype of the computation (default: promoted from inputs and parameters).
        param_dtype: dtype of the parameters and of the initial carry.
        carry_init: initializer of ``h``, ``(*batch, features)``.
        residual: add ``h`` before the activation (a pre-activation residual connection).
    """

    features: int
    activation_fn: Callable[..., Any] = jnp.tanh
    kernel_init: Callable[..., Any] = jax.nn.initializers.lecun_normal()
    recurrent_kernel_init: Callable[..., Any] = orthogonal()
    bias_init: Callable[..., Any] = jax.nn.initializers.zeros
    dtype: Any = None
    param_dtype: Any = jnp.float32
    carry_init: Callable[..., Any] = jax.nn.initializers.zeros
    residual: bool = False

    def __post_init__(self):
        check_features(self, self.features)

    @property
    def num_feature_axes(self) -> int:
        return 1

    def initialize_carry(self, rng, input_shape):
        """``h`` shaped ``(*batch, features)`` for ``input_shape = (*batch, channels)``."""
        shape = tuple(input_shape[:-1]) + (self.features,)
        return self.carry_init(rng, shape, self.param_dtype)

    def _layers(self, input_shape):
        n_in, n = input_shape[-1], self.features
        return {
            "i": DenseLayer(n_in, n, self.kernel_init, self.bias_init),
            "h": DenseLayer(n, n, self.recurrent_kernel_init, None),
        }

    def create_params(self, key, input_shape):
        return create_dense_layers(key, self._layers(input_shape), self.param_dtype)

    def param_shapes(self, input_shape):
        return dense_layer_shapes(self._layers(input_shape), self.param_dtype)

    def project_inputs(self, params, inputs):
        return affine(inputs, params["i"]["kernel"], params["i"]["bias"], dtype=self.dtype)

    def step(self, params, h, projected):
        pre = projected + affine(h, params["h"]["kernel"], dtype=self.dtype)
        if self.residual:
            pre = pre + h
        h = self.activation_fn(pre)
        return h, h
