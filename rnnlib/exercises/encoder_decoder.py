"""Checkers for the encoder-decoder chapter: the teacher-forcing shift and greedy decoding.

``check_shift_right(fn)`` runs ``fn(targets, start)`` on a few batches of target tokens and
compares it with the decoder inputs of teacher forcing: the start token, then every target but
the last. ``check_greedy_decode(fn)`` runs ``fn(step, carry, start, steps)`` with a small
untrained decoder (a tanh recurrence and a readout) and compares the tokens it
returns with greedy decoding done right. Both name the usual mistakes in words: a shift the
wrong way, a forgotten start token, a prediction not fed back, a carry not passed on.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from rnnlib.exercises._check import Feedback, compare, run_cases

__all__ = ["check_shift_right", "check_greedy_decode", "reference_shift_right"]


def reference_shift_right(targets, start):
    """Decoder inputs for teacher forcing: ``start``, then ``targets`` without its last step.

    ``targets`` is ``(*batch, time)`` of ints; so is the result (a NumPy array: the checker
    compiles nothing of its own).
    """
    targets = np.asarray(targets)
    first = np.full(targets.shape[:-1] + (1,), start, targets.dtype)
    return np.concatenate([first, targets[..., :-1]], axis=-1)


# (name, targets shape, start token). Tokens are drawn from 0..9; start is never one of them.
SHIFT_CASES = (("batch 2, 3 steps", (2, 3), 12), ("batch 4, 5 steps", (4, 5), 11))


def _shift_problem(got, targets, start):
    """One sentence naming what is wrong with ``got`` as decoder inputs, or None."""
    want = np.asarray(reference_shift_right(targets, start))
    targets = np.asarray(targets)
    try:
        got = np.asarray(got)
    except Exception:
        return f"the result should be an array shaped {want.shape}"
    if got.shape == (want.shape[0], want.shape[1] + 1):
        return (
            f"the result has {got.shape[1]} steps, one more than the {want.shape[1]} targets."
            " Drop the last target: the decoder never reads it, because no prediction"
            " follows it"
        )
    if got.shape != want.shape:
        return compare("the decoder inputs", got, want)
    if np.array_equal(got, targets):
        return (
            "the decoder inputs are the targets themselves, not shifted, so at every step the"
            " decoder would read the token it is asked to predict"
        )
    if np.array_equal(got[:, :-1], targets[:, 1:]):
        return (
            "the targets are shifted left (step t reads target t + 1), the wrong way: step t"
            " must read target t - 1, and step 0 the start token"
        )
    if np.array_equal(got[:, 1:], targets[:, :-1]) and not np.all(got[:, 0] == start):
        return (
            f"the first step reads {got[:, 0].tolist()}, not the start token {start}: the"
            " decoder's first input must be the start token"
        )
    if np.array_equal(got[1:], want[:-1]) or np.array_equal(got[:-1], want[1:]):
        return "the shift went along the batch axis, not the time axis"
    return compare("the decoder inputs", got, want)


def check_shift_right(fn) -> Feedback:
    """Checks ``fn(targets, start)``: the decoder inputs for teacher forcing.

    ``targets`` is ``(batch, time)`` of int32 tokens; the answer must be ``(batch, time)``
    too: ``start`` at step 0, then ``targets[:, :-1]``.
    """
    cases = [
        (name, (np.random.default_rng(index).integers(0, 10, shape).astype(np.int32), start))
        for index, (name, shape, start) in enumerate(SHIFT_CASES)
    ]
    return run_cases("check_shift_right", fn, cases, _shift_problem)


VOCAB, HIDDEN = 7, 8


@jax.jit
def _toy_step(weights, carry, tokens):
    """One step of the toy decoder: one program for every case of the same batch size."""
    embedding, recurrent, readout = weights
    carry = jnp.tanh(embedding[tokens] + carry @ recurrent)
    return carry, carry @ readout


def _toy_decoder(seed, batch):
    """A small untrained decoder, ``step(carry, tokens) -> (carry, logits)``, and a carry.

    One tanh recurrence and a readout with random weights (drawn by NumPy: the checker
    compiles only the step, once per batch size). Its weights are large enough that both the
    token a step reads and the carry it receives change what it predicts.
    """
    rng = np.random.default_rng(seed)
    embedding = jnp.asarray(rng.normal(size=(VOCAB, HIDDEN)), jnp.float32)
    recurrent = jnp.asarray(2.0 * rng.normal(size=(HIDDEN, HIDDEN)) / HIDDEN**0.5, jnp.float32)
    readout = jnp.asarray(3.0 * rng.normal(size=(HIDDEN, VOCAB)), jnp.float32)
    weights = (embedding, recurrent, readout)

    def step(carry, tokens):
        return _toy_step(weights, carry, tokens)

    return step, jnp.asarray(2.0 * rng.normal(size=(batch, HIDDEN)), jnp.float32)


# (name, batch, steps, start token). One batch size, so that the step compiles once.
GREEDY_CASES = (("batch 3, 4 steps", 3, 4, 6), ("batch 3, 6 steps", 3, 6, 0))


def _decode(step, carry, start, steps, feed_back=True, thread=True):
    """Greedy decoding done right, or wrong in one named way (for the diagnosis).

    The loop's own arithmetic is NumPy's, so only ``step`` runs compiled.
    """
    first = carry
    tokens = np.full(jax.tree_util.tree_leaves(carry)[0].shape[:-1], start, np.int32)
    out = []
    for _ in range(steps):
        new_carry, logits = step(carry if thread else first, tokens)
        carry = new_carry
        prediction = np.asarray(logits).argmax(axis=-1).astype(np.int32)
        tokens = prediction if feed_back else tokens
        out.append(prediction)
    return np.stack(out, axis=-1)


def _recorder(step, calls):
    """``step``, recording each call's tokens, carry and predictions while they are concrete."""

    def recorded(carry, tokens):
        new_carry, logits = step(carry, tokens)
        try:  # inside jit or scan the values are abstract: then nothing is recorded
            tokens, carry, new_carry, logits = map(np.asarray, (tokens, carry, new_carry, logits))
            calls.append((tokens, carry, new_carry, logits.argmax(axis=-1)))
        except (jax.errors.TracerArrayConversionError, jax.errors.ConcretizationTypeError):
            calls.append(None)
        return new_carry, logits

    return recorded


