"""Episode resets in ``RNN``: the carry goes back to the initial carry before each flagged step.

The reference runs every episode on its own, a plain Python loop over its steps from the
initial carry (backwards for ``reverse``), in the loop and in the associative scan."""

import dataclasses
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


# -- the wrappers pass resets to their RNNs ---------------------------------------------------


@pytest.mark.parametrize("name, plan", [c for c in CASES if c[0] != "conv_lstm"])
def test_bidirectional_gives_each_episode_run_alone_in_each_direction(name, plan):
    """The forward direction runs each episode alone from its start, the backward one from
    its last valid step: both are the per-episode reference of a plain RNN."""
    cell, x, resets, lengths, _, carry0 = _setup(name)
    backward_cell = dataclasses.replace(cell)  # another object: its own parameters
    bi = rnnlib.Bidirectional(
        RNN(cell, plan=PLANS[plan]), RNN(backward_cell, plan=PLANS[plan]), return_carry=True
    )
    variables = bi.init(KEY, x)
    params = variables["params"]
    carries = (carry0, jax.tree_util.tree_map(lambda c: -c, carry0))
    (forward, backward), y = jax.jit(bi.apply)(
        variables, x, initial_carry=carries, seq_lengths=jnp.asarray(lengths), resets=resets
    )
    sides = [
        _reference(c, {"params": {"cell": params[n]["cell"]}}, x, resets, lengths, c0, rev)
        for c, n, c0, rev in [
            (cell, "forward_rnn", carries[0], False),
            (backward_cell, "backward_rnn", carries[1], True),
        ]
    ]
    terms = tolerance.recurrent_terms(cell, x.shape, steps=7)
    want_y = np.concatenate([sides[0][0], sides[1][0]], axis=-1)
    tolerance.assert_close(_valid(np.asarray(y), lengths), want_y, terms=terms)
    tolerance.assert_close((forward, backward), (sides[0][1], sides[1][1]), terms=terms)


def test_bidirectional_after_a_reset_is_a_fresh_run_of_the_rest():
    cell, x, _, _, _, _ = _setup("gru")
    bi = rnnlib.Bidirectional(RNN(cell), RNN(rnnlib.GRUCell(4)))
    variables = bi.init(KEY, x)
    resets = np.zeros(x.shape[:3], bool)
    resets[..., 4] = True
    y = bi.apply(variables, x, resets=resets)
    terms = tolerance.recurrent_terms(cell, x.shape, steps=7)
    tolerance.assert_close(y[:, :, 4:], bi.apply(variables, x[:, :, 4:]), terms=terms)
    tolerance.assert_close(y[:, :, :4], bi.apply(variables, x[:, :, :4]), terms=terms)
    assert not np.allclose(y, bi.apply(variables, x))  # the flags did change something


def _stack(plan):
    dropping = rnnlib.RecurrentDropoutCell(rnnlib.GRUCell(4), recurrent_rate=0.3)
    return rnnlib.StackedRNN(
        (
            RNN(rnnlib.LSTMCell(4), plan=plan),
            rnnlib.Bidirectional(RNN(rnnlib.GRUCell(2), plan=plan), RNN(rnnlib.GRUCell(2))),
            RNN(dropping, plan=plan),
            RNN(rnnlib.MinGRUCell(4), plan=plan),
        ),
        residual=(False, True, True, True),
    )


def test_stacked_rnn_gives_each_episode_run_alone_through_every_layer():
    """Each row's episodes, cut out and run through the stack one by one, give the stack's
    outputs where the flags start them, and the last one its final carries."""
    _, x, *_ = _setup("lstm")
    x = x[0, :2]  # two rows, (2, 7, 4): episodes of lengths 3, 2, 2 and 2, 3 (0 is padding)
    resets = np.zeros((2, 7), bool)
    resets[0, [3, 5]] = resets[1, 2] = True
    lengths = np.array([7, 5])
    stack = _stack(Plan())
    variables = stack.init(KEY, x)
    carries, y = stack.apply(
        variables,
        x,
        resets=resets,
        seq_lengths=jnp.asarray(lengths),
        return_carry=True,
        deterministic=True,
    )
    terms = 4 * tolerance.recurrent_terms(rnnlib.LSTMCell(4), x.shape, steps=7)
    for row in np.ndindex(resets.shape[:-1]):
        length = int(lengths[row])
        firsts = [0] + [t for t in range(1, length) if resets[row][t]]
        alone = []
        for first, end in zip(firsts, firsts[1:] + [length]):
            carry, want = stack.apply(
                variables, x[row][None, first:end], return_carry=True, deterministic=True
            )
            tolerance.assert_close(y[row][first:end], want[0], terms=terms)
            alone.append(jax.tree_util.tree_map(lambda c: c[0], carry))
        if not length:  # the initial carries: nothing to compare with a run of no steps
            continue
        got = jax.tree_util.tree_map(lambda c, row=row: c[row], carries)
        # Each layer's carry is its last episode's; the Bidirectional layer's backward
        # direction ends on the first episode, which it reads last.
        first, last = alone[0], alone[-1]
        tolerance.assert_close(got[1][1], first[1][1], terms=terms)
        tolerance.assert_close(
            (got[0], got[1][0], got[2:]), (last[0], last[1][0], last[2:]), terms=terms
        )


def test_stacked_rnn_after_a_reset_is_a_fresh_run_of_the_rest_with_the_same_dropout_masks():
    """With recurrent dropout on: the masks are drawn per sequence, the same for the whole
    run and for the rest alone, so the rest's outputs are the stack's from the reset on."""
    _, x, *_ = _setup("lstm")
    stack = _stack(Plan())
    variables = stack.init(KEY, x)
    resets = np.zeros(x.shape[:3], bool)
    resets[..., 4] = True
    rngs = {"dropout": jax.random.key(5)}
    y = stack.apply(variables, x, resets=resets, deterministic=False, rngs=rngs)
    rest = stack.apply(variables, x[:, :, 4:], deterministic=False, rngs=rngs)
    terms = 4 * tolerance.recurrent_terms(rnnlib.LSTMCell(4), x.shape, steps=7)
    tolerance.assert_close(y[:, :, 4:], rest, terms=terms)
    before = stack.apply(variables, x[:, :, :4], deterministic=False, rngs=rngs)
    tolerance.assert_close(y[:, :, :4], before, terms=terms)  # the episode before, alone too
    plain = stack.apply(variables, x, deterministic=False, rngs=rngs)
    assert not np.allclose(y[:, :, 4:], plain[:, :, 4:])


def test_stacked_rnn_refuses_resets_of_the_wrong_shape_naming_both_shapes():
    _, x, *_ = _setup("lstm")
    stack = _stack(Plan())
    variables = stack.init(KEY, x)
    with _raises(ValueError, "resets shaped (*batch, time)", "(2, 3, 7)", "got shape (2, 7)"):
        stack.apply(variables, x, resets=np.zeros((2, 7), bool), deterministic=True)
