"""The layers a cell declares (dense, channels-last convolutions, parameters), and their maps.

Each layer says what it reads (``"x"``, the step's input, or ``"h"``, what the cell feeds back)
and how its parameters are made, under flax.linen's ``Dense`` and ``Conv`` names and shapes;
inputs are promoted as flax.linen does, so the same parameters give the same numbers.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax


class Dense(NamedTuple):
    """A dense layer that reads ``reads`` (``"x"`` or ``"h"``): ``kernel`` ``(in_features,
    features)``, and ``bias`` ``(features,)`` unless ``bias_init`` is None."""

    reads: str
    in_features: int
    features: int
    kernel_init: Callable[..., Any]
    bias_init: Callable[..., Any] | None = None

    def kernel_shape(self):
        return (self.in_features, self.features)

    def __call__(self, params, v, dtype=None):
        return affine(v, params["kernel"], params.get("bias"), dtype)


class Conv(NamedTuple):
    """A channels-last convolution that reads ``reads``: ``kernel`` ``(*kernel_size, in_features,
    features)``, and ``bias`` ``(features,)`` unless ``bias_init`` is None; ``padding``: ``'SAME'``,
    ``'VALID'`` or pairs. Every axis before ``(*signal, channels)`` is batch."""

    reads: str
    in_features: int
    features: int
    kernel_size: tuple[int, ...]
    strides: tuple[int, ...]
    padding: Any
    kernel_init: Callable[..., Any]
    bias_init: Callable[..., Any] | None = None

    def kernel_shape(self):
        return tuple(self.kernel_size) + (self.in_features, self.features)

    def __call__(self, params, v, dtype=None):
        batch = v.ndim - len(self.kernel_size) - 1
        kernel, bias = params["kernel"], params.get("bias")
        return conv(v, kernel, bias, self.strides, self.padding, batch, dtype)


class Param(NamedTuple):
    """A parameter array of ``shape``, made by ``init``, that ``update`` reads as it is."""

    shape: tuple[int, ...]
    init: Callable[..., Any]


def create(layers: dict, key, param_dtype, make=None) -> dict:
    """The parameters of ``layers``, each from its own split of ``key`` (split again for kernel and
    bias), each array made by ``make(init, key, shape, dtype)`` (default: by ``init``)."""
    make = make or (lambda init, key, shape, dtype: init(key, shape, dtype))
    params = {}
    for k, (name, layer) in zip(jax.random.split(key, len(layers)), layers.items()):
        if isinstance(layer, Param):
            params[name] = make(layer.init, k, tuple(layer.shape), param_dtype)
            continue
        k_kernel, k_bias = jax.random.split(k)
        params[name] = {
            "kernel": make(layer.kernel_init, k_kernel, layer.kernel_shape(), param_dtype)
        }
        if layer.bias_init is not None:
            params[name]["bias"] = make(layer.bias_init, k_bias, (layer.features,), param_dtype)
    return params


class Group(NamedTuple):
    """Layers computed as one: ``layer`` with ``params`` gives ``names``' outputs side by side."""

    names: tuple[str, ...]
    sizes: tuple[int, ...]
    layer: Any
    params: dict


def groups(layers: dict, params: dict, reads: str, join: bool) -> list[Group]:
    """The layers that read ``reads``, as groups: with ``join``, every dense layer in one (kernels
    and biases concatenated, a missing bias as zeros), one matmul for them all."""
    mine = {n: layer for n, layer in layers.items() if getattr(layer, "reads", "") == reads}
    dense = [n for n, layer in mine.items() if isinstance(layer, Dense)] if join else []
    dense = dense if len(dense) > 1 else []
    out = [Group((n,), (la.features,), la, params[n]) for n, la in mine.items() if n not in dense]
    if dense:
        kernels = [params[n]["kernel"] for n in dense]
        joined = {"kernel": jnp.concatenate(kernels, axis=-1)}
        if any("bias" in params[n] for n in dense):
            zeros = [jnp.zeros(k.shape[-1:], k.dtype) for k in kernels]
            biases = [params[n].get("bias", zero) for n, zero in zip(dense, zeros)]
            joined["bias"] = jnp.concatenate(biases, axis=-1)
        sizes = tuple(mine[n].features for n in dense)
        out.insert(0, Group(tuple(dense), sizes, mine[dense[0]], joined))
    return out


