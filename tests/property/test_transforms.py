"""rnnlib under jax.jit, jax.grad and jax.vmap, compared with eager rnnlib and with Flax."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import pytest

import rnnlib
from tests.parity_helpers import (
    CELLS_BY_ID,
    assert_matches_flax,
    assert_same_signature,
    assert_trees_close,
    flax_reference,
    jit_apply,
    jit_together,
    random_array,
    random_lengths,
    random_like,
    random_variables,
    sequence_input,
)
from tests.tolerance import recurrent_terms

TIME = 5


def _twin_rnns(cell_id, **fields):
    flax_cell, cell = CELLS_BY_ID[cell_id].twins()
    return nn.RNN(flax_cell, **fields), rnnlib.RNN(cell, **fields)


def _twin_bidirectionals(**fields):
    def build(lib):
        return lib.Bidirectional(lib.RNN(lib.LSTMCell(4)), lib.RNN(lib.GRUCell(3)), **fields)

    return build(nn), build(rnnlib)


def _lengths(batch_dims, minimum=1, seed=3):
    return random_lengths(seed, batch_dims, TIME, minimum=minimum)


def _loss(output):
    """A scalar that depends on every output and carry value, each one differently."""
    leaves = jax.tree_util.tree_leaves(output)
    return sum(jnp.sum(jnp.sin(leaf * (i + 1))) for i, leaf in enumerate(leaves))


# ---------------------------------------------------------------------------
# jit


@pytest.mark.parametrize("cell_id", ["LSTMCell", "ConvLSTMCell-1d"])
def test_jit_of_rnn_apply_matches_eager_and_flax(cell_id):
    case = CELLS_BY_ID[cell_id]
    flax_rnn, rnn = _twin_rnns(cell_id, return_carry=True, reverse=True, keep_order=True)
    x = sequence_input(0, (2,), TIME, case.feature_shape)
    variables = random_variables(flax_rnn, 1, x)
    lengths = _lengths((2,))

    jitted = jax.jit(lambda v, x, lengths: rnn.apply(v, x, seq_lengths=lengths))(
        variables, x, lengths
    )
    assert_matches_flax(jitted, rnn.apply(variables, x, seq_lengths=lengths))
    assert_matches_flax(jitted, jit_apply(flax_rnn, variables, x, seq_lengths=lengths))


def test_jit_of_init_gives_flax_tree():
    flax_rnn, rnn = _twin_rnns("GRUCell")
    x = sequence_input(0, (2,), TIME, (3,))
    variables = jax.jit(rnn.init)(jax.random.key(1), x)
    assert_same_signature(variables, jax.eval_shape(flax_rnn.init, jax.random.key(1), x))


@pytest.mark.parametrize(
    "batch_dims, reverse",
    [((), True), ((2,), False), ((2, 3), True)],
    ids=["no-batch-reverse", "batch-forward", "batch2x3-reverse"],
)
def test_seq_lengths_traced_under_jit_give_the_concrete_result(batch_dims, reverse):
    case = CELLS_BY_ID["LSTMCell"]
    flax_rnn, rnn = _twin_rnns("LSTMCell", return_carry=True, reverse=reverse, keep_order=True)
    x = sequence_input(0, batch_dims, TIME, case.feature_shape)
    variables = random_variables(flax_rnn, 1, x)

    traces = []

    @jax.jit
    def run(variables, x, lengths):
        traces.append(1)
        return rnn.apply(variables, x, seq_lengths=lengths)

    # One compiled program serves different lengths, zeros included.
    for seed, minimum in [(3, 1), (4, 0)]:
        lengths = _lengths(batch_dims, minimum=minimum, seed=seed)
        assert_matches_flax(
            run(variables, x, lengths), rnn.apply(variables, x, seq_lengths=lengths)
        )
    assert len(traces) == 1


def test_bidirectional_seq_lengths_traced_under_jit_give_the_concrete_result():
    flax_bi, bi = _twin_bidirectionals(return_carry=True)
    x = sequence_input(0, (2, 3), TIME, (3,))
    variables = random_variables(flax_bi, 1, x)
    lengths = _lengths((2, 3), minimum=0)
    run = jax.jit(lambda v, x, lengths: bi.apply(v, x, seq_lengths=lengths))
    assert_matches_flax(run(variables, x, lengths), bi.apply(variables, x, seq_lengths=lengths))


# ---------------------------------------------------------------------------
# grad


GRAD_GRID = [
    pytest.param("LSTMCell", (2,), {}, True, id="LSTMCell-batch-seq_lengths"),
    pytest.param(
        "GRUCell",
        (2, 3),
        {"reverse": True, "keep_order": True},
        True,
        id="GRUCell-batch2x3-keep_order-seq_lengths",
    ),
    pytest.param(
        "SimpleCell-residual", (), {"unroll": 3}, False, id="SimpleCell-residual-unroll-full"
    ),
    pytest.param(
        "ConvLSTMCell-1d", (2,), {"reverse": True}, True, id="ConvLSTMCell-1d-reverse-seq_lengths"
    ),
]


@pytest.mark.parametrize("cell_id, batch_dims, fields, with_lengths", GRAD_GRID)
def test_rnn_gradients_wrt_params_and_inputs_match_flax(cell_id, batch_dims, fields, with_lengths):
    case = CELLS_BY_ID[cell_id]
    flax_rnn, rnn = _twin_rnns(cell_id, return_carry=True, **fields)
    time_major = fields.get("time_major", False)
    x = sequence_input(0, batch_dims, TIME, case.feature_shape, time_major=time_major)
    variables = random_variables(flax_rnn, 1, x)
    options = {"seq_lengths": _lengths(batch_dims)} if with_lengths else {}

    def grads(run, variables, x):
        return jax.grad(lambda v, x: _loss(run(v, x)), argnums=(0, 1))(variables, x)

    def both(variables, x):
        return (
            grads(lambda v, x: rnn.apply(v, x, **options), variables, x),
            grads(
                lambda v, x: flax_reference(
                    flax_rnn, v, x, num_batch_dims=len(batch_dims), **options
                ),
                variables,
                x,
            ),
        )

    got, expected = jit_together(both, variables, x)
    terms = recurrent_terms(rnn.cell, x.shape, steps=TIME, gradient=True)
    assert_trees_close(got, expected, terms=terms)


def test_rnn_gradient_wrt_initial_carry_matches_flax():
    flax_rnn, rnn = _twin_rnns("LSTMCell", return_carry=True)
    x = sequence_input(0, (2,), TIME, (3,))
    variables = random_variables(flax_rnn, 1, x)
    carry = random_like(2, rnn.cell.initialize_carry(jax.random.key(0), (2, 3)))
    lengths = _lengths((2,))

    def grads(module):
        def loss(carry):
            return _loss(module.apply(variables, x, initial_carry=carry, seq_lengths=lengths))

        return jax.jit(jax.grad(loss))(carry)

    terms = recurrent_terms(rnn.cell, x.shape, steps=TIME, gradient=True)
    assert_trees_close(grads(rnn), grads(flax_rnn), terms=terms)


@pytest.mark.parametrize("batch_dims", [(2, 3)], ids=["batch2x3"])
def test_bidirectional_gradients_wrt_params_and_inputs_match_flax(batch_dims):
    flax_bi, bi = _twin_bidirectionals(return_carry=True)
    x = sequence_input(0, batch_dims, TIME, (3,))
    variables = random_variables(flax_bi, 1, x)
    lengths = _lengths(batch_dims)

    def grads(run, variables, x):
        return jax.grad(lambda v, x: _loss(run(v, x)), argnums=(0, 1))(variables, x)

    def both(variables, x):
        return (
            grads(lambda v, x: bi.apply(v, x, seq_lengths=lengths), variables, x),
            grads(
                lambda v, x: flax_reference(
                    flax_bi, v, x, num_batch_dims=len(batch_dims), seq_lengths=lengths
                ),
                variables,
                x,
            ),
        )

    got, expected = jit_together(both, variables, x)
    terms = recurrent_terms(bi.forward_rnn.cell, x.shape, steps=TIME, gradient=True)
    assert_trees_close(got, expected, terms=terms)


# ---------------------------------------------------------------------------
# vmap


@pytest.mark.parametrize(
    "cell_id, time_major",
    [("LSTMCell", True), ("ConvLSTMCell-1d", False)],
    ids=["LSTMCell-time_major", "ConvLSTMCell-1d-batch_major"],
)
def test_vmap_over_an_extra_batch_axis_equals_the_batched_call(cell_id, time_major):
    case = CELLS_BY_ID[cell_id]
    _, rnn = _twin_rnns(cell_id, return_carry=True, reverse=True, time_major=time_major)
    # Batch dims (3, 2): vmap maps over the first, the RNN sees the second.
    x = sequence_input(0, (3, 2), TIME, case.feature_shape, time_major=time_major)
    variables = rnn.init(jax.random.key(1), x)
    lengths = _lengths((3, 2), minimum=0)
    in_axis = 1 if time_major else 0
    out_axes = (0, in_axis)

    mapped = jax.vmap(
        lambda x, lengths: rnn.apply(variables, x, seq_lengths=lengths),
        in_axes=(in_axis, 0),
        out_axes=out_axes,
    )(x, lengths)
    assert_matches_flax(mapped, rnn.apply(variables, x, seq_lengths=lengths))


def test_vmap_over_an_extra_batch_axis_of_a_bidirectional_equals_the_batched_call():
    _, bi = _twin_bidirectionals(return_carry=True)
    x = sequence_input(0, (3, 2), TIME, (3,))
    variables = bi.init(jax.random.key(1), x)
    lengths = _lengths((3, 2), minimum=0)
    mapped = jax.vmap(lambda x, lengths: bi.apply(variables, x, seq_lengths=lengths))(x, lengths)
    assert_matches_flax(mapped, bi.apply(variables, x, seq_lengths=lengths))


def test_vmap_over_stacked_params_equals_applying_each_member():
    flax_rnn, rnn = _twin_rnns("GRUCell", return_carry=True)
    x = sequence_input(0, (2,), TIME, (3,))
    members = [random_variables(flax_rnn, seed, x) for seed in (1, 2, 3)]
    stacked = jax.tree_util.tree_map(lambda *leaves: jnp.stack(leaves), *members)
    lengths = _lengths((2,))
    mapped = jax.vmap(lambda v: rnn.apply(v, x, seq_lengths=lengths))(stacked)
    for i, member in enumerate(members):
        assert_matches_flax(
            jax.tree_util.tree_map(lambda leaf, i=i: leaf[i], mapped),
            jit_apply(flax_rnn, member, x, seq_lengths=lengths),
        )


@pytest.mark.parametrize("cell_id", ["GRUCell", "ConvLSTMCell-2d"])
def test_vmap_of_a_cell_step_equals_the_batched_step(cell_id):
    case = CELLS_BY_ID[cell_id]
    _, cell = case.twins()
    x = random_array(0, (3, 2, *case.feature_shape))  # two batch dims
    carry = random_like(1, cell.initialize_carry(jax.random.key(0), x.shape))
    variables = cell.init(jax.random.key(2), carry, x)
    mapped = jax.vmap(lambda c, x: cell.apply(variables, c, x))(carry, x)
    assert_matches_flax(mapped, cell.apply(variables, carry, x))
