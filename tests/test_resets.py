"""Episode resets in ``RNN``: the carry goes back to the initial carry before each flagged step.

The reference runs every episode on its own, a plain Python loop over its steps from the
initial carry (backwards for ``reverse``), in the loop and in the associative scan."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rnnlib
from rnnlib import RNN, Plan
from tests import tolerance

KEY = jax.random.key(0)
CELLS = {
    "lstm": (rnnlib.LSTMCell(4), (2, 3, 7, 4)),
    "gru": (rnnlib.GRUCell(4), (2, 3, 7, 4)),
    "simple": (rnnlib.SimpleCell(4), (2, 3, 7, 4)),
    "conv_lstm": (rnnlib.ConvLSTMCell(3, kernel_size=(3,)), (2, 3, 7, 5, 2)),
    "min_gru": (rnnlib.MinGRUCell(4), (2, 3, 7, 4)),
    "min_lstm": (rnnlib.MinLSTMCell(4), (2, 3, 7, 4)),
    "rglru": (rnnlib.RGLRUCell(4, num_heads=2), (2, 3, 7, 4)),
}
LINEAR = ("min_gru", "min_lstm", "rglru")
PLANS = {"loop": Plan(scan="sequential"), "default": Plan(), "scan": Plan(scan="associative")}
CASES = [(c, p) for c in CELLS for p in PLANS if p != "scan" or c in LINEAR]


def _raises(exc, *fragments):
    return pytest.raises(exc, match="(?s)" + "".join(f"(?=.*{re.escape(f)})" for f in fragments))


def _setup(name):
    cell, shape = CELLS[name]
    x = jax.random.normal(jax.random.key(1), shape)
    rng = np.random.default_rng(2)
    resets = rng.random(shape[:3]) < 0.3
    resets[0, 0, [3, 5]] = True
    lengths = np.array([[7, 5, 0], [6, 7, 3]])
    variables = RNN(cell).init(KEY, x)
    step_shape = shape[:2] + shape[3:]
    zeros = cell.initialize_carry(KEY, step_shape)
    leaves = jax.tree_util.tree_leaves(zeros)
    keys = iter(jax.random.split(jax.random.key(3), len(leaves)))
    carry0 = jax.tree_util.tree_map(lambda c: jax.random.normal(next(keys), c.shape), zeros)
    return cell, x, resets, lengths, variables, carry0


def _reference(cell, variables, x, resets, lengths, carry0, reverse=False):
    """Outputs in the input's order (zeros where padded) and each row's final carry: every
    episode of every row run alone, step by step, from that row's initial carry."""
    cell_vars = {"params": variables["params"]["cell"]}
    ys, finals = {}, {}
    for row in np.ndindex(resets.shape[:-1]):
        start = jax.tree_util.tree_map(lambda c, row=row: c[row], carry0)
        length = int(lengths[row])
        firsts = [0] + [t for t in range(1, length) if resets[row][t]]
        finals[row] = start
        for first, end in zip(firsts, firsts[1:] + [length]):
            carry = start
            steps = range(end - 1, first - 1, -1) if reverse else range(first, end)
            for t in steps:
                carry, ys[row + (t,)] = cell.apply(cell_vars, carry, x[row][t])
            if (first == 0) if reverse else (end == length):
                finals[row] = carry
    shape = next(iter(ys.values())).shape
    out = np.zeros(resets.shape + shape, np.float32)
    for where, y in ys.items():
        out[where] = y
    rows = list(np.ndindex(resets.shape[:-1]))
    final = jax.tree_util.tree_map(
        lambda *leaves: np.stack(leaves).reshape(resets.shape[:-1] + leaves[0].shape),
        *[finals[r] for r in rows],
    )
    return out, final


def _valid(y, lengths):
    t = np.arange(y.shape[2])
    mask = t < lengths[..., None]
    return np.where(mask.reshape(mask.shape + (1,) * (y.ndim - 3)), y, 0)


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("reverse", [False, True], ids=["forward", "reverse"])
@pytest.mark.parametrize("name, plan", CASES)
def test_resets_give_each_episode_run_alone_from_the_initial_carry(name, plan, reverse, jit):
    cell, x, resets, lengths, variables, carry0 = _setup(name)
    rnn = RNN(cell, plan=PLANS[plan], return_carry=True, reverse=reverse, keep_order=True)
    apply = jax.jit(rnn.apply) if jit else rnn.apply
    carry, y = apply(
        variables, x, initial_carry=carry0, seq_lengths=jnp.asarray(lengths), resets=resets
    )
    want_y, want_carry = _reference(cell, variables, x, resets, lengths, carry0, reverse)
    terms = tolerance.recurrent_terms(cell, x.shape, steps=7)
    tolerance.assert_close(_valid(np.asarray(y), lengths), want_y, terms=terms)
    tolerance.assert_close(carry, want_carry, terms=terms)