def run(groups: list[Group], v, dtype=None, bias: bool = True) -> list:
    """Each group applied to ``v`` (any leading axes); ``bias=False``: its derivative in ``v``."""
    return [g.layer(g.params if bias else {"kernel": g.params["kernel"]}, v, dtype) for g in groups]


def by_name(groups: list[Group], outs: list) -> dict:
    """The groups' outputs cut back into one array per layer name."""
    named = {}
    for g, y in zip(groups, outs):
        cuts = np.cumsum(g.sizes)[:-1].tolist()
        named.update(zip(g.names, jnp.split(y, cuts, axis=-1) if cuts else [y]))
    return named


def promote(*arrays, dtype=None):
    """Casts ``arrays`` (``None`` entries pass through) to ``dtype``, or to their common
    inexact dtype when ``dtype`` is None: integers are computed in float32."""
    if dtype is None:
        dtype = jnp.result_type(*[a for a in arrays if a is not None])
        if not jnp.issubdtype(dtype, jnp.inexact):
            dtype = jnp.promote_types(jnp.float32, dtype)
    return [None if a is None else jnp.asarray(a, dtype) for a in arrays]


def affine(x, kernel, bias=None, dtype=None):
    """``x @ kernel + bias`` over the last axis of ``x``, in the promoted dtype; the leading axes
    flattened into one (XLA:CPU runs a 2-D matmul far faster than a contraction over several)."""
    x, kernel, bias = promote(x, kernel, bias, dtype=dtype)
    y = x.reshape(math.prod(x.shape[:-1]), x.shape[-1]) @ kernel
    y = y.reshape(x.shape[:-1] + kernel.shape[-1:])
    return y if bias is None else y + bias


def conv_padding(padding, rank: int):
    """``padding`` as ``'SAME'``, ``'VALID'``, ``'CIRCULAR'``, ``'REFLECT'``, ``'CAUSAL'`` (1-D)
    or ``rank`` ``(low, high)`` pairs; an int means the same padding on both sides."""
    modes = ("SAME", "VALID", "CIRCULAR", "REFLECT") + (("CAUSAL",) if rank == 1 else ())
    if isinstance(padding, str) and padding.upper() in modes:
        return padding.upper()
    if isinstance(padding, int):
        return ((padding, padding),) * rank
    if isinstance(padding, Sequence) and not isinstance(padding, str) and len(padding) == rank:
        pairs = [
            (p, p) if isinstance(p, int) else tuple(p) if isinstance(p, Sequence) else ()
            for p in padding
        ]
        if all(len(p) == 2 and all(isinstance(n, int) for n in p) for p in pairs):
            return tuple(pairs)
    raise ValueError(
        f"padding must be one of {modes}, an int, or a sequence of {rank} ints or (low, high) "
        f"pairs (one per spatial dim); got {padding!r}."
    )


def conv(x, kernel, bias, strides, padding, num_batch_dims: int, dtype=None):
    """A channels-last convolution of ``x`` shaped ``(*batch, *signal, channels)``; any number
    of batch dims (none included) is flattened into one for ``lax.conv_general_dilated``."""
    rank, batch = kernel.ndim - 2, x.shape[:num_batch_dims]
    x = x.reshape((-1,) + x.shape[num_batch_dims:])
    if padding in ("CIRCULAR", "REFLECT"):
        pads = [(0, 0)] + [((k - 1) // 2, k // 2) for k in kernel.shape[:rank]] + [(0, 0)]
        x = jnp.pad(x, pads, mode="wrap" if padding == "CIRCULAR" else "reflect")
        padding = "VALID"
    elif padding == "CAUSAL":
        x = jnp.pad(x, [(0, 0), (kernel.shape[0] - 1, 0), (0, 0)])
        padding = "VALID"
    x, kernel, bias = promote(x, kernel, bias, dtype=dtype)
    spatial = tuple(range(1, rank + 1))
    spec = (0, rank + 1) + spatial
    numbers = lax.ConvDimensionNumbers(spec, (rank + 1, rank) + tuple(range(rank)), spec)
    y = lax.conv_general_dilated(x, kernel, tuple(strides), padding, dimension_numbers=numbers)
    y = y if bias is None else y + bias
    return y.reshape(batch + y.shape[1:])
