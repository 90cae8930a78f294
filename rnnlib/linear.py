"""The affine maps inside every cell: dense layers and channels-last convolutions.

Parameters are created with the names and shapes flax.linen's ``Dense`` and
``Conv`` use (``{'kernel': (in, out), 'bias': (out,)}`` and
``{'kernel': (*kernel_size, in, out), 'bias': (out,)}``), and inputs are promoted
to a common dtype the same way, so given the same parameters the numbers match.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.custom_derivatives import SymbolicZero


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


def fused(params: dict, names: Sequence[str]):
    """Concatenates the kernels (and biases) of several dense layers along the output axis.

    One ``(in, k * features)`` matmul computes ``k`` gates at once; the cells split the
    result again with ``jnp.split``. Layers without a bias contribute zeros, so a fused
    bias exists whenever any of them has one. The concatenations are ``join_gates``.
    """
    kernel = join_gates([params[n]["kernel"] for n in names])
    if not any("bias" in params[n] for n in names):
        return kernel, None
    biases = []
    for n in names:
        layer = params[n]
        bias = layer.get("bias")
        biases.append(
            jnp.zeros(layer["kernel"].shape[-1:], layer["kernel"].dtype) if bias is None else bias
        )
    return kernel, join_gates(biases)


# On CPU, join_gates takes its derivative by matmuls while they cost at most this many
# multiply-adds; join_by_matmul says why.
JOIN_BY_MATMUL_MAX_MACS = 2**20


def join_by_matmul(shape, parts: int) -> bool:
    """Whether ``join_gates`` of ``parts`` arrays of ``shape`` differentiates by matmuls.

    Why: the gradient of a concatenation is one slice per part, and on XLA's CPU
    backend every slice at a different offset is a kernel of its own, compiled by LLVM
    in 10-20 ms (``per_gate_gradient`` tells the same story for the fused matmul's
    gradient). A matmul with a matrix of zeros and ones selects the same block, and
    XLA:CPU hands matmuls to a library, compiling nothing per offset. For an LSTM with
    batch 8 and 32 features, too small for ``per_gate_gradient``, that took the
    training step from 39 compiled kernels to 31 (flax.linen's: 26) and its compile
    time from about 855 to about 760 ms (flax.linen's: about 700), for the same running
    time; a GRU went from 33 kernels to 27.

    The library takes no matmul with a single row, column or summed term, so a 1-D
    part (a bias) is viewed as ``(2, features / 2)``, which needs an even number of
    at least 4 features; its matmuls are tiny. A kernel's matmuls cost ``parts *
    features`` multiply-adds per number of the joined array, where a slice copies it
    once, so kernels take them up to ``JOIN_BY_MATMUL_MAX_MACS`` multiply-adds in all
    (32 features, not 128). CPU only: GPUs and TPUs keep the slices.
    """
    if jax.default_backend() != "cpu":
        return False
    *rows, features = shape
    if not rows:
        return features >= 4 and features % 2 == 0
    rows = math.prod(rows)
    macs = parts * rows * features * parts * features
    return rows >= 2 and features >= 2 and macs <= JOIN_BY_MATMUL_MAX_MACS


def join_gates(parts: Sequence):
    """``jnp.concatenate(parts, axis=-1)``, differentiated by matmuls where that pays.

    The value is always the concatenation. For ``parts`` of one shape and dtype, where
    ``join_by_matmul`` says so, its derivative is taken by matmuls with constant
    0/1 matrices instead of slices: the same numbers, except that a non-finite number
    in one part of a cotangent spreads to the other parts as NaN (``inf * 0``).
    """
    parts = tuple(parts)
    alike = len({(p.shape, jnp.result_type(p)) for p in parts}) == 1
    if alike and join_by_matmul(parts[0].shape, len(parts)):
        return _join_by_matmul(parts)
    return jnp.concatenate(parts, axis=-1)


# The rule below is written in lax, not jnp: jnp's functions are jitted wrappers whose
# tracing cost, paid for every join of every cell, would eat into the compile time saved.


@jax.custom_jvp
def _join_by_matmul(parts):
    return lax.concatenate(parts, parts[0].ndim - 1)


def _join_by_matmul_jvp(primals, tangents):
    (parts,), (dparts,) = primals, tangents
    k = len(parts)
    terms = [_place(dp, g, k) for g, dp in enumerate(dparts) if not isinstance(dp, SymbolicZero)]
    joined = _join_by_matmul(parts)
    if not terms:
        return joined, lax.full_like(joined, 0)
    return joined, functools.reduce(lax.add, terms)


_join_by_matmul.defjvp(_join_by_matmul_jvp, symbolic_zeros=True)


def _place(part, g: int, k: int):
    """``part`` as block ``g`` of ``k`` along the last axis, zeros elsewhere, by one matmul."""
    n = part.shape[-1]
    if part.ndim == 1:
        # (2, n/2) rows: block g of the joined (2k, n/2) rows is rows 2g and 2g + 1.
        select = _selection(2 * k, 2, 2 * g, part.dtype)
        rows = lax.dot_general(select, lax.reshape(part, (2, n // 2)), _MATMUL, precision=_EXACT)
        return lax.reshape(rows, (k * n,))
    select = _selection(k * n, n, g * n, part.dtype).T
    dims = (((part.ndim - 1,), (0,)), ((), ()))
    return lax.dot_general(part, select, dims, precision=_EXACT)


_MATMUL = (((1,), (0,)), ((), ()))
# Full precision, so that multiplying by one and adding zeros leaves every number as it is.
_EXACT = lax.Precision.HIGHEST


@functools.lru_cache(maxsize=64)
def _selection(rows: int, columns: int, offset: int, dtype):
    """A ``(rows, columns)`` NumPy matrix of zeros with ones at ``(offset + j, j)``."""
    select = np.zeros((rows, columns), dtype)
    select[offset + np.arange(columns), np.arange(columns)] = 1
    select.flags.writeable = False
    return select


class GateLayers(NamedTuple):
    """Dense layers that read the same input, kept both fused and one per gate.

    ``kernel`` and ``bias`` are ``fused(params, names)``; ``kernels`` and ``biases``
    are the layers themselves (a bias is None where its layer has none). The fused
    pair computes the value in ``gates_affine``, which can take the derivative from
    the per-gate pair instead; ``separate_affines`` computes each gate from its own.
    Under ``jit`` whichever form goes unused is never computed.
    """

    kernel: Any
    bias: Any
    kernels: tuple
    biases: tuple


def gate_layers(params: dict, names: Sequence[str]) -> GateLayers:
    """The layers ``names`` of ``params``, fused and one by one."""
    kernel, bias = fused(params, names)
    return GateLayers(
        kernel,
        bias,
        tuple(params[n]["kernel"] for n in names),
        tuple(params[n].get("bias") for n in names),
    )


# On CPU, gates_affine takes its derivative gate by gate once rows x features (of one
# gate) reaches this; per_gate_gradient says why.
PER_GATE_GRADIENT_MIN_SIZE = 2**14


def per_gate_gradient(shape, features: int) -> bool:
    """Whether ``gates_affine`` over an input of ``shape`` differentiates gate by gate.

    Why: the fused matmul ``x @ concat(kernels)`` computes every gate at once, but its
    parameter gradient is one ``(in, k * features)`` array that XLA then cuts into
    ``k`` slices, one per layer, after the loop. On XLA's CPU backend every slice at a
    different offset is a kernel of its own, compiled by LLVM in 10-20 ms, while
    kernels that compute the same thing on the same shapes are compiled once: with one
    ``x.T @ d_gate`` per gate, the gradients need no slices at all. For a GRU with
    batch 64 and 256 features that took its training step from 43 compiled kernels to
    33, and its first call (trace, compile, run) from 1.07 to 0.97 of flax.linen's,
    for the same running time (and 4% less of it at batch 256 and 512 features). For
    smaller inputs the ``k`` matmuls and additions per step cost more than they save:
    a GRU trained about 1% slower at ``2**13``, 5-23% slower at ``2**12`` and about 30%
    slower at batch 8 and 32 features. So: on CPU, from ``rows * features >= 2**14``
    (``PER_GATE_GRADIENT_MIN_SIZE``), where ``rows`` is the product of every axis of
    ``shape`` but the last. GPUs and TPUs keep the fused gradient.
    """
    rows = math.prod(shape[:-1])
    return jax.default_backend() == "cpu" and rows * features >= PER_GATE_GRADIENT_MIN_SIZE


def gates_affine(x, layers: GateLayers, dtype=None, per_gate: bool | None = None):
    """``x @ layers.kernel + layers.bias``: every gate's affine map in one matmul.

    With ``per_gate``, the same value, but its derivative with respect to the layers
    is taken gate by gate (``x.T @ d_gate`` for each kernel) from ``layers.kernels``
    and ``layers.biases``, never through the fused arrays. ``None`` (the default)
    decides by ``per_gate_gradient(x.shape, features)``, which says when that pays.
    Either way the derivative with respect to ``x`` is one fused
    matmul, and derivatives of every order equal those of the fused map (the rule's
    own tangent is differentiable again, so Hessians come out right too).
    """
    if per_gate is None:
        per_gate = per_gate_gradient(x.shape, layers.kernels[0].shape[-1])
    if not per_gate:
        return affine(x, layers.kernel, layers.bias, dtype=dtype)
    return _per_gate_affine(x, layers.kernels, layers.biases, layers.kernel, layers.bias, dtype)


@functools.partial(jax.custom_jvp, nondiff_argnums=(5,))
def _per_gate_affine(x, kernels, biases, kernel, bias, dtype):
    # kernel and bias are fused(kernels, biases), computed once outside any loop; the
    # derivative rule below ignores their tangents and uses the per-gate ones, which
    # carry the same information.
    return affine(x, kernel, bias, dtype=dtype)


def _per_gate_affine_jvp(dtype, primals, tangents):
    x, kernels, biases, kernel, bias = primals
    dx, dkernels, dbiases, _, _ = tangents
    y = _per_gate_affine(x, kernels, biases, kernel, bias, dtype)
    terms = []
    if not isinstance(dx, SymbolicZero):
        # Written with the fused kernel as a plain input: differentiating this term
        # again reaches the kernel's real tangent (the concatenation of the gates').
        terms.append(affine(dx, kernel, dtype=dtype))
    gates = []
    for b, dk, db in zip(biases, dkernels, dbiases):
        gate = None
        if not isinstance(dk, SymbolicZero):
            gate = affine(x, dk, dtype=dtype)
        if b is not None and not isinstance(db, SymbolicZero):
            gate = db if gate is None else gate + db
        gates.append(gate)
    if any(g is not None for g in gates):
        shape = y.shape[:-1] + (kernels[0].shape[-1],)
        gates = [
            jnp.zeros(shape, y.dtype) if g is None else jnp.broadcast_to(g, shape) for g in gates
        ]
        terms.append(jnp.concatenate(gates, axis=-1))
    if not terms:
        return y, jnp.zeros_like(y)
    return y, sum(terms[1:], terms[0]).astype(y.dtype)


_per_gate_affine.defjvp(_per_gate_affine_jvp, symbolic_zeros=True)


def separate_affines(x, layers: GateLayers, dtype=None) -> tuple:
    """``x @ kernel + bias`` for each gate's own layer: one matmul per gate, no fusion."""
    return tuple(affine(x, k, b, dtype=dtype) for k, b in zip(layers.kernels, layers.biases))


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


def conv(x, kernel, bias, strides, padding, num_batch_dims: int, dtype=None):
    """A channels-last convolution of ``x`` shaped ``(*batch, *signal, channels)``.

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
    x, kernel, bias = promote(x, kernel, bias, dtype=dtype)
    strides = tuple(int(s) for s in strides)
    if isinstance(padding, str):
        padding = lax.padtype_to_pads(x.shape[1:-1], kernel.shape[:rank], strides, padding)
    padding = tuple((int(lo), int(hi)) for lo, hi in padding)
    if jax.default_backend() == "cpu":
        y = _conv_filter_grad_by_patches(x, kernel, strides, padding)
    else:
        y = _conv(x, kernel, strides, padding)
    if bias is not None:
        y = y + bias
    return y.reshape(batch + y.shape[1:])


def _conv(x, kernel, strides, padding):
    """``lax.conv_general_dilated`` for ``(N, *signal, C)`` inputs and ``(*window, C, O)`` kernels."""
    rank = kernel.ndim - 2
    spatial = tuple(range(1, rank + 1))
    numbers = lax.ConvDimensionNumbers(
        lhs_spec=(0, rank + 1) + spatial,
        rhs_spec=(rank + 1, rank) + tuple(range(rank)),
        out_spec=(0, rank + 1) + spatial,
    )
    return lax.conv_general_dilated(x, kernel, strides, padding, dimension_numbers=numbers)


def _patches(x, window, strides, padding):
    """Every window of ``x`` ``(N, *signal, C)`` as one row: ``(N, *out_signal, prod(window) * C)``.

    The row holds the window's positions in row-major order, channels fastest, which is
    the order of a ``(*window, C, O)`` kernel reshaped to ``(prod(window) * C, O)``; so
    ``_patches(x, ...) @ kernel.reshape(-1, O)`` is the convolution.
    """
    x = jnp.pad(x, ((0, 0),) + padding + ((0, 0),))
    out = [(n - k) // s + 1 for n, k, s in zip(x.shape[1:-1], window, strides)]
    columns = []
    for offset in itertools.product(*(range(k) for k in window)):
        limit = [o + s * (n - 1) + 1 for o, s, n in zip(offset, strides, out)]
        columns.append(
            lax.slice(x, (0, *offset, 0), (x.shape[0], *limit, x.shape[-1]), (1, *strides, 1))
        )
    return jnp.concatenate(columns, axis=-1)


@functools.partial(jax.custom_jvp, nondiff_argnums=(2, 3))
def _conv_filter_grad_by_patches(x, kernel, strides, padding):
    """``_conv``, with the kernel's derivative taken as a matmul over the input's patches.

    Why: on XLA's CPU backend the gradient of a convolution with respect to its kernel,
    inside the ``while`` loop of a scan, measured several times slower than everything
    else in a ConvLSTM's training step (a 32x32 ConvLSTM trained about 7x faster with
    this rule, ``benchmarks/``). Written as ``patches(x) @ kernel`` the same derivative is
    one matmul, which the CPU runs well. The value itself is still ``lax``'s convolution,
    and so is the derivative with respect to ``x``. ``conv`` uses this on CPU only: GPUs
    and TPUs have fast kernel-gradient convolutions, and the patches cost
    ``prod(window)`` times the input's memory in the backward pass.
    """
    return _conv(x, kernel, strides, padding)


def _conv_jvp(strides, padding, primals, tangents):
    x, kernel = primals
    dx, dkernel = tangents
    y = _conv(x, kernel, strides, padding)
    parts = []
    if not isinstance(dx, SymbolicZero):
        parts.append(_conv(dx, kernel, strides, padding))
    if not isinstance(dkernel, SymbolicZero):
        columns = _patches(x, kernel.shape[:-2], strides, padding)
        flat = dkernel.reshape(-1, dkernel.shape[-1])
        parts.append(lax.dot_general(columns, flat, (((columns.ndim - 1,), (0,)), ((), ()))))
    return y, sum(parts[1:], parts[0]) if parts else jnp.zeros_like(y)


_conv_filter_grad_by_patches.defjvp(_conv_jvp, symbolic_zeros=True)
