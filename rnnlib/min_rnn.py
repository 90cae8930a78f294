"""minGRU and minLSTM: a GRU and an LSTM cut down until their step is linear in the carry.

From Feng et al., "Were RNNs All We Needed?" (2024, arXiv 2410.01201), in the paper's log-space
form: each cell's coefficients are written as logarithms, which the associative scan combines
without underflow (``rnnlib.linear_rnn``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from rnnlib.linear import Dense
from rnnlib.linear_rnn import LinearCellBase


def g(v):
    """The paper's positive stand-in for a candidate ``v``: ``v + 1/2`` from 0 up, ``sigmoid(v)``
    below 0 (the two meet at 1/2)."""
    return jnp.where(v >= 0, v + 0.5, jax.nn.sigmoid(v))


def log_g(v):
    """``log(g(v))``, computed without forming ``g(v)``, so its gradient is finite everywhere."""
    return jnp.where(v >= 0, jnp.log(jax.nn.relu(v) + 0.5), -jax.nn.softplus(-v))


class MinGRUCell(LinearCellBase):
    r"""minGRU: a GRU whose update gate and candidate read only the input; carry and output ``h``.

    With :math:`k_t` and :math:`v_t` the outputs of the layers ``gate`` and ``candidate``
    (each ``x_t W + b``):

    .. math::

        z_t &= \sigma(k_t), \qquad \tilde h_t = g(v_t) \\
        h_t &= (1 - z_t) \odot h_{t-1} + z_t \odot \tilde h_t

    :math:`g` (``rnnlib.min_rnn.g``) keeps the candidate positive, so every coefficient has a
    logarithm: :math:`\log(1 - z_t) = -\mathrm{softplus}(k_t)` and
    :math:`\log(z_t \tilde h_t) = -\mathrm{softplus}(-k_t) + \log g(v_t)`. Those are
    ``coefficients``, in log space; the step and the scan both come from them
    (``rnnlib.LinearCellBase``). Example::

        rnn = RNN(MinGRUCell(features=4))
        x = jnp.ones((2, 16, 3))                         # (batch, time, channels)
        variables = rnn.init(jax.random.key(0), x)       # params/cell/{gate, candidate}
        y = rnn.apply(variables, x)                      # step by step, (2, 16, 4)
        parallel = RNN(MinGRUCell(4), plan=Plan(scan="associative"))
        y = parallel.apply(variables, x)                 # one associative scan, same numbers

    Arguments:
        features: width of ``h``.
        kernel_init: initializer of the kernels of ``gate`` and ``candidate``,
            ``(channels, features)``.
        bias_init: initializer of their biases, ``(features,)``.
        dtype: dtype of the computation (default: promoted from inputs and parameters); in
            bfloat16 or float16 the recurrence still runs in float32 (``LinearCellBase``).
        param_dtype: dtype of the parameters, and of the initial carry unless narrower than
            float32 (the carry is float32 then).
        carry_init: initializer of ``h``, ``(*batch, features)``.
        gate_bias_init: initializer of the gate's bias alone (default: ``bias_init``). A
            negative constant asks for a long memory from the start: :math:`z_t` is then
            small, and :math:`1 - z_t`, the share of ``h`` each step keeps, close to 1.

    The carry is ``h`` itself, of either sign: the paper's parallel code passes the initial
    state through :math:`g` first, which would make a run fed in chunks differ from one run
    over the whole sequence.
    """

    features: int
    kernel_init: Callable[..., Any] = jax.nn.initializers.lecun_normal()
    bias_init: Callable[..., Any] = jax.nn.initializers.zeros
    gate_bias_init: Callable[..., Any] | None = None

    log_space = True

    def layers(self, input_shape):
        n_in, n = input_shape[-1], self.features
        gate_bias = self.bias_init if self.gate_bias_init is None else self.gate_bias_init
        return {
            "gate": Dense("x", n_in, n, self.kernel_init, gate_bias),
            "candidate": Dense("x", n_in, n, self.kernel_init, self.bias_init),
        }

    def coefficients(self, a):
        k = a["gate"]
        return -jax.nn.softplus(k), -jax.nn.softplus(-k) + log_g(a["candidate"])


class MinLSTMCell(LinearCellBase):
    r"""minLSTM: an LSTM whose gates read only the input, normalised to add up to one, without
    an output gate; carry and output ``h``.

    With :math:`k^f_t, k^i_t, v_t` the outputs of the layers ``forget``, ``input`` and
    ``candidate`` (each ``x_t W + b``):

    .. math::

        f_t &= \sigma(k^f_t), \qquad i_t = \sigma(k^i_t), \qquad \tilde h_t = g(v_t) \\
        f'_t &= \frac{f_t}{f_t + i_t}, \qquad i'_t = \frac{i_t}{f_t + i_t} \\
        h_t &= f'_t \odot h_{t-1} + i'_t \odot \tilde h_t

    In logs, with :math:`d_t = \log i_t - \log f_t = \mathrm{softplus}(-k^f_t) -
    \mathrm{softplus}(-k^i_t)`: :math:`\log f'_t = -\mathrm{softplus}(d_t)` and
    :math:`\log i'_t = -\mathrm{softplus}(-d_t)`. Those, with :math:`\log g(v_t)`, are
    ``coefficients``, in log space, as for ``MinGRUCell``. Example::

        rnn = RNN(MinLSTMCell(features=4), plan=Plan(scan="associative"))
        variables = rnn.init(jax.random.key(0), x)   # params/cell/{forget, input, candidate}

    Arguments:
        features: width of ``h``.
        kernel_init: initializer of the three kernels, ``(channels, features)``.
        bias_init: initializer of the three biases, ``(features,)``.
        dtype: dtype of the computation (default: promoted from inputs and parameters); in
            bfloat16 or float16 the recurrence still runs in float32 (``LinearCellBase``).
        param_dtype: dtype of the parameters, and of the initial carry unless narrower than
            float32 (the carry is float32 then).
        carry_init: initializer of ``h``, ``(*batch, features)``.
    """

    features: int
    kernel_init: Callable[..., Any] = jax.nn.initializers.lecun_normal()
    bias_init: Callable[..., Any] = jax.nn.initializers.zeros

    log_space = True

    def layers(self, input_shape):
        dense = Dense("x", input_shape[-1], self.features, self.kernel_init, self.bias_init)
        return {"forget": dense, "input": dense, "candidate": dense}

    def coefficients(self, a):
        d = jax.nn.softplus(-a["forget"]) - jax.nn.softplus(-a["input"])
        return -jax.nn.softplus(d), -jax.nn.softplus(-d) + log_g(a["candidate"])
