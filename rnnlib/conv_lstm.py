"""``ConvLSTMCell``: an LSTM whose gates are convolutions over a spatial signal."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp

from rnnlib.cell_base import RNNCellBase
from rnnlib.linear import Conv, conv_padding
from rnnlib.module import describe


class ConvLSTMCell(RNNCellBase):
    r"""A convolutional LSTM cell; its carry is ``(c, h)`` and its output is ``h``.

    One step's input is ``(*batch, *signal, channels)``, one signal axis per ``kernel_size``
    entry; ``c`` and ``h`` are ``(*batch, *signal, features)``. With :math:`*` a convolution,

    .. math::

        i, g, f, o &= \operatorname{split}_4(W_{ih} * x + b_{ih} + W_{hh} * h + b_{hh}) \\
        c' &= \sigma(f + 1) \odot c + \sigma(i) \odot \tanh(g) \\
        h' &= \sigma(o) \odot \tanh(c')

    The ``+ 1`` biases the forget gate towards remembering at the start of training.

    Example::

        cell = ConvLSTMCell(features=6, kernel_size=(3, 3))
        x = jnp.ones((2, 8, 8, 3))                   # (batch, height, width, channels)
        carry = cell.initialize_carry(jax.random.key(0), x.shape)  # 2 x (2, 8, 8, 6)
        variables = cell.init(jax.random.key(1), carry, x)
        carry, y = cell.apply(variables, carry, x)   # y: (2, 8, 8, 6)

    Arguments:
        features: channels of ``c``, ``h`` and the output.
        kernel_size: the convolution window, a tuple of one int per spatial dim; its
            length is the number of signal axes, so ``(3,)`` is 1-D and an int is refused.
        strides: one int per spatial dim (default 1). Anything that shrinks the signal is rejected,
            because ``h`` is convolved again at the next step.
        padding: ``'SAME'`` (default), ``'VALID'``, ``'CIRCULAR'``, ``'REFLECT'``, ``'CAUSAL'``
            (1-D), an int, or one ``(low, high)`` pair per spatial dim.
        use_bias: whether the two convolutions have biases ``(4 * features,)``.
        dtype: dtype of the computation (default: promoted from inputs and parameters).
        param_dtype: dtype of the parameters and of the initial carry.
        carry_init: initializer of ``c`` and ``h``.

    Parameters: ``ih/kernel`` ``(*kernel_size, channels, 4 * features)`` and ``hh/kernel``
    ``(*kernel_size, features, 4 * features)``, plus their biases.
    """

    features: int
    kernel_size: Sequence[int]
    strides: Sequence[int] | None = None
    padding: Any = "SAME"
    use_bias: bool = True

    def __post_init__(self):
        super().__post_init__()
        kernel_size = self.kernel_size
        if isinstance(kernel_size, int):  # which rank? (linen's Conv refuses an int too)
            raise TypeError(
                "ConvLSTMCell needs kernel_size as a tuple, one int per spatial dim, since "
                "its length says how many axes of the input are signal: (3,) for a 1-D "
                "signal (*batch, time, length, channels), (3, 3) for images, (3, 3, 3) for "
                f"volumes; got the int {kernel_size!r}."
            )
        kernel_size = tuple(kernel_size)
        if not kernel_size or any(not isinstance(k, int) or k < 1 for k in kernel_size):
            raise ValueError(
                "ConvLSTMCell needs kernel_size with one positive int per spatial dim, such as "
                f"(3, 3) for images; got {self.kernel_size!r}."
            )
        object.__setattr__(self, "kernel_size", kernel_size)
        rank, strides = len(kernel_size), self.strides
        if strides is not None:
            strides = (strides,) * rank if isinstance(strides, int) else tuple(strides)
            if len(strides) != rank:
                raise ValueError(
                    f"ConvLSTMCell with kernel_size={kernel_size} needs {rank} strides; "
                    f"got {self.strides!r}."
                )
            object.__setattr__(self, "strides", strides)
        conv_padding(self.padding, rank)  # raises on a malformed padding

    @property
    def num_feature_axes(self) -> int:
        return len(self.kernel_size) + 1

    def initialize_carry(self, rng, input_shape):
        """``(c, h)``, each ``(*batch, *signal, features)`` for
        ``input_shape = (*batch, *signal, channels)``. ``rng`` is split in two."""
        self.check_input_shape(input_shape)
        signal = tuple(input_shape[-self.num_feature_axes : -1])
        hh, x = self.layers(signal + (self.features,))["hh"], jnp.zeros((1, *signal, self.features))
        out = jax.eval_shape(lambda: hh({"kernel": jnp.zeros(hh.kernel_shape())}, x)).shape[1:-1]
        if out != signal:
            raise ValueError(
                f"{describe(self)} maps a signal of size {signal} to {out}, but a ConvLSTM's carry "
                "must keep the input's spatial size: h is convolved with the same window at the "
                "next step and added to c. Use strides of 1 and padding='SAME' (or (low, high) "
                "pads with low + high = kernel_size - 1)."
            )
        make = super().initialize_carry  # one array, (*batch, *signal, features)
        return tuple(make(k, input_shape) for k in jax.random.split(rng))

    def layers(self, input_shape):
        rank = len(self.kernel_size)
        bias = jax.nn.initializers.zeros if self.use_bias else None
        padding = conv_padding(self.padding, rank)
        strides, init = self.strides or (1,) * rank, jax.nn.initializers.lecun_normal()
        n, k = 4 * self.features, self.kernel_size
        conv = Conv("x", input_shape[-1], n, k, strides, padding, init, bias)
        return {"ih": conv, "hh": conv._replace(reads="h", in_features=self.features)}

    def update(self, carry, a):
        c, _ = carry
        i, g, f, o = jnp.split(a["ih"] + a["hh"], 4, axis=-1)
        c = jax.nn.sigmoid(f + 1) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
        h = jax.nn.sigmoid(o) * jnp.tanh(c)
        return (c, h), h
