"""The RG-LRU, the recurrence of Griffin and Hawk (De et al. 2024, arXiv 2402.19427).

Its parameters are laid out as those of ``recurrentgemma``'s ``RGLRU`` layer (the package Google
DeepMind publishes for those models), so variables pass between the two unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from rnnlib import linear
from rnnlib.linear import Param
from rnnlib.linear_rnn import LinearCellBase
from rnnlib.module import describe

GATES = ("input_gate", "a_gate")
# The largest slope the square root of the input normalisation passes back (recurrentgemma's):
# near 1 - a_t**2 = 0 the true slope grows without bound, and in bfloat16 it overflows.
MAX_SQRT_SLOPE = 1000.0


def ring_init(min_radius: float = 0.9, max_radius: float = 0.999):
    """An initializer of ``a_param`` that puts ``sigmoid(-a_param)``, the decay at
    ``r_t = 1 / c``, on ``[min_radius, max_radius]``, uniformly over the area of that ring."""

    def init(key, shape, dtype=jnp.float32):
        squared = jax.random.uniform(key, shape, minval=min_radius**2, maxval=max_radius**2)
        log_radius = 0.5 * jnp.log(squared)
        return jnp.log(jnp.expm1(-log_radius)).astype(dtype)  # softplus(a_param) = -log radius

    return init


class BlockDiagonal(NamedTuple):
    """A dense layer from ``features`` to ``features`` whose kernel is ``blocks`` square blocks on
    the diagonal: ``kernel`` ``(blocks, features / blocks, features / blocks)``, ``bias``
    ``(features,)`` unless ``bias_init`` is None. Block ``k`` maps the ``k``-th slice of the input's
    last axis to the ``k``-th slice of the output's."""

    reads: str
    features: int
    blocks: int
    kernel_init: Callable[..., Any]
    bias_init: Callable[..., Any] | None = None

    def kernel_shape(self):
        width = self.features // self.blocks
        return (self.blocks, width, width)

    def __call__(self, params, v, dtype=None):
        v, kernel, bias = linear.promote(v, params["kernel"], params.get("bias"), dtype=dtype)
        rows = v.reshape(-1, self.blocks, self.features // self.blocks)
        y = jnp.einsum("rki,kij->rkj", rows, kernel).reshape(v.shape[:-1] + (self.features,))
        return y if bias is None else y + bias


@jax.custom_jvp
def _sqrt(v):
    """``sqrt(v)``, whose derivative is capped at ``MAX_SQRT_SLOPE``."""
    return jnp.sqrt(v)


@_sqrt.defjvp
def _sqrt_jvp(primals, tangents):
    (v,), (dv,) = primals, tangents
    return jnp.sqrt(v), dv * 0.5 / jnp.sqrt(jnp.maximum(v, 0.25 / MAX_SQRT_SLOPE**2))


class RGLRUCell(LinearCellBase):
    r"""The real-gated linear recurrent unit of Griffin and Hawk; carry and output ``h``.

    Its input ``x_t`` and its state have the same width, ``features``. Two gates read the
    input, through block-diagonal layers (``num_heads`` blocks): the recurrence gate
    :math:`r_t` (layer ``a_gate``) and the input gate :math:`i_t` (layer ``input_gate``).

    .. math::

        r_t &= \sigma(x_t W_a + b_a), \qquad i_t = \sigma(x_t W_x + b_x) \\
        \log a_t &= -c\, r_t \odot \mathrm{softplus}(\texttt{a\_param}),
            \quad\text{that is}\quad a_t = \sigma(-\texttt{a\_param})^{c\, r_t} \\
        h_t &= a_t \odot h_{t-1} + \sqrt{1 - a_t^2} \odot (i_t \odot x_t)

    The paper writes :math:`a = \sigma(\Lambda)`: :math:`\Lambda` is ``-a_param``. The factor
    :math:`\sqrt{1 - a_t^2}` keeps :math:`h` at the scale of the input whatever the decay
    (:math:`1 - a_t^2` is computed as ``-expm1(2 log a_t)``, exact where :math:`a_t` is close to
    1; its square root passes back a slope of at most ``MAX_SQRT_SLOPE``, 1000, as in
    ``recurrentgemma``). ``coefficients`` returns :math:`(a_t, b_t)`; the step and the scan come
    from it (``rnnlib.LinearCellBase``). Example::

        rnn = RNN(RGLRUCell(features=8, num_heads=2), plan=Plan(scan="associative"))
        x = jnp.ones((2, 16, 8))                    # (batch, time, features)
        variables = rnn.init(jax.random.key(0), x)
        # params/cell: a_param (8,), input_gate and a_gate {w: (2, 4, 4), b: (2, 4)}
        y = rnn.apply(variables, x)                 # (2, 16, 8)

    Arguments:
        features: width of ``x_t`` and of ``h``.
        num_heads: diagonal blocks of ``W_a`` and ``W_x``; it must divide ``features``.
        c: the constant :math:`c` of the decay's exponent (8 in the paper).
        kernel_init: initializer of each gate's kernel ``w``, ``(num_heads, features /
            num_heads, features / num_heads)``.
        bias_init: initializer of the gates' biases.
        a_param_init: initializer of ``a_param``, ``(features,)``: by default
            :math:`\sigma(-\texttt{a\_param})` uniform over the ring of radii 0.9 to 0.999.
        dtype: dtype of the computation (default: promoted from inputs and parameters); in
            bfloat16 or float16 the recurrence still runs in float32 (``LinearCellBase``).
        param_dtype: dtype of the parameters, and of the initial carry unless narrower than
            float32 (the carry is float32 then).
        carry_init: initializer of ``h``, ``(*batch, features)``.

    The parameters are ``recurrentgemma``'s ``RGLRU(width=features, num_heads=num_heads)``'s:
    ``a_param``, and ``w`` and ``b`` (``(num_heads, features / num_heads)``) under ``input_gate``
    and ``a_gate``; with the same parameters the two give the same numbers (recurrentgemma
    1.0.1). One difference: at a position whose ``segment_pos`` is 0
    (a document's start) ``recurrentgemma`` drops the carry and skips the factor
    :math:`\sqrt{1 - a_t^2}`; this cell applies its equation at every step, from the carry it
    is given.
    """

    features: int
    num_heads: int = 1
    c: float = 8.0
    kernel_init: Callable[..., Any] = jax.nn.initializers.variance_scaling(1.0, "fan_in", "normal")
    bias_init: Callable[..., Any] = jax.nn.initializers.zeros
    a_param_init: Callable[..., Any] = ring_init(0.9, 0.999)

    # Its gates are block-diagonal maps of x: run step by step they are many small operations per
    # step. On a CPU the scan measured faster up to 32 rows (batch 8 to 32, H 32 and 256, T 256
    # to 16,384), and slower at 64, in running time; it compiles 3-7 times as long.
    cpu_scan_when = ((1, 32, 0, 256),)

    def __post_init__(self):
        super().__post_init__()
        c = self.c
        if isinstance(c, bool) or not isinstance(c, (int, float, np.number)) or not c > 0:
            raise ValueError(
                f"RGLRUCell needs c > 0, a number: the decay is sigmoid(-a_param) ** (c * r_t), "
                f"below 1 only for c > 0 (c <= 0 gives a decay of 1 or more, and h grows "
                f"without bound); got c={c!r}."
            )
        heads = self.num_heads
        if isinstance(heads, bool) or not isinstance(heads, (int, np.integer)) or heads < 1:
            raise TypeError(f"RGLRUCell needs num_heads, an int >= 1; got {heads!r}.")
        if self.features % heads:
            raise ValueError(
                f"RGLRUCell needs num_heads to divide features, so that each of its "
                f"block-diagonal gates has square blocks; got features={self.features}, "
                f"num_heads={heads}."
            )

    def layers(self, input_shape):
        if input_shape[-1] != self.features:
            raise ValueError(
                f"{describe(self)} expects inputs shaped (*batch, {self.features}): the RG-LRU "
                f"gates its input into h without projecting it, so the input has the state's "
                f"width ({self.features} channels); got shape {tuple(input_shape)}. Put a "
                "dense layer before it to change the width."
            )
        gate = BlockDiagonal("x", self.features, self.num_heads, self.kernel_init, self.bias_init)
        a_param = Param((self.features,), self.a_param_init)
        return {"a_param": a_param, "input_gate": gate, "a_gate": gate}

    def coefficients(self, a):
        x, a_param = a["x"], a["a_param"]  # in one dtype, float32 at least (LinearCellBase)
        log_a = -self.c * jax.nn.sigmoid(a["a_gate"]) * jax.nn.softplus(a_param)
        gated_x = jax.nn.sigmoid(a["input_gate"]) * x
        return jnp.exp(log_a), _sqrt(-jnp.expm1(2 * log_a)) * gated_x

    # The layers' parameters are {kernel, bias (features,)}; recurrentgemma's are {w, b} with
    # b shaped (num_heads, features / num_heads). The cell keeps them in recurrentgemma's layout.

    def create_params(self, key, input_shape) -> dict:
        return self._recurrentgemma_layout(super().create_params(key, input_shape))

    def param_shapes(self, input_shape) -> dict:
        return self._recurrentgemma_layout(super().param_shapes(input_shape))

    def bind(self, params: dict, input_shape, join: bool = False):
        layers = {
            name: {"kernel": p["w"], "bias": jnp.reshape(p["b"], (-1,))} if name in GATES else p
            for name, p in params.items()
        }
        return super().bind(layers, input_shape, join)

    def _recurrentgemma_layout(self, params: dict) -> dict:
        shape = (self.num_heads, self.features // self.num_heads)

        def gate(p):  # b: (features,) -> (num_heads, features / num_heads)
            b = p["bias"]
            if isinstance(b, jax.ShapeDtypeStruct):
                return {"w": p["kernel"], "b": jax.ShapeDtypeStruct(shape, b.dtype)}
            return {"w": p["kernel"], "b": jnp.reshape(b, shape)}

        return {name: gate(p) if name in GATES else p for name, p in params.items()}
