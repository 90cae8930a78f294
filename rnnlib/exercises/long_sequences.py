"""Checkers for the exercises of the chapter "Long sequences" (book/long_sequences.ipynb).

``check_chunked_rnn(fn)``: ``fn(rnn, variables, xs, chunk)`` runs a ``flax.linen.RNN`` built
with ``return_carry=True`` over ``xs`` ``(batch, time, channels)`` in chunks of ``chunk`` steps
(the last one shorter when ``time`` is not a multiple), passing the carry from chunk to chunk
with its gradient stopped, and returns the outputs ``(batch, time, features)``: the outputs
of one run over the whole sequence, and the gradient of truncated backpropagation.

``check_reset_scan(fn)``: ``fn(cell, variables, xs, done)`` runs a ``flax.linen`` cell over
``xs`` ``(batch, time, channels)`` with ``jax.lax.scan``, resetting the carry to the cell's
fresh carry before every step where ``done`` ``(batch, time)`` is true, and returns the
outputs ``(batch, time, features)``: each episode's outputs are those of running it alone.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from rnnlib.exercises._check import Feedback, attempt, compare, run_cases


def _inputs(seed, shape):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _chunks(rnn, variables, xs, chunk, *, stop=True, pass_carry=True):
    """The reference, and the mistakes it is told apart from: a Python loop over chunks."""
    carry, outputs = None, []
    for start in range(0, xs.shape[1], chunk):
        if carry is not None and stop:
            carry = jax.lax.stop_gradient(carry)
        initial = carry if pass_carry else None
        carry, ys = rnn.apply(variables, xs[:, start : start + chunk], initial_carry=initial)
        outputs.append(ys)
    return jnp.concatenate(outputs, axis=1)


def _sum_of_squares(fn, rnn, variables, xs, chunk):
    return jnp.sum(fn(rnn, variables, xs, chunk) ** 2)


def _run_and_grad(fn, rnn, variables, xs, chunk):
    """``fn``'s outputs and the gradient of the sum of their squares with respect to xs."""
    grad = jax.grad(lambda xs: _sum_of_squares(fn, rnn, variables, xs, chunk))(xs)
    return fn(rnn, variables, xs, chunk), grad


_outputs_and_input_grad = jax.jit(_run_and_grad, static_argnums=(0, 1, 4))


def _truncated(rnn, variables, xs, chunk):
    return _chunks(rnn, variables, xs, chunk)


def _not_stopped(rnn, variables, xs, chunk):
    return _chunks(rnn, variables, xs, chunk, stop=False)


def _not_passed(rnn, variables, xs, chunk):
    return _chunks(rnn, variables, xs, chunk, pass_carry=False)


@functools.partial(jax.jit, static_argnums=(0, 3))
def _references(rnn, variables, xs, chunk):
    """The reference outputs, and the gradients of truncated and of full backpropagation,
    from one compiled program."""
    outputs, truncated = _run_and_grad(_truncated, rnn, variables, xs, chunk)
    _, full = _run_and_grad(_not_stopped, rnn, variables, xs, chunk)
    return outputs, truncated, full


@functools.cache
def _chunk_cases():
    """(name, (rnn, variables, xs, chunk), reference outputs, truncated grad, full grad)."""
    cells = [
        ("nn.LSTMCell(4), batch 2, 12 steps, chunks of 4", nn.LSTMCell(4), (2, 12, 3), 4),
        (
            "nn.GRUCell(3), batch 3, 10 steps, chunks of 4 (the last one has 2 steps)",
            nn.GRUCell(3),
            (3, 10, 2),
            4,
        ),
    ]
    cases = []
    for index, (name, cell, shape, chunk) in enumerate(cells):
        rnn = nn.RNN(cell, return_carry=True)
        xs = _inputs(300 + index, shape)
        variables = rnn.init(jax.random.key(index), xs)
        outputs, truncated, full = _references(rnn, variables, xs, chunk)
        cases.append((name, (rnn, variables, xs, chunk), outputs, truncated, full))
    return tuple(cases)


def _close(got, want) -> bool:
    return np.shape(got) == np.shape(want) and compare("", got, want) is None


def check_chunked_rnn(fn: Callable[..., Any]) -> Feedback:
    """Checks ``fn(rnn, variables, xs, chunk)``: the outputs of one whole run, and the
    gradient with respect to ``xs`` of truncated backpropagation."""

    def run(rnn, variables, xs, chunk):
        """Outputs and gradient compiled together; when that fails, the outputs alone."""
        try:
            return _outputs_and_input_grad(fn, rnn, variables, xs, chunk)
        except Exception:
            return fn(rnn, variables, xs, chunk), None

    def judge(got, rnn, variables, xs, chunk, want, truncated, full) -> str | None:
        got, grad = got
        if isinstance(got, (tuple, list)):
            return "return only the outputs (batch, time, features), not a tuple with the carry"
        batch, time = xs.shape[:2]
        shape = np.shape(got)
        if shape != np.shape(want):
            if shape[:1] == (batch,) and len(shape) == 3 and shape[1] < time:
                return (
                    f"the outputs have {shape[1]} steps; expected {time}: the last "
                    f"{time - shape[1]} steps are missing (the last chunk may be shorter "
                    "than `chunk`)"
                )
            return f"the outputs have shape {shape}; expected {np.shape(want)}"
        if not _close(got, want):
            if _close(got, _not_passed(rnn, variables, xs, chunk)):
                return (
                    "each chunk starts from a fresh carry: pass the carry the previous chunk "
                    "returned as initial_carry="
                )
            return compare("the outputs", got, want)
        if grad is None:
            grad, error = attempt(
                jax.grad(lambda xs: _sum_of_squares(fn, rnn, variables, xs, chunk)), xs
            )
            if error:
                return f"its gradient: {error}"
        if _close(grad, full):
            return (
                "the outputs are right, but the gradient flows across the chunks: this is "
                "full backpropagation; apply jax.lax.stop_gradient to the carry before "
                "passing it on"
            )
        return compare("the gradient with respect to xs", grad, truncated)

    cases = [(name, args, want, t, f) for name, args, want, t, f in _chunk_cases()]
    return run_cases("check_chunked_rnn", run, cases, judge)