@pytest.mark.parametrize("time_major", [False, True], ids=["batch_major", "time_major"])
@pytest.mark.parametrize("name, plan", CASES)
def test_the_steps_after_a_reset_are_a_fresh_run_of_the_rest(name, plan, time_major):
    cell, x, _, _, variables, _ = _setup(name)
    resets = np.zeros(x.shape[:3], bool)
    resets[..., 4] = True
    rnn = RNN(cell, plan=PLANS[plan], time_major=time_major)
    if time_major:
        x, resets = jnp.moveaxis(x, 2, 0), np.moveaxis(resets, 2, 0)
    y = rnn.apply(variables, x, resets=resets)
    rest = x[4:] if time_major else x[:, :, 4:]
    fresh = rnn.apply(variables, rest)
    after = y[4:] if time_major else y[:, :, 4:]
    tolerance.assert_close(after, fresh, terms=tolerance.recurrent_terms(cell, x.shape, steps=7))
    before = y[:4] if time_major else y[:, :, :4]
    assert not np.allclose(after[: len(before)] if time_major else after[:, :, :3], 0)
    assert before.shape[:-1] != ()


@pytest.mark.parametrize("name, plan", CASES)
def test_no_gradient_flows_across_a_reset(name, plan):
    cell, x, _, _, variables, _ = _setup(name)
    resets = np.zeros(x.shape[:3], bool)
    resets[..., 4] = True
    rnn = RNN(cell, plan=PLANS[plan])

    def after(x, resets):  # the outputs from the reset on
        return jnp.sum(jnp.sin(rnn.apply(variables, x, resets=resets)[:, :, 4:]))

    grad = jax.grad(after)(x, resets)
    assert np.all(np.asarray(grad[:, :, :4]) == 0)  # exactly zero, not merely small
    assert np.all(np.abs(np.asarray(grad[:, :, 4:])).sum(axis=(0, 1)) > 0)
    # Without the reset the same outputs do depend on the earlier inputs.
    grad = jax.grad(after)(x, np.zeros_like(resets))
    assert np.abs(np.asarray(grad[:, :, :4])).sum() > 0


@pytest.mark.parametrize("name, plan", CASES)
def test_no_flags_or_flags_at_step_zero_only_change_no_bit(name, plan):
    cell, x, _, _, variables, _ = _setup(name)
    rnn = RNN(cell, plan=PLANS[plan], return_carry=True)
    plain = rnn.apply(variables, x)
    none = np.zeros(x.shape[:3], bool)
    first = none.copy()
    first[..., 0] = True
    # The same arithmetic: a select that keeps the carry, or picks the initial one at step 0.
    tolerance.assert_identical(rnn.apply(variables, x, resets=none), plain)
    tolerance.assert_identical(rnn.apply(variables, x, resets=first), plain)


def test_linen_rnn_passes_resets_through():
    cell, x, resets, lengths, variables, _ = _setup("lstm")
    from rnnlib import linen

    layer = linen.RNN(cell)
    linen_vars = layer.init(KEY, x)
    y = layer.apply(linen_vars, x, resets=resets)
    want = RNN(cell).apply({"params": {"cell": linen_vars["params"]["cell"]}}, x, resets=resets)
    tolerance.assert_identical(y, want)  # the same rnnlib.RNN runs underneath
    assert not np.allclose(y, layer.apply(linen_vars, x))


def test_resets_of_the_wrong_shape_are_a_value_error_naming_both_shapes():
    cell, x, *_ = _setup("gru")
    rnn = RNN(cell)
    variables = rnn.init(KEY, x)
    with _raises(ValueError, "resets shaped (*batch, time)", "(2, 3, 7)", "got shape (2, 3)"):
        rnn.apply(variables, x, resets=np.zeros((2, 3), bool))
    with _raises(ValueError, "resets shaped (time, *batch)", "(2, 3, 7)", "got shape (2, 3, 7)"):
        rnn.apply(
            variables,
            jnp.moveaxis(x, 2, 0)[:, :, :, :],
            resets=np.zeros((2, 3, 7), bool),
            time_major=True,
        )


@pytest.mark.parametrize("dtype", [np.int32, np.float32])
def test_resets_that_are_not_booleans_are_a_type_error_naming_the_dtype(dtype):
    cell, x, *_ = _setup("gru")
    rnn = RNN(cell)
    variables = rnn.init(KEY, x)
    with _raises(TypeError, "resets to be booleans", f"got dtype {np.dtype(dtype)}"):
        rnn.apply(variables, x, resets=np.zeros((2, 3, 7), dtype))
