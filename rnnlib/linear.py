"""The affine maps inside every cell: dense layers and channels-last convolutions.

Plain value code, differentiated by JAX's own rules; how the cells compute these maps
fast (fused gates, custom derivative rules on CPU) is ``rnnlib.fast``.

Parameters are created with the names and shapes flax.linen's ``Dense`` and
``Conv`` use (``{'kernel': (in, out), 'bias': (out,)}`` and
``{'kernel': (*kernel_size, in, out), 'bias': (out,)}``), and inputs are promoted
to a common dtype the same way, so given the same parameters the numbers match.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax


def orthogonal(scale: float = 1.0):
    """An orthogonal initializer, like ``jax.nn.initializers.orthogonal``, that also works
    for bfloat16 and float16 parameters: it draws in float32 and casts, because XLA's QR
    decomposition has no half-precision kernel on CPU (Flax's linen cells fail there)."""
    draw = jax.nn.initializers.orthogonal(scale)

    def init(key, shape, dtype=jnp.float32):
        if jnp.issubdtype(dtype, jnp.floating) and jnp.finfo(dtype).bits < 32:
            return draw(key, shape, jnp.float32).astype(dtype)
        return draw(key, shape, dtype)

    return init


def dense_params(key, in_features: int, features: int, kernel_init, bias_init, param_dtype):
    """``{'kernel': (in_features, features)}``, plus ``'bias': (features,)`` if ``bias_init``."""
    kernel_key, bias_key = jax.random.split(key)
    params = {"kernel": kernel_init(kernel_key, (in_features, features), param_dtype)}
    if bias_init is not None:
        params["bias"] = bias_init(bias_key, (features,), param_dtype)
    return params


class DenseLayer(NamedTuple):
    """One dense layer of a cell: its kernel is ``(in_features, features)``; it has a
    bias ``(features,)`` unless ``bias_init`` is None."""

    in_features: int
    features: int
    kernel_init: Callable[..., Any]
    bias_init: Callable[..., Any] | None


def create_dense_layers(key, layers: dict[str, DenseLayer], param_dtype) -> dict:
    """``{name: dense_params(...)}`` for every layer, each from its own split of ``key``
    (in the table's order)."""
    keys = jax.random.split(key, len(layers))
    return {
        name: dense_params(k, *layer, param_dtype) for k, (name, layer) in zip(keys, layers.items())
    }


def dense_layer_shapes(layers: dict[str, DenseLayer], param_dtype) -> dict:
    """The tree ``create_dense_layers`` makes, with ``jax.ShapeDtypeStruct`` leaves."""
    shapes = {}
    for name, layer in layers.items():
        kernel = (layer.in_features, layer.features)
        shapes[name] = {"kernel": jax.ShapeDtypeStruct(kernel, param_dtype)}
        if layer.bias_init is not None:
            shapes[name]["bias"] = jax.ShapeDtypeStruct((layer.features,), param_dtype)
    return shapes


def promote(*arrays, dtype=None):
    """Casts ``arrays`` (``None`` entries pass through) to ``dtype``, or to their common
    inexact dtype when ``dtype`` is None: integers are computed in float32."""
    if dtype is None:
        dtype = jnp.result_type(*[a for a in arrays if a is not None])
        if not jnp.issubdtype(dtype, jnp.inexact):
            dtype = jnp.promote_types(jnp.float32, dtype)
    return [None if a is None else jnp.asarray(a, dtype) for a in arrays]


def affine(x, kernel, bias=None, dtype=None):
    """``x @ kernel + bias`` over the last axis of ``x``, in the promoted dtype."""
    x, kernel, bias = promote(x, kernel, bias, dtype=dtype)
    y = lax.dot_general(x, kernel, (((x.ndim - 1,), (0,)), ((), ())))
    return y if bias is None else y + bias


def conv_padding(padding, rank: int):
    """Normalises ``padding`` to ``'SAME'``, ``'VALID'``, ``'CIRCULAR'``, ``'CAUSAL'`` or
    ``rank`` ``(low, high)`` pairs; an int means the same padding on both sides."""
    if isinstance(padding, str):
        mode = padding.upper()
        if mode not in ("SAME", "VALID", "CIRCULAR", "REFLECT", "CAUSAL"):
            raise ValueError(
                "padding must be 'SAME', 'VALID', 'CIRCULAR', 'REFLECT', 'CAUSAL', an int, or a "
                f"sequence of {rank} ints or (low, high) pairs; got {padding!r}."
            )
        if mode == "CAUSAL" and rank != 1:
            raise ValueError(f"padding='CAUSAL' is only defined for 1 spatial dim; got {rank}.")
        return mode
    if isinstance(padding, int):
        return ((padding, padding),) * rank
    if isinstance(padding, Sequence) and len(padding) == rank:
        pairs = []
        for p in padding:
            if isinstance(p, int):
                pairs.append((p, p))
            elif isinstance(p, Sequence) and len(p) == 2:
                pairs.append((int(p[0]), int(p[1])))
            else:
                break
        if len(pairs) == rank:
            return tuple(pairs)
    raise ValueError(
        f"padding must be a string, an int, or a sequence of {rank} ints or (low, high) "
        f"pairs (one per spatial dim); got {padding!r}."
    )


def conv(x, kernel, bias, strides, padding, num_batch_dims: int, dtype=None, convolve=None):
    """A channels-last convolution of ``x`` shaped ``(*batch, *signal, channels)``.

    ``convolve(x, kernel, strides, pads)`` computes it once the padding is explicit
    (default ``lax_conv``; ``rnnlib.fast.conv`` passes one with its own derivative).

    Any number of batch dims (including none) is flattened into one for
    ``lax.conv_general_dilated`` and restored afterwards.
    """
    rank = kernel.ndim - 2
    batch = x.shape[:num_batch_dims]
    x = x.reshape((-1,) + x.shape[num_batch_dims:])
    if padding in ("CIRCULAR", "REFLECT"):
        pads = [(0, 0)] + [((k - 1) // 2, k // 2) for k in kernel.shape[:rank]] + [(0, 0)]
        x = jnp.pad(x, pads, mode="wrap" if padding == "CIRCULAR" else "reflect")
        padding = "VALID"
    elif padding == "CAUSAL":
        x = jnp.pad(x, [(0, 0), (kernel.shape[0] - 1, 0), (0, 0)])
        padding = "VALID"
    convolve = lax_conv if convolve is None else convolve
    x, kernel, bias = promote(x, kernel, bias, dtype=dtype)
    strides = tuple(int(s) for s in strides)
    if isinstance(padding, str):
        padding = lax.padtype_to_pads(x.shape[1:-1], kernel.shape[:rank], strides, padding)
    padding = tuple((int(lo), int(hi)) for lo, hi in padding)
    y = convolve(x, kernel, strides, padding)
    if bias is not None:
        y = y + bias
    return y.reshape(batch + y.shape[1:])


def lax_conv(x, kernel, strides, padding):
    """``lax.conv_general_dilated`` for ``(N, *signal, C)`` inputs and ``(*window, C, O)`` kernels."""
    rank = kernel.ndim - 2
    spatial = tuple(range(1, rank + 1))
    numbers = lax.ConvDimensionNumbers(
        lhs_spec=(0, rank + 1) + spatial,
        rhs_spec=(rank + 1, rank) + tuple(range(rank)),
        out_spec=(0, rank + 1) + spatial,
    )
    return lax.conv_general_dilated(x, kernel, strides, padding, dimension_numbers=numbers)
