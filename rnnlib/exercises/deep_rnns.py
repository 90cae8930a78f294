"""Checkers for the deep RNNs chapter: a stack with dropout between its layers, the mask of
recurrent dropout (one per sequence, the same at every step), and the layer normalisation of
the layer-normalised LSTM.

They are built so that checking costs next to no compilation: the stack's layers and the
stand-in dropout are NumPy functions, made once per process together with the reference's
answers; the mask's cases share one shape, so an attempt compiles its random draw once; the
layer norm's inputs are NumPy arrays, and its reference is ``flax.linen.LayerNorm``.
"""

from __future__ import annotations

import functools

import jax
import numpy as np

from rnnlib.exercises._check import Feedback, attempt, compare, run_cases


class _RecordingDropout:
    """Stands in for dropout: its ``i``-th call zeroes a fixed pattern and doubles the rest
    (rate 0.5), and it remembers what it was given, so the checker can tell where it ran."""

    def __init__(self):
        self.inputs = []

    def __call__(self, y):
        y = np.asarray(y, dtype=np.float32)
        index = len(self.inputs)
        self.inputs.append(y)
        keep = np.random.default_rng(100 + index).random(y.shape) < 0.5
        return np.where(keep, 2.0 * y, 0.0).astype(np.float32)


class _Layer:
    """A stand-in recurrent layer, ``(batch, time, width_in) -> (batch, time, width)``:
    a running mean over time of ``tanh(x @ kernel)``, so that order and time both matter."""

    def __init__(self, kernel):
        self.kernel = kernel

    def __call__(self, x):
        y = np.tanh(np.asarray(x, dtype=np.float32) @ self.kernel)
        steps = np.arange(1, y.shape[-2] + 1, dtype=np.float32)[:, None]
        return (np.cumsum(y, axis=-2) / steps).astype(np.float32)

    def __repr__(self):
        width_in, width = self.kernel.shape
        return f"layer({width_in} -> {width})"


def _layers(widths, in_width):
    layers = []
    for index, width in enumerate(widths):
        rng = np.random.default_rng(10 + index)
        kernel = rng.normal(size=(in_width, width)) / np.sqrt(in_width)
        layers.append(_Layer(kernel.astype(np.float32)))
        in_width = width
    return layers


def _stack_reference(x, layers, dropout):
    for index, layer in enumerate(layers):
        x = layer(x)
        if index < len(layers) - 1:
            x = dropout(x)
    return x


@functools.cache
def _stack_cases():
    """``(name, x, layers, want)`` for stacks of one, two and three layers (made once)."""
    x = np.random.default_rng(0).normal(size=(2, 5, 3)).astype(np.float32)
    cases = []
    for name, widths in [("one layer", (4,)), ("two layers", (6, 4)), ("three layers", (6, 6, 4))]:
        layers = _layers(widths, 3)
        cases.append((name, x, tuple(layers), _stack_reference(x, layers, _RecordingDropout())))
    return tuple(cases)


def check_stack(stack) -> Feedback:
    """Check ``stack(x, layers, dropout)``: the outputs of a deep RNN.

    ``layers`` is a list of functions, each mapping ``(batch, time, width)`` to the next
    width; ``dropout`` is a function that drops values of what it is given. Each layer
    reads the previous one's output, and dropout acts on the output of every layer but
    the last (as PyTorch's ``nn.LSTM(dropout=...)`` does).
    """
    # Each attempt gets a dropout of its own, which records where it was called.
    cases = [
        (name, (x.copy(), list(layers), _RecordingDropout()), want)
        for name, x, layers, want in _stack_cases()
    ]
    return run_cases("check_stack", stack, cases, _judge_stack)


def _judge_stack(got, x, layers, dropout, want) -> str | None:
    calls = len(dropout.inputs)
    gaps = len(layers) - 1
    if calls != gaps:
        hint = _where_dropout_went(dropout.inputs, x, layers)
        return (
            f"dropout was called {calls} time(s); a stack of {len(layers)} layer(s) drops"
            f" {gaps} time(s), once between each two layers{hint}"
        )
    return compare("the output", got, want)


