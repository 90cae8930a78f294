"""Checker for the training chapter's exercise: a mean over the valid steps only."""

from __future__ import annotations

import functools

import jax.numpy as jnp
import numpy as np

from rnnlib.exercises._check import Feedback, compare, run_cases


@functools.cache
def _cases():
    """The cases, drawn with NumPy once per process (a checker compiles nothing of its own)."""
    per_step = np.random.default_rng(0).uniform(0.0, 2.0, (3, 6)).astype(np.float32)
    steps = np.arange(6)[None, :]
    return (
        ("lengths [6, 2, 4]", (per_step, steps < np.array([6, 2, 4])[:, None])),
        ("no padding", (per_step, np.ones((3, 6), bool))),
        ("one sequence of length 1", (per_step[:1], steps < 1)),
    )


def check_masked_mean(masked_mean) -> Feedback:
    """Check ``masked_mean(per_step, mask)``: the mean of ``per_step`` over steps where ``mask``.

    ``per_step`` is ``(batch, time)`` (a loss at every step); ``mask`` is a bool array of the same
    shape, False at padded steps. Every valid step counts once, whichever sequence it is in.
    """
    return run_cases("check_masked_mean", masked_mean, _cases(), _judge)


def _judge(got, per_step, mask) -> str | None:
    want = np.float32(np.sum(per_step, where=mask, dtype=np.float64) / np.sum(mask))
    try:
        got_array = jnp.asarray(got, jnp.float32)
    except (TypeError, ValueError):  # None, a string, a dict: not a number at all
        return f"the mean should be one number; got {type(got).__name__}{_diagnosis(per_step, mask, got)}"
    return compare("the mean", got_array, want, explain=lambda: _diagnosis(per_step, mask, got))


def _diagnosis(per_step, mask, got) -> str:
    try:
        got = float(got)
    except (TypeError, ValueError):
        return " (return one number: the mean over every valid step of every sequence)"
    per_step = per_step.astype(np.float64)
    masked_sum = np.sum(per_step, where=mask)
    per_sequence = np.sum(per_step, axis=1, where=mask) / np.sum(mask, axis=1)
    suspects = {
        "the mean over every step, padding included": np.mean(per_step),
        "the masked sum divided by batch * time, so padding still counts": masked_sum
        / per_step.size,
        "the mean of each sequence's mean, so a short sequence's steps weigh more": np.mean(
            per_sequence
        ),
    }
    for what, value in suspects.items():
        if np.isclose(got, value, rtol=1e-5, atol=0.0):
            return f". That is {what}"
    return ""
