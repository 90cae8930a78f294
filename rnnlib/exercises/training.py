"""Checker for the training chapter's exercise: a mean over the valid steps only."""

from __future__ import annotations

import functools

import jax.numpy as jnp
import numpy as np

from rnnlib.exercises._check import Feedback, attempt, compare, run_cases


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


# check_tagger_module: a bidirectional GRU tagger written as a flax.linen module.
HIDDEN = 4
TAGGER_INPUT = (3, 7, 2)  # (batch, time, channels)
TAGGER_LENGTHS = (7, 3, 5)


def _tagger_inputs():
    x = np.random.default_rng(5).standard_normal(TAGGER_INPUT).astype(np.float32)
    return x, np.array(TAGGER_LENGTHS)


def _reference_tagger():
    import flax.linen as nn

    class Reference(nn.Module):
        hidden: int

        @nn.compact
        def __call__(self, x, seq_lengths):
            both = nn.Bidirectional(
                nn.RNN(nn.GRUCell(self.hidden)), nn.RNN(nn.GRUCell(self.hidden))
            )
            return nn.Dense(1)(both(x, seq_lengths=seq_lengths))[..., 0]

    return Reference(hidden=HIDDEN)


def _size(tree) -> int:
    import jax

    return sum(int(np.prod(leaf.shape)) for leaf in jax.tree_util.tree_leaves(tree))


def _gru_size(channels: int, hidden: int) -> int:
    """Parameters of one flax.linen GRUCell: ir, iz, in with biases; hr, hz without; hn with."""
    return 3 * (channels * hidden + hidden) + 2 * hidden * hidden + hidden * hidden + hidden


def check_tagger_module(module_class) -> Feedback:
    """Checks ``module_class(hidden=4)``, a flax.linen tagger: ``(batch, time, channels)`` and
    ``seq_lengths`` in, one logit per step ``(batch, time)`` out, a bidirectional GRU inside.

    Checked in turn: the output's shape; the number of parameters against a reference (two
    ``nn.GRUCell(4)`` and ``nn.Dense(1)``); that changing padded input steps changes no valid
    logit; that a logit reads a later step (backward direction) and an earlier one (forward).
    """
    import flax.linen as nn
    import jax

    name, checks = "check_tagger_module", 5
    if isinstance(module_class, nn.Module):
        cls = type(module_class).__name__
        return Feedback(
            name,
            1,
            (
                f"pass the class {cls} itself, not an instance: the checker builds it as "
                f"{cls}(hidden={HIDDEN})",
            ),
        )
    if not (isinstance(module_class, type) and issubclass(module_class, nn.Module)):
        what = type(module_class).__name__
        return Feedback(name, 1, (f"pass a subclass of flax.linen.Module; got {what}",))
    module, error = attempt(module_class, hidden=HIDDEN)
    if error:
        hint = " (declare the field: hidden: int)" if "hidden" in error else ""
        return Feedback(
            name, 1, (f"building {module_class.__name__}(hidden={HIDDEN}): {error}{hint}",)
        )
    x, lengths = _tagger_inputs()
    variables, error = attempt(module.init, jax.random.key(0), x, lengths)
    if error:
        return Feedback(name, 1, (f"init(key, x, seq_lengths) with x {x.shape}: {error}",))
    run = jax.jit(module.apply)
    logits, error = attempt(run, variables, x, lengths)
    if error:
        return Feedback(name, 1, (f"apply(variables, x, seq_lengths): {error}",))
    problems = []
    shape, want_shape = np.shape(logits), TAGGER_INPUT[:2]
    if shape != want_shape:
        hint = " (drop the readout's last axis: [..., 0])" if shape == want_shape + (1,) else ""
        return Feedback(
            name,
            1,
            (f"the logits have shape {shape}; expected {want_shape} = (batch, time){hint}",),
        )
    got_size = _size(variables.get("params", {}))
    channels = TAGGER_INPUT[-1]
    want_size = _size(jax.eval_shape(_reference_tagger().init, jax.random.key(0), x, lengths))
    one_way = _gru_size(channels, HIDDEN) + HIDDEN + 1
    if got_size != want_size:
        detail = (
            f"{want_size}: two nn.GRUCell({HIDDEN}) on {channels} channels "
            f"({_gru_size(channels, HIDDEN)} each) and nn.Dense(1) on {2 * HIDDEN} features"
        )
        if got_size == one_way:
            detail += "; yours matches one direction only, with its readout"
        problems.append(f"the module has {got_size} parameters; expected {detail}")
    logits = np.asarray(logits)
    padded = np.arange(TAGGER_INPUT[1]) >= lengths[:, None]
    changed_padding = np.asarray(run(variables, np.where(padded[..., None], 5.0, x), lengths))
    valid = ~padded
    moved = np.abs(changed_padding - logits)[valid].max()
    if moved > 1e-5:
        problems.append(
            "changing only the padded steps changed logits at valid steps (by up to "
            f"{moved:.3g}): pass seq_lengths to nn.Bidirectional, so that the backward "
            "direction starts at each sequence's last valid step"
        )
    later, earlier = x.copy(), x.copy()
    later[0, 5] += 1.0
    earlier[0, 1] += 1.0
    reads_later = np.abs(np.asarray(run(variables, later, lengths))[0, 2] - logits[0, 2])
    reads_earlier = np.abs(np.asarray(run(variables, earlier, lengths))[0, 4] - logits[0, 4])
    if reads_later <= 1e-6:
        problems.append(
            "the logit at step 2 does not change when step 5 changes: a tagger of this kind "
            "needs a backward direction (nn.Bidirectional of two nn.RNN)"
        )
    if reads_earlier <= 1e-6:
        problems.append(
            "the logit at step 4 does not change when step 1 changes: the forward direction "
            "is missing"
        )
    return Feedback(name, checks, tuple(problems))
