"""Long short-term memory cells: ``LSTMCell`` and its alias ``OptimizedLSTMCell``."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from rnnlib.cell_base import RNNCellBase, check_features
from rnnlib.linear import (
    DenseLayer,
    create_dense_layers,
    dense_layer_shapes,
    gate_layers,
    gates_affine,
    orthogonal,
    separate_affines,
)

_INPUT = ("ii", "if", "ig", "io")
_HIDDEN = ("hi", "hf", "hg", "ho")

# On CPU, LSTMCell computes its gates with one matmul each, instead of one fused matmul,
# when rows x features reaches this (LSTMCell.separate_gates says why).
SEPARATE_GATES_MIN_SIZE = 2**17


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
            ``(in_features, features)``.
        recurrent_kernel_init: initializer of the hidden kernels ``hi, hf, hg, ho``,
            each ``(features, features)``.
        bias_init: initializer of the biases, which live on the hidden side, ``(features,)``.
        dtype: dtype of the computation (default: promoted from inputs and parameters).
        param_dtype: dtype of the parameters and of the initial carry.
        carry_init: initializer of ``c`` and ``h``, each ``(*batch, features)``.

    All four gates are computed by one fused matmul per side, except on CPU for large
    inputs, where one matmul per gate measured faster (``separate_gates``); below that
    size, on CPU, from ``rows * features >= 2**14``, the hidden side's fused matmul is
    differentiated gate by gate (``rnnlib.linear.per_gate_gradient``). Either way the
    parameter tree holds the eight separate kernels Flax uses, so variables
    interchange, and the numbers are the same.
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

    def _written_param_shapes(self, input_shape):
        return dense_layer_shapes(self._layers(input_shape), self.param_dtype)

    def prepare(self, params):
        """The input side's and the hidden side's layers (``rnnlib.linear.GateLayers``),
        each both fused and per gate; the hidden side holds the biases.

        ``project_inputs`` and ``step`` use the fused arrays, except on CPU for large
        inputs (see ``separate_gates``); under ``jit`` the form that goes unused is
        never computed.
        """
        return gate_layers(params, _INPUT), gate_layers(params, _HIDDEN)

    def separate_gates(self, shape) -> bool:
        """Whether a matmul over an input of ``shape`` (features last) runs per gate.

        Per gate means four ``(rows, in) @ (in, features)`` matmuls instead of one
        ``(rows, in) @ (in, 4 * features)``, where ``rows`` is the product of every axis
        but the last. On XLA's CPU backend, in training, the per-gate form measured
        faster once ``rows * features`` reached ``2**17`` (``SEPARATE_GATES_MIN_SIZE``):
        2-6% at 512 features and batch 256, 7-8% at batch 512, 18% at 1024 features and
        batch 256. Around ``2**16`` the two were within 4% of each other, and below it
        the fused form won (at 256 features and batch 64 by 1% with 256 input features
        and by about 25% with 128; by 35-40% at 32 features and batch 8). In a
        micro-benchmark the difference came from the kernel gradient ``h.T @ d_gates``,
        which XLA:CPU computes more slowly for one wide kernel than for four narrow
        ones, at every step of the backward loop. GPUs and TPUs always get the fused
        form.
        """
        rows = math.prod(shape[:-1])
        return jax.default_backend() == "cpu" and rows * self.features >= SEPARATE_GATES_MIN_SIZE

    def project_inputs(self, weights, inputs):
        if self.separate_gates(inputs.shape):
            return separate_affines(inputs, weights[0], dtype=self.dtype)
        # Fused, and differentiated through the fused kernel even where the hidden side
        # is not: per gate, this side cost an LSTM with batch 64 and 256 features 3-4%
        # of its training time on the CPU, against 0.5% for the hidden side, which holds
        # most of the compile-time saving (38 compiled kernels with it alone, 34 with
        # both sides, 46 with neither; rnnlib.linear.per_gate_gradient says why).
        return gates_affine(inputs, weights[0], dtype=self.dtype, per_gate=False)

    def step(self, weights, carry, projected):
        c, h = carry
        if self.separate_gates(h.shape):
            hidden = separate_affines(h, weights[1], dtype=self.dtype)
        else:
            hidden = gates_affine(h, weights[1], dtype=self.dtype)
        if isinstance(projected, tuple) or isinstance(hidden, tuple):
            # One side per gate; with hoisting the input side can differ from this one.
            i, f, g, o = (x + y for x, y in zip(_per_gate(projected), _per_gate(hidden)))
        else:
            i, f, g, o = jnp.split(projected + hidden, 4, axis=-1)
        i, f, o = self.gate_fn(i), self.gate_fn(f), self.gate_fn(o)
        c = f * c + i * self.activation_fn(g)
        h = o * self.activation_fn(c)
        return (c, h), h


def _per_gate(z):
    """The four gates' columns of ``z``: itself if already a tuple of them."""
    return z if isinstance(z, tuple) else jnp.split(z, 4, axis=-1)


@dataclasses.dataclass(frozen=True, repr=False)
class OptimizedLSTMCell(LSTMCell):
    """The same cell as ``LSTMCell``, with the same parameters and numbers.

    In Flax this class concatenates the gate kernels for speed while ``LSTMCell``
    runs eight separate matmuls. rnnlib's ``LSTMCell`` chooses between the two forms
    by backend and size (``LSTMCell.separate_gates``), so the two names are
    interchangeable; this one exists so Flax code ports unchanged.
    """