def _where_dropout_went(inputs, x, layers) -> str:
    if inputs and inputs[0].shape == x.shape and bool(np.all(inputs[0] == x)):
        return " (it was applied to the stack's input x: dropout goes after a layer, not before)"
    last_width = None
    if layers:
        probe = x
        for layer in layers:
            probe = layer(probe)
        last_width = probe.shape
    if inputs and last_width is not None and inputs[-1].shape == last_width:
        if len(inputs) >= len(layers):
            return (
                " (it was applied after the last layer too: the stack's output is not "
                "dropped, as in PyTorch's nn.LSTM(dropout=...))"
            )
    return ""


def _mask_cases():
    # One shape for both cases, so that an attempt compiles its random draw once; a large
    # batch, so that the fraction of units kept tells 1 - rate from rate.
    return [
        ("batch 2000, 3 steps, 16 features, rate 0.2", (jax.random.key(3), 2000, 3, 16, 0.2)),
        ("batch 2000, 3 steps, 16 features, rate 0.5", (jax.random.key(1), 2000, 3, 16, 0.5)),
    ]


def check_recurrent_mask(recurrent_mask) -> Feedback:
    """Check ``recurrent_mask(key, batch, steps, features, rate)``: booleans shaped
    ``(steps, batch, features)``, True where a unit of ``h`` is kept, with one mask per
    sequence that is the same at every step, and each unit kept with probability
    ``1 - rate``.
    """

    def judge(got, key, batch, steps, features, rate) -> str | None:
        got = np.asarray(got)
        if got.shape != (steps, batch, features):
            return (
                f"the mask has shape {got.shape}; expected {(steps, batch, features)}"
                " (steps, batch, features)"
            )
        if got.dtype != np.bool_:
            return f"the mask has dtype {got.dtype}; expected bool (True = kept)"
        changed = [t for t in range(1, steps) if not np.array_equal(got[t], got[0])]
        if changed:
            return (
                f"the mask at step {changed[0]} differs from step 0: recurrent dropout draws"
                " one mask per sequence and reuses it at every step, not a new mask every step"
            )
        if batch > 1 and bool(np.all(got[0] == got[0, :1])):
            return "every sequence of the batch got the same mask; each sequence draws its own"
        again, _ = attempt(recurrent_mask, key, batch, steps, features, rate)
        if again is None or not np.array_equal(np.asarray(again), got):
            return (
                "two calls with the same key gave different masks; draw them from the key"
                " you are given"
            )
        kept = float(np.mean(got[0]))
        if abs(kept - (1 - rate)) > 0.02:
            hint = " (you keep a unit with probability rate)" if abs(kept - rate) < 0.02 else ""
            return (
                f"{kept:.0%} of the units are kept; expected about {1 - rate:.0%}, since rate"
                f" is the probability of dropping{hint}"
            )
        return None

    return run_cases("check_recurrent_mask", recurrent_mask, _mask_cases(), judge)


# nn.LayerNorm's default epsilon, added to the variance inside the square root.
_EPSILON = 1e-6


@functools.cache
def _layer_norm_cases():
    """``(name, (z, scale, bias), want)``: one batch dim, several, and a vector of equal
    features; two shapes only, so that an attempt in jax.numpy compiles its ops twice."""
    import flax.linen as nn

    rng = np.random.default_rng(4)

    def draw(*shape):
        return rng.normal(size=shape).astype(np.float32)

    flat = 3.0 * draw(3, 8) + 1.0
    several = draw(2, 3, 5, 6)
    constant = draw(3, 8)
    constant[0] = 2.5  # variance 0: only epsilon keeps the division finite
    cases = [
        ("z (3, 8)", (flat, draw(8), draw(8))),
        ("z (2, 3, 5, 6): batch dims (2, 3), 5 steps", (several, draw(6), draw(6))),
        ("z (3, 8), whose first row is all 2.5", (constant, draw(8), draw(8))),
    ]
    norm = nn.LayerNorm(epsilon=_EPSILON, use_fast_variance=False)
    reference = jax.jit(norm.apply)  # compiled once per shape
    with_answers = []
    for name, (z, scale, bias) in cases:
        want = np.asarray(reference({"params": {"scale": scale, "bias": bias}}, z))
        with_answers.append((name, (z, scale, bias), want))
    return tuple(with_answers)


