"""Checkers for the attention chapter: masked attention weights, and a sequence's log-probability.

``check_attend(fn)`` runs ``fn(query, states, mask)`` on a few small batches and compares the
context and the weights it returns with dot-product attention done right: a softmax over the
source positions, padded positions given no weight. ``check_sequence_log_prob(fn)`` runs
``fn(step, carry, start, tokens)`` with a small untrained decoder and compares it with the total
log-probability that decoder gives the tokens under teacher forcing. Both name the usual mistakes
in words: a softmax along the wrong axis, a mask ignored or applied after the softmax, logits
summed instead of log-probabilities, the model's own predictions fed back instead of the tokens.
"""

from __future__ import annotations

import numpy as np

from rnnlib.exercises._check import Feedback, compare, run_cases
from rnnlib.exercises.encoder_decoder import _toy_decoder

__all__ = [
    "check_attend",
    "check_sequence_log_prob",
    "reference_attend",
    "reference_sequence_log_prob",
]


def _softmax(scores, axis=-1):
    shifted = scores - scores.max(axis=axis, keepdims=True)
    exp = np.exp(shifted)
    return exp / exp.sum(axis=axis, keepdims=True)


def _scores(query, states):
    """``(batch, source)`` dot products of each query with every state of its own example."""
    return np.einsum("bh,bsh->bs", query, states)


def reference_attend(query, states, mask):
    """Dot-product attention of one decoder step over the encoder's states, in NumPy.

    ``query`` is ``(batch, hidden)``, ``states`` is ``(batch, source, hidden)`` and ``mask`` is
    ``(batch, source)`` of bools, True where a source position holds a token. Returns the context
    ``(batch, hidden)`` and the weights ``(batch, source)``: a softmax of the scores over the
    source positions where ``mask`` is True, zero elsewhere.
    """
    query, states = np.asarray(query, np.float32), np.asarray(states, np.float32)
    scores = np.where(np.asarray(mask), _scores(query, states), -np.inf)
    weights = _softmax(scores).astype(np.float32)
    context = np.einsum("bs,bsh->bh", weights, states).astype(np.float32)
    return context, weights


# (name, batch, source positions, hidden, padded positions at the front of each example).
ATTEND_CASES = (
    ("batch 3, 5 positions, no padding", 3, 5, 4, (0, 0, 0)),
    ("batch 3, 6 positions, padded in front", 3, 6, 4, (2, 0, 3)),
)


def _attend_case(index, batch, source, hidden, padding):
    rng = np.random.default_rng(index)
    query = rng.normal(size=(batch, hidden)).astype(np.float32)
    states = rng.normal(size=(batch, source, hidden)).astype(np.float32)
    mask = np.arange(source)[None, :] >= np.asarray(padding)[:, None]
    return query, states, mask


def _attend_problem(got, query, states, mask):
    """One sentence naming what is wrong with ``(context, weights)``, or None."""
    want_context, want_weights = reference_attend(query, states, mask)
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        return f"attend should return two arrays, (context, weights); got {type(got).__name__}"
    try:
        context, weights = (np.asarray(part) for part in got)
    except Exception:
        return "the context and the weights should be arrays"
    if weights.shape == want_weights.shape[::-1] and weights.shape != want_weights.shape:
        return (
            f"the weights are shaped {weights.shape}, (source, batch); expected"
            f" {want_weights.shape}, (batch, source)"
        )
    problem = compare("the weights", weights, want_weights)
    if problem:
        return problem + _attend_mistake(weights, query, states, mask)
    return compare(
        "the context",
        context,
        want_context,
        lambda: ". The weights are right: the context is their weighted sum of the states",
    )


def _attend_mistake(weights, query, states, mask):
    """The usual mistake behind wrong weights, as a sentence to append, or ""."""
    scores = _scores(np.asarray(query, np.float32), np.asarray(states, np.float32))
    weights = weights.astype(np.float64)
    guesses = (
        (
            _softmax(np.where(mask, scores, -np.inf), axis=0),
            ". The softmax ran along the batch axis: each example's weights must sum to 1"
            " over its own source positions (axis -1)",
        ),
        (
            _softmax(scores),
            ". Padded positions get weight: scores where the mask is False must become"
            " -inf (or a large negative number) before the softmax",
        ),
        (
            _softmax(scores) * mask,
            ". The mask was applied after the softmax, so the weights no longer sum to 1;"
            " mask the scores before it",
        ),
        (
            np.where(mask, scores, 0.0),
            ". These are the scores themselves: attention weights are their softmax",
        ),
    )
    for guess, sentence in guesses:
        if np.allclose(weights, guess, atol=1e-5):
            return sentence
    return ""