def _calls_problem(calls, carry, start, steps):
    """What the recorded calls of a Python loop show, or None (or nothing recorded)."""
    if not calls:
        return (
            "step was never called; each token must be the argmax of the logits that a call"
            " of step returns"
        )
    if any(call is None for call in calls):  # traced (jit, scan): judged by the tokens alone
        return None
    if len(calls) != steps:
        return f"step was called {len(calls)} times; {steps} steps need {steps}"
    if not np.all(calls[0][0] == start):
        return (
            f"the first call fed the tokens {calls[0][0].tolist()}, not the start token"
            f" {start}: the decoder's first input must be the start token"
        )
    if not np.allclose(calls[0][1], carry):
        return "the first call did not receive the carry passed in (the encoder's)"
    for t in range(1, len(calls)):
        tokens, received, _, _ = calls[t]
        _, _, returned, predicted = calls[t - 1]
        if not np.array_equal(received, returned):
            again = " (it got the first carry again)" if np.array_equal(received, carry) else ""
            return (
                f"the carry is not threaded: call {t + 1} did not receive the carry that"
                f" call {t} returned{again}"
            )
        if not np.array_equal(tokens, predicted):
            what = "the start token again" if np.all(tokens == start) else f"{tokens.tolist()}"
            return (
                f"the prediction is not fed back: call {t + 1} read {what}, not the argmax of"
                f" call {t}'s logits, {predicted.tolist()}"
            )
    return None


def _output_problem(got, step, carry, start, steps):
    """One sentence naming what is wrong with the returned tokens, or None."""
    want = np.asarray(_decode(step, carry, start, steps))
    try:
        got = np.asarray(got)
    except Exception:
        return f"the result should be an array of tokens shaped {want.shape}"
    if got.shape == want.shape and np.array_equal(got, want):
        return None
    batch = want.shape[0]
    if got.shape == (batch, steps + 1) and np.all(got[:, 0] == start):
        return (
            f"the result has {steps + 1} tokens and starts with the start token; return only"
            f" the {steps} predictions"
        )
    if got.shape == (steps, batch) and steps != batch:
        return f"the result is (steps, batch) = {got.shape}; expected (batch, steps)"
    if (
        got.shape == want.shape
        and np.all(got[:, 0] == start)
        and np.array_equal(got[:, 1:], want[:, :-1])
    ):
        return (
            "the tokens are off by one: the result starts with the start token and drops the"
            " last prediction; return the predictions, not the decoder's inputs"
        )
    if got.shape == want.shape and not np.array_equal(got, want):
        wrong = {
            "the prediction is not fed back (every step reads the start token)": _decode(
                step, carry, start, steps, feed_back=False
            ),
            "the carry is not threaded (every step starts from the first carry)": _decode(
                step, carry, start, steps, thread=False
            ),
        }
        for what, tokens in wrong.items():
            if np.array_equal(got, np.asarray(tokens)):
                return what
    return compare("the tokens", got, want)


def check_greedy_decode(fn) -> Feedback:
    """Checks ``fn(step, carry, start, steps)``: greedy decoding.

    ``step(carry, tokens) -> (carry, logits)`` runs the decoder one step: ``tokens`` is
    ``(batch,)``, ``logits`` is ``(batch, vocab)``. The answer must be ``(batch, steps)`` int
    tokens: the argmax of each step's logits, each fed back as the next step's input, starting
    from the token ``start`` and the given ``carry``, which each step passes to the next.
    """
    cases = []
    for index, (name, batch, steps, start) in enumerate(GREEDY_CASES):
        step, carry = _toy_decoder(index, batch)
        calls = []  # what the attempt gives step and gets back, call by call
        cases.append((name, (_recorder(step, calls), carry, start, steps), step, calls))
    return run_cases("check_greedy_decode", fn, cases, _judge_decode)


def _judge_decode(got, recorded_step, carry, start, steps, step, calls) -> str | None:
    return _calls_problem(calls, carry, start, steps) or _output_problem(
        got, step, carry, start, steps
    )