def _reset_reference(cell, variables, xs, done, *, parts=None, after=False):
    """Resetting ``scan`` over time; ``parts`` resets only those carry entries (a mistake
    for a tuple carry); ``after`` resets after the step instead of before (another)."""
    fresh = cell.initialize_carry(jax.random.key(0), xs[:, 0].shape)

    def reset(carry, d):
        def where(index, f, c):
            if parts is not None and index not in parts:
                return c
            return jnp.where(d[:, None], f, c)

        if isinstance(carry, tuple):
            return tuple(where(i, f, c) for i, (f, c) in enumerate(zip(fresh, carry)))
        return where(0, fresh, carry)

    def step(carry, inputs):
        x, d = inputs
        if not after:
            carry = reset(carry, d)
        carry, y = cell.apply(variables, carry, x)
        if after:
            carry = reset(carry, d)
        return carry, y

    _, ys = jax.lax.scan(step, fresh, (xs.swapaxes(0, 1), done.swapaxes(0, 1)))
    return ys.swapaxes(0, 1)


def _episodes_alone(cell, variables, xs, done):
    """The truth the exercise states: every episode run alone from the fresh carry.

    Each episode becomes a row of its own, starting at step 0, zero-padded after its end;
    one ``nn.RNN`` call runs them all (a forward RNN's output at a step does not depend on
    later steps, so the padding changes nothing that is read back)."""
    episodes = []
    for row, d in enumerate(done):
        starts = [0, *(np.flatnonzero(d[1:]) + 1), len(d)]
        episodes += [(row, a, b) for a, b in zip(starts[:-1], starts[1:])]
    alone = np.zeros((len(episodes), *xs.shape[1:]), xs.dtype)
    for index, (row, a, b) in enumerate(episodes):
        alone[index, : b - a] = xs[row, a:b]
    ys = np.asarray(nn.RNN(cell).apply({"params": {"cell": variables["params"]}}, alone))
    want = np.zeros(xs.shape[:2] + ys.shape[2:], ys.dtype)
    for index, (row, a, b) in enumerate(episodes):
        want[row, a:b] = ys[index, : b - a]
    return want


@functools.cache
def _reset_cases():
    """(name, (cell, variables, xs, done), outputs of each episode run alone)."""
    specs = [
        ("nn.GRUCell(3), batch 2, 9 steps", nn.GRUCell(3), (2, 9, 2), 0),
        (
            "nn.LSTMCell(4), batch 3, 8 steps, done at step 0 in one row",
            nn.LSTMCell(4),
            (3, 8, 3),
            1,
        ),
    ]
    cases = []
    for index, (name, cell, shape, seed) in enumerate(specs):
        xs = _inputs(400 + seed, shape)
        rng = np.random.default_rng(500 + seed)
        done = rng.random(shape[:2]) < 0.3
        done[0, shape[1] // 2] = True  # at least one boundary inside a row
        if index == 1:
            done[1, 0] = True  # a reset before the very first step changes nothing
        carry = cell.initialize_carry(jax.random.key(0), xs[:, 0].shape)
        variables = cell.init(jax.random.key(10 + index), carry, xs[:, 0])
        cases.append(
            (name, (cell, variables, xs, done), _episodes_alone(cell, variables, xs, done))
        )
    return tuple(cases)


def check_reset_scan(fn: Callable[..., Any]) -> Feedback:
    """Checks ``fn(cell, variables, xs, done)`` against every episode run alone."""

    def judge(got, cell, variables, xs, done, want) -> str | None:
        if got is None:
            return f"it returned None; expected the outputs, an array of shape {want.shape}"
        try:
            got = np.asarray(got, dtype=np.float32)
        except Exception:
            return f"expected an array of shape {want.shape}; got {type(got).__name__}"
        batch, time = done.shape
        if got.shape != want.shape:
            if got.shape == (time, batch) + want.shape[2:]:
                return (
                    f"the outputs have shape {got.shape}, time first; expected "
                    f"{want.shape} = (batch, time, features): swap the axes back after the scan"
                )
            return f"the outputs have shape {got.shape}; expected {want.shape}"
        if _close(got, want):
            return None
        args = (cell, variables, xs)
        if _close(got, _reset_reference(*args, np.zeros_like(done))):
            return "the carry is never reset: these are the outputs of one run over each row"
        if _close(got, _reset_reference(*args, done, after=True)):
            return (
                "the carry is reset after the step that reads x[t]; done[t] marks the first "
                "step of a new episode, so reset before calling the cell"
            )
        fresh = cell.initialize_carry(jax.random.key(0), xs[:, 0].shape)
        if isinstance(fresh, tuple):
            for index in range(len(fresh)):
                if _close(got, _reset_reference(*args, done, parts=(index,))):
                    return (
                        f"only part {index} of the carry (a tuple of {len(fresh)} arrays) is "
                        "reset: reset every array of the carry, for example with jax.tree.map"
                    )
        return compare("the outputs", got, want)

    return run_cases("check_reset_scan", fn, _reset_cases(), judge)
