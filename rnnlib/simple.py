"""``SimpleCell``: the Elman recurrence, the simplest cell with a carry."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from rnnlib.cell_base import RNNCellBase
from rnnlib.initializers import orthogonal
from rnnlib.linear import Dense


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
    residual: bool = False

    def layers(self, input_shape):
        return {
            "i": Dense("x", input_shape[-1], self.features, self.kernel_init, self.bias_init),
            "h": Dense("h", self.features, self.features, self.recurrent_kernel_init),
        }

    def update(self, h, a):
        pre = a["i"] + a["h"]
        h = self.activation_fn(pre + h if self.residual else pre)
        return h, h
