"""Checkers for the deep RNNs chapter: a stack with dropout between its layers, and the
mask of recurrent dropout (one per sequence, the same at every step)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from rnnlib.exercises._check import Feedback, attempt, case_problems, compare, run_cases
from rnnlib.lstm import LSTMCell
from rnnlib.rnn import RNN


class _RecordingDropout:
    """Stands in for dropout: its ``i``-th call zeroes a fixed pattern and doubles the rest
    (rate 0.5), and it remembers what it was given, so the checker can tell where it ran."""

    def __init__(self):
        self.inputs = []

    def __call__(self, y):
        y = jnp.asarray(y)
        index = len(self.inputs)
        self.inputs.append(y)
        keep = jax.random.bernoulli(jax.random.key(100 + index), 0.5, y.shape)
        return jnp.where(keep, 2.0 * y, 0.0)


def _layers(widths, in_width):
    layers = []
    for index, width in enumerate(widths):
        rnn = RNN(LSTMCell(width))
        x = jnp.zeros((2, 5, in_width))
        variables = rnn.init(jax.random.key(10 + index), x)
        layers.append(jax.jit(lambda x, rnn=rnn, variables=variables: rnn.apply(variables, x)))
        in_width = width
    return layers


def _stack_reference(x, layers, dropout):
    for index, layer in enumerate(layers):
        x = layer(x)
        if index < len(layers) - 1:
            x = dropout(x)
    return x


def check_stack(stack) -> Feedback:
    """Check ``stack(x, layers, dropout)``: the outputs of a deep RNN.

    ``layers`` is a list of functions, each mapping ``(batch, time, width)`` to the next
    width; ``dropout`` is a function that drops values of what it is given. Each layer
    reads the previous one's output, and dropout acts on the output of every layer but
    the last (as PyTorch's ``nn.LSTM(dropout=...)`` does).
    """
    x = jax.random.normal(jax.random.key(0), (2, 5, 3))
    cases = []
    for name, widths in [("one layer", (4,)), ("two layers", (6, 4)), ("three layers", (6, 6, 4))]:
        layers = _layers(widths, 3)
        want = _stack_reference(x, layers, _RecordingDropout())
        # Each attempt gets a dropout of its own, which records where it was called.
        cases.append((name, (x, layers, _RecordingDropout()), want))
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
    if inputs and inputs[0].shape == x.shape and bool(jnp.all(inputs[0] == x)):
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
    return [
        ("batch 4, 6 steps, 5 features, rate 0.5", (jax.random.key(1), 4, 6, 5, 0.5)),
        ("batch 3, 2 steps, 8 features, rate 0.25", (jax.random.key(2), 3, 2, 8, 0.25)),
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
        if batch > 1 and all(np.array_equal(got[0, b], got[0, 0]) for b in range(batch)):
            return "every sequence of the batch got the same mask; each sequence draws its own"
        again, _ = attempt(recurrent_mask, key, batch, steps, features, rate)
        if again is None or not np.array_equal(np.asarray(again), got):
            return (
                "two calls with the same key gave different masks; draw them from the key"
                " you are given"
            )
        return None

    cases = _mask_cases()
    problems = case_problems(recurrent_mask, cases, judge)
    # How often a unit is kept: only a large case tells 1 - rate from rate.
    key, rate = jax.random.key(3), 0.2
    big, error = attempt(recurrent_mask, key, 2000, 3, 16, rate)
    if error is None and np.shape(big) == (3, 2000, 16):
        kept = float(np.mean(np.asarray(big)[0]))
        if abs(kept - (1 - rate)) > 0.02:
            hint = " (you keep a unit with probability rate)" if abs(kept - rate) < 0.02 else ""
            problems.append(
                f"case 'batch 2000, rate 0.2': {kept:.0%} of the units are kept; expected "
                f"about {1 - rate:.0%}, since rate is the probability of dropping{hint}"
            )
    return Feedback("check_recurrent_mask", len(cases) + 1, tuple(problems))