def _normalised(z, axis, ddof=0, center=True):
    """A usual way to get layer norm wrong, in float64: a chosen axis, ddof, no centering."""
    z = np.asarray(z, dtype=np.float64)
    mean = z.mean(axis=axis, keepdims=True)
    variance = z.var(axis=axis, keepdims=True, ddof=ddof)
    shifted = z - mean if center else z
    return shifted / np.sqrt(variance + _EPSILON)


def check_layer_norm(layer_norm) -> Feedback:
    """Check ``layer_norm(z, scale, bias)`` against ``flax.linen.LayerNorm()``.

    ``z`` is shaped ``(*batch, features)`` (any number of batch dims); ``scale`` and ``bias``
    are ``(features,)``. The attempt must return what ``nn.LayerNorm()`` returns with those
    parameters: each vector ``z[..., :]`` minus its mean over the features, divided by
    ``sqrt(variance + 1e-6)`` (the variance over the features, divided by their number),
    then multiplied by ``scale`` and shifted by ``bias``.
    """
    # Each attempt gets copies, so one that writes into its arguments spoils no later check.
    cases = [
        (name, tuple(array.copy() for array in arrays), want)
        for name, arrays, want in _layer_norm_cases()
    ]
    return run_cases("check_layer_norm", layer_norm, cases, _judge_layer_norm)


def _judge_layer_norm(got, z, scale, bias, want) -> str | None:
    try:
        got = np.asarray(got, dtype=np.float32)
    except (TypeError, ValueError):
        return f"the output should be an array shaped {want.shape}; got {type(got).__name__}"
    if got.shape == want.shape and np.isnan(got).any() and not np.isnan(want).any():
        row = tuple(int(i) for i in np.argwhere(np.isnan(got))[0][:-1])
        return (
            f"the output is nan at {list(row)}, where every feature of z is the same: its"
            " variance is 0, so add epsilon (1e-6) to the variance inside the square root"
        )
    return compare(
        "the output",
        got,
        want,
        explain=lambda: _layer_norm_mistake(got, z, scale, bias),
    )


def _layer_norm_mistake(got, z, scale, bias) -> str:
    """A guess at the mistake behind a wrong output, or ``""``."""
    features = z.ndim - 1
    mistakes = [
        (
            scale * _normalised(z, axis=0) + bias,
            ". This is z normalised over its first axis, across the batch: that is batch"
            " normalisation. Layer norm normalises each vector over its own features, the"
            " last axis (axis=-1)",
        ),
        (
            scale * _normalised(z, axis=None) + bias,
            ". This is z normalised over the whole array at once; layer norm normalises each"
            " vector z[..., :] over its own features (axis=-1, keepdims=True)",
        ),
        (
            scale * _normalised(z, axis=features, ddof=1) + bias,
            ". The variance here is divided by the number of features minus 1 (ddof=1);"
            " nn.LayerNorm divides by the number of features",
        ),
        (
            scale * _normalised(z, axis=features, center=False) + bias,
            ". This divides z by its spread without subtracting its mean first",
        ),
        (
            _normalised(z, axis=features),
            ". This is z normalised but neither multiplied by scale nor shifted by bias",
        ),
        (
            bias * _normalised(z, axis=features) + scale,
            ". scale and bias are swapped: the normalised z is multiplied by scale, then"
            " bias is added",
        ),
    ]
    for axis in range(1, features):  # a fixed axis that is the last only for 2-D inputs
        mistakes.append(
            (
                scale * _normalised(z, axis=axis) + bias,
                f". This is z normalised over axis {axis}, the last one only when z has one"
                " batch dim; the features are the last axis whatever the batch dims are"
                " (axis=-1)",
            )
        )
    for wrong, explanation in mistakes:
        if compare("", got, wrong.astype(np.float32)) is None:
            return explanation
    return ""