def check_attend(fn) -> Feedback:
    """Checks ``fn(query, states, mask)``: dot-product attention with a padding mask.

    ``query`` is ``(batch, hidden)``, ``states`` ``(batch, source, hidden)`` and ``mask``
    ``(batch, source)`` of bools (True at real tokens). The answer must be ``(context,
    weights)``: ``weights`` ``(batch, source)``, the softmax over the source positions of the
    dot products ``query . state``, zero where ``mask`` is False; ``context`` ``(batch,
    hidden)``, the states summed with those weights.
    """
    cases = [
        (name, _attend_case(index, batch, source, hidden, padding))
        for index, (name, batch, source, hidden, padding) in enumerate(ATTEND_CASES)
    ]
    return run_cases("check_attend", fn, cases, _attend_problem)


def _log_softmax(logits):
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def _score(step, carry, start, tokens, feed="tokens", of="log_softmax"):
    """Teacher-forced scoring of ``tokens``, done right or wrong in one named way.

    ``feed`` is what each step reads after the first: ``"tokens"`` (the previous token, right),
    ``"unshifted"`` (the token it is scored on, with no start token), or ``"argmax"`` (the
    model's own prediction). ``of`` is what is summed: ``"log_softmax"`` (right), ``"logits"``.
    """
    tokens = np.asarray(tokens)
    batch, steps = tokens.shape
    reads = np.concatenate([np.full((batch, 1), start, np.int32), tokens[:, :-1]], axis=1)
    if feed == "unshifted":
        reads = tokens
    read = reads[:, 0]
    total = np.zeros(batch)
    for t in range(steps):
        carry, logits = step(carry, read)
        logits = np.asarray(logits, np.float64)
        values = _log_softmax(logits) if of == "log_softmax" else logits
        total += values[np.arange(batch), tokens[:, t]]
        if t + 1 < steps and feed == "argmax":
            read = logits.argmax(axis=-1).astype(np.int32)
        elif t + 1 < steps:
            read = reads[:, t + 1]
    return total.astype(np.float32)


def reference_sequence_log_prob(step, carry, start, tokens):
    """The total log-probability a decoder gives ``tokens`` (``(batch, steps)``), in NumPy.

    ``step(carry, tokens) -> (carry, logits)`` runs the decoder one step. The decoder reads the
    start token, then each token of ``tokens`` in turn (teacher forcing), and the result
    ``(batch,)`` sums the log-softmax of each step's logits at the token that follows.
    """
    return _score(step, carry, start, tokens)


# (name, batch, steps, start token). One batch size, so that the toy step compiles once.
SCORE_CASES = (("batch 3, 4 steps", 3, 4, 6), ("batch 3, 6 steps", 3, 6, 0))


def _score_problem(got, step, carry, start, tokens):
    """One sentence naming what is wrong with the returned log-probabilities, or None."""
    want = reference_sequence_log_prob(step, carry, start, tokens)
    try:
        got = np.asarray(got)
    except Exception:
        return f"the result should be an array shaped {want.shape}"
    if got.shape == tokens.shape:
        return (
            f"the result is shaped {got.shape}, one number per step; sum over the steps to get"
            f" one log-probability per sequence, {want.shape}"
        )
    if got.shape != want.shape:
        return compare("the log-probabilities", got, want)
    if got.dtype != want.dtype and np.issubdtype(got.dtype, np.floating):
        got = got.astype(want.dtype)

    def mistake():
        guesses = (
            (want / tokens.shape[1], ". These are the mean over the steps, not the sum"),
            (np.exp(want), ". These are probabilities, not log-probabilities"),
            (
                _score(step, carry, start, tokens, of="logits"),
                ". These sum the logits: take jax.nn.log_softmax of them first",
            ),
            (
                _score(step, carry, start, tokens, feed="argmax"),
                ". Each step read its own argmax (greedy decoding) instead of the given token",
            ),
            (
                _score(step, carry, start, tokens, feed="unshifted"),
                ". The steps read the tokens unshifted: the first step must read the start"
                " token, and step t the token t - 1",
            ),
        )
        for guess, sentence in guesses:
            if np.allclose(guess, 0.0, atol=1e-3):  # too small to tell from a stub's zeros
                continue
            if np.allclose(got, guess, rtol=1e-4, atol=1e-4):
                return sentence
        return ""

    return compare("the log-probabilities", got, want, mistake)


def check_sequence_log_prob(fn) -> Feedback:
    """Checks ``fn(step, carry, start, tokens)``: the log-probability of given token sequences.

    ``step(carry, tokens) -> (carry, logits)`` runs a decoder one step on ``(batch,)`` tokens;
    ``tokens`` is ``(batch, steps)`` int32. The answer must be ``(batch,)``: for each sequence,
    the sum over its steps of the log-softmax of the logits at its token, the decoder reading
    the start token first and then the sequence's own previous token.
    """
    cases = []
    for index, (name, batch, steps, start) in enumerate(SCORE_CASES):
        step, carry = _toy_decoder(index, batch)
        tokens = np.random.default_rng(10 + index).integers(0, 7, (batch, steps))
        cases.append((name, (step, carry, start, tokens.astype(np.int32))))
    return run_cases("check_sequence_log_prob", fn, cases, _score_problem)
